use super::*;
use crate::controller::EventType;
use crate::controllers::testing::Harness;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

static RV: AtomicU64 = AtomicU64::new(1);

fn rv() -> String {
    RV.fetch_add(1, Ordering::Relaxed).to_string()
}

pub(super) fn svc(selector: Option<Value>) -> Value {
    let mut spec = json!({"clusterIP": "10.96.0.20", "ports": [{"port": 80}]});
    if let Some(s) = selector {
        spec["selector"] = s;
    }
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "ext", "namespace": "ns", "uid": "svc-uid", "resourceVersion": rv()},
        "spec": spec})
}

pub(super) fn endpoints(ips: &[&str], extra_meta: Value) -> Value {
    let addrs: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
    let mut e = json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "ext", "namespace": "ns", "uid": "ep-uid", "resourceVersion": rv(),
            "labels": {"team": "a"},
            "annotations": {"note": "x", "endpoints.kubernetes.io/last-change-trigger-time": "t"}},
        "subsets": [{"addresses": addrs, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]});
    if let Some(m) = extra_meta.as_object() {
        for (k, v) in m {
            e["metadata"][k] = v.clone();
        }
    }
    e
}

pub(super) fn harness(max: usize) -> Harness<MirroringController> {
    Harness::new(MirroringController::new(max, Duration::ZERO))
}

pub(super) fn stored(o: &Value, name: &str) -> Value {
    let mut o = o.clone();
    o["metadata"]["name"] = json!(name);
    o["metadata"]["uid"] = json!(format!("uid-{name}"));
    o["metadata"]["generation"] = json!(1);
    o["metadata"]["resourceVersion"] = json!(rv());
    o["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("generateName");
    o
}

#[test]
fn endpoints_of_a_selectorless_service_are_mirrored() {
    let mut h = harness(1000);
    h.add(SERVICES, svc(None));
    h.add(
        ENDPOINTS,
        endpoints(&["192.0.2.1", "192.0.2.2", "2001:db8::1"], json!({})),
    );
    assert_eq!(h.take_queued(), ["ns/ext"]);
    let w = h.sync("ns/ext");
    assert_eq!(w.creates.len(), 2, "{w:?}");
    let v4 = &w.creates[0].1;
    assert_eq!(v4["metadata"]["generateName"], "ext-");
    assert_eq!(v4["addressType"], "IPv4");
    assert_eq!(
        v4["metadata"]["labels"],
        json!({"team": "a", "kubernetes.io/service-name": "ext",
            "endpointslice.kubernetes.io/managed-by": "endpointslicemirroring-controller.k8s.io"})
    );
    assert_eq!(v4["metadata"]["annotations"], json!({"note": "x"}));
    assert_eq!(v4["metadata"]["ownerReferences"][0]["kind"], "Endpoints");
    assert_eq!(
        v4["ports"],
        json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
    );
    assert_eq!(
        v4["endpoints"][0],
        json!({"addresses": ["192.0.2.1"], "conditions": {"ready": true}})
    );
    assert_eq!(w.creates[1].1["addressType"], "IPv6");
    // Stored: nothing more to do.
    h.add(ENDPOINTSLICES, stored(v4, "ext-4"));
    h.add(ENDPOINTSLICES, stored(&w.creates[1].1, "ext-6"));
    assert!(h.sync("ns/ext").is_empty());
    // An address goes: the slice is rewritten under its name.
    h.update(
        ENDPOINTS,
        endpoints(&["192.0.2.1", "2001:db8::1"], json!({})),
    );
    let w = h.sync("ns/ext");
    assert_eq!(w.updates.len(), 1);
    assert_eq!(w.updates[0].2["metadata"]["name"], "ext-4");
    assert_eq!(w.updates[0].2["endpoints"].as_array().unwrap().len(), 1);
}

#[test]
fn skipped_endpoints_lose_their_mirrored_slices() {
    let mut h = harness(1000);
    h.add(SERVICES, svc(None));
    let e = endpoints(&["192.0.2.1"], json!({}));
    h.add(ENDPOINTS, e.clone());
    let w = h.sync("ns/ext");
    h.add(ENDPOINTSLICES, stored(&w.creates[0].1, "ext-1"));
    h.update(
        ENDPOINTS,
        endpoints(
            &["192.0.2.1"],
            json!({"labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}}),
        ),
    );
    assert_eq!(h.take_queued(), ["ns/ext"]);
    let w = h.sync("ns/ext");
    assert_eq!(w.deletes, [(ENDPOINTSLICES, "ns/ext-1".to_string())]);
    // A Service with a selector: not mirrored either.
    h.update(ENDPOINTS, e);
    h.update(SERVICES, svc(Some(json!({"app": "x"}))));
    assert_eq!(h.sync("ns/ext").deletes.len(), 1);
    // Leader-election records are never queued.
    h.take_queued();
    let mut leader = endpoints(&["192.0.2.9"], json!({}));
    leader["metadata"]["name"] = json!("lock");
    leader["metadata"]["annotations"] = json!({"control-plane.alpha.kubernetes.io/leader": "{}"});
    h.add(ENDPOINTS, leader);
    assert!(h.take_queued().is_empty());
}

#[test]
fn too_many_and_invalid_addresses_are_reported() {
    let mut h = harness(2);
    h.add(SERVICES, svc(None));
    h.add(
        ENDPOINTS,
        endpoints(&["192.0.2.1", "192.0.2.2", "192.0.2.3", "nope"], json!({})),
    );
    let w = h.sync("ns/ext");
    assert_eq!(w.creates.len(), 1);
    assert_eq!(w.creates[0].1["endpoints"].as_array().unwrap().len(), 2);
    assert_eq!(
        w.events,
        [(EventType::Warning, "TooManyAddressesToMirror".to_string(),
          "A max of 2 addresses can be mirrored to EndpointSlices per Endpoints subset. 2 addresses were skipped".to_string())]
    );
    h.update(ENDPOINTS, endpoints(&["bad", "192.0.2.1"], json!({})));
    let w = h.sync("ns/ext");
    assert_eq!(
        w.events,
        [(
            EventType::Warning,
            "InvalidIPAddress".to_string(),
            "Skipped 1 invalid IP addresses when mirroring to EndpointSlices".to_string()
        )]
    );
}

#[test]
fn a_slice_to_create_takes_the_name_of_one_to_delete() {
    let mut h = harness(1000);
    h.add(SERVICES, svc(None));
    h.add(ENDPOINTS, endpoints(&["192.0.2.1"], json!({})));
    let w = h.sync("ns/ext");
    h.add(ENDPOINTSLICES, stored(&w.creates[0].1, "ext-1"));
    // The port changes: another set of ports, so a new slice, written over the old one.
    let mut e = endpoints(&["192.0.2.1"], json!({}));
    e["subsets"][0]["ports"][0]["port"] = json!(9090);
    h.update(ENDPOINTS, e);
    let w = h.sync("ns/ext");
    assert!(w.creates.is_empty() && w.deletes.is_empty(), "{w:?}");
    assert_eq!(w.updates[0].2["metadata"]["name"], "ext-1");
    assert_eq!(w.updates[0].2["ports"][0]["port"], 9090);
}

#[test]
fn sloppy_ipv4_and_mapped_addresses_are_ipv4() {
    assert_eq!(reconciler::address_type("010.001.0.1"), Some("IPv4"));
    assert_eq!(reconciler::address_type("::ffff:192.0.2.1"), Some("IPv4"));
    assert_eq!(reconciler::address_type("2001:db8::1"), Some("IPv6"));
    assert_eq!(reconciler::address_type("host"), None);
}
