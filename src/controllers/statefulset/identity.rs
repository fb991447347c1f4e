//! A StatefulSet's pods and claims by ordinal (upstream's `stateful_set_utils.go`): names,
//! ordinals, the pod a revision makes, the claims of a pod, the claims' owner references
//! under `persistentVolumeClaimRetentionPolicy`, and the pod predicates the sync uses.

use crate::api::resources::STATEFULSETS;
use crate::controllers::kit::pod::{is_pod_available, is_pod_ready, phase, pod_from_template};
use crate::obj::{self, At as _};
use serde_json::{json, Map, Value};
use std::time::SystemTime;

pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
pub use crate::controllers::kit::history::REVISION_LABEL;

/// `<parent>-<ordinal>` split as upstream's `(.*)-([0-9]+)$`; the ordinal is -1 when the
/// name has none (or it does not fit an int32).
pub fn parent_and_ordinal(name: &str) -> (&str, i64) {
    let Some(dash) = name.rfind('-') else {
        return ("", -1);
    };
    let digits = &name[dash + 1..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return ("", -1);
    }
    match digits.parse::<i32>() {
        Ok(n) => (&name[..dash], i64::from(n)),
        Err(_) => (&name[..dash], -1),
    }
}

pub fn ordinal(pod: &Value) -> i64 {
    parent_and_ordinal(obj::name(pod)).1
}

/// `.spec.ordinals.start` (StatefulSetStartOrdinal is on by default in 1.28).
pub fn start_ordinal(set: &Value) -> i64 {
    set.at("/spec/ordinals/start")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        .max(0)
}

pub fn replicas(set: &Value) -> i64 {
    set.at("/spec/replicas")
        .map(|v| v.as_i64().unwrap_or(0))
        .unwrap_or(1)
        .max(0)
}

pub fn in_range(set: &Value, ord: i64) -> bool {
    let start = start_ordinal(set);
    ord >= start && ord < start + replicas(set)
}

pub fn pod_name(set: &Value, ord: i64) -> String {
    format!("{}-{ord}", obj::name(set))
}

pub fn is_member_of(set: &Value, pod: &Value) -> bool {
    parent_and_ordinal(obj::name(pod)).0 == obj::name(set)
}

/// Upstream's `identityMatches`.
pub fn identity_matches(set: &Value, pod: &Value) -> bool {
    let (parent, ord) = parent_and_ordinal(obj::name(pod));
    ord >= 0
        && parent == obj::name(set)
        && obj::namespace(pod) == obj::namespace(set)
        && obj::label(pod, POD_NAME_LABEL) == Some(obj::name(pod))
}

pub fn revision_of(pod: &Value) -> &str {
    obj::label(pod, REVISION_LABEL).unwrap_or("")
}

pub fn is_created(pod: &Value) -> bool {
    !phase(pod).is_empty()
}
pub fn is_pending(pod: &Value) -> bool {
    phase(pod) == "Pending"
}
/// Failed or Succeeded: the pod is deleted and made again (v1.28 already did this; v1.37
/// records no Event for it).
pub fn is_terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Failed" | "Succeeded")
}
pub fn is_terminating(pod: &Value) -> bool {
    obj::is_deleting(pod)
}
pub fn is_running_and_ready(pod: &Value) -> bool {
    phase(pod) == "Running" && is_pod_ready(pod)
}
pub fn is_running_and_available(pod: &Value, min_ready: i64, now: SystemTime) -> bool {
    is_pod_available(pod, min_ready, now)
}
/// Upstream's `isUnavailable` (v1.31 on): not available for `minReadySeconds`, or
/// terminating. A pod not made yet is unavailable.
pub fn is_unavailable(pod: Option<&Value>, min_ready: i64, now: SystemTime) -> bool {
    pod.is_none_or(|p| !is_pod_available(p, min_ready, now) || is_terminating(p))
}

