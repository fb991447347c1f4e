//! The families Kubernetes' metrics framework adds to every component: `kubernetes_build_info`,
//! the registry's own counters (`registered_metrics_total` and friends) and the process'
//! network bytes (`process_network_*_bytes_total`, from `/proc/self/net/dev`).

use super::{Family, MetricType};

/// The Go platform name of the machine edgekcm was built for (`linux/amd64`).
pub fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "riscv64" => "riscv64",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

/// `kubernetes_build_info`: edgekcm's own version as `git_version`, the Kubernetes minor it
/// behaves as in `major`/`minor`, `rustc` as compiler and no Go version.
pub fn build_info(kube_minor: u32) -> Family {
    let mut f = Family::new(
        "kubernetes_build_info",
        "[BETA] A metric with a constant '1' value labeled by major, minor, git version, git \
         commit, git tree state, build date, Go version, and compiler from which Kubernetes was \
         built, and platform on which it is running.",
        MetricType::Gauge,
    );
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    let minor = kube_minor.to_string();
    let platform = platform();
    f.push(
        &[
            ("build_date", ""),
            ("compiler", "rustc"),
            (
                "git_commit",
                option_env!("EDGEKCM_GIT_COMMIT").unwrap_or(""),
            ),
            ("git_tree_state", ""),
            ("git_version", &version),
            ("go_version", ""),
            ("major", "1"),
            ("minor", &minor),
            ("platform", &platform),
        ],
        1.0,
    );
    f
}

/// `version_info{binary,component="kube",emulation,min_compat}`: the compatibility versions
/// (KEP-4330) the process runs with.
pub fn version_info(binary: &str, emulation: &str, min_compat: &str) -> Family {
    let mut f = Family::alpha(
        "version_info",
        "Provides the compatibility version info of the component. The component label is the \
         name of the component, usually kube, but is relevant for aggregated-apiservers.",
        MetricType::Gauge,
    );
    f.push(
        &[
            ("binary", binary),
            ("component", "kube"),
            ("emulation", emulation),
            ("min_compat", min_compat),
        ],
        1.0,
    );
    f
}

/// The stability level a family's help text starts with (`[ALPHA] ...`), if any.
fn stability(help: &str) -> Option<&str> {
    let rest = help.strip_prefix('[')?;
    let level = &rest[..rest.find(']')?];
    matches!(level, "ALPHA" | "BETA" | "STABLE" | "INTERNAL").then_some(level)
}

/// `registered_metrics_total{deprecated_version,stability_level}` counted over `families`
/// (the ones of the metrics framework, known by their `[LEVEL]` help prefix), with
/// `disabled_metrics_total`, `hidden_metrics_total` and
/// `cardinality_enforcement_unexpected_categorizations_total` (none of each here).
pub fn registry_families<'a>(families: impl Iterator<Item = &'a Family>) -> Vec<Family> {
    let mut levels: std::collections::BTreeMap<&str, usize> = Default::default();
    for f in families {
        if let Some(l) = stability(&f.help) {
            *levels.entry(l).or_default() += 1;
        }
    }
    // This family and the three below count themselves, as upstream's registry does.
    *levels.entry("BETA").or_default() += 3;
    *levels.entry("ALPHA").or_default() += 1;
    let mut registered = Family::new(
        "registered_metrics_total",
        "[BETA] The count of registered metrics broken by stability level and deprecation \
         version.",
        MetricType::Counter,
    );
    for (level, n) in &levels {
        registered.push(
            &[("deprecated_version", ""), ("stability_level", level)],
            *n as f64,
        );
    }
    let zero = |name: &str, help: &str| {
        let mut f = Family::new(name, help, MetricType::Counter);
        f.push(&[], 0.0);
        f
    };
    vec![
        registered,
        zero(
            "disabled_metrics_total",
            "[BETA] The count of disabled metrics.",
        ),
        zero(
            "hidden_metrics_total",
            "[BETA] The count of hidden metrics.",
        ),
        zero(
            "cardinality_enforcement_unexpected_categorizations_total",
            "[ALPHA] The count of unexpected categorizations during cardinality enforcement.",
        ),
    ]
}

/// Received and sent bytes summed over the interfaces of `/proc/<pid>/net/dev` (the
/// network namespace the process runs in, as Prometheus' process collector reads it).
pub fn parse_net_dev(dev: &str) -> (f64, f64) {
    let (mut rx, mut tx) = (0.0, 0.0);
    for line in dev.lines().skip(2) {
        let Some((_, counters)) = line.split_once(':') else {
            continue;
        };
        let f: Vec<&str> = counters.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        rx += num(0);
        tx += num(8);
    }
    (rx, tx)
}

/// `process_network_receive_bytes_total` and `process_network_transmit_bytes_total`.
pub fn network_families() -> Vec<Family> {
    let Ok(dev) = std::fs::read_to_string("/proc/self/net/dev") else {
        return Vec::new();
    };
    let (rx, tx) = parse_net_dev(&dev);
    let one = |name: &str, help: &str, v: f64| {
        let mut f = Family::new(name, help, MetricType::Counter);
        f.push(&[], v);
        f
    };
    vec![
        one(
            "process_network_receive_bytes_total",
            "Number of bytes received by the process over the network.",
            rx,
        ),
        one(
            "process_network_transmit_bytes_total",
            "Number of bytes sent by the process over the network.",
            tx,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_dev_sums_every_interface() {
        let dev = "Inter-|   Receive                                                |  Transmit\n \
             face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
             lo: 1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n  \
             eth0: 2500      20    0    0    0     0          0         0     700      7    0    0    0     0       0          0\n";
        assert_eq!(parse_net_dev(dev), (3500.0, 1700.0));
        assert_eq!(parse_net_dev(""), (0.0, 0.0));
    }

    #[test]
    fn registered_counts_by_stability() {
        let fams = [
            Family::alpha("a", "x", MetricType::Counter),
            Family::alpha("b", "y", MetricType::Gauge),
            Family::new("process_x", "no level", MetricType::Gauge),
            Family::new("s", "[STABLE] z", MetricType::Gauge),
        ];
        let out = registry_families(fams.iter());
        let reg = &out[0];
        let get = |l: &str| {
            reg.samples
                .iter()
                .find(|s| {
                    s.labels
                        .iter()
                        .any(|(k, v)| k == "stability_level" && v == l)
                })
                .map(|s| match s.value {
                    super::super::SampleValue::Scalar(v) => v,
                    _ => -1.0,
                })
        };
        assert_eq!(get("ALPHA"), Some(3.0));
        assert_eq!(get("BETA"), Some(3.0));
        assert_eq!(get("STABLE"), Some(1.0));
        assert_eq!(get("INTERNAL"), None);
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn build_info_names_the_platform_as_go_does() {
        let f = build_info(37);
        let l = &f.samples[0].labels;
        let get = |k: &str| l.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("minor"), Some("37"));
        assert_eq!(get("compiler"), Some("rustc"));
        assert!(get("platform").unwrap().starts_with("linux/"));
        assert!(!platform().contains("x86_64"));
    }
}
