//! The validated configuration edgekcm runs with, built from the command line.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

mod auth;
pub mod componentconfig;
pub mod debug;
pub mod files;
mod flagtype;
pub mod gates;
mod groups;
mod runflags;
mod signing;
mod values;
pub mod version;
pub mod zpages;
use crate::compat::cidr::Cidr;
use crate::compat::parse::{format_go_duration, go_quote, parse_go_bool, parse_go_duration};
pub use flagtype::{record as record_flag, FlagType, FlagValue};
pub use groups::{
    EndpointOptions, EndpointSliceOptions, GarbageCollectorOptions, KubeCloudShared,
    NamespaceOptions, NodeIpamOptions, NodeLifecycleOptions, PodGcOptions, SaControllerOptions,
};
pub use runflags::RunFlags;
pub use signing::{CertKeyFiles, ClusterSigning, SignerFiles};
pub(crate) use values::split_list;
use values::*;

/// The `--concurrent-*-syncs` flags of kube-controller-manager v1.37 whose controllers
/// edgekcm has, and the 1.28 ones v1.37 kept, with their defaults (the other ones v1.37
/// added are accepted without acting on them).
/// `--concurrent_rc_syncs` is spelled with underscores upstream; names are normalised.
pub const CONCURRENT_SYNCS: &[(&str, usize)] = &[
    ("concurrent-cron-job-syncs", 5),
    // v1.37's; 1.28 had no flag and ran two daemonset workers and one disruption worker.
    ("concurrent-daemonset-syncs", 2),
    ("concurrent-deployment-syncs", 5),
    ("concurrent-device-taint-eviction-syncs", 8),
    ("concurrent-disruption-syncs", 1),
    ("concurrent-endpoint-syncs", 5),
    ("concurrent-ephemeralvolume-syncs", 5),
    ("concurrent-gc-syncs", 20),
    ("concurrent-horizontal-pod-autoscaler-syncs", 5),
    ("concurrent-job-syncs", 5),
    ("concurrent-namespace-syncs", 10),
    ("concurrent-rc-syncs", 5),
    ("concurrent-replicaset-syncs", 5),
    ("concurrent-resource-quota-syncs", 5),
    ("concurrent-resourceclaim-syncs", 50),
    ("concurrent-service-endpoint-syncs", 5),
    ("concurrent-serviceaccount-token-syncs", 5),
    ("concurrent-statefulset-syncs", 5),
    ("concurrent-ttl-after-finished-syncs", 5),
    ("concurrent-validating-admission-policy-status-syncs", 5),
    ("mirroring-concurrent-service-endpoint-syncs", 5),
];

/// Leader election settings (`--leader-elect*`).
#[derive(Debug, Clone, PartialEq)]
pub struct LeaderElection {
    pub enabled: bool,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// Always `leases` when enabled (validated).
    pub resource_lock: String,
    pub resource_name: String,
    pub resource_namespace: String,
}

/// A parsed `--controllers` list, with aliases already rewritten to canonical names. Parsed,
/// and asked which controllers it enables, against the controllers' table
/// (`controllers::registry`, which has the methods).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerSelection {
    /// Entries in command-line order: `*`, `name` or `-name` (canonical names).
    pub(crate) entries: Vec<String>,
}

impl Default for ControllerSelection {
    /// The default `--controllers=*`.
    fn default() -> Self {
        ControllerSelection {
            entries: vec!["*".to_string()],
        }
    }
}

