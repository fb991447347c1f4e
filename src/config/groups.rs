//! The per-controller option groups of [`super::Config`], named and split as upstream's
//! componentconfig (`KubeControllerManagerConfiguration`) groups them.

use crate::compat::cidr::Cidr;
use std::path::PathBuf;
use std::time::Duration;

/// KubeCloudShared: what several controllers read.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeCloudShared {
    pub cluster_name: String,
    pub allocate_node_cidrs: bool,
    pub cluster_cidrs: Vec<Cidr>,
    pub node_monitor_period: Duration,
}

/// GarbageCollectorController (`--concurrent-gc-syncs` is in the worker counts).
#[derive(Debug, Clone, PartialEq)]
pub struct GarbageCollectorOptions {
    pub enable_garbage_collector: bool,
}

/// NamespaceController (`--concurrent-namespace-syncs` is in the worker counts).
#[derive(Debug, Clone, PartialEq)]
pub struct NamespaceOptions {
    pub namespace_sync_period: Duration,
}

/// EndpointController (`--concurrent-endpoint-syncs` is in the worker counts).
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointOptions {
    /// How long pod changes wait before their Services are synced (negative values, which
    /// upstream takes, act as zero).
    pub endpoint_updates_batch_period: Duration,
}

/// EndpointSliceController and EndpointSliceMirroringController (their `--concurrent-*`
/// flags are in the worker counts).
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointSliceOptions {
    /// `--max-endpoints-per-slice`, 1 to 1000.
    pub max_endpoints_per_slice: i32,
    /// `--endpointslice-updates-batch-period` (negative values act as zero).
    pub endpoint_updates_batch_period: Duration,
    /// `--mirroring-max-endpoints-per-subset`, 1 to 1000.
    pub mirroring_max_endpoints_per_subset: i32,
    /// `--mirroring-endpointslice-updates-batch-period` (negative values act as zero).
    pub mirroring_endpoint_updates_batch_period: Duration,
}

/// PodGCController.
#[derive(Debug, Clone, PartialEq)]
pub struct PodGcOptions {
    pub terminated_pod_gc_threshold: i32,
}

/// NodeLifecycleController.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeLifecycleOptions {
    pub node_monitor_grace_period: Duration,
    pub node_startup_grace_period: Duration,
    /// `--node-eviction-rate`: nodes tainted NoExecute per second in a healthy zone.
    pub node_eviction_rate: f32,
    /// `--secondary-node-eviction-rate`: the same in a partially disrupted large zone.
    pub secondary_node_eviction_rate: f32,
    /// `--large-cluster-size-threshold`.
    pub large_cluster_size_threshold: i32,
    /// `--unhealthy-zone-threshold`.
    pub unhealthy_zone_threshold: f32,
    /// `--node-autonomy-duration` (edgekcm's own; not in `/configz`): zero is off.
    pub node_autonomy_duration: Duration,
}

/// NodeIPAMController.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeIpamOptions {
    pub service_cluster_ip_ranges: Vec<Cidr>,
    pub node_cidr_mask_size: Option<u8>,
    pub node_cidr_mask_size_ipv4: Option<u8>,
    pub node_cidr_mask_size_ipv6: Option<u8>,
}

/// SAController: the token controller's key and the CA it (and the root CA publisher) hands
/// out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SaControllerOptions {
    pub service_account_private_key_file: Option<PathBuf>,
    pub root_ca_file: Option<PathBuf>,
}
