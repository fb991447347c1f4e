//! endpointslice-controller and endpointslice-mirroring-controller scenarios, against the
//! sandbox always and a real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`). There is no
//! kubelet: the tests play it, writing pod IPs and readiness through `pods/status`, and
//! create the Nodes the pods name (the controller takes zones from them).

use crate::common::*;
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{ENDPOINTS, ENDPOINTSLICES, EVENTS, NODES, PODS, SERVICES};
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const SINCE: &str = "2024-05-01T10:00:00Z";
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";

fn new_ns(t: &Target, prefix: &str) -> Ns {
    Ns::with_cleanup(t, prefix, &[SERVICES, PODS, ENDPOINTS, ENDPOINTSLICES])
}

/// A ready Node in `zone`, deleted on drop.
struct Node<'a>(&'a Client, String);

impl<'a> Node<'a> {
    fn new(admin: &'a Client, name: &str, zone: &str) -> Node<'a> {
        let n = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}}});
        let _ = admin.create(&NODES, None, &n);
        eventually(LIMIT, "node status", || {
            let mut n = admin.get(&NODES, None, name).ok()?;
            n["status"]["allocatable"] = json!({"cpu": "4", "memory": "4Gi", "pods": "110"});
            n["status"]["capacity"] = json!({"cpu": "4", "memory": "4Gi", "pods": "110"});
            n["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
                "lastHeartbeatTime": SINCE, "lastTransitionTime": SINCE,
                "reason": "KubeletReady", "message": "ready"}]);
            admin.update_subresource(&NODES, &n, "status").ok()
        });
        Node(admin, name.to_string())
    }
}

impl Drop for Node<'_> {
    fn drop(&mut self) {
        let _ = self.0.delete(&NODES, None, &self.1, &Default::default());
    }
}

fn service(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": {"team": "edge"}}, "spec": spec})
}

fn pod(name: &str, app: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c",
            "image": "registry.k8s.io/pause:3.9",
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]}]}})
}

fn run_pod(admin: &Client, ns: &str, p: Value, ip: &str, ready: bool) {
    let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
    admin.create(&PODS, Some(ns), &p).expect("create pod");
    eventually(LIMIT, "pod status update", || {
        let mut p = admin.get(&PODS, Some(ns), &name).ok()?;
        p["status"]["phase"] = json!("Running");
        p["status"]["podIP"] = json!(ip);
        p["status"]["podIPs"] = json!([{"ip": ip}]);
        let ready = if ready { "True" } else { "False" };
        p["status"]["conditions"] = json!([
            {"type": "Ready", "status": ready, "lastTransitionTime": SINCE},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": SINCE},
        ]);
        admin.update_subresource(&PODS, &p, "status").ok()
    });
}

fn slices(admin: &Client, ns: &str, svc: &str) -> Vec<Value> {
    let opts = ListOptions {
        label_selector: Some(format!("kubernetes.io/service-name={svc}")),
        ..Default::default()
    };
    admin
        .list(&ENDPOINTSLICES, Some(ns), &opts)
        .map(|l| l.items)
        .unwrap_or_default()
}

fn addresses(slices: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = slices
        .iter()
        .filter_map(|s| s["endpoints"].as_array())
        .flatten()
        .filter_map(|e| e["addresses"][0].as_str().map(str::to_string))
        .collect();
    v.sort();
    v
}

