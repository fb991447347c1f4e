use super::gohash;
use super::repack::{repack, truncate, MAX_CAPACITY};
use super::subsets::{Address, Port, Subset, TargetRef};
use super::sync::MANAGED_BY_LABEL;
use super::*;
use crate::controllers::testing::Harness;
use serde_json::{json, Value};

const T0: &str = "2024-05-01T10:00:00Z";
const T1: &str = "2024-05-01T10:05:00Z";
const T2: &str = "2024-05-01T10:06:00Z";

fn svc(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    let m = spec.as_object_mut().expect("spec object");
    m.entry("clusterIP").or_insert(json!("10.96.0.10"));
    m.entry("ipFamilies").or_insert(json!(["IPv4"]));
    m.entry("type").or_insert(json!("ClusterIP"));
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("svc-{name}"),
            "resourceVersion": "1", "creationTimestamp": T0, "labels": {"team": "a"}},
        "spec": spec})
}

fn web_svc() -> Value {
    svc(
        "web",
        json!({"selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}]}),
    )
}

/// A pod of app `web` on node-1 with `ip`, ready or not (since `since`), serving `http` on
/// `port`.
fn pod(name: &str, ip: &str, ready: bool, since: &str, port: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "resourceVersion": "10", "labels": {"app": "web"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c",
            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}]}]},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                "lastTransitionTime": since}]}})
}

fn addr(ip: &str, name: &str) -> Address {
    Address {
        ip: ip.into(),
        hostname: String::new(),
        node_name: Some("node-1".into()),
        target: Some(TargetRef {
            kind: "Pod".into(),
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            ..TargetRef::default()
        }),
    }
}

fn port(n: i32) -> Port {
    Port {
        port: n,
        ..Port::default()
    }
}

fn bare(ip: &str) -> Address {
    Address {
        ip: ip.into(),
        ..Address::default()
    }
}

fn harness() -> Harness<EndpointsController> {
    Harness::new(EndpointsController::new(Duration::ZERO))
}

