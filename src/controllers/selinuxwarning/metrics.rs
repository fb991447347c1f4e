//! `selinux_warning_controller_selinux_volume_conflict`, as upstream's collector reports it
//! at each scrape: a gauge of 1 for every standing conflict, each side once (the same pair
//! on two volumes is one series), with labels `property`, `pod1_namespace`, `pod1_name`,
//! `pod1_value` (the pod told) and `pod2_namespace`, `pod2_name`, `pod2_value` (the other).
//! No conflicts, no family.

use super::VolumeCache;
use crate::metrics::{Family, MetricType};

pub const CONFLICT: &str = "selinux_warning_controller_selinux_volume_conflict";

pub fn families(cache: &VolumeCache) -> Vec<Family> {
    let mut f = Family::alpha(
        CONFLICT,
        "Conflict between two Pods using the same volume",
        MetricType::Gauge,
    );
    for c in cache.conflicts() {
        let (ns, name) = super::cache::split(&c.pod);
        let (other_ns, other) = super::cache::split(&c.other_pod);
        f.push(
            &[
                ("property", c.property),
                ("pod1_namespace", ns),
                ("pod1_name", name),
                ("pod1_value", &c.value),
                ("pod2_namespace", other_ns),
                ("pod2_name", other),
                ("pod2_value", &c.other_value),
            ],
            1.0,
        );
    }
    if f.samples.is_empty() {
        Vec::new()
    } else {
        vec![f]
    }
}
