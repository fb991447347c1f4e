//! node-lifecycle-controller scenarios, against the sandbox always and a real kube-apiserver
//! with `KCM_E2E_KUBECONFIG` (`real_*`, edgekcm with `--use-service-account-credentials`).
//! The evictions the node lifecycle controller's taints lead to are taint-eviction-controller's
//! (run beside it where a scenario looks at them); its scenarios use the functions here too.
//! There is no kubelet: the tests write node and pod status and renew the nodes' Leases in
//! `kube-node-lease` themselves. Two nodes each time (one node going dark alone would be a
//! zone in full disruption, where upstream taints nothing); short grace periods via flags.

use crate::common::nodes::*;
use crate::common::*;
use edgekcm::api::client::{Client, ListOptions, PatchType};
use edgekcm::api::resources::{
    ENDPOINTS, ENDPOINTSLICES, EVENTS, LEASES, NAMESPACES, NODES, PODS, SERVICES,
};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

const LEASE_NS: &str = "kube-node-lease";

/// Plays the kubelets' lease heartbeats: every 500 ms each node of `alive` has its Lease
/// renewed. Stops when dropped.
pub(crate) struct Heartbeats {
    alive: Arc<Mutex<BTreeSet<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    admin: Client,
    made: Vec<String>,
}

fn now_micro() -> String {
    edgekcm::compat::timefmt::rfc3339_micro(SystemTime::now())
}

impl Heartbeats {
    pub(crate) fn new(admin: &Client) -> Heartbeats {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NS}});
        let _ = admin.create(&NAMESPACES, None, &ns);
        let alive: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s, c) = (alive.clone(), stop.clone(), admin.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let names: Vec<String> = a.lock().unwrap().iter().cloned().collect();
                for n in names {
                    let patch = json!({"spec": {"renewTime": now_micro()}});
                    let _ = c.patch(&LEASES, Some(LEASE_NS), &n, PatchType::Merge, &patch, None);
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        Heartbeats {
            alive,
            stop,
            thread: Some(thread),
            admin: admin.clone(),
            made: Vec::new(),
        }
    }

    pub(crate) fn start(&mut self, node: &str) {
        let l = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": node, "namespace": LEASE_NS},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": now_micro()}});
        self.admin
            .create(&LEASES, Some(LEASE_NS), &l)
            .expect("create lease");
        self.made.push(node.to_string());
        self.alive.lock().unwrap().insert(node.to_string());
    }

    pub(crate) fn resume(&self, node: &str) {
        self.alive.lock().unwrap().insert(node.to_string());
    }

    pub(crate) fn stop(&self, node: &str) {
        self.alive.lock().unwrap().remove(node);
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        for n in &self.made {
            let _ = self
                .admin
                .delete(&LEASES, Some(LEASE_NS), n, &Default::default());
        }
    }
}

/// A running pod on `node` with a Ready condition, tolerating `tolerations`.
pub(crate) fn running_pod(admin: &Client, ns: &str, name: &str, node: &str, tolerations: Value) {
    running_pod_with(admin, ns, name, node, tolerations, json!({}), None);
}

/// As `running_pod`, with `labels` and a pod IP.
pub(crate) fn running_pod_with(
    admin: &Client,
    ns: &str,
    name: &str,
    node: &str,
    tolerations: Value,
    labels: Value,
    ip: Option<&str>,
) {
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "tolerations": tolerations,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}});
    admin
        .create(&edgekcm::api::resources::PODS, Some(ns), &p)
        .expect("create pod");
    let mut p = get_pod(admin, ns, name).expect("pod");
    p["status"]["phase"] = json!("Running");
    p["status"]["conditions"] = json!([
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]);
    if let Some(ip) = ip {
        p["status"]["podIP"] = json!(ip);
        p["status"]["podIPs"] = json!([{"ip": ip}]);
    }
    admin
        .update_subresource(&edgekcm::api::resources::PODS, &p, "status")
        .expect("pod status");
}

pub(crate) fn unreachable_for(secs: Option<i64>) -> Value {
    let mut t = json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"});
    if let Some(s) = secs {
        t["tolerationSeconds"] = json!(s);
    }
    json!([t])
}

