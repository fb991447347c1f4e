//! The `endpoint_slice_mirroring_controller_*` metrics: the cache and the per-sync numbers.

use super::metrics::{Metrics, MirrorCache};
use super::reconciler::reconcile;
use super::tests::{endpoints, harness, stored, svc};
use super::*;
use crate::controller::Applied;
use crate::controllers::endpointslice::model::Slice;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

fn ports(list: &[(&str, usize, usize)]) -> BTreeMap<String, (usize, usize)> {
    list.iter()
        .map(|(k, e, s)| (k.to_string(), (*e, *s)))
        .collect()
}

#[test]
fn the_cache_sums_endpoints_and_counts_slices_per_set_of_ports() {
    let mut c = MirrorCache::new(10);
    c.update("ns/a", ports(&[("v4-80", 25, 1), ("v6-80", 0, 0)]));
    assert_eq!(c.gauges(), (1, 3, 25), "(actual, desired, endpoints)");
    c.update("ns/b", ports(&[("v4-80", 10, 2)]));
    assert_eq!(c.gauges(), (3, 4, 35));
    c.update("ns/a", ports(&[("v4-80", 5, 1)]));
    assert_eq!(c.gauges(), (3, 2, 15), "a's numbers replaced");
    c.delete("ns/b");
    assert_eq!(c.gauges(), (1, 1, 5));
    c.delete("ns/b");
    assert_eq!(c.gauges(), (1, 1, 5));
    // Unlike the endpointslice-controller's, no slice is wanted for no endpoints.
    c.update("ns/a", ports(&[("v4-80", 0, 0)]));
    assert_eq!(c.gauges(), (0, 0, 0));
}

fn existing(ep: &serde_json::Value, max: usize) -> Vec<Slice> {
    let plan = reconcile(ep, vec![], max);
    plan.create
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let o = stored(&s.to_object("ns", "ext-"), &format!("ext-{i}"));
            Slice::from_cached(&Arc::new(o))
        })
        .collect()
}

#[test]
fn a_sync_counts_added_updated_removed_and_skipped_endpoints() {
    let ep = endpoints(&["192.0.2.1", "192.0.2.2", "2001:db8::1"], json!({}));
    let m = reconcile(&ep, vec![], 1000).metrics;
    assert_eq!((m.added, m.updated, m.removed, m.skipped), (3, 0, 0, 0));
    let v4 = m.ports.iter().find(|(k, _)| k.starts_with("IPv4")).unwrap();
    let v6 = m.ports.iter().find(|(k, _)| k.starts_with("IPv6")).unwrap();
    assert_eq!((v4.1, v6.1), (&(2, 1), &(1, 1)));
    // .1 goes, .3 comes, .2 turns not ready; the IPv6 address goes (its slice deleted).
    let had = existing(&ep, 1000);
    let mut next = endpoints(&["192.0.2.3"], json!({}));
    next["subsets"][0]["notReadyAddresses"] = json!([{"ip": "192.0.2.2"}]);
    let m = reconcile(&next, had, 1000).metrics;
    assert_eq!((m.added, m.updated, m.removed, m.skipped), (1, 1, 2, 0));
    let v6 = m.ports.iter().find(|(k, _)| k.starts_with("IPv6")).unwrap();
    assert_eq!(v6.1, &(0, 0));
    // Past the maximum and not an IP: skipped.
    let ep = endpoints(&["192.0.2.1", "host", "192.0.2.2", "192.0.2.3"], json!({}));
    let m = reconcile(&ep, vec![], 2).metrics;
    assert_eq!((m.added, m.skipped), (2, 2));
}

#[test]
fn families_follow_syncs_writes_and_deletes() {
    let mut h = harness(1000);
    h.add(SERVICES, svc(None));
    h.add(ENDPOINTS, endpoints(&["192.0.2.1", "192.0.2.2"], json!({})));
    let w = h.sync("ns/ext");
    let create = Action::Create {
        kind: ENDPOINTSLICES,
        namespace: "ns".into(),
        object: w.creates[0].1.clone(),
    };
    h.ctrl.applied("ns/ext", &create, Applied::Done(None));
    let text = crate::metrics::encode(&h.ctrl.metrics.families());
    let p = "endpoint_slice_mirroring_controller_";
    for line in [
        format!("# HELP {p}addresses_skipped_per_sync [ALPHA] Number of addresses skipped on each Endpoints sync due to being invalid or exceeding MaxEndpointsPerSubset"),
        format!("# TYPE {p}endpoints_sync_duration histogram"),
        format!("{p}endpoints_sync_duration_bucket{{le=\"0.001\"}} 1"),
        format!("{p}endpoints_sync_duration_bucket{{le=\"16.384\"}} 1"),
        format!("{p}endpoints_added_per_sync_sum 2"),
        format!("{p}endpoints_added_per_sync_bucket{{le=\"2\"}} 1"),
        format!("{p}endpoints_desired 2"),
        format!("{p}num_endpoint_slices 1"),
        format!("{p}desired_endpoint_slices 1"),
        format!("{p}changes{{operation=\"create\"}} 1"),
        format!("# TYPE {p}changes counter"),
    ] {
        assert!(text.contains(&format!("{line}\n")), "{line}\n{text}");
    }
    // The Endpoints goes: its numbers leave the gauges.
    h.delete(ENDPOINTS, endpoints(&[], json!({})));
    h.sync("ns/ext");
    let text = crate::metrics::encode(&h.ctrl.metrics.families());
    assert!(text.contains(&format!("{p}endpoints_desired 0\n")));
    assert!(text.contains(&format!("{p}endpoints_sync_duration_count 2\n")));
    assert!(text.contains(&format!("{p}endpoints_added_per_sync_count 1\n")));
    // Nothing synced yet: no series, only what registers them.
    let fresh = crate::metrics::encode(&Metrics::new(10).families());
    assert!(fresh.is_empty(), "{fresh}");
}
