//! The pods of each node, as the watch last showed them (upstream's pod indexer on
//! `spec.nodeName`): the health pass marks a not-ready node's pods, and a pod newly bound to
//! a node is looked at once (`podUpdated`).

use crate::obj::{self, At as _};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

#[derive(Default)]
struct Index {
    node_of: HashMap<String, String>,
    by_node: HashMap<String, BTreeSet<String>>,
}

#[derive(Default)]
pub struct PodIndex(Mutex<Index>);

impl PodIndex {
    /// A pod was added, changed or deleted; returns its node when it is new there.
    pub fn changed(&self, pod: &Value, deleted: bool) -> Option<String> {
        let key = obj::key(pod);
        let node = pod
            .at("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut ix = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let before = if deleted {
            ix.node_of.remove(&key)
        } else {
            ix.node_of.insert(key.clone(), node.clone())
        };
        if let Some(b) = &before {
            if deleted || *b != node {
                if let Some(s) = ix.by_node.get_mut(b) {
                    s.remove(&key);
                    if s.is_empty() {
                        ix.by_node.remove(b);
                    }
                }
            }
        }
        if deleted {
            return None;
        }
        if !node.is_empty() {
            ix.by_node.entry(node.clone()).or_default().insert(key);
        }
        (before.as_deref() != Some(node.as_str()) && !node.is_empty()).then_some(node)
    }

    /// Pod keys on `node`.
    pub fn on(&self, node: &str) -> Vec<String> {
        let ix = self.0.lock().unwrap_or_else(|p| p.into_inner());
        ix.by_node
            .get(node)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: &str) -> Value {
        json!({"metadata": {"namespace": "ns", "name": name}, "spec": {"nodeName": node}})
    }

    #[test]
    fn pods_follow_their_node() {
        let ix = PodIndex::default();
        assert_eq!(ix.changed(&pod("a", ""), false), None, "not bound");
        assert_eq!(ix.changed(&pod("a", "n1"), false), Some("n1".into()));
        assert_eq!(ix.changed(&pod("a", "n1"), false), None, "same node");
        assert_eq!(ix.changed(&pod("b", "n1"), false), Some("n1".into()));
        assert_eq!(ix.on("n1"), ["ns/a", "ns/b"]);
        assert_eq!(ix.changed(&pod("a", "n2"), false), Some("n2".into()));
        assert_eq!(ix.on("n1"), ["ns/b"]);
        assert_eq!(ix.changed(&pod("b", "n1"), true), None);
        assert!(ix.on("n1").is_empty());
        assert_eq!(ix.on("n2"), ["ns/a"]);
    }
}
