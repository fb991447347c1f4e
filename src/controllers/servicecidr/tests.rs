use super::*;
use crate::api::resources::{IPADDRESSES, SERVICECIDRS};
use crate::controllers::testing::Harness;
use serde_json::{json, Value};

fn cidr(name: &str, cidrs: &[&str], finalizers: &[&str], deleted_at: Option<&str>) -> Value {
    let mut c = json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": name, "uid": name, "resourceVersion": "1",
            "finalizers": finalizers},
        "spec": {"cidrs": cidrs}});
    if let Some(t) = deleted_at {
        c["metadata"]["deletionTimestamp"] = json!(t);
    }
    c
}

fn ready(mut c: Value, status: &str, reason: &str, message: &str) -> Value {
    c["metadata"]["resourceVersion"] = json!("2");
    c["status"] = json!({"conditions": [{"type": "Ready", "status": status, "reason": reason,
        "message": message, "lastTransitionTime": "2024-01-01T00:00:00Z"}]});
    c
}

fn ip(addr: &str, managed_by: &str) -> Value {
    let fam = if addr.contains(':') { "IPv6" } else { "IPv4" };
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress",
        "metadata": {"name": addr, "uid": addr, "resourceVersion": "1",
            "labels": {MANAGED_BY: managed_by, IP_FAMILY: fam}},
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "ns",
            "name": "svc"}}})
}

#[test]
fn a_new_cidr_gets_the_finalizer_and_ready() {
    let mut h = Harness::new(ServiceCidrs::default());
    h.add(SERVICECIDRS, cidr("extra", &["10.0.0.0/24"], &[], None));
    assert_eq!(h.take_queued(), ["extra"]);
    let w = h.sync("extra");
    assert_eq!(w.patches.len(), 1);
    assert_eq!(
        w.patches[0].2,
        json!({"metadata": {"finalizers": [FINALIZER]}})
    );
    assert_eq!(w.applies.len(), 1);
    let (_, name, manager, obj, _) = &w.applies[0];
    assert_eq!((name.as_str(), *manager), ("extra", NAME));
    let c = &obj["status"]["conditions"][0];
    assert_eq!(c["type"], "Ready");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "");
    assert_eq!(c["message"], READY_MESSAGE);
    assert!(c["lastTransitionTime"].is_string());
    // Done: nothing more.
    let done = ready(
        cidr("extra", &["10.0.0.0/24"], &[FINALIZER], None),
        "True",
        "",
        READY_MESSAGE,
    );
    h.update(SERVICECIDRS, done);
    assert!(h.sync("extra").is_empty());
}

#[test]
fn another_ready_message_is_rewritten() {
    let mut h = Harness::new(ServiceCidrs::default());
    let c = ready(
        cidr("kubernetes", &["10.96.0.0/12"], &[FINALIZER], None),
        "True",
        "",
        "Kubernetes default Service CIDR is ready",
    );
    h.add(SERVICECIDRS, c);
    let w = h.sync("kubernetes");
    assert!(w.patches.is_empty());
    assert_eq!(w.applies.len(), 1);
}

#[test]
fn an_added_cidr_queues_the_overlapping_ones() {
    let mut h = Harness::new(ServiceCidrs::default());
    h.add(SERVICECIDRS, cidr("big", &["10.0.0.0/16"], &[], None));
    h.add(SERVICECIDRS, cidr("other", &["192.168.0.0/24"], &[], None));
    h.take_queued();
    h.add(SERVICECIDRS, cidr("small", &["10.0.1.0/24"], &[], None));
    assert_eq!(h.take_queued(), ["big", "small"]);
    // Updates queue only themselves.
    h.update(
        SERVICECIDRS,
        cidr("small", &["10.0.1.0/24"], &[FINALIZER], None),
    );
    assert_eq!(h.take_queued(), ["small"]);
}

#[test]
fn allocator_addresses_queue_their_cidrs() {
    let mut h = Harness::new(ServiceCidrs::default());
    h.add(SERVICECIDRS, cidr("a", &["10.0.0.0/24"], &[], None));
    h.add(
        SERVICECIDRS,
        cidr("b", &["10.0.0.0/16", "fd00::/64"], &[], None),
    );
    h.take_queued();
    h.add(IPADDRESSES, ip("10.0.0.5", ALLOCATOR));
    assert_eq!(h.take_queued(), ["a", "b"]);
    h.add(IPADDRESSES, ip("10.0.0.6", "someone-else"));
    assert!(h.take_queued().is_empty());
    h.update(IPADDRESSES, ip("10.0.0.5", ALLOCATOR));
    assert!(h.take_queued().is_empty(), "updates queue nothing");
    h.delete(IPADDRESSES, ip("fd00::9", ALLOCATOR));
    assert_eq!(h.take_queued(), ["b"]);
    // The network address is in no range; the IPv4 broadcast address neither.
    h.add(IPADDRESSES, ip("10.0.0.0", ALLOCATOR));
    h.add(IPADDRESSES, ip("10.0.0.255", ALLOCATOR));
    assert_eq!(h.take_queued(), ["b"]);
}

