//! The flag tables: every kube-controller-manager flag edgekcm acts on, accepts and ignores,
//! or knows as removed upstream (the acted-on ones are handed to `config::RunFlags`).

use crate::config::{FlagType, CONCURRENT_SYNCS};
use FlagType::{Bool, Duration as Dur, Float32, Float64, Int, Int32, Str, StrSlice};

/// A flag edgekcm acts on: name, whether it is boolean, whether repeats append (pflag
/// string slices), and its help line.
pub(super) struct Acted {
    pub(super) name: &'static str,
    pub(super) boolean: bool,
    pub(super) list: bool,
    pub(super) group: &'static str,
    pub(super) default: &'static str,
    pub(super) help: &'static str,
}

const fn a(
    group: &'static str,
    name: &'static str,
    default: &'static str,
    help: &'static str,
) -> Acted {
    Acted {
        name,
        boolean: false,
        list: false,
        group,
        default,
        help,
    }
}

const fn b(
    group: &'static str,
    name: &'static str,
    default: &'static str,
    help: &'static str,
) -> Acted {
    let mut f = a(group, name, default, help);
    f.boolean = true;
    f
}

const fn l(
    group: &'static str,
    name: &'static str,
    default: &'static str,
    help: &'static str,
) -> Acted {
    let mut f = a(group, name, default, help);
    f.list = true;
    f
}

pub(super) const GENERIC: &str = "Generic flags";
const LEADER: &str = "Leader election flags";
const SERVING: &str = "Secure serving flags";
const AUTHN: &str = "Authentication flags";
const AUTHZ: &str = "Authorization flags";
const SA: &str = "Service account and certificate flags";
const NODE: &str = "Node flags";
const LOGS: &str = "Logs flags";
const MISC: &str = "Misc flags";

