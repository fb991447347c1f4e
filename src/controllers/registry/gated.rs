//! The feature gates a controller needs, as kube-controller-manager v1.37's controller
//! descriptors require them (`requiredFeatureGates`, and the two its storage version
//! migrator checks when it is built): a controller whose gates are not all on at the
//! emulated version is not started, even when `--controllers` enables it.

/// `(controller, gates)`; a controller not listed needs none.
static REQUIRED: &[(&str, &[&str])] = &[
    (
        "podcertificaterequest-cleaner-controller",
        &["PodCertificateRequest"],
    ),
    (
        "kube-apiserver-serving-clustertrustbundle-publisher-controller",
        &["ClusterTrustBundle"],
    ),
    (
        "taint-eviction-controller",
        &["SeparateTaintEvictionController"],
    ),
    (
        "volumeattributesclass-protection-controller",
        &["VolumeAttributesClass"],
    ),
    (
        "storageversion-garbage-collector-controller",
        &["APIServerIdentity", "StorageVersionAPI"],
    ),
    ("selinux-warning-controller", &["SELinuxChangePolicy"]),
    ("service-cidr-controller", &["MultiCIDRServiceAllocator"]),
    (
        "device-taint-eviction-controller",
        &["DynamicResourceAllocation", "DRADeviceTaints"],
    ),
    ("resourceclaim-controller", &["DynamicResourceAllocation"]),
    (
        "resourcepoolstatusrequest-controller",
        &["DRAResourcePoolStatus"],
    ),
    ("podgroup-protection-controller", &["GenericWorkload"]),
    (
        "storage-version-migrator-controller",
        &["StorageVersionMigrator", "InformerResourceVersion"],
    ),
];

/// The gates `name` (a canonical name) needs.
pub fn required_gates(name: &str) -> &'static [&'static str] {
    REQUIRED
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(&[], |(_, g)| g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gate_and_controller_is_known() {
        for (name, gates) in REQUIRED {
            assert!(super::super::info(name).is_some(), "{name}");
            for g in *gates {
                assert!(crate::config::gates::known().contains_key(g), "{name}: {g}");
            }
        }
        assert_eq!(required_gates("deployment-controller"), &[] as &[&str]);
    }
}
