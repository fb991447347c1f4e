//! `--feature-gates`: the gates kube-controller-manager v1.37 registers (Kubernetes' own,
//! the API server library's, component-base's logging and metrics gates, client-go's and
//! the controller manager's), each with its versioned specs, so a gate's default follows the
//! emulated version (1.34 to 1.37) as upstream's versioned feature gate does. Values are read
//! and refused in upstream's words.
//!
//! The table is `gates_v1_37.txt`, one gate a line: its name, then each spec as
//! `version:stage:default[:locked][:mc=version]` (stage empty for GA), then `needs=A,B`
//! when the gate depends on others.
//!
//! Controllers ask [`enabled`] (the process's gates, set once at start) or
//! `Config::gates`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::version::MajorMinor;

static TABLE: &str = include_str!("gates_v1_37.txt");

/// A gate's stage at a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    PreAlpha,
    Alpha,
    Beta,
    Ga,
    Deprecated,
}

/// One versioned spec of a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    pub version: MajorMinor,
    pub stage: Stage,
    pub default: bool,
    pub locked: bool,
    pub min_compatibility: Option<MajorMinor>,
}

/// A gate with its specs, oldest first, and the gates it depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    pub name: &'static str,
    pub specs: Vec<Spec>,
    pub needs: Vec<&'static str>,
}

fn mm(s: &str) -> MajorMinor {
    let (a, b) = s.split_once('.').unwrap_or((s, "0"));
    MajorMinor {
        major: a.parse().unwrap_or(0),
        minor: b.parse().unwrap_or(0),
    }
}

fn parse_spec(text: &'static str) -> Spec {
    let mut parts = text.split(':');
    let version = mm(parts.next().unwrap_or("0.0"));
    let stage = match parts.next().unwrap_or("") {
        "ALPHA" => Stage::Alpha,
        "BETA" => Stage::Beta,
        "DEPRECATED" => Stage::Deprecated,
        "PRE-ALPHA" => Stage::PreAlpha,
        _ => Stage::Ga,
    };
    let default = parts.next() == Some("true");
    let mut spec = Spec {
        version,
        stage,
        default,
        locked: false,
        min_compatibility: None,
    };
    for extra in parts {
        if extra == "locked" {
            spec.locked = true;
        } else if let Some(v) = extra.strip_prefix("mc=") {
            spec.min_compatibility = Some(mm(v));
        }
    }
    spec
}

/// Every gate, by name.
pub fn known() -> &'static BTreeMap<&'static str, Gate> {
    static KNOWN: OnceLock<BTreeMap<&'static str, Gate>> = OnceLock::new();
    KNOWN.get_or_init(|| {
        let mut out = BTreeMap::new();
        for line in TABLE
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        {
            let mut words = line.split_whitespace();
            let Some(name) = words.next() else { continue };
            let mut gate = Gate {
                name,
                specs: Vec::new(),
                needs: Vec::new(),
            };
            for w in words {
                match w.strip_prefix("needs=") {
                    Some(list) => gate.needs = list.split(',').collect(),
                    None => gate.specs.push(parse_spec(w)),
                }
            }
            out.insert(name, gate);
        }
        out
    })
}

const PRE_ALPHA: Spec = Spec {
    version: MajorMinor { major: 0, minor: 0 },
    stage: Stage::PreAlpha,
    default: false,
    locked: false,
    min_compatibility: None,
};

impl Gate {
    /// The spec in force at the emulated and min-compatibility versions (upstream's
    /// `featureSpecAtEmulationAndMinCompatVersion`): the newest one not after the emulated
    /// version whose own min-compatibility version is met; pre-alpha before the first.
    pub fn at(&self, emulated: MajorMinor, min_compat: MajorMinor) -> Spec {
        self.specs
            .iter()
            .rev()
            .find(|s| s.version <= emulated && s.min_compatibility.is_none_or(|m| min_compat >= m))
            .copied()
            .unwrap_or(PRE_ALPHA)
    }
}

/// The resolved gates of a process: every known gate's value at its versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureGates {
    pub emulated: MajorMinor,
    pub min_compatibility: MajorMinor,
    /// The values set on the command line (`name -> value`), as given.
    pub set: BTreeMap<String, bool>,
    values: BTreeMap<&'static str, bool>,
}

impl Default for FeatureGates {
    /// v1.37's defaults, nothing set.
    fn default() -> Self {
        let e = super::version::VersionFlags::default()
            .effective()
            .expect("the binary's own version is valid");
        FeatureGates::resolve(&BTreeMap::new(), e.0, e.1).expect("defaults are valid")
    }
}