/// Everything edgekcm acts on, typed and validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    // Client
    pub kubeconfig: Option<PathBuf>,
    pub master: Option<String>,
    pub kube_api_qps: f32,
    pub kube_api_burst: u32,
    // Controllers
    pub controllers: ControllerSelection,
    pub controller_start_interval: Duration,
    pub min_resync_period: Duration,
    /// Worker counts keyed by flag name (see [`CONCURRENT_SYNCS`]); use [`Config::concurrency`].
    pub concurrent_syncs: BTreeMap<&'static str, usize>,
    pub use_service_account_credentials: bool,
    // Option groups, as upstream's componentconfig groups them (`/configz` shows them so).
    pub kube_cloud_shared: KubeCloudShared,
    pub garbage_collector: GarbageCollectorOptions,
    pub namespace_controller: NamespaceOptions,
    pub endpoint_controller: EndpointOptions,
    pub endpoint_slice: EndpointSliceOptions,
    pub pod_gc: PodGcOptions,
    pub node_lifecycle: NodeLifecycleOptions,
    pub node_ipam: NodeIpamOptions,
    pub sa_controller: SaControllerOptions,
    /// CSRSigningController: `--cluster-signing-*`.
    pub cluster_signing: ClusterSigning,
    // Leader election
    pub leader_election: LeaderElection,
    // Secure serving
    /// 0 disables serving.
    pub secure_port: u16,
    pub bind_address: IpAddr,
    pub cert_dir: Option<PathBuf>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    // Authentication / authorization of the secure port
    pub authentication_kubeconfig: Option<PathBuf>,
    pub authentication_skip_lookup: bool,
    pub authentication_tolerate_lookup_failure: bool,
    pub authentication_token_webhook_cache_ttl: Duration,
    pub client_ca_file: Option<PathBuf>,
    /// `--requestheader-client-ca-file`; None reads the front-proxy settings from the
    /// `extension-apiserver-authentication` ConfigMap.
    pub requestheader_client_ca_file: Option<PathBuf>,
    pub requestheader_allowed_names: Vec<String>,
    pub requestheader_username_headers: Vec<String>,
    pub requestheader_group_headers: Vec<String>,
    pub requestheader_extra_headers_prefix: Vec<String>,
    pub authorization_kubeconfig: Option<PathBuf>,
    pub authorization_always_allow_paths: Vec<String>,
    pub authorization_webhook_cache_authorized_ttl: Duration,
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
    // Logging
    /// `-v` / `--v`.
    pub verbosity: u32,
    /// `--logging-format`.
    pub logging_format: crate::runtime::logging::Format,
    /// One line per ignored, renamed or removed flag; logged once at start.
    pub warnings: Vec<String>,
    /// `--emulated-version` and `--min-compatibility-version` as given.
    pub version_flags: version::VersionFlags,
    /// The version emulated: v1.37 until the API server's version decides it at start
    /// ([`Config::emulate`]).
    pub emulation: version::Emulation,
    /// `--feature-gates`, resolved at the emulated version.
    pub gates: gates::FeatureGates,
    /// The text of flags given on the command line that edgekcm keeps as text, for
    /// `/configz`: the flags it accepts without acting on them (checked against their Go type
    /// at start; repeats of a string slice joined with commas), the `--concurrent-*-syncs`
    /// counts, and `--cluster-cidr` and `--service-cluster-ip-range` as written.
    pub given: BTreeMap<&'static str, String>,
    /// Every flag given on the command line with its values in order, as written (for
    /// `/flagz`).
    pub command_line: BTreeMap<&'static str, Vec<String>>,
}

