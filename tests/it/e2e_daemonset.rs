//! daemonset-controller scenarios, against the sandbox always and a real kube-apiserver with
//! `KCM_E2E_KUBECONFIG` (`real_*`). There is no scheduler or kubelet: daemon pods stay
//! unscheduled, meant for their node by the `matchFields metadata.name` affinity term the
//! controller writes, and the tests play kubelet by writing their status. Each scenario's
//! nodes carry a label of their own and its DaemonSets select on it, so nodes other tests
//! left behind do not count.

use crate::common::nodes::Nodes;
use crate::common::*;
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{Kind, CONTROLLERREVISIONS, DAEMONSETS, EVENTS, NODES, PODS};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);
const CONTROLLERS: &str = "--controllers=daemonset-controller";
const HASH: &str = "controller-revision-hash";

fn new_ns(t: &Target, prefix: &str) -> Ns {
    Ns::with_cleanup(t, prefix, &[DAEMONSETS, PODS, CONTROLLERREVISIONS])
}

fn ds_object(name: &str, pool: &str, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"nodeSelector": {"pool": pool},
                    "containers": [{"name": "c", "image": image}]}}}})
}

/// A ready node of `pool` with exactly these taints (kube-apiserver's TaintNodesByCondition
/// adds `node.kubernetes.io/not-ready:NoSchedule` to a new node, which the node lifecycle
/// controller would take away once it is Ready; the test does that here).
fn node(nodes: &mut Nodes, name: &str, pool: &str, taints: Value) {
    nodes.create(name, Some(true), taints.clone(), json!({}));
    label_node(&nodes.admin, name, &[("pool", pool)]);
    taint_node(&nodes.admin, name, taints);
}

fn label_node(admin: &Client, name: &str, labels: &[(&str, &str)]) {
    let m: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    admin
        .patch(
            &NODES,
            None,
            name,
            edgekcm::api::client::PatchType::Merge,
            &json!({"metadata": {"labels": m}}),
            None,
        )
        .expect("label node");
}

fn taint_node(admin: &Client, name: &str, taints: Value) {
    admin
        .patch(
            &NODES,
            None,
            name,
            edgekcm::api::client::PatchType::Merge,
            &json!({"spec": {"taints": taints}}),
            None,
        )
        .expect("taint node");
}

fn list(admin: &Client, kind: &Kind, ns: &str) -> Vec<Value> {
    admin
        .list(kind, Some(ns), &ListOptions::default())
        .expect("list")
        .items
}

/// The node a daemon pod is meant for (its affinity term).
fn target(p: &Value) -> String {
    p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Live pods of the DaemonSet `uid`, by target node.
fn pods_by_node(admin: &Client, ns: &str, uid: &str) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for p in list(admin, &PODS, ns) {
        let owned = edgekcm::obj::controller_ref(&p).is_some_and(|r| r.uid == uid);
        if owned && p["metadata"]["deletionTimestamp"].is_null() {
            out.entry(target(&p)).or_default().push(p);
        }
    }
    out
}

/// Wait until the DaemonSet has exactly one pod on each of `nodes` and no other.
fn wait_one_per_node(admin: &Client, ns: &str, uid: &str, nodes: &[&str]) -> Vec<Value> {
    eventually(LIMIT, &format!("one pod on each of {nodes:?}"), || {
        let m = pods_by_node(admin, ns, uid);
        let ok = m.len() == nodes.len()
            && nodes
                .iter()
                .all(|n| m.get(*n).is_some_and(|v| v.len() == 1));
        ok.then(|| m.into_values().flatten().collect())
    })
}

fn get(admin: &Client, kind: &Kind, ns: &str, name: &str) -> Value {
    admin.get(kind, Some(ns), name).expect("get")
}

fn wait_status(admin: &Client, ns: &str, name: &str, want: &[(&str, i64)]) -> Value {
    eventually(LIMIT, &format!("status {want:?}"), || {
        let o = get(admin, &DAEMONSETS, ns, name);
        let st = &o["status"];
        let ok = st["observedGeneration"] == o["metadata"]["generation"]
            && want.iter().all(|(f, v)| st[*f].as_i64().unwrap_or(0) == *v);
        ok.then_some(o)
    })
}

