//! `edgekcm certs`: the certificates and keys a fresh single-node cluster needs, in one
//! directory, in the forms kube-apiserver and edgekcm read.
//!
//! Made (ECDSA P-256; ring cannot generate RSA keys):
//! - `ca.crt`/`ca.key`: the cluster CA (10 years), or a given CA (`--ca-cert`/`--ca-key`, RSA or
//!   EC keys in PKCS#1, SEC1 or PKCS#8 form, e.g. kubeadm's) used in place;
//! - `sa.key`/`sa.pub`: the service-account token signing pair (PKCS#8 / SPKI PEM);
//! - `apiserver.crt`/`.key`: kube-apiserver's serving certificate;
//! - `kube-controller-manager.crt`/`.key`: edgekcm's serving certificate (the names upstream
//!   uses inside `--cert-dir`);
//! - `controller-manager.conf` and `admin.conf`: kubeconfigs with inline client certificates
//!   for `system:kube-controller-manager` and `kubernetes-admin` (`O=system:masters`).
//!
//! Existing files are kept (after checking they still fit: key matches certificate, signed by
//! the CA, valid now, the names asked for) unless `--force`. Keys and kubeconfigs are 0600.

pub mod der;
pub mod spki;

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};

use crate::cli::Command;
use crate::error::{Error, Result};

pub const DEFAULT_DIR: &str = "/etc/kubernetes/pki";
pub const DEFAULT_SERVER: &str = "https://127.0.0.1:6443";
pub const DEFAULT_DAYS: u32 = 365;
pub const DEFAULT_CLUSTER_NAME: &str = "kubernetes";
const CA_DAYS: u32 = 3650;
/// Certificates start a little in the past, for clocks slightly behind.
const BACKDATE: Duration = Duration::from_secs(300);
/// The first address of kubeadm's default service CIDR (10.96.0.0/12): the `kubernetes`
/// Service's ClusterIP, which in-cluster clients connect to.
const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";
const APISERVER_NAMES: &[&str] = &[
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
    "127.0.0.1",
    KUBERNETES_SERVICE_IP,
];
const LOCAL_NAMES: &[&str] = &["localhost", "127.0.0.1"];
const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// What `edgekcm certs` was asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct CertsOptions {
    /// Certificates and keys go here.
    pub dir: PathBuf,
    /// Kubeconfigs go here.
    pub kubeconfig_dir: PathBuf,
    /// The API server URL written into the kubeconfigs.
    pub server: String,
    /// Extra names for edgekcm's serving certificate.
    pub sans: Vec<String>,
    /// Extra names for kube-apiserver's serving certificate.
    pub apiserver_sans: Vec<String>,
    /// A CA to sign with instead of `dir/ca.crt` + `dir/ca.key`.
    pub ca_cert: Option<PathBuf>,
    pub ca_key: Option<PathBuf>,
    pub cluster_name: String,
    /// Lifetime of the leaf certificates.
    pub days: u32,
    /// Replace existing files.
    pub force: bool,
}

impl CertsOptions {
    /// Defaults for a directory; kubeconfigs go next to `pki/` as kubeadm lays them out, or
    /// into the directory itself.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        let kubeconfig_dir = default_kubeconfig_dir(&dir);
        CertsOptions {
            dir,
            kubeconfig_dir,
            server: DEFAULT_SERVER.to_string(),
            sans: Vec::new(),
            apiserver_sans: Vec::new(),
            ca_cert: None,
            ca_key: None,
            cluster_name: DEFAULT_CLUSTER_NAME.to_string(),
            days: DEFAULT_DAYS,
            force: false,
        }
    }
}

