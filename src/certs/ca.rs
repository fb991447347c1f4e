//! The cluster CA: a given or kept one loaded and checked, or a new one.

use super::*;

pub(super) struct Ca {
    pub(super) cert_path: PathBuf,
    pub(super) key_path: PathBuf,
    pub(super) der: CertificateDer<'static>,
    pub(super) pem: String,
    /// The encoded subject Name, which every certificate we sign must name as its issuer.
    pub(super) subject: Vec<u8>,
    pub(super) not_after: SystemTime,
    pub(super) issuer: Issuer<'static, KeyPair>,
    /// Whether signed certificates carry an authority key identifier (only when it can match
    /// the CA's own subject key identifier).
    pub(super) use_aki: bool,
}

pub(super) fn load_ca(cert_path: &Path, key_path: &Path, now: SystemTime) -> Result<Ca> {
    let cert_pem = read(cert_path)?;
    let der = first_cert(&cert_pem, cert_path)?;
    let info = der::parse_cert(&der).ok_or_else(|| {
        cfg_err(format!(
            "{}: not a certificate edgekcm can read",
            cert_path.display()
        ))
    })?;
    if !info.is_ca {
        return Err(cfg_err(format!(
            "{} is not a CA certificate (no basicConstraints CA:TRUE)",
            cert_path.display()
        )));
    }
    if info.not_after <= now {
        return Err(cfg_err(format!(
            "{} expired on {}",
            cert_path.display(),
            describe_time(info.not_after)
        )));
    }
    let key =
        load_key(&read(key_path)?).map_err(|e| cfg_err(format!("{}: {e}", key_path.display())))?;
    if key.public_key_raw() != info.public_key {
        return Err(cfg_err(format!(
            "{} is not the private key of {}",
            key_path.display(),
            cert_path.display()
        )));
    }
    let dn = der::distinguished_name(info.subject).map_err(|e| {
        cfg_err(format!(
            "{}: cannot sign for this CA: {e}",
            cert_path.display()
        ))
    })?;
    let mut params = CertificateParams::default();
    params.distinguished_name = dn;
    params.key_identifier_method = match info.subject_key_id {
        Some(id) => KeyIdMethod::PreSpecified(id.to_vec()),
        None => KeyIdMethod::Sha256,
    };
    Ok(Ca {
        cert_path: cert_path.to_path_buf(),
        key_path: key_path.to_path_buf(),
        pem: pem_encode("CERTIFICATE", &der),
        subject: info.subject.to_vec(),
        not_after: info.not_after,
        use_aki: info.subject_key_id.is_some(),
        der: der.clone(),
        issuer: Issuer::new(params, key),
    })
}

/// A new self-signed CA; returns it with its key's PEM.
pub(super) fn new_ca(cert_path: &Path, key_path: &Path, now: SystemTime) -> Result<(Ca, String)> {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| cfg_err(format!("cannot generate a key: {e}")))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "kubernetes");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    params.serial_number = Some(serial());
    set_validity(&mut params, now - BACKDATE, now + days(CA_DAYS))?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| cfg_err(format!("cannot sign the CA certificate: {e}")))?;
    let info = der::parse_cert(cert.der())
        .ok_or_else(|| cfg_err("the new CA certificate does not parse"))?;
    let (subject, not_after) = (info.subject.to_vec(), info.not_after);
    let key_pem = key.serialize_pem();
    Ok((
        Ca {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            der: cert.der().clone(),
            pem: cert.pem(),
            subject,
            not_after,
            use_aki: true,
            issuer: Issuer::new(params, key),
        },
        key_pem,
    ))
}
