//! The node-ipam controller's families (`node_ipam_controller_*`, ALPHA): per cluster CIDR,
//! the size of the set, CIDRs taken and freed, the usage ratio (once anything changed) and the
//! tries each allocation took; and `running_managed_controllers{name="nodeipam"}`, which
//! upstream sets for this controller alone.

use super::cidrset::CidrSet;
use crate::metrics::{Family, MetricType};

pub fn families(sets: &[CidrSet]) -> Vec<Family> {
    use MetricType::*;
    let fam = |name: &str, help: &str, kind| {
        Family::alpha(&format!("node_ipam_controller_{name}"), help, kind)
    };
    let mut max = fam(
        "cirdset_max_cidrs",
        "Maximum number of CIDRs that can be allocated.",
        Gauge,
    );
    let mut allocations = fam(
        "cidrset_cidrs_allocations_total",
        "Counter measuring total number of CIDR allocations.",
        Counter,
    );
    let mut releases = fam(
        "cidrset_cidrs_releases_total",
        "Counter measuring total number of CIDR releases.",
        Counter,
    );
    let mut usage = fam(
        "cidrset_usage_cidrs",
        "Gauge measuring percentage of allocated CIDRs.",
        Gauge,
    );
    let mut tries = fam(
        "cidrset_allocation_tries_per_request",
        "Number of endpoints added on each Service sync",
        Histogram,
    );
    for s in sets {
        let label = s.cluster().to_string();
        let l = [("clusterCIDR", label.as_str())];
        max.push(&l, s.max_cidrs() as f64);
        let st = &s.stats;
        if st.allocations > 0 {
            allocations.push(&l, st.allocations as f64);
        }
        if st.releases > 0 {
            releases.push(&l, st.releases as f64);
        }
        if st.changed {
            usage.push(&l, s.allocated() as f64 / s.max_cidrs() as f64);
        }
        if st.tries.count > 0 {
            tries.push_histogram(&l, st.tries.clone());
        }
    }
    vec![max, allocations, releases, usage, tries]
}
