//! What one pass of the pod garbage collector deletes, from the pods and nodes it sees, and the
//! status patch sent before a pod that is not terminal yet is deleted. Pure: no requests.

use crate::obj::{self, At as _};
use serde_json::{json, Map, Value};
use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::SystemTime;

/// The taint that lets terminating pods of a not-ready node go (`v1.TaintNodeOutOfService`).
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";
/// `status.reason` of a pod the kubelet evicted (`eviction.Reason`).
pub const EVICTED_REASON: &str = "Evicted";

/// Why a pod is deleted: the `reason` label of `pod_gc_collector_force_delete_pods_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    Terminated,
    OutOfService,
    Orphaned,
    Unscheduled,
}

impl Reason {
    pub fn label(self) -> &'static str {
        match self {
            Reason::Terminated => "terminated",
            Reason::OutOfService => "out-of-service",
            Reason::Orphaned => "orphaned",
            Reason::Unscheduled => "unscheduled",
        }
    }
}

/// A pod condition to set while failing a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodCondition {
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: &'static str,
}

/// The condition an orphaned pod gets (the PodDisruptionConditions gate, on in 1.28).
pub const NODE_GONE: PodCondition = PodCondition {
    type_: "DisruptionTarget",
    status: "True",
    reason: "DeletionByPodGC",
    message: "PodGC: node no longer exists",
};

pub fn phase(p: &Value) -> &str {
    p.at("/status/phase").and_then(Value::as_str).unwrap_or("")
}

pub fn node_name(p: &Value) -> &str {
    p.at("/spec/nodeName").and_then(Value::as_str).unwrap_or("")
}

/// Neither pending, running nor unknown (upstream's `isPodTerminated`: a pod without a phase
/// counts as terminated).
pub fn is_terminated(p: &Value) -> bool {
    !matches!(phase(p), "Pending" | "Running" | "Unknown")
}

/// Failed because the kubelet evicted it.
pub fn is_evicted(p: &Value) -> bool {
    phase(p) == "Failed" && p.at("/status/reason").and_then(Value::as_str) == Some(EVICTED_REASON)
}

/// The node's Ready condition is True (upstream's `nodeutil.IsNodeReady`: the first Ready
/// condition decides; none means not ready).
pub fn is_node_ready(node: &Value) -> bool {
    node.at("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        .is_some_and(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

/// A taint with this key, whatever its effect (upstream's `taints.TaintKeyExists`).
pub fn has_taint_key(node: &Value, key: &str) -> bool {
    node.at("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|t| t.get("key").and_then(Value::as_str) == Some(key))
}

/// What a pass reads of a pod; the pod itself is read again from the cache when it is acted on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub terminated: bool,
    pub evicted: bool,
    pub deleting: bool,
    pub created: Option<SystemTime>,
}

impl PodFacts {
    pub fn of(p: &Value) -> PodFacts {
        PodFacts {
            namespace: obj::namespace(p).to_string(),
            name: obj::name(p).to_string(),
            node: node_name(p).to_string(),
            terminated: is_terminated(p),
            evicted: is_evicted(p),
            deleting: obj::is_deleting(p),
            created: crate::compat::timefmt::parse_rfc3339(obj::creation_timestamp(p)),
        }
    }

    pub fn key(&self) -> String {
        obj::make_key(&self.namespace, &self.name)
    }
}

/// Whether terminating pods of this node go: it is not ready and has the out-of-service taint.
pub fn out_of_service(node: &Value) -> bool {
    !is_node_ready(node) && has_taint_key(node, OUT_OF_SERVICE_TAINT)
}

/// The nodes a pass knows, by name: whether each is [`out_of_service`].
pub type Nodes = HashMap<String, bool>;

/// Upstream's `byEvictionAndCreationTimestamp`: evicted pods first, then by creation time
/// (a pod without one first), then by name.
pub fn deletion_order(a: &PodFacts, b: &PodFacts) -> Ordering {
    b.evicted
        .cmp(&a.evicted)
        .then_with(|| a.created.cmp(&b.created))
        .then_with(|| a.name.cmp(&b.name))
}

/// The terminated pods beyond `threshold`, in the order they are deleted. Nothing when the
/// threshold is not positive (that part of the collector is off).
pub fn terminated_beyond(pods: &[PodFacts], threshold: i32) -> Vec<&PodFacts> {
    if threshold <= 0 {
        return Vec::new();
    }
    let mut terminated: Vec<&PodFacts> = pods.iter().filter(|p| p.terminated).collect();
    let excess = terminated.len().saturating_sub(threshold as usize);
    if excess == 0 {
        return Vec::new();
    }
    crate::sort::sort_by(&mut terminated[..], |a, b| deletion_order(a, b));
    terminated.truncate(excess);
    terminated
}

/// Terminating pods whose node is [`out_of_service`], in deletion order. Pods whose node is
/// not known are left (to the orphan pass once it is gone).
pub fn terminating_out_of_service<'a>(pods: &'a [PodFacts], nodes: &Nodes) -> Vec<&'a PodFacts> {
    let mut out: Vec<&PodFacts> = pods
        .iter()
        .filter(|p| p.deleting && nodes.get(&p.node) == Some(&true))
        .collect();
    crate::sort::sort_by(&mut out[..], |a, b| deletion_order(a, b));
    out
}

