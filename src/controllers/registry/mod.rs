//! The table of controller names `--controllers` understands, and the enable rules.
//!
//! Names follow kube-controller-manager 1.28: the long `*-controller` names are canonical and
//! the short historical names are aliases. A few names from later releases are known too, so
//! command lines written for a newer kube-controller-manager still parse.

use crate::error::{Error, Result};

/// One entry of the controller table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerInfo {
    /// Canonical name, e.g. `deployment-controller`.
    pub name: &'static str,
    /// Other names accepted in `--controllers`, e.g. `deployment`.
    pub aliases: &'static [&'static str],
    /// Not enabled by `*`; must be named explicitly.
    pub disabled_by_default: bool,
    /// ServiceAccount in `kube-system` used with `--use-service-account-credentials`;
    /// `None` means the controller always uses the manager's own credentials.
    pub sa_name: Option<&'static str>,
    /// Empty, or why the controller may not start even when enabled: `cloud`,
    /// `feature-gate`, or the flag it needs (`--allocate-node-cidrs`, ...).
    pub needs: &'static str,
    /// A name from a kube-controller-manager release after 1.28 (1.28 itself would refuse it).
    pub later_release: bool,
}

const fn c(
    name: &'static str,
    aliases: &'static [&'static str],
    sa_name: Option<&'static str>,
    needs: &'static str,
) -> ControllerInfo {
    ControllerInfo {
        name,
        aliases,
        disabled_by_default: false,
        sa_name,
        needs,
        later_release: false,
    }
}

const fn off(
    name: &'static str,
    aliases: &'static [&'static str],
    sa_name: Option<&'static str>,
    needs: &'static str,
) -> ControllerInfo {
    ControllerInfo {
        name,
        aliases,
        disabled_by_default: true,
        sa_name,
        needs,
        later_release: false,
    }
}

/// Marks an entry as a name from a release after 1.28.
const fn later(mut info: ControllerInfo) -> ControllerInfo {
    info.later_release = true;
    info
}

