//! Pure decisions of the daemonset-controller: where a daemon pod should run
//! (`NodeShouldRunDaemonPod`), which node a pod is meant for (`GetTargetNodeName`), which
//! pods count as updated, and the rolling update's choice of pods to replace
//! (`rollingUpdate`, with and without surge).

use crate::controllers::kit::nodefit::{self, NodeView};
use crate::controllers::kit::pod::{is_pod_available, is_pod_ready};
use crate::obj::{self, At as _, Obj};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::SystemTime;

pub use super::history::HASH_LABEL;
/// The label with the DaemonSet's template generation (from its annotation).
pub const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

/// What of a DaemonSet's pod template decides where it runs: `nodeName`, `nodeSelector`,
/// `affinity` and the tolerations with the daemon defaults added. Kept per DaemonSet so node
/// changes are judged without decoding the DaemonSets.
pub fn placement(ds: &Value) -> Value {
    let spec = ds.at("/spec/template/spec");
    let mut p = json!({});
    for f in [
        "nodeName",
        "nodeSelector",
        "affinity",
        "tolerations",
        "hostNetwork",
    ] {
        if let Some(v) = spec.and_then(|s| s.get(f)).filter(|v| !v.is_null()) {
            p[f] = v.clone();
        }
    }
    nodefit::add_daemon_tolerations(&mut p);
    p
}

/// (should run, should continue running) of a daemon pod with `placement` on `node`.
pub fn should_run(placement: &Value, node: &NodeView) -> (bool, bool) {
    let name = placement
        .get("nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !name.is_empty() && name != node.name {
        return (false, false);
    }
    if !nodefit::matches_node_selector_and_affinity(placement, node) {
        return (false, false);
    }
    let tols: &[Value] = placement
        .get("tolerations")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let blocking = |e: &str| e == "NoExecute" || e == "NoSchedule";
    if nodefit::untolerated_taint(node.taints, tols, blocking).is_some() {
        let evicting = nodefit::untolerated_taint(node.taints, tols, |e| e == "NoExecute");
        return (false, evicting.is_none());
    }
    (true, true)
}

/// The node a daemon pod is for: its `spec.nodeName`, else the `metadata.name` of its
/// required node affinity's `matchFields`.
pub fn target_node(pod: &Value) -> Option<String> {
    if let Some(n) = pod.at("/spec/nodeName").and_then(Value::as_str) {
        if !n.is_empty() {
            return Some(n.to_string());
        }
    }
    let terms = pod
        .at("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")?
        .as_array()?;
    for t in terms {
        for r in t
            .get("matchFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if r.get("key").and_then(Value::as_str) == Some("metadata.name")
                && r.get("operator").and_then(Value::as_str) == Some("In")
            {
                let vals = r.get("values").and_then(Value::as_array)?;
                return match vals.as_slice() {
                    [v] => v.as_str().map(str::to_string),
                    _ => None,
                };
            }
        }
    }
    None
}

/// The pod's affinity with its required node terms replaced by one `matchFields` term for
/// `node` (upstream's `ReplaceDaemonSetPodNodeNameNodeAffinity`).
pub fn set_node_affinity(spec: &mut Value, node: &str) {
    let term = json!({"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]});
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    let aff = m.entry("affinity").or_insert_with(|| json!({}));
    if !aff.is_object() {
        *aff = json!({});
    }
    let na = &mut aff["nodeAffinity"];
    if !na.is_object() {
        *na = json!({});
    }
    let req = &mut na["requiredDuringSchedulingIgnoredDuringExecution"];
    if req.is_object() {
        req["nodeSelectorTerms"] = term["nodeSelectorTerms"].clone();
    } else {
        *req = term;
    }
}

/// The DaemonSet's template generation (its annotation), if it has a valid one.
pub fn template_generation(ds: &Value) -> Option<i64> {
    obj::annotation(ds, TEMPLATE_GENERATION_ANNOTATION)?
        .parse()
        .ok()
}

/// Upstream's `IsPodUpdated`: the pod carries the current hash, or the current template
/// generation.
pub fn is_updated(pod: &Value, hash: &str, generation: Option<i64>) -> bool {
    let gen = generation.is_some_and(|g| {
        obj::label(pod, TEMPLATE_GENERATION_LABEL) == Some(g.to_string().as_str())
    });
    (!hash.is_empty() && obj::label(pod, HASH_LABEL) == Some(hash)) || gen
}

/// Scheduled pods first, then oldest, then by name (`podByCreationTimestampAndPhase`).
pub fn sort_pods(pods: &mut [Obj]) {
    let scheduled = |p: &Value| {
        p.at("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    crate::sort::sort_by(&mut pods[..], |a, b| {
        scheduled(b)
            .cmp(&scheduled(a))
            .then_with(|| obj::creation_timestamp(a).cmp(obj::creation_timestamp(b)))
            .then_with(|| obj::name(a).cmp(obj::name(b)))
    });
}

/// An int-or-percent scaled to `total`, rounded up (`GetScaledValueFromIntOrPercent`);
/// Err for a malformed value.
pub fn scaled(v: Option<&Value>, total: usize) -> Result<usize, String> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => Ok(n.as_i64().unwrap_or(0).max(0) as usize),
        Some(Value::String(s)) => {
            let pct = s
                .strip_suffix('%')
                .and_then(|p| p.parse::<u64>().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            Ok(((pct as usize) * total).div_ceil(100))
        }
        Some(other) => Err(format!("invalid value for IntOrString: {other}")),
    }
}

pub fn is_rolling(ds: &Value) -> bool {
    ds.at("/spec/updateStrategy/type").and_then(Value::as_str) == Some("RollingUpdate")
}

/// (maxSurge, maxUnavailable) for `desired` nodes; at least one unavailable when both are 0.
pub fn surge_and_unavailable(ds: &Value, desired: usize) -> Result<(usize, usize), String> {
    if !is_rolling(ds) {
        return Ok((0, 0));
    }
    let r = ds.at("/spec/updateStrategy/rollingUpdate");
    let surge = scaled(r.and_then(|r| r.get("maxSurge")), desired)?;
    let unavail = scaled(r.and_then(|r| r.get("maxUnavailable")), desired)?;
    if desired > 0 && surge == 0 && unavail == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavail))
}

