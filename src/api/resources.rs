//! The table of API kinds edgekcm reads and writes: group, version, kind, plural, scope.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Kind {
    /// "" for the legacy core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
}

impl Kind {
    pub const fn new(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
        namespaced: bool,
    ) -> Self {
        Kind {
            group,
            version,
            kind,
            plural,
            namespaced,
        }
    }

    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `/api/v1` or `/apis/apps/v1`.
    pub fn group_version_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// Collection path; `ns` is ignored for cluster-scoped kinds, and `None` for a namespaced
    /// kind means "all namespaces".
    pub fn collection_path(&self, ns: Option<&str>) -> String {
        match ns {
            Some(ns) if self.namespaced && !ns.is_empty() => format!(
                "{}/namespaces/{}/{}",
                self.group_version_path(),
                ns,
                self.plural
            ),
            _ => format!("{}/{}", self.group_version_path(), self.plural),
        }
    }

    pub fn object_path(&self, ns: Option<&str>, name: &str) -> String {
        format!("{}/{}", self.collection_path(ns), name)
    }

    /// The `group/resource` string used in Status details and logs (`deployments.apps`).
    pub fn resource_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.resource_name())
    }
}

macro_rules! kinds {
    ($($id:ident = ($g:expr, $v:expr, $k:expr, $p:expr, $n:expr);)*) => {
        $(pub const $id: Kind = Kind::new($g, $v, $k, $p, $n);)*
        /// Every kind in the table.
        pub const ALL: &[Kind] = &[$($id),*];
    };
}

kinds! {
    NAMESPACES = ("", "v1", "Namespace", "namespaces", false);
    NODES = ("", "v1", "Node", "nodes", false);
    PODS = ("", "v1", "Pod", "pods", true);
    SERVICES = ("", "v1", "Service", "services", true);
    ENDPOINTS = ("", "v1", "Endpoints", "endpoints", true);
    CONFIGMAPS = ("", "v1", "ConfigMap", "configmaps", true);
    SECRETS = ("", "v1", "Secret", "secrets", true);
    SERVICEACCOUNTS = ("", "v1", "ServiceAccount", "serviceaccounts", true);
    EVENTS = ("", "v1", "Event", "events", true);
    REPLICATIONCONTROLLERS = ("", "v1", "ReplicationController", "replicationcontrollers", true);
    PERSISTENTVOLUMES = ("", "v1", "PersistentVolume", "persistentvolumes", false);
    PERSISTENTVOLUMECLAIMS = ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true);
    RESOURCEQUOTAS = ("", "v1", "ResourceQuota", "resourcequotas", true);
    LIMITRANGES = ("", "v1", "LimitRange", "limitranges", true);
    PODTEMPLATES = ("", "v1", "PodTemplate", "podtemplates", true);
    DEPLOYMENTS = ("apps", "v1", "Deployment", "deployments", true);
    REPLICASETS = ("apps", "v1", "ReplicaSet", "replicasets", true);
    STATEFULSETS = ("apps", "v1", "StatefulSet", "statefulsets", true);
    DAEMONSETS = ("apps", "v1", "DaemonSet", "daemonsets", true);
    CONTROLLERREVISIONS = ("apps", "v1", "ControllerRevision", "controllerrevisions", true);
    JOBS = ("batch", "v1", "Job", "jobs", true);
    CRONJOBS = ("batch", "v1", "CronJob", "cronjobs", true);
    LEASES = ("coordination.k8s.io", "v1", "Lease", "leases", true);
    ENDPOINTSLICES = ("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", true);
    SERVICECIDRS = ("networking.k8s.io", "v1", "ServiceCIDR", "servicecidrs", false);
    IPADDRESSES = ("networking.k8s.io", "v1", "IPAddress", "ipaddresses", false);
    CSRS = ("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests", false);
    PODCERTIFICATEREQUESTS = ("certificates.k8s.io", "v1", "PodCertificateRequest", "podcertificaterequests", true);
    CLUSTERTRUSTBUNDLES = ("certificates.k8s.io", "v1", "ClusterTrustBundle", "clustertrustbundles", false);
    PODDISRUPTIONBUDGETS = ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", true);
    PODGROUPS = ("scheduling.k8s.io", "v1beta1", "PodGroup", "podgroups", true);
    HPAS = ("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", true);
    CLUSTERROLES = ("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false);
    CLUSTERROLEBINDINGS = ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", false);
    ROLES = ("rbac.authorization.k8s.io", "v1", "Role", "roles", true);
    ROLEBINDINGS = ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", true);
    STORAGECLASSES = ("storage.k8s.io", "v1", "StorageClass", "storageclasses", false);
    VOLUMEATTACHMENTS = ("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments", false);
    CSINODES = ("storage.k8s.io", "v1", "CSINode", "csinodes", false);
    CSIDRIVERS = ("storage.k8s.io", "v1", "CSIDriver", "csidrivers", false);
    VOLUMEATTRIBUTESCLASSES = ("storage.k8s.io", "v1", "VolumeAttributesClass", "volumeattributesclasses", false);
    STORAGEVERSIONS = ("internal.apiserver.k8s.io", "v1alpha1", "StorageVersion", "storageversions", false);
    RESOURCECLAIMS = ("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", true);
    RESOURCECLAIMTEMPLATES = ("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates", true);
    DEVICECLASSES = ("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", false);
    RESOURCESLICES = ("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", false);
    DEVICETAINTRULES = ("resource.k8s.io", "v1", "DeviceTaintRule", "devicetaintrules", false);
    RESOURCEPOOLSTATUSREQUESTS = ("resource.k8s.io", "v1alpha3", "ResourcePoolStatusRequest", "resourcepoolstatusrequests", false);
    VALIDATINGADMISSIONPOLICIES = ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", false);
    CRDS = ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", false);
    STORAGEVERSIONMIGRATIONS = ("storagemigration.k8s.io", "v1", "StorageVersionMigration", "storageversionmigrations", false);
    TOKENREVIEWS = ("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", false);
    SUBJECTACCESSREVIEWS = ("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", false);
}

