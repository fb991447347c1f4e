//! The object store: objects per kind, one resourceVersion counter, the event history and the
//! watchers. Every write happens under one lock and is handed to the watchers under that same
//! lock, so a watcher sees every event of its kind exactly once and in order.
//!
//! This file has the types and the reads; `history.rs` commits writes and serves watches and
//! past states, `write.rs` creates, updates and patches, `delete.rs` deletes (finalizers,
//! propagation, namespaces), `crd.rs` serves the kinds CustomResourceDefinitions define.

mod crd;
mod delete;
mod history;
mod write;

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::SystemTime;

use super::meta::{name_of, namespace_of};
use edgekcm::api::resources::{self, Kind, NAMESPACES};

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type Key = (String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvType {
    Added,
    Modified,
    Deleted,
}

/// One committed change. `old` is the state before it (absent for ADDED).
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: Kind,
    pub typ: EvType,
    pub obj: Arc<Value>,
    pub old: Option<Arc<Value>>,
}

struct Watcher {
    kind: Kind,
    tx: Sender<Arc<Event>>,
}

/// The events to send first and the channel of live events of a new watch.
pub type WatchStart = (Vec<Arc<Event>>, Receiver<Arc<Event>>);

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    Main,
    Status,
    Finalize,
    Approval,
}

/// The parts of `DeleteOptions` the sandbox honours.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub propagation: Option<String>,
    pub orphan_dependents: Option<bool>,
    /// `gracePeriodSeconds` (pods only: other kinds are deleted at once).
    pub grace_period_seconds: Option<i64>,
}

/// The outcome of a delete: the object is gone, or it stays with a deletionTimestamp.
#[derive(Debug)]
pub enum Deleted {
    Now(Arc<Value>),
    Pending(Arc<Value>),
}

/// The media types a PATCH may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// An object (kind, namespace, name) and a field manager that applied to it.
pub type AppliedBy = ((Kind, String, String), String);

pub struct State {
    pub rv: u64,
    objects: BTreeMap<Kind, BTreeMap<Key, Arc<Value>>>,
    history: VecDeque<Arc<Event>>,
    /// Every event with a resourceVersion above this one is still in `history`.
    pub compacted: u64,
    window: usize,
    watchers: Vec<Watcher>,
    /// Minted bearer tokens: token -> (user name, expiry).
    pub tokens: HashMap<String, (String, SystemTime)>,
    /// Kinds served because a CustomResourceDefinition defines them.
    pub crd_kinds: Vec<Kind>,
    /// (user, path substring) pairs a SubjectAccessReview denies.
    pub denials: Vec<(String, String)>,
    /// Top-level fields each field manager last applied (server-side apply), by object.
    pub applied: HashMap<AppliedBy, BTreeSet<String>>,
    /// The `gitVersion` `/version` reports (its major and minor are read from it).
    pub server_version: String,
    next_ip: u32,
}

fn key_of(kind: &Kind, obj: &Value) -> Key {
    let ns = if kind.namespaced {
        namespace_of(obj).to_string()
    } else {
        String::new()
    };
    (ns, name_of(obj).to_string())
}

fn obj_key(kind: &Kind, ns: &str, name: &str) -> Key {
    (
        if kind.namespaced {
            ns.to_string()
        } else {
            String::new()
        },
        name.to_string(),
    )
}

impl State {
    pub fn new(window: usize) -> State {
        let mut s = State {
            rv: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted: 0,
            window: window.max(1),
            watchers: Vec::new(),
            tokens: HashMap::new(),
            crd_kinds: Vec::new(),
            denials: Vec::new(),
            applied: HashMap::new(),
            server_version: "v1.37.2-sandbox".to_string(),
            next_ip: 1,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            // Creating a namespace into an empty store cannot fail.
            let _ = s.create(&NAMESPACES, None, json!({"metadata": {"name": ns}}));
        }
        s
    }

    /// Every kind currently served: the built-in table plus CRD-defined kinds.
    pub fn served_kinds(&self) -> Vec<Kind> {
        let mut v: Vec<Kind> = resources::ALL.to_vec();
        v.extend(self.crd_kinds.iter().copied());
        v
    }

    pub fn find_kind(&self, group: &str, version: &str, plural: &str) -> Option<Kind> {
        resources::ALL
            .iter()
            .chain(self.crd_kinds.iter())
            .find(|k| k.group == group && k.version == version && k.plural == plural)
            .copied()
    }

    pub fn is_crd_kind(&self, kind: &Kind) -> bool {
        self.crd_kinds.contains(kind)
    }

