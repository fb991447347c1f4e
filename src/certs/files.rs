//! Files and PEM: reading, writing through a temporary file with the final mode, keys in any
//! of the usual forms, validity times.

use super::*;

pub(super) fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    cfg_err(format!("cannot {what} {}: {e}", path.display()))
}

pub(super) fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| io_err("read", path, e))
}

/// Write through a temporary file in the same directory and rename, with `mode` from the
/// start (keys are never readable by others, not even briefly).
pub(super) fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    use std::io::Write as _;
    #[cfg(unix)]
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    opts.mode(mode);
    let result = (|| -> std::io::Result<()> {
        let mut f = opts.open(&tmp)?;
        #[cfg(unix)]
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_err("write", path, e));
    }
    Ok(())
}

/// Tighten a kept secret to 0600; true if it was looser.
pub(super) fn tighten(path: &Path) -> Result<bool> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let meta = std::fs::metadata(path).map_err(|e| io_err("read", path, e))?;
        if meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| io_err("change the mode of", path, e))?;
            return Ok(true);
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(false)
}

pub(super) fn kept(path: &Path, secret: bool) -> Result<Status> {
    Ok(if secret && tighten(path)? {
        Status::KeptTightened
    } else {
        Status::Kept
    })
}

/// DER as PEM: base64 in lines of 64 between BEGIN and END `label` lines.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut s = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        s.push_str(&String::from_utf8_lossy(line));
        s.push('\n');
    }
    s.push_str(&format!("-----END {label}-----\n"));
    s
}

/// Load a PEM private key in any of the usual forms (PKCS#8, PKCS#1 RSA, SEC1 EC).
pub fn load_key(pem_bytes: &[u8]) -> std::result::Result<KeyPair, String> {
    let der = PrivateKeyDer::from_pem_slice(pem_bytes)
        .map_err(|e| format!("no PEM private key found ({e})"))?;
    let pkcs8: Vec<u8> = match &der {
        PrivateKeyDer::Pkcs8(k) => k.secret_pkcs8_der().to_vec(),
        PrivateKeyDer::Pkcs1(k) => der::pkcs1_to_pkcs8(k.secret_pkcs1_der()),
        PrivateKeyDer::Sec1(k) => der::sec1_to_pkcs8(k.secret_sec1_der())?,
        _ => return Err("unsupported private key format".into()),
    };
    KeyPair::try_from(&PrivatePkcs8KeyDer::from(pkcs8)).map_err(|e| {
        format!("unsupported or malformed private key ({e}; RSA >= 2048 bits, ECDSA P-256/P-384 are supported)")
    })
}

pub(crate) fn first_cert(pem_bytes: &[u8], path: &Path) -> Result<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem_bytes)
        .next()
        .ok_or_else(|| cfg_err(format!("{}: no PEM certificate found", path.display())))?
        .map_err(|e| cfg_err(format!("{}: bad PEM certificate: {e}", path.display())))
}

pub(super) fn describe_time(t: SystemTime) -> String {
    crate::compat::timefmt::rfc3339(t)[..10].to_string()
}

/// Set a certificate's validity from two SystemTimes (through RFC 3339 text, so no date crate
/// is needed beside rcgen's).
pub(super) fn set_validity(
    p: &mut CertificateParams,
    from: SystemTime,
    to: SystemTime,
) -> Result<()> {
    fn parts(t: SystemTime) -> Option<(i32, u8, u8, u64)> {
        let s = crate::compat::timefmt::rfc3339(t);
        let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<u64>().ok();
        let secs = num(11..13)? * 3600 + num(14..16)? * 60 + num(17..19)?;
        Some((
            i32::try_from(num(0..4)?).ok()?,
            u8::try_from(num(5..7)?).ok()?,
            u8::try_from(num(8..10)?).ok()?,
            secs,
        ))
    }
    let bad = || cfg_err("certificate validity out of range");
    let (y, m, d, s) = parts(from).ok_or_else(bad)?;
    p.not_before = rcgen::date_time_ymd(y, m, d) + Duration::from_secs(s);
    let (y, m, d, s) = parts(to).ok_or_else(bad)?;
    p.not_after = rcgen::date_time_ymd(y, m, d) + Duration::from_secs(s);
    Ok(())
}

pub(super) fn days(n: u32) -> Duration {
    Duration::from_secs(u64::from(n) * 86_400)
}

/// 16 random bytes, positive, without a leading zero byte.
pub(super) fn serial() -> SerialNumber {
    use ring::rand::SecureRandom as _;
    let mut b = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        b.iter_mut().for_each(|x| *x = fastrand::u8(..));
    }
    b[0] = (b[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&b)
}

pub(super) fn san(name: &str) -> Result<SanType> {
    Ok(match name.parse::<IpAddr>() {
        Ok(ip) => SanType::IpAddress(ip),
        Err(_) => SanType::DnsName(
            name.try_into()
                .map_err(|e| cfg_err(format!("invalid DNS name {name:?}: {e}")))?,
        ),
    })
}