static KNOWN: &[ControllerInfo] = &[
    // Started before the others, always with the manager's own credentials.
    c(
        "serviceaccount-token-controller",
        &["serviceaccount-token"],
        None,
        "--service-account-private-key-file",
    ),
    c(
        "endpoints-controller",
        &["endpoint"],
        Some("endpoint-controller"),
        "",
    ),
    c(
        "endpointslice-controller",
        &["endpointslice"],
        Some("endpointslice-controller"),
        "",
    ),
    c(
        "endpointslice-mirroring-controller",
        &["endpointslicemirroring"],
        Some("endpointslicemirroring-controller"),
        "",
    ),
    c(
        "replicationcontroller-controller",
        &["replicationcontroller"],
        Some("replication-controller"),
        "",
    ),
    c(
        "pod-garbage-collector-controller",
        &["podgc"],
        Some("pod-garbage-collector"),
        "",
    ),
    c(
        "resourcequota-controller",
        &["resourcequota"],
        Some("resourcequota-controller"),
        "",
    ),
    c(
        "namespace-controller",
        &["namespace"],
        Some("namespace-controller"),
        "",
    ),
    c(
        "serviceaccount-controller",
        &["serviceaccount"],
        Some("service-account-controller"),
        "",
    ),
    c(
        "garbage-collector-controller",
        &["garbagecollector"],
        Some("generic-garbage-collector"),
        "--enable-garbage-collector",
    ),
    c(
        "daemonset-controller",
        &["daemonset"],
        Some("daemon-set-controller"),
        "",
    ),
    c("job-controller", &["job"], Some("job-controller"), ""),
    c(
        "deployment-controller",
        &["deployment"],
        Some("deployment-controller"),
        "",
    ),
    c(
        "replicaset-controller",
        &["replicaset"],
        Some("replicaset-controller"),
        "",
    ),
    c(
        "horizontal-pod-autoscaler-controller",
        &["horizontalpodautoscaling"],
        Some("horizontal-pod-autoscaler"),
        "",
    ),
    c(
        "disruption-controller",
        &["disruption"],
        Some("disruption-controller"),
        "",
    ),
    c(
        "statefulset-controller",
        &["statefulset"],
        Some("statefulset-controller"),
        "",
    ),
    c(
        "cronjob-controller",
        &["cronjob"],
        Some("cronjob-controller"),
        "",
    ),
    c(
        "certificatesigningrequest-signing-controller",
        &["csrsigning"],
        Some("certificate-controller"),
        "--cluster-signing-cert-file",
    ),
    c(
        "certificatesigningrequest-approving-controller",
        &["csrapproving"],
        Some("certificate-controller"),
        "",
    ),
    c(
        "certificatesigningrequest-cleaner-controller",
        &["csrcleaner"],
        Some("certificate-controller"),
        "",
    ),
    c("ttl-controller", &["ttl"], Some("ttl-controller"), ""),
    off(
        "bootstrap-signer-controller",
        &["bootstrapsigner"],
        Some("bootstrap-signer"),
        "",
    ),
    off(
        "token-cleaner-controller",
        &["tokencleaner"],
        Some("token-cleaner"),
        "",
    ),
    c(
        "node-ipam-controller",
        &["nodeipam"],
        Some("node-controller"),
        "--allocate-node-cidrs",
    ),
    c(
        "node-lifecycle-controller",
        &["nodelifecycle"],
        Some("node-controller"),
        "",
    ),
    c(
        "service-lb-controller",
        &["service"],
        Some("service-controller"),
        "cloud",
    ),
    c(
        "node-route-controller",
        &["route"],
        Some("route-controller"),
        "cloud",
    ),
    c(
        "cloud-node-lifecycle-controller",
        &["cloud-node-lifecycle"],
        Some("node-controller"),
        "cloud",
    ),
    c(
        "persistentvolume-binder-controller",
        &["persistentvolume-binder"],
        Some("persistent-volume-binder"),
        "",
    ),
    c(
        "persistentvolume-attach-detach-controller",
        &["attachdetach"],
        Some("attachdetach-controller"),
        "",
    ),
    c(
        "persistentvolume-expander-controller",
        &["persistentvolume-expander"],
        Some("expand-controller"),
        "",
    ),
    c(
        "clusterrole-aggregation-controller",
        &["clusterrole-aggregation"],
        Some("clusterrole-aggregation-controller"),
        "",
    ),
    c(
        "persistentvolumeclaim-protection-controller",
        &["pvc-protection"],
        Some("pvc-protection-controller"),
        "",
    ),
    c(
        "persistentvolume-protection-controller",
        &["pv-protection"],
        Some("pv-protection-controller"),
        "",
    ),
    c(
        "ttl-after-finished-controller",
        &["ttl-after-finished"],
        Some("ttl-after-finished-controller"),
        "",
    ),
    c(
        "root-ca-certificate-publisher-controller",
        &["root-ca-cert-publisher"],
        Some("root-ca-cert-publisher"),
        "",
    ),
    c(
        "ephemeral-volume-controller",
        &["ephemeral-volume"],
        Some("ephemeral-volume-controller"),
        "",
    ),
    c(
        "storageversion-garbage-collector-controller",
        &["storage-version-gc"],
        Some("storage-version-garbage-collector"),
        "feature-gate",
    ),
    c(
        "resourceclaim-controller",
        &["resource-claim-controller"],
        Some("resource-claim-controller"),
        "feature-gate",
    ),
    c(
        "legacy-serviceaccount-token-cleaner-controller",
        &["legacy-service-account-token-cleaner"],
        Some("legacy-service-account-token-cleaner"),
        "feature-gate",
    ),
    c(
        "validatingadmissionpolicy-status-controller",
        &[],
        Some("validatingadmissionpolicy-status-controller"),
        "feature-gate",
    ),
    // Names introduced by later kube-controller-manager releases.
    later(c(
        "taint-eviction-controller",
        &[],
        Some("node-controller"),
        "",
    )),
    later(c(
        "service-cidr-controller",
        &[],
        Some("service-cidrs-controller"),
        "feature-gate",
    )),
    later(c(
        "storage-version-migrator-controller",
        &["svm"],
        Some("storage-version-migrator-controller"),
        "feature-gate",
    )),
    later(c(
        "volumeattributesclass-protection-controller",
        &[],
        Some("volumeattributesclass-protection-controller"),
        "feature-gate",
    )),
    later(off(
        "selinux-warning-controller",
        &[],
        Some("selinux-warning-controller"),
        "feature-gate",
    )),
    later(c(
        "kube-apiserver-serving-clustertrustbundle-publisher-controller",
        &[],
        Some("kube-apiserver-serving-clustertrustbundle-publisher"),
        "feature-gate",
    )),
    later(c(
        "device-taint-eviction-controller",
        &[],
        Some("device-taint-eviction-controller"),
        "feature-gate",
    )),
    later(c(
        "podcertificaterequest-cleaner-controller",
        &[],
        Some("podcertificaterequestcleaner"),
        "feature-gate",
    )),
];

