use super::*;
use crate::api::resources::PODS;
use crate::controllers::testing::Harness;
use serde_json::{json, Value};

const T0: &str = "2024-05-01T10:00:00Z";

pub(super) fn svc(name: &str, extra: Value) -> Value {
    let mut s = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("svc-{name}"),
            "resourceVersion": "1", "creationTimestamp": T0, "labels": {"team": "a"}},
        "spec": {"selector": {"app": "web"}, "clusterIP": "10.96.0.10", "ipFamilies": ["IPv4"],
            "type": "ClusterIP",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}]}});
    merge(&mut s, &extra);
    static RV: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let rv = RV.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    s["metadata"]["resourceVersion"] = json!(rv.to_string());
    s
}

fn merge(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b.clone(),
    }
}

pub(super) fn pod(name: &str, ip: &str, ready: bool, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "resourceVersion": "10", "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "c",
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]}]},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                "lastTransitionTime": T0}]}})
}

fn node(name: &str, zone: &str, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "5",
            "labels": {"topology.kubernetes.io/zone": zone}},
        "status": {"allocatable": {"cpu": cpu},
            "conditions": [{"type": "Ready", "status": "True"}]}})
}

pub(super) fn harness(max: usize) -> Harness<EndpointSliceController> {
    let mut h = Harness::new(EndpointSliceController::new(max, Duration::ZERO));
    h.add(NODES, node("node-1", "zone-a", "4"));
    h
}

