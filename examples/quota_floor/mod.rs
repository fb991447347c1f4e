//! The floor of the quota workload's requests: a bare client, edgekcm's API client and nothing
//! else (no cache, queue, controller, evaluator or Event correlation), doing the requests the
//! four controllers of the bench have to do and reading the same watches. One client per
//! controller, each with QPS 20 / burst 30 as both managers give each controller identity:
//! - deployment: for a new Deployment its ReplicaSet, a `ScalingReplicaSet` Event and
//!   `DEPLOYMENT_STATUS_WRITES` status writes;
//! - replicaset: for a new ReplicaSet its pods, a `SuccessfulCreate` Event each and
//!   `RS_STATUS_WRITES` status writes;
//! - garbage collector: the ReplicaSets of a deleted Deployment deleted, then the pods of a
//!   deleted ReplicaSet, each read live first and its owner looked up once;
//! - resourcequota: once objects are deleted, the namespace's quota status written with the
//!   usage left (namespaces waiting while a write is under way are written once after it,
//!   as a work queue coalesces them), and a new quota's first usage.
//!
//! Deployments, ReplicaSets and quotas are decoded whole, pods with the fields the managers'
//! pod cache keeps. Its CPU seconds are what these requests cost before any controller
//! logic. Run as a child process of the bench (`--floor`), so its CPU and RSS are measured as
//! a manager's.

use crate::benchkit::Res;
pub use crate::benchkit::{floor_manager as manager, FLOOR_CHILD_FLAG as CHILD_FLAG};
use edgekcm::api::client::{Client, DeleteOptions};
use edgekcm::api::kubeconfig;
use edgekcm::api::resources::{Kind, DEPLOYMENTS, EVENTS, PODS, REPLICASETS, RESOURCEQUOTAS};
use edgekcm::api::watch::EventType;
use edgekcm::compat::quantity::Quantity;
use edgekcm::obj::At;
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};

/// Status writes per Deployment and per ReplicaSet: about what edgekcm makes in the bench
/// (apiserver audit log, 300 x 5 workload: 545 and 300; upstream 697 and 600, and 302
/// conflicts on Deployments).
const DEPLOYMENT_STATUS_WRITES: usize = 2;
const RS_STATUS_WRITES: usize = 1;
/// The pod fields the managers' pod cache keeps (replica set and quota controllers).
const POD_FIELDS: &[&str] = &[
    "/spec/nodeName",
    "/status",
    "/spec/containers/*/resources",
    "/spec/initContainers/*/resources",
    "/spec/initContainers/*/restartPolicy",
    "/spec/overhead",
    "/spec/activeDeadlineSeconds",
    "/spec/priorityClassName",
    "/spec/affinity/podAffinity",
    "/spec/affinity/podAntiAffinity",
];

fn s(v: &Value, p: &str) -> String {
    v.at(p).and_then(Value::as_str).unwrap_or("").to_string()
}

fn now() -> String {
    edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now())
}

fn event(kind: &str, api: &str, o: &Value, reason: &str, message: String, by: &str) -> Value {
    let m = &o["metadata"];
    let t = now();
    json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": format!("{}.", m["name"].as_str().unwrap_or("")),
            "namespace": m["namespace"]},
        "involvedObject": {"kind": kind, "apiVersion": api, "namespace": m["namespace"],
            "name": m["name"], "uid": m["uid"], "resourceVersion": m["resourceVersion"]},
        "reason": reason, "message": message, "source": {"component": by},
        "firstTimestamp": t, "lastTimestamp": t, "count": 1, "type": "Normal",
        "reportingComponent": by, "reportingInstance": ""})
}

type Tx = Sender<(EventType, Value)>;

fn watch(c: Client, kind: Kind, fields: Option<&'static [&'static str]>, tx: Tx) {
    crate::benchkit::floor_watch(c, kind, fields, move |t, o| tx.send((t, o)).is_ok());
}

fn client(cfg: &kubeconfig::RestConfig, who: &str) -> Res<Client> {
    Ok(Client::new(
        cfg,
        20.0,
        30,
        &format!("bench-quota-floor/{who}"),
    )?)
}