impl Default for Config {
    /// Upstream defaults, as if no flag was given.
    fn default() -> Self {
        Config {
            kubeconfig: None,
            master: None,
            kube_api_qps: 20.0,
            kube_api_burst: 30,
            controllers: ControllerSelection::default(),
            controller_start_interval: Duration::ZERO,
            min_resync_period: Duration::from_secs(12 * 3600),
            concurrent_syncs: CONCURRENT_SYNCS.iter().copied().collect(),
            use_service_account_credentials: false,
            kube_cloud_shared: KubeCloudShared {
                cluster_name: "kubernetes".to_string(),
                allocate_node_cidrs: false,
                cluster_cidrs: Vec::new(),
                node_monitor_period: Duration::from_secs(5),
            },
            garbage_collector: GarbageCollectorOptions {
                enable_garbage_collector: true,
            },
            namespace_controller: NamespaceOptions {
                namespace_sync_period: Duration::from_secs(300),
            },
            endpoint_controller: EndpointOptions {
                endpoint_updates_batch_period: Duration::ZERO,
            },
            endpoint_slice: EndpointSliceOptions {
                max_endpoints_per_slice: 100,
                endpoint_updates_batch_period: Duration::ZERO,
                mirroring_max_endpoints_per_subset: 1000,
                mirroring_endpoint_updates_batch_period: Duration::ZERO,
            },
            pod_gc: PodGcOptions {
                terminated_pod_gc_threshold: 12500,
            },
            node_lifecycle: NodeLifecycleOptions {
                // 50 s since v1.32 (40 s before).
                node_monitor_grace_period: Duration::from_secs(50),
                node_startup_grace_period: Duration::from_secs(60),
                node_eviction_rate: 0.1,
                secondary_node_eviction_rate: 0.01,
                large_cluster_size_threshold: 50,
                unhealthy_zone_threshold: 0.55,
                node_autonomy_duration: Duration::ZERO,
            },
            node_ipam: NodeIpamOptions::default(),
            leader_election: LeaderElection {
                enabled: true,
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
                resource_lock: "leases".to_string(),
                resource_name: "kube-controller-manager".to_string(),
                resource_namespace: "kube-system".to_string(),
            },
            sa_controller: SaControllerOptions::default(),
            cluster_signing: ClusterSigning {
                cert_file: None,
                key_file: None,
                kubelet_serving: SignerFiles::default(),
                kubelet_client: SignerFiles::default(),
                kube_apiserver_client: SignerFiles::default(),
                legacy_unknown: SignerFiles::default(),
                duration: Duration::from_secs(8760 * 3600),
            },
            secure_port: 10257,
            bind_address: IpAddr::from([0, 0, 0, 0]),
            cert_dir: None,
            tls_cert_file: None,
            tls_private_key_file: None,
            authentication_kubeconfig: None,
            authentication_skip_lookup: false,
            authentication_tolerate_lookup_failure: false,
            authentication_token_webhook_cache_ttl: Duration::from_secs(10),
            client_ca_file: None,
            requestheader_client_ca_file: None,
            requestheader_allowed_names: Vec::new(),
            requestheader_username_headers: vec!["x-remote-user".to_string()],
            requestheader_group_headers: vec!["x-remote-group".to_string()],
            requestheader_extra_headers_prefix: vec!["x-remote-extra-".to_string()],
            authorization_kubeconfig: None,
            authorization_always_allow_paths: vec![
                "/healthz".to_string(),
                "/readyz".to_string(),
                "/livez".to_string(),
            ],
            authorization_webhook_cache_authorized_ttl: Duration::from_secs(10),
            authorization_webhook_cache_unauthorized_ttl: Duration::from_secs(10),
            verbosity: 0,
            logging_format: crate::runtime::logging::Format::Text,
            warnings: Vec::new(),
            version_flags: version::VersionFlags::default(),
            emulation: version::Emulation::default(),
            gates: gates::FeatureGates::default(),
            given: BTreeMap::new(),
            command_line: BTreeMap::new(),
        }
    }
}

impl Config {
    /// Worker count for a `--concurrent-*-syncs` flag name (`concurrent-gc-syncs`), falling
    /// back to 1 for a name that is not in the table.
    pub fn concurrency(&self, flag: &str) -> usize {
        self.concurrent_syncs.get(flag).copied().unwrap_or(1)
    }

