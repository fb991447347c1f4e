//! Tests of the monitored set, the debug handle, the sync error metric and the absent cache.

use super::*;
use crate::api::resources::{discovered, CONFIGMAPS, EVENTS};

#[test]
fn events_are_never_monitored() {
    assert!(ignored(&EVENTS));
    assert!(ignored(&discovered(
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        true
    )));
    assert!(!ignored(&CONFIGMAPS));
    assert!(!ignored(&discovered(
        "example.com",
        "v1",
        "Event",
        "events",
        true
    )));
}

#[test]
fn debug_handle_answers_404_until_a_collector_runs() {
    let h = DebugHandle::new();
    let req = crate::server::Request {
        method: "GET".into(),
        path: dump::GRAPH_PATH.into(),
        ..Default::default()
    };
    assert_eq!(h.handler()(&req).status, 404);
    assert!(h.dot(None).is_none());
    // Built but not started (a standby, or before the election is won).
    let gc = GarbageCollector::new(1).with_debug_handle(&h);
    assert_eq!(h.handler()(&req).status, 404);
    drop(gc);
    assert!(h.dot(None).is_none());
}

#[test]
fn resources_sync_error_counter_family() {
    let before = RESOURCES_SYNC_ERRORS.load(Ordering::Relaxed) as f64;
    resources_sync_error();
    let f = metric_families();
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].name,
        "garbagecollector_controller_resources_sync_error_total"
    );
    assert_eq!(
        f[0].help,
        "[ALPHA] Number of garbage collector resources sync errors"
    );
    assert_eq!(f[0].kind, crate::metrics::MetricType::Counter);
    assert!(f[0].samples[0].labels.is_empty());
    // Other tests in this process may count too.
    assert!(matches!(f[0].samples[0].value,
        crate::metrics::SampleValue::Scalar(v) if v >= before + 1.0));
}

#[test]
fn absent_cache_is_bounded_and_recent_entries_stay() {
    let mut a = AbsentCache::default();
    let id = |i: usize| Identity {
        uid: i.to_string(),
        ..Default::default()
    };
    a.add(id(0));
    for i in 1..=ABSENT_CACHE_SIZE {
        assert!(a.has(&id(0)));
        a.add(id(i));
    }
    assert_eq!(a.entries.len(), ABSENT_CACHE_SIZE);
    assert!(a.has(&id(0)));
    assert!(!a.has(&id(1)));
}