/// Every flag edgekcm acts on, except the `--concurrent-*-syncs` family
/// ([`CONCURRENT_SYNCS`]).
pub(super) static ACTED: &[Acted] = &[
    l(GENERIC, "controllers", "*", "Controllers to run: '*' = all on-by-default, 'foo' enables, '-foo' disables (canonical names or aliases)."),
    a(GENERIC, "controller-start-interval", "0s", "Pause between starting controllers."),
    a(GENERIC, "min-resync-period", "12h0m0s", "Informer resync period is random between this and twice this."),
    a(GENERIC, "kube-api-qps", "20", "Queries per second towards the API server."),
    a(GENERIC, "kube-api-burst", "30", "Burst towards the API server."),
    b(GENERIC, "use-service-account-credentials", "false", "Give each controller its own kube-system service account credentials."),
    b(GENERIC, "enable-garbage-collector", "true", "Run the garbage collector."),
    a(GENERIC, "namespace-sync-period", "5m0s", "Resync period of the namespace controller."),
    a(GENERIC, "endpoint-updates-batch-period", "0s", "How long pod changes wait before the endpoints controller syncs their Services, batching them."),
    a(GENERIC, "endpointslice-updates-batch-period", "0s", "How long pod changes wait before the endpointslice controller syncs their Services, batching them."),
    a(GENERIC, "max-endpoints-per-slice", "100", "The most endpoints the endpointslice controller puts in one EndpointSlice (1 to 1000)."),
    a(GENERIC, "mirroring-endpointslice-updates-batch-period", "0s", "How long EndpointSlice changes wait before the mirroring controller syncs their Endpoints."),
    a(GENERIC, "mirroring-max-endpoints-per-subset", "1000", "The most addresses of one Endpoints subset mirrored to EndpointSlices (1 to 1000)."),
    a(GENERIC, "terminated-pod-gc-threshold", "12500", "Terminated pods kept before the pod GC deletes them; <= 0 disables that part."),
    a(GENERIC, "cluster-name", "kubernetes", "The instance prefix for the cluster."),
    l(GENERIC, "emulated-version", "", "The Kubernetes version to emulate (1.34 to 1.37, as 1.35 or kube=1.35); default: follow the API server (v1.36 and v1.37 get 1.37, v1.34 and v1.35 their own)."),
    l(GENERIC, "min-compatibility-version", "", "The oldest control plane version to stay compatible with (1.34 up to the emulated version; default one minor before it)."),
    l(GENERIC, "feature-gates", "", "Feature gates: comma-separated [kube:]Name=true|false, repeatable; defaults follow the emulated version."),
    b(LEADER, "leader-elect", "true", "Acquire a Lease before running controllers."),
    a(LEADER, "leader-elect-lease-duration", "15s", "How long a non-renewed lease is honoured."),
    a(LEADER, "leader-elect-renew-deadline", "10s", "How long the leader keeps retrying a renewal before giving up."),
    a(LEADER, "leader-elect-retry-period", "2s", "Pause between acquire/renew attempts."),
    a(LEADER, "leader-elect-resource-lock", "leases", "Lock object type; only 'leases' is supported."),
    a(LEADER, "leader-elect-resource-name", "kube-controller-manager", "Lease name."),
    a(LEADER, "leader-elect-resource-namespace", "kube-system", "Lease namespace."),
    a(SERVING, "secure-port", "10257", "HTTPS port for /healthz and /metrics; 0 disables serving."),
    a(SERVING, "bind-address", "0.0.0.0", "Address to listen on."),
    a(SERVING, "cert-dir", "", "Where a self-signed serving pair is kept; empty keeps it in memory."),
    a(SERVING, "tls-cert-file", "", "Serving certificate (PEM, chain after the leaf)."),
    a(SERVING, "tls-private-key-file", "", "Serving private key (PEM)."),
    a(AUTHN, "authentication-kubeconfig", "", "Kubeconfig used for TokenReviews."),
    b(AUTHN, "authentication-skip-lookup", "false", "Do not read client CA settings from the cluster."),
    b(AUTHN, "authentication-tolerate-lookup-failure", "false", "Start even if that lookup fails."),
    a(AUTHN, "authentication-token-webhook-cache-ttl", "10s", "Cache time of TokenReview answers."),
    a(AUTHN, "client-ca-file", "", "CA bundle for client certificates."),
    a(AUTHN, "requestheader-client-ca-file", "", "CA bundle for front-proxy client certificates; empty reads it from the cluster."),
    l(AUTHN, "requestheader-allowed-names", "", "Front-proxy certificate common names accepted; empty accepts any."),
    l(AUTHN, "requestheader-username-headers", "x-remote-user", "Headers carrying the user name."),
    l(AUTHN, "requestheader-group-headers", "x-remote-group", "Headers carrying the groups."),
    l(AUTHN, "requestheader-extra-headers-prefix", "x-remote-extra-", "Header prefixes carrying extra user information."),
    a(AUTHZ, "authorization-kubeconfig", "", "Kubeconfig used for SubjectAccessReviews."),
    l(AUTHZ, "authorization-always-allow-paths", "/healthz,/readyz,/livez", "Paths served without authorization."),
    a(AUTHZ, "authorization-webhook-cache-authorized-ttl", "10s", "Cache time of 'allowed' answers."),
    a(AUTHZ, "authorization-webhook-cache-unauthorized-ttl", "10s", "Cache time of 'denied' answers."),
    a(SA, "service-account-private-key-file", "", "PEM key (RSA or ECDSA) that signs legacy service account tokens."),
    a(SA, "root-ca-file", "", "CA bundle published as ca.crt in token Secrets and kube-root-ca.crt ConfigMaps."),
    a(SA, "cluster-signing-cert-file", "", "CA certificate for all built-in CSR signers."),
    a(SA, "cluster-signing-key-file", "", "CA key for all built-in CSR signers."),
    a(SA, "cluster-signing-kubelet-serving-cert-file", "", "CA certificate for kubernetes.io/kubelet-serving."),
    a(SA, "cluster-signing-kubelet-serving-key-file", "", "CA key for kubernetes.io/kubelet-serving."),
    a(SA, "cluster-signing-kubelet-client-cert-file", "", "CA certificate for kubernetes.io/kube-apiserver-client-kubelet."),
    a(SA, "cluster-signing-kubelet-client-key-file", "", "CA key for kubernetes.io/kube-apiserver-client-kubelet."),
    a(SA, "cluster-signing-kube-apiserver-client-cert-file", "", "CA certificate for kubernetes.io/kube-apiserver-client."),
    a(SA, "cluster-signing-kube-apiserver-client-key-file", "", "CA key for kubernetes.io/kube-apiserver-client."),
    a(SA, "cluster-signing-legacy-unknown-cert-file", "", "CA certificate for kubernetes.io/legacy-unknown."),
    a(SA, "cluster-signing-legacy-unknown-key-file", "", "CA key for kubernetes.io/legacy-unknown."),
    a(SA, "cluster-signing-duration", "8760h0m0s", "Longest lifetime of a signed certificate."),
    b(NODE, "allocate-node-cidrs", "false", "Allocate pod CIDRs to nodes (needs --cluster-cidr)."),
    a(NODE, "cluster-cidr", "", "Pod CIDR(s), comma separated for dual-stack."),
    a(NODE, "service-cluster-ip-range", "", "Service CIDR(s), kept out of node allocations."),
    a(NODE, "node-cidr-mask-size", "0", "Node CIDR mask size (0: 24 for IPv4, 64 for IPv6)."),
    a(NODE, "node-cidr-mask-size-ipv4", "0", "Node CIDR mask size for IPv4 in dual-stack clusters (0: 24)."),
    a(NODE, "node-cidr-mask-size-ipv6", "0", "Node CIDR mask size for IPv6 in dual-stack clusters (0: 64)."),
    a(NODE, "node-monitor-period", "5s", "How often node status is checked."),
    a(NODE, "node-monitor-grace-period", "50s", "How long a node may be silent before it is marked unhealthy."),
    a(NODE, "node-autonomy-duration", "0s", "edgekcm only: how long a node annotated node.edgekcm.io/autonomy=true whose link is lost keeps its pods and endpoints, untainted, past its grace period (0s: off; docs/controllers/nodelifecycle.md)."),
    a(NODE, "node-startup-grace-period", "1m0s", "The same for a node that is starting."),
    a(LOGS, "v", "0", "Log verbosity (-v or --v)."),
    a(LOGS, "logging-format", "text", "Log format: \"text\" (klog's header) or \"json\" (component-base's JSON lines)."),
    a(MISC, "kubeconfig", "", "Kubeconfig with the API server location and credentials."),
    a(MISC, "master", "", "API server URL (overrides the kubeconfig's server)."),
];

