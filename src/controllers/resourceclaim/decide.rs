//! The pure decisions of the resource claim controller (upstream's
//! `dynamic-resource-allocation/resourceclaim` helpers and the controller's own predicates):
//! which claim a pod's entry names, whether a claim is the pod's, whether a pod still needs
//! its claims, and the claim made from a template.

use crate::obj::{self, At as _};
use serde_json::{json, Map, Value};

/// The annotation on a generated claim naming the pod's claim entry it was made for.
pub const POD_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";
/// The annotation the scheduler puts on claims it makes for extended resources.
pub const EXTENDED_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/extended-resource-claim";
/// The finalizer the scheduler adds when it allocates a claim; this controller removes it
/// once the claim is deallocated.
pub const FINALIZER: &str = "resource.kubernetes.io/delete-protection";
/// Room for the five random characters the apiserver adds to a generated name (63 less
/// one hyphen and five characters).
const MAX_BASE_LEN: usize = 57;

pub use crate::controllers::kit::podclaims::{
    claim_name, entries, is_reserved_for, not_for_pod, pod_claims, reserved_for, NameError,
};

/// Whether the pod has anything for this controller: claims in its spec, or the scheduler's
/// extended resource claim in its status.
pub fn has_claims(pod: &Value) -> bool {
    !entries(pod).is_empty() || !pod["status"]["extendedResourceClaimStatus"].is_null()
}

fn node_name(pod: &Value) -> &str {
    pod.at("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn phase_terminal(pod: &Value) -> bool {
    matches!(
        pod.at("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// `podNeedsClaims`: false (with why) when its claims' reservations can go.
pub fn pod_needs_claims(pod: &Value, deleted: bool) -> (bool, &'static str) {
    if deleted {
        return (false, "pod got removed");
    }
    if phase_terminal(pod) {
        return (false, "pod has terminated");
    }
    if obj::is_deleting(pod) && node_name(pod).is_empty() {
        return (false, "pod got deleted before scheduling");
    }
    (true, "pod might run")
}

/// `isPodDone`: it will not run (again).
pub fn is_pod_done(pod: &Value) -> bool {
    phase_terminal(pod) || (obj::is_deleting(pod) && node_name(pod).is_empty())
}

/// Whether `pod` is scheduled (has a node).
pub fn is_scheduled(pod: &Value) -> bool {
    !node_name(pod).is_empty()
}

pub fn is_allocated(claim: &Value) -> bool {
    !claim["status"]["allocation"].is_null()
}

pub fn has_finalizer(claim: &Value) -> bool {
    claim
        .at("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

/// `owningPod`: the name and UID of the pod that controls a claim.
pub fn owning_pod(claim: &Value) -> Option<(String, String)> {
    obj::owner_ref_views(claim)
        .find(|r| r.controller && r.api_version == "v1" && r.kind == "Pod")
        .map(|r| (r.name.to_string(), r.uid.to_string()))
}

/// `claimPodOwnerIndexFunc` and the annotation test of `findPodResourceClaim`: whether
/// `claim` is the one generated for the pod with UID `pod_uid` and its entry `entry_name`.
pub fn generated_for(claim: &Value, pod_uid: &str, entry_name: &str) -> bool {
    let owned = obj::owner_ref_views(claim)
        .any(|r| r.controller && r.api_version == "v1" && r.kind == "Pod" && r.uid == pod_uid);
    owned && obj::annotation(claim, POD_CLAIM_ANNOTATION) == Some(entry_name)
}

/// The `generateName` of a claim made for `pod`'s entry `entry`: `<pod>-<entry>-`, or, past
/// 57 characters, both names cut in proportion to their lengths (without the last hyphen).
pub fn generate_name(pod: &str, entry: &str) -> String {
    let full = format!("{pod}-{entry}-");
    if full.len() <= MAX_BASE_LEN {
        return full;
    }
    let cut = |s: &str| {
        let n = s.len() * MAX_BASE_LEN / full.len();
        // Names are DNS labels (ASCII); a byte cut is a character cut.
        s.get(..n).unwrap_or(s).to_string()
    };
    format!("{}-{}", cut(pod), cut(entry))
}

fn requests(template: &Value) -> &[Value] {
    template
        .at("/spec/spec/devices/requests")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `needsAdminAccess`.
pub fn needs_admin_access(template: &Value) -> bool {
    requests(template)
        .iter()
        .any(|r| r.at("/exactly/adminAccess").and_then(Value::as_bool) == Some(true))
}

/// `hasPrioritizedList`.
pub fn has_prioritized_list(template: &Value) -> bool {
    requests(template).iter().any(|r| {
        r.get("firstAvailable")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    })
}

/// The claim made from `template` for `pod`'s entry `entry_name`: the pod as its controller,
/// the template's labels and annotations plus the pod-claim-name annotation, its spec.
pub fn new_claim(pod: &Value, entry_name: &str, template: &Value) -> Value {
    let meta = &template["spec"]["metadata"];
    let mut annotations = meta
        .get("annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    annotations.insert(POD_CLAIM_ANNOTATION.into(), entry_name.into());
    let mut metadata = Map::new();
    metadata.insert(
        "generateName".into(),
        generate_name(obj::name(pod), entry_name).into(),
    );
    metadata.insert(
        "ownerReferences".into(),
        json!([{"apiVersion": "v1", "kind": "Pod", "name": obj::name(pod),
            "uid": obj::uid(pod), "controller": true}]),
    );
    metadata.insert("annotations".into(), Value::Object(annotations));
    if let Some(l) = meta.get("labels").filter(|l| l.is_object()) {
        metadata.insert("labels".into(), l.clone());
    }
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": template["spec"]["spec"].clone(),
    })
}

/// `getAdminAccessMetricLabel`.
pub fn admin_access_label(claim: &Value) -> &'static str {
    let any = claim
        .at("/spec/devices/requests")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| r.at("/exactly/adminAccess").and_then(Value::as_bool) == Some(true));
    if any {
        "true"
    } else {
        "false"
    }
}

/// The `source` label of `dynamic_resource_allocation_resource_claims`.
pub fn source_label(claim: &Value) -> &'static str {
    if obj::annotation(claim, EXTENDED_CLAIM_ANNOTATION) == Some("true") {
        "extended_resource"
    } else if obj::annotation(claim, POD_CLAIM_ANNOTATION).is_some_and(|v| !v.is_empty()) {
        "resource_claim_template"
    } else {
        ""
    }
}

/// The claim's status entries kept for the pod's merged `resourceClaimStatuses`: those with
/// a claim name.
pub fn recorded_statuses(pod: &Value) -> Vec<(String, String)> {
    pod.at("/status/resourceClaimStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| {
            Some((
                s["name"].as_str()?.to_string(),
                s.get("resourceClaimName")?.as_str()?.to_string(),
            ))
        })
        .collect()
}