/// The nodes pods are bound to that the cache does not hold.
pub fn unknown_nodes(pods: &[PodFacts], nodes: &Nodes) -> BTreeSet<String> {
    pods.iter()
        .filter(|p| !p.node.is_empty() && !nodes.contains_key(&p.node))
        .map(|p| p.node.clone())
        .collect()
}

/// Pods bound to one of `gone`.
pub fn orphaned<'a>(pods: &'a [PodFacts], gone: &HashSet<String>) -> Vec<&'a PodFacts> {
    pods.iter().filter(|p| gone.contains(&p.node)).collect()
}

/// Terminating pods that were never scheduled.
pub fn unscheduled_terminating(pods: &[PodFacts]) -> Vec<&PodFacts> {
    pods.iter()
        .filter(|p| p.deleting && p.node.is_empty())
        .collect()
}

/// v1.34 and later (PodObservedGenerationTracking, GA in v1.35) stamp the condition with the
/// pod's `metadata.generation` (`CalculatePodConditionObservedGeneration`); Go leaves a 0
/// out. Added to the condition the patch writes, or as the one change when only it differs.
fn with_observed_generation(pod: &Value, type_: &str, status: &mut Map<String, Value>) {
    let generation = pod
        .at("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if generation == 0 {
        return;
    }
    let had = pod
        .at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|l| l.iter().find(|c| c["type"] == type_))
        .and_then(|c| c["observedGeneration"].as_i64());
    if let Some(entry) = status
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
        .and_then(|l| l.iter_mut().find(|c| c["type"] == type_))
    {
        if had != Some(generation) {
            entry["observedGeneration"] = json!(generation);
        }
    }
}

/// The pods/status strategic merge patch upstream sends before it deletes a pod that is not
/// terminal (`PatchPodStatus`: the two-way diff of the status with phase `Failed`, and
/// `condition` set as `UpdatePodCondition` sets it, with the pod's UID as a precondition).
/// None for a pod that succeeded or failed already: it is deleted as it is.
pub fn fail_patch(pod: &Value, condition: Option<&PodCondition>, now: SystemTime) -> Option<Value> {
    if matches!(phase(pod), "Succeeded" | "Failed") {
        return None;
    }
    let mut status = Map::new();
    status.insert("phase".into(), json!("Failed"));
    if let Some(c) = condition {
        let c = crate::controllers::kit::conditions::Condition {
            type_: c.type_,
            status: c.status,
            reason: c.reason,
            message: c.message,
        };
        if let Some(m) = crate::controllers::kit::conditions::pod_status_patch(pod, &c, now) {
            status.extend(m);
        }
        with_observed_generation(pod, c.type_, &mut status);
    }
    Some(json!({"metadata": {"uid": obj::uid(pod)}, "status": status}))
}
