//! The set's status as upstream's `updateStatus`, `completeUpdate` and
//! `updateStatefulSetStatus` write it.

use super::identity as id;
use super::recreate;
use super::sync::{policy, Counts, Sync};
use crate::api::resources::STATEFULSETS;
use crate::controllers::kit::conditions;
use crate::controllers::Action;
use crate::obj::{At as _, Obj};
use serde_json::{json, Value};

impl Sync<'_> {
    /// Upstream's `updateStatefulSetStatus`: the status as upstream computes it whatever the
    /// writes did, written when it differs from the set's.
    pub(super) fn status_update(
        &self,
        counts: &Counts,
        current_name: &str,
        update_name: &str,
        collision: i64,
        progressing: Option<recreate::Progress>,
    ) -> Option<Action> {
        let set = self.set;
        let replicas = id::replicas(set);
        if crate::config::gates::enabled("MaxUnavailableStatefulSet") {
            if let Ok(max) = id::max_unavailable(set, replicas) {
                super::metrics::set_max_unavailable(&self.ns, &self.name, policy(set), max);
            }
        }
        let st = set.get("status").cloned().unwrap_or_else(|| json!({}));
        // Conditions carried over (v1.37), the Recreate strategy's `Progressing` set.
        let old_conds: Vec<Value> = st
            .get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut conds = old_conds.clone();
        let now = crate::compat::timefmt::rfc3339(self.cx.now);
        let progress = |conds: &mut Vec<Value>, c: recreate::Progress| {
            let (status, reason, message) = c;
            let c = conditions::Condition {
                type_: "Progressing",
                status,
                reason,
                message,
            };
            conditions::set_in_place(conds, &c, &now);
        };
        if let Some(c) = progressing {
            progress(&mut conds, c);
        }
        // Upstream's `completeUpdate` (every strategy since v1.37; RollingUpdate only before).
        let (mut current_out, mut current_revision) = (counts.current, current_name);
        if counts.updated == replicas && counts.ready == replicas && counts.replicas == replicas {
            current_out = counts.updated;
            current_revision = update_name;
            if recreate::is_recreate(set)
                && self.ctrl.recreate_gate
                && conditions::get(&conds, "Progressing").is_some()
            {
                progress(
                    &mut conds,
                    (
                        "False",
                        recreate::COMPLETED,
                        "All pods recreated successfully",
                    ),
                );
            }
        }
        let int = |f: &str| st.get(f).and_then(Value::as_i64).unwrap_or(0);
        let s_str = |f: &str| st.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        let generation = set
            .at("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let inconsistent = generation > int("observedGeneration")
            || counts.replicas != int("replicas")
            || current_out != int("currentReplicas")
            || counts.ready != int("readyReplicas")
            || counts.updated != int("updatedReplicas")
            || current_revision != s_str("currentRevision")
            || counts.available != int("availableReplicas")
            || update_name != s_str("updateRevision")
            || conds != old_conds;
        if !inconsistent {
            return None;
        }
        let mut updated = set.clone();
        updated["status"] = json!({
            "observedGeneration": generation,
            "replicas": counts.replicas,
            "readyReplicas": counts.ready,
            "currentReplicas": current_out,
            "updatedReplicas": counts.updated,
            "currentRevision": current_revision,
            "updateRevision": update_name,
            "collisionCount": collision,
            "availableReplicas": counts.available,
        });
        if !conds.is_empty() {
            updated["status"]["conditions"] = json!(conds);
        }
        Some(Action::UpdateSubresource {
            kind: STATEFULSETS,
            object: updated,
            subresource: "status",
        })
    }

    pub(super) fn counts<'p>(
        &self,
        pods: impl Iterator<Item = &'p Obj>,
        current: &str,
        update: &str,
    ) -> Counts {
        let min_ready = self
            .set
            .at("/spec/minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let mut c = Counts::default();
        for p in pods {
            let created = id::is_created(p);
            if created {
                c.replicas += 1;
            }
            if id::is_running_and_ready(p) {
                c.ready += 1;
                if id::is_running_and_available(p, min_ready, self.cx.now) {
                    c.available += 1;
                }
            }
            if created && !id::is_terminating(p) {
                let rev = id::revision_of(p);
                if rev == current {
                    c.current += 1;
                }
                if rev == update {
                    c.updated += 1;
                }
            }
        }
        c
    }
}