/// Flags of the accepted table that a controller reads from their checked text
/// (`Config::given`): no warning that they are not acted on.
pub(crate) const READ_AS_GIVEN: [&str; 11] = [
    "attach-detach-reconcile-sync-period",
    "disable-attach-detach-reconcile-sync",
    "cidr-allocator-type",
    "node-eviction-rate",
    "secondary-node-eviction-rate",
    "large-cluster-size-threshold",
    "unhealthy-zone-threshold",
    "enable-dynamic-provisioning",
    "pvclaimbinder-sync-period",
    "legacy-service-account-token-clean-up-period",
    "disable-force-detach-on-timeout",
];

/// Why a flag edgekcm parses and checks does nothing yet: what would act on it is not in
/// edgekcm. `None` for the flags it acts on.
pub(super) fn not_acted_on_yet(name: &str) -> Option<&'static str> {
    Some(match name {
        "cluster-name" => "the controllers that use it (cloud, volumes) are not in edgekcm yet",
        "controller-start-interval" => "edgekcm starts its controllers together",
        "min-resync-period" => "edgekcm's caches do not resync on a timer",
        n if n.starts_with("concurrent-") || n.starts_with("mirroring-concurrent-") => {
            let runs =
                crate::controllers::registry::implemented().any(|c| c.workers_flag == Some(n));
            if runs {
                return None;
            }
            "its controller is not in edgekcm yet"
        }
        _ => return None,
    })
}

