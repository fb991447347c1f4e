//! `updateStrategy.type: Recreate` (v1.37 alpha, StatefulSetRecreateStrategy, off by
//! default; the API server takes the type only with its own gate on). Upstream's
//! `recreateDeleteAndWait`: every created pod (in range or past it) not on the update
//! revision is deleted at once, and no pod is made until all of them are gone; the
//! `Progressing` condition says `RecreateInProgress` ("Deleting old revision pods", then
//! "Waiting for new-revision pods to be created") until every replica is updated and ready,
//! when it turns `False` with `RecreateCompleted`. With the gate off a Recreate set gets an
//! `UnknownStrategy` Warning at each sync and nothing else (no pod, no status).

use super::identity as id;
use super::sync::{Plan, Slot, Sync};
use crate::controllers::{Action, EventType};
use crate::obj::{self, Obj};

pub const GATE: &str = "StatefulSetRecreateStrategy";
pub const IN_PROGRESS: &str = "RecreateInProgress";
pub const COMPLETED: &str = "RecreateCompleted";

/// The `Progressing` condition a sync sets (status, reason, message).
pub type Progress = (&'static str, &'static str, &'static str);

pub fn is_recreate(set: &serde_json::Value) -> bool {
    id::update_strategy(set) == "Recreate"
}

impl Sync<'_> {
    /// A Recreate set while the gate is off: upstream's Warning and error text.
    pub(super) fn unknown_strategy(&self) -> (Action, String) {
        let msg = format!(
            "statefulset {}/{} uses Recreate strategy but feature gate {GATE} is disabled",
            self.ns,
            obj::name(self.set)
        );
        let ev = self.event(EventType::Warning, "UnknownStrategy", msg.clone());
        (ev, msg)
    }

    /// Upstream's `recreateDeleteAndWait`: the deletes of old-revision pods (into `plan`);
    /// true once none is left, when pods may be made.
    pub(super) fn recreate_delete_and_wait(
        &self,
        plan: &mut Plan,
        slots: &[Slot],
        condemned: &[Obj],
        update_name: &str,
    ) -> bool {
        let pods = slots
            .iter()
            .filter_map(|s| s.pod.as_ref())
            .chain(condemned.iter())
            .filter(|p| id::is_created(p) && id::revision_of(p) != update_name);
        let mut in_progress = false;
        let mut deletes = Vec::new();
        for p in pods {
            in_progress = true;
            if id::is_terminating(p) {
                continue;
            }
            log::debug!(
                "{}: Recreate: deleting old revision pod {}/{}",
                self.ctrl.name(),
                self.ns,
                obj::name(p)
            );
            deletes.extend(super::sync::seq(self.delete_pod(obj::name(p))));
        }
        if !deletes.is_empty() {
            plan.steps.push(Action::SlowStart(deletes));
        }
        if in_progress {
            plan.progressing = Some(("True", IN_PROGRESS, "Deleting old revision pods"));
        }
        !in_progress
    }
}