/// A ready node whose status the test wrote a moment ago.
pub(crate) fn ready_node(nodes: &mut Nodes, name: &str) {
    let mut n = nodes.create(name, None, json!([]), json!({}));
    let now = edgekcm::compat::timefmt::rfc3339(SystemTime::now());
    n["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now}]);
    nodes
        .admin
        .update_subresource(&NODES, &n, "status")
        .expect("node status");
}

pub(crate) fn node(admin: &Client, name: &str) -> Value {
    admin.get(&NODES, None, name).expect("node")
}

pub(crate) fn condition<'a>(o: &'a Value, type_: &str) -> Option<&'a Value> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

pub(crate) fn taint_keys(n: &Value) -> Vec<String> {
    let mut v: Vec<String> = n["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            format!(
                "{}:{}",
                t["key"].as_str().unwrap_or(""),
                t["effect"].as_str().unwrap_or("")
            )
        })
        .collect();
    v.sort();
    v
}

/// Gone, or marked for deletion (a graceful deletion waits for the kubelet there is not).
pub(crate) fn deleted(admin: &Client, ns: &str, name: &str) -> Option<Option<Value>> {
    match get_pod(admin, ns, name) {
        None => Some(None),
        Some(p) if p["metadata"]["deletionTimestamp"].is_string() => Some(Some(p)),
        Some(_) => None,
    }
}

pub(crate) fn events(admin: &Client, ns: &str, reason: &str, name: &str) -> Vec<Value> {
    admin
        .list(&EVENTS, Some(ns), &ListOptions::default())
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["reason"] == reason && e["involvedObject"]["name"] == name)
        .collect()
}

/// Both controllers: node-lifecycle-controller taints, taint-eviction-controller evicts.
const BOTH: &str = "--controllers=node-lifecycle-controller,taint-eviction-controller";

fn flags(grace: &str) -> Vec<String> {
    vec![
        BOTH.into(),
        "--node-monitor-period=1s".into(),
        format!("--node-monitor-grace-period={grace}"),
        "--node-eviction-rate=10".into(),
    ]
}

fn start(t: &Target, tag: &str, grace: &str) -> Kcm {
    let f = flags(grace);
    let f: Vec<&str> = f.iter().map(String::as_str).collect();
    Kcm::start(t, tag, &f)
}

/// A fresh namespace (its pods deleted at the end) and two ready nodes named from
/// `prefixes`, their leases renewed.
pub(crate) struct TwoNodes {
    pub(crate) beats: Heartbeats,
    _nodes: Nodes,
    _pods: PodsGone,
    pub(crate) ns: Ns,
    pub(crate) names: [String; 2],
}

impl TwoNodes {
    pub(crate) fn new(t: &Target, ns_prefix: &str, prefixes: [&str; 2]) -> TwoNodes {
        let ns = Ns::with_cleanup(t, ns_prefix, &[]);
        let pods = PodsGone {
            admin: ns.admin.clone(),
            ns: ns.name.clone(),
        };
        let mut nodes = Nodes::new(ns.admin.clone());
        let mut beats = Heartbeats::new(&ns.admin);
        let names = prefixes.map(unique);
        for name in &names {
            ready_node(&mut nodes, name);
            beats.start(name);
        }
        TwoNodes {
            beats,
            _nodes: nodes,
            _pods: pods,
            ns,
            names,
        }
    }
}