/// Flags kube-controller-manager 1.28 has, and v1.37 still has, that edgekcm accepts without
/// acting on them, with their Go type: a value is checked against it as pflag checks it, and
/// kept for `/configz`. The 1.28 flags v1.37 no longer has are unknown flags here too
/// (`REMOVED_SINCE_1_28`, for the record and the tests).
static ACCEPTED: &[(&str, FlagType)] = &[
    ("allow-metric-labels", Str),
    ("allow-metric-labels-manifest", Str),
    ("allow-untagged-cloud", Bool),
    ("attach-detach-reconcile-sync-period", Dur),
    ("cidr-allocator-type", Str),
    ("cloud-config", Str),
    ("cloud-provider", Str),
    ("configure-cloud-routes", Bool),
    ("contention-profiling", Bool),
    ("disable-attach-detach-reconcile-sync", Bool),
    ("disabled-metrics", StrSlice),
    ("enable-dynamic-provisioning", Bool),
    ("enable-hostpath-provisioner", Bool),
    ("enable-leader-migration", Bool),
    ("external-cloud-volume-plugin", Str),
    ("flex-volume-plugin-dir", Str),
    ("horizontal-pod-autoscaler-cpu-initialization-period", Dur),
    ("horizontal-pod-autoscaler-downscale-stabilization", Dur),
    ("horizontal-pod-autoscaler-initial-readiness-delay", Dur),
    ("horizontal-pod-autoscaler-sync-period", Dur),
    ("horizontal-pod-autoscaler-tolerance", Float64),
    ("http2-max-streams-per-connection", Int),
    ("kube-api-content-type", Str),
    ("large-cluster-size-threshold", Int32),
    ("leader-migration-config", Str),
    ("legacy-service-account-token-clean-up-period", Dur),
    ("log-flush-frequency", Dur),
    ("log-json-info-buffer-size", Str),
    ("log-json-split-stream", Bool),
    ("node-eviction-rate", Float32),
    ("node-sync-period", Dur),
    ("permit-address-sharing", Bool),
    ("permit-port-sharing", Bool),
    ("profiling", Bool),
    ("pv-recycler-increment-timeout-nfs", Int32),
    ("pv-recycler-minimum-timeout-hostpath", Int32),
    ("pv-recycler-minimum-timeout-nfs", Int32),
    ("pv-recycler-pod-template-filepath-hostpath", Str),
    ("pv-recycler-pod-template-filepath-nfs", Str),
    ("pv-recycler-timeout-increment-hostpath", Int32),
    ("pvclaimbinder-sync-period", Dur),
    ("resource-quota-sync-period", Dur),
    ("route-reconciliation-period", Dur),
    ("secondary-node-eviction-rate", Float32),
    ("show-hidden-metrics-for-version", Str),
    ("tls-cipher-suites", StrSlice),
    ("tls-min-version", Str),
    ("tls-sni-cert-key", Str),
    ("unhealthy-zone-threshold", Float32),
    ("vmodule", Str),
];

/// Flags kube-controller-manager added after 1.28 (up to v1.37) that edgekcm accepts without
/// acting on them, with their Go type (as [`ACCEPTED`]).
static LATER: &[(&str, FlagType)] = &[
    ("controller-shutdown-timeout", Dur),
    ("disable-force-detach-on-timeout", Bool),
    ("disable-http2-serving", Bool),
    ("log-text-info-buffer-size", Str),
    ("log-text-split-stream", Bool),
    ("requestheader-uid-headers", StrSlice),
    // An int32 slice; its values are Go crypto/tls curve IDs.
    ("tls-curve-preferences", StrSlice),
];

