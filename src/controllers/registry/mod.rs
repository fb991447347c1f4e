//! The controller table: every controller is described once, in `table.rs`: its upstream
//! name and aliases, whether `*` enables it, its ServiceAccount, and for the ones edgekcm
//! runs, everything fixed about how it runs (work-queue name, Event source, `--concurrent-*`
//! flag or fixed worker count, retries, client rates) and the function that builds it. What
//! `--controllers` accepts, which controllers run, their identities and the `Settings` the
//! manager runs them with all come from it; the `Controller` trait is left with behaviour.
//!
//! Names follow kube-controller-manager v1.37: the long `*-controller` names are canonical and
//! the short historical names are aliases. Every name v1.37 knows is accepted, those edgekcm
//! does not run yet too (start-up names them); the feature gates a controller needs are in
//! `gated.rs`, evaluated at the emulated version.

use crate::api::kubeconfig::RestConfig;
use crate::config::{Config, ControllerSelection};
use crate::controller::{BuildCx, Runnable, Settings};
use crate::error::{Error, Result};

mod gated;
mod table;
pub use gated::required_gates;
use table::KNOWN;

/// How a row builds its controller (see `crate::controller::Build`).
pub type Build = crate::controller::Build<Config>;

/// A path tree on the secure port served for a controller when it is enabled (mounted before
/// the controller runs: it answers for itself until then).
pub type DebugRoute = fn() -> (&'static str, crate::server::Handler);

/// One entry of the controller table.
#[derive(Clone, Copy)]
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
    /// A name introduced after kube-controller-manager 1.28 (for the record: every row is a
    /// v1.37 name).
    pub later_release: bool,
    /// Upstream's work-queue name (the `name` label of the `workqueue_*` metrics); empty
    /// when the manager keeps no queue for it (see `Settings::queue`).
    pub queue: &'static str,
    /// The Event source component (upstream's recorder name); its name unless set.
    pub event_component: &'static str,
    /// Its `--concurrent-*-syncs` flag (without dashes), if upstream has one.
    pub workers_flag: Option<&'static str>,
    /// Its worker count without such a flag (upstream's fixed count); 1 unless set.
    pub workers: usize,
    /// Upstream's `maxRetries` of a failing key, if it has one.
    pub max_retries: Option<u32>,
    /// Factors on `--kube-api-qps` and `--kube-api-burst` for its client; 1 unless set.
    pub qps_factor: f32,
    pub burst_factor: u32,
    /// How edgekcm builds it; None while edgekcm does not have it.
    pub build: Option<Build>,
    /// Its debug paths on the secure port, if any.
    pub debug: Option<DebugRoute>,
}

impl std::fmt::Debug for ControllerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerInfo")
            .field("name", &self.name)
            .field("workers_flag", &self.workers_flag)
            .field("implemented", &self.build.is_some())
            .finish_non_exhaustive()
    }
}

impl ControllerInfo {
    /// Whether edgekcm has this controller.
    pub fn implemented(&self) -> bool {
        self.build.is_some()
    }

    /// What the manager runs it with: this row, with the worker count of its flag.
    pub fn settings(&self, cfg: &Config) -> Settings {
        Settings {
            name: self.name,
            queue: self.queue,
            event_component: self.event_component,
            workers: self
                .workers_flag
                .map_or(self.workers, |f| cfg.concurrency(f)),
            max_retries: self.max_retries,
            qps_factor: self.qps_factor,
            burst_factor: self.burst_factor,
        }
    }

    /// Build it with the worker count of its flag.
    pub fn build(&self, cfg: &Config, rest: &RestConfig) -> Result<Option<Runnable>> {
        let Some(build) = self.build else {
            return Ok(None);
        };
        let workers = self.settings(cfg).workers;
        build(&BuildCx { cfg, rest, workers })
    }
}

/// The controllers edgekcm has, in table order.
pub fn implemented() -> impl Iterator<Item = &'static ControllerInfo> {
    KNOWN.iter().filter(|c| c.implemented())
}

/// Canonical names of the controllers edgekcm has.
pub fn implemented_names() -> Vec<&'static str> {
    implemented().map(|c| c.name).collect()
}

/// Every controller name `--controllers` accepts.
pub fn known() -> &'static [ControllerInfo] {
    KNOWN
}

/// `name (alias, ...)` for every kube-controller-manager v1.37 controller, by canonical name;
/// what `--controllers` accepts, as `--help` and the unknown-name error list it.
pub fn described_names() -> Vec<String> {
    let mut v: Vec<&ControllerInfo> = KNOWN.iter().collect();
    crate::sort::sort_by_key(&mut v[..], |c| c.name);
    v.iter()
        .map(|c| match c.aliases {
            [] => c.name.to_string(),
            a => format!("{} ({})", c.name, a.join(", ")),
        })
        .collect()
}