/// `--feature-gates` occurrences as upstream's flag reads them: comma-separated
/// `[component:]Name=value` items (component `kube` or none, not both), later values
/// winning. Returns the name -> value map.
pub fn parse_flag(values: &[String]) -> Result<BTreeMap<String, bool>, String> {
    let (mut plain, mut kube, mut other) = (Vec::new(), Vec::new(), None);
    for pair in values.iter().flat_map(|v| v.split(',')) {
        if pair.is_empty() {
            continue;
        }
        match pair.split_once(':') {
            None => plain.push(pair.trim()),
            Some((c, v)) if c.trim() == "kube" => kube.push(v.trim()),
            Some((c, _)) if c.trim().is_empty() => {
                plain.push(pair.split_once(':').map_or("", |p| p.1).trim())
            }
            Some((c, _)) => {
                other.get_or_insert(c.trim().to_string());
            }
        }
    }
    if !plain.is_empty() && !kube.is_empty() {
        return Err("set kube feature gates with default empty prefix or kube: prefix consistently, do not mix use".to_string());
    }
    if let Some(c) = other {
        return Err(format!("component not registered: {c}"));
    }
    let mut m = BTreeMap::new();
    for item in plain.into_iter().chain(kube) {
        if item.is_empty() {
            continue;
        }
        let Some((k, v)) = item.split_once('=') else {
            return Err(format!("missing bool value for {}", item.trim()));
        };
        let (k, v) = (k.trim(), v.trim());
        let b = crate::compat::parse::parse_go_bool(v)
            .map_err(|e| format!("invalid value of {k}={v}, err: {e}"))?;
        m.insert(k.to_string(), b);
    }
    Ok(m)
}

/// Go's `errors.NewAggregate` text: one error as itself, several in brackets.
fn aggregate(mut errs: Vec<String>) -> Result<(), String> {
    match errs.len() {
        0 => Ok(()),
        1 => Err(errs.remove(0)),
        _ => Err(format!("[{}]", errs.join(", "))),
    }
}

impl FeatureGates {
    /// The gates at these versions with these values set, checked as upstream checks them:
    /// an unknown name, a value against a locked default, a pre-alpha gate, then the
    /// dependencies of every enabled gate.
    pub fn resolve(
        set: &BTreeMap<String, bool>,
        emulated: MajorMinor,
        min_compatibility: MajorMinor,
    ) -> Result<FeatureGates, String> {
        let known = known();
        let mut errs = Vec::new();
        let mut explicit: BTreeMap<&'static str, bool> = BTreeMap::new();
        let mut all = [None, None];
        for (k, &v) in set {
            let Some(gate) = known.get(k.as_str()) else {
                continue;
            };
            let spec = gate.at(emulated, min_compatibility);
            if spec.locked && spec.default != v {
                errs.push(format!(
                    "cannot set feature gate {k} to {v}, feature is locked to {}",
                    spec.default
                ));
                continue;
            }
            match gate.name {
                "AllAlpha" => all[0] = Some(v),
                "AllBeta" => all[1] = Some(v),
                _ if spec.stage == Stage::PreAlpha => {
                    errs.push(format!(
                        "cannot set feature gate {k} to {v}, feature is PreAlpha at emulated version {emulated}, min compatibility version {min_compatibility}"
                    ));
                    continue;
                }
                _ => {}
            }
            explicit.insert(gate.name, v);
        }
        // Upstream stops at the first unknown name (its map order decides which errors come
        // before it).
        if let Some(k) = set.keys().find(|k| !known.contains_key(k.as_str())) {
            errs.push(format!("unrecognized feature gate: {k}"));
        }
        aggregate(std::mem::take(&mut errs))?;
        let mut values = BTreeMap::new();
        for (name, gate) in known {
            let spec = gate.at(emulated, min_compatibility);
            let by_all = match spec.stage {
                Stage::Alpha if *name != "AllAlpha" => all[0],
                Stage::Beta if *name != "AllBeta" => all[1],
                _ => None,
            };
            let v = explicit
                .get(name)
                .copied()
                .or(by_all)
                .unwrap_or(spec.default);
            values.insert(*name, v);
        }
        for (name, gate) in known {
            if !values[name] || gate.needs.is_empty() {
                continue;
            }
            let off: Vec<&str> = gate
                .needs
                .iter()
                .copied()
                .filter(|d| !values.get(d).copied().unwrap_or(false))
                .collect();
            if !off.is_empty() {
                errs.push(format!(
                    "{name} is enabled, but depends on features that are disabled: [{}]",
                    off.join(" ")
                ));
            }
        }
        aggregate(errs)?;
        Ok(FeatureGates {
            emulated,
            min_compatibility,
            set: set.clone(),
            values,
        })
    }