/// Flags kube-controller-manager 1.28 had that v1.37 does not: refused as unknown flags, as
/// v1.37 refuses them.
#[cfg(test)]
pub(crate) const REMOVED_SINCE_1_28: [&str; 8] = [
    "azure-container-registry-config",
    "cloud-provider-gce-l7lb-src-cidrs",
    "cloud-provider-gce-lb-src-cidrs",
    "concurrent-service-syncs",
    "horizontal-pod-autoscaler-downscale-delay",
    "horizontal-pod-autoscaler-upscale-delay",
    "volume-host-allow-local-loopback",
    "volume-host-cidr-denylist",
];

/// Flags kube-controller-manager removed before 1.28 that old units still carry.
/// `(name, boolean, removed in)`; an empty release means "some release before 1.28".
static REMOVED: &[(&str, bool, &str)] = &[
    ("add-dir-header", true, "1.26"),
    ("address", false, "1.24"),
    ("alsologtostderr", true, "1.26"),
    ("deleting-pods-burst", false, "1.25"),
    ("deleting-pods-qps", false, "1.25"),
    ("deployment-controller-sync-period", false, ""),
    ("enable-taint-manager", true, "1.27"),
    ("experimental-logging-sanitization", true, ""),
    ("google-json-key", false, ""),
    ("horizontal-pod-autoscaler-use-rest-clients", true, ""),
    (
        "insecure-experimental-approve-all-kubelet-csrs-for-group",
        false,
        "",
    ),
    ("log-backtrace-at", false, "1.26"),
    ("log-dir", false, "1.26"),
    ("log-file", false, "1.26"),
    ("log-file-max-size", false, "1.26"),
    ("logtostderr", true, "1.26"),
    ("one-output", true, "1.26"),
    ("pod-eviction-timeout", false, "1.27"),
    ("port", false, "1.24"),
    ("register-retry-count", false, "1.25"),
    ("skip-headers", true, "1.26"),
    ("skip-log-headers", true, "1.26"),
    ("stderrthreshold", false, "1.26"),
];

/// Old names that still mean a flag edgekcm acts on: `(old, new, removed in)`.
static RENAMED: &[(&str, &str, &str)] = &[(
    "experimental-cluster-signing-duration",
    "cluster-signing-duration",
    "",
)];

#[derive(Clone, Copy)]
pub(super) enum Kind {
    Acted {
        boolean: bool,
        list: bool,
    },
    Concurrent,
    Accepted {
        ty: FlagType,
    },
    Later {
        ty: FlagType,
    },
    Removed {
        boolean: bool,
        since: &'static str,
    },
    Renamed {
        to: &'static str,
        since: &'static str,
    },
    Help,
    Version,
}

impl Kind {
    pub(super) fn is_bool(self) -> bool {
        match self {
            Kind::Acted { boolean, .. } | Kind::Removed { boolean, .. } => boolean,
            Kind::Accepted { ty } | Kind::Later { ty } => ty == Bool,
            Kind::Help | Kind::Version => true,
            Kind::Concurrent | Kind::Renamed { .. } => false,
        }
    }
}

/// Look a normalised flag name up; `None` means upstream never had it.
pub(super) fn lookup(name: &str) -> Option<(&'static str, Kind)> {
    if let Some(f) = ACTED.iter().find(|f| f.name == name) {
        return Some((
            f.name,
            Kind::Acted {
                boolean: f.boolean,
                list: f.list,
            },
        ));
    }
    if let Some((n, _)) = CONCURRENT_SYNCS.iter().find(|(n, _)| *n == name) {
        return Some((n, Kind::Concurrent));
    }
    if let Some((n, ty)) = ACCEPTED.iter().find(|(n, _)| *n == name) {
        return Some((n, Kind::Accepted { ty: *ty }));
    }
    if let Some((n, ty)) = LATER.iter().find(|(n, _)| *n == name) {
        return Some((n, Kind::Later { ty: *ty }));
    }
    if let Some((n, boolean, since)) = REMOVED.iter().find(|(n, _, _)| *n == name) {
        return Some((
            n,
            Kind::Removed {
                boolean: *boolean,
                since,
            },
        ));
    }
    if let Some((n, to, since)) = RENAMED.iter().find(|(n, _, _)| *n == name) {
        return Some((n, Kind::Renamed { to, since }));
    }
    match name {
        "help" => Some(("help", Kind::Help)),
        "version" => Some(("version", Kind::Version)),
        _ => None,
    }
}

