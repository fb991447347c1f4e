//! The rows of the controller table: one per controller name kube-controller-manager v1.37
//! knows (the cloud controllers 1.28 still had are gone), with what runs it here. Everything fixed about a
//! controller is in its row; its module has the behaviour (`Controller` or `SelfDriven`) and
//! the `build` the row names.

use super::super::{
    attachdetach, bootstrap, certificates, clusterroleaggregation, cronjob, daemonset, deployment,
    disruption, endpoints, endpointslice, endpointslicemirroring, ephemeral, garbagecollector, job,
    namespace, nodeipam, nodelifecycle, podautoscaler, podgc, pvbinder, replicaset, resourceclaim,
    resourcequota, rootca, serviceaccount, statefulset, tokens, ttl, ttlafterfinished,
    volumeexpand, volumeprotection,
};
use super::super::{
    devicetainteviction, legacytokencleaner, podgroupprotection, resourcepoolstatusrequest,
    selinuxwarning, servicecidr, storageversiongc, storageversionmigrator, tainteviction,
    vacprotection, vapstatus,
};
use super::ControllerInfo;

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
        queue: "",
        event_component: name,
        workers_flag: None,
        workers: 1,
        max_retries: None,
        qps_factor: 1.0,
        burst_factor: 1,
        build: None,
        debug: None,
    }
}

const fn off(
    name: &'static str,
    aliases: &'static [&'static str],
    sa_name: Option<&'static str>,
    needs: &'static str,
) -> ControllerInfo {
    let mut info = c(name, aliases, sa_name, needs);
    info.disabled_by_default = true;
    info
}

impl ControllerInfo {
    /// Upstream's work-queue name.
    const fn queue(mut self, name: &'static str) -> Self {
        self.queue = name;
        self
    }
    /// Its Event source, when it is not the controller's name.
    const fn events(mut self, component: &'static str) -> Self {
        self.event_component = component;
        self
    }
    /// Its `--concurrent-*-syncs` flag.
    const fn workers_flag(mut self, flag: &'static str) -> Self {
        self.workers_flag = Some(flag);
        self
    }
    /// Upstream's fixed worker count (no flag).
    const fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }
    /// Upstream's `maxRetries`.
    const fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = Some(n);
        self
    }
    /// Upstream raises its client's `--kube-api-qps` and `--kube-api-burst` by these factors.
    const fn client_rate(mut self, qps: f32, burst: u32) -> Self {
        self.qps_factor = qps;
        self.burst_factor = burst;
        self
    }
    /// edgekcm runs it, built by `build`.
    const fn runs(mut self, build: super::Build) -> Self {
        self.build = Some(build);
        self
    }
    /// It serves debug paths on the secure port.
    const fn debug(mut self, route: super::DebugRoute) -> Self {
        self.debug = Some(route);
        self
    }
}

/// Marks an entry as a name from a release after 1.28.
const fn later(mut info: ControllerInfo) -> ControllerInfo {
    info.later_release = true;
    info
}