#[test]
fn deleting_with_an_orphan_address_is_blocked_and_terminating() {
    let mut h = Harness::new(ServiceCidrs::default()).at("2024-01-01T00:01:00Z");
    let c = cidr(
        "extra",
        &["10.0.0.0/24"],
        &[FINALIZER],
        Some("2024-01-01T00:00:00Z"),
    );
    h.add(SERVICECIDRS, c.clone());
    h.add(IPADDRESSES, ip("10.0.0.7", ALLOCATOR));
    let w = h.sync("extra");
    assert!(w.patches.is_empty(), "the finalizer stays");
    assert_eq!(w.applies.len(), 1);
    let cond = &w.applies[0].3["status"]["conditions"][0];
    assert_eq!(
        (&cond["status"], &cond["reason"], &cond["message"]),
        (
            &json!("False"),
            &json!("Terminating"),
            &json!(TERMINATING_MESSAGE)
        )
    );
    // Once it says so, no second write.
    h.update(
        SERVICECIDRS,
        ready(c, "False", "Terminating", TERMINATING_MESSAGE),
    );
    assert!(h.sync("extra").is_empty());
    // An address of another manager or family does not block.
    h.delete(IPADDRESSES, ip("10.0.0.7", ALLOCATOR));
    h.add(IPADDRESSES, ip("10.0.0.8", "other"));
    let w = h.sync("extra");
    assert_eq!(
        w.patches[0].2,
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}})
    );
}

#[test]
fn a_covering_cidr_frees_it_at_once() {
    let mut h = Harness::new(ServiceCidrs::default()).at("2024-01-01T00:01:00Z");
    h.add(
        SERVICECIDRS,
        cidr(
            "extra",
            &["10.0.0.0/24"],
            &[FINALIZER],
            Some("2024-01-01T00:00:00Z"),
        ),
    );
    h.add(
        SERVICECIDRS,
        cidr("big", &["10.0.0.0/16"], &[FINALIZER], None),
    );
    h.add(IPADDRESSES, ip("10.0.0.7", ALLOCATOR));
    let w = h.sync("extra");
    assert_eq!(w.patches.len(), 1, "contained in another: removed");
    assert!(w.applies.is_empty());
}

#[test]
fn the_finalizer_waits_for_the_grace_period() {
    let mut h = Harness::new(ServiceCidrs::default()).at("2024-01-01T00:00:04Z");
    h.add(
        SERVICECIDRS,
        cidr(
            "extra",
            &["10.0.0.0/24"],
            &[FINALIZER],
            Some("2024-01-01T00:00:00Z"),
        ),
    );
    let w = h.sync("extra");
    assert!(w.is_empty());
    assert_eq!(w.requeue_after, Some(Duration::from_secs(6)));
}

#[test]
fn can_delete_by_family_and_only_holder() {
    let sc = |n: &str, c: &[&str]| std::sync::Arc::new(cidr(n, c, &[], None));
    let dual = sc("dual", &["10.0.0.0/24", "fd00::/64"]);
    let v6 = sc("v6", &["fd00::/48"]);
    let ips = [std::sync::Arc::new(ip("10.0.0.3", ALLOCATOR))];
    // The IPv6 range is covered, the IPv4 one holds an address only it holds.
    assert!(!can_delete(&dual, &[dual.clone(), v6.clone()], &ips));
    // Another ServiceCIDR with the same range: covered.
    let twin = sc("twin", &["10.0.0.0/24"]);
    assert!(can_delete(&dual, &[dual.clone(), v6, twin], &ips));
    // An unparsable range has no family; no address blocks it.
    let bad = sc("bad", &["nonsense"]);
    assert!(can_delete(&bad, std::slice::from_ref(&bad), &ips));
}

#[test]
fn a_failed_ready_write_records_a_warning_with_the_retry() {
    let mut h = Harness::new(ServiceCidrs::default());
    h.add(
        SERVICECIDRS,
        cidr("extra", &["10.0.0.0/24"], &[FINALIZER], None),
    );
    let o = h.outcome("extra");
    let err = crate::Error::api(422, "Invalid", "no");
    h.ctrl.applied(
        "extra",
        &o.actions[0],
        crate::controllers::Applied::Failed(&err),
    );
    let w = h.sync("extra");
    assert_eq!(
        w.events,
        [(
            crate::events::EventType::Warning,
            "KubernetesServiceCIDRError".to_string(),
            "The ServiceCIDR Status can not be set to Ready=True".to_string()
        )]
    );
    assert!(h.sync("extra").events.is_empty(), "once");
}