/// A slice as the server would answer the create of `o`: named, with a uid and generation.
pub(super) fn stored(o: &Value, name: &str, gen: i64) -> Value {
    let mut o = o.clone();
    o["metadata"]["name"] = json!(name);
    o["metadata"]["uid"] = json!(format!("uid-{name}"));
    o["metadata"]["generation"] = json!(gen);
    o["metadata"]["resourceVersion"] = json!("100");
    o["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("generateName");
    o
}

fn ips(slice: &Value) -> Vec<String> {
    let mut v: Vec<String> = slice["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["addresses"][0].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn a_new_service_gets_one_slice_with_its_ready_and_not_ready_pods() {
    let mut h = harness(100);
    h.add(SERVICES, svc("web", json!({})));
    h.add(PODS, pod("a", "10.0.0.1", true, "node-1"));
    h.add(PODS, pod("b", "10.0.0.2", false, "node-1"));
    let w = h.sync("ns/web");
    assert_eq!(w.creates.len(), 1, "{w:?}");
    let s = &w.creates[0].1;
    assert_eq!(s["metadata"]["generateName"], "web-");
    assert_eq!(s["addressType"], "IPv4");
    assert_eq!(
        s["metadata"]["labels"],
        json!({"team": "a", "kubernetes.io/service-name": "web",
            "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"})
    );
    assert_eq!(
        s["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Service", "name": "web", "uid": "svc-web",
            "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(s["metadata"]["annotations"][model::TRIGGER_TIME], T0);
    assert_eq!(
        s["ports"],
        json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
    );
    assert_eq!(
        s["endpoints"][0],
        json!({"addresses": ["10.0.0.1"],
            "conditions": {"ready": true, "serving": true, "terminating": false},
            "targetRef": {"kind": "Pod", "namespace": "ns", "name": "a", "uid": "uid-a"},
            "nodeName": "node-1", "zone": "zone-a"})
    );
    assert_eq!(
        s["endpoints"][1]["conditions"],
        json!({"ready": false, "serving": false, "terminating": false})
    );
}

#[test]
fn terminating_pods_stay_as_serving_not_ready_and_finished_ones_go() {
    let mut h = harness(100);
    h.add(SERVICES, svc("web", json!({})));
    let mut p = pod("a", "10.0.0.1", true, "node-1");
    p["metadata"]["deletionTimestamp"] = json!(T0);
    h.add(PODS, p);
    let mut done = pod("b", "10.0.0.2", false, "node-1");
    done["status"]["phase"] = json!("Succeeded");
    h.add(PODS, done);
    let w = h.sync("ns/web");
    let eps = w.creates[0].1["endpoints"].as_array().unwrap().clone();
    assert_eq!(eps.len(), 1);
    assert_eq!(
        eps[0]["conditions"],
        json!({"ready": false, "serving": true, "terminating": true})
    );
    // publishNotReadyAddresses: ready whatever the pod says.
    h.update(
        SERVICES,
        svc("web", json!({"spec": {"publishNotReadyAddresses": true}})),
    );
    let w = h.sync("ns/web");
    assert_eq!(w.creates[0].1["endpoints"][0]["conditions"]["ready"], true);
}

#[test]
fn endpoints_are_packed_into_slices_of_at_most_max() {
    let mut h = harness(2);
    h.add(SERVICES, svc("web", json!({})));
    for i in 1..=5 {
        h.add(
            PODS,
            pod(&format!("p{i}"), &format!("10.0.0.{i}"), true, "node-1"),
        );
    }
    let w = h.sync("ns/web");
    let sizes: Vec<usize> = w
        .creates
        .iter()
        .map(|(_, s)| s["endpoints"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, [2, 2, 1]);
}

#[test]
fn a_changed_pod_updates_only_its_slice_and_new_ones_fill_it() {
    let mut h = harness(3);
    h.add(SERVICES, svc("web", json!({})));
    for i in 1..=5 {
        h.add(
            PODS,
            pod(&format!("p{i}"), &format!("10.0.0.{i}"), true, "node-1"),
        );
    }
    let w = h.sync("ns/web");
    assert_eq!(w.creates.len(), 2);
    h.add(ENDPOINTSLICES, stored(&w.creates[0].1, "web-aaaaa", 1));
    h.add(ENDPOINTSLICES, stored(&w.creates[1].1, "web-bbbbb", 1));
    assert!(h.sync("ns/web").is_empty(), "nothing changed");
    // p1 goes, p6 comes: one update of the slice p1 was in, nothing created.
    h.delete(PODS, pod("p1", "10.0.0.1", true, "node-1"));
    h.add(PODS, pod("p6", "10.0.0.6", true, "node-1"));
    let w = h.sync("ns/web");
    assert!(w.creates.is_empty() && w.deletes.is_empty(), "{w:?}");
    assert_eq!(w.updates.len(), 1);
    assert_eq!(w.updates[0].2["metadata"]["name"], "web-aaaaa");
    assert_eq!(ips(&w.updates[0].2), ["10.0.0.2", "10.0.0.3", "10.0.0.6"]);
}

#[test]
fn a_new_pod_goes_into_the_unchanged_slice_it_fills_best() {
    let mut h = harness(3);
    h.add(SERVICES, svc("web", json!({})));
    for i in 1..=5 {
        h.add(
            PODS,
            pod(&format!("p{i}"), &format!("10.0.0.{i}"), true, "node-1"),
        );
    }
    let w = h.sync("ns/web");
    h.add(ENDPOINTSLICES, stored(&w.creates[0].1, "web-full", 1));
    h.add(ENDPOINTSLICES, stored(&w.creates[1].1, "web-room", 1));
    h.add(PODS, pod("p6", "10.0.0.6", true, "node-1"));
    let w = h.sync("ns/web");
    assert!(w.creates.is_empty(), "{w:?}");
    assert_eq!(w.updates.len(), 1);
    assert_eq!(w.updates[0].2["metadata"]["name"], "web-room");
    assert_eq!(ips(&w.updates[0].2), ["10.0.0.4", "10.0.0.5", "10.0.0.6"]);
}

#[test]
fn no_pods_leave_one_placeholder_slice() {
    let mut h = harness(100);
    h.add(SERVICES, svc("web", json!({})));
    let w = h.sync("ns/web");
    assert_eq!(w.creates.len(), 1);
    let p = &w.creates[0].1;
    assert_eq!(p["endpoints"], json!([]));
    assert_eq!(p["ports"], json!([]));
    h.add(ENDPOINTSLICES, stored(p, "web-p", 1));
    assert!(h.sync("ns/web").is_empty(), "the placeholder is kept");
    // A pod comes: the placeholder (other ports) is reused under its name, not deleted.
    h.add(PODS, pod("a", "10.0.0.1", true, "node-1"));
    let w = h.sync("ns/web");
    assert!(w.creates.is_empty() && w.deletes.is_empty(), "{w:?}");
    assert_eq!(w.updates[0].2["metadata"]["name"], "web-p");
    assert_eq!(ips(&w.updates[0].2), ["10.0.0.1"]);
    assert_eq!(w.updates[0].2["ports"][0]["port"], 8080);
}

#[test]
fn dual_stack_services_get_a_slice_per_family_and_lose_the_family_they_drop() {
    let mut h = harness(100);
    h.add(
        SERVICES,
        svc("web", json!({"spec": {"ipFamilies": ["IPv4", "IPv6"]}})),
    );
    let mut p = pod("a", "10.0.0.1", true, "node-1");
    p["status"]["podIPs"] = json!([{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]);
    h.add(PODS, p);
    let w = h.sync("ns/web");
    let fams: Vec<&str> = w
        .creates
        .iter()
        .map(|(_, s)| s["addressType"].as_str().unwrap())
        .collect();
    assert_eq!(fams, ["IPv4", "IPv6"]);
    assert_eq!(
        w.creates[1].1["endpoints"][0]["addresses"],
        json!(["fd00::1"])
    );
    h.add(ENDPOINTSLICES, stored(&w.creates[0].1, "web-4", 1));
    h.add(ENDPOINTSLICES, stored(&w.creates[1].1, "web-6", 1));
    h.update(
        SERVICES,
        svc("web", json!({"spec": {"ipFamilies": ["IPv4"]}})),
    );
    let w = h.sync("ns/web");
    assert_eq!(w.deletes, [(ENDPOINTSLICES, "ns/web-6".to_string())]);
    assert!(w.creates.is_empty() && w.updates.is_empty());
}

#[test]
fn pods_on_unknown_nodes_are_left_out_and_reported() {
    let mut h = harness(100);
    h.add(SERVICES, svc("web", json!({})));
    h.add(PODS, pod("a", "10.0.0.1", true, "node-1"));
    h.add(PODS, pod("b", "10.0.0.2", true, "node-9"));
    let o = h.outcome("ns/web");
    let w = crate::controllers::testing::Writes::of(&o);
    assert_eq!(ips(&w.creates[0].1), ["10.0.0.1"]);
    assert_eq!(
        w.events,
        [(EventType::Warning, "FailedToUpdateEndpointSlices".to_string(),
          "Error updating Endpoint Slices for Service ns/web: skipping Pod b for Service ns/web: Node node-9 Not Found".to_string())]
    );
    assert!(o.retry_quietly.is_some());
}

#[test]
fn service_label_changes_update_the_labels_and_selectorless_services_are_left_alone() {
    let mut h = harness(100);
    h.add(SERVICES, svc("web", json!({})));
    h.add(PODS, pod("a", "10.0.0.1", true, "node-1"));
    let w = h.sync("ns/web");
    h.add(ENDPOINTSLICES, stored(&w.creates[0].1, "web-1", 1));
    h.update(
        SERVICES,
        svc("web", json!({"metadata": {"labels": {"team": "b"}}})),
    );
    let w = h.sync("ns/web");
    assert_eq!(w.updates.len(), 1);
    assert_eq!(w.updates[0].2["metadata"]["labels"]["team"], "b");
    let mut bare = svc("db", json!({}));
    bare["spec"].as_object_mut().unwrap().remove("selector");
    h.add(SERVICES, bare);
    assert!(h.sync("ns/db").is_empty());
}

#[test]
fn own_writes_queue_nothing_and_a_stale_cache_waits() {
    let mut h = harness(100);
    h.add(SERVICES, svc("web", json!({})));
    h.add(PODS, pod("a", "10.0.0.1", true, "node-1"));
    h.take_queued();
    let w = h.sync("ns/web");
    let answer = stored(&w.creates[0].1, "web-1", 1);
    h.ctrl.applied(
        "ns/web",
        &Action::Create {
            kind: ENDPOINTSLICES,
            namespace: "ns".into(),
            object: w.creates[0].1.clone(),
        },
        Applied::Done(Some(&answer)),
    );
    // Not in the cache yet: the sync waits for the watch.
    assert!(h.outcome("ns/web").retry_quietly.is_some());
    h.add(ENDPOINTSLICES, answer.clone());
    assert!(h.take_queued().is_empty(), "the echo of our own create");
    assert!(h.sync("ns/web").is_empty());
    // Someone else edits it: synced.
    let mut edited = answer.clone();
    edited["metadata"]["generation"] = json!(2);
    edited["metadata"]["resourceVersion"] = json!("101");
    edited["endpoints"] = json!([]);
    h.update(ENDPOINTSLICES, edited);
    assert_eq!(h.take_queued(), ["ns/web"]);
    assert_eq!(h.sync("ns/web").updates.len(), 1);
}

#[test]
fn topology_hints_follow_the_zones_cpu() {
    let mut h = harness(100);
    h.add(NODES, node("node-2", "zone-b", "4"));
    h.add(
        SERVICES,
        svc(
            "web",
            json!({"metadata": {"annotations": {"service.kubernetes.io/topology-mode": "Auto"}}}),
        ),
    );
    for i in 1..=4 {
        let n = if i <= 3 { "node-1" } else { "node-2" };
        h.add(PODS, pod(&format!("p{i}"), &format!("10.0.0.{i}"), true, n));
    }
    let w = h.sync("ns/web");
    let hints: Vec<String> = w.creates[0].1["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e["hints"]["forZones"][0]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    // Equal CPU: two endpoints per zone; one of zone-a's three is hinted to zone-b.
    assert_eq!(
        hints.iter().filter(|z| *z == "zone-a").count(),
        2,
        "{hints:?}"
    );
    assert_eq!(
        hints.iter().filter(|z| *z == "zone-b").count(),
        2,
        "{hints:?}"
    );
    assert_eq!(
        w.events,
        [(
            EventType::Normal,
            "TopologyAwareHintsEnabled".to_string(),
            "Topology Aware Hints has been enabled, addressType: IPv4".to_string()
        )]
    );
    h.add(ENDPOINTSLICES, stored(&w.creates[0].1, "web-1", 1));
    assert!(h.sync("ns/web").is_empty(), "hints that still fit are kept");
    // Annotation removed: hints dropped, with an Event.
    h.update(SERVICES, svc("web", json!({})));
    let w = h.sync("ns/web");
    assert_eq!(w.updates.len(), 1);
    assert!(w.updates[0].2["endpoints"][0].get("hints").is_none());
    assert_eq!(w.events[0].1, "TopologyAwareHintsDisabled");
    assert_eq!(
        w.events[0].2,
        "Topology Aware Hints has been disabled, addressType: IPv4"
    );
}

#[test]
fn hints_need_enough_endpoints_and_node_information() {
    let mut h = harness(100);
    h.add(SERVICES, svc("web", json!({"metadata": {"annotations": {"service.kubernetes.io/topology-aware-hints": "auto"}}})));
    h.add(PODS, pod("a", "10.0.0.1", true, "node-1"));
    let w = h.sync("ns/web");
    assert_eq!(
        w.events,
        [(EventType::Warning, "TopologyAwareHintsDisabled".to_string(),
          "Insufficient Node information: allocatable CPU or zone not specified on one or more nodes, addressType: IPv4".to_string())]
    );
    h.add(NODES, node("node-2", "zone-b", "4"));
    let w = h.sync("ns/web");
    assert_eq!(
        w.events[0].2,
        "Insufficient number of endpoints (1 endpoints, 2 zones), addressType: IPv4"
    );
}

#[test]
fn pod_changes_find_their_services_through_the_index() {
    let mut h = harness(100);
    h.add(SERVICES, svc("web", json!({})));
    let mut other = svc("other", json!({}));
    other["spec"]["selector"] = json!({"app": "db"});
    h.add(SERVICES, other);
    h.take_queued();
    h.add(PODS, pod("a", "10.0.0.1", true, "node-1"));
    assert_eq!(h.take_queued(), ["ns/web"]);
}

#[test]
fn quantities_read_as_milli_values() {
    assert_eq!(topology::milli_value("4"), 4000);
    assert_eq!(topology::milli_value("3500m"), 3500);
    assert_eq!(topology::milli_value("0.5"), 500);
    assert_eq!(topology::milli_value("1k"), 1_000_000);
    assert_eq!(topology::milli_value("x"), 0);
}

#[test]
fn traffic_distribution_hints_ready_endpoints_to_their_zone_and_node() {
    let mut h = harness(100);
    h.add(NODES, node("node-2", "", "4"));
    let td = |v: &str| svc("web", json!({"spec": {"trafficDistribution": v}}));
    h.add(SERVICES, td("PreferClose"));
    h.add(PODS, pod("a", "10.0.0.1", true, "node-1"))
        .add(PODS, pod("b", "10.0.0.2", false, "node-1"))
        .add(PODS, pod("c", "10.0.0.3", true, "node-2"));
    let hints = |s: &Value| -> Vec<Value> {
        let mut e = s["endpoints"].as_array().unwrap().clone();
        e.sort_by_key(|e| e["addresses"][0].as_str().unwrap().to_string());
        e.iter().map(|e| e["hints"].clone()).collect()
    };
    let w = h.sync("ns/web");
    assert!(w.events.is_empty());
    // Ready in a zone: its zone; not ready, or no zone: none.
    assert_eq!(
        hints(&w.creates[0].1),
        [
            json!({"forZones": [{"name": "zone-a"}]}),
            Value::Null,
            Value::Null
        ]
    );
    let mut slice = stored(&w.creates[0].1, "web-1", 1);
    h.add(ENDPOINTSLICES, slice.clone());
    assert!(h.sync("ns/web").is_empty(), "hints that fit are kept");
    // PreferSameZone is PreferClose; PreferSameNode adds the node.
    h.update(SERVICES, td("PreferSameZone"));
    assert!(h.sync("ns/web").is_empty());
    h.update(SERVICES, td("PreferSameNode"));
    let w = h.sync("ns/web");
    assert_eq!(
        hints(&w.updates[0].2),
        [
            json!({"forZones": [{"name": "zone-a"}], "forNodes": [{"name": "node-1"}]}),
            Value::Null,
            json!({"forNodes": [{"name": "node-2"}]})
        ]
    );
    slice["endpoints"] = w.updates[0].2["endpoints"].clone();
    slice["metadata"]["generation"] = json!(2);
    slice["metadata"]["resourceVersion"] = json!("101");
    h.update(ENDPOINTSLICES, slice.clone());
    h.take_queued();
    assert!(h.sync("ns/web").is_empty());
    // A value this release does not know, or none: the hints go, without an Event.
    for v in [json!("Elsewhere"), Value::Null] {
        let mut s = td("PreferClose");
        s["spec"]["trafficDistribution"] = v;
        h.update(SERVICES, s);
        let w = h.sync("ns/web");
        assert!(w.events.is_empty());
        assert_eq!(
            hints(&w.updates[0].2),
            [Value::Null, Value::Null, Value::Null]
        );
    }
}

#[test]
fn the_topology_annotation_wins_over_traffic_distribution() {
    let mut h = harness(100);
    h.add(NODES, node("node-2", "zone-b", "4"));
    h.add(
        SERVICES,
        svc(
            "web",
            json!({"metadata": {"annotations": {"service.kubernetes.io/topology-mode": "Auto"}},
                "spec": {"trafficDistribution": "PreferSameNode"}}),
        ),
    );
    for i in 1..=4 {
        let n = if i <= 3 { "node-1" } else { "node-2" };
        h.add(PODS, pod(&format!("p{i}"), &format!("10.0.0.{i}"), true, n));
    }
    let w = h.sync("ns/web");
    assert_eq!(w.events[0].1, "TopologyAwareHintsEnabled");
    for e in w.creates[0].1["endpoints"].as_array().unwrap() {
        assert!(e["hints"].get("forNodes").is_none(), "{e}");
        assert!(e["hints"]["forZones"][0]["name"].is_string(), "{e}");
    }
}