fn default_kubeconfig_dir(dir: &Path) -> PathBuf {
    match (dir.file_name(), dir.parent()) {
        (Some(n), Some(p)) if n == "pki" && !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

fn cfg_err(msg: impl Into<String>) -> Error {
    Error::Config(msg.into())
}

/// `edgekcm certs --help`.
pub fn help_text() -> String {
    format!(
        "edgekcm certs writes the certificates, keys and kubeconfigs a fresh single-node cluster
needs (kube-apiserver and edgekcm), and prints the flags to use them.

Usage:
  edgekcm certs [flags]

Flags:
      --dir path              where certificates and keys go (default {DEFAULT_DIR})
      --kubeconfig-dir path   where controller-manager.conf and admin.conf go (default: the
                              parent of --dir when it is named pki, else --dir)
      --server url            API server URL in the kubeconfigs (default {DEFAULT_SERVER})
      --san names             extra DNS names/IPs for edgekcm's serving certificate
                              (localhost and 127.0.0.1 are always in; repeat or comma-separate)
      --apiserver-san names   extra DNS names/IPs for kube-apiserver's serving certificate
                              (kubernetes.default.svc..., localhost, 127.0.0.1, {KUBERNETES_SERVICE_IP} and
                              the --server host are always in)
      --ca-cert path          sign with this CA certificate instead of <dir>/ca.crt
      --ca-key path           ... and this key (RSA or ECDSA; PKCS#1, SEC1 or PKCS#8 PEM)
      --cluster-name name     cluster name in the kubeconfigs (default {DEFAULT_CLUSTER_NAME})
      --days n                lifetime of the certificates made (default {DEFAULT_DAYS}; a new CA: {CA_DAYS})
      --force                 replace existing files (a new CA and service-account key
                              invalidate every certificate and token made with the old ones)
  -h, --help                  show this help

Existing files are kept when they still fit (key matches certificate, signed by the CA,
valid now, names asked for present); otherwise the command stops and says why. Private
keys and kubeconfigs are written with mode 0600.
"
    )
}

fn check_name(flag: &str, name: &str) -> Result<()> {
    if name.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').enumerate().all(|(i, label)| {
            (i == 0 && label == "*")
                || (!label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
        });
    if ok {
        Ok(())
    } else {
        Err(cfg_err(format!(
            "invalid value {name:?} for --{flag}: not an IP address or DNS name"
        )))
    }
}

/// The host part of an https URL (brackets of an IPv6 literal removed).
fn url_host(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split_once(']')?.0
    } else {
        authority.split(':').next()?
    };
    (!host.is_empty()).then_some(host)
}

/// Parse the arguments after `certs`.
pub fn parse_args(args: &[String]) -> Result<Command> {
    let mut dir: Option<PathBuf> = None;
    let mut kubeconfig_dir: Option<PathBuf> = None;
    let mut o = CertsOptions::new(DEFAULT_DIR);
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        if arg == "-h" {
            return Ok(Command::Help(help_text()));
        }
        let Some(body) = arg.strip_prefix("--") else {
            return Err(cfg_err(format!(
                "\"edgekcm certs\" takes flags only, got {arg:?}"
            )));
        };
        let (given, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let name = given.replace('_', "-");
        if name == "help" || name == "force" {
            let on = match inline.as_deref() {
                None => true,
                Some(v) => crate::config::parse_go_bool(v).map_err(|e| {
                    cfg_err(format!("invalid argument {v:?} for \"--{name}\" flag: {e}"))
                })?,
            };
            if name == "help" && on {
                return Ok(Command::Help(help_text()));
            }
            if name == "force" {
                o.force = on;
            }
            continue;
        }
        let known = [
            "dir",
            "kubeconfig-dir",
            "server",
            "san",
            "apiserver-san",
            "ca-cert",
            "ca-key",
            "cluster-name",
            "days",
        ];
        if !known.contains(&name.as_str()) {
            return Err(cfg_err(format!(
                "unknown flag: --{given} (see edgekcm certs --help)"
            )));
        }
        let value = match inline {
            Some(v) => v,
            None => match args.get(i) {
                Some(v) => {
                    i += 1;
                    v.clone()
                }
                None => return Err(cfg_err(format!("flag needs an argument: --{given}"))),
            },
        };
        let nonempty = |v: String| -> Result<String> {
            if v.trim().is_empty() {
                Err(cfg_err(format!("--{name} must not be empty")))
            } else {
                Ok(v)
            }
        };
        match name.as_str() {
            "dir" => dir = Some(nonempty(value)?.into()),
            "kubeconfig-dir" => kubeconfig_dir = Some(nonempty(value)?.into()),
            "server" => o.server = nonempty(value)?,
            "san" | "apiserver-san" => {
                for s in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    check_name(&name, s)?;
                    let list = if name == "san" {
                        &mut o.sans
                    } else {
                        &mut o.apiserver_sans
                    };
                    if !list.iter().any(|x| x == s) {
                        list.push(s.to_string());
                    }
                }
            }
            "ca-cert" => o.ca_cert = Some(nonempty(value)?.into()),
            "ca-key" => o.ca_key = Some(nonempty(value)?.into()),
            "cluster-name" => o.cluster_name = nonempty(value)?,
            "days" => {
                o.days = match value.parse::<u32>() {
                    Ok(d) if (1..=36500).contains(&d) => d,
                    _ => {
                        return Err(cfg_err(format!(
                            "invalid argument {value:?} for \"--days\" flag: a whole number of days from 1 to 36500"
                        )))
                    }
                }
            }
            _ => unreachable!("checked against the known list"),
        }
    }
    if let Some(d) = dir {
        o.kubeconfig_dir = default_kubeconfig_dir(&d);
        o.dir = d;
    }
    if let Some(k) = kubeconfig_dir {
        o.kubeconfig_dir = k;
    }
    match (&o.ca_cert, &o.ca_key) {
        (Some(_), None) | (None, Some(_)) => {
            return Err(cfg_err("--ca-cert and --ca-key must be given together"))
        }
        _ => {}
    }
    if o.server.contains(char::is_whitespace) || url_host(&o.server).is_none() {
        return Err(cfg_err(format!(
            "invalid argument {:?} for \"--server\" flag: an https:// URL with a host is needed",
            o.server
        )));
    }
    Ok(Command::Certs(Box::new(o)))
}