fn slices_and_reuse(t: &Target) {
    let ns = new_ns(t, "es-basic");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let node = format!("{n}-node");
    let _node = Node::new(admin, &node, "zone-a");
    let _kcm = start_with(t, "es-basic", "--controllers=endpointslice");
    admin
        .create(
            &SERVICES,
            Some(n),
            &service(
                "web",
                json!({"selector": {"app": "web"},
                    "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}),
            ),
        )
        .expect("service");
    run_pod(admin, n, pod("a", "web", &node), "10.1.0.1", true);
    run_pod(admin, n, pod("b", "web", &node), "10.1.0.2", true);
    run_pod(admin, n, pod("c", "web", &node), "10.1.0.3", false);
    let got = eventually(LIMIT, "one slice with three endpoints", || {
        let s = slices(admin, n, "web");
        (s.len() == 1 && addresses(&s).len() == 3).then_some(s)
    });
    let s = &got[0];
    let meta = &s["metadata"];
    assert!(meta["name"].as_str().unwrap().starts_with("web-"), "{s}");
    assert_eq!(meta["generateName"], "web-");
    assert_eq!(meta["labels"]["team"], "edge");
    assert_eq!(
        meta["labels"][MANAGED_BY],
        "endpointslice-controller.k8s.io"
    );
    assert_eq!(meta["ownerReferences"][0]["kind"], "Service");
    assert_eq!(meta["ownerReferences"][0]["controller"], true);
    assert!(meta["annotations"]["endpoints.kubernetes.io/last-change-trigger-time"].is_string());
    assert_eq!(s["addressType"], "IPv4");
    assert_eq!(
        s["ports"],
        json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
    );
    let eps = s["endpoints"].as_array().unwrap();
    let c = eps
        .iter()
        .find(|e| e["targetRef"]["name"] == "c")
        .expect("c");
    assert_eq!(
        c["conditions"],
        json!({"ready": false, "serving": false, "terminating": false})
    );
    assert_eq!(c["zone"], "zone-a");
    assert_eq!(c["nodeName"], node.as_str());
    // A pod goes: the same slice is updated.
    let name = meta["name"].as_str().unwrap().to_string();
    delete_pod_now(admin, n, "a").expect("delete pod");
    eventually(LIMIT, "the slice without a", || {
        let s = slices(admin, n, "web");
        (s.len() == 1
            && addresses(&s) == ["10.1.0.2", "10.1.0.3"]
            && s[0]["metadata"]["name"] == name.as_str())
        .then_some(())
    });
}

fn packing_and_placeholder(t: &Target) {
    let ns = new_ns(t, "es-pack");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let node = format!("{n}-node");
    let _node = Node::new(admin, &node, "zone-a");
    for i in 1..=5 {
        run_pod(
            admin,
            n,
            pod(&format!("p{i}"), "big", &node),
            &format!("10.2.0.{i}"),
            true,
        );
    }
    let _kcm = Kcm::start(
        t,
        "es-pack",
        &["--controllers=endpointslice", "--max-endpoints-per-slice=2"],
    );
    admin
        .create(
            &SERVICES,
            Some(n),
            &service(
                "big",
                json!({"selector": {"app": "big"}, "ports": [{"port": 80, "targetPort": 8080}]}),
            ),
        )
        .expect("service");
    let got = eventually(LIMIT, "three slices of at most two", || {
        let s = slices(admin, n, "big");
        (addresses(&s).len() == 5).then_some(s)
    });
    let mut sizes: Vec<usize> = got
        .iter()
        .map(|s| s["endpoints"].as_array().unwrap().len())
        .collect();
    sizes.sort();
    assert_eq!(sizes, [1, 2, 2]);
    // A Service without pods: one empty placeholder slice.
    admin
        .create(
            &SERVICES,
            Some(n),
            &service(
                "empty",
                json!({"selector": {"app": "none"}, "ports": [{"port": 80}]}),
            ),
        )
        .expect("service");
    let got = eventually(LIMIT, "a placeholder slice", || {
        let s = slices(admin, n, "empty");
        (s.len() == 1).then_some(s)
    });
    assert!(
        got[0]["endpoints"].as_array().is_none_or(Vec::is_empty),
        "{}",
        got[0]
    );
    assert!(
        got[0]["ports"].as_array().is_none_or(Vec::is_empty),
        "{}",
        got[0]
    );
}

fn hints_for_topology_mode_auto(t: &Target) {
    let ns = new_ns(t, "es-hints");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let (na, nb) = (format!("{n}-a"), format!("{n}-b"));
    let _a = Node::new(admin, &na, "zone-a");
    let _b = Node::new(admin, &nb, "zone-b");
    for (i, node) in [&na, &na, &nb, &nb].iter().enumerate() {
        run_pod(
            admin,
            n,
            pod(&format!("p{i}"), "web", node),
            &format!("10.3.0.{}", i + 1),
            true,
        );
    }
    let _kcm = start_with(t, "es-hints", "--controllers=endpointslice");
    let mut svc = service(
        "web",
        json!({"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}),
    );
    svc["metadata"]["annotations"] = json!({"service.kubernetes.io/topology-mode": "Auto"});
    admin.create(&SERVICES, Some(n), &svc).expect("service");
    let got = eventually(LIMIT, "hints on four endpoints", || {
        let s = slices(admin, n, "web");
        let eps: Vec<Value> = s
            .iter()
            .filter_map(|s| s["endpoints"].as_array())
            .flatten()
            .cloned()
            .collect();
        (eps.len() == 4
            && eps
                .iter()
                .all(|e| e["hints"]["forZones"][0]["name"].is_string()))
        .then_some(eps)
    });
    for e in &got {
        // Every node in the test is this test's: each endpoint is hinted to its own zone
        // unless other nodes of the cluster skew the shares.
        assert!(e["hints"]["forZones"][0]["name"]
            .as_str()
            .unwrap()
            .starts_with("zone-"));
    }
    eventually(LIMIT, "TopologyAwareHintsEnabled Event", || {
        let opts = ListOptions {
            field_selector: Some("involvedObject.name=web".into()),
            ..Default::default()
        };
        let evs = admin.list(&EVENTS, Some(n), &opts).ok()?.items;
        evs.iter()
            .any(|e| {
                e["reason"] == "TopologyAwareHintsEnabled"
                    && e["message"] == "Topology Aware Hints has been enabled, addressType: IPv4"
            })
            .then_some(())
    });
}

fn mirroring_selectorless_endpoints(t: &Target) {
    let ns = new_ns(t, "es-mirror");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "es-mirror", "--controllers=endpointslicemirroring");
    admin
        .create(
            &SERVICES,
            Some(n),
            &service("ext", json!({"ports": [{"port": 80}]})),
        )
        .expect("service");
    let ep = json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "ext", "labels": {"team": "edge"}, "annotations": {"note": "x"}},
        "subsets": [{"addresses": [{"ip": "192.0.2.1"}, {"ip": "192.0.2.2"}],
            "notReadyAddresses": [{"ip": "192.0.2.3"}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]});
    let made = admin.create(&ENDPOINTS, Some(n), &ep).expect("endpoints");
    let got = eventually(LIMIT, "a mirrored slice", || {
        let s = slices(admin, n, "ext");
        (s.len() == 1 && addresses(&s).len() == 3).then_some(s)
    });
    let s = &got[0];
    assert_eq!(
        s["metadata"]["labels"][MANAGED_BY],
        "endpointslicemirroring-controller.k8s.io"
    );
    assert_eq!(s["metadata"]["labels"]["team"], "edge");
    assert_eq!(s["metadata"]["annotations"]["note"], "x");
    assert_eq!(s["metadata"]["ownerReferences"][0]["kind"], "Endpoints");
    assert_eq!(
        s["metadata"]["ownerReferences"][0]["uid"],
        made["metadata"]["uid"]
    );
    let not_ready = s["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["addresses"][0] == "192.0.2.3")
        .expect("not ready address");
    assert_eq!(not_ready["conditions"], json!({"ready": false}));
    // Marked skip-mirror: the slice goes.
    let mut cur = admin.get(&ENDPOINTS, Some(n), "ext").expect("endpoints");
    cur["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"] = json!("true");
    admin.update(&ENDPOINTS, &cur).expect("update endpoints");
    eventually(LIMIT, "mirrored slice deleted", || {
        slices(admin, n, "ext").is_empty().then_some(())
    });
}

/// A restarted controller manager rebuilds what it tracks from the cache: it rewrites nothing
/// that is right and goes on from the slices there are.
fn restart_rewrites_nothing(t: &Target) {
    let ns = new_ns(t, "es-restart");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let node = format!("{n}-node");
    let _node = Node::new(admin, &node, "zone-a");
    let mut kcm = start_with(t, "es-restart-1", "--controllers=endpointslice");
    admin
        .create(
            &SERVICES,
            Some(n),
            &service(
                "web",
                json!({"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}),
            ),
        )
        .expect("service");
    run_pod(admin, n, pod("a", "web", &node), "10.4.0.1", true);
    let before = eventually(LIMIT, "a slice with a", || {
        let s = slices(admin, n, "web");
        (addresses(&s) == ["10.4.0.1"]).then_some(s)
    });
    kcm.kill();
    let _kcm = start_with(t, "es-restart-2", "--controllers=endpointslice");
    run_pod(admin, n, pod("b", "web", &node), "10.4.0.2", true);
    let after = eventually(LIMIT, "the same slice with a and b", || {
        let s = slices(admin, n, "web");
        (addresses(&s) == ["10.4.0.1", "10.4.0.2"]).then_some(s)
    });
    assert_eq!(after.len(), 1);
    assert_eq!(after[0]["metadata"]["name"], before[0]["metadata"]["name"]);
    // One update for b: the restart itself wrote nothing.
    let gen = |s: &Value| s["metadata"]["generation"].as_i64().unwrap_or(0);
    assert_eq!(gen(&after[0]), gen(&before[0]) + 1, "{}", after[0]);
}

/// `spec.trafficDistribution` (v1.30 and later): ready endpoints hinted to their own zone
/// (PreferClose), and to their node too (PreferSameNode, v1.33 and later); none without it.
fn traffic_distribution_hints(t: &Target) {
    let ns = new_ns(t, "es-td");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let na = format!("{n}-a");
    let _a = Node::new(admin, &na, "zone-a");
    run_pod(admin, n, pod("ready", "web", &na), "10.5.0.1", true);
    run_pod(admin, n, pod("waiting", "web", &na), "10.5.0.2", false);
    let _kcm = start_with(t, "es-td", "--controllers=endpointslice");
    let svc = |td: Value| {
        service(
            "web",
            json!({"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}],
                "trafficDistribution": td}),
        )
    };
    admin
        .create(&SERVICES, Some(n), &svc(json!("PreferClose")))
        .expect("service");
    // The hints of the ready and the waiting endpoint, once both are listed.
    let hints = |want: &[Value; 2]| {
        eventually(LIMIT, &format!("hints {want:?}"), || {
            let s = slices(admin, n, "web");
            let mut eps: Vec<Value> = s
                .iter()
                .filter_map(|s| s["endpoints"].as_array())
                .flatten()
                .cloned()
                .collect();
            eps.sort_by_key(|e| e["addresses"][0].as_str().unwrap_or("").to_string());
            let got = [eps.first()?["hints"].clone(), eps.get(1)?["hints"].clone()];
            (eps.len() == 2 && got == *want).then_some(())
        })
    };
    hints(&[json!({"forZones": [{"name": "zone-a"}]}), Value::Null]);
    let change = |td: Value| {
        eventually(LIMIT, "service update", || {
            let mut s = admin.get(&SERVICES, Some(n), "web").ok()?;
            s["spec"]["trafficDistribution"] = td.clone();
            admin.update(&SERVICES, &s).ok()
        });
    };
    change(json!("PreferSameNode"));
    hints(&[
        json!({"forZones": [{"name": "zone-a"}], "forNodes": [{"name": na}]}),
        Value::Null,
    ]);
    change(Value::Null);
    hints(&[Value::Null, Value::Null]);
}

scenarios! {
    traffic_distribution => traffic_distribution_hints,
    restart => restart_rewrites_nothing,
    mirroring => mirroring_selectorless_endpoints,
    slices_and_reuse => slices_and_reuse,
    packing_and_placeholder => packing_and_placeholder,
    hints => hints_for_topology_mode_auto,
}
