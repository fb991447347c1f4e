//! The annotations a Deployment keeps on its ReplicaSets: revision and its history, desired
//! and max replicas, and the Deployment's own annotations copied over.

use super::*;
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------------
// annotations

fn skip_copy_annotation(k: &str) -> bool {
    matches!(
        k,
        LAST_APPLIED
            | REVISION
            | REVISION_HISTORY
            | DESIRED_REPLICAS
            | MAX_REPLICAS
            | DEPRECATED_ROLLBACK_TO
    )
}

/// Copy the Deployment's annotations (but the revision/replica ones and the apply one) to a
/// ReplicaSet's. Returns whether anything changed.
fn copy_deployment_annotations(d: &Deployment, rs: &mut BTreeMap<String, String>) -> bool {
    let mut changed = false;
    for (k, v) in &d.annotations {
        if skip_copy_annotation(k) || rs.get(k) == Some(v) {
            continue;
        }
        rs.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// Upstream's SetReplicasAnnotations.
pub fn set_replicas_annotations(a: &mut BTreeMap<String, String>, desired: i64, max: i64) -> bool {
    let mut updated = false;
    for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let s = v.to_string();
        if a.get(k) != Some(&s) {
            a.insert(k.into(), s);
            updated = true;
        }
    }
    updated
}

/// Upstream's ReplicasAnnotationsNeedUpdate.
pub fn replicas_annotations_need_update(
    a: &BTreeMap<String, String>,
    desired: i64,
    max: i64,
) -> bool {
    a.get(DESIRED_REPLICAS) != Some(&desired.to_string())
        || a.get(MAX_REPLICAS) != Some(&max.to_string())
}

/// Upstream's SetNewReplicaSetAnnotations: copy the Deployment's annotations, raise the
/// revision to `new_revision` (remembering the previous one in the revision history), and
/// for a ReplicaSet about to be created, the replica annotations. Returns whether anything
/// changed.
pub fn set_new_rs_annotations(
    d: &Deployment,
    rs: &mut BTreeMap<String, String>,
    new_revision: i64,
    exists: bool,
    history_limit_chars: usize,
) -> bool {
    let mut changed = copy_deployment_annotations(d, rs);
    let old = rs.get(REVISION).cloned();
    let old_int = match old.as_deref() {
        None | Some("") => 0,
        Some(s) => match s.parse::<i64>() {
            Ok(v) => v,
            Err(_) => {
                log::info!("deployment-controller: replica set revision {s:?} is not a number");
                return false;
            }
        },
    };
    if old_int < new_revision {
        rs.insert(REVISION.into(), new_revision.to_string());
        changed = true;
    }
    if let Some(old) = old.filter(|_| old_int < new_revision) {
        let history = rs.get(REVISION_HISTORY).cloned().unwrap_or_default();
        let parts: Vec<&str> = history.split(',').collect();
        if parts[0].is_empty() {
            rs.insert(REVISION_HISTORY.into(), old);
        } else {
            let mut total = history.len() + old.len() + 1;
            let mut start = 0;
            while total > history_limit_chars && start < parts.len() {
                total -= parts[start].len() + 1;
                start += 1;
            }
            if total <= history_limit_chars {
                let mut kept: Vec<&str> = parts[start..].to_vec();
                kept.push(&old);
                rs.insert(REVISION_HISTORY.into(), kept.join(","));
            } else {
                log::info!(
                    "deployment-controller: not appending revision: history length limit reached"
                );
            }
        }
    }
    if !exists && set_replicas_annotations(rs, d.replicas, d.replicas + d.max_surge()) {
        changed = true;
    }
    changed
}
