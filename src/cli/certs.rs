//! `edgekcm certs`'s own arguments and help.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::certs::{
    default_kubeconfig_dir, service_ip, url_host, CertsOptions, CA_DAYS, DEFAULT_CLUSTER_NAME,
    DEFAULT_DAYS, DEFAULT_DIR, DEFAULT_SERVER, DEFAULT_SERVICE_CIDR, RENEWABLE,
};
use crate::cli::Command;
use crate::error::{Error, Result};

fn cfg_err(msg: impl Into<String>) -> Error {
    Error::Config(msg.into())
}

/// `edgekcm certs --help`.
pub fn help_text() -> String {
    let renewable = RENEWABLE.join(", ");
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
                              (kubernetes.default.svc..., localhost, 127.0.0.1, the first
                              address of --service-cluster-ip-range and the --server host are
                              always in)
      --service-cluster-ip-range cidrs
                              kube-apiserver's Service range, printed among its flags; its
                              first address is the kubernetes Service's ClusterIP that
                              in-cluster clients connect to (default {DEFAULT_SERVICE_CIDR},
                              kubeadm's; an IPv4 and an IPv6 range for dual-stack)
      --ca-cert path          sign with this CA certificate instead of <dir>/ca.crt
      --ca-key path           ... and this key (RSA or ECDSA; PKCS#1, SEC1 or PKCS#8 PEM)
      --cluster-name name     cluster name in the kubeconfigs (default {DEFAULT_CLUSTER_NAME})
      --days n                lifetime of the certificates made (default {DEFAULT_DAYS}; a new CA: {CA_DAYS})
      --renew names           make these again even if they still fit, and keep everything
                              else, CA and service-account key included: {renewable}
                              (repeat or comma-separate)
      --force                 replace every file, the CA and the service-account key too: every
                              certificate and token made with the old ones stops working
  -h, --help                  show this help

Existing files are kept when they still fit (key matches certificate, signed by the CA,
valid now, names asked for present); otherwise the command stops, says why and prints the
command that replaces that file alone. Private keys and kubeconfigs are written with mode
0600.

Renewing: run the command that made the files again with --renew, e.g. before
kube-apiserver's certificate expires, or to add a name to it:
  edgekcm certs --dir /etc/kubernetes/pki --renew=apiserver
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
                Some(v) => crate::compat::parse::parse_go_bool(v).map_err(|e| {
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
            "service-cluster-ip-range",
            "renew",
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
            "service-cluster-ip-range" => {
                let v = nonempty(value)?;
                service_ip(&v)?;
                o.service_cluster_ip_range = v;
            }
            "renew" => {
                for r in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if !RENEWABLE.contains(&r) {
                        return Err(cfg_err(format!(
                            "invalid argument {r:?} for \"--renew\" flag: one of {}",
                            RENEWABLE.join(", ")
                        )));
                    }
                    if !o.renew.iter().any(|x| x == r) {
                        o.renew.push(r.to_string());
                    }
                }
            }
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
        let o = opts("--renew apiserver,admin.conf --renew=apiserver --service-cluster-ip-range=10.0.0.0/24,fd00::/108");
        assert_eq!(o.renew, vec!["apiserver", "admin.conf"]);
        assert_eq!(o.service_cluster_ip_range, "10.0.0.0/24,fd00::/108");
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
        assert_eq!(
            err("--renew=ca"),
            "invalid argument \"ca\" for \"--renew\" flag: one of apiserver, kube-controller-manager, controller-manager.conf, admin.conf"
        );
        assert!(err("--service-cluster-ip-range=10.0.0.0").contains("invalid CIDR address"));
        assert!(err("--service-cluster-ip-range=10.0.0.0/31").contains("no address"));
        assert!(err("--service-cluster-ip-range=10.0.0.0/24,10.1.0.0/24").contains("IPv6"));
    }
}