/// Every controller name `--controllers` accepts.
pub fn known() -> &'static [ControllerInfo] {
    KNOWN
}

/// `name (alias, ...)` for every kube-controller-manager 1.28 controller, by canonical name;
/// what `--controllers` accepts, as `--help` and the unknown-name error list it.
pub fn described_names() -> Vec<String> {
    let mut v: Vec<&ControllerInfo> = KNOWN.iter().filter(|c| !c.later_release).collect();
    v.sort_by_key(|c| c.name);
    v.iter()
        .map(|c| match c.aliases {
            [] => c.name.to_string(),
            a => format!("{} ({})", c.name, a.join(", ")),
        })
        .collect()
}

/// The names from releases after 1.28 that `--controllers` accepts too.
pub fn later_names() -> Vec<&'static str> {
    let mut v: Vec<&str> = KNOWN
        .iter()
        .filter(|c| c.later_release)
        .map(|c| c.name)
        .collect();
    v.sort_unstable();
    v
}

/// `head` and then the items joined with ", ", wrapped at `width` columns, each line after the
/// first starting with `indent`.
pub fn wrap_list(head: &str, items: &[String], width: usize, indent: &str) -> String {
    let mut out = head.to_string();
    let mut line = head.len();
    for (i, item) in items.iter().enumerate() {
        let word = if i + 1 < items.len() {
            format!("{item},")
        } else {
            item.clone()
        };
        if line > 0 && line + 1 + word.len() > width {
            out.push('\n');
            out.push_str(indent);
            line = indent.len();
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(&word);
        line += word.len();
    }
    out
}

/// The table entry for a canonical name or an alias.
pub fn info(name: &str) -> Option<&'static ControllerInfo> {
    KNOWN
        .iter()
        .find(|c| c.name == name || c.aliases.contains(&name))
}

/// Canonical name for a canonical name or an alias.
pub fn canonical(name: &str) -> Option<&'static str> {
    info(name).map(|c| c.name)
}

/// A parsed `--controllers` list, with aliases already rewritten to canonical names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerSelection {
    /// Entries in command-line order: `*`, `name` or `-name` (canonical names).
    entries: Vec<String>,
}

impl Default for ControllerSelection {
    /// The default `--controllers=*`.
    fn default() -> Self {
        ControllerSelection {
            entries: vec!["*".to_string()],
        }
    }
}