fn hex(b: [u8; 16]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn go_dumps_and_hashes_are_upstreams() {
    // Printed and hashed by go-spew with `hashutil.DeepHashObject`'s configuration.
    let http = Port {
        name: "http".into(),
        port: 80,
        protocol: "TCP".into(),
        app_protocol: None,
    };
    assert_eq!(
        gohash::port_text(&http),
        "(v1.EndpointPort){Name:(string)http Port:(int32)80 Protocol:(v1.Protocol)TCP AppProtocol:(*string)<nil>}"
    );
    assert_eq!(
        hex(gohash::port_hash(&http)),
        "a0afc9289a5b862f31961966cd661a6e"
    );
    let metrics = Port {
        name: "metrics".into(),
        port: 9090,
        protocol: "TCP".into(),
        app_protocol: Some("http".into()),
    };
    assert_eq!(
        hex(gohash::port_hash(&metrics)),
        "2630eb6576fea6ab9300dcf203d2d05b"
    );
    let mut b = addr("10.1.0.2", "b");
    b.hostname = "h".into();
    b.node_name = Some(String::new());
    let sub = Subset {
        addresses: vec![addr("10.1.0.1", "a")],
        not_ready: vec![b],
        ports: vec![http],
    };
    let mut a = sub.clone();
    a.addresses[0].target.as_mut().unwrap().uid = "u-a".into();
    a.not_ready[0].target.as_mut().unwrap().uid = "u-b".into();
    assert_eq!(
        hex(gohash::subset_hash(&a)),
        "6153508bc297b681f1a82e8fc9db7f0f"
    );
    let plain = Subset {
        addresses: vec![bare("1.2.3.4")],
        ..Subset::default()
    };
    assert_eq!(
        gohash::subset_text(&plain),
        "(v1.EndpointSubset){Addresses:([]v1.EndpointAddress)[{IP:(string)1.2.3.4 Hostname:(string) NodeName:(*string)<nil> TargetRef:(*v1.ObjectReference)<nil>}] NotReadyAddresses:([]v1.EndpointAddress)<nil> Ports:([]v1.EndpointPort)<nil>}"
    );
    assert_eq!(
        hex(gohash::subset_hash(&plain)),
        "d72634e0f12abc59d6f6117f5711c043"
    );
}

fn sub(ready: &[&str], not_ready: &[&str], ports: &[i32]) -> Subset {
    Subset {
        addresses: ready.iter().map(|ip| bare(ip)).collect(),
        not_ready: not_ready.iter().map(|ip| bare(ip)).collect(),
        ports: ports.iter().map(|p| port(*p)).collect(),
    }
}

#[test]
fn repacking_groups_ports_by_their_addresses() {
    let given = [
        sub(&["1.2.3.4"], &[], &[111]),
        sub(&["1.2.3.5"], &[], &[222]),
        sub(&["1.2.3.6"], &[], &[111]),
        sub(&["1.2.3.5"], &[], &[333]),
    ];
    let got = repack(&given);
    let mut want = vec![
        sub(&["1.2.3.4", "1.2.3.6"], &[], &[111]),
        sub(&["1.2.3.5"], &[], &[222, 333]),
    ];
    super::repack::sort_subsets(&mut want);
    assert_eq!(got, want);
    // Not ready on one subset is not ready for that port.
    let got = repack(&[sub(&["1.2.3.4"], &["1.2.3.4"], &[111])]);
    assert_eq!(got, [sub(&[], &["1.2.3.4"], &[111])]);
    // No ports: kept, with none.
    assert_eq!(
        repack(&[sub(&[], &["1.2.3.4"], &[])]),
        [sub(&[], &["1.2.3.4"], &[])]
    );
    assert!(repack(&[sub(&[], &[], &[111])]).is_empty());
    // Addresses by IP bytes (so "10.0.0.10" before "10.0.0.9"), then target UID.
    let got = repack(&[sub(&["10.0.0.9", "10.0.0.10"], &[], &[1])]);
    assert_eq!(got[0].addresses[0].ip, "10.0.0.10");
}

fn ips(n: usize, base: u32) -> Vec<String> {
    (0..n)
        .map(|i| {
            let v = base + i as u32;
            format!("10.{}.{}.{}", v >> 16 & 255, v >> 8 & 255, v & 255)
        })
        .collect()
}

fn as_refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn truncation_keeps_ready_first_in_proportion() {
    // 1200 ready over two subsets (800 + 400), 50 not ready: ready cut to 667 + 333.
    let (a, b, c) = (ips(800, 0), ips(400, 1000), ips(50, 5000));
    let mut s = vec![
        sub(&as_refs(&a), &as_refs(&c), &[1]),
        sub(&as_refs(&b), &[], &[2]),
    ];
    assert!(truncate(&mut s));
    assert_eq!((s[0].addresses.len(), s[1].addresses.len()), (667, 333));
    assert!(s[0].not_ready.is_empty());
    // 900 ready, 300 not ready (200 + 100): not ready cut to 67 + 33.
    let (a, b, c) = (ips(900, 0), ips(200, 2000), ips(100, 3000));
    let mut s = vec![
        sub(&as_refs(&a), &as_refs(&b), &[1]),
        sub(&[], &as_refs(&c), &[2]),
    ];
    assert!(truncate(&mut s));
    assert_eq!(s[0].addresses.len(), 900);
    assert_eq!((s[0].not_ready.len(), s[1].not_ready.len()), (67, 33));
    let total: usize = s.iter().map(Subset::count).sum();
    assert_eq!(total, MAX_CAPACITY);
    let mut small = vec![sub(&["1.1.1.1"], &[], &[1])];
    assert!(!truncate(&mut small));
}

#[test]
fn writes_ready_and_not_ready_addresses_with_labels_and_trigger_time() {
    let mut h = harness();
    h.add(SERVICES, web_svc());
    h.add(PODS, pod("a", "10.1.0.1", true, T0, 8080))
        .add(PODS, pod("b", "10.1.0.2", false, T1, 8080));
    assert_eq!(h.take_queued(), ["ns/web"]);
    let w = h.sync("ns/web");
    assert_eq!(w.creates.len(), 1);
    assert!(w.events.is_empty());
    let ep = &w.creates[0].1;
    assert_eq!(
        ep,
        &json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web",
            "labels": {"team": "a", MANAGED_BY_LABEL: "endpoint-controller"},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": T0}},
            "subsets": [{
                "addresses": [{"ip": "10.1.0.1", "nodeName": "node-1",
                    "targetRef": {"kind": "Pod", "namespace": "ns", "name": "a", "uid": "uid-a"}}],
                "notReadyAddresses": [{"ip": "10.1.0.2", "nodeName": "node-1",
                    "targetRef": {"kind": "Pod", "namespace": "ns", "name": "b", "uid": "uid-b"}}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]})
    );
    // Once it exists as wanted, nothing is written; a pod turning ready is.
    let mut stored = ep.clone();
    stored["metadata"]["namespace"] = json!("ns");
    stored["metadata"]["resourceVersion"] = json!("20");
    // Written by v1.32 or earlier (no managed-by label): written again, only to add it.
    let mut unlabelled = stored.clone();
    unlabelled["metadata"]["labels"] = json!({"team": "a"});
    h.add(ENDPOINTS, unlabelled);
    h.take_queued();
    let w = h.sync("ns/web");
    assert_eq!(w.updates.len(), 1);
    assert_eq!(
        w.updates[0].2["metadata"]["labels"],
        stored["metadata"]["labels"]
    );
    assert_eq!(w.updates[0].2["subsets"], stored["subsets"]);
    stored["metadata"]["resourceVersion"] = json!("21");
    h.update(ENDPOINTS, stored);
    h.take_queued();
    assert!(h.sync("ns/web").is_empty());
    let mut b = pod("b", "10.1.0.2", true, T2, 8080);
    b["metadata"]["resourceVersion"] = json!("11");
    h.update(PODS, b);
    assert_eq!(h.take_queued(), ["ns/web"]);
    let w = h.sync("ns/web");
    let ep = &w.updates[0].2;
    assert_eq!(ep["metadata"]["resourceVersion"], "21");
    assert_eq!(ep["subsets"][0]["addresses"].as_array().unwrap().len(), 2);
    assert!(ep["subsets"][0].get("notReadyAddresses").is_none());
    // The change that made it: pod b's readiness at T2.
    assert_eq!(ep["metadata"]["annotations"][TRIGGER_TIME], T2);
}

#[test]
fn named_ports_resolve_per_pod_and_ports_missing_on_a_pod_leave_it_out() {
    let mut h = harness();
    h.add(
        SERVICES,
        svc(
            "web",
            json!({"selector": {"app": "web"}, "ports": [
                {"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"},
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": "http"},
                {"name": "raw", "port": 81, "protocol": "TCP", "targetPort": 9000,
                    "appProtocol": "h2c"}]}),
        ),
    );
    h.add(PODS, pod("a", "10.1.0.1", true, T0, 8080))
        .add(PODS, pod("b", "10.1.0.2", true, T0, 8081));
    let w = h.sync("ns/web");
    let subs = Subset::all_from(&w.creates[0].1);
    // Per pod its own http port; the raw port shared; the UDP port found on neither.
    assert_eq!(subs.len(), 3);
    let ports: Vec<Vec<i32>> = subs
        .iter()
        .map(|s| s.ports.iter().map(|p| p.port).collect())
        .collect();
    assert!(
        ports.contains(&vec![8080]) && ports.contains(&vec![8081]),
        "{ports:?}"
    );
    assert!(ports.contains(&vec![9000]), "{ports:?}");
    let expected_raw = Port {
        name: "raw".into(),
        port: 9000,
        protocol: "TCP".into(),
        app_protocol: Some("h2c".into()),
    };
    let shared = subs.iter().find(|s| s.ports[0].port == 9000).unwrap();
    assert_eq!(shared.ports, [expected_raw]);
    assert_eq!(shared.addresses.len(), 2);
}

#[test]
fn headless_services_are_labelled_and_may_have_no_ports() {
    let mut h = harness();
    h.add(
        SERVICES,
        svc(
            "db",
            json!({"selector": {"app": "web"}, "clusterIP": "None"}),
        ),
    );
    let mut p = pod("a", "10.1.0.1", true, T0, 8080);
    p["spec"]["hostname"] = json!("a-0");
    p["spec"]["subdomain"] = json!("db");
    h.add(PODS, p);
    let w = h.sync("ns/db");
    let ep = &w.creates[0].1;
    assert_eq!(
        ep["metadata"]["labels"],
        json!({"team": "a", HEADLESS_LABEL: "", MANAGED_BY_LABEL: "endpoint-controller"})
    );
    assert_eq!(ep["subsets"][0]["addresses"][0]["hostname"], "a-0");
    assert!(ep["subsets"][0].get("ports").is_none());
    // A Service with a cluster IP but no ports gets none.
    let mut h = harness();
    h.add(SERVICES, svc("web", json!({"selector": {"app": "web"}})));
    h.add(PODS, pod("a", "10.1.0.1", true, T0, 8080));
    let ep = &h.sync("ns/web").creates[0].1;
    assert!(ep.get("subsets").is_none());
    assert_eq!(
        ep["metadata"]["labels"],
        json!({"team": "a", MANAGED_BY_LABEL: "endpoint-controller"})
    );
}

#[test]
fn which_pods_count() {
    let mut h = harness();
    let mut s = web_svc();
    h.add(SERVICES, s.clone());
    let mut done = pod("done", "10.1.0.3", true, T0, 8080);
    done["status"]["phase"] = json!("Succeeded");
    let mut dying = pod("dying", "10.1.0.4", true, T0, 8080);
    dying["metadata"]["deletionTimestamp"] = json!(T1);
    let mut no_ip = pod("noip", "", false, T0, 8080);
    no_ip["status"]["podIPs"] = json!([]);
    let mut other = pod("other", "10.1.0.5", true, T0, 8080);
    other["metadata"]["labels"] = json!({"app": "db"});
    let mut v6 = pod("v6", "fd00::5", true, T0, 8080);
    v6["spec"]["nodeName"] = Value::Null;
    for p in [
        pod("a", "10.1.0.1", false, T0, 8080),
        done,
        dying,
        no_ip,
        other,
        v6,
    ] {
        h.add(PODS, p);
    }
    let w = h.sync("ns/web");
    let subs = Subset::all_from(&w.creates[0].1);
    let names = |l: &[Address]| {
        l.iter()
            .map(|a| a.target.as_ref().unwrap().name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(subs.len(), 1);
    assert!(subs[0].addresses.is_empty());
    assert_eq!(names(&subs[0].not_ready), ["a"]);
    // publishNotReadyAddresses: all ready, terminating pods kept.
    s["spec"]["publishNotReadyAddresses"] = json!(true);
    s["metadata"]["resourceVersion"] = json!("2");
    h.update(SERVICES, s.clone());
    let subs = Subset::all_from(&h.sync("ns/web").creates[0].1);
    assert_eq!(names(&subs[0].addresses), ["a", "dying"]);
    // IPv6 Service: the IPv6 pod, with an empty node name as upstream writes it.
    s["spec"]["ipFamilies"] = json!(["IPv6"]);
    s["metadata"]["resourceVersion"] = json!("3");
    s["spec"]["publishNotReadyAddresses"] = json!(false);
    h.update(SERVICES, s.clone());
    let ep = h.sync("ns/web").creates[0].1.clone();
    assert_eq!(ep["subsets"][0]["addresses"][0]["ip"], "fd00::5");
    assert_eq!(ep["subsets"][0]["addresses"][0]["nodeName"], "");
    // No families (an old apiserver): the cluster IP's family, for headless the pod IP's.
    s["spec"].as_object_mut().unwrap().remove("ipFamilies");
    s["metadata"]["resourceVersion"] = json!("4");
    h.update(SERVICES, s.clone());
    let subs = Subset::all_from(&h.sync("ns/web").creates[0].1);
    assert_eq!(names(&subs[0].not_ready), ["a"]);
}

#[test]
fn external_name_and_selectorless_services_are_left_alone_and_deleted_services_cleaned() {
    let mut h = harness();
    h.add(
        SERVICES,
        svc("ext", json!({"type": "ExternalName", "externalName": "x.example", "selector": {"app": "web"}})),
    )
    .add(SERVICES, svc("manual", json!({"ports": [{"port": 80}]})))
    .add(SERVICES, svc("empty", json!({"selector": {}})));
    h.add(PODS, pod("a", "10.1.0.1", true, T0, 8080));
    h.take_queued();
    for k in ["ns/ext", "ns/manual", "ns/empty"] {
        assert!(h.sync(k).is_empty(), "{k}");
    }
    // Endpoints whose Service is gone: deleted (those of a running cluster at start too);
    // without them in the cache nothing is sent.
    assert!(h.sync("ns/gone").is_empty());
    h.add(
        ENDPOINTS,
        json!({"metadata": {"name": "gone", "namespace": "ns", "resourceVersion": "3"}}),
    );
    h.add(
        ENDPOINTS,
        json!({"metadata": {"name": "lock", "namespace": "ns", "resourceVersion": "4",
            "annotations": {"control-plane.alpha.kubernetes.io/leader": "{}"}}}),
    );
    assert_eq!(h.take_queued(), ["ns/gone"]);
    assert_eq!(
        h.sync("ns/gone").deletes,
        [(ENDPOINTS, "ns/gone".to_string())]
    );
}

#[test]
fn failed_writes_are_reported_as_upstream() {
    let mut h = harness();
    h.add(SERVICES, web_svc());
    let out = h.outcome("ns/web");
    let Action::Reported { report, .. } = &out.actions[0] else {
        panic!("a reported create: {out:?}");
    };
    assert_eq!(report.success_reason, "");
    assert_eq!(report.failure_reason, "FailedToCreateEndpoint");
    assert_eq!(
        report.failure_prefix,
        "Failed to create endpoint for service ns/web: "
    );
    assert_eq!(report.about.namespace, "");
    h.add(
        ENDPOINTS,
        json!({"metadata": {"name": "web", "namespace": "ns", "uid": "e-1", "resourceVersion": "3",
            "labels": {"stale": "x"}}}),
    );
    let out = h.outcome("ns/web");
    let Action::Reported { report, .. } = &out.actions[0] else {
        panic!("a reported update: {out:?}");
    };
    assert_eq!(report.failure_reason, "FailedToUpdateEndpoint");
    assert_eq!(report.failure_prefix, "Failed to update endpoint ns/web: ");
    assert_eq!(report.about.namespace, "ns");
}

#[test]
fn pod_changes_queue_only_the_services_they_affect() {
    let mut h = harness();
    h.add(SERVICES, web_svc()).add(
        SERVICES,
        svc(
            "db",
            json!({"selector": {"app": "db"}, "ports": [{"port": 5432, "targetPort": 5432}]}),
        ),
    );
    h.take_queued();
    let a = pod("a", "10.1.0.1", true, T0, 8080);
    h.add(PODS, a.clone());
    assert_eq!(h.take_queued(), ["ns/web"]);
    // Same resourceVersion (a resync): nothing. A change nobody reads: nothing.
    h.update(PODS, a.clone());
    assert!(h.take_queued().is_empty());
    let mut annotated = a.clone();
    annotated["metadata"]["resourceVersion"] = json!("11");
    annotated["metadata"]["annotations"] = json!({"x": "y"});
    h.update(PODS, annotated.clone());
    assert!(h.take_queued().is_empty());
    // Relabelled: the Service it left and the one it joined.
    let mut moved = annotated.clone();
    moved["metadata"]["resourceVersion"] = json!("12");
    moved["metadata"]["labels"] = json!({"app": "db"});
    h.update(PODS, moved.clone());
    assert_eq!(h.take_queued(), ["ns/db", "ns/web"]);
    h.delete(PODS, moved);
    assert_eq!(h.take_queued(), ["ns/db"]);
    // Pod changes wait for the batch period; Service changes do not.
    let c = EndpointsController::new(Duration::from_secs(2));
    assert_eq!(c.key_delay(&POD_WATCH), Duration::from_secs(2));
    assert_eq!(c.key_delay(&SERVICE_WATCH), Duration::ZERO);
}

#[test]
fn over_capacity_is_truncated_and_annotated() {
    let mut h = harness();
    h.add(SERVICES, web_svc());
    for i in 0..1003u32 {
        let ip = format!("10.2.{}.{}", i / 250, i % 250 + 1);
        h.add(PODS, pod(&format!("p{i}"), &ip, true, T0, 8080));
    }
    let ep = h.sync("ns/web").creates[0].1.clone();
    assert_eq!(
        ep["subsets"][0]["addresses"].as_array().unwrap().len(),
        1000
    );
    assert_eq!(ep["metadata"]["annotations"][OVER_CAPACITY], "truncated");
}

#[test]
fn trigger_time_format_is_rfc3339_nano() {
    let t = crate::compat::timefmt::parse_rfc3339("2024-05-01T10:00:00.120Z").unwrap();
    assert_eq!(trigger::format(t), "2024-05-01T10:00:00.12Z");
    let t = crate::compat::timefmt::parse_rfc3339(T0).unwrap();
    assert_eq!(trigger::format(t), T0);
}