/// A thread posting Events without reading the answers (as the managers' recorders).
fn recorder(c: Client) -> Sender<Value> {
    let (tx, rx) = channel::<Value>();
    std::thread::spawn(move || {
        for ev in rx {
            let ns = ev["metadata"]["namespace"].as_str().unwrap_or("default");
            let _ = c.create_unanswered(&EVENTS, Some(ns), &ev);
        }
    });
    tx
}

fn put_status(c: &Client, kind: &Kind, o: &Value, status: Value) -> Option<Value> {
    let mut o = o.clone();
    o["status"] = status;
    c.update_subresource(kind, &o, "status")
        .map_err(|e| eprintln!("{} status: {e}", kind.plural))
        .ok()
}

fn owner(o: &Value) -> String {
    s(o, "/metadata/ownerReferences/0/uid")
}

/// The deployment controller's writes.
fn deployments(c: Client, rx: Receiver<(EventType, Value)>) {
    let ev = recorder(c.clone());
    let mut seen = HashSet::new();
    for (t, d) in rx {
        if t != EventType::Added || !seen.insert(s(&d, "/metadata/uid")) {
            continue;
        }
        let (ns, name) = (s(&d, "/metadata/namespace"), s(&d, "/metadata/name"));
        let replicas = d["spec"]["replicas"].as_u64().unwrap_or(1);
        let mut template = d["spec"]["template"].clone();
        template["metadata"]["labels"]["pod-template-hash"] = json!("5d8f6c7b9");
        let mut selector = d["spec"]["selector"].clone();
        selector["matchLabels"]["pod-template-hash"] = json!("5d8f6c7b9");
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": format!("{name}-5d8f6c7b9"), "labels": template["metadata"]["labels"],
                "annotations": {"deployment.kubernetes.io/desired-replicas": replicas.to_string(),
                    "deployment.kubernetes.io/max-replicas": (replicas + 2).to_string(),
                    "deployment.kubernetes.io/revision": "1"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                    "uid": d["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"replicas": replicas, "selector": selector, "template": template}});
        if let Err(e) = c.create(&REPLICASETS, Some(&ns), &rs) {
            eprintln!("replicaset: {e}");
            continue;
        }
        let _ = ev.send(event(
            "Deployment",
            "apps/v1",
            &d,
            "ScalingReplicaSet",
            format!("Scaled up replica set {name}-5d8f6c7b9 from 0 to {replicas}"),
            "deployment-controller",
        ));
        let mut cur = d;
        for i in 0..DEPLOYMENT_STATUS_WRITES {
            let t = now();
            let status = json!({"observedGeneration": 1, "replicas": replicas * i as u64,
                "updatedReplicas": replicas * i as u64, "unavailableReplicas": replicas * i as u64,
                "conditions": [{"type": "Available", "status": "False",
                    "reason": "MinimumReplicasUnavailable", "message": "Deployment does not have minimum availability.",
                    "lastUpdateTime": t, "lastTransitionTime": t},
                    {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                    "message": format!("ReplicaSet \"{name}-5d8f6c7b9\" is progressing."),
                    "lastUpdateTime": t, "lastTransitionTime": t}]});
            match put_status(&c, &DEPLOYMENTS, &cur, status) {
                Some(v) => cur = v,
                None => break,
            }
        }
    }
}

/// The replica set controller's writes.
fn replicasets(c: Client, rx: Receiver<(EventType, Value)>) {
    let ev = recorder(c.clone());
    let mut seen = HashSet::new();
    for (t, rs) in rx {
        if t != EventType::Added || !seen.insert(s(&rs, "/metadata/uid")) {
            continue;
        }
        let (ns, name) = (s(&rs, "/metadata/namespace"), s(&rs, "/metadata/name"));
        let n = rs["spec"]["replicas"].as_u64().unwrap_or(1);
        let template = &rs["spec"]["template"];
        for _ in 0..n {
            let pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": format!("{name}-"), "labels": template["metadata"]["labels"],
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name,
                        "uid": rs["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]},
                "spec": template["spec"]});
            match c.create_shaped(&PODS, Some(&ns), &pod, Some(POD_FIELDS)) {
                Ok(p) => {
                    let _ = ev.send(event(
                        "ReplicaSet",
                        "apps/v1",
                        &rs,
                        "SuccessfulCreate",
                        format!("Created pod: {}", s(&p, "/metadata/name")),
                        "replicaset-controller",
                    ));
                }
                Err(e) => eprintln!("pod: {e}"),
            }
        }
        let mut cur = rs.clone();
        for i in 0..RS_STATUS_WRITES {
            let k = if i + 1 == RS_STATUS_WRITES { n } else { 0 };
            let status = json!({"replicas": k, "fullyLabeledReplicas": k, "observedGeneration": 1});
            match put_status(&c, &REPLICASETS, &cur, status) {
                Some(v) => cur = v,
                None => break,
            }
        }
    }
}

/// A dependent to delete: its kind, namespace, name, and its owner's kind and name.
type Dependent = (Kind, String, String, Kind, String);

/// The garbage collector's requests: each dependent of a deleted owner read live, its owner
/// looked up live once (both managers confirm an owner is absent that way), then deleted.
/// Reads and deletes on clients of their own, as both managers' collectors reach about twice
/// the QPS in the bench.
fn collector(reads: Client, c: Client, rx: Receiver<Dependent>) {
    let bg = DeleteOptions {
        propagation_policy: Some("Background"),
        ..DeleteOptions::default()
    };
    let mut absent = HashSet::new();
    for (kind, ns, name, owner_kind, owner_name) in rx {
        if reads.get_metadata(&kind, Some(&ns), &name).is_err() {
            continue;
        }
        if absent.insert((ns.clone(), owner_name.clone())) {
            let _ = reads.get_metadata(&owner_kind, Some(&ns), &owner_name);
        }
        let _ = c.delete(&kind, Some(&ns), &name, &bg);
    }
}

/// What the quota of a namespace counts, from the watches.
#[derive(Default)]
struct Counts {
    deployments: HashSet<String>,
    replicasets: HashSet<String>,
    pods: HashSet<String>,
}

#[derive(Default)]
struct QuotaState {
    counts: HashMap<String, Counts>,
    quotas: HashMap<String, Value>,
    dirty: BTreeSet<String>,
}

fn times(q: &str, n: usize) -> String {
    let one = Quantity::parse(q).unwrap_or(Quantity::ZERO);
    let mut t = Quantity::ZERO;
    for _ in 0..n {
        t.add(&one);
    }
    t.to_string()
}

/// The quota controller's writes: the usage of namespaces whose pods were deleted.
fn quotas(c: Client, st: Arc<(Mutex<QuotaState>, Condvar)>) {
    let (m, cv) = &*st;
    loop {
        let (ns, q, n, d, r) = {
            let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
            while g.dirty.is_empty() {
                g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
            }
            let ns = g.dirty.pop_first().unwrap_or_default();
            let Some(q) = g.quotas.get(&ns).cloned() else {
                continue;
            };
            let c = g.counts.entry(ns.clone()).or_default();
            let (n, d, r) = (c.pods.len(), c.deployments.len(), c.replicasets.len());
            (ns, q, n, d, r)
        };
        let mut used = q["status"]["used"].clone();
        for (k, v) in [
            ("pods", n.to_string()),
            ("count/pods", n.to_string()),
            ("requests.cpu", times("10m", n)),
            ("limits.cpu", times("10m", n)),
            ("requests.memory", times("16Mi", n)),
            ("limits.memory", times("16Mi", n)),
            ("count/deployments.apps", d.to_string()),
            ("count/replicasets.apps", r.to_string()),
        ] {
            used[k] = json!(v);
        }
        if used == q["status"]["used"] {
            continue;
        }
        let status = json!({"hard": q["spec"]["hard"], "used": used});
        match put_status(&c, &RESOURCEQUOTAS, &q, status) {
            Some(v) => {
                m.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .quotas
                    .insert(ns, v);
            }
            // A conflict: again once the watch brings the newer quota.
            None => {
                m.lock().unwrap_or_else(|p| p.into_inner()).dirty.insert(ns);
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}

type Graph = Arc<Mutex<HashMap<String, Vec<(Kind, String, String)>>>>;

/// The collector's graph reduced to owner UID -> dependents: `o` (of `kind`) recorded under
/// its owner, or, deleted, its own dependents sent to be deleted.
fn track(graph: &Graph, gc: &Sender<Dependent>, kind: Kind, t: EventType, o: &Value) {
    let mut g = graph.lock().unwrap_or_else(|p| p.into_inner());
    if t == EventType::Deleted {
        let owner = s(o, "/metadata/name");
        for (k, ns, name) in g.remove(&s(o, "/metadata/uid")).unwrap_or_default() {
            let _ = gc.send((k, ns, name, kind, owner.clone()));
        }
        return;
    }
    let (ns, name) = (s(o, "/metadata/namespace"), s(o, "/metadata/name"));
    let dependents = g.entry(owner(o)).or_default();
    if !dependents.iter().any(|d| d.2 == name && d.1 == ns) {
        dependents.push((kind, ns, name));
    }
}

/// Count `o` in (or out of) its namespace's quota; an object leaving makes the quota dirty.
fn count(st: &(Mutex<QuotaState>, Condvar), kind: Kind, t: EventType, o: &Value) {
    let ns = s(o, "/metadata/namespace");
    let uid = s(o, "/metadata/uid");
    let mut g = st.0.lock().unwrap_or_else(|p| p.into_inner());
    let c = g.counts.entry(ns.clone()).or_default();
    let set = if kind == PODS {
        &mut c.pods
    } else if kind == REPLICASETS {
        &mut c.replicasets
    } else {
        &mut c.deployments
    };
    if t != EventType::Deleted {
        set.insert(uid);
    } else if set.remove(&uid) {
        g.dirty.insert(ns);
        st.1.notify_one();
    }
}

/// The child: runs until killed.
pub fn child(kubeconfig_path: &str) -> Res<()> {
    let cfg = kubeconfig::load(Some(Path::new(kubeconfig_path)), None)?;
    let watcher = client(&cfg, "watch")?;
    let (dtx, drx) = channel();
    let (rtx, rrx) = channel();
    let (ptx, prx) = channel();
    let (qtx, qrx) = channel();
    watch(watcher.clone(), DEPLOYMENTS, None, dtx);
    watch(watcher.clone(), REPLICASETS, None, rtx);
    watch(watcher.clone(), PODS, Some(POD_FIELDS), ptx);
    watch(watcher, RESOURCEQUOTAS, None, qtx);
    let (to_deploy, from_deploy) = channel();
    let (to_rs, from_rs) = channel();
    let (gtx, grx) = channel();
    let (dc, rc) = (client(&cfg, "deployment")?, client(&cfg, "replicaset")?);
    let (gc, qc) = (
        client(&cfg, "garbagecollector")?,
        client(&cfg, "resourcequota")?,
    );
    let gc_reads = client(&cfg, "garbagecollector")?;
    std::thread::spawn(move || deployments(dc, from_deploy));
    std::thread::spawn(move || replicasets(rc, from_rs));
    std::thread::spawn(move || collector(gc_reads, gc, grx));
    let st = Arc::new((Mutex::new(QuotaState::default()), Condvar::new()));
    let qs = st.clone();
    std::thread::spawn(move || quotas(qc, qs));
    let graph = Graph::default();
    // One thread per watch stream fans its events out.
    let (st1, g1, gtx1) = (st.clone(), graph.clone(), gtx.clone());
    std::thread::spawn(move || {
        for (t, d) in drx {
            count(&st1, DEPLOYMENTS, t, &d);
            track(&g1, &gtx1, DEPLOYMENTS, t, &d);
            let _ = to_deploy.send((t, d));
        }
    });
    let (st2, g2, gtx2) = (st.clone(), graph.clone(), gtx.clone());
    std::thread::spawn(move || {
        for (t, rs) in rrx {
            count(&st2, REPLICASETS, t, &rs);
            track(&g2, &gtx2, REPLICASETS, t, &rs);
            let _ = to_rs.send((t, rs));
        }
    });
    let st3 = st.clone();
    std::thread::spawn(move || {
        for (t, p) in prx {
            count(&st3, PODS, t, &p);
            track(&graph, &gtx, PODS, t, &p);
        }
    });
    for (_, q) in qrx {
        let mut g = st.0.lock().unwrap_or_else(|p| p.into_inner());
        let ns = s(&q, "/metadata/namespace");
        let rv = |o: &Value| {
            s(o, "/metadata/resourceVersion")
                .parse::<u64>()
                .unwrap_or(0)
        };
        if g.quotas.get(&ns).is_none_or(|o| rv(o) <= rv(&q)) {
            // A new quota gets its first usage.
            if q["status"]["used"].is_null() {
                g.dirty.insert(ns.clone());
                st.1.notify_one();
            }
            g.quotas.insert(ns, q);
        }
    }
    Ok(())
}
