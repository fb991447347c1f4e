use super::*;
use crate::cli::{self, Command};

/// `/configz` of kube-controller-manager v1.37.2 (`tests/fixtures/configz/<name>.json`, the
/// bytes it answered) for the flags of `<name>.args`, one per line. It also had secure-port
/// and delegated-authentication flags, which `/configz` does not report.
const CAPTURES: &[&str] = &[
    "defaults",
    "controller-list",
    "controllers-and-syncs",
    "repeated-controllers",
    "many-flags",
    "dual-stack-and-migration",
    "edge-values",
];

/// The ignored resources in edgekcm's order. Upstream fills the list from a Go map, so its
/// order changes from one start to the next; both orders occur among the captures.
const IGNORED: &str = r#""GCIgnoredResources":[{"Group":"","Resource":"events"},{"Group":"events.k8s.io","Resource":"events"}]"#;
const IGNORED_SWAPPED: &str = r#""GCIgnoredResources":[{"Group":"events.k8s.io","Resource":"events"},{"Group":"","Resource":"events"}]"#;

fn fixture(file: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/configz")
        .join(file);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.replace(IGNORED_SWAPPED, IGNORED)
}

fn parse(args: &[String]) -> Config {
    match cli::parse(args) {
        Ok(Command::Run(c)) => *c,
        other => panic!("{args:?}: {other:?}"),
    }
}

/// The first difference of two JSON texts, with some context.
fn first_difference(got: &str, want: &str) -> String {
    let at = got
        .bytes()
        .zip(want.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let from = at.saturating_sub(80);
    format!(
        "at byte {at}:\n got: ...{}\nwant: ...{}",
        &got[from..(at + 80).min(got.len())],
        &want[from..(at + 80).min(want.len())]
    )
}

#[test]
fn answers_as_upstream_did() {
    for name in CAPTURES {
        let args: Vec<String> = fixture(&format!("{name}.args"))
            .lines()
            .map(str::to_string)
            .collect();
        let got = document(&parse(&args)).unwrap();
        assert!(got.contains(IGNORED));
        let want = fixture(&format!("{name}.json"));
        assert!(got == want, "{name}: {}", first_difference(&got, &want));
    }
}

#[test]
fn defaults() {
    let doc = document(&Config::default()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
    let c = &v[GROUP];
    assert_eq!(c["kind"], "KubeControllerManagerConfiguration");
    assert_eq!(c["Generic"]["ClientConnection"]["kubeconfig"], "");
    assert_eq!(
        c["Generic"]["LeaderElection"]["resourceName"],
        "kube-controller-manager"
    );
    assert_eq!(c["Generic"]["Controllers"], serde_json::json!(["*"]));
    assert_eq!(c["DeploymentController"]["ConcurrentDeploymentSyncs"], 5);
    assert_eq!(c["GarbageCollectorController"]["ConcurrentGCSyncs"], 20);
    assert_eq!(c["NodeLifecycleController"]["NodeEvictionRate"], 0.1);
    assert_eq!(
        c["NodeLifecycleController"]["NodeMonitorGracePeriod"],
        "50s"
    );
    assert_eq!(c["ResourceClaimController"]["ConcurrentSyncs"], 50);
    // The upstream capture of the defaults differs only in the lease name and the kubeconfig.
    let want = fixture("defaults.json")
        .replace("\"cz-held\"", "\"kube-controller-manager\"")
        .replace("\"/opt/k8s/controller-manager.kubeconfig\"", "\"\"");
    assert!(doc == want, "{}", first_difference(&doc, &want));
}

#[test]
fn every_flag_field_is_kept_and_its_default_reads() {
    for (path, src) in FIELDS {
        let (name, ty, default) = match src {
            Src::Flag(name, ty, default) => (*name, *ty, *default),
            Src::Workers(name) => (*name, Int32, "7"),
            Src::Cfg(_) => continue,
        };
        assert!(ty.parse(default).is_ok(), "{path}: default {default:?}");
        let value = if ty == StrSlice {
            "10.0.0.0/8"
        } else {
            default
        };
        let c = parse(&[format!("--{name}={value}")]);
        assert_eq!(c.given.get(name).map(String::as_str), Some(value), "{path}");
        assert!(document(&c).is_ok(), "{path}");
    }
}

#[test]
fn values_that_do_not_read_stop_the_start_as_pflag_words_it() {
    for (arg, want) in [
        (
            "--node-eviction-rate=abc",
            "invalid argument \"abc\" for \"--node-eviction-rate\" flag: strconv.ParseFloat: parsing \"abc\": invalid syntax",
        ),
        (
            "--node-eviction-rate=1e50",
            "invalid argument \"1e50\" for \"--node-eviction-rate\" flag: strconv.ParseFloat: parsing \"1e50\": value out of range",
        ),
        (
            "--large-cluster-size-threshold=99999999999",
            "invalid argument \"99999999999\" for \"--large-cluster-size-threshold\" flag: strconv.ParseInt: parsing \"99999999999\": value out of range",
        ),
        (
            "--route-reconciliation-period=abc",
            "invalid argument \"abc\" for \"--route-reconciliation-period\" flag: time: invalid duration \"abc\"",
        ),
        (
            "--profiling=maybe",
            "invalid argument \"maybe\" for \"--profiling\" flag: strconv.ParseBool: parsing \"maybe\": invalid syntax",
        ),
        (
            "--horizontal-pod-autoscaler-tolerance=x",
            "invalid argument \"x\" for \"--horizontal-pod-autoscaler-tolerance\" flag: strconv.ParseFloat: parsing \"x\": invalid syntax",
        ),
        (
            "--log-flush-frequency=x",
            "invalid argument \"x\" for \"--log-flush-frequency\" flag: time: invalid duration \"x\"",
        ),
        (
            "--http2-max-streams-per-connection=x",
            "invalid argument \"x\" for \"--http2-max-streams-per-connection\" flag: strconv.ParseInt: parsing \"x\": invalid syntax",
        ),
        (
            "--node-sync-period=x",
            "invalid argument \"x\" for \"--node-sync-period\" flag: time: invalid duration \"x\"",
        ),
    ] {
        let err = cli::parse(&[arg.to_string()]).unwrap_err();
        assert_eq!(err.to_string(), want, "{arg}");
    }
    // pflag reads integers in base 0, also for the flags edgekcm acts on.
    let c = parse(&["--concurrent-deployment-syncs=0x10".to_string()]);
    assert_eq!(c.concurrency("concurrent-deployment-syncs"), 16);
}

#[test]
fn negative_durations_and_counts_show_as_given() {
    let c = parse(&[
        "--node-sync-period=-1m30s".to_string(),
        "--concurrent-gc-syncs=-3".to_string(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&document(&c).unwrap()).unwrap();
    assert_eq!(v[GROUP]["KubeCloudShared"]["NodeSyncPeriod"], "-1m30s");
    assert_eq!(
        v[GROUP]["GarbageCollectorController"]["ConcurrentGCSyncs"],
        -3
    );
    assert_eq!(c.concurrency("concurrent-gc-syncs"), 0);
}