/// Play kubelet: the pod runs and is Ready.
fn set_ready(admin: &Client, ns: &str, name: &str) {
    eventually(LIMIT, "pod status update", || {
        let mut p = get(admin, &PODS, ns, name);
        p["status"]["phase"] = json!("Running");
        p["status"]["conditions"] = json!([
            {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
        ]);
        admin.update_subresource(&PODS, &p, "status").ok()
    });
}

fn name_of(p: &Value) -> String {
    p["metadata"]["name"].as_str().unwrap_or("").to_string()
}

fn messages(admin: &Client, ns: &str, about: &str, reason: &str) -> Vec<String> {
    list(admin, &EVENTS, ns)
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == about && e["reason"] == reason)
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

fn scenario_placement(t: &Target) {
    let _kcm = start_with(t, "ds-placement", CONTROLLERS);
    let ns = new_ns(t, "e2e-ds");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let pool = n;
    let mut nodes = Nodes::new(admin.clone());
    let (a, b, c) = (format!("{n}-a"), format!("{n}-b"), format!("{n}-c"));
    node(&mut nodes, &a, pool, json!([]));
    node(
        &mut nodes,
        &b,
        pool,
        json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
    );
    nodes.create(&c, Some(true), json!([]), json!({}));
    taint_node(admin, &c, json!([]));

    let ds = admin
        .create(
            &DAEMONSETS,
            Some(n),
            &ds_object("agent", pool, "registry.k8s.io/pause:3.9"),
        )
        .expect("create");
    let uid = ds["metadata"]["uid"].as_str().unwrap_or("").to_string();
    let pods = wait_one_per_node(admin, n, &uid, &[&a]);
    let p = &pods[0];
    let m = &p["metadata"];
    assert_eq!(m["generateName"], "agent-");
    assert_eq!(m["ownerReferences"][0]["kind"], "DaemonSet");
    assert_eq!(m["ownerReferences"][0]["blockOwnerDeletion"], true);
    let hash = m["labels"][HASH].as_str().expect("hash label").to_string();
    let keys: Vec<&str> = p["spec"]["tolerations"]
        .as_array()
        .expect("tolerations")
        .iter()
        .filter_map(|t| t["key"].as_str())
        .collect();
    for k in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/unschedulable",
    ] {
        assert!(keys.contains(&k), "{k} in {keys:?}");
    }
    let revs = list(admin, &CONTROLLERREVISIONS, n);
    assert_eq!(revs.len(), 1, "{revs:?}");
    assert_eq!(revs[0]["metadata"]["name"], format!("agent-{hash}"));
    assert_eq!(revs[0]["metadata"]["labels"][HASH], hash.as_str());
    assert_eq!(revs[0]["revision"], 1);
    assert_eq!(
        revs[0]["metadata"]["ownerReferences"][0]["uid"],
        uid.as_str()
    );

    wait_status(
        admin,
        n,
        "agent",
        &[
            ("desiredNumberScheduled", 1),
            ("currentNumberScheduled", 1),
            ("numberReady", 0),
            ("numberUnavailable", 1),
            ("updatedNumberScheduled", 1),
        ],
    );
    set_ready(admin, n, &name_of(p));
    wait_status(
        admin,
        n,
        "agent",
        &[
            ("numberReady", 1),
            ("numberAvailable", 1),
            ("numberUnavailable", 0),
        ],
    );
    let created = eventually(LIMIT, "the SuccessfulCreate Event", || {
        let m = messages(admin, n, "agent", "SuccessfulCreate");
        (!m.is_empty()).then_some(m)
    });
    assert_eq!(created, [format!("Created pod: {}", name_of(p))]);

    // A node that comes to fit gets a pod; a NoExecute taint takes it away again.
    label_node(admin, &c, &[("pool", pool)]);
    wait_one_per_node(admin, n, &uid, &[&a, &c]);
    wait_status(
        admin,
        n,
        "agent",
        &[("desiredNumberScheduled", 2), ("currentNumberScheduled", 2)],
    );
    taint_node(admin, &c, json!([{"key": "evict", "effect": "NoExecute"}]));
    wait_one_per_node(admin, n, &uid, &[&a]);
    wait_status(
        admin,
        n,
        "agent",
        &[("desiredNumberScheduled", 1), ("numberMisscheduled", 0)],
    );
    eventually(LIMIT, "the SuccessfulDelete Event", || {
        (!messages(admin, n, "agent", "SuccessfulDelete").is_empty()).then_some(())
    });
}