/// The names v1.37 knows that edgekcm does not run yet, sorted.
pub fn not_yet_names() -> Vec<&'static str> {
    let mut v: Vec<&str> = KNOWN
        .iter()
        .filter(|c| !c.implemented())
        .map(|c| c.name)
        .collect();
    crate::sort::sort(&mut v[..]);
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
            // Upstream's message (an aggregate of several in brackets), then what would have
            // been accepted.
            let head = match errors.len() {
                1 => errors.remove(0),
                _ => format!("[{}]", errors.join(", ")),
            };
            return Err(Error::Config(format!(
                "{head}\n{}",
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
    fn every_row_builds_its_own_controller_with_a_real_flag_and_identity() {
        let (mut cfg, rest) = (Config::default(), RestConfig::default());
        // The CSR signer runs only with a CA to sign with.
        let ca_dir = crate::controllers::certificates::signer::test_ca_files();
        cfg.cluster_signing.cert_file = Some(ca_dir.join("ca.crt"));
        cfg.cluster_signing.key_file = Some(ca_dir.join("ca.key"));
        // The ClusterTrustBundle publisher has a CA to publish.
        cfg.sa_controller.root_ca_file = Some(ca_dir.join("ca.crt"));
        // Node IPAM starts only when asked to.
        cfg.kube_cloud_shared.allocate_node_cidrs = true;
        cfg.kube_cloud_shared.cluster_cidrs = vec!["10.244.0.0/16".parse().unwrap()];
        let flags: Vec<&str> = crate::config::CONCURRENT_SYNCS
            .iter()
            .map(|(n, _)| *n)
            .collect();
        for row in known() {
            if let Some(f) = row.workers_flag {
                assert!(flags.contains(&f), "{}: no flag --{f}", row.name);
            }
        }
        let built: Vec<&str> = implemented()
            .filter_map(|row| {
                let Some(c) = row.build(&cfg, &rest).expect("builds") else {
                    // Off without the flag it needs, as upstream.
                    assert!(row.needs.starts_with("--"), "{} did not build", row.name);
                    return None;
                };
                assert!(
                    row.sa_name.is_some_and(|s| !s.is_empty()),
                    "{}: no ServiceAccount for --use-service-account-credentials",
                    row.name
                );
                match &c {
                    Runnable::Reconciles { ctrl, .. } => {
                        // Upstream's range allocator and pool status queue have no name.
                        let unnamed = [
                            "node-ipam-controller",
                            "resourcepoolstatusrequest-controller",
                        ];
                        if !unnamed.contains(&row.name) {
                            assert!(!row.queue.is_empty(), "{}: no queue name", row.name);
                        }
                        assert!(!ctrl.watches().is_empty(), "{}: watches nothing", row.name);
                    }
                    // It names its own queues.
                    Runnable::Drives(_) => assert_eq!(row.queue, "", "{}", row.name),
                }
                Some(row.name)
            })
            .collect();
        assert_eq!(built.len(), 48, "{built:?}");
        let _ = std::fs::remove_dir_all(&ca_dir);
        // Worker counts come from the row's flag.
        let mut cfg = Config::default();
        cfg.concurrent_syncs
            .insert("concurrent-deployment-syncs", 9);
        let row = info("deployment").unwrap();
        assert_eq!(row.settings(&cfg).workers, 9);
        assert!(matches!(
            row.build(&cfg, &rest).unwrap().unwrap(),
            Runnable::Reconciles { .. }
        ));
        // Without a flag: upstream's fixed count.
        assert_eq!(info("ttl").unwrap().settings(&cfg).workers, 5);
        // The flags v1.37 added for the daemonset and disruption controllers.
        assert_eq!(info("daemonset").unwrap().settings(&cfg).workers, 2);
        assert_eq!(info("disruption").unwrap().settings(&cfg).workers, 1);
        cfg.concurrent_syncs.insert("concurrent-daemonset-syncs", 4);
        cfg.concurrent_syncs
            .insert("concurrent-disruption-syncs", 3);
        assert_eq!(info("daemonset").unwrap().settings(&cfg).workers, 4);
        assert_eq!(info("disruption").unwrap().settings(&cfg).workers, 3);
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
        assert_eq!(known().len(), 49);
    }

    /// kube-controller-manager v1.37.2's controllers: name, aliases, disabled by default
    /// (its `NewControllerDescriptors`).
    const V1_37: &[(&str, &[&str], bool)] = &[
        ("bootstrap-signer-controller", &["bootstrapsigner"], true),
        (
            "certificatesigningrequest-approving-controller",
            &["csrapproving"],
            false,
        ),
        (
            "certificatesigningrequest-cleaner-controller",
            &["csrcleaner"],
            false,
        ),
        (
            "certificatesigningrequest-signing-controller",
            &["csrsigning"],
            false,
        ),
        (
            "clusterrole-aggregation-controller",
            &["clusterrole-aggregation"],
            false,
        ),
        ("cronjob-controller", &["cronjob"], false),
        ("daemonset-controller", &["daemonset"], false),
        ("deployment-controller", &["deployment"], false),
        ("device-taint-eviction-controller", &[], false),
        ("disruption-controller", &["disruption"], false),
        ("endpoints-controller", &["endpoint"], false),
        ("endpointslice-controller", &["endpointslice"], false),
        (
            "endpointslice-mirroring-controller",
            &["endpointslicemirroring"],
            false,
        ),
        ("ephemeral-volume-controller", &["ephemeral-volume"], false),
        ("garbage-collector-controller", &["garbagecollector"], false),
        (
            "horizontal-pod-autoscaler-controller",
            &["horizontalpodautoscaling"],
            false,
        ),
        ("job-controller", &["job"], false),
        (
            "kube-apiserver-serving-clustertrustbundle-publisher-controller",
            &[],
            false,
        ),
        (
            "legacy-serviceaccount-token-cleaner-controller",
            &["legacy-service-account-token-cleaner"],
            false,
        ),
        ("namespace-controller", &["namespace"], false),
        ("node-ipam-controller", &["nodeipam"], false),
        ("node-lifecycle-controller", &["nodelifecycle"], false),
        (
            "persistentvolume-attach-detach-controller",
            &["attachdetach"],
            false,
        ),
        (
            "persistentvolume-binder-controller",
            &["persistentvolume-binder"],
            false,
        ),
        (
            "persistentvolume-expander-controller",
            &["persistentvolume-expander"],
            false,
        ),
        (
            "persistentvolume-protection-controller",
            &["pv-protection"],
            false,
        ),
        (
            "persistentvolumeclaim-protection-controller",
            &["pvc-protection"],
            false,
        ),
        ("pod-garbage-collector-controller", &["podgc"], false),
        ("podcertificaterequest-cleaner-controller", &[], false),
        ("podgroup-protection-controller", &[], false),
        ("replicaset-controller", &["replicaset"], false),
        (
            "replicationcontroller-controller",
            &["replicationcontroller"],
            false,
        ),
        (
            "resourceclaim-controller",
            &["resource-claim-controller"],
            false,
        ),
        ("resourcepoolstatusrequest-controller", &[], false),
        ("resourcequota-controller", &["resourcequota"], false),
        (
            "root-ca-certificate-publisher-controller",
            &["root-ca-cert-publisher"],
            false,
        ),
        ("selinux-warning-controller", &[], true),
        ("service-cidr-controller", &[], false),
        ("serviceaccount-controller", &["serviceaccount"], false),
        (
            "serviceaccount-token-controller",
            &["serviceaccount-token"],
            false,
        ),
        ("statefulset-controller", &["statefulset"], false),
        ("storage-version-migrator-controller", &["svm"], false),
        (
            "storageversion-garbage-collector-controller",
            &["storage-version-gc"],
            false,
        ),
        ("taint-eviction-controller", &[], false),
        ("token-cleaner-controller", &["tokencleaner"], true),
        (
            "ttl-after-finished-controller",
            &["ttl-after-finished"],
            false,
        ),
        ("ttl-controller", &["ttl"], false),
        ("validatingadmissionpolicy-status-controller", &[], false),
        ("volumeattributesclass-protection-controller", &[], false),
    ];

    #[test]
    fn the_names_of_v1_37() {
        let mut ours: Vec<(&str, &[&str], bool)> = known()
            .iter()
            .map(|c| (c.name, c.aliases, c.disabled_by_default))
            .collect();
        ours.sort_by_key(|c| c.0);
        assert_eq!(ours, V1_37);
        // The cloud controllers 1.28 had are unknown names in v1.37.
        for gone in [
            "service",
            "route",
            "cloud-node-lifecycle",
            "service-lb-controller",
        ] {
            let err = ControllerSelection::parse(&[gone.into()])
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with(&format!(
                    "{gone:?} is not in the list of known controllers\n"
                )),
                "{err}"
            );
        }
    }

    #[test]
    fn names_for_people() {
        let names = described_names();
        assert_eq!(names.len(), 49);
        assert_eq!(names[0], "bootstrap-signer-controller (bootstrapsigner)");
        assert!(names.contains(&"validatingadmissionpolicy-status-controller".to_string()));
        assert_eq!(not_yet_names().len(), 49 - implemented().count());
        assert!(
            not_yet_names().contains(&"taint-eviction-controller")
                || info("taint-eviction-controller").unwrap().implemented()
        );
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
        let s = sel("*,-ttl,-svm,-taint-eviction-controller");
        assert!(!s.is_enabled("ttl-controller"));
        assert!(!s.is_enabled("storage-version-migrator-controller"));
        assert!(!s.is_enabled("taint-eviction-controller"));
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
        let two = ControllerSelection::parse(&["-foo".into(), "bar".into()])
            .unwrap_err()
            .to_string();
        assert!(
            two.starts_with("[\"foo\" is not in the list of known controllers, \"bar\" is not in the list of known controllers]\n"),
            "{two}"
        );
        assert!(ControllerSelection::parse(&["-*".into()]).is_err());
        assert!(ControllerSelection::parse(&["".into()]).is_err());
        assert!(ControllerSelection::parse(&[])
            .unwrap()
            .enabled()
            .is_empty());
    }
}