// ---------------------------------------------------------------------------------------------
// What was done

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Created,
    /// Existed and was replaced (`--force`).
    Replaced,
    Kept,
    /// Kept; its mode was looser than 0600 and was tightened.
    KeptTightened,
    /// A file outside the directory used as is (`--ca-cert`/`--ca-key`).
    Used,
}

impl Status {
    /// A file just written: `Replaced` if one was there before, else `Created`.
    fn written(existed: bool) -> Status {
        if existed {
            Status::Replaced
        } else {
            Status::Created
        }
    }
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Created => "created",
            Status::Replaced => "replaced",
            Status::Kept => "kept",
            Status::KeptTightened => "kept (mode tightened to 0600)",
            Status::Used => "using",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub path: PathBuf,
    pub status: Status,
    pub what: String,
}

/// The outcome of [`generate`]: one entry per file, and the flags to use them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub entries: Vec<Entry>,
    pub edgekcm_flags: Vec<String>,
    pub apiserver_flags: Vec<String>,
}

impl Report {
    fn add(&mut self, path: &Path, status: Status, what: impl Into<String>) {
        self.entries.push(Entry {
            path: path.to_path_buf(),
            status,
            what: what.into(),
        });
    }

    pub fn status_of(&self, file_name: &str) -> Option<Status> {
        self.entries
            .iter()
            .find(|e| e.path.file_name().is_some_and(|n| n == file_name))
            .map(|e| e.status)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .entries
            .iter()
            .map(|e| e.status.word().len())
            .max()
            .unwrap_or(0);
        for e in &self.entries {
            writeln!(
                f,
                "{:width$}  {}  ({})",
                e.status.word(),
                e.path.display(),
                e.what
            )?;
        }
        let block = |f: &mut fmt::Formatter<'_>, head: &str, flags: &[String]| {
            writeln!(f, "\n{head}")?;
            for (i, fl) in flags.iter().enumerate() {
                let tail = if i + 1 == flags.len() { "" } else { " \\" };
                writeln!(f, "  {fl}{tail}")?;
            }
            Ok(())
        };
        block(f, "edgekcm flags:", &self.edgekcm_flags)?;
        block(
            f,
            "kube-apiserver flags (with your --etcd-servers and the rest):",
            &self.apiserver_flags,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Files

fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    cfg_err(format!("cannot {what} {}: {e}", path.display()))
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| io_err("read", path, e))
}

