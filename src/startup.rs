//! Start-up, before any controller runs: which controllers kube-controller-manager would run
//! with this command line that edgekcm cannot run yet.

use crate::config::Config;
use crate::controllers::registry::{self, ControllerInfo};

/// Whether kube-controller-manager v1.28 starts an enabled controller with this configuration:
/// not the feature-gated ones (their gates are off by default) nor the cloud ones (no cloud
/// provider), and the token controller, the CSR signer, node IPAM and the garbage collector
/// only when their flags ask for them.
pub fn upstream_starts(info: &ControllerInfo, cfg: &Config) -> bool {
    if info.later_release {
        return false;
    }
    match info.needs {
        "" => true,
        "--service-account-private-key-file" => cfg.service_account_private_key_file.is_some(),
        "--cluster-signing-cert-file" => cfg.cluster_signing.enabled(),
        "--allocate-node-cidrs" => cfg.allocate_node_cidrs,
        "--enable-garbage-collector" => cfg.enable_garbage_collector,
        // "cloud", "feature-gate"
        _ => false,
    }
}

/// The controllers kube-controller-manager v1.28 would run with this configuration and edgekcm
/// does not implement, in upstream's table order.
pub fn not_implemented(cfg: &Config, implemented: &[&str]) -> Vec<&'static ControllerInfo> {
    registry::known()
        .iter()
        .filter(|i| cfg.controllers.is_enabled(i.name))
        .filter(|i| upstream_starts(i, cfg))
        .filter(|i| !implemented.contains(&i.name))
        .collect()
}

/// One line naming them by their short `--controllers` names, or None when there are none.
pub fn not_implemented_line(cfg: &Config, implemented: &[&str]) -> Option<String> {
    let missing = not_implemented(cfg, implemented);
    if missing.is_empty() {
        return None;
    }
    let names: Vec<&str> = missing
        .iter()
        .map(|i| i.aliases.first().copied().unwrap_or(i.name))
        .collect();
    Some(format!(
        "{} controllers that kube-controller-manager v1.28 would run with these flags are not in edgekcm yet: {}",
        names.len(),
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{parse, Command};

    fn cfg(line: &str) -> Config {
        let args: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        match parse(&args).unwrap() {
            Command::Run(c) => *c,
            other => panic!("{other:?}"),
        }
    }

    fn missing(line: &str) -> Vec<&'static str> {
        not_implemented(&cfg(line), crate::run::IMPLEMENTED)
            .iter()
            .map(|i| i.name)
            .collect()
    }

    const KUBEADM: &str = "--allocate-node-cidrs=true --cluster-cidr=10.244.0.0/16 \
        --cluster-signing-cert-file=/pki/ca.crt --cluster-signing-key-file=/pki/ca.key \
        --controllers=*,bootstrapsigner,tokencleaner --root-ca-file=/pki/ca.crt \
        --service-account-private-key-file=/pki/sa.key --use-service-account-credentials=true";

    #[test]
    fn flags_switch_controllers_on() {
        let m = missing(KUBEADM);
        for n in [
            "serviceaccount-token-controller",
            "certificatesigningrequest-signing-controller",
            "node-ipam-controller",
            "bootstrap-signer-controller",
            "token-cleaner-controller",
            "job-controller",
        ] {
            assert!(m.contains(&n), "{n} missing from {m:?}");
        }
        // Never: implemented ones, cloud ones, feature-gated ones, later releases.
        for n in [
            "deployment-controller",
            "service-lb-controller",
            "node-route-controller",
            "resourceclaim-controller",
            "taint-eviction-controller",
            "storage-version-migrator-controller",
        ] {
            assert!(!m.contains(&n), "{n} in {m:?}");
        }
        // Without those flags upstream skips those three.
        let m = missing("");
        for n in [
            "serviceaccount-token-controller",
            "certificatesigningrequest-signing-controller",
            "node-ipam-controller",
            "bootstrap-signer-controller",
        ] {
            assert!(!m.contains(&n), "{n} in {m:?}");
        }
        assert!(m.contains(&"job-controller"));
        // k3s: per-signer files switch the signer on too.
        let m = missing("--cluster-signing-kubelet-serving-cert-file=/s.crt --cluster-signing-kubelet-serving-key-file=/s.key");
        assert!(m.contains(&"certificatesigningrequest-signing-controller"));
    }

    #[test]
    fn only_named_controllers_count() {
        assert!(missing("--controllers=deployment,replicaset,serviceaccount").is_empty());
        assert_eq!(
            missing("--controllers=deployment,job --service-account-private-key-file=/sa.key"),
            vec!["job-controller"]
        );
        assert!(
            not_implemented_line(&cfg("--controllers=deployment"), crate::run::IMPLEMENTED)
                .is_none()
        );
    }

    #[test]
    fn one_readable_line() {
        let line = not_implemented_line(&cfg(KUBEADM), crate::run::IMPLEMENTED).unwrap();
        let n = missing(KUBEADM).len();
        assert!(
            line.starts_with(&format!("{n} controllers that kube-controller-manager v1.28 would run with these flags are not in edgekcm yet: serviceaccount-token, endpoint, ")),
            "{line}"
        );
        assert!(line.contains("csrsigning") && line.contains("nodeipam"));
        assert!(!line.contains("taint-eviction"));
        // Short enough for one line of a terminal-wide log viewer's wrap, far under 700.
        assert!(line.len() < 600, "{} characters: {line}", line.len());
    }
}
