//! The floor of the volume workload's requests: a bare client, edgekcm's API client and
//! nothing else (no cache, queue, matching or Events), doing the five writes of each bind
//! both managers make (the new volume's phase `Available`, its `claimRef`, its phase `Bound`,
//! the claim's `volumeName` with the bind annotations, the claim's status) and reading the
//! same watches (volumes and claims whole, pods and StorageClasses as the binder and the
//! protection controllers watch them). A claim takes any volume of its class not taken yet
//! (the bench makes every volume of a class the same size). One client with QPS 20 / burst
//! 30 as the binder's identity in both managers. Its CPU seconds are what these requests
//! cost before any controller logic. Run as a child process of the bench (`--floor`), so its
//! CPU and RSS are measured as a manager's.

use crate::benchkit::Res;
pub use crate::benchkit::{floor_manager as manager, FLOOR_CHILD_FLAG as CHILD_FLAG};
use edgekcm::api::client::Client;
use edgekcm::api::kubeconfig;
use edgekcm::api::resources::{
    Kind, PERSISTENTVOLUMECLAIMS as PVCS, PERSISTENTVOLUMES as PVS, PODS, STORAGECLASSES,
};
use edgekcm::api::watch::EventType;
use edgekcm::obj::At;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::mpsc::{channel, Sender};

fn s(v: &Value, p: &str) -> String {
    v.at(p).and_then(Value::as_str).unwrap_or("").to_string()
}

fn rv(v: &Value) -> u64 {
    s(v, "/metadata/resourceVersion").parse().unwrap_or(0)
}

fn watch(c: Client, kind: Kind, tx: Sender<(Kind, Value)>) {
    crate::benchkit::floor_watch(c, kind, None, move |t, o| {
        !matches!(t, EventType::Added | EventType::Modified) || tx.send((kind, o)).is_ok()
    });
}

#[derive(Default)]
struct State {
    /// Latest version of every volume seen or written.
    volumes: HashMap<String, Value>,
    /// Volumes not taken yet, by class.
    free: HashMap<String, VecDeque<String>>,
    /// Claims waiting for a volume, by class.
    waiting: HashMap<String, VecDeque<Value>>,
    seen_claims: HashSet<String>,
    seen_volumes: HashSet<String>,
}

fn keep(st: &mut State, v: Value) {
    let name = s(&v, "/metadata/name");
    if st.volumes.get(&name).is_none_or(|o| rv(o) <= rv(&v)) {
        st.volumes.insert(name, v);
    }
}

fn put(c: &Client, kind: &Kind, o: &Value, sub: Option<&str>) -> Option<Value> {
    let r = match sub {
        Some(sub) => c.update_subresource(kind, o, sub),
        None => c.update(kind, o),
    };
    r.map_err(|e| eprintln!("{}: {e}", kind.plural)).ok()
}

fn bind(c: &Client, st: &mut State, pv: &str, claim: &Value) {
    let Some(mut v) = st.volumes.get(pv).cloned() else {
        return;
    };
    let m = &claim["metadata"];
    v["spec"]["claimRef"] = json!({"kind": "PersistentVolumeClaim", "namespace": m["namespace"],
        "name": m["name"], "uid": m["uid"], "apiVersion": "v1", "resourceVersion": m["resourceVersion"]});
    v["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] = json!("yes");
    let Some(mut v) = put(c, &PVS, &v, None) else {
        return;
    };
    v["status"] = json!({"phase": "Bound"});
    if let Some(v) = put(c, &PVS, &v, Some("status")) {
        keep(st, v);
    }
    let mut cl = claim.clone();
    cl["spec"]["volumeName"] = json!(pv);
    let ann = &mut cl["metadata"]["annotations"];
    ann["pv.kubernetes.io/bind-completed"] = json!("yes");
    ann["pv.kubernetes.io/bound-by-controller"] = json!("yes");
    let Some(mut cl) = put(c, &PVCS, &cl, None) else {
        return;
    };
    let capacity = st.volumes[pv]["spec"]["capacity"].clone();
    cl["status"] = json!({"phase": "Bound", "accessModes": cl["spec"]["accessModes"],
        "capacity": capacity});
    put(c, &PVCS, &cl, Some("status"));
}

/// The child: runs until killed.
pub fn child(kubeconfig_path: &str) -> Res<()> {
    let cfg = kubeconfig::load(Some(Path::new(kubeconfig_path)), None)?;
    let c = Client::new(&cfg, 20.0, 30, "bench-pv-floor")?;
    let (tx, rx) = channel();
    for k in [PVS, PVCS, PODS, STORAGECLASSES] {
        watch(c.clone(), k, tx.clone());
    }
    drop(tx);
    let mut st = State::default();
    for (kind, o) in rx {
        if kind == PVS {
            let name = s(&o, "/metadata/name");
            let new = st.seen_volumes.insert(name.clone());
            let unphased = s(&o, "/status/phase").is_empty() || s(&o, "/status/phase") == "Pending";
            keep(&mut st, o.clone());
            if new && unphased && o["spec"]["claimRef"].is_null() {
                let mut v = o;
                v["status"] = json!({"phase": "Available"});
                if let Some(v) = put(&c, &PVS, &v, Some("status")) {
                    keep(&mut st, v);
                }
                let class = s(&st.volumes[&name], "/spec/storageClassName");
                st.free.entry(class).or_default().push_back(name);
            }
        } else if kind == PVCS {
            let uid = s(&o, "/metadata/uid");
            if s(&o, "/spec/volumeName").is_empty() && st.seen_claims.insert(uid) {
                let class = s(&o, "/spec/storageClassName");
                st.waiting.entry(class).or_default().push_back(o);
            }
        } else {
            continue;
        }
        // Every class with both a waiting claim and a free volume binds them.
        let classes: Vec<String> = st.waiting.keys().cloned().collect();
        for class in classes {
            loop {
                let ready = st.waiting.get(&class).is_some_and(|w| !w.is_empty())
                    && st.free.get(&class).is_some_and(|f| !f.is_empty());
                if !ready {
                    break;
                }
                let claim = st.waiting.get_mut(&class).and_then(VecDeque::pop_front);
                let pv = st.free.get_mut(&class).and_then(VecDeque::pop_front);
                if let (Some(claim), Some(pv)) = (claim, pv) {
                    bind(&c, &mut st, &pv, &claim);
                }
            }
        }
    }
    Ok(())
}
