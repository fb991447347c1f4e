//! Which pods a rolling update deletes in one sync (upstream's tail of `updateStatefulSet`,
//! and `updateStatefulSetAfterInvariantEstablished` with MaxUnavailableStatefulSet).

use super::identity::{self as id, partition};
use super::sync::Slot;
use crate::obj::{self, At as _, Obj};
use serde_json::Value;

/// The pods a rolling update deletes in this sync, highest ordinal first (upstream's tail of
/// `updateStatefulSet`, and `updateStatefulSetAfterInvariantEstablished` when
/// MaxUnavailableStatefulSet is on). Slots without a pod are unavailable and never deleted.
pub(super) fn rolling_targets(
    set: &Value,
    slots: &[Slot],
    update_name: &str,
    max_unavailable_gate: bool,
    now: std::time::SystemTime,
) -> std::result::Result<Vec<String>, String> {
    let min_ready = set
        .at("/spec/minReadySeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let update_min = partition(set).unwrap_or(0).max(0) as usize;
    let unavailable = |p: Option<&Obj>| id::is_unavailable(p.map(|p| &**p), min_ready, now);
    let old = |p: &Obj| id::revision_of(p) != update_name;
    let in_scope = || slots.iter().skip(update_min).rev();
    let mut out = Vec::new();
    if !max_unavailable_gate {
        // One pod at a time: the highest old one, once every pod above it is available.
        for s in in_scope() {
            let Some(p) = &s.pod else {
                break;
            };
            if old(p) && !id::is_terminating(p) {
                out.push(obj::name(p).to_string());
                break;
            }
            if unavailable(Some(p)) {
                break;
            }
        }
        return Ok(out);
    }
    let max = id::max_unavailable(set, id::replicas(set))?;
    let parallel = set.at("/spec/podManagementPolicy").and_then(Value::as_str) == Some("Parallel");
    let unavailable_count = slots.iter().filter(|s| unavailable(s.pod.as_ref())).count() as i64;
    let needing_update = slots
        .iter()
        .filter_map(|s| s.pod.as_ref())
        .filter(|p| parallel && unavailable(Some(p)) && old(p) && !id::is_terminating(p))
        .count();
    if unavailable_count >= max && needing_update == 0 {
        return Ok(out);
    }
    let pods = || in_scope().filter_map(|s| s.pod.as_ref());
    if parallel {
        // Old pods already unavailable first, then available old ones within the budget.
        for p in pods() {
            if old(p) && !id::is_running_and_available(p, min_ready, now) && !id::is_terminating(p)
            {
                out.push(obj::name(p).to_string());
            }
        }
        let budget = (max - unavailable_count).max(0) as usize;
        out.extend(
            pods()
                .filter(|p| old(p) && !unavailable(Some(p)))
                .take(budget)
                .map(|p| obj::name(p).to_string()),
        );
        return Ok(out);
    }
    let budget = (max - unavailable_count).max(0) as usize;
    out.extend(
        pods()
            .filter(|p| old(p) && !id::is_terminating(p))
            .take(budget)
            .map(|p| obj::name(p).to_string()),
    );
    Ok(out)
}
