//! `/configz`: the configuration as kube-controller-manager v1.37 reports it, its internal
//! `KubeControllerManagerConfiguration` under `kubecontrollermanager.config.k8s.io`, with Go's
//! field names and order (the internal type has no JSON tags; the embedded client, leader
//! election, debugging and migration types have theirs), durations as Go prints them.
//!
//! [`FIELDS`] lists every leaf in upstream's order with where its value comes from: a field of
//! [`Config`] for the flags edgekcm reads; for the flags it accepts without acting on them, the
//! text given on the command line read as the flag's Go type, else upstream's default; fixed
//! values for the fields no flag sets. Compared byte for byte with kube-controller-manager
//! v1.37.2 for default and changed flags (see `FEATURES.md`).

use std::time::Duration;

use super::flagtype::{FlagType, FlagValue};
use super::{format_go_duration, Config};
use crate::compat::json::Json;

/// The key `/configz` holds the configuration under.
pub const GROUP: &str = "kubecontrollermanager.config.k8s.io";

/// Where a leaf's value comes from.
enum Src {
    /// Something [`Config`] holds.
    Cfg(fn(&Config) -> Json),
    /// A `--concurrent-*-syncs` flag: its text as given (a negative count shows as given, as
    /// upstream's), else the worker count.
    Workers(&'static str),
    /// A flag kept as text: as given, else this default; a string slice not given is `null`.
    Flag(&'static str, FlagType, &'static str),
}

use FlagType::{Bool, Duration as Dur, Float32, Float64, Int32, Str, StrSlice};
use Src::{Cfg, Flag, Workers};

fn dur(d: Duration) -> Json {
    Json::Str(format_go_duration(d))
}

fn text(s: &str) -> Json {
    Json::str(s)
}

fn path(p: &Option<std::path::PathBuf>) -> Json {
    Json::Str(
        p.as_ref()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
    )
}

/// `--service-cluster-ip-range` split on commas as upstream's node IPAM options split it.
fn service_cidr(c: &Config, i: usize) -> Json {
    let raw = c.given.get("service-cluster-ip-range").map(String::as_str);
    text(raw.and_then(|r| r.split(',').nth(i)).unwrap_or(""))
}

/// The migration configuration: upstream's default when migration is enabled without a
/// `--leader-migration-config` file, else empty.
fn leader_migration(c: &Config) -> Json {
    let enabled = matches!(
        flag_value(c, "enable-leader-migration", Bool, "false"),
        Ok(Json::Bool(true))
    );
    let file = c
        .given
        .get("leader-migration-config")
        .is_some_and(|f| !f.is_empty());
    if !enabled || file {
        return Json::Obj(vec![
            ("leaderName", text("")),
            ("resourceLock", text("")),
            ("controllerLeaders", Json::Null),
        ]);
    }
    let leader = |name: &str| Json::Obj(vec![("name", text(name)), ("component", text("*"))]);
    Json::Obj(vec![
        ("leaderName", text("cloud-provider-extraction-migration")),
        ("resourceLock", text("leases")),
        (
            "controllerLeaders",
            Json::Arr(vec![
                leader("route-controller"),
                leader("service-controller"),
                leader("cloud-node-lifecycle-controller"),
            ]),
        ),
    ])
}

fn gc_ignored() -> Json {
    let gr = |group: &str| Json::Obj(vec![("Group", text(group)), ("Resource", text("events"))]);
    Json::Arr(vec![gr(""), gr("events.k8s.io")])
}

/// Every leaf of the configuration, in upstream's order.
static FIELDS: &[(&str, Src)] = &[
    ("kind", Cfg(|_| text("KubeControllerManagerConfiguration"))),
    ("apiVersion", Cfg(|_| text("kubecontrollermanager.config.k8s.io/v1alpha1"))),
    ("Generic.Port", Cfg(|_| Json::Int(0))),
    ("Generic.Address", Cfg(|_| text("0.0.0.0"))),
    ("Generic.MinResyncPeriod", Cfg(|c| dur(c.min_resync_period))),
    ("Generic.ClientConnection.kubeconfig", Cfg(|c| path(&c.kubeconfig))),
    ("Generic.ClientConnection.acceptContentTypes", Cfg(|_| text(""))),
    ("Generic.ClientConnection.contentType", Flag("kube-api-content-type", Str, "application/vnd.kubernetes.protobuf")),
    ("Generic.ClientConnection.qps", Cfg(|c| Json::F32(c.kube_api_qps))),
    ("Generic.ClientConnection.burst", Cfg(|c| Json::Int(c.kube_api_burst.into()))),
    ("Generic.ControllerStartInterval", Cfg(|c| dur(c.controller_start_interval))),
    ("Generic.LeaderElection.leaderElect", Cfg(|c| Json::Bool(c.leader_election.enabled))),
    ("Generic.LeaderElection.leaseDuration", Cfg(|c| dur(c.leader_election.lease_duration))),
    ("Generic.LeaderElection.renewDeadline", Cfg(|c| dur(c.leader_election.renew_deadline))),
    ("Generic.LeaderElection.retryPeriod", Cfg(|c| dur(c.leader_election.retry_period))),
    ("Generic.LeaderElection.resourceLock", Cfg(|c| text(&c.leader_election.resource_lock))),
    ("Generic.LeaderElection.resourceName", Cfg(|c| text(&c.leader_election.resource_name))),
    ("Generic.LeaderElection.resourceNamespace", Cfg(|c| text(&c.leader_election.resource_namespace))),
    ("Generic.Controllers", Cfg(|c| Json::Arr(c.controllers.entries().iter().map(|e| text(e)).collect()))),
    ("Generic.Debugging.enableProfiling", Flag("profiling", Bool, "true")),
    ("Generic.Debugging.enableContentionProfiling", Flag("contention-profiling", Bool, "false")),
    ("Generic.LeaderMigrationEnabled", Flag("enable-leader-migration", Bool, "false")),
    ("Generic.LeaderMigration", Cfg(leader_migration)),
    ("KubeCloudShared.CloudProvider.Name", Flag("cloud-provider", Str, "")),
    ("KubeCloudShared.CloudProvider.CloudConfigFile", Flag("cloud-config", Str, "")),
    ("KubeCloudShared.ExternalCloudVolumePlugin", Flag("external-cloud-volume-plugin", Str, "")),
    ("KubeCloudShared.UseServiceAccountCredentials", Cfg(|c| Json::Bool(c.use_service_account_credentials))),
    ("KubeCloudShared.AllowUntaggedCloud", Flag("allow-untagged-cloud", Bool, "false")),
    ("KubeCloudShared.RouteReconciliationPeriod", Flag("route-reconciliation-period", Dur, "10s")),
    ("KubeCloudShared.ClusterName", Cfg(|c| text(&c.kube_cloud_shared.cluster_name))),
    ("KubeCloudShared.ClusterCIDR", Flag("cluster-cidr", Str, "")),
    ("KubeCloudShared.AllocateNodeCIDRs", Cfg(|c| Json::Bool(c.kube_cloud_shared.allocate_node_cidrs))),
    ("KubeCloudShared.CIDRAllocatorType", Flag("cidr-allocator-type", Str, "RangeAllocator")),
    ("KubeCloudShared.ConfigureCloudRoutes", Flag("configure-cloud-routes", Bool, "true")),
    ("KubeCloudShared.NodeSyncPeriod", Flag("node-sync-period", Dur, "0s")),
    ("AttachDetachController.DisableAttachDetachReconcilerSync", Flag("disable-attach-detach-reconcile-sync", Bool, "false")),
    ("AttachDetachController.ReconcilerSyncLoopPeriod", Flag("attach-detach-reconcile-sync-period", Dur, "1m0s")),
    ("AttachDetachController.disableForceDetachOnTimeout", Flag("disable-force-detach-on-timeout", Bool, "false")),
    ("CSRSigningController.ClusterSigningCertFile", Cfg(|c| path(&c.cluster_signing.cert_file))),
    ("CSRSigningController.ClusterSigningKeyFile", Cfg(|c| path(&c.cluster_signing.key_file))),
    ("CSRSigningController.KubeletServingSignerConfiguration.CertFile", Cfg(|c| path(&c.cluster_signing.kubelet_serving.cert_file))),
    ("CSRSigningController.KubeletServingSignerConfiguration.KeyFile", Cfg(|c| path(&c.cluster_signing.kubelet_serving.key_file))),
    ("CSRSigningController.KubeletClientSignerConfiguration.CertFile", Cfg(|c| path(&c.cluster_signing.kubelet_client.cert_file))),
    ("CSRSigningController.KubeletClientSignerConfiguration.KeyFile", Cfg(|c| path(&c.cluster_signing.kubelet_client.key_file))),
    ("CSRSigningController.KubeAPIServerClientSignerConfiguration.CertFile", Cfg(|c| path(&c.cluster_signing.kube_apiserver_client.cert_file))),
    ("CSRSigningController.KubeAPIServerClientSignerConfiguration.KeyFile", Cfg(|c| path(&c.cluster_signing.kube_apiserver_client.key_file))),
    ("CSRSigningController.LegacyUnknownSignerConfiguration.CertFile", Cfg(|c| path(&c.cluster_signing.legacy_unknown.cert_file))),
    ("CSRSigningController.LegacyUnknownSignerConfiguration.KeyFile", Cfg(|c| path(&c.cluster_signing.legacy_unknown.key_file))),
    ("CSRSigningController.ClusterSigningDuration", Cfg(|c| dur(c.cluster_signing.duration))),
    ("DaemonSetController.ConcurrentDaemonSetSyncs", Workers("concurrent-daemonset-syncs")),
    ("DeploymentController.ConcurrentDeploymentSyncs", Workers("concurrent-deployment-syncs")),
    ("DisruptionController.ConcurrentDisruptionSyncs", Workers("concurrent-disruption-syncs")),
    ("StatefulSetController.ConcurrentStatefulSetSyncs", Workers("concurrent-statefulset-syncs")),
    ("DeprecatedController", Cfg(|_| Json::Obj(Vec::new()))),
    ("EndpointController.ConcurrentEndpointSyncs", Workers("concurrent-endpoint-syncs")),
    ("EndpointController.EndpointUpdatesBatchPeriod", Flag("endpoint-updates-batch-period", Dur, "0s")),
    ("EndpointSliceController.ConcurrentServiceEndpointSyncs", Workers("concurrent-service-endpoint-syncs")),
    ("EndpointSliceController.MaxEndpointsPerSlice", Flag("max-endpoints-per-slice", Int32, "100")),
    ("EndpointSliceController.EndpointUpdatesBatchPeriod", Flag("endpointslice-updates-batch-period", Dur, "0s")),
    ("EndpointSliceMirroringController.MirroringConcurrentServiceEndpointSyncs", Workers("mirroring-concurrent-service-endpoint-syncs")),
    ("EndpointSliceMirroringController.MirroringMaxEndpointsPerSubset", Flag("mirroring-max-endpoints-per-subset", Int32, "1000")),
    ("EndpointSliceMirroringController.MirroringEndpointUpdatesBatchPeriod", Flag("mirroring-endpointslice-updates-batch-period", Dur, "0s")),
    ("EphemeralVolumeController.ConcurrentEphemeralVolumeSyncs", Workers("concurrent-ephemeralvolume-syncs")),
    ("GarbageCollectorController.EnableGarbageCollector", Cfg(|c| Json::Bool(c.garbage_collector.enable_garbage_collector))),
    ("GarbageCollectorController.ConcurrentGCSyncs", Workers("concurrent-gc-syncs")),
    ("GarbageCollectorController.GCIgnoredResources", Cfg(|_| gc_ignored())),
    ("HPAController.ConcurrentHorizontalPodAutoscalerSyncs", Workers("concurrent-horizontal-pod-autoscaler-syncs")),
    ("HPAController.HorizontalPodAutoscalerSyncPeriod", Flag("horizontal-pod-autoscaler-sync-period", Dur, "15s")),
    ("HPAController.HorizontalPodAutoscalerDownscaleStabilizationWindow", Flag("horizontal-pod-autoscaler-downscale-stabilization", Dur, "5m0s")),
    ("HPAController.HorizontalPodAutoscalerTolerance", Flag("horizontal-pod-autoscaler-tolerance", Float64, "0.1")),
    ("HPAController.HorizontalPodAutoscalerCPUInitializationPeriod", Flag("horizontal-pod-autoscaler-cpu-initialization-period", Dur, "5m0s")),
    ("HPAController.HorizontalPodAutoscalerInitialReadinessDelay", Flag("horizontal-pod-autoscaler-initial-readiness-delay", Dur, "30s")),
    ("JobController.ConcurrentJobSyncs", Workers("concurrent-job-syncs")),
    ("CronJobController.ConcurrentCronJobSyncs", Workers("concurrent-cron-job-syncs")),
    ("LegacySATokenCleaner.CleanUpPeriod", Flag("legacy-service-account-token-clean-up-period", Dur, "8760h0m0s")),
    ("NamespaceController.NamespaceSyncPeriod", Cfg(|c| dur(c.namespace_controller.namespace_sync_period))),
    ("NamespaceController.ConcurrentNamespaceSyncs", Workers("concurrent-namespace-syncs")),
    ("NodeIPAMController.ServiceCIDR", Cfg(|c| service_cidr(c, 0))),
    ("NodeIPAMController.SecondaryServiceCIDR", Cfg(|c| service_cidr(c, 1))),
    ("NodeIPAMController.NodeCIDRMaskSize", Cfg(|c| Json::Int(c.node_ipam.node_cidr_mask_size.unwrap_or(0).into()))),
    ("NodeIPAMController.NodeCIDRMaskSizeIPv4", Cfg(|c| Json::Int(c.node_ipam.node_cidr_mask_size_ipv4.unwrap_or(0).into()))),
    ("NodeIPAMController.NodeCIDRMaskSizeIPv6", Cfg(|c| Json::Int(c.node_ipam.node_cidr_mask_size_ipv6.unwrap_or(0).into()))),
    ("NodeLifecycleController.NodeEvictionRate", Flag("node-eviction-rate", Float32, "0.1")),
    ("NodeLifecycleController.SecondaryNodeEvictionRate", Flag("secondary-node-eviction-rate", Float32, "0.01")),
    ("NodeLifecycleController.NodeStartupGracePeriod", Cfg(|c| dur(c.node_lifecycle.node_startup_grace_period))),
    ("NodeLifecycleController.NodeMonitorGracePeriod", Cfg(|c| dur(c.node_lifecycle.node_monitor_grace_period))),
    // No flag since 1.27's --pod-eviction-timeout went.
    ("NodeLifecycleController.PodEvictionTimeout", Cfg(|_| text("0s"))),
    ("NodeLifecycleController.LargeClusterSizeThreshold", Flag("large-cluster-size-threshold", Int32, "50")),
    ("NodeLifecycleController.UnhealthyZoneThreshold", Flag("unhealthy-zone-threshold", Float32, "0.55")),
    ("NodeLifecycleController.NodeMonitorPeriod", Cfg(|c| dur(c.kube_cloud_shared.node_monitor_period))),
    ("PersistentVolumeBinderController.PVClaimBinderSyncPeriod", Flag("pvclaimbinder-sync-period", Dur, "15s")),
    ("PersistentVolumeBinderController.VolumeConfiguration.EnableHostPathProvisioning", Flag("enable-hostpath-provisioner", Bool, "false")),
    ("PersistentVolumeBinderController.VolumeConfiguration.EnableDynamicProvisioning", Flag("enable-dynamic-provisioning", Bool, "true")),
    ("PersistentVolumeBinderController.VolumeConfiguration.PersistentVolumeRecyclerConfiguration.MaximumRetry", Cfg(|_| Json::Int(3))),
    ("PersistentVolumeBinderController.VolumeConfiguration.PersistentVolumeRecyclerConfiguration.MinimumTimeoutNFS", Flag("pv-recycler-minimum-timeout-nfs", Int32, "300")),
    ("PersistentVolumeBinderController.VolumeConfiguration.PersistentVolumeRecyclerConfiguration.PodTemplateFilePathNFS", Flag("pv-recycler-pod-template-filepath-nfs", Str, "")),
    ("PersistentVolumeBinderController.VolumeConfiguration.PersistentVolumeRecyclerConfiguration.IncrementTimeoutNFS", Flag("pv-recycler-increment-timeout-nfs", Int32, "30")),
    ("PersistentVolumeBinderController.VolumeConfiguration.PersistentVolumeRecyclerConfiguration.PodTemplateFilePathHostPath", Flag("pv-recycler-pod-template-filepath-hostpath", Str, "")),
    ("PersistentVolumeBinderController.VolumeConfiguration.PersistentVolumeRecyclerConfiguration.MinimumTimeoutHostPath", Flag("pv-recycler-minimum-timeout-hostpath", Int32, "60")),
    ("PersistentVolumeBinderController.VolumeConfiguration.PersistentVolumeRecyclerConfiguration.IncrementTimeoutHostPath", Flag("pv-recycler-timeout-increment-hostpath", Int32, "30")),
    ("PersistentVolumeBinderController.VolumeConfiguration.FlexVolumePluginDir", Flag("flex-volume-plugin-dir", Str, "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/")),
    ("PodGCController.TerminatedPodGCThreshold", Cfg(|c| Json::Int(c.pod_gc.terminated_pod_gc_threshold.into()))),
    ("ReplicaSetController.ConcurrentRSSyncs", Workers("concurrent-replicaset-syncs")),
    ("ReplicationController.ConcurrentRCSyncs", Workers("concurrent-rc-syncs")),
    ("ResourceQuotaController.ResourceQuotaSyncPeriod", Flag("resource-quota-sync-period", Dur, "5m0s")),
    ("ResourceQuotaController.ConcurrentResourceQuotaSyncs", Workers("concurrent-resource-quota-syncs")),
    ("SAController.ServiceAccountKeyFile", Cfg(|c| path(&c.sa_controller.service_account_private_key_file))),
    ("SAController.ConcurrentSATokenSyncs", Workers("concurrent-serviceaccount-token-syncs")),
    ("SAController.RootCAFile", Cfg(|c| path(&c.sa_controller.root_ca_file))),
    // Its flag went with the cloud controllers.
    ("ServiceController.ConcurrentServiceSyncs", Cfg(|_| Json::Int(0))),
    ("TTLAfterFinishedController.ConcurrentTTLSyncs", Workers("concurrent-ttl-after-finished-syncs")),
    ("ValidatingAdmissionPolicyStatusController.ConcurrentPolicySyncs", Workers("concurrent-validating-admission-policy-status-syncs")),
    ("DeviceTaintEvictionController.ConcurrentSyncs", Flag("concurrent-device-taint-eviction-syncs", Int32, "8")),
    ("ResourceClaimController.ConcurrentSyncs", Flag("concurrent-resourceclaim-syncs", Int32, "50")),
];

/// A flag's value as its Go type: the text given, else `default`. The text was checked at
/// start, so an error here means a default in [`FIELDS`] is wrong.
fn flag_value(c: &Config, name: &str, ty: FlagType, default: &str) -> Result<Json, String> {
    let given = c.given.get(name);
    if ty == StrSlice && given.is_none() {
        return Ok(Json::Null);
    }
    let raw = given.map(String::as_str).unwrap_or(default);
    let v = ty.parse(raw).map_err(|e| format!("--{name}={raw}: {e}"))?;
    Ok(match (v, ty) {
        (FlagValue::Bool(b), _) => Json::Bool(b),
        (FlagValue::Int(n), _) => Json::Int(n),
        (FlagValue::Float(f), Float32) => Json::F32(f as f32),
        (FlagValue::Float(f), _) => Json::F64(f),
        (FlagValue::Duration(negative, d), _) => {
            let text = format_go_duration(d);
            Json::Str(if negative && !d.is_zero() {
                format!("-{text}")
            } else {
                text
            })
        }
        (FlagValue::Str(s), _) => Json::Str(s),
        (FlagValue::List(items), _) => Json::Arr(items.into_iter().map(Json::Str).collect()),
    })
}

fn leaf(c: &Config, src: &Src) -> Result<Json, String> {
    match src {
        Src::Cfg(f) => Ok(f(c)),
        Src::Workers(flag) => match c.given.get(flag) {
            Some(_) => flag_value(c, flag, Int32, "0"),
            None => Ok(Json::Int(
                c.concurrency(flag).try_into().unwrap_or(i64::MAX),
            )),
        },
        Src::Flag(name, ty, default) => flag_value(c, name, *ty, default),
    }
}

/// Put `value` at the dotted `path` of `obj`, after what is there already.
fn insert(obj: &mut Vec<(&'static str, Json)>, path: &'static str, value: Json) {
    match path.split_once('.') {
        None => obj.push((path, value)),
        Some((head, rest)) => {
            let pos = match obj.iter().position(|(k, _)| *k == head) {
                Some(p) => p,
                None => {
                    obj.push((head, Json::Obj(Vec::new())));
                    obj.len() - 1
                }
            };
            if let Json::Obj(inner) = &mut obj[pos].1 {
                insert(inner, rest, value);
            }
        }
    }
}

/// The configuration as a JSON value, in upstream's field order.
pub fn configuration(c: &Config) -> Result<Json, String> {
    let mut root = Vec::new();
    for (path, src) in FIELDS {
        insert(&mut root, path, leaf(c, src)?);
    }
    Ok(Json::Obj(root))
}

/// The `/configz` document, or the error upstream's handler answers 500 with (a NaN or an
/// infinite float flag, which JSON cannot hold).
pub fn document(c: &Config) -> Result<String, String> {
    let body = Json::Obj(vec![(GROUP, configuration(c)?)]);
    body.encode().map_err(|e| {
        format!(
            "error marshaling json: json: error calling MarshalJSON for type *configz.Config: {e}"
        )
    })
}

#[cfg(test)]
mod tests;
