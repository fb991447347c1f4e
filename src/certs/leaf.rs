//! Leaf certificates: signing, checking that a kept one still fits, serving pairs.

use super::*;

#[derive(Debug, Clone)]
pub(super) enum Usage {
    /// A serving certificate for these names.
    Server(Vec<String>),
    Client,
}

pub(super) struct Leaf {
    pub(super) cert_pem: String,
    pub(super) key_pem: String,
    pub(super) not_after: SystemTime,
}

pub(super) fn sign_leaf(
    ca: &Ca,
    cn: &str,
    org: Option<&str>,
    usage: &Usage,
    lifetime: u32,
    now: SystemTime,
) -> Result<Leaf> {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| cfg_err(format!("cannot generate a key: {e}")))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    if let Some(o) = org {
        params.distinguished_name.push(DnType::OrganizationName, o);
    }
    params.distinguished_name.push(DnType::CommonName, cn);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    match usage {
        Usage::Server(names) => {
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            params.subject_alt_names = names.iter().map(|n| san(n)).collect::<Result<_>>()?;
        }
        Usage::Client => {
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
    }
    params.use_authority_key_identifier_extension = ca.use_aki;
    params.serial_number = Some(serial());
    let until = (now + days(lifetime)).min(ca.not_after);
    set_validity(&mut params, now - BACKDATE, until)?;
    let cert = params
        .signed_by(&key, &ca.issuer)
        .map_err(|e| cfg_err(format!("cannot sign a certificate for {cn}: {e}")))?;
    let info = der::parse_cert(cert.der())
        .ok_or_else(|| cfg_err(format!("the new certificate for {cn} does not parse")))?;
    if info.issuer != ca.subject.as_slice() {
        return Err(cfg_err(format!(
            "{}: cannot reproduce this CA's subject name exactly, so certificates signed with it would not chain",
            ca.cert_path.display()
        )));
    }
    Ok(Leaf {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after: info.not_after,
    })
}

/// Does a kept certificate still fit: signed by the CA, valid now, right usage and names?
pub(super) fn verify_leaf(
    ca: &Ca,
    cert: &CertificateDer<'static>,
    usage: &Usage,
    now: SystemTime,
) -> std::result::Result<(), String> {
    use rustls::client::danger::ServerCertVerifier as _;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(ca.der.clone())
        .map_err(|e| format!("the CA certificate is not usable: {e}"))?;
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let at = UnixTime::since_unix_epoch(now.duration_since(UNIX_EPOCH).unwrap_or_default());
    match usage {
        Usage::Server(names) => {
            let v = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| e.to_string())?;
            for n in names {
                let sn = ServerName::try_from(n.as_str())
                    .map_err(|e| format!("{n:?}: {e}"))?
                    .to_owned();
                v.verify_server_cert(cert, &[], &sn, &[], at)
                    .map_err(|e| explain(ca, e, Some(n)))?;
            }
        }
        Usage::Client => {
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| e.to_string())?;
            v.verify_client_cert(cert, &[], at)
                .map_err(|e| explain(ca, e, None))?;
        }
    }
    Ok(())
}

/// Why a kept certificate does not verify, in words.
pub(super) fn explain(ca: &Ca, e: rustls::Error, name: Option<&str>) -> String {
    use rustls::CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer | C::BadSignature => {
                format!("it is not signed by {}", ca.cert_path.display())
            }
            C::Expired | C::ExpiredContext { .. } => "it has expired".to_string(),
            C::NotValidYet | C::NotValidYetContext { .. } => "it is not valid yet".to_string(),
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                format!("it does not cover {}", name.unwrap_or("the name asked for"))
            }
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => format!(
                "it is not a {} certificate",
                if name.is_some() { "serving" } else { "client" }
            ),
            other => format!("it does not verify: {other:?}"),
        },
        other => format!("it does not verify: {other}"),
    }
}

pub(super) fn pair_paths(dir: &Path, base: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{base}.crt")),
        dir.join(format!("{base}.key")),
    )
}

/// The fix for a file that no longer fits: replace that pair or kubeconfig alone with
/// `--renew`, never `--force` (which makes a new CA and service-account key and so stops every
/// certificate and token made with the old ones).
fn renew_hint(o: &CertsOptions, name: &str) -> String {
    format!(
        "replace it alone (the CA, the service-account key and the other files stay) with: {}",
        o.renew_command(name)
    )
}

pub(super) fn one_without_other(
    o: &CertsOptions,
    name: &str,
    have: &Path,
    missing: &Path,
) -> Error {
    cfg_err(format!(
        "{} exists but {} does not; {}",
        have.display(),
        missing.display(),
        renew_hint(o, name)
    ))
}

/// A kept file that does not fit; `name` is what `--renew` calls it.
pub(super) fn does_not_fit(o: &CertsOptions, name: &str, path: &Path, why: &str) -> Error {
    cfg_err(format!(
        "existing {} does not fit: {why}; {}",
        path.display(),
        renew_hint(o, name)
    ))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn serving_pair(
    o: &CertsOptions,
    ca: &Ca,
    r: &mut Report,
    base: &str,
    cn: &str,
    names: &[String],
    what: &str,
    now: SystemTime,
) -> Result<()> {
    let (crt, key) = pair_paths(&o.dir, base);
    let usage = Usage::Server(names.to_vec());
    let (has_crt, has_key) = (crt.exists(), key.exists());
    if !o.replaces(base) {
        let does_not_fit = |path: &Path, why: &str| does_not_fit(o, base, path, why);
        match (has_crt, has_key) {
            (true, true) => {
                let cert = first_cert(&read(&crt)?, &crt)?;
                let k = load_key(&read(&key)?)
                    .map_err(|e| cfg_err(format!("{}: {e}", key.display())))?;
                let info = der::parse_cert(&cert)
                    .ok_or_else(|| does_not_fit(&crt, "not a certificate edgekcm can read"))?;
                if info.public_key != k.public_key_raw() {
                    return Err(does_not_fit(
                        &key,
                        &format!("it is not the key of {}", crt.display()),
                    ));
                }
                verify_leaf(ca, &cert, &usage, now).map_err(|e| does_not_fit(&crt, &e))?;
                r.add(
                    &crt,
                    Status::Kept,
                    format!("{what}, until {}", describe_time(info.not_after)),
                );
                r.add(&key, kept(&key, true)?, "its private key");
                return Ok(());
            }
            (true, false) => return Err(one_without_other(o, base, &crt, &key)),
            (false, true) => return Err(one_without_other(o, base, &key, &crt)),
            (false, false) => {}
        }
    }
    let leaf = sign_leaf(ca, cn, None, &usage, o.days, now)?;
    write_file(&key, leaf.key_pem.as_bytes(), 0o600)?;
    write_file(&crt, leaf.cert_pem.as_bytes(), 0o644)?;
    r.add(
        &crt,
        Status::written(has_crt),
        format!(
            "{what}, until {}; names {}",
            describe_time(leaf.not_after),
            names.join(",")
        ),
    );
    r.add(&key, Status::written(has_key), "its private key");
    Ok(())
}
