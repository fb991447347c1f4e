//! The set's ControllerRevisions in one sync (upstream's `adoptOrphanRevisions`,
//! `getStatefulSetRevisions` and `truncateHistory`).

use super::identity as id;
use super::sync::Sync;
use crate::api::client::{DeleteOptions, PatchType};
use crate::api::resources::{CONTROLLERREVISIONS, STATEFULSETS};
use crate::cache::Store;
use crate::controllers::kit::history;
use crate::controllers::Action;
use crate::error::Result;
use crate::obj::{self, At as _, Obj};
use serde_json::{json, Value};
use std::collections::BTreeSet;

impl Sync<'_> {
    /// Revisions its selector matches without a controller are adopted (patches into `pre`).
    pub(super) fn adopt_orphan_revisions(
        &self,
        revisions: &[Obj],
        pre: &mut Vec<Action>,
    ) -> Result<()> {
        let set = self.set;
        let orphans: Vec<&Obj> = revisions
            .iter()
            .filter(|r| obj::controller_ref(r).is_none())
            .collect();
        if orphans.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.ctrl.can_adopt(self.cx, set) {
            return Err(crate::Error::Config(format!(
                "can't adopt ControllerRevisions: {e}"
            )));
        }
        for r in orphans {
            pre.push(Action::Patch {
                kind: CONTROLLERREVISIONS,
                namespace: self.ns.clone(),
                name: obj::name(r).to_string(),
                patch_type: PatchType::Strategic,
                patch: history::adopt_patch(&STATEFULSETS, set, r),
                subresource: None,
            });
        }
        Ok(())
    }

    /// The update revision and the collision count: the newest revision equal to the set's
    /// template, an older equal one renumbered, the newest one when it equals the template
    /// once defaulted (`semantic`), or a new one (named past any collision).
    /// Its write, if any, goes into `steps`.
    pub(super) fn update_revision(
        &self,
        revstore: &Store,
        revisions: &[Obj],
        steps: &mut Vec<Action>,
    ) -> (Value, i64) {
        let set = self.set;
        let mut collision = set
            .at("/status/collisionCount")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let next = history::next_number(revisions);
        let data = id::revision_data(set);
        let labels = set
            .at("/spec/template/metadata/labels")
            .and_then(Value::as_object);
        let mut update_rev = history::new_revision(
            &STATEFULSETS,
            set,
            labels,
            obj::annotations(set),
            &data,
            next,
            collision,
        );
        let equal: Vec<&Obj> = revisions
            .iter()
            .filter(|r| history::equal(r, &update_rev))
            .collect();
        match (equal.last(), revisions.last()) {
            (Some(e), Some(last)) if history::equal(last, e) => {
                update_rev = (**last).clone();
            }
            (Some(e), _) => {
                let mut renumbered = (***e).clone();
                renumbered["revision"] = json!(next);
                steps.push(Action::Update {
                    kind: CONTROLLERREVISIONS,
                    object: renumbered.clone(),
                });
                update_rev = renumbered;
            }
            // Upstream's `setMatchesLatestExistingRevision`: the newest revision, restored and
            // defaulted, is the set's template (written by an older release).
            (None, Some(last))
                if crate::config::gates::enabled("StatefulSetSemanticRevisionComparison")
                    && super::semantic::matches_latest(set, last) =>
            {
                update_rev = (**last).clone();
            }
            (None, _) => loop {
                let name = obj::name(&update_rev).to_string();
                match revstore.get_in(&self.ns, &name) {
                    Some(existing) if history::equal(&existing, &update_rev) => {
                        update_rev = (*existing).clone();
                        break;
                    }
                    Some(_) => {
                        collision += 1;
                        update_rev = history::new_revision(
                            &STATEFULSETS,
                            set,
                            labels,
                            obj::annotations(set),
                            &data,
                            next,
                            collision,
                        );
                    }
                    None => {
                        steps.push(Action::Create {
                            kind: CONTROLLERREVISIONS,
                            namespace: self.ns.clone(),
                            object: update_rev.clone(),
                        });
                        break;
                    }
                }
            },
        }
        (update_rev, collision)
    }

    /// History: the deletes that keep `revisionHistoryLimit` revisions besides the live ones
    /// (current, update, and any a pod runs).
    pub(super) fn truncate_history(
        &self,
        revisions: &[Obj],
        pods: &[Obj],
        current_name: String,
        update_name: String,
    ) -> Vec<Action> {
        let mut live: BTreeSet<String> = [current_name, update_name].into();
        live.extend(pods.iter().map(|p| id::revision_of(p).to_string()));
        let limit = self
            .set
            .at("/spec/revisionHistoryLimit")
            .and_then(Value::as_i64)
            .unwrap_or(10);
        history::to_truncate(revisions, &live, limit)
            .into_iter()
            .map(|r| Action::Delete {
                kind: CONTROLLERREVISIONS,
                namespace: self.ns.clone(),
                name: obj::name(r).to_string(),
                options: DeleteOptions::default(),
            })
            .collect()
    }
}