/// A node whose lease stops being renewed goes Unknown, is tainted unreachable (NoSchedule
/// and NoExecute), its pods are marked not ready; a pod tolerating it for 0 s is deleted at
/// once (with `DisruptionTarget`), one tolerating for 6 s after 6 s, one tolerating for ever
/// stays; the other node and its pods are left alone. Back to life, the taints go.
fn scenario_dark_node_evicts_its_pods(t: &Target) {
    let two = TwoNodes::new(t, "e2e-nlc", ["alive", "dark"]);
    let (admin, n, beats) = (&two.ns.admin, two.ns.name.as_str(), &two.beats);
    let [alive, dark] = two.names.clone();
    // A real apiserver gives pods without them 300 s tolerations of both NoExecute taints
    // (DefaultTolerationSeconds): this one tolerates for zero seconds, which is at once.
    running_pod(admin, n, "plain", &dark, unreachable_for(Some(0)));
    running_pod(admin, n, "for6", &dark, unreachable_for(Some(6)));
    running_pod(admin, n, "forever", &dark, unreachable_for(None));
    running_pod(admin, n, "other", &alive, json!([]));
    let _kcm = start(t, "nlc-dark", "5s");
    eventually(Duration::from_secs(20), "RegisteredNode", || {
        (!events(admin, "default", "RegisteredNode", &dark).is_empty()).then_some(())
    });
    // Alive for longer than the grace period while the lease is renewed.
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(
        condition(&node(admin, &dark), "Ready").unwrap()["status"],
        "True"
    );

    beats.stop(&dark);
    let stopped = Instant::now();
    let n_dark = eventually(Duration::from_secs(20), "Ready Unknown", || {
        let nd = node(admin, &dark);
        (condition(&nd, "Ready")?["status"] == "Unknown").then_some(nd)
    });
    let ready = condition(&n_dark, "Ready").unwrap();
    assert_eq!(ready["reason"], "NodeStatusUnknown");
    assert_eq!(ready["message"], "Kubelet stopped posting node status.");
    assert_eq!(
        ready["lastHeartbeatTime"],
        condition(&n_dark, "Ready").unwrap()["lastHeartbeatTime"]
    );
    for c in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        let c = condition(&n_dark, c).expect(c);
        assert_eq!(c["status"], "Unknown");
        assert_eq!(c["reason"], "NodeStatusNeverUpdated");
    }
    assert!(
        stopped.elapsed() >= Duration::from_secs(4),
        "not before the grace period"
    );
    let tainted = eventually(Duration::from_secs(20), "unreachable taints", || {
        let nd = node(admin, &dark);
        (taint_keys(&nd)
            == [
                "node.kubernetes.io/unreachable:NoExecute",
                "node.kubernetes.io/unreachable:NoSchedule",
            ])
        .then_some(nd)
    });
    for tt in tainted["spec"]["taints"].as_array().unwrap() {
        assert!(tt["timeAdded"].is_string(), "{tt}");
    }
    let tainted_at = Instant::now();
    // Pods marked not ready, with the Event.
    eventually(Duration::from_secs(10), "forever not ready", || {
        let p = get_pod(admin, n, "forever")?;
        (condition(&p, "Ready")?["status"] == "False").then_some(())
    });
    eventually(Duration::from_secs(10), "NodeNotReady events", || {
        let pod_ev = events(admin, n, "NodeNotReady", "forever");
        let node_ev = events(admin, "default", "NodeNotReady", &dark);
        (!pod_ev.is_empty() && !node_ev.is_empty()).then_some((pod_ev, node_ev))
    });
    let plain = eventually(Duration::from_secs(10), "plain deleted", || {
        deleted(admin, n, "plain")
    });
    if let Some(p) = plain {
        let c = condition(&p, "DisruptionTarget").expect("DisruptionTarget");
        assert_eq!(c["status"], "True");
        // PodObservedGenerationTracking (GA in 1.35): the pod's generation, where it has one.
        if let Some(g) = p["metadata"]["generation"].as_i64() {
            // The generation it was read at; a graceful deletion moves it on afterwards.
            let seen = c["observedGeneration"]
                .as_i64()
                .expect("observedGeneration");
            assert!((1..=g).contains(&seen), "{c} at generation {g}");
        }
        assert_eq!(c["reason"], "DeletionByTaintManager");
        assert_eq!(
            c["message"],
            "Taint manager: deleting due to NoExecute taint"
        );
    }
    let ev = eventually(Duration::from_secs(10), "TaintManagerEviction", || {
        let e = events(admin, n, "TaintManagerEviction", "plain");
        (!e.is_empty()).then_some(e)
    });
    assert_eq!(
        ev[0]["message"],
        format!("Marking for deletion Pod {n}/plain")
    );
    assert_eq!(ev[0]["source"]["component"], "taint-eviction-controller");
    assert!(
        deleted(admin, n, "for6").is_none(),
        "for6 is tolerated for 6 s"
    );
    eventually(Duration::from_secs(15), "for6 deleted", || {
        deleted(admin, n, "for6")
    });
    assert!(
        tainted_at.elapsed() >= Duration::from_secs(5),
        "for6 went early"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(deleted(admin, n, "forever").is_none(), "forever stays");
    assert!(
        deleted(admin, n, "other").is_none(),
        "other node's pod stays"
    );
    let a = node(admin, &alive);
    assert_eq!(condition(&a, "Ready").unwrap()["status"], "True");
    assert!(taint_keys(&a).is_empty(), "{:?}", taint_keys(&a));
    let other = get_pod(admin, n, "other").unwrap();
    assert_eq!(condition(&other, "Ready").unwrap()["status"], "True");

    // Back: the kubelet posts Ready again and renews its lease.
    let mut nd = node(admin, &dark);
    let now = edgekcm::compat::timefmt::rfc3339(SystemTime::now());
    for c in nd["status"]["conditions"].as_array_mut().unwrap() {
        if c["type"] == "Ready" {
            *c = json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": now, "lastTransitionTime": now});
        }
    }
    admin
        .update_subresource(&NODES, &nd, "status")
        .expect("node status");
    beats.resume(&dark);
    eventually(Duration::from_secs(15), "taints removed", || {
        taint_keys(&node(admin, &dark)).is_empty().then_some(())
    });
}