    /// Whether a gate is on. A name the table does not have is off (and a bug: debug builds
    /// panic, as upstream's `Enabled` does for an unregistered gate).
    pub fn enabled(&self, name: &str) -> bool {
        match self.values.get(name) {
            Some(v) => *v,
            None => {
                debug_assert!(false, "feature gate {name:?} is not registered");
                false
            }
        }
    }

    /// Lines to log for the gates set on the command line that upstream warns about: GA and
    /// deprecated gates, which are removed in a later release.
    pub fn warnings(&self) -> Vec<String> {
        let known = known();
        self.set
            .iter()
            .filter_map(|(k, v)| {
                let spec = known
                    .get(k.as_str())?
                    .at(self.emulated, self.min_compatibility);
                let what = match spec.stage {
                    Stage::Ga => "GA",
                    Stage::Deprecated => "deprecated",
                    _ => return None,
                };
                Some(format!(
                    "setting {what} feature gate {k}={v}; it will be removed in a future release"
                ))
            })
            .collect()
    }
}

impl Stage {
    /// The stage as upstream's metrics label it (GA is empty).
    pub fn label(self) -> &'static str {
        match self {
            Stage::PreAlpha => "PRE-ALPHA",
            Stage::Alpha => "ALPHA",
            Stage::Beta => "BETA",
            Stage::Ga => "",
            Stage::Deprecated => "DEPRECATED",
        }
    }
}

impl FeatureGates {
    /// `kubernetes_feature_enabled`: every gate that exists at the emulated version, with its
    /// stage there and whether it is on, as upstream's feature gate reports itself.
    pub fn metric_family(&self) -> crate::metrics::Family {
        let mut f = crate::metrics::Family::new(
            "kubernetes_feature_enabled",
            "[BETA] This metric records the data about the stage and enablement of a k8s feature.",
            crate::metrics::MetricType::Gauge,
        );
        for (name, gate) in known() {
            let spec = gate.at(self.emulated, self.min_compatibility);
            if spec.stage == Stage::PreAlpha {
                continue;
            }
            let on = if self.enabled(name) { 1.0 } else { 0.0 };
            f.push(&[("name", name), ("stage", spec.stage.label())], on);
        }
        f
    }
}

static PROCESS: OnceLock<FeatureGates> = OnceLock::new();

/// Make `gates` the process's gates (at start, once the emulated version is known) and
/// report them on `/metrics`, with `kubernetes_build_info` and `version_info`. Later calls are ignored.
pub fn install(gates: FeatureGates) {
    let families = vec![
        gates.metric_family(),
        crate::metrics::build_info(super::version::BINARY_MINOR),
        crate::metrics::version_info(
            &format!("1.{}", super::version::BINARY_MINOR),
            &gates.emulated.to_string(),
            &gates.min_compatibility.to_string(),
        ),
    ];
    if PROCESS.set(gates).is_ok() {
        crate::metrics::register_collector(
            "feature_gates",
            std::sync::Arc::new(move || families.clone()),
        );
    }
}