/// Whether the update strategy lets a new pod start before the old one stops.
pub fn allows_surge(ds: &Value) -> bool {
    if !is_rolling(ds) {
        return false;
    }
    let r = ds.at("/spec/updateStrategy/rollingUpdate/maxSurge");
    scaled(r, 1).is_ok_and(|s| s > 0)
}

/// The one new and the one old pod on a node, or None when there are more of either.
fn new_and_old<'a>(
    pods: &'a [Obj],
    hash: &str,
    gen: Option<i64>,
) -> Option<(Option<&'a Obj>, Option<&'a Obj>)> {
    let (mut new, mut old) = (None, None);
    for p in pods.iter().filter(|p| !obj::is_deleting(p)) {
        let slot = if is_updated(p, hash, gen) {
            &mut new
        } else {
            &mut old
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(p);
    }
    Some((new, old))
}

/// What a rolling update does in one sync: pods to delete and nodes to create on.
#[derive(Debug, Default, PartialEq)]
pub struct Rollout {
    pub delete: Vec<String>,
    pub create_on: Vec<String>,
}

/// Upstream's `rollingUpdate`. `by_node` holds every desired node (empty when it has no pod)
/// and every node with pods; `should_run` tells for a node name whether the pod should run
/// there.
pub fn rolling_update(
    ds: &Value,
    by_node: &BTreeMap<String, Vec<Obj>>,
    desired: usize,
    hash: &str,
    should_run: impl Fn(&str) -> bool,
    now: SystemTime,
) -> Result<Rollout, String> {
    let (max_surge, max_unavailable) = surge_and_unavailable(ds, desired)?;
    let min_ready = super::min_ready_seconds(ds);
    let gen = template_generation(ds);
    let available = |p: &Value| is_pod_available(p, min_ready, now);
    let mut out = Rollout::default();
    if max_surge == 0 {
        let mut unavailable = 0usize;
        let (mut allowed, mut candidates) = (vec![], vec![]);
        for pods in by_node.values() {
            let Some((new, old)) = new_and_old(pods, hash, gen) else {
                unavailable += 1;
                continue;
            };
            match (new, old) {
                (None, None) | (Some(_), Some(_)) => unavailable += 1,
                (Some(n), None) => {
                    if !available(n) {
                        unavailable += 1;
                    }
                }
                (None, Some(o)) => {
                    if !available(o) {
                        // Replaced at once, and counted against maxUnavailable (by v1.34).
                        allowed.push(obj::name(o).to_string());
                        unavailable += 1;
                    } else if unavailable < max_unavailable {
                        candidates.push(obj::name(o).to_string());
                    }
                }
            }
        }
        let remaining = max_unavailable
            .saturating_sub(unavailable)
            .min(candidates.len());
        out.delete = allowed;
        out.delete.extend(candidates.into_iter().take(remaining));
        return Ok(out);
    }
    let (mut not_run, mut candidate_nodes, mut allowed_nodes) = (vec![], vec![], vec![]);
    let (mut surge, mut n_available) = (0usize, 0usize);
    for (node, pods) in by_node {
        let Some((new, old)) = new_and_old(pods, hash, gen) else {
            surge += 1;
            continue;
        };
        if let Some(o) = old {
            if available(o) {
                n_available += 1;
            }
        } else if let Some(n) = new {
            if available(n) {
                n_available += 1;
            }
        }
        match (new, old) {
            (_, None) => {}
            (None, Some(o)) => {
                if !available(o) {
                    if !should_run(node) {
                        out.delete.push(obj::name(o).to_string());
                        continue;
                    }
                    allowed_nodes.push(node.clone());
                } else {
                    if !should_run(node) {
                        not_run.push(obj::name(o).to_string());
                        continue;
                    }
                    if surge >= max_surge {
                        continue;
                    }
                    candidate_nodes.push(node.clone());
                }
            }
            (Some(n), Some(o)) => {
                if !available(n) {
                    surge += 1;
                    continue;
                }
                out.delete.push(obj::name(o).to_string());
            }
        }
    }
    let deletable = n_available.saturating_sub(desired).min(not_run.len());
    out.delete.extend(not_run.into_iter().take(deletable));
    let remaining = max_surge.saturating_sub(surge).min(candidate_nodes.len());
    out.create_on = allowed_nodes;
    out.create_on
        .extend(candidate_nodes.into_iter().take(remaining));
    Ok(out)
}

/// Whether a pod is ready (for the surge case's choice of the old pod to replace).
pub fn ready(p: &Value) -> bool {
    is_pod_ready(p)
}
