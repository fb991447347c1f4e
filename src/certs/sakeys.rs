//! The service-account token signing pair.

use super::*;

pub(crate) fn spki_bits(pem_bytes: &[u8]) -> Option<Vec<u8>> {
    use rustls_pki_types::SubjectPublicKeyInfoDer;
    let spki = SubjectPublicKeyInfoDer::from_pem_slice(pem_bytes).ok()?;
    let seq = der::read_exact(spki.as_ref(), der::SEQUENCE)?;
    let parts = der::children(seq.content)?;
    let bits = parts.get(1).filter(|t| t.tag == der::BIT_STRING)?;
    Some(bits.content.strip_prefix(&[0u8])?.to_vec())
}

/// sa.pub is only the public half of sa.key: written again from it, nothing is lost.
fn pub_does_not_fit(path: &Path, why: &str) -> Error {
    cfg_err(format!(
        "existing {} does not fit: {why}; remove it and run again: it is written anew from sa.key",
        path.display()
    ))
}

pub(super) fn service_account_keys(o: &CertsOptions, r: &mut Report) -> Result<()> {
    let key_path = o.dir.join("sa.key");
    let pub_path = o.dir.join("sa.pub");
    let (has_key, has_pub) = (key_path.exists(), pub_path.exists());
    if !o.force && has_key {
        let key = load_key(&read(&key_path)?)
            .map_err(|e| cfg_err(format!("{}: {e}", key_path.display())))?;
        r.add(
            &key_path,
            kept(&key_path, true)?,
            "service-account token signing key",
        );
        if has_pub {
            match spki_bits(&read(&pub_path)?) {
                Some(bits) if bits == key.public_key_raw() => {
                    r.add(&pub_path, Status::Kept, "service-account verification key")
                }
                Some(_) => {
                    return Err(pub_does_not_fit(
                        &pub_path,
                        &format!("it is not the public key of {}", key_path.display()),
                    ))
                }
                None => return Err(pub_does_not_fit(&pub_path, "no PEM PUBLIC KEY in it")),
            }
        } else {
            write_file(&pub_path, key.public_key_pem().as_bytes(), 0o644)?;
            r.add(
                &pub_path,
                Status::Created,
                "service-account verification key, from sa.key",
            );
        }
        return Ok(());
    }
    if !o.force && has_pub {
        return Err(cfg_err(format!(
            "{} exists but {} does not: put the key back, or remove {} to make a new pair (tokens signed with the old key stop working)",
            pub_path.display(),
            key_path.display(),
            pub_path.display()
        )));
    }
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| cfg_err(format!("cannot generate a key: {e}")))?;
    write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_file(&pub_path, key.public_key_pem().as_bytes(), 0o644)?;
    r.add(
        &key_path,
        Status::written(has_key),
        "service-account token signing key (ES256)",
    );
    r.add(
        &pub_path,
        Status::written(has_pub),
        "service-account verification key",
    );
    Ok(())
}
