//! endpoints-controller scenarios, against the sandbox always and a real kube-apiserver with
//! `KCM_E2E_KUBECONFIG` (`real_*`; edgekcm needs `--use-service-account-credentials=true` in
//! `KCM_E2E_KCM_ARGS` there, as upstream runs it). There is no kubelet: the tests play it,
//! writing pod IPs, phase and readiness through `pods/status`.

use crate::common::*;
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{ENDPOINTS, EVENTS, PODS, SERVICES};
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const CONTROLLERS: &str = "--controllers=endpoint";
const SINCE: &str = "2024-05-01T10:00:00Z";

fn new_ns(t: &Target, prefix: &str) -> Ns {
    Ns::with_cleanup(t, prefix, &[SERVICES, PODS, ENDPOINTS])
}

fn service(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": {"team": "edge"}}, "spec": spec})
}

/// A pod labelled `app`, on `node-1`, whose one container serves `http` on `port`.
fn pod(name: &str, app: &str, port: i64, extra_spec: Value) -> Value {
    let mut spec = json!({"nodeName": "node-1", "containers": [{"name": "c",
        "image": "registry.k8s.io/pause:3.9",
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}]}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(e.clone());
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}}, "spec": spec})
}

/// Play kubelet: running with `ip`, ready or not.
fn set_status(admin: &Client, ns: &str, name: &str, ip: &str, ready: bool) {
    eventually(LIMIT, "pod status update", || {
        let mut p = admin.get(&PODS, Some(ns), name).ok()?;
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

fn run_pod(admin: &Client, ns: &str, p: Value, ip: &str, ready: bool) {
    let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
    admin.create(&PODS, Some(ns), &p).expect("create pod");
    set_status(admin, ns, &name, ip, ready);
}

fn endpoints(admin: &Client, ns: &str, name: &str) -> Option<Value> {
    admin.get(&ENDPOINTS, Some(ns), name).ok()
}

fn ips(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x["ip"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Wait until the Endpoints satisfy `f`.
fn wait_endpoints(
    admin: &Client,
    ns: &str,
    name: &str,
    what: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    eventually(LIMIT, what, || endpoints(admin, ns, name).filter(|e| f(e)))
}

fn ready_and_not_ready_with_named_ports(t: &Target) {
    let ns = new_ns(t, "ep-ready");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "ready", CONTROLLERS);
    admin
        .create(
            &SERVICES,
            Some(n),
            &service(
                "web",
                json!({"selector": {"app": "web"}, "ports": [
                    {"name": "http", "port": 80, "targetPort": "http"},
                    {"name": "metrics", "port": 9090, "targetPort": 9090, "appProtocol": "http"}]}),
            ),
        )
        .expect("service");
    run_pod(admin, n, pod("a", "web", 8080, json!({})), "10.1.0.1", true);
    run_pod(admin, n, pod("b", "web", 8081, json!({})), "10.1.0.2", true);
    run_pod(
        admin,
        n,
        pod("c", "web", 8080, json!({})),
        "10.1.0.3",
        false,
    );
    run_pod(
        admin,
        n,
        pod("other", "db", 8080, json!({})),
        "10.1.0.9",
        true,
    );
    let ep = wait_endpoints(admin, n, "web", "three pods in the Endpoints", |e| {
        let subs = e["subsets"].as_array().map_or(0, Vec::len);
        subs == 3
            && e["subsets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| ips(&s["addresses"]).len() + ips(&s["notReadyAddresses"]).len())
                .sum::<usize>()
                == 6
    });
    // v1.33 and later mark the Endpoints they write as theirs.
    assert_eq!(
        ep["metadata"]["labels"],
        json!({"team": "edge", "endpoints.kubernetes.io/managed-by": "endpoint-controller"})
    );
    assert!(
        ep["metadata"]["annotations"]["endpoints.kubernetes.io/last-change-trigger-time"]
            .is_string()
    );
    // Per resolved port its pods: 8080 (a ready, c not), 8081 (b), 9090 (all three).
    let subs = ep["subsets"].as_array().unwrap();
    let by_port = |p: i64| {
        subs.iter()
            .find(|s| {
                s["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x["port"] == p)
            })
            .unwrap_or_else(|| panic!("port {p} in {ep}"))
    };
    assert_eq!(ips(&by_port(8080)["addresses"]), ["10.1.0.1"]);
    assert_eq!(ips(&by_port(8080)["notReadyAddresses"]), ["10.1.0.3"]);
    assert_eq!(ips(&by_port(8081)["addresses"]), ["10.1.0.2"]);
    assert_eq!(ips(&by_port(9090)["addresses"]), ["10.1.0.1", "10.1.0.2"]);
    assert_eq!(ips(&by_port(9090)["notReadyAddresses"]), ["10.1.0.3"]);
    assert_eq!(by_port(9090)["ports"][0]["appProtocol"], "http");
    let a = &by_port(8080)["addresses"][0];
    assert_eq!(a["nodeName"], "node-1");
    assert_eq!(a["targetRef"]["kind"], "Pod");
    assert_eq!(a["targetRef"]["name"], "a");
    // c turns ready; a is deleted.
    set_status(admin, n, "c", "10.1.0.3", true);
    delete_pod_now(admin, n, "a").expect("delete pod");
    wait_endpoints(admin, n, "web", "c ready, a gone", |e| {
        let s = e["subsets"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        s.iter().all(|s| s.get("notReadyAddresses").is_none())
            && s.iter().any(|s| ips(&s["addresses"]) == ["10.1.0.3"])
            && !e.to_string().contains("10.1.0.1")
    });
    // Nothing written when nothing changed: the version stays.
    let before = endpoints(admin, n, "web").unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let after = endpoints(admin, n, "web").unwrap();
    assert_eq!(
        before["metadata"]["resourceVersion"],
        after["metadata"]["resourceVersion"]
    );
    // No failure Events.
    let evs = admin
        .list(&EVENTS, Some(n), &ListOptions::default())
        .expect("events")
        .items;
    assert!(
        evs.iter()
            .all(|e| e["source"]["component"] != "endpoint-controller"),
        "{evs:?}"
    );
}

fn headless_publish_not_ready_and_service_deletion(t: &Target) {
    let ns = new_ns(t, "ep-headless");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "headless", CONTROLLERS);
    admin
        .create(
            &SERVICES,
            Some(n),
            &service(
                "db",
                json!({"selector": {"app": "db"}, "clusterIP": "None",
                    "publishNotReadyAddresses": true}),
            ),
        )
        .expect("service");
    let host = json!({"hostname": "db-0", "subdomain": "db"});
    run_pod(admin, n, pod("db-0", "db", 5432, host), "10.2.0.1", false);
    run_pod(
        admin,
        n,
        pod("db-1", "db", 5432, json!({})),
        "10.2.0.2",
        true,
    );
    // A finished pod is left out. As kubelet does, its readiness goes with it: upstream
    // (and so edgekcm) does not look again at a pod whose phase alone changed.
    run_pod(
        admin,
        n,
        pod("db-done", "db", 5432, json!({})),
        "10.2.0.3",
        true,
    );
    eventually(LIMIT, "pod phase Succeeded", || {
        let mut p = admin.get(&PODS, Some(n), "db-done").ok()?;
        p["status"]["phase"] = json!("Succeeded");
        p["status"]["conditions"][0]["status"] = json!("False");
        admin.update_subresource(&PODS, &p, "status").ok()
    });
    let ep = wait_endpoints(admin, n, "db", "both pods ready (published)", |e| {
        ips(&e["subsets"][0]["addresses"]) == ["10.2.0.1", "10.2.0.2"]
    });
    assert_eq!(
        ep["metadata"]["labels"],
        json!({"team": "edge", "service.kubernetes.io/headless": "",
            "endpoints.kubernetes.io/managed-by": "endpoint-controller"})
    );
    assert!(ep["subsets"][0].get("ports").is_none());
    assert!(ep["subsets"][0].get("notReadyAddresses").is_none());
    assert_eq!(ep["subsets"][0]["addresses"][0]["hostname"], "db-0");
    assert!(ep["subsets"][0]["addresses"][1].get("hostname").is_none());
    // A selector-less Service's hand-made Endpoints are left alone.
    admin
        .create(
            &SERVICES,
            Some(n),
            &service("manual", json!({"ports": [{"port": 80}]})),
        )
        .expect("service");
    let manual = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "manual"},
        "subsets": [{"addresses": [{"ip": "192.0.2.1"}], "ports": [{"port": 80}]}]});
    let made = admin
        .create(&ENDPOINTS, Some(n), &manual)
        .expect("endpoints");
    // The Service goes: so do its Endpoints.
    admin
        .delete(&SERVICES, Some(n), "db", &Default::default())
        .expect("delete service");
    eventually(LIMIT, "Endpoints of the deleted Service gone", || {
        endpoints(admin, n, "db").is_none().then_some(())
    });
    let kept = endpoints(admin, n, "manual").expect("manual endpoints");
    assert_eq!(
        kept["metadata"]["resourceVersion"],
        made["metadata"]["resourceVersion"]
    );
}

fn over_capacity_truncates(t: &Target) {
    let ns = new_ns(t, "ep-cap");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let total = 1010usize;
    for i in 0..total {
        let ip = format!("10.3.{}.{}", i / 250, i % 250 + 1);
        run_pod(
            admin,
            n,
            pod(&format!("p{i}"), "big", 8080, json!({})),
            &ip,
            true,
        );
    }
    let _kcm = start_with(t, "cap", CONTROLLERS);
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
    let ep = wait_endpoints(admin, n, "big", "1000 addresses", |e| {
        ips(&e["subsets"][0]["addresses"]).len() == 1000
    });
    assert_eq!(
        ep["metadata"]["annotations"]["endpoints.kubernetes.io/over-capacity"],
        "truncated"
    );
}

scenarios! {
    ready_and_not_ready => ready_and_not_ready_with_named_ports,
    headless_and_deletion => headless_publish_not_ready_and_service_deletion,
    over_capacity => over_capacity_truncates,
}