impl ControllerSelection {
    /// Parse and validate the entries of `--controllers` (already split on commas).
    pub fn parse(list: &[String]) -> Result<Self> {
        let mut entries = Vec::with_capacity(list.len());
        let mut errors = Vec::new();
        for raw in list {
            if raw == "*" {
                entries.push(raw.clone());
                continue;
            }
            let (negated, name) = match raw.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, raw.as_str()),
            };
            match canonical(name) {
                Some(canon) if negated => entries.push(format!("-{canon}")),
                Some(canon) => entries.push(canon.to_string()),
                None => errors.push(format!("{name:?} is not in the list of known controllers")),
            }
        }
        if !errors.is_empty() {
            // Upstream's message, then what would have been accepted.
            return Err(Error::Config(format!(
                "{}\n{}",
                errors.join(", "),
                wrap_list(
                    "known controllers (short names in parentheses):",
                    &described_names(),
                    100,
                    "  "
                )
            )));
        }
        Ok(ControllerSelection { entries })
    }

    /// The entries, canonicalised, in order.
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// Whether the controller is enabled: an explicit `name` or `-name` decides (first match
    /// wins); otherwise `*` enables every controller that is not disabled by default; without
    /// `*` nothing else is enabled. Aliases are accepted too.
    pub fn is_enabled(&self, name: &str) -> bool {
        let Some(info) = info(name) else {
            return false;
        };
        let mut star = false;
        for entry in &self.entries {
            if entry == info.name {
                return true;
            }
            if entry.strip_prefix('-') == Some(info.name) {
                return false;
            }
            if entry == "*" {
                star = true;
            }
        }
        star && !info.disabled_by_default
    }

    /// Canonical names of all enabled controllers, in table order.
    pub fn enabled(&self) -> Vec<&'static str> {
        KNOWN
            .iter()
            .filter(|c| self.is_enabled(c.name))
            .map(|c| c.name)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(s: &str) -> ControllerSelection {
        let list: Vec<String> = s.split(',').map(str::to_string).collect();
        ControllerSelection::parse(&list).unwrap()
    }

    #[test]
    fn names_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for c in known() {
            assert!(seen.insert(c.name), "duplicate {}", c.name);
            for a in c.aliases {
                assert!(seen.insert(a), "duplicate alias {a}");
            }
        }
        assert_eq!(known().len(), 50);
    }

    #[test]
    fn names_for_people() {
        let names = described_names();
        assert_eq!(names.len(), 42);
        assert_eq!(names[0], "bootstrap-signer-controller (bootstrapsigner)");
        assert!(names.contains(&"validatingadmissionpolicy-status-controller".to_string()));
        assert_eq!(later_names().len(), 8);
        let w = wrap_list("x:", &["aa".into(), "bb".into(), "cc".into()], 10, "  ");
        assert_eq!(w, "x: aa, bb,\n  cc");
    }

    #[test]
    fn aliases_resolve() {
        assert_eq!(canonical("deployment"), Some("deployment-controller"));
        assert_eq!(
            canonical("deployment-controller"),
            Some("deployment-controller")
        );
        assert_eq!(
            canonical("svm"),
            Some("storage-version-migrator-controller")
        );
        assert_eq!(canonical("nope"), None);
    }

    #[test]
    fn star_and_default_off() {
        let s = ControllerSelection::default();
        assert!(s.is_enabled("deployment-controller"));
        assert!(!s.is_enabled("bootstrap-signer-controller"));
        assert!(!s.is_enabled("tokencleaner"));
        assert!(!s.is_enabled("selinux-warning-controller"));
        let s = sel("*,bootstrapsigner,tokencleaner");
        assert!(s.is_enabled("bootstrap-signer-controller"));
        assert!(s.is_enabled("token-cleaner-controller"));
        assert!(s.is_enabled("job"));
    }

    #[test]
    fn explicit_wins_in_order() {
        let s = sel("*,-service,-route,-cloud-node-lifecycle");
        assert!(!s.is_enabled("service-lb-controller"));
        assert!(!s.is_enabled("node-route-controller"));
        assert!(!s.is_enabled("cloud-node-lifecycle-controller"));
        assert!(s.is_enabled("node-lifecycle-controller"));
        let s = sel("deployment,-deployment-controller");
        assert!(s.is_enabled("deployment-controller"));
        let s = sel("-deployment,deployment");
        assert!(!s.is_enabled("deployment-controller"));
        let s = sel("deployment,replicaset");
        assert!(s.is_enabled("replicaset-controller"));
        assert!(!s.is_enabled("job-controller"));
        assert_eq!(
            s.enabled(),
            vec!["deployment-controller", "replicaset-controller"]
        );
    }

    #[test]
    fn unknown_names_are_errors() {
        let err = ControllerSelection::parse(&["*".into(), "-foo".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("\"foo\" is not in the list of known controllers\nknown controllers (short names in parentheses): bootstrap-signer-controller (bootstrapsigner),"),
            "{err}"
        );
        assert!(
            err.contains(" deployment-controller (deployment),"),
            "{err}"
        );
        assert!(err.lines().all(|l| l.len() <= 100), "{err}");
        assert!(ControllerSelection::parse(&["-*".into()]).is_err());
        assert!(ControllerSelection::parse(&["".into()]).is_err());
        assert!(ControllerSelection::parse(&[])
            .unwrap()
            .enabled()
            .is_empty());
    }
}