/// Whether a gate is on for this process: the installed gates, else v1.37's defaults.
pub fn enabled(name: &str) -> bool {
    static DEFAULTS: OnceLock<FeatureGates> = OnceLock::new();
    PROCESS
        .get()
        .unwrap_or_else(|| DEFAULTS.get_or_init(FeatureGates::default))
        .enabled(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minor: u32, flag: &str) -> Result<FeatureGates, String> {
        let set = parse_flag(&[flag.to_string()])?;
        let v = MajorMinor::kube(minor);
        let mc = super::super::version::default_min_compatibility(v);
        FeatureGates::resolve(&set, v, mc)
    }

    #[test]
    fn defaults_follow_the_emulated_version() {
        let g = |minor: u32, name: &str| at(minor, "").unwrap().enabled(name);
        assert!(known().len() > 250);
        // Beta off in 1.35 and 1.36, GA in 1.37.
        assert!(g(37, "StorageVersionMigrator"));
        assert!(!g(36, "StorageVersionMigrator"));
        assert!(!g(34, "StorageVersionMigrator"));
        // A gate v1.37 introduced is pre-alpha (off) before it.
        assert!(!g(35, "APIServerWebhookAuthenticationToken"));
        assert!(g(34, "SeparateTaintEvictionController"));
        assert!(g(34, "VolumeAttributesClass"));
        assert!(g(37, "InformerResourceVersion") && !g(34, "InformerResourceVersion"));
        assert!(!g(37, "GenericWorkload"));
        assert_eq!(FeatureGates::default(), at(37, "").unwrap());
        assert!(enabled("SeparateTaintEvictionController"));
    }

    #[test]
    fn values_as_upstream_reads_them() {
        let on = at(37, "GenericWorkload=true,kube:x=1").unwrap_err();
        assert_eq!(
            on,
            "set kube feature gates with default empty prefix or kube: prefix consistently, do not mix use"
        );
        let g = at(37, "kube:GenericWorkload=true, WorkloadWithJob = false").unwrap_err();
        assert!(g.starts_with("set kube"), "{g}");
        let g = at(
            37,
            "kube:GenericWorkload=true,kube:StorageVersionMigrator=f",
        )
        .unwrap();
        assert!(g.enabled("GenericWorkload") && !g.enabled("StorageVersionMigrator"));
        assert_eq!(
            g.set.keys().collect::<Vec<_>>(),
            ["GenericWorkload", "StorageVersionMigrator"]
        );
        assert_eq!(
            at(37, "Foo=true").unwrap_err(),
            "unrecognized feature gate: Foo"
        );
        // Gone: GA and then removed before v1.37.
        assert_eq!(
            at(37, "JobPodReplacementPolicy=false").unwrap_err(),
            "unrecognized feature gate: JobPodReplacementPolicy"
        );
        assert_eq!(
            at(37, "JobManagedBy=maybe").unwrap_err(),
            "invalid value of JobManagedBy=maybe, err: strconv.ParseBool: parsing \"maybe\": invalid syntax"
        );
        assert_eq!(at(37, "Foo").unwrap_err(), "missing bool value for Foo");
        assert_eq!(
            at(37, "wardle:Foo=true").unwrap_err(),
            "component not registered: wardle"
        );
    }

    #[test]
    fn locked_pre_alpha_and_dependencies() {
        assert_eq!(
            at(37, "JobManagedBy=false").unwrap_err(),
            "cannot set feature gate JobManagedBy to false, feature is locked to true"
        );
        // Locked only from 1.35 on.
        assert!(!at(34, "JobManagedBy=false")
            .unwrap()
            .enabled("JobManagedBy"));
        assert_eq!(
            at(37, "JobManagedBy=false,Foo=true").unwrap_err(),
            "[cannot set feature gate JobManagedBy to false, feature is locked to true, unrecognized feature gate: Foo]"
        );
        assert_eq!(
            at(35, "APIServerWebhookAuthenticationToken=true").unwrap_err(),
            "cannot set feature gate APIServerWebhookAuthenticationToken to true, feature is PreAlpha at emulated version 1.35, min compatibility version 1.34"
        );
        let e = at(37, "AllAlpha=true").unwrap_err();
        for f in [
            "WorkloadWithJob",
            "TopologyAwareWorkloadScheduling",
            "PodGroupPreemptionPolicy",
            "CompositePodGroup",
        ] {
            assert!(
                e.contains(&format!(
                    "{f} is enabled, but depends on features that are disabled: [GenericWorkload]"
                )),
                "{e}"
            );
        }
        let all = at(37, "AllAlpha=true,AllBeta=true").unwrap();
        assert!(
            all.enabled("GenericWorkload")
                && all.enabled("ControllerManagerReleaseLeaderElectionLockOnExit")
        );
        // An explicit value beats AllAlpha.
        let g = at(
            37,
            "AllAlpha=true,AllBeta=true,ControllerManagerReleaseLeaderElectionLockOnExit=false",
        )
        .unwrap();
        assert!(!g.enabled("ControllerManagerReleaseLeaderElectionLockOnExit"));
        // As kube-controller-manager v1.37.2 reported them with --emulated-version=1.35
        // --feature-gates=GenericWorkload=true: 189 gates, the pre-alpha ones left out.
        let m = at(35, "GenericWorkload=true").unwrap().metric_family();
        assert_eq!(m.samples.len(), 189);
        let value = |name: &str| {
            m.samples
                .iter()
                .find(|s| s.labels[0].1 == name)
                .map(|s| (s.labels[1].1.clone(), s.value.clone()))
        };
        use crate::metrics::SampleValue::Scalar;
        assert_eq!(
            value("GenericWorkload"),
            Some(("ALPHA".into(), Scalar(1.0)))
        );
        assert_eq!(
            value("StorageVersionMigrator"),
            Some(("BETA".into(), Scalar(0.0)))
        );
        assert_eq!(
            value("AggregatedDiscoveryRemoveBetaType"),
            Some(("DEPRECATED".into(), Scalar(1.0)))
        );
        assert_eq!(value("APIServerWebhookAuthenticationToken"), None);
        assert_eq!(
            m.samples
                .iter()
                .filter(|s| s.labels[1].1.is_empty())
                .count(),
            37
        );
        assert_eq!(
            at(37, "JobManagedBy=true").unwrap().warnings(),
            ["setting GA feature gate JobManagedBy=true; it will be removed in a future release"]
        );
    }
}
