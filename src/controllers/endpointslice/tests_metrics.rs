//! The `endpoint_slice_controller_*` metrics: the efficiency cache and the per-sync numbers.

use super::metrics::{desired_slices, AddressTypeSync, EfficiencyCache, Metrics};
use super::tests::{harness, pod, stored, svc};
use super::*;
use crate::api::resources::PODS;
use crate::controller::Applied;
use serde_json::json;

fn ports(list: &[(&str, usize, usize)]) -> BTreeMap<String, (usize, usize)> {
    list.iter()
        .map(|(k, e, s)| (k.to_string(), (*e, *s)))
        .collect()
}

#[test]
fn desired_slices_round_up_and_none_are_needed_for_no_endpoints() {
    assert_eq!(desired_slices(0, 100), 0);
    assert_eq!(desired_slices(1, 100), 1);
    assert_eq!(desired_slices(100, 100), 1);
    assert_eq!(desired_slices(101, 100), 2);
    assert_eq!(desired_slices(250, 100), 3);
}

#[test]
fn the_cache_sums_services_and_replaces_a_services_previous_numbers() {
    let mut c = EfficiencyCache::new(100);
    let packed = ports(&[("80", 45, 1), ("443", 35, 1)]);
    let scattered = ports(&[("80", 12, 5)]);
    c.update_service("ns/a", packed);
    assert_eq!(c.gauges(), (2, 2, 80), "(actual, desired, endpoints)");
    c.update_service("ns/b", scattered.clone());
    assert_eq!(c.gauges(), (7, 3, 92));
    // a's numbers are replaced, not added to.
    c.update_service("ns/a", scattered);
    assert_eq!(c.gauges(), (10, 2, 24));
    c.delete_service("ns/b");
    assert_eq!(c.gauges(), (5, 1, 12));
    c.delete_service("ns/b");
    assert_eq!(c.gauges(), (5, 1, 12), "deleting twice takes nothing more");
    // A Service with no endpoints (its placeholder) still wants one slice.
    c.update_service("ns/empty", ports(&[("", 0, 1)]));
    assert_eq!(c.gauges(), (6, 2, 12));
    c.update_service("ns/none", BTreeMap::new());
    assert_eq!(c.gauges(), (6, 3, 12));
}

#[test]
fn services_are_counted_under_one_traffic_distribution_at_a_time() {
    let mut c = EfficiencyCache::new(100);
    c.set_traffic_distribution("ns/a", Some("PreferClose"));
    c.set_traffic_distribution("ns/b", Some("PreferClose"));
    c.set_traffic_distribution("ns/c", None);
    let got = c.services_by_distribution();
    assert_eq!(got.get("PreferClose"), Some(&2));
    assert_eq!(got.len(), 1);
    c.set_traffic_distribution("ns/a", Some("PreferSameNode"));
    c.set_traffic_distribution("ns/b", None);
    let got = c.services_by_distribution();
    // A value once used keeps its series, at 0.
    assert_eq!(got.get("PreferClose"), Some(&0));
    assert_eq!(got.get("PreferSameNode"), Some(&1));
    c.delete_service("ns/a");
    assert_eq!(c.services_by_distribution().get("PreferSameNode"), Some(&0));
}

fn plan_stats(h: &crate::controllers::testing::Harness<EndpointSliceController>) -> Vec<u64> {
    // Read through the exposition: added, removed, changed counts and sums.
    let text = crate::metrics::encode(&h.ctrl.metrics.families());
    let v = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(-1.0) as u64
    };
    vec![
        v("endpoint_slice_controller_endpoints_added_per_sync_sum"),
        v("endpoint_slice_controller_endpoints_removed_per_sync_sum"),
        v("endpoint_slice_controller_endpointslices_changed_per_sync_sum"),
        v("endpoint_slice_controller_num_endpoint_slices "),
        v("endpoint_slice_controller_desired_endpoint_slices "),
        v("endpoint_slice_controller_endpoints_desired "),
    ]
}

#[test]
fn a_sync_counts_endpoints_added_and_removed_and_slices_changed() {
    let mut h = harness(2);
    h.add(SERVICES, svc("web", json!({})));
    for i in 1..=5 {
        h.add(
            PODS,
            pod(&format!("p{i}"), &format!("10.0.0.{i}"), true, "node-1"),
        );
    }
    let w = h.sync("ns/web");
    // 5 endpoints added, 3 slices created; 3 slices exist, 3 wanted, 5 endpoints.
    assert_eq!(plan_stats(&h), [5, 0, 3, 3, 3, 5]);
    for (i, (_, s)) in w.creates.iter().enumerate() {
        h.add(ENDPOINTSLICES, stored(s, &format!("web-{i}"), 1));
    }
    // Two pods go: two removed; their slice is deleted or updated.
    h.delete(PODS, pod("p1", "10.0.0.1", true, "node-1"));
    h.delete(PODS, pod("p2", "10.0.0.2", true, "node-1"));
    let w = h.sync("ns/web");
    let changed = w.creates.len() + w.updates.len() + w.deletes.len();
    let s = plan_stats(&h);
    assert_eq!(&s[..3], [5, 2, 3 + changed as u64]);
    assert_eq!(s[5], 3, "3 endpoints desired");
    assert_eq!(s[3], 3 - w.deletes.len() as u64 + w.creates.len() as u64);
    assert_eq!(s[4], 2, "3 endpoints fit in 2 slices");
}