    pub fn get(&self, kind: &Kind, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(kind)
            .and_then(|m| m.get(&obj_key(kind, ns, name)))
            .cloned()
    }

    /// Objects of a kind in key order, optionally limited to one namespace.
    pub fn iter_kind<'a>(
        &'a self,
        kind: &Kind,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        self.objects
            .get(kind)
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(move |((n, _), _)| ns.is_none_or(|x| x == n))
            .map(|(_, v)| v)
    }
}

/// Set (or with `None` remove) the value at a path of object keys, creating objects on the way
/// and replacing non-objects in between.
pub fn set_path(obj: &mut Value, path: &[&str], v: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    if !obj.is_object() {
        return;
    }
    let mut cur = obj;
    for p in parents {
        if !cur.get(*p).is_some_and(Value::is_object) {
            if v.is_none() {
                return;
            }
            cur[*p] = json!({});
        }
        cur = &mut cur[*p];
    }
    match (v, cur.as_object_mut()) {
        (Some(v), Some(m)) => {
            m.insert((*last).to_string(), v);
        }
        (None, Some(m)) => {
            m.remove(*last);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::rv_of;
    use edgekcm::api::resources::{CONFIGMAPS, DEPLOYMENTS};

    fn cm(name: &str, v: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default"}, "data": {"k": v}})
    }

    fn names(m: &BTreeMap<Key, Arc<Value>>) -> Vec<String> {
        m.values()
            .map(|o| format!("{}={}", name_of(o), o["data"]["k"].as_str().unwrap_or("")))
            .collect()
    }

    #[test]
    fn snapshots_rebuild_earlier_states() {
        let mut s = State::new(100);
        s.create(&CONFIGMAPS, None, cm("a", "1")).unwrap();
        let at1 = s.rv;
        s.create(&CONFIGMAPS, None, cm("b", "1")).unwrap();
        s.update(&CONFIGMAPS, "default", "a", cm("a", "2"), WriteMode::Main)
            .unwrap();
        s.delete(&CONFIGMAPS, "default", "b", &DeleteOpts::default())
            .unwrap();
        assert_eq!(names(&s.snapshot(&CONFIGMAPS, at1).unwrap()), ["a=1"]);
        assert_eq!(
            names(&s.snapshot(&CONFIGMAPS, at1 + 2).unwrap()),
            ["a=2", "b=1"]
        );
        assert_eq!(names(&s.snapshot(&CONFIGMAPS, s.rv).unwrap()), ["a=2"]);
        s.expire_history();
        assert_eq!(s.snapshot(&CONFIGMAPS, at1).unwrap_err().code, 410);
    }

    #[test]
    fn history_window_and_watch_replay() {
        let mut s = State::new(3);
        let start = s.rv;
        for i in 0..5 {
            s.create(&CONFIGMAPS, None, cm(&format!("c{i}"), "x"))
                .unwrap();
        }
        let err = s.watch(&CONFIGMAPS, None, Some(start)).unwrap_err();
        assert_eq!(err.code, 410);
        assert_eq!(
            err.message,
            format!("too old resource version: {start} ({})", s.compacted)
        );
        let (replay, rx) = s.watch(&CONFIGMAPS, None, Some(s.rv - 2)).unwrap();
        assert_eq!(replay.len(), 2);
        s.create(&CONFIGMAPS, None, cm("live", "x")).unwrap();
        let ev = rx.try_recv().unwrap();
        assert_eq!(ev.typ, EvType::Added);
        // Other kinds do not reach this watcher.
        s.create(&DEPLOYMENTS, None, json!({"metadata": {"name": "d"}}))
            .unwrap();
        assert!(rx.try_recv().is_err());
        s.drop_watchers();
        assert!(matches!(
            rx.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Disconnected)
        ));
    }

    #[test]
    fn noop_update_keeps_the_resource_version() {
        let mut s = State::new(10);
        let a = s.create(&CONFIGMAPS, None, cm("a", "1")).unwrap();
        let again = s
            .update(&CONFIGMAPS, "default", "a", (*a).clone(), WriteMode::Main)
            .unwrap();
        assert_eq!(rv_of(&again), rv_of(&a));
        let mut no_rv = (*a).clone();
        no_rv["metadata"]["managedFields"] = json!([{"manager": "x"}]);
        let same = s
            .update(&CONFIGMAPS, "default", "a", no_rv, WriteMode::Main)
            .unwrap();
        assert!(same["metadata"].get("managedFields").is_none());
        assert_eq!(rv_of(&same), rv_of(&a));
    }
}