/// The pods the controller marks not ready on a dark node leave their Services' ready
/// endpoints: endpoint and endpointslice controllers in the same edgekcm hear of the pod
/// status another of its controllers wrote.
fn scenario_dark_node_pods_leave_ready_endpoints(t: &Target) {
    let two = TwoNodes::new(t, "e2e-nlc-ep", ["alive", "dark"]);
    let (admin, n, beats) = (&two.ns.admin, two.ns.name.as_str(), &two.beats);
    let [alive, dark] = two.names.clone();
    let web = json!({"app": "web"});
    running_pod_with(
        admin,
        n,
        "on-dark",
        &dark,
        unreachable_for(None),
        web.clone(),
        Some("10.9.0.1"),
    );
    running_pod_with(
        admin,
        n,
        "on-alive",
        &alive,
        json!([]),
        web,
        Some("10.9.0.2"),
    );
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "protocol": "TCP"}]}});
    admin.create(&SERVICES, Some(n), &svc).expect("service");
    let mut f = flags("5s");
    f[0] = "--controllers=node-lifecycle-controller,endpoint,endpointslice".into();
    let f: Vec<&str> = f.iter().map(String::as_str).collect();
    let _kcm = Kcm::start(t, "nlc-endpoints", &f);
    // (ready IPs, not-ready IPs) of the Endpoints and of the slices.
    let endpoints = || {
        let e = admin.get(&ENDPOINTS, Some(n), "web").ok()?;
        let ips = |field: &str| -> Vec<String> {
            let mut v: Vec<String> = e["subsets"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s[field].as_array().cloned().unwrap_or_default())
                .filter_map(|a| a["ip"].as_str().map(str::to_string))
                .collect();
            v.sort();
            v
        };
        Some((ips("addresses"), ips("notReadyAddresses")))
    };
    let slices = || {
        let l = admin
            .list(
                &ENDPOINTSLICES,
                Some(n),
                &ListOptions {
                    label_selector: Some("kubernetes.io/service-name=web".into()),
                    ..Default::default()
                },
            )
            .ok()?;
        let (mut ready, mut not) = (vec![], vec![]);
        for e in l
            .items
            .iter()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        {
            let ip = e["addresses"][0].as_str().unwrap_or("").to_string();
            if e["conditions"]["ready"] == true {
                ready.push(ip);
            } else {
                not.push(ip);
            }
        }
        ready.sort();
        not.sort();
        Some((ready, not))
    };
    let both_ready = (vec!["10.9.0.1".to_string(), "10.9.0.2".into()], vec![]);
    eventually(
        Duration::from_secs(20),
        "both pods ready in Endpoints and slices",
        || (endpoints()? == both_ready && slices()? == both_ready).then_some(()),
    );
    beats.stop(&dark);
    eventually(Duration::from_secs(20), "on-dark marked not ready", || {
        let p = get_pod(admin, n, "on-dark")?;
        (condition(&p, "Ready")?["status"] == "False").then_some(())
    });
    let split = (vec!["10.9.0.2".to_string()], vec!["10.9.0.1".to_string()]);
    eventually(
        Duration::from_secs(10),
        "on-dark not ready in Endpoints and slices",
        || (endpoints()? == split && slices()? == split).then_some(()),
    );
    let _ = admin.delete(&PODS, Some(n), "on-dark", &Default::default());
}