    /// Build and validate from the parsed command line. `concurrent` holds the raw values of
    /// `--concurrent-*-syncs` flags that were given; `warnings` the lines gathered so far.
    /// The node lifecycle controller's numbers, from the text `given` keeps of them (checked
    /// as Go numbers when the command line was read).
    pub fn node_lifecycle_from_given(&mut self) -> Result<()> {
        let nl = &mut self.node_lifecycle;
        for (flag, to) in [
            ("node-eviction-rate", &mut nl.node_eviction_rate),
            (
                "secondary-node-eviction-rate",
                &mut nl.secondary_node_eviction_rate,
            ),
            ("unhealthy-zone-threshold", &mut nl.unhealthy_zone_threshold),
        ] {
            if let Some(v) = self.given.get(flag) {
                *to = crate::compat::parse::parse_go_float(v, 32)
                    .map_err(|e| invalid(flag, v, &e))? as f32;
            }
        }
        if let Some(v) = self.given.get("large-cluster-size-threshold") {
            nl.large_cluster_size_threshold = parse_i32("large-cluster-size-threshold", v)?;
        }
        Ok(())
    }

    /// `select` parses `--controllers` against the controllers' table.
    pub fn from_flags(
        mut f: RunFlags,
        concurrent: &BTreeMap<&'static str, String>,
        warnings: Vec<String>,
        select: fn(&[String]) -> Result<ControllerSelection>,
    ) -> Result<Config> {
        let mut c = Config {
            warnings,
            ..Config::default()
        };
        c.kubeconfig = path(f.kubeconfig.take());
        c.master = f.master.take().filter(|s| !s.is_empty());
        if let Some(v) = f.kube_api_qps.take() {
            c.kube_api_qps = parse_f32("kube-api-qps", &v)?;
        }
        if let Some(v) = f.kube_api_burst.take() {
            c.kube_api_burst = non_negative("kube-api-burst", parse_i32("kube-api-burst", &v)?)?;
        }
        if let Some(v) = f.controllers.take() {
            c.controllers = select(&split_list(&v))?;
        }
        dur(
            &mut c.controller_start_interval,
            "controller-start-interval",
            f.controller_start_interval.take(),
        )?;
        dur(
            &mut c.min_resync_period,
            "min-resync-period",
            f.min_resync_period.take(),
        )?;
        for (name, raw) in concurrent {
            let n = parse_i32(name, raw)?;
            c.concurrent_syncs.insert(name, n.max(0) as usize);
            c.given.insert(name, raw.clone());
        }
        boolean(
            &mut c.use_service_account_credentials,
            "use-service-account-credentials",
            f.use_service_account_credentials.take(),
        )?;
        boolean(
            &mut c.garbage_collector.enable_garbage_collector,
            "enable-garbage-collector",
            f.enable_garbage_collector.take(),
        )?;
        dur(
            &mut c.namespace_controller.namespace_sync_period,
            "namespace-sync-period",
            f.namespace_sync_period.take(),
        )?;
        for (flag, v, slot) in [
            (
                "endpoint-updates-batch-period",
                f.endpoint_updates_batch_period.take(),
                &mut c.endpoint_controller.endpoint_updates_batch_period,
            ),
            (
                "endpointslice-updates-batch-period",
                f.endpointslice_updates_batch_period.take(),
                &mut c.endpoint_slice.endpoint_updates_batch_period,
            ),
            (
                "mirroring-endpointslice-updates-batch-period",
                f.mirroring_endpointslice_updates_batch_period.take(),
                &mut c.endpoint_slice.mirroring_endpoint_updates_batch_period,
            ),
        ] {
            if let Some(v) = v {
                let (negative, d) = crate::compat::parse::parse_go_duration_signed(&v)
                    .map_err(|e| invalid(flag, &v, &e))?;
                *slot = if negative { Duration::ZERO } else { d };
                // `/configz` shows the value as given (a negative one too).
                record_flag(&mut c.given, flag, FlagType::Duration, &v);
            }
        }
        for (flag, v, slot) in [
            (
                "max-endpoints-per-slice",
                f.max_endpoints_per_slice.take(),
                &mut c.endpoint_slice.max_endpoints_per_slice,
            ),
            (
                "mirroring-max-endpoints-per-subset",
                f.mirroring_max_endpoints_per_subset.take(),
                &mut c.endpoint_slice.mirroring_max_endpoints_per_subset,
            ),
        ] {
            if let Some(v) = v {
                *slot = parse_i32(flag, &v)?;
                record_flag(&mut c.given, flag, FlagType::Int32, &v);
            }
        }
        if let Some(v) = f.terminated_pod_gc_threshold.take() {
            c.pod_gc.terminated_pod_gc_threshold = parse_i32("terminated-pod-gc-threshold", &v)?;
        }
        dur(
            &mut c.kube_cloud_shared.node_monitor_period,
            "node-monitor-period",
            f.node_monitor_period.take(),
        )?;
        dur(
            &mut c.node_lifecycle.node_monitor_grace_period,
            "node-monitor-grace-period",
            f.node_monitor_grace_period.take(),
        )?;
        dur(
            &mut c.node_lifecycle.node_startup_grace_period,
            "node-startup-grace-period",
            f.node_startup_grace_period.take(),
        )?;
        dur(
            &mut c.node_lifecycle.node_autonomy_duration,
            "node-autonomy-duration",
            f.node_autonomy_duration.take(),
        )?;
        if let Some(v) = f.cluster_name.take() {
            c.kube_cloud_shared.cluster_name = v;
        }

        version::from_flags(&mut c, &mut f)?;
        node_ipam_flags(&mut c, &mut f)?;
        leader_election_and_signing(&mut c, &mut f)?;
        secure_serving_and_auth(&mut c, &mut f)?;
        if let Some(v) = f.v {
            // klog's Level is an int32 read in base 10; negative levels behave as 0.
            let n = crate::compat::parse::parse_go_int10(&v, 32)
                .map_err(|why| invalid("v", &v, &why))?;
            c.verbosity = n.max(0) as u32;
        }
        if let Some(v) = f.logging_format {
            c.logging_format = v.parse().map_err(Error::Config)?;
        }
        c.validate()?;
        Ok(c)
    }