pub(super) static KNOWN: &[ControllerInfo] = &[
    // Started before the others, always with the manager's own credentials.
    c(
        "serviceaccount-token-controller",
        &["serviceaccount-token"],
        None,
        "--service-account-private-key-file",
    )
    .queue("serviceaccount_tokens_secret")
    .max_retries(10)
    .workers_flag("concurrent-serviceaccount-token-syncs")
    .runs(tokens::build),
    c(
        "endpoints-controller",
        &["endpoint"],
        Some("endpoint-controller"),
        "",
    )
    .queue("endpoint")
    .events("endpoint-controller")
    .workers_flag("concurrent-endpoint-syncs")
    .runs(endpoints::build),
    c(
        "endpointslice-controller",
        &["endpointslice"],
        Some("endpointslice-controller"),
        "",
    )
    .queue("endpoint_slice")
    .events("endpoint-slice-controller")
    .workers_flag("concurrent-service-endpoint-syncs")
    .runs(endpointslice::build),
    c(
        "endpointslice-mirroring-controller",
        &["endpointslicemirroring"],
        Some("endpointslicemirroring-controller"),
        "",
    )
    .queue("endpoint_slice_mirroring")
    .events("endpoint-slice-mirroring-controller")
    .workers_flag("mirroring-concurrent-service-endpoint-syncs")
    .runs(endpointslicemirroring::build),
    c(
        "replicationcontroller-controller",
        &["replicationcontroller"],
        Some("replication-controller"),
        "",
    )
    .queue("replicationmanager")
    .events("replication-controller")
    .workers_flag("concurrent-rc-syncs")
    .runs(replicaset::build_replicationcontroller),
    c(
        "pod-garbage-collector-controller",
        &["podgc"],
        Some("pod-garbage-collector"),
        "",
    )
    .runs(podgc::build),
    c(
        "resourcequota-controller",
        &["resourcequota"],
        Some("resourcequota-controller"),
        "",
    )
    .workers_flag("concurrent-resource-quota-syncs")
    .runs(resourcequota::build),
    c(
        "namespace-controller",
        &["namespace"],
        Some("namespace-controller"),
        "",
    )
    // Upstream: "the namespace cleanup controller is very chatty".
    .client_rate(20.0, 100)
    .workers_flag("concurrent-namespace-syncs")
    .runs(namespace::build),
    c(
        "serviceaccount-controller",
        &["serviceaccount"],
        Some("service-account-controller"),
        "",
    )
    .queue("serviceaccount")
    .runs(serviceaccount::build),
    c(
        "garbage-collector-controller",
        &["garbagecollector"],
        Some("generic-garbage-collector"),
        "--enable-garbage-collector",
    )
    // Upstream doubles its QPS: each deletion takes two requests.
    .client_rate(2.0, 1)
    .workers_flag("concurrent-gc-syncs")
    .runs(garbagecollector::build)
    .debug(garbagecollector::debug_route),
    c(
        "daemonset-controller",
        &["daemonset"],
        Some("daemon-set-controller"),
        "",
    )
    .queue("daemonset")
    .workers_flag("concurrent-daemonset-syncs")
    .runs(daemonset::build),
    c("job-controller", &["job"], Some("job-controller"), "")
        .queue("job")
        .runs(job::build)
        .workers_flag("concurrent-job-syncs"),
    c(
        "deployment-controller",
        &["deployment"],
        Some("deployment-controller"),
        "",
    )
    .queue("deployment")
    .workers_flag("concurrent-deployment-syncs")
    .runs(deployment::build),
    c(
        "replicaset-controller",
        &["replicaset"],
        Some("replicaset-controller"),
        "",
    )
    .queue("replicaset")
    .workers_flag("concurrent-replicaset-syncs")
    .runs(replicaset::build_replicaset),
    c(
        "horizontal-pod-autoscaler-controller",
        &["horizontalpodautoscaling"],
        Some("horizontal-pod-autoscaler"),
        "",
    )
    .queue("horizontalpodautoscaler")
    .events("horizontal-pod-autoscaler")
    .workers_flag("concurrent-horizontal-pod-autoscaler-syncs")
    .runs(podautoscaler::build),
    c(
        "disruption-controller",
        &["disruption"],
        Some("disruption-controller"),
        "",
    )
    .queue("disruption")
    .events("controllermanager")
    .workers_flag("concurrent-disruption-syncs")
    .runs(disruption::build),
    c(
        "statefulset-controller",
        &["statefulset"],
        Some("statefulset-controller"),
        "",
    )
    .queue("statefulset")
    .runs(statefulset::build)
    .workers_flag("concurrent-statefulset-syncs"),
    c(
        "cronjob-controller",
        &["cronjob"],
        Some("cronjob-controller"),
        "",
    )
    .queue("cronjob")
    .runs(cronjob::build)
    .workers_flag("concurrent-cron-job-syncs"),
    c(
        "certificatesigningrequest-signing-controller",
        &["csrsigning"],
        Some("certificate-controller"),
        "--cluster-signing-cert-file",
    )
    .queue("csrsigning")
    .workers(5)
    .runs(certificates::signer::build),
    c(
        "certificatesigningrequest-approving-controller",
        &["csrapproving"],
        Some("certificate-controller"),
        "",
    )
    .queue("certificate")
    .workers(5)
    .runs(certificates::approver::build),
    c(
        "certificatesigningrequest-cleaner-controller",
        &["csrcleaner"],
        Some("certificate-controller"),
        "",
    )
    .runs(certificates::cleaner::build),
    c("ttl-controller", &["ttl"], Some("ttl-controller"), "")
        .queue("ttlcontroller")
        // Upstream starts five workers (no flag).
        .workers(5)
        .runs(ttl::build),
    off(
        "bootstrap-signer-controller",
        &["bootstrapsigner"],
        Some("bootstrap-signer"),
        "",
    )
    .queue("bootstrap_signer_queue")
    .runs(bootstrap::signer::build),
    off(
        "token-cleaner-controller",
        &["tokencleaner"],
        Some("token-cleaner"),
        "",
    )
    .queue("token_cleaner")
    .runs(bootstrap::cleaner::build),
    c(
        "node-ipam-controller",
        &["nodeipam"],
        Some("node-controller"),
        "--allocate-node-cidrs",
    )
    // The range allocator: no work queue (no `workqueue_*` series); patches in flight
    // (upstream's `cidrUpdateWorkers` is 30: see the module docs).
    .events("cidrAllocator")
    .workers(4)
    .runs(nodeipam::build),
    c(
        "node-lifecycle-controller",
        &["nodelifecycle"],
        Some("node-controller"),
        "",
    )
    .runs(nodelifecycle::build),
    c(
        "persistentvolume-binder-controller",
        &["persistentvolume-binder"],
        Some("persistent-volume-binder"),
        "",
    )
    .queue("volumes")
    .events("persistentvolume-controller")
    .runs(pvbinder::build),
    c(
        "persistentvolume-attach-detach-controller",
        &["attachdetach"],
        Some("attachdetach-controller"),
        "",
    )
    .queue("pvcs")
    .events("attachdetach-controller")
    .runs(attachdetach::build),
    c(
        "persistentvolume-expander-controller",
        &["persistentvolume-expander"],
        Some("expand-controller"),
        "",
    )
    .queue("volume_expand")
    .events("volume_expand")
    .runs(volumeexpand::build),
    c(
        "clusterrole-aggregation-controller",
        &["clusterrole-aggregation"],
        Some("clusterrole-aggregation-controller"),
        "",
    )
    .queue("ClusterRoleAggregator")
    .workers(5)
    .runs(clusterroleaggregation::build),
    c(
        "persistentvolumeclaim-protection-controller",
        &["pvc-protection"],
        Some("pvc-protection-controller"),
        "",
    )
    .queue("pvcprotection")
    .runs(volumeprotection::pvc::build),
    c(
        "persistentvolume-protection-controller",
        &["pv-protection"],
        Some("pv-protection-controller"),
        "",
    )
    .queue("pvprotection")
    .runs(volumeprotection::pv::build),
    c(
        "ttl-after-finished-controller",
        &["ttl-after-finished"],
        Some("ttl-after-finished-controller"),
        "",
    )
    .queue("ttl_jobs_to_delete")
    .runs(ttlafterfinished::build)
    .workers_flag("concurrent-ttl-after-finished-syncs"),
    c(
        "root-ca-certificate-publisher-controller",
        &["root-ca-cert-publisher"],
        Some("root-ca-cert-publisher"),
        "",
    )
    .queue("root_ca_cert_publisher")
    .runs(rootca::build),
    c(
        "ephemeral-volume-controller",
        &["ephemeral-volume"],
        Some("ephemeral-volume-controller"),
        "",
    )
    .queue("ephemeral_volume")
    .events("ephemeral_volume")
    .runs(ephemeral::build)
    .workers_flag("concurrent-ephemeralvolume-syncs"),
    c(
        "storageversion-garbage-collector-controller",
        &["storage-version-gc"],
        Some("storage-version-garbage-collector"),
        "feature-gate",
    )
    .runs(storageversiongc::build),
    c(
        "resourceclaim-controller",
        &["resource-claim-controller"],
        Some("resource-claim-controller"),
        "feature-gate",
    )
    .queue("resource_claim")
    .events("resource_claim")
    .workers_flag("concurrent-resourceclaim-syncs")
    .runs(resourceclaim::build),
    c(
        "legacy-serviceaccount-token-cleaner-controller",
        &["legacy-service-account-token-cleaner"],
        Some("legacy-service-account-token-cleaner"),
        "feature-gate",
    )
    .runs(legacytokencleaner::build),
    c(
        "validatingadmissionpolicy-status-controller",
        &[],
        Some("validatingadmissionpolicy-status-controller"),
        "feature-gate",
    )
    .workers_flag("concurrent-validating-admission-policy-status-syncs")
    .queue("validatingadmissionpolicy-status")
    .runs(vapstatus::build),
    // Names introduced by later kube-controller-manager releases.
    later(c(
        "taint-eviction-controller",
        &[],
        Some("node-controller"),
        "",
    ))
    .runs(tainteviction::build),
    later(c(
        "service-cidr-controller",
        &[],
        Some("service-cidrs-controller"),
        "feature-gate",
    ))
    .queue("ipaddresses")
    .workers(5)
    .max_retries(15)
    .runs(servicecidr::build),
    later(c(
        "storage-version-migrator-controller",
        &["svm"],
        Some("storage-version-migrator-controller"),
        "feature-gate",
    ))
    .queue("storage-version-migrator-controller")
    .workers(5)
    .client_rate(20.0, 100)
    .runs(storageversionmigrator::build),
    later(c(
        "volumeattributesclass-protection-controller",
        &[],
        Some("volumeattributesclass-protection-controller"),
        "feature-gate",
    ))
    .queue("vacprotection")
    .runs(vacprotection::build),
    later(off(
        "selinux-warning-controller",
        &[],
        Some("selinux-warning-controller"),
        "feature-gate",
    ))
    .queue("selinux_warning")
    .events("selinux_warning")
    .runs(selinuxwarning::build),
    later(c(
        "kube-apiserver-serving-clustertrustbundle-publisher-controller",
        &[],
        Some("kube-apiserver-serving-clustertrustbundle-publisher"),
        "feature-gate",
    ))
    .queue("ca_cert_publisher_cluster_trust_bundles")
    .runs(certificates::ctbpublisher::build),
    later(c(
        "device-taint-eviction-controller",
        &[],
        Some("device-taint-eviction-controller"),
        "feature-gate",
    ))
    .workers_flag("concurrent-device-taint-eviction-syncs")
    .runs(devicetainteviction::build),
    later(c(
        "podcertificaterequest-cleaner-controller",
        &[],
        Some("podcertificaterequestcleaner"),
        "feature-gate",
    ))
    .runs(certificates::pcrcleaner::build),
    later(c(
        "podgroup-protection-controller",
        &[],
        Some("podgroup-protection-controller"),
        "feature-gate",
    ))
    .queue("podgroupprotection")
    .runs(podgroupprotection::build),
    later(c(
        "resourcepoolstatusrequest-controller",
        &[],
        Some("resourcepoolstatusrequest-controller"),
        "feature-gate",
    ))
    .max_retries(5)
    .runs(resourcepoolstatusrequest::build),
];