/// Write through a temporary file in the same directory and rename, with `mode` from the
/// start (keys are never readable by others, not even briefly).
fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<()> {
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
fn tighten(path: &Path) -> Result<bool> {
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

fn kept(path: &Path, secret: bool) -> Result<Status> {
    Ok(if secret && tighten(path)? {
        Status::KeptTightened
    } else {
        Status::Kept
    })
}

fn pem(label: &str, der: &[u8]) -> String {
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

fn describe_time(t: SystemTime) -> String {
    crate::timefmt::rfc3339(t)[..10].to_string()
}

/// Set a certificate's validity from two SystemTimes (through RFC 3339 text, so no date crate
/// is needed beside rcgen's).
fn set_validity(p: &mut CertificateParams, from: SystemTime, to: SystemTime) -> Result<()> {
    fn parts(t: SystemTime) -> Option<(i32, u8, u8, u64)> {
        let s = crate::timefmt::rfc3339(t);
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

fn days(n: u32) -> Duration {
    Duration::from_secs(u64::from(n) * 86_400)
}

/// 16 random bytes, positive, without a leading zero byte.
fn serial() -> SerialNumber {
    use ring::rand::SecureRandom as _;
    let mut b = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        b.iter_mut().for_each(|x| *x = fastrand::u8(..));
    }
    b[0] = (b[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&b)
}

fn san(name: &str) -> Result<SanType> {
    Ok(match name.parse::<IpAddr>() {
        Ok(ip) => SanType::IpAddress(ip),
        Err(_) => SanType::DnsName(
            name.try_into()
                .map_err(|e| cfg_err(format!("invalid DNS name {name:?}: {e}")))?,
        ),
    })
}

// ---------------------------------------------------------------------------------------------
// The CA

struct Ca {
    cert_path: PathBuf,
    key_path: PathBuf,
    der: CertificateDer<'static>,
    pem: String,
    /// The encoded subject Name, which every certificate we sign must name as its issuer.
    subject: Vec<u8>,
    not_after: SystemTime,
    issuer: Issuer<'static, KeyPair>,
    /// Whether signed certificates carry an authority key identifier (only when it can match
    /// the CA's own subject key identifier).
    use_aki: bool,
}

fn load_ca(cert_path: &Path, key_path: &Path, now: SystemTime) -> Result<Ca> {
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
        pem: pem("CERTIFICATE", &der),
        subject: info.subject.to_vec(),
        not_after: info.not_after,
        use_aki: info.subject_key_id.is_some(),
        der: der.clone(),
        issuer: Issuer::new(params, key),
    })
}

/// A new self-signed CA; returns it with its key's PEM.
fn new_ca(cert_path: &Path, key_path: &Path, now: SystemTime) -> Result<(Ca, String)> {
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

// ---------------------------------------------------------------------------------------------
// Leaf certificates

#[derive(Debug, Clone)]
enum Usage {
    /// A serving certificate for these names.
    Server(Vec<String>),
    Client,
}

struct Leaf {
    cert_pem: String,
    key_pem: String,
    not_after: SystemTime,
}

fn sign_leaf(
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
fn verify_leaf(
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
fn explain(ca: &Ca, e: rustls::Error, name: Option<&str>) -> String {
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

fn pair_paths(dir: &Path, base: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{base}.crt")),
        dir.join(format!("{base}.key")),
    )
}

fn one_without_other(have: &Path, missing: &Path) -> Error {
    cfg_err(format!(
        "{} exists but {} does not; remove it or run with --force",
        have.display(),
        missing.display()
    ))
}

fn does_not_fit(path: &Path, why: &str) -> Error {
    cfg_err(format!(
        "existing {} does not fit: {why}; remove it or run with --force to replace it",
        path.display()
    ))
}

#[allow(clippy::too_many_arguments)]
fn serving_pair(
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
    if !o.force {
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
            (true, false) => return Err(one_without_other(&crt, &key)),
            (false, true) => return Err(one_without_other(&key, &crt)),
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

// ---------------------------------------------------------------------------------------------
// Service-account keys

pub(crate) fn spki_bits(pem_bytes: &[u8]) -> Option<Vec<u8>> {
    use rustls_pki_types::SubjectPublicKeyInfoDer;
    let spki = SubjectPublicKeyInfoDer::from_pem_slice(pem_bytes).ok()?;
    let seq = der::read_exact(spki.as_ref(), der::SEQUENCE)?;
    let parts = der::children(seq.content)?;
    let bits = parts.get(1).filter(|t| t.tag == der::BIT_STRING)?;
    Some(bits.content.strip_prefix(&[0u8])?.to_vec())
}

fn service_account_keys(o: &CertsOptions, r: &mut Report) -> Result<()> {
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
                    return Err(does_not_fit(
                        &pub_path,
                        &format!("it is not the public key of {}", key_path.display()),
                    ))
                }
                None => return Err(does_not_fit(&pub_path, "no PEM PUBLIC KEY in it")),
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
        return Err(one_without_other(&pub_path, &key_path));
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

// ---------------------------------------------------------------------------------------------
// Kubeconfigs

fn kubeconfig_yaml(cluster: &str, server: &str, ca_pem: &str, user: &str, leaf: &Leaf) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let q = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string());
    let context = format!("{user}@{cluster}");
    format!(
        "apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: {ca}
    server: {server}
  name: {cluster}
contexts:
- context:
    cluster: {cluster}
    user: {user}
  name: {context}
current-context: {context}
preferences: {{}}
users:
- name: {user}
  user:
    client-certificate-data: {crt}
    client-key-data: {key}
",
        ca = b64(ca_pem),
        server = q(server),
        cluster = q(cluster),
        user = q(user),
        context = q(&context),
        crt = b64(&leaf.cert_pem),
        key = b64(&leaf.key_pem),
    )
}

#[allow(clippy::too_many_arguments)]
fn kubeconfig(
    o: &CertsOptions,
    ca: &Ca,
    r: &mut Report,
    file: &str,
    user: &str,
    org: Option<&str>,
    what: &str,
    now: SystemTime,
) -> Result<()> {
    let path = o.kubeconfig_dir.join(file);
    let existed = path.exists();
    if existed && !o.force {
        let text =
            String::from_utf8(read(&path)?).map_err(|_| does_not_fit(&path, "not UTF-8 text"))?;
        let origin = format!("kubeconfig {}", path.display());
        let rest = crate::api::kubeconfig::from_kubeconfig_str(&text, &o.kubeconfig_dir, &origin)
            .and_then(|c| c.validate().map(|_| c))
            .map_err(|e| does_not_fit(&path, &e.to_string()))?;
        if rest.server != o.server {
            return Err(does_not_fit(
                &path,
                &format!("its server is {}, not {}", rest.server, o.server),
            ));
        }
        let trusts_ca = rest
            .ca_pem
            .as_deref()
            .and_then(|p| CertificateDer::pem_slice_iter(p).next())
            .and_then(|c| c.ok())
            .is_some_and(|c| c == ca.der);
        if !trusts_ca {
            return Err(does_not_fit(
                &path,
                &format!("it does not trust {}", ca.cert_path.display()),
            ));
        }
        let cert = rest
            .client_cert_pem
            .as_deref()
            .and_then(|p| CertificateDer::pem_slice_iter(p).next())
            .and_then(|c| c.ok())
            .ok_or_else(|| does_not_fit(&path, "it has no client certificate"))?;
        verify_leaf(ca, &cert, &Usage::Client, now).map_err(|e| does_not_fit(&path, &e))?;
        let info = der::parse_cert(&cert)
            .ok_or_else(|| does_not_fit(&path, "its client certificate cannot be read"))?;
        if info.common_name.as_deref() != Some(user) {
            return Err(does_not_fit(
                &path,
                &format!(
                    "its client certificate is for {:?}, not {user:?}",
                    info.common_name.unwrap_or_default()
                ),
            ));
        }
        r.add(
            &path,
            kept(&path, true)?,
            format!("{what}, until {}", describe_time(info.not_after)),
        );
        return Ok(());
    }
    let leaf = sign_leaf(ca, user, org, &Usage::Client, o.days, now)?;
    let yaml = kubeconfig_yaml(&o.cluster_name, &o.server, &ca.pem, user, &leaf);
    write_file(&path, yaml.as_bytes(), 0o600)?;
    r.add(
        &path,
        if existed {
            Status::Replaced
        } else {
            Status::Created
        },
        format!("{what}, until {}", describe_time(leaf.not_after)),
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The command

fn make_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io_err("create", dir, e))
}

fn the_ca(o: &CertsOptions, r: &mut Report, now: SystemTime) -> Result<Ca> {
    if let (Some(c), Some(k)) = (&o.ca_cert, &o.ca_key) {
        let ca = load_ca(c, k, now)?;
        r.add(
            c,
            Status::Used,
            format!("given CA, until {}", describe_time(ca.not_after)),
        );
        r.add(k, Status::Used, "its private key");
        return Ok(ca);
    }
    let (crt, key) = pair_paths(&o.dir, "ca");
    let (has_crt, has_key) = (crt.exists(), key.exists());
    if !o.force {
        match (has_crt, has_key) {
            (true, true) => {
                let ca = load_ca(&crt, &key, now)?;
                r.add(
                    &crt,
                    Status::Kept,
                    format!("cluster CA, until {}", describe_time(ca.not_after)),
                );
                r.add(&key, kept(&key, true)?, "its private key");
                return Ok(ca);
            }
            (true, false) => {
                return Err(cfg_err(format!(
                    "{} exists but {} does not: pass the CA's key with --ca-cert/--ca-key, or run with --force to make a new CA",
                    crt.display(),
                    key.display()
                )))
            }
            (false, true) => return Err(one_without_other(&key, &crt)),
            (false, false) => {}
        }
    }
    let (ca, key_pem) = new_ca(&crt, &key, now)?;
    write_file(&key, key_pem.as_bytes(), 0o600)?;
    write_file(&crt, ca.pem.as_bytes(), 0o644)?;
    r.add(
        &crt,
        Status::written(has_crt),
        format!(
            "cluster CA (ECDSA P-256), until {}",
            describe_time(ca.not_after)
        ),
    );
    r.add(&key, Status::written(has_key), "its private key");
    Ok(ca)
}

/// Write (or keep) every file and say what happened and which flags to use.
pub fn generate(o: &CertsOptions) -> Result<Report> {
    generate_at(o, SystemTime::now())
}

fn generate_at(o: &CertsOptions, now: SystemTime) -> Result<Report> {
    make_dir(&o.dir)?;
    make_dir(&o.kubeconfig_dir)?;
    let mut r = Report::default();
    let ca = the_ca(o, &mut r, now)?;
    service_account_keys(o, &mut r)?;

    let mut apiserver_names: Vec<String> = APISERVER_NAMES.iter().map(|s| s.to_string()).collect();
    let mut kcm_names: Vec<String> = LOCAL_NAMES.iter().map(|s| s.to_string()).collect();
    let host = url_host(&o.server).unwrap_or("127.0.0.1").to_string();
    for n in std::iter::once(&host).chain(&o.apiserver_sans) {
        if !apiserver_names.contains(n) {
            apiserver_names.push(n.clone());
        }
    }
    for n in &o.sans {
        if !kcm_names.contains(n) {
            kcm_names.push(n.clone());
        }
    }
    serving_pair(
        o,
        &ca,
        &mut r,
        "apiserver",
        "kube-apiserver",
        &apiserver_names,
        "kube-apiserver serving certificate",
        now,
    )?;
    serving_pair(
        o,
        &ca,
        &mut r,
        crate::server::CERT_DIR_PAIR_NAME,
        "kube-controller-manager",
        &kcm_names,
        "edgekcm serving certificate",
        now,
    )?;
    kubeconfig(
        o,
        &ca,
        &mut r,
        "controller-manager.conf",
        "system:kube-controller-manager",
        None,
        "edgekcm's kubeconfig",
        now,
    )?;
    kubeconfig(
        o,
        &ca,
        &mut r,
        "admin.conf",
        "kubernetes-admin",
        Some("system:masters"),
        "admin kubeconfig (system:masters)",
        now,
    )?;

    let p = |path: &Path| path.display().to_string();
    let kc = p(&o.kubeconfig_dir.join("controller-manager.conf"));
    let ca_crt = p(&ca.cert_path);
    let (kcm_crt, kcm_key) = pair_paths(&o.dir, crate::server::CERT_DIR_PAIR_NAME);
    let (api_crt, api_key) = pair_paths(&o.dir, "apiserver");
    let sa_key = p(&o.dir.join("sa.key"));
    r.edgekcm_flags = vec![
        format!("--kubeconfig={kc}"),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        format!("--client-ca-file={ca_crt}"),
        format!("--root-ca-file={ca_crt}"),
        format!("--cluster-signing-cert-file={ca_crt}"),
        format!("--cluster-signing-key-file={}", p(&ca.key_path)),
        format!("--service-account-private-key-file={sa_key}"),
        format!("--tls-cert-file={}", p(&kcm_crt)),
        format!("--tls-private-key-file={}", p(&kcm_key)),
        "--use-service-account-credentials=true".to_string(),
    ];
    r.apiserver_flags = vec![
        format!("--client-ca-file={ca_crt}"),
        format!("--tls-cert-file={}", p(&api_crt)),
        format!("--tls-private-key-file={}", p(&api_key)),
        format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
        format!("--service-account-key-file={}", p(&o.dir.join("sa.pub"))),
        format!("--service-account-signing-key-file={sa_key}"),
        "--authorization-mode=Node,RBAC".to_string(),
    ];
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn opts(s: &str) -> CertsOptions {
        match parse_args(&args(s)).unwrap() {
            Command::Certs(o) => *o,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_follow_kubeadm_layout() {
        let o = opts("");
        assert_eq!(o.dir, PathBuf::from("/etc/kubernetes/pki"));
        assert_eq!(o.kubeconfig_dir, PathBuf::from("/etc/kubernetes"));
        assert_eq!(o.server, "https://127.0.0.1:6443");
        assert_eq!(o.days, 365);
        assert!(!o.force);
        let o = opts("--dir /tmp/x");
        assert_eq!(o.kubeconfig_dir, PathBuf::from("/tmp/x"));
        let o = opts("--dir=/srv/pki --kubeconfig-dir /srv/kc");
        assert_eq!(o.kubeconfig_dir, PathBuf::from("/srv/kc"));
    }

    #[test]
    fn flag_spellings() {
        let o = opts("--san a.example,10.0.0.1 --san=b --san a.example --apiserver_san node1 --force --days=30");
        assert_eq!(o.sans, vec!["a.example", "10.0.0.1", "b"]);
        assert_eq!(o.apiserver_sans, vec!["node1"]);
        assert!(o.force);
        assert_eq!(o.days, 30);
        assert!(!opts("--force=false").force);
        assert!(matches!(
            parse_args(&args("--help")).unwrap(),
            Command::Help(_)
        ));
        assert!(matches!(parse_args(&args("-h")).unwrap(), Command::Help(_)));
    }

    #[test]
    fn bad_flags_name_the_problem() {
        let err = |s: &str| parse_args(&args(s)).unwrap_err().to_string();
        assert!(err("--nope").contains("unknown flag: --nope"));
        assert!(err("--dir").contains("flag needs an argument: --dir"));
        assert!(err("--ca-cert /x").contains("--ca-cert and --ca-key must be given together"));
        assert!(err("--server http://x").contains("https:// URL"));
        assert!(err("--days 0").contains("--days"));
        assert!(err("--san bad/name").contains("bad/name"));
        assert!(err("stray").contains("takes flags only"));
        assert!(err("--force=maybe").contains("--force"));
    }

    #[test]
    fn url_hosts() {
        assert_eq!(url_host("https://127.0.0.1:6443"), Some("127.0.0.1"));
        assert_eq!(url_host("https://api.example:443/x"), Some("api.example"));
        assert_eq!(url_host("https://[::1]:6443"), Some("::1"));
        assert_eq!(url_host("https://node"), Some("node"));
        assert_eq!(url_host("http://node"), None);
        assert_eq!(url_host("https://"), None);
    }

    #[test]
    fn key_forms_load() {
        let rsa = include_str!("../../tests/fixtures/rsa-pkcs1.key");
        let k = load_key(rsa.as_bytes()).unwrap();
        assert_eq!(k.algorithm(), &rcgen::PKCS_RSA_SHA256);
        let ec = KeyPair::generate().unwrap();
        let k8 = load_key(ec.serialize_pem().as_bytes()).unwrap();
        assert_eq!(k8.public_key_raw(), ec.public_key_raw());
        assert!(load_key(b"not a key")
            .unwrap_err()
            .contains("no PEM private key"));
    }

    #[test]
    fn validity_is_set_to_the_second() {
        let mut p = CertificateParams::default();
        let from = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        set_validity(&mut p, from, from + days(1)).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        let info = der::parse_cert(cert.der()).unwrap();
        assert_eq!(info.not_before, from);
        assert_eq!(info.not_after, from + days(1));
    }
}