    /// Cross-flag checks, with upstream's wording where upstream has one.
    pub fn validate(&self) -> Result<()> {
        let le = &self.leader_election;
        if le.enabled {
            if le.resource_lock != "leases" {
                return Err(Error::Config(
                    "resourceLock value must be \"leases\"".to_string(),
                ));
            }
            if le.lease_duration <= le.renew_deadline {
                return Err(Error::Config(
                    "leaseDuration must be greater than renewDeadline".to_string(),
                ));
            }
            if le.renew_deadline.as_secs_f64() <= 1.2 * le.retry_period.as_secs_f64() {
                return Err(Error::Config(
                    "renewDeadline must be greater than retryPeriod*JitterFactor".to_string(),
                ));
            }
            if le.retry_period.is_zero() {
                return Err(Error::Config(
                    "retryPeriod must be greater than zero".to_string(),
                ));
            }
            if le.resource_name.is_empty() || le.resource_namespace.is_empty() {
                return Err(Error::Config(
                    "--leader-elect-resource-name and --leader-elect-resource-namespace must not be empty"
                        .to_string(),
                ));
            }
        }
        self.cluster_signing.validate()?;
        // Upstream's EndpointSliceController and EndpointSliceMirroringController options.
        for (flag, n) in [
            (
                "max-endpoints-per-slice",
                self.endpoint_slice.max_endpoints_per_slice,
            ),
            (
                "mirroring-max-endpoints-per-subset",
                self.endpoint_slice.mirroring_max_endpoints_per_subset,
            ),
        ] {
            if n < 1 {
                return Err(Error::Config(format!(
                    "{flag} must not be less than 1, but got {n}"
                )));
            }
            if n > 1000 {
                return Err(Error::Config(format!(
                    "{flag} must not be more than 1000, but got {n}"
                )));
            }
        }
        if self.secure_port != 0
            && (self.tls_cert_file.is_some() != self.tls_private_key_file.is_some())
        {
            return Err(Error::Config(
                "--tls-cert-file and --tls-private-key-file must be given together: missing filename for serving cert"
                    .to_string(),
            ));
        }
        if self.kube_api_qps.is_nan() || self.kube_api_qps < 0.0 {
            return Err(Error::Config(format!(
                "--kube-api-qps {} must not be negative",
                self.kube_api_qps
            )));
        }
        Ok(())
    }
}