/// Counts of the flag tables: (acted on, accepted and ignored incl. later releases,
/// removed upstream incl. renamed).
pub fn flag_counts() -> (usize, usize, usize) {
    (
        ACTED.len() + CONCURRENT_SYNCS.len(),
        ACCEPTED.len() + LATER.len(),
        REMOVED.len() + RENAMED.len(),
    )
}

/// Every flag name (normalised) with whether it is boolean and, for the flags edgekcm acts
/// on, the default it documents: for tests that build command lines.
#[cfg(test)]
pub(crate) fn known_flags() -> Vec<(&'static str, bool, Option<&'static str>)> {
    let mut out: Vec<_> = ACTED
        .iter()
        .map(|f| (f.name, f.boolean, Some(f.default)))
        .collect();
    out.extend(CONCURRENT_SYNCS.iter().map(|(n, _)| (*n, false, None)));
    out.extend(
        ACCEPTED
            .iter()
            .chain(LATER)
            .map(|(n, ty)| (*n, *ty == Bool, None)),
    );
    out.extend(REMOVED.iter().map(|(n, b, _)| (*n, *b, None)));
    out.extend(RENAMED.iter().map(|(n, _, _)| (*n, false, None)));
    out.extend([("help", true, None), ("version", true, None)]);
    out
}

/// The flags of v1.37's command line (acted on, `--concurrent-*-syncs`, accepted, added
/// later, `--help` and `--version`) with the default edgekcm documents for the acted-on ones:
/// what `/flagz` lists.
#[cfg(test)]
pub(crate) fn current_flags() -> Vec<(&'static str, Option<&'static str>)> {
    let mut out: Vec<_> = ACTED.iter().map(|f| (f.name, Some(f.default))).collect();
    out.extend(CONCURRENT_SYNCS.iter().map(|(n, _)| (*n, None)));
    out.extend(ACCEPTED.iter().chain(LATER).map(|(n, _)| (*n, None)));
    out.extend([("help", None), ("version", None)]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunFlags;
    use argh::FromArgs;

    #[test]
    fn every_acted_flag_reaches_argh() {
        for f in ACTED {
            let argv = [format!("--{}", f.name), "x".to_string()];
            let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
            assert!(
                RunFlags::from_args(&["edgekcm"], &refs).is_ok(),
                "{} not in RunFlags",
                f.name
            );
        }
    }

    #[test]
    fn flags_removed_since_1_28_are_unknown() {
        for f in REMOVED_SINCE_1_28 {
            assert!(lookup(f).is_none(), "{f}");
            let err = crate::cli::parse(&[format!("--{f}=1")]).unwrap_err();
            assert_eq!(err.to_string(), format!("unknown flag: --{f}"));
        }
        // Flags v1.37 added are accepted.
        for f in [
            "--controller-shutdown-timeout=30s",
            "--concurrent-disruption-syncs=3",
        ] {
            assert!(crate::cli::parse(&[f.to_string()]).is_ok(), "{f}");
        }
        assert!(crate::cli::parse(&["--controller-shutdown-timeout=x".into()]).is_err());
    }

    #[test]
    fn tables_do_not_overlap() {
        let mut seen = std::collections::BTreeSet::new();
        let names = ACTED
            .iter()
            .map(|f| f.name)
            .chain(CONCURRENT_SYNCS.iter().map(|(n, _)| *n))
            .chain(ACCEPTED.iter().map(|(n, _)| *n))
            .chain(LATER.iter().map(|(n, _)| *n))
            .chain(REMOVED.iter().map(|(n, _, _)| *n))
            .chain(RENAMED.iter().map(|(n, _, _)| *n));
        for n in names {
            assert!(seen.insert(n), "{n} listed twice");
            assert!(!n.contains('_'), "{n} must be normalised");
        }
    }
}