/// Find a kind by `group` and `plural`.
pub fn by_plural(group: &str, plural: &str) -> Option<Kind> {
    ALL.iter()
        .copied()
        .find(|k| k.group == group && k.plural == plural)
}

/// Find a kind by `apiVersion` and `kind` (as written in ownerReferences).
pub fn by_api_version_kind(api_version: &str, kind: &str) -> Option<Kind> {
    ALL.iter()
        .copied()
        .find(|k| k.kind == kind && k.api_version() == api_version)
}

/// The one `&'static str` for `s`: strings of discovered resources are leaked once each and
/// shared after, so memory is bounded by the number of distinct names the server ever served.
pub fn intern(s: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static SET: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut set = SET
        .get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(found) = set.get(s) {
        return found;
    }
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    set.insert(leaked);
    leaked
}

/// A `Kind` for a resource found by discovery: the table's constant when it is one of ours,
/// else one made of interned strings.
pub fn discovered(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Kind {
    if let Some(k) = ALL.iter().find(|k| {
        k.group == group
            && k.version == version
            && k.plural == plural
            && k.kind == kind
            && k.namespaced == namespaced
    }) {
        return *k;
    }
    Kind::new(
        intern(group),
        intern(version),
        intern(kind),
        intern(plural),
        namespaced,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(PODS.collection_path(Some("a")), "/api/v1/namespaces/a/pods");
        assert_eq!(PODS.collection_path(None), "/api/v1/pods");
        assert_eq!(
            NAMESPACES.object_path(Some("x"), "b"),
            "/api/v1/namespaces/b"
        );
        assert_eq!(
            DEPLOYMENTS.object_path(Some("ns"), "d"),
            "/apis/apps/v1/namespaces/ns/deployments/d"
        );
        assert_eq!(LEASES.api_version(), "coordination.k8s.io/v1");
        assert_eq!(DEPLOYMENTS.resource_name(), "deployments.apps");
        assert_eq!(by_plural("apps", "replicasets"), Some(REPLICASETS));
        assert_eq!(
            by_api_version_kind("apps/v1", "Deployment"),
            Some(DEPLOYMENTS)
        );
    }

    #[test]
    fn discovered_kinds_are_interned() {
        assert_eq!(
            discovered("apps", "v1", "Deployment", "deployments", true),
            DEPLOYMENTS
        );
        let a = discovered("example.com", "v1", "Widget", "widgets", true);
        let b = discovered("example.com", "v1", "Widget", "widgets", true);
        assert_eq!(a, b);
        assert!(std::ptr::eq(a.plural, b.plural));
        assert_eq!(a.api_version(), "example.com/v1");
        assert!(std::ptr::eq(
            intern("x-y"),
            intern(String::from("x-y").as_str())
        ));
    }
}