/// A node not ready (False) gets the not-ready taints; pressure conditions and
/// `spec.unschedulable` get their NoSchedule taints; the beta OS label follows the stable one.
fn scenario_conditions_become_taints(t: &Target) {
    let admin = t.admin();
    let mut nodes = Nodes::new(admin.clone());
    let mut beats = Heartbeats::new(&admin);
    let (a, b) = (unique("calm"), unique("sick"));
    for name in [&a, &b] {
        ready_node(&mut nodes, name);
        beats.start(name);
    }
    let _kcm = start(t, "nlc-cond", "30s");
    let mut n = node(&admin, &b);
    n["status"]["conditions"] = json!([
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "lastHeartbeatTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"},
        {"type": "MemoryPressure", "status": "True", "lastHeartbeatTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"}]);
    admin
        .update_subresource(&NODES, &n, "status")
        .expect("status");
    let patch = json!({"spec": {"unschedulable": true}, "metadata": {"labels": {"kubernetes.io/os": "linux"}}});
    admin
        .patch(&NODES, None, &b, PatchType::Merge, &patch, None)
        .expect("patch");
    let got = eventually(Duration::from_secs(20), "taints", || {
        let nd = node(&admin, &b);
        (taint_keys(&nd)
            == [
                "node.kubernetes.io/memory-pressure:NoSchedule",
                "node.kubernetes.io/not-ready:NoExecute",
                "node.kubernetes.io/not-ready:NoSchedule",
                "node.kubernetes.io/unschedulable:NoSchedule",
            ])
        .then_some(nd)
    });
    eventually(Duration::from_secs(10), "beta label", || {
        (node(&admin, &b)["metadata"]["labels"]["beta.kubernetes.io/os"] == "linux").then_some(())
    });
    assert_eq!(
        condition(&got, "Ready").unwrap()["status"],
        "False",
        "not rewritten"
    );
    assert!(taint_keys(&node(&admin, &a)).is_empty());
}