/// `--allocate-node-cidrs`, the cluster and service CIDRs and the node CIDR mask sizes.
fn node_ipam_flags(c: &mut Config, f: &mut RunFlags) -> Result<()> {
    boolean(
        &mut c.kube_cloud_shared.allocate_node_cidrs,
        "allocate-node-cidrs",
        f.allocate_node_cidrs.take(),
    )?;
    for (name, v) in [
        ("cluster-cidr", &f.cluster_cidr),
        ("service-cluster-ip-range", &f.service_cluster_ip_range),
    ] {
        if let Some(v) = v {
            c.given.insert(name, v.clone());
        }
    }
    c.kube_cloud_shared.cluster_cidrs = cidrs(
        "cluster-cidr",
        f.cluster_cidr.as_deref(),
        c.kube_cloud_shared.allocate_node_cidrs,
        &mut c.warnings,
    )?;
    c.node_ipam.service_cluster_ip_ranges = cidrs(
        "service-cluster-ip-range",
        f.service_cluster_ip_range.as_deref(),
        c.kube_cloud_shared.allocate_node_cidrs,
        &mut c.warnings,
    )?;
    if c.node_ipam.service_cluster_ip_ranges.len() > 2 {
        return Err(Error::Config(
            "--service-cluster-ip-range can not contain more than two entries".to_string(),
        ));
    }
    c.node_ipam.node_cidr_mask_size =
        mask("node-cidr-mask-size", f.node_cidr_mask_size.take(), 128)?;
    c.node_ipam.node_cidr_mask_size_ipv4 = mask(
        "node-cidr-mask-size-ipv4",
        f.node_cidr_mask_size_ipv4.take(),
        32,
    )?;
    c.node_ipam.node_cidr_mask_size_ipv6 = mask(
        "node-cidr-mask-size-ipv6",
        f.node_cidr_mask_size_ipv6.take(),
        128,
    )?;
    Ok(())
}

/// `--leader-elect*` and `--cluster-signing-*`, with the two private-key and CA files.
fn leader_election_and_signing(c: &mut Config, f: &mut RunFlags) -> Result<()> {
    let le = &mut c.leader_election;
    boolean(&mut le.enabled, "leader-elect", f.leader_elect.take())?;
    dur(
        &mut le.lease_duration,
        "leader-elect-lease-duration",
        f.leader_elect_lease_duration.take(),
    )?;
    dur(
        &mut le.renew_deadline,
        "leader-elect-renew-deadline",
        f.leader_elect_renew_deadline.take(),
    )?;
    dur(
        &mut le.retry_period,
        "leader-elect-retry-period",
        f.leader_elect_retry_period.take(),
    )?;
    if let Some(v) = f.leader_elect_resource_lock.take() {
        le.resource_lock = v;
    }
    if let Some(v) = f.leader_elect_resource_name.take() {
        le.resource_name = v;
    }
    if let Some(v) = f.leader_elect_resource_namespace.take() {
        le.resource_namespace = v;
    }

    c.sa_controller.service_account_private_key_file =
        path(f.service_account_private_key_file.take());
    c.sa_controller.root_ca_file = path(f.root_ca_file.take());
    let cs = &mut c.cluster_signing;
    cs.cert_file = path(f.cluster_signing_cert_file.take());
    cs.key_file = path(f.cluster_signing_key_file.take());
    cs.kubelet_serving = SignerFiles {
        cert_file: path(f.cluster_signing_kubelet_serving_cert_file.take()),
        key_file: path(f.cluster_signing_kubelet_serving_key_file.take()),
    };
    cs.kubelet_client = SignerFiles {
        cert_file: path(f.cluster_signing_kubelet_client_cert_file.take()),
        key_file: path(f.cluster_signing_kubelet_client_key_file.take()),
    };
    cs.kube_apiserver_client = SignerFiles {
        cert_file: path(f.cluster_signing_kube_apiserver_client_cert_file.take()),
        key_file: path(f.cluster_signing_kube_apiserver_client_key_file.take()),
    };
    cs.legacy_unknown = SignerFiles {
        cert_file: path(f.cluster_signing_legacy_unknown_cert_file.take()),
        key_file: path(f.cluster_signing_legacy_unknown_key_file.take()),
    };
    dur(
        &mut cs.duration,
        "cluster-signing-duration",
        f.cluster_signing_duration.take(),
    )?;
    Ok(())
}

