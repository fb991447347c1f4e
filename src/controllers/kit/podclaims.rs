//! The claims a pod uses, as upstream's `dynamic-resource-allocation/resourceclaim` helpers
//! tell them (`Name`, `PodClaims`, `IsForPod` without PodGroups, `IsReservedForPod`): read by
//! the resource claim controller and the device taint eviction controller. Pure.

use crate::obj::{self, At as _};
use serde_json::Value;

/// Why no claim name can be told for an entry of `spec.resourceClaims`.
#[derive(Debug, Clone, PartialEq)]
pub enum NameError {
    /// A template entry whose claim is not recorded in `status.resourceClaimStatuses` yet.
    NotCreated(String),
    /// An entry with neither a claim name nor a template name (a newer API).
    Unsupported(String),
}

impl std::fmt::Display for NameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NameError::NotCreated(m) | NameError::Unsupported(m) => f.write_str(m),
        }
    }
}

/// `resourceclaim.Name`: the claim an entry names (None: recorded as not needed) and whether
/// its owner must be checked (a generated claim).
pub fn claim_name(pod: &Value, entry: &Value) -> Result<(Option<String>, bool), NameError> {
    if let Some(n) = entry.get("resourceClaimName").and_then(Value::as_str) {
        return Ok((Some(n.to_string()), false));
    }
    if entry
        .get("resourceClaimTemplateName")
        .and_then(Value::as_str)
        .is_some()
    {
        let name = entry["name"].as_str().unwrap_or("");
        let statuses = pod
            .at("/status/resourceClaimStatuses")
            .and_then(Value::as_array);
        for s in statuses.into_iter().flatten() {
            if s["name"].as_str() == Some(name) {
                let n = s.get("resourceClaimName").and_then(Value::as_str);
                return Ok((n.map(str::to_string), true));
            }
        }
        return Err(NameError::NotCreated(format!(
            "pod \"{}/{}\": ResourceClaim not created yet",
            obj::namespace(pod),
            obj::name(pod)
        )));
    }
    Err(NameError::Unsupported(format!(
        "pod \"{}/{}\", spec.resourceClaim {}: none of the supported fields are set",
        obj::namespace(pod),
        obj::name(pod),
        crate::compat::quote::go_quote(entry["name"].as_str().unwrap_or(""))
    )))
}

/// The pod's entries of `spec.resourceClaims`.
pub fn entries(pod: &Value) -> &[Value] {
    pod.at("/spec/resourceClaims")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `resourceclaim.PodClaims`: the names of the claims a pod uses that can be told, the
/// scheduler's extended resource claim last.
pub fn pod_claims(pod: &Value) -> Vec<String> {
    claims_of(pod).into_iter().map(|(n, _)| n).collect()
}

/// `resourceclaim.PodClaims` as it yields them: each name with whether the claim's owner
/// must be checked (`IsForPod`): a generated claim, or the scheduler's extended resource
/// claim (last).
pub fn claims_of(pod: &Value) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = entries(pod)
        .iter()
        .filter_map(|e| match claim_name(pod, e) {
            Ok((Some(n), check)) => Some((n, check)),
            _ => None,
        })
        .collect();
    if let Some(n) = pod
        .at("/status/extendedResourceClaimStatus/resourceClaimName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        out.push((n.to_string(), true));
    }
    out
}

/// `resourceclaim.IsForPod` without PodGroups: None when the pod controls the claim, else why not.
pub fn not_for_pod(pod: &Value, claim: &Value) -> Option<String> {
    let (cns, cn) = (obj::namespace(claim), obj::name(claim));
    let (pns, pn) = (obj::namespace(pod), obj::name(pod));
    if cns != pns {
        return Some(format!(
            "ResourceClaim {cns}/{cn} is not in the same namespace as Pod {pns}/{pn}"
        ));
    }
    let controlled = obj::controller_ref(claim).is_some_and(|r| r.uid == obj::uid(pod));
    (!controlled).then(|| {
        format!("ResourceClaim {cns}/{cn} was not created for Pod {pns}/{pn} (Pod is not owner)")
    })
}

/// `status.reservedFor` of a claim.
pub fn reserved_for(claim: &Value) -> &[Value] {
    claim
        .at("/status/reservedFor")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `resourceclaim.IsReservedForPod`.
pub fn is_reserved_for(pod: &Value, claim: &Value) -> bool {
    let uid = obj::uid(pod);
    reserved_for(claim)
        .iter()
        .any(|r| r["uid"].as_str() == Some(uid))
}