/// The apiserver restarts while a pod's toleration runs: it is still deleted when its time
/// is over, and the pod tolerating for ever stays.
fn scenario_restart_loses_nothing(t: &Target) {
    let two = TwoNodes::new(t, "e2e-nlc-rs", ["alive", "dark"]);
    let (admin, n, beats) = (&two.ns.admin, two.ns.name.as_str(), &two.beats);
    let [_, dark] = two.names.clone();
    running_pod(admin, n, "for25", &dark, unreachable_for(Some(25)));
    running_pod(admin, n, "forever", &dark, unreachable_for(None));
    let _kcm = start(t, "nlc-restart", "30s");
    std::thread::sleep(Duration::from_secs(3));
    beats.stop(&dark);
    eventually(Duration::from_secs(60), "unreachable taint", || {
        taint_keys(&node(admin, &dark))
            .contains(&"node.kubernetes.io/unreachable:NoExecute".to_string())
            .then_some(())
    });
    let tainted = Instant::now();
    outage(t);
    eventually(Duration::from_secs(60), "for25 deleted", || {
        deleted(admin, n, "for25")
    });
    assert!(
        tainted.elapsed() >= Duration::from_secs(24),
        "for25 went early"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(deleted(admin, n, "forever").is_none());
}

/// node-lifecycle-controller alone (taint-eviction-controller off, as `--controllers` may
/// have it since 1.29): a dark node is tainted and its pods marked not ready, but a pod that
/// does not tolerate the taint at all stays.
fn scenario_tainting_without_eviction(t: &Target) {
    let two = TwoNodes::new(t, "e2e-nlc-only", ["alive", "dark"]);
    let (admin, n, beats) = (&two.ns.admin, two.ns.name.as_str(), &two.beats);
    let [_, dark] = two.names.clone();
    running_pod(admin, n, "plain", &dark, unreachable_for(Some(0)));
    let mut f = flags("5s");
    f[0] = "--controllers=node-lifecycle-controller".into();
    let f: Vec<&str> = f.iter().map(String::as_str).collect();
    let _kcm = Kcm::start(t, "nlc-only", &f);
    std::thread::sleep(Duration::from_secs(3));
    beats.stop(&dark);
    eventually(Duration::from_secs(30), "unreachable taints", || {
        taint_keys(&node(admin, &dark))
            .contains(&"node.kubernetes.io/unreachable:NoExecute".to_string())
            .then_some(())
    });
    eventually(Duration::from_secs(10), "plain not ready", || {
        let p = get_pod(admin, n, "plain")?;
        (condition(&p, "Ready")?["status"] == "False").then_some(())
    });
    std::thread::sleep(Duration::from_secs(4));
    let p = get_pod(admin, n, "plain").expect("plain stays");
    assert!(p["metadata"]["deletionTimestamp"].is_null(), "not evicted");
    assert!(condition(&p, "DisruptionTarget").is_none());
    assert!(events(admin, n, "TaintManagerEviction", "plain").is_empty());
}

/// NodeControllerLeaseCircuitBreaker (on since v1.37): the Lease cache falls behind (its list
/// and watch fail while the kubelets go on renewing), so the cached Leases look expired. With
/// the gate, the live Lease is read first and no node is judged; without it, both nodes are
/// wrongly marked Unknown. The sandbox only: a real apiserver's watch cannot be held back.
fn lease_cache_behind(gate: bool) -> Vec<String> {
    let t = crate::common::sandbox();
    let two = TwoNodes::new(&t, "e2e-nlc-cb", ["cb-a", "cb-b"]);
    let admin = &two.ns.admin;
    let mut f = flags("4s");
    f[0] = "--controllers=node-lifecycle-controller".into();
    f.push(format!(
        "--feature-gates=NodeControllerLeaseCircuitBreaker={gate}"
    ));
    let f: Vec<&str> = f.iter().map(String::as_str).collect();
    let _kcm = Kcm::start(&t, "nlc-cb", &f);
    std::thread::sleep(Duration::from_secs(3));
    let sb = t.sandbox().expect("sandbox");
    // Cluster-wide list and watch paths only; the heartbeats' and the live reads' paths are
    // namespaced.
    sb.faults().fail_for(
        Duration::from_secs(12),
        500,
        Some("coordination.k8s.io/v1/leases"),
    );
    sb.faults().drop_watches();
    std::thread::sleep(Duration::from_secs(10));
    two.names
        .iter()
        .map(|n| {
            let nd = node(admin, n);
            condition(&nd, "Ready").map_or("none".into(), |c| {
                c["status"].as_str().unwrap_or("").to_string()
            })
        })
        .collect()
}

#[test]
fn lease_cache_behind_judges_no_node() {
    assert_eq!(lease_cache_behind(true), ["True", "True"]);
}

#[test]
fn lease_cache_behind_without_the_breaker_marks_nodes_unknown() {
    assert_eq!(lease_cache_behind(false), ["Unknown", "Unknown"]);
}

/// The API server away for a while: the sandbox stops listening; a real one is restarted
/// with `KCM_E2E_APISERVER_RESTART`.
pub(crate) fn outage(t: &Target) {
    match t.sandbox() {
        Some(sb) => {
            sb.stop_listening();
            std::thread::sleep(Duration::from_secs(8));
            sb.resume_listening();
        }
        None => {
            let cmd =
                std::env::var("KCM_E2E_APISERVER_RESTART").expect("KCM_E2E_APISERVER_RESTART");
            let st = std::process::Command::new("sh")
                .args(["-c", &cmd])
                .status()
                .expect("restart");
            assert!(st.success(), "restart command failed: {st}");
        }
    }
}

scenarios! {
    dark_node_evicts_its_pods => scenario_dark_node_evicts_its_pods,
    dark_node_pods_leave_ready_endpoints => scenario_dark_node_pods_leave_ready_endpoints,
    conditions_become_taints => scenario_conditions_become_taints,
    restart_loses_nothing => scenario_restart_loses_nothing,
    tainting_without_eviction => scenario_tainting_without_eviction,
}
