//! Nodes and pods bound to them, made by hand (there is no kubelet): the tests write node and
//! pod status themselves, and take everything away again when dropped (pods with their
//! finalizers removed and `gracePeriodSeconds: 0`, since nothing else would end a graceful
//! deletion).

use edgekcm::api::client::{Client, DeleteOptions, ListOptions, PatchType};
use edgekcm::api::resources::{NODES, PODS};
use serde_json::{json, Value};

/// A finalizer the tests put on pods they want to look at after their deletion.
pub const HOLD: &str = "example.com/hold";

/// Nodes made by a test, deleted on drop.
pub struct Nodes {
    pub admin: Client,
    pub names: Vec<String>,
}

impl Nodes {
    pub fn new(admin: Client) -> Nodes {
        Nodes {
            admin,
            names: Vec::new(),
        }
    }

    /// A node with these taints and annotations; `ready`: its Ready condition (none if None).
    pub fn create(
        &mut self,
        name: &str,
        ready: Option<bool>,
        taints: Value,
        annotations: Value,
    ) -> Value {
        let n = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"taints": taints}});
        let mut n = self.admin.create(&NODES, None, &n).expect("create node");
        self.names.push(name.to_string());
        if let Some(r) = ready {
            let status = if r { "True" } else { "False" };
            n["status"]["conditions"] = json!([{"type": "Ready", "status": status,
                "reason": "Test", "lastHeartbeatTime": "2024-01-01T00:00:00Z",
                "lastTransitionTime": "2024-01-01T00:00:00Z"}]);
            n = self
                .admin
                .update_subresource(&NODES, &n, "status")
                .expect("node status");
        }
        n
    }

    pub fn delete(&mut self, name: &str) {
        self.admin
            .delete(&NODES, None, name, &DeleteOptions::default())
            .expect("delete node");
        self.names.retain(|n| n != name);
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = self
                .admin
                .delete(&NODES, None, n, &DeleteOptions::default());
        }
    }
}

/// A pod in `ns`, bound to `node` unless it is empty.
pub fn create_pod(admin: &Client, ns: &str, name: &str, node: &str, finalizers: &[&str]) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]});
    if !node.is_empty() {
        spec["nodeName"] = json!(node);
    }
    let p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "finalizers": finalizers}, "spec": spec});
    admin.create(&PODS, Some(ns), &p).expect("create pod")
}

/// Play kubelet: the pod's phase (and `status.reason` when not empty), scheduled since 2024.
pub fn set_pod_phase(admin: &Client, ns: &str, name: &str, phase: &str, reason: &str) -> Value {
    let mut p = admin.get(&PODS, Some(ns), name).expect("get pod");
    p["status"]["phase"] = json!(phase);
    if !reason.is_empty() {
        p["status"]["reason"] = json!(reason);
    }
    p["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True",
        "lastTransitionTime": "2024-01-01T00:00:00Z"}]);
    admin
        .update_subresource(&PODS, &p, "status")
        .expect("pod status")
}

pub fn get_pod(admin: &Client, ns: &str, name: &str) -> Option<Value> {
    match admin.get(&PODS, Some(ns), name) {
        Ok(p) => Some(p),
        Err(e) if e.is_not_found() => None,
        Err(e) => panic!("get pod {ns}/{name}: {e}"),
    }
}

/// Delete a pod as a user does (its own grace period).
pub fn delete_pod(admin: &Client, ns: &str, name: &str) {
    admin
        .delete(&PODS, Some(ns), name, &DeleteOptions::default())
        .expect("delete pod");
}

/// Release a pod held by [`HOLD`].
pub fn release(admin: &Client, ns: &str, name: &str) {
    let _ = admin.patch(
        &PODS,
        Some(ns),
        name,
        PatchType::Merge,
        &json!({"metadata": {"finalizers": null}}),
        None,
    );
}

/// Removes every pod of a namespace for good when dropped (before the namespace itself goes).
pub struct PodsGone {
    pub admin: Client,
    pub ns: String,
}

impl Drop for PodsGone {
    fn drop(&mut self) {
        let ns = Some(self.ns.as_str());
        let Ok(list) = self.admin.list(&PODS, ns, &ListOptions::default()) else {
            return;
        };
        for p in list.items {
            let name = p["metadata"]["name"].as_str().unwrap_or("");
            release(&self.admin, &self.ns, name);
            let _ = super::delete_pod_now(&self.admin, &self.ns, name);
        }
    }
}