#[test]
fn the_placeholder_counts_as_one_slice_and_a_deleted_service_leaves_the_gauges() {
    let mut h = harness(100);
    h.add(
        SERVICES,
        svc(
            "web",
            json!({"spec": {"trafficDistribution": "PreferClose"}}),
        ),
    );
    h.sync("ns/web");
    assert_eq!(plan_stats(&h), [0, 0, 1, 1, 1, 0]);
    let text = crate::metrics::encode(&h.ctrl.metrics.families());
    assert!(text.contains(
        "endpoint_slice_controller_services_count_by_traffic_distribution{traffic_distribution=\"PreferClose\"} 1\n"
    ));
    assert!(text.contains("endpoint_slice_controller_endpointslices_changed_per_sync_count{topology=\"Disabled\",traffic_distribution=\"PreferClose\"} 1\n"));
    assert!(text.contains("endpoint_slice_controller_syncs{result=\"success\"} 1\n"));
    h.delete(SERVICES, svc("web", json!({})));
    h.sync("ns/web");
    let text = crate::metrics::encode(&h.ctrl.metrics.families());
    assert!(text.contains("endpoint_slice_controller_num_endpoint_slices 0\n"));
    assert!(text.contains("endpoint_slice_controller_desired_endpoint_slices 0\n"));
    assert!(text.contains(
        "endpoint_slice_controller_services_count_by_traffic_distribution{traffic_distribution=\"PreferClose\"} 0\n"
    ));
    assert!(text.contains("endpoint_slice_controller_syncs{result=\"success\"} 2\n"));
}

#[test]
fn dual_stack_services_observe_each_address_type() {
    let mut h = harness(100);
    h.add(
        SERVICES,
        svc("web", json!({"spec": {"ipFamilies": ["IPv4", "IPv6"]}})),
    );
    h.add(PODS, pod("a", "10.0.0.1", true, "node-1"));
    h.sync("ns/web");
    let text = crate::metrics::encode(&h.ctrl.metrics.families());
    // Two observations: one per family; the cache holds the last family's numbers.
    assert!(text.contains("endpoint_slice_controller_endpoints_added_per_sync_count 2\n"));
    assert!(text.contains("endpoint_slice_controller_endpoints_added_per_sync_sum 1\n"));
}

#[test]
fn accepted_writes_count_as_changes_and_a_stale_cache_as_a_stale_sync() {
    let m = Metrics::new(100);
    let h = harness(100);
    let create = Action::Create {
        kind: ENDPOINTSLICES,
        namespace: "ns".into(),
        object: json!({}),
    };
    let err = crate::Error::Transport("boom".into());
    h.ctrl.applied("ns/web", &create, Applied::Failed(&err));
    h.ctrl.applied("ns/web", &create, Applied::Done(None));
    let text = crate::metrics::encode(&h.ctrl.metrics.families());
    assert!(text.contains("endpoint_slice_controller_changes{operation=\"create\"} 1\n"));
    m.sync("ns/y", "stale");
    let x = AddressTypeSync {
        added: 3,
        topology_auto: true,
        ..Default::default()
    };
    // A sync whose write failed: its slices changed are not observed.
    m.observe("ns/x", &x);
    m.sync("ns/x", "error");
    let text = crate::metrics::encode(&m.families());
    assert!(
        !text.contains("endpointslices_changed_per_sync_count"),
        "{text}"
    );
    m.observe("ns/x", &x);
    m.sync("ns/x", "success");
    let text = crate::metrics::encode(&m.families());
    assert!(text.contains("endpoint_slice_controller_syncs{result=\"stale\"} 1\n"));
    assert!(text.contains("# HELP endpoint_slice_controller_endpoints_added_per_sync [BETA] Number of endpoints added on each Service sync\n"));
    assert!(text.contains("# TYPE endpoint_slice_controller_endpoints_added_per_sync histogram\n"));
    assert!(
        text.contains("endpoint_slice_controller_endpoints_added_per_sync_bucket{le=\"2\"} 0\n")
    );
    assert!(
        text.contains("endpoint_slice_controller_endpoints_added_per_sync_bucket{le=\"4\"} 2\n")
    );
    assert!(text
        .contains("endpoint_slice_controller_endpoints_added_per_sync_bucket{le=\"32768\"} 2\n"));
    // No classic buckets under v1.37's default gates: `+Inf` alone, as upstream writes it.
    assert!(text.contains("endpoint_slice_controller_endpointslices_changed_per_sync_bucket{topology=\"Auto\",traffic_distribution=\"\",le=\"+Inf\"} 1\n"));
    assert!(!text.contains("endpointslices_changed_per_sync_bucket{topology=\"Auto\",traffic_distribution=\"\",le=\"0.005\"}"));
    assert!(text.contains(
        "# HELP endpoint_slice_controller_syncs [ALPHA] Number of EndpointSlice syncs\n"
    ));
}