/// The claim templates of the set.
pub fn claim_templates(set: &Value) -> &[Value] {
    set.at("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

pub fn claim_name(set: &Value, template: &Value, ord: i64) -> String {
    format!(
        "{}-{}-{ord}",
        template
            .at("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or(""),
        obj::name(set)
    )
}

/// The claims of the pod with ordinal `ord`, in template order (upstream's
/// `getPersistentVolumeClaims`): each template named `<claim>-<set>-<ord>`, its labels plus
/// the selector's `matchLabels`.
pub fn claims_for(set: &Value, ord: i64) -> Vec<(String, Value)> {
    let match_labels = set
        .at("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    claim_templates(set)
        .iter()
        .map(|t| {
            let tname = t
                .at("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let mut meta = t
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            meta.insert("name".into(), json!(claim_name(set, t, ord)));
            meta.insert("namespace".into(), json!(obj::namespace(set)));
            let mut labels = meta
                .get("labels")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            for (k, v) in &match_labels {
                labels.insert(k.clone(), v.clone());
            }
            meta.insert("labels".into(), Value::Object(labels));
            let claim = json!({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": meta,
                "spec": t.get("spec").cloned().unwrap_or_else(|| json!({})),
            });
            (tname, claim)
        })
        .collect()
}

/// The set with its template replaced by a revision's (upstream's `ApplyRevision`: the data
/// is `{"spec":{"template":{..., "$patch":"replace"}}}`).
pub fn apply_revision(set: &Value, rev: &Value) -> Value {
    let mut out = set.clone();
    if let Some(t) = rev.at("/data/spec/template").and_then(Value::as_object) {
        let mut t = t.clone();
        t.remove("$patch");
        out["spec"]["template"] = Value::Object(t);
    }
    out
}

/// The pod with ordinal `ord` as `set` (already carrying the revision's template) makes it,
/// labelled with `revision` (upstream's `newStatefulSetPod` + `setPodRevision`).
pub fn new_pod(set: &Value, ord: i64, revision: &str) -> Result<Value, String> {
    let mut pod = pod_from_template(&STATEFULSETS, set)?;
    let name = pod_name(set, ord);
    let meta = pod["metadata"]
        .as_object_mut()
        .ok_or("pod without metadata")?;
    // Upstream keeps the template's `generateName` beside the name.
    meta.insert("name".into(), json!(name));
    meta.insert("namespace".into(), json!(obj::namespace(set)));
    if let Some(l) = meta.get_mut("labels").and_then(Value::as_object_mut) {
        l.insert(POD_NAME_LABEL.into(), json!(name));
        l.insert(POD_INDEX_LABEL.into(), json!(ord.to_string()));
        l.insert(REVISION_LABEL.into(), json!(revision));
    }
    let spec = pod["spec"].as_object_mut().ok_or("pod without spec")?;
    spec.insert("hostname".into(), json!(name));
    match set.at("/spec/serviceName").and_then(Value::as_str) {
        Some(s) if !s.is_empty() => {
            spec.insert("subdomain".into(), json!(s));
        }
        _ => {
            spec.remove("subdomain");
        }
    }
    // Claim volumes first, then the template's volumes they do not replace (upstream's
    // `updateStorage`).
    let claims = claims_for(set, ord);
    if !claims.is_empty() {
        let mut volumes: Vec<Value> = claims
            .iter()
            .map(|(tname, c)| {
                json!({"name": tname, "persistentVolumeClaim": {"claimName": obj::name(c)}})
            })
            .collect();
        let old = spec
            .get("volumes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for v in old {
            let n = v.get("name").and_then(Value::as_str).unwrap_or("");
            if !claims.iter().any(|(t, _)| t == n) {
                volumes.push(v);
            }
        }
        spec.insert("volumes".into(), Value::Array(volumes));
    }
    Ok(pod)
}

/// `persistentVolumeClaimRetentionPolicy` as (whenDeleted is Delete, whenScaled is Delete);
/// anything but `Delete` is `Retain`, as upstream treats unknown values.
pub fn retention(set: &Value) -> (bool, bool) {
    let is_delete = |p: &str| {
        set.at(&format!("/spec/persistentVolumeClaimRetentionPolicy/{p}"))
            .and_then(Value::as_str)
            == Some("Delete")
    };
    (is_delete("whenDeleted"), is_delete("whenScaled"))
}

fn has_owner(claim: &Value, uid: &str) -> bool {
    !uid.is_empty() && obj::owner_ref_views(claim).any(|r| r.uid == uid)
}

fn owner_refs(claim: &Value) -> &[Value] {
    claim
        .at("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Upstream's `matchesRef`: same API version, kind and name (any UID).
fn matches_ref(r: &Value, api_version: &str, kind: &str, name: &str) -> bool {
    r["apiVersion"] == api_version && r["kind"] == kind && r["name"] == name
}

fn is_set_ref(r: &Value, set: &Value) -> bool {
    matches_ref(r, "apps/v1", "StatefulSet", obj::name(set))
}

fn is_pod_ref(r: &Value, pod: &Value) -> bool {
    matches_ref(r, "v1", "Pod", obj::name(pod))
}

/// Upstream's `hasStaleOwnerRef`: the first reference to the object (by kind and name) has
/// another UID.
fn stale_ref(claim: &Value, is_ref: impl Fn(&Value) -> bool, uid: &str) -> bool {
    owner_refs(claim)
        .iter()
        .find(|r| is_ref(r))
        .is_some_and(|r| r["uid"] != uid)
}

/// A reference to the pod named `pod_name` with another UID (upstream's `hasStaleOwnerRef`
/// for a pod about to be made: any UID is stale).
pub fn has_stale_owner(claim: &Value, pod_name: &str, pod_uid: &str) -> bool {
    stale_ref(claim, |r| matches_ref(r, "v1", "Pod", pod_name), pod_uid)
}

/// Upstream's `hasUnexpectedController`: under a deleting policy, a controller reference
/// that is neither the set nor the pod, or a reference to either with another UID.
pub fn has_unexpected_controller(set: &Value, claim: &Value, pod: &Value) -> bool {
    if retention(set) == (false, false) {
        return false;
    }
    owner_refs(claim).iter().any(|r| {
        if is_set_ref(r, set) {
            return r["uid"] != obj::uid(set);
        }
        if is_pod_ref(r, pod) {
            return r["uid"] != obj::uid(pod);
        }
        r["controller"] == true
    })
}

/// Upstream's `hasNonControllerOwner`: the set or the pod referenced without `controller`.
fn has_non_controller_owner(set: &Value, claim: &Value, pod: &Value) -> bool {
    owner_refs(claim).iter().any(|r| {
        (r["uid"] == obj::uid(set) || r["uid"] == obj::uid(pod)) && r["controller"] != true
    })
}

/// What references the claim of a pod at `pod_ord` should have under the retention policy:
/// (the set's, the pod's).
fn wanted_refs(set: &Value, pod_ord: i64) -> (bool, bool) {
    let (when_deleted, when_scaled) = retention(set);
    let scaled_down = !in_range(set, pod_ord);
    match (when_scaled, when_deleted) {
        (false, false) => (false, false),
        (false, true) => (true, false),
        (true, false) => (false, scaled_down),
        (true, true) => (!scaled_down, scaled_down),
    }
}

/// Whether the claim's owner references fit the retention policy for this pod (upstream's
/// `isClaimOwnerUpToDate`): a claim held by an earlier set or pod, or by another controller
/// without ours, is left alone; our references must be controller references.
pub fn claim_refs_match(set: &Value, claim: &Value, pod: &Value) -> bool {
    if stale_ref(claim, |r| is_set_ref(r, set), obj::uid(set))
        || stale_ref(claim, |r| is_pod_ref(r, pod), obj::uid(pod))
    {
        return true;
    }
    let (has_set, has_pod) = (
        has_owner(claim, obj::uid(set)),
        has_owner(claim, obj::uid(pod)),
    );
    if has_unexpected_controller(set, claim, pod) {
        return !(has_set || has_pod);
    }
    if has_non_controller_owner(set, claim, pod) {
        return false;
    }
    let (want_set, want_pod) = wanted_refs(set, ordinal(pod));
    has_set == want_set && has_pod == want_pod
}

/// The claim's owner references fixed for the retention policy (upstream's
/// `updateClaimOwnerRefForSetAndPod`: ours scrubbed, then the wanted ones added as
/// controller references unless another controller holds the claim); None when nothing
/// changes.
pub fn fix_claim_refs(set: &Value, claim: &Value, pod: &Value) -> Option<Value> {
    let unexpected = has_unexpected_controller(set, claim, pod);
    let before = owner_refs(claim).to_vec();
    let mut refs: Vec<Value> = before
        .iter()
        .filter(|r| !is_set_ref(r, set) && !is_pod_ref(r, pod))
        .cloned()
        .collect();
    if !unexpected {
        let (want_set, want_pod) = wanted_refs(set, ordinal(pod));
        if want_pod && !obj::uid(pod).is_empty() {
            refs.push(controller_ref("v1", "Pod", pod));
        }
        if want_set {
            refs.push(set_ref(set));
        }
    }
    if refs == before {
        return None;
    }
    let mut out = claim.clone();
    out["metadata"]["ownerReferences"] = Value::Array(refs);
    Some(out)
}

fn controller_ref(api_version: &str, kind: &str, owner: &Value) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": obj::name(owner),
        "uid": obj::uid(owner), "controller": true, "blockOwnerDeletion": true})
}

/// The controller reference a claim deleted with its set gets (v1.32 on: a controller
/// reference; v1.28 wrote a plain one).
pub fn set_ref(set: &Value) -> Value {
    controller_ref("apps/v1", "StatefulSet", set)
}

/// The owner references a new claim of a new pod starts with (what upstream's create and
/// the retention update right after it leave: the set's when `whenDeleted` is Delete and
/// the ordinal is in range).
pub fn new_claim_refs(set: &Value, ord: i64) -> Option<Value> {
    let (want_set, _) = wanted_refs(set, ord);
    want_set.then(|| json!([set_ref(set)]))
}

/// The labels of a pod as a JSON map, for the identity patch.
pub fn identity_patch(set: &Value, pod: &Value) -> Value {
    let ord = ordinal(pod);
    let name = pod_name(set, ord);
    let mut labels = Map::new();
    labels.insert(POD_NAME_LABEL.into(), json!(name));
    labels.insert(POD_INDEX_LABEL.into(), json!(ord.to_string()));
    json!({"metadata": {"labels": labels}})
}

/// The revision's data: the set's template, replacing the whole template when applied
/// (upstream's `getPatch`).
pub fn revision_data(set: &Value) -> Value {
    let mut template = set
        .at("/spec/template")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    template["$patch"] = json!("replace");
    json!({"spec": {"template": template}})
}

pub fn update_strategy(set: &Value) -> &str {
    set.at("/spec/updateStrategy/type")
        .and_then(Value::as_str)
        .unwrap_or("RollingUpdate")
}

/// `rollingUpdate.maxUnavailable` for `replicas` pods (upstream's
/// `getStatefulSetMaxUnavailable`): 1 when unset, a percentage rounded down, never below 1.
pub fn max_unavailable(set: &Value, replicas: i64) -> Result<i64, String> {
    let n = match set.at("/spec/updateStrategy/rollingUpdate/maxUnavailable") {
        None | Some(Value::Null) => 1,
        Some(Value::Number(n)) => n.as_i64().unwrap_or(1),
        Some(Value::String(s)) => {
            let pct = s
                .strip_suffix('%')
                .and_then(|p| p.parse::<i64>().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            pct * replicas.max(0) / 100
        }
        Some(other) => return Err(format!("invalid value for IntOrString: {other}")),
    };
    Ok(n.max(1))
}

/// `rollingUpdate.partition` when the strategy has a `rollingUpdate` block.
pub fn partition(set: &Value) -> Option<i64> {
    let ru = set
        .at("/spec/updateStrategy/rollingUpdate")
        .filter(|v| v.is_object())?;
    Some(ru.get("partition").and_then(Value::as_i64).unwrap_or(0))
}
