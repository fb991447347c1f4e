//! The argh struct the command line's acted-on flags are handed to, as config reads them.

use argh::FromArgs;

/// Flags edgekcm acts on, after normalisation (each given at most once, as text).
/// Values are typed and validated in `Config::from_flags`, which words errors like pflag.
#[derive(FromArgs, Debug, Default, Clone, PartialEq)]
/// edgekcm: kube-controller-manager compatible flags
pub struct RunFlags {
    /// kubeconfig path
    #[argh(option)]
    pub kubeconfig: Option<String>,
    /// API server URL
    #[argh(option)]
    pub master: Option<String>,
    /// controllers list
    #[argh(option)]
    pub controllers: Option<String>,
    /// leader election on/off
    #[argh(option)]
    pub leader_elect: Option<String>,
    /// lease duration
    #[argh(option)]
    pub leader_elect_lease_duration: Option<String>,
    /// renew deadline
    #[argh(option)]
    pub leader_elect_renew_deadline: Option<String>,
    /// retry period
    #[argh(option)]
    pub leader_elect_retry_period: Option<String>,
    /// lock type
    #[argh(option)]
    pub leader_elect_resource_lock: Option<String>,
    /// lock name
    #[argh(option)]
    pub leader_elect_resource_name: Option<String>,
    /// lock namespace
    #[argh(option)]
    pub leader_elect_resource_namespace: Option<String>,
    /// client QPS
    #[argh(option)]
    pub kube_api_qps: Option<String>,
    /// client burst
    #[argh(option)]
    pub kube_api_burst: Option<String>,
    /// per-controller service accounts
    #[argh(option)]
    pub use_service_account_credentials: Option<String>,
    /// service account signing key
    #[argh(option)]
    pub service_account_private_key_file: Option<String>,
    /// root CA bundle
    #[argh(option)]
    pub root_ca_file: Option<String>,
    /// signing CA cert
    #[argh(option)]
    pub cluster_signing_cert_file: Option<String>,
    /// signing CA key
    #[argh(option)]
    pub cluster_signing_key_file: Option<String>,
    /// kubelet-serving signer cert
    #[argh(option)]
    pub cluster_signing_kubelet_serving_cert_file: Option<String>,
    /// kubelet-serving signer key
    #[argh(option)]
    pub cluster_signing_kubelet_serving_key_file: Option<String>,
    /// kubelet-client signer cert
    #[argh(option)]
    pub cluster_signing_kubelet_client_cert_file: Option<String>,
    /// kubelet-client signer key
    #[argh(option)]
    pub cluster_signing_kubelet_client_key_file: Option<String>,
    /// kube-apiserver-client signer cert
    #[argh(option)]
    pub cluster_signing_kube_apiserver_client_cert_file: Option<String>,
    /// kube-apiserver-client signer key
    #[argh(option)]
    pub cluster_signing_kube_apiserver_client_key_file: Option<String>,
    /// legacy-unknown signer cert
    #[argh(option)]
    pub cluster_signing_legacy_unknown_cert_file: Option<String>,
    /// legacy-unknown signer key
    #[argh(option)]
    pub cluster_signing_legacy_unknown_key_file: Option<String>,
    /// max signed certificate lifetime
    #[argh(option)]
    pub cluster_signing_duration: Option<String>,
    /// HTTPS port
    #[argh(option)]
    pub secure_port: Option<String>,
    /// HTTPS address
    #[argh(option)]
    pub bind_address: Option<String>,
    /// serving cert directory
    #[argh(option)]
    pub cert_dir: Option<String>,
    /// serving cert
    #[argh(option)]
    pub tls_cert_file: Option<String>,
    /// serving key
    #[argh(option)]
    pub tls_private_key_file: Option<String>,
    /// log verbosity
    #[argh(option)]
    pub v: Option<String>,
    /// log format
    #[argh(option)]
    pub logging_format: Option<String>,
    /// delay between controller starts
    #[argh(option)]
    pub controller_start_interval: Option<String>,
    /// informer resync period
    #[argh(option)]
    pub min_resync_period: Option<String>,
    /// namespace resync period
    #[argh(option)]
    pub namespace_sync_period: Option<String>,
    /// endpoint batch period
    #[argh(option)]
    pub endpoint_updates_batch_period: Option<String>,
    /// endpointslice batch period
    #[argh(option)]
    pub endpointslice_updates_batch_period: Option<String>,
    /// endpoints per slice
    #[argh(option)]
    pub max_endpoints_per_slice: Option<String>,
    /// mirroring batch period
    #[argh(option)]
    pub mirroring_endpointslice_updates_batch_period: Option<String>,
    /// mirrored addresses per subset
    #[argh(option)]
    pub mirroring_max_endpoints_per_subset: Option<String>,
    /// terminated pod threshold
    #[argh(option)]
    pub terminated_pod_gc_threshold: Option<String>,
    /// node monitor period
    #[argh(option)]
    pub node_monitor_period: Option<String>,
    /// node monitor grace period
    #[argh(option)]
    pub node_monitor_grace_period: Option<String>,
    /// node startup grace period
    #[argh(option)]
    pub node_startup_grace_period: Option<String>,
    /// edgekcm's own: how long autonomous nodes keep their pods after their link is lost
    #[argh(option)]
    pub node_autonomy_duration: Option<String>,
    /// garbage collector on/off
    #[argh(option)]
    pub enable_garbage_collector: Option<String>,
    /// kubeconfig for token reviews
    #[argh(option)]
    pub authentication_kubeconfig: Option<String>,
    /// kubeconfig for access reviews
    #[argh(option)]
    pub authorization_kubeconfig: Option<String>,
    /// client CA bundle
    #[argh(option)]
    pub client_ca_file: Option<String>,
    /// front-proxy CA bundle
    #[argh(option)]
    pub requestheader_client_ca_file: Option<String>,
    /// front-proxy client certificate common names
    #[argh(option)]
    pub requestheader_allowed_names: Option<String>,
    /// front-proxy user name headers
    #[argh(option)]
    pub requestheader_username_headers: Option<String>,
    /// front-proxy group headers
    #[argh(option)]
    pub requestheader_group_headers: Option<String>,
    /// front-proxy extra header prefixes
    #[argh(option)]
    pub requestheader_extra_headers_prefix: Option<String>,
    /// paths allowed without authorization
    #[argh(option)]
    pub authorization_always_allow_paths: Option<String>,
    /// skip authentication config lookup
    #[argh(option)]
    pub authentication_skip_lookup: Option<String>,
    /// tolerate lookup failure
    #[argh(option)]
    pub authentication_tolerate_lookup_failure: Option<String>,
    /// token review cache ttl
    #[argh(option)]
    pub authentication_token_webhook_cache_ttl: Option<String>,
    /// authorized cache ttl
    #[argh(option)]
    pub authorization_webhook_cache_authorized_ttl: Option<String>,
    /// unauthorized cache ttl
    #[argh(option)]
    pub authorization_webhook_cache_unauthorized_ttl: Option<String>,
    /// allocate node CIDRs
    #[argh(option)]
    pub allocate_node_cidrs: Option<String>,
    /// pod CIDR(s)
    #[argh(option)]
    pub cluster_cidr: Option<String>,
    /// service CIDR(s)
    #[argh(option)]
    pub service_cluster_ip_range: Option<String>,
    /// node CIDR mask
    #[argh(option)]
    pub node_cidr_mask_size: Option<String>,
    /// node IPv4 CIDR mask
    #[argh(option)]
    pub node_cidr_mask_size_ipv4: Option<String>,
    /// node IPv6 CIDR mask
    #[argh(option)]
    pub node_cidr_mask_size_ipv6: Option<String>,
    /// cluster name
    #[argh(option)]
    pub cluster_name: Option<String>,
    /// emulated Kubernetes version
    #[argh(option)]
    pub emulated_version: Option<String>,
    /// min compatibility version
    #[argh(option)]
    pub min_compatibility_version: Option<String>,
    /// feature gates
    #[argh(option)]
    pub feature_gates: Option<String>,
}
