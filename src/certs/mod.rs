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

/// File names inside `--cert-dir`, as upstream (`<PairName>.crt/.key`).
pub const CERT_DIR_PAIR_NAME: &str = "kube-controller-manager";

mod ca;
mod files;
mod kubeconfig;
mod leaf;
mod sakeys;

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

use crate::error::{Error, Result};
use crate::pki::der;

pub const DEFAULT_DIR: &str = "/etc/kubernetes/pki";
pub const DEFAULT_SERVER: &str = "https://127.0.0.1:6443";
pub const DEFAULT_DAYS: u32 = 365;
pub const DEFAULT_CLUSTER_NAME: &str = "kubernetes";
pub(crate) const CA_DAYS: u32 = 3650;
/// Certificates start a little in the past, for clocks slightly behind.
const BACKDATE: Duration = Duration::from_secs(300);
/// kubeadm's default service CIDR. kube-apiserver's own default is 10.0.0.0/24: the range
/// is printed among its flags so that both agree.
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";
/// Besides these, kube-apiserver's certificate names the `kubernetes` Service's ClusterIP (the
/// first address of the service range), which in-cluster clients connect to.
const APISERVER_NAMES: &[&str] = &[
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
    "127.0.0.1",
];
/// What `--renew` replaces, by name: a serving pair (`<name>.crt`/`.key`) or a kubeconfig.
pub const RENEWABLE: &[&str] = &[
    "apiserver",
    "kube-controller-manager",
    "controller-manager.conf",
    "admin.conf",
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
    /// kube-apiserver's `--service-cluster-ip-range` (one range, or an IPv4 and an IPv6 one);
    /// the first address of the first is in its certificate.
    pub service_cluster_ip_range: String,
    /// Replace these ([`RENEWABLE`] names) even if they still fit; keep everything else.
    pub renew: Vec<String>,
    /// Replace every file (a new CA and service-account key too).
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
            service_cluster_ip_range: DEFAULT_SERVICE_CIDR.to_string(),
            renew: Vec::new(),
            force: false,
        }
    }

    /// Whether the file or pair `name` is to be written again even if it fits.
    pub(crate) fn replaces(&self, name: &str) -> bool {
        self.force || self.renew.iter().any(|r| r == name)
    }

    /// The `edgekcm certs` command that made these files, with `--renew=<name>`: the one
    /// command that replaces that pair alone.
    pub fn renew_command(&self, name: &str) -> String {
        let mut c = format!(
            "edgekcm certs --dir={}",
            quote_arg(&self.dir.display().to_string())
        );
        if self.kubeconfig_dir != default_kubeconfig_dir(&self.dir) {
            c.push_str(&format!(
                " --kubeconfig-dir={}",
                quote_arg(&self.kubeconfig_dir.display().to_string())
            ));
        }
        if self.server != DEFAULT_SERVER {
            c.push_str(&format!(" --server={}", quote_arg(&self.server)));
        }
        if !self.sans.is_empty() {
            c.push_str(&format!(" --san={}", quote_arg(&self.sans.join(","))));
        }
        if !self.apiserver_sans.is_empty() {
            c.push_str(&format!(
                " --apiserver-san={}",
                quote_arg(&self.apiserver_sans.join(","))
            ));
        }
        if let (Some(crt), Some(key)) = (&self.ca_cert, &self.ca_key) {
            c.push_str(&format!(
                " --ca-cert={} --ca-key={}",
                quote_arg(&crt.display().to_string()),
                quote_arg(&key.display().to_string())
            ));
        }
        if self.cluster_name != DEFAULT_CLUSTER_NAME {
            c.push_str(&format!(
                " --cluster-name={}",
                quote_arg(&self.cluster_name)
            ));
        }
        if self.days != DEFAULT_DAYS {
            c.push_str(&format!(" --days={}", self.days));
        }
        if self.service_cluster_ip_range != DEFAULT_SERVICE_CIDR {
            c.push_str(&format!(
                " --service-cluster-ip-range={}",
                quote_arg(&self.service_cluster_ip_range)
            ));
        }
        c.push_str(&format!(" --renew={name}"));
        c
    }

    /// The `kubernetes` Service's ClusterIP: the first address of the first service range.
    pub fn kubernetes_service_ip(&self) -> Result<IpAddr> {
        service_ip(&self.service_cluster_ip_range)
    }
}

/// The first address of the first range of a `--service-cluster-ip-range` value.
pub(crate) fn service_ip(ranges: &str) -> Result<IpAddr> {
    let bad = |why: &str| {
        cfg_err(format!(
            "invalid argument {ranges:?} for \"--service-cluster-ip-range\" flag: {why}"
        ))
    };
    let parts: Vec<&str> = ranges.split(',').map(str::trim).collect();
    if parts.len() > 2 {
        return Err(bad("at most two ranges (one IPv4, one IPv6)"));
    }
    let cidrs = parts
        .iter()
        .map(|p| p.parse::<crate::compat::cidr::Cidr>())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    if let [a, b] = cidrs.as_slice() {
        if a.addr.is_ipv4() == b.addr.is_ipv4() {
            return Err(bad("two ranges must be one IPv4 and one IPv6"));
        }
    }
    cidrs[0]
        .first_host()
        .ok_or_else(|| bad("the range has no address for the kubernetes Service"))
}

/// A shell word: as is when it is plain, else in single quotes.
fn quote_arg(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:,=@".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

pub(crate) fn default_kubeconfig_dir(dir: &Path) -> PathBuf {
    match (dir.file_name(), dir.parent()) {
        (Some(n), Some(p)) if n == "pki" && !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

fn cfg_err(msg: impl Into<String>) -> Error {
    Error::Config(msg.into())
}

/// The host part of an https URL (brackets of an IPv6 literal removed).
pub(crate) fn url_host(url: &str) -> Option<&str> {
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

use ca::*;
#[cfg(test)]
pub(crate) use files::first_cert;
use files::*;
pub use files::{load_key, pem_encode};
use kubeconfig::*;
use leaf::*;
#[cfg(test)]
pub(crate) use sakeys::spki_bits;
use sakeys::*;

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
                    "{} exists but {} does not: pass the CA's key with --ca-cert/--ca-key, or run with --force to make a new CA (every file is replaced, and every certificate and token made with the old CA and service-account key stops working)",
                    crt.display(),
                    key.display()
                )))
            }
            (false, true) => {
                return Err(cfg_err(format!(
                    "{} exists but {} does not: put the CA's certificate back, or remove {} and run with --force to make a new CA (every file is replaced, and every certificate and token made with the old CA and service-account key stops working)",
                    key.display(),
                    crt.display(),
                    key.display()
                )))
            }
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
    apiserver_names.push(o.kubernetes_service_ip()?.to_string());
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
        CERT_DIR_PAIR_NAME,
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
    let (kcm_crt, kcm_key) = pair_paths(&o.dir, CERT_DIR_PAIR_NAME);
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
        format!("--service-cluster-ip-range={}", o.service_cluster_ip_range),
        "--authorization-mode=Node,RBAC".to_string(),
    ];
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

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