/// The secure port and its authentication and authorization flags.
fn secure_serving_and_auth(c: &mut Config, f: &mut RunFlags) -> Result<()> {
    if let Some(v) = f.secure_port.take() {
        let n = parse_i32("secure-port", &v)?;
        c.secure_port = u16::try_from(n).map_err(|_| {
            Error::Config(format!(
                "--secure-port {n} must be between 0 and 65535, inclusive. 0 for turning off secure port"
            ))
        })?;
    }
    if let Some(v) = f.bind_address.take() {
        c.bind_address = v
            .trim()
            .parse()
            .map_err(|_| invalid("bind-address", &v, &format!("failed to parse IP: {v:?}")))?;
    }
    c.cert_dir = path(f.cert_dir.take());
    c.tls_cert_file = path(f.tls_cert_file.take());
    c.tls_private_key_file = path(f.tls_private_key_file.take());

    c.authentication_kubeconfig = path(f.authentication_kubeconfig.take());
    boolean(
        &mut c.authentication_skip_lookup,
        "authentication-skip-lookup",
        f.authentication_skip_lookup.take(),
    )?;
    boolean(
        &mut c.authentication_tolerate_lookup_failure,
        "authentication-tolerate-lookup-failure",
        f.authentication_tolerate_lookup_failure.take(),
    )?;
    dur(
        &mut c.authentication_token_webhook_cache_ttl,
        "authentication-token-webhook-cache-ttl",
        f.authentication_token_webhook_cache_ttl.take(),
    )?;
    c.client_ca_file = path(f.client_ca_file.take());
    c.requestheader_client_ca_file = path(f.requestheader_client_ca_file.take());
    for (field, value) in [
        (
            &mut c.requestheader_allowed_names,
            f.requestheader_allowed_names.take(),
        ),
        (
            &mut c.requestheader_username_headers,
            f.requestheader_username_headers.take(),
        ),
        (
            &mut c.requestheader_group_headers,
            f.requestheader_group_headers.take(),
        ),
        (
            &mut c.requestheader_extra_headers_prefix,
            f.requestheader_extra_headers_prefix.take(),
        ),
    ] {
        if let Some(v) = value {
            *field = split_list(&v);
        }
    }
    c.authorization_kubeconfig = path(f.authorization_kubeconfig.take());
    if let Some(v) = f.authorization_always_allow_paths.take() {
        c.authorization_always_allow_paths = split_list(&v);
    }
    dur(
        &mut c.authorization_webhook_cache_authorized_ttl,
        "authorization-webhook-cache-authorized-ttl",
        f.authorization_webhook_cache_authorized_ttl.take(),
    )?;
    dur(
        &mut c.authorization_webhook_cache_unauthorized_ttl,
        "authorization-webhook-cache-unauthorized-ttl",
        f.authorization_webhook_cache_unauthorized_ttl.take(),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signer_files_fallback() {
        let mut cs = Config::default().cluster_signing;
        assert!(!cs.enabled());
        cs.cert_file = Some("ca.crt".into());
        assert!(!cs.enabled());
        cs.key_file = Some("ca.key".into());
        assert!(cs.enabled());
        let f = cs.files_for(&cs.kubelet_serving.clone()).unwrap();
        assert_eq!(f.cert_file, PathBuf::from("ca.crt"));
        let own = SignerFiles {
            cert_file: Some("s.crt".into()),
            key_file: None,
        };
        assert_eq!(cs.files_for(&own), None);
    }
}
