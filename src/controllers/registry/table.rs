//! The rows of the controller table: one per controller name kube-controller-manager knows
//! (1.28's, and a few from later releases), with what runs it here.

use super::super::{
    attachdetach, bootstrap, certificates, clusterroleaggregation, cronjob, daemonset, deployment,
    disruption, endpoints, endpointslice, endpointslicemirroring, ephemeral, garbagecollector, job,
    namespace, nodeipam, nodelifecycle, podautoscaler, podgc, pvbinder, replicaset, resourcequota,
    rootca, serviceaccount, statefulset, tokens, ttl, ttlafterfinished, volumeexpand,
    volumeprotection,
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
        workers_flag: None,
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
    /// Its `--concurrent-*-syncs` flag.
    const fn workers(mut self, flag: &'static str) -> Self {
        self.workers_flag = Some(flag);
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
    .workers("concurrent-serviceaccount-token-syncs")
    .runs(tokens::build),
    c(
        "endpoints-controller",
        &["endpoint"],
        Some("endpoint-controller"),
        "",
    )
    .workers("concurrent-endpoint-syncs")
    .runs(endpoints::build),
    c(
        "endpointslice-controller",
        &["endpointslice"],
        Some("endpointslice-controller"),
        "",
    )
    .workers("concurrent-service-endpoint-syncs")
    .runs(endpointslice::build),
    c(
        "endpointslice-mirroring-controller",
        &["endpointslicemirroring"],
        Some("endpointslicemirroring-controller"),
        "",
    )
    .workers("mirroring-concurrent-service-endpoint-syncs")
    .runs(endpointslicemirroring::build),
    c(
        "replicationcontroller-controller",
        &["replicationcontroller"],
        Some("replication-controller"),
        "",
    )
    .workers("concurrent-rc-syncs")
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
    .workers("concurrent-resource-quota-syncs")
    .runs(resourcequota::build),
    c(
        "namespace-controller",
        &["namespace"],
        Some("namespace-controller"),
        "",
    )
    .workers("concurrent-namespace-syncs")
    .runs(namespace::build),
    c(
        "serviceaccount-controller",
        &["serviceaccount"],
        Some("service-account-controller"),
        "",
    )
    .runs(serviceaccount::build),
    c(
        "garbage-collector-controller",
        &["garbagecollector"],
        Some("generic-garbage-collector"),
        "--enable-garbage-collector",
    )
    .workers("concurrent-gc-syncs")
    .runs(garbagecollector::build)
    .debug(garbagecollector::debug_route),
    c(
        "daemonset-controller",
        &["daemonset"],
        Some("daemon-set-controller"),
        "",
    )
    .runs(daemonset::build),
    c("job-controller", &["job"], Some("job-controller"), "")
        .runs(job::build)
        .workers("concurrent-job-syncs"),
    c(
        "deployment-controller",
        &["deployment"],
        Some("deployment-controller"),
        "",
    )
    .workers("concurrent-deployment-syncs")
    .runs(deployment::build),
    c(
        "replicaset-controller",
        &["replicaset"],
        Some("replicaset-controller"),
        "",
    )
    .workers("concurrent-replicaset-syncs")
    .runs(replicaset::build_replicaset),
    c(
        "horizontal-pod-autoscaler-controller",
        &["horizontalpodautoscaling"],
        Some("horizontal-pod-autoscaler"),
        "",
    )
    .workers("concurrent-horizontal-pod-autoscaler-syncs")
    .runs(podautoscaler::build),
    c(
        "disruption-controller",
        &["disruption"],
        Some("disruption-controller"),
        "",
    )
    .runs(disruption::build),
    c(
        "statefulset-controller",
        &["statefulset"],
        Some("statefulset-controller"),
        "",
    )
    .runs(statefulset::build)
    .workers("concurrent-statefulset-syncs"),
    c(
        "cronjob-controller",
        &["cronjob"],
        Some("cronjob-controller"),
        "",
    )
    .runs(cronjob::build)
    .workers("concurrent-cron-job-syncs"),
    c(
        "certificatesigningrequest-signing-controller",
        &["csrsigning"],
        Some("certificate-controller"),
        "--cluster-signing-cert-file",
    )
    .runs(certificates::signer::build),
    c(
        "certificatesigningrequest-approving-controller",
        &["csrapproving"],
        Some("certificate-controller"),
        "",
    )
    .runs(certificates::approver::build),
    c(
        "certificatesigningrequest-cleaner-controller",
        &["csrcleaner"],
        Some("certificate-controller"),
        "",
    )
    .runs(certificates::cleaner::build),
    c("ttl-controller", &["ttl"], Some("ttl-controller"), "").runs(ttl::build),
    off(
        "bootstrap-signer-controller",
        &["bootstrapsigner"],
        Some("bootstrap-signer"),
        "",
    )
    .runs(bootstrap::signer::build),
    off(
        "token-cleaner-controller",
        &["tokencleaner"],
        Some("token-cleaner"),
        "",
    )
    .runs(bootstrap::cleaner::build),
    c(
        "node-ipam-controller",
        &["nodeipam"],
        Some("node-controller"),
        "--allocate-node-cidrs",
    )
    .runs(nodeipam::build),
    c(
        "node-lifecycle-controller",
        &["nodelifecycle"],
        Some("node-controller"),
        "",
    )
    .runs(nodelifecycle::build),
    c(
        "service-lb-controller",
        &["service"],
        Some("service-controller"),
        "cloud",
    )
    .workers("concurrent-service-syncs"),
    c(
        "node-route-controller",
        &["route"],
        Some("route-controller"),
        "cloud",
    ),
    c(
        "cloud-node-lifecycle-controller",
        &["cloud-node-lifecycle"],
        Some("node-controller"),
        "cloud",
    ),
    c(
        "persistentvolume-binder-controller",
        &["persistentvolume-binder"],
        Some("persistent-volume-binder"),
        "",
    )
    .runs(pvbinder::build),
    c(
        "persistentvolume-attach-detach-controller",
        &["attachdetach"],
        Some("attachdetach-controller"),
        "",
    )
    .runs(attachdetach::build),
    c(
        "persistentvolume-expander-controller",
        &["persistentvolume-expander"],
        Some("expand-controller"),
        "",
    )
    .runs(volumeexpand::build),
    c(
        "clusterrole-aggregation-controller",
        &["clusterrole-aggregation"],
        Some("clusterrole-aggregation-controller"),
        "",
    )
    .runs(clusterroleaggregation::build),
    c(
        "persistentvolumeclaim-protection-controller",
        &["pvc-protection"],
        Some("pvc-protection-controller"),
        "",
    )
    .runs(volumeprotection::pvc::build),
    c(
        "persistentvolume-protection-controller",
        &["pv-protection"],
        Some("pv-protection-controller"),
        "",
    )
    .runs(volumeprotection::pv::build),
    c(
        "ttl-after-finished-controller",
        &["ttl-after-finished"],
        Some("ttl-after-finished-controller"),
        "",
    )
    .runs(ttlafterfinished::build)
    .workers("concurrent-ttl-after-finished-syncs"),
    c(
        "root-ca-certificate-publisher-controller",
        &["root-ca-cert-publisher"],
        Some("root-ca-cert-publisher"),
        "",
    )
    .runs(rootca::build),
    c(
        "ephemeral-volume-controller",
        &["ephemeral-volume"],
        Some("ephemeral-volume-controller"),
        "",
    )
    .runs(ephemeral::build)
    .workers("concurrent-ephemeralvolume-syncs"),
    c(
        "storageversion-garbage-collector-controller",
        &["storage-version-gc"],
        Some("storage-version-garbage-collector"),
        "feature-gate",
    ),
    c(
        "resourceclaim-controller",
        &["resource-claim-controller"],
        Some("resource-claim-controller"),
        "feature-gate",
    ),
    c(
        "legacy-serviceaccount-token-cleaner-controller",
        &["legacy-service-account-token-cleaner"],
        Some("legacy-service-account-token-cleaner"),
        "feature-gate",
    ),
    c(
        "validatingadmissionpolicy-status-controller",
        &[],
        Some("validatingadmissionpolicy-status-controller"),
        "feature-gate",
    )
    .workers("concurrent-validating-admission-policy-status-syncs"),
    // Names introduced by later kube-controller-manager releases.
    later(c(
        "taint-eviction-controller",
        &[],
        Some("node-controller"),
        "",
    )),
    later(c(
        "service-cidr-controller",
        &[],
        Some("service-cidrs-controller"),
        "feature-gate",
    )),
    later(c(
        "storage-version-migrator-controller",
        &["svm"],
        Some("storage-version-migrator-controller"),
        "feature-gate",
    )),
    later(c(
        "volumeattributesclass-protection-controller",
        &[],
        Some("volumeattributesclass-protection-controller"),
        "feature-gate",
    )),
    later(off(
        "selinux-warning-controller",
        &[],
        Some("selinux-warning-controller"),
        "feature-gate",
    )),
    later(c(
        "kube-apiserver-serving-clustertrustbundle-publisher-controller",
        &[],
        Some("kube-apiserver-serving-clustertrustbundle-publisher"),
        "feature-gate",
    )),
    later(c(
        "device-taint-eviction-controller",
        &[],
        Some("device-taint-eviction-controller"),
        "feature-gate",
    )),
    later(c(
        "podcertificaterequest-cleaner-controller",
        &[],
        Some("podcertificaterequestcleaner"),
        "feature-gate",
    )),
];