fn scenario_rolling_update(t: &Target) {
    let _kcm = start_with(t, "ds-rolling", CONTROLLERS);
    let ns = new_ns(t, "e2e-ds");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut nodes = Nodes::new(admin.clone());
    let names: Vec<String> = (0..3).map(|i| format!("{n}-{i}")).collect();
    for nm in &names {
        node(&mut nodes, nm, n, json!([]));
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let ds = admin
        .create(
            &DAEMONSETS,
            Some(n),
            &ds_object("agent", n, "registry.k8s.io/pause:3.9"),
        )
        .expect("create");
    let uid = ds["metadata"]["uid"].as_str().unwrap_or("").to_string();
    for p in wait_one_per_node(admin, n, &uid, &refs) {
        set_ready(admin, n, &name_of(&p));
    }
    wait_status(admin, n, "agent", &[("numberAvailable", 3)]);
    let old_hash = list(admin, &CONTROLLERREVISIONS, n)[0]["metadata"]["labels"][HASH]
        .as_str()
        .unwrap_or("")
        .to_string();

    eventually(LIMIT, "template update", || {
        let mut d = get(admin, &DAEMONSETS, n, "agent");
        d["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("registry.k8s.io/pause:3.10");
        admin.update(&DAEMONSETS, &d).ok()
    });
    // Play kubelet until every pod is new: never more than one node without an available pod.
    eventually(Duration::from_secs(60), "every pod updated", || {
        let m = pods_by_node(admin, n, &uid);
        let mut updated = 0;
        let mut unavailable = 0;
        for pods in m.values() {
            assert!(pods.len() <= 1, "no surge: {pods:?}");
            for p in pods {
                if p["metadata"]["labels"][HASH] != old_hash.as_str() {
                    updated += 1;
                    if p["status"]["phase"] != "Running" {
                        set_ready(admin, n, &name_of(p));
                    }
                }
            }
        }
        for nm in &refs {
            let ok = m
                .get(*nm)
                .is_some_and(|v| v.iter().any(|p| p["status"]["phase"] == "Running"));
            if !ok {
                unavailable += 1;
            }
        }
        assert!(
            unavailable <= 1,
            "maxUnavailable 1: {unavailable} nodes without a ready pod"
        );
        (updated == 3 && m.len() == 3).then_some(())
    });
    wait_status(
        admin,
        n,
        "agent",
        &[("updatedNumberScheduled", 3), ("numberAvailable", 3)],
    );
    let revs = list(admin, &CONTROLLERREVISIONS, n);
    assert_eq!(revs.len(), 2, "{revs:?}");
    let max = revs.iter().filter_map(|r| r["revision"].as_i64()).max();
    assert_eq!(max, Some(2));
}

/// Since v1.29-v1.34: an old pod that is not available is replaced at once and counts
/// against maxUnavailable. maxUnavailable 2, four nodes, one old pod not ready: the update
/// takes that one and one ready pod (v1.28 took two ready pods beside it).
fn scenario_unavailable_counts(t: &Target) {
    let _kcm = start_with(t, "ds-unavailable", CONTROLLERS);
    let ns = new_ns(t, "e2e-ds");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut nodes = Nodes::new(admin.clone());
    let names: Vec<String> = (0..4).map(|i| format!("{n}-{i}")).collect();
    for nm in &names {
        node(&mut nodes, nm, n, json!([]));
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut o = ds_object("agent", n, "registry.k8s.io/pause:3.9");
    o["spec"]["updateStrategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}});
    let ds = admin.create(&DAEMONSETS, Some(n), &o).expect("create");
    let uid = ds["metadata"]["uid"].as_str().unwrap_or("").to_string();
    let pods = wait_one_per_node(admin, n, &uid, &refs);
    let unready = pods
        .iter()
        .find(|p| target(p) == names[0])
        .map(name_of)
        .expect("pod on node 0");
    for p in &pods {
        if name_of(p) != unready {
            set_ready(admin, n, &name_of(p));
        }
    }
    wait_status(
        admin,
        n,
        "agent",
        &[("numberAvailable", 3), ("numberUnavailable", 1)],
    );
    let old_hash = pods[0]["metadata"]["labels"][HASH]
        .as_str()
        .unwrap_or("")
        .to_string();
    eventually(LIMIT, "template update", || {
        let mut d = get(admin, &DAEMONSETS, n, "agent");
        d["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("registry.k8s.io/pause:3.10");
        admin.update(&DAEMONSETS, &d).ok()
    });
    let new_on = |m: &BTreeMap<String, Vec<Value>>| -> Vec<String> {
        m.iter()
            .filter(|(_, ps)| {
                ps.iter()
                    .any(|p| p["metadata"]["labels"][HASH] != old_hash.as_str())
            })
            .map(|(node, _)| node.clone())
            .collect()
    };
    let m = eventually(LIMIT, "new pods on two nodes", || {
        let m = pods_by_node(admin, n, &uid);
        (new_on(&m).len() == 2).then_some(m)
    });
    assert!(
        new_on(&m).contains(&names[0]),
        "the unready pod's node first: {m:?}"
    );
    // New pods are never made ready here: nothing more may go.
    std::thread::sleep(Duration::from_secs(3));
    let m = pods_by_node(admin, n, &uid);
    assert_eq!(new_on(&m).len(), 2, "{m:?}");
    let old_ready = m
        .values()
        .flatten()
        .filter(|p| p["metadata"]["labels"][HASH] == old_hash.as_str())
        .filter(|p| p["status"]["phase"] == "Running")
        .count();
    assert_eq!(old_ready, 2, "two ready old pods stay: {m:?}");
    assert_eq!(messages(admin, n, "agent", "SuccessfulDelete").len(), 2);
}

fn scenario_failed_pod(t: &Target) {
    let _kcm = start_with(t, "ds-failed", CONTROLLERS);
    let ns = new_ns(t, "e2e-ds");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut nodes = Nodes::new(admin.clone());
    let a = format!("{n}-a");
    node(&mut nodes, &a, n, json!([]));
    let ds = admin
        .create(
            &DAEMONSETS,
            Some(n),
            &ds_object("agent", n, "registry.k8s.io/pause:3.9"),
        )
        .expect("create");
    let uid = ds["metadata"]["uid"].as_str().unwrap_or("").to_string();
    let first = name_of(&wait_one_per_node(admin, n, &uid, &[&a])[0]);
    eventually(LIMIT, "pod failed", || {
        let mut p = get(admin, &PODS, n, &first);
        p["status"]["phase"] = json!("Failed");
        admin.update_subresource(&PODS, &p, "status").ok()
    });
    eventually(LIMIT, "a replacement pod", || {
        let pods = wait_one_per_node(admin, n, &uid, &[&a]);
        (name_of(&pods[0]) != first).then_some(())
    });
    let msgs = messages(admin, n, "agent", "FailedDaemonPod");
    assert_eq!(
        msgs,
        [format!(
            "Found failed daemon pod {n}/{first} on node {a}, will try to kill it"
        )]
    );
}

/// Nodes added while the controller cannot reach the apiserver (sandbox: it stops listening
/// and the watch history expires, so the watches end in 410 and a re-list; real: the
/// apiserver is stopped, started, and the nodes added as it comes back): each new node gets
/// one pod, no node gets two.
fn scenario_restart_nodes_added(t: &Target) {
    let mut kcm = start_with(t, "ds-restart", CONTROLLERS);
    let ns = new_ns(t, "e2e-ds");
    let n = ns.name.clone();
    let admin = ns.admin.clone();
    let mut nodes = Nodes::new(admin.clone());
    let names: Vec<String> = (0..4).map(|i| format!("{n}-{i}")).collect();
    for nm in &names[..2] {
        node(&mut nodes, nm, &n, json!([]));
    }
    let ds = admin
        .create(
            &DAEMONSETS,
            Some(&n),
            &ds_object("agent", &n, "registry.k8s.io/pause:3.9"),
        )
        .expect("create");
    let uid = ds["metadata"]["uid"].as_str().unwrap_or("").to_string();
    wait_one_per_node(&admin, &n, &uid, &[&names[0], &names[1]]);
    let sh = |var: &str| {
        let c = std::env::var(var).unwrap_or_else(|_| panic!("the restart needs {var}"));
        let ok = std::process::Command::new("sh").arg("-c").arg(&c).status();
        assert!(matches!(ok, Ok(s) if s.success()), "command failed: {c}");
    };
    let added = |nodes: &mut Nodes| {
        for nm in &names[2..] {
            node(nodes, nm, &n, json!([]));
        }
    };
    match t.sandbox() {
        Some(sb) => {
            sb.stop_listening();
            for nm in &names[2..] {
                sb.create(
                    &NODES,
                    json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": nm, "labels": {"pool": n}}}),
                )
                .expect("node");
                nodes.names.push(nm.clone());
            }
            sb.faults().expire_history();
            std::thread::sleep(Duration::from_secs(2));
            sb.try_resume_listening().expect("listen again");
        }
        None => {
            sh("KCM_E2E_APISERVER_STOP");
            sh("KCM_E2E_APISERVER_START");
            eventually(Duration::from_secs(60), "the apiserver back", || {
                admin.get(&NODES, None, &names[0]).ok()
            });
            added(&mut nodes);
            let _ = &mut kcm;
        }
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    wait_one_per_node(&admin, &n, &uid, &refs);
    wait_status(
        &admin,
        &n,
        "agent",
        &[("desiredNumberScheduled", 4), ("currentNumberScheduled", 4)],
    );
    // Settled: still one each a moment later.
    std::thread::sleep(Duration::from_secs(2));
    wait_one_per_node(&admin, &n, &uid, &refs);
    // Events are sent at low priority, after the writes they report: wait for them.
    let created = eventually(LIMIT, "four SuccessfulCreate Events", || {
        let m = messages(&admin, &n, "agent", "SuccessfulCreate");
        (m.len() >= 4).then_some(m)
    });
    assert_eq!(created.len(), 4, "{created:?}");
    assert!(kcm.exited().is_none(), "edgekcm exited");
}

scenarios! {
    placement => scenario_placement,
    rolling_update => scenario_rolling_update,
    failed_pod => scenario_failed_pod,
    restart_nodes_added => scenario_restart_nodes_added,
    rolling_update_unavailable_counts => scenario_unavailable_counts,
}
