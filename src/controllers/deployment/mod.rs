//! deployment-controller: a ReplicaSet per pod template, rolled out with RollingUpdate or
//! Recreate, scaled proportionally, with revisions, history cleanup and the Progressing /
//! Available / ReplicaFailure conditions (upstream's pkg/controller/deployment), as of v1.37:
//! `status.terminatingReplicas` summed from the ReplicaSets (gate
//! DeploymentReplicaSetTerminatingReplicas), `ScalingReplicaSet` messages
//! `from <old> to <new>`, ReplicaSet names cut to 253 characters (the changes since v1.28
//! are listed in docs/controllers/deployment.md).
//!
//! The pass itself lives in `sync.rs` (with `rolling.rs`, `recreate.rs`, `progress.rs`); the
//! arithmetic and typed views in `util.rs`. This file holds the watches, the ReplicaSet
//! claim (adoption and release) and the controller's error handling.

pub mod progress;
pub mod recreate;
pub mod rolling;
pub mod sync;
pub mod util;

use super::kit;
use super::refmanager::SelectorIndex;
use super::{
    refmanager, Action, Applied, Controller, Cx, EventSpec, EventType, ObjectRef, OnError, Outcome,
    Watch,
};
use crate::api::resources::{DEPLOYMENTS, PODS, REPLICASETS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::{Error, Result};
use crate::obj::At as _;
use crate::obj::{self, Obj};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use sync::{FailureNote, Plan};
use util::{Deployment, ReplicaSet};

pub const NAME: &str = "deployment-controller";

/// A ReplicaSet creation that failed, remembered until the next pass reports it.
#[derive(Debug, Default, Clone)]
struct CreateFailure {
    message: Option<String>,
    count: u32,
}

/// Its row in the controller table.
pub fn build(_: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    Ok(Some(super::Runnable::reconciles(
        DeploymentController::new(),
    )))
}

pub struct DeploymentController {
    /// Deployment key -> the last failed creation of its new ReplicaSet.
    failures: Mutex<HashMap<String, CreateFailure>>,
    /// Deployment key -> the ReplicaSet a pass created (name, replicas), until the next pass
    /// finds it.
    created: Mutex<HashMap<String, (String, i64)>>,
    /// The Deployments' selectors, for upstream's GetDeploymentsForReplicaSet: the
    /// Deployments whose (valid, non-empty) selector matches an orphan ReplicaSet.
    selectors: SelectorIndex,
}

impl Default for DeploymentController {
    fn default() -> Self {
        Self::new()
    }
}

impl DeploymentController {
    pub fn new() -> Self {
        DeploymentController {
            failures: Mutex::new(HashMap::new()),
            created: Mutex::new(HashMap::new()),
            selectors: SelectorIndex::default(),
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, CreateFailure>> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn created(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, i64)>> {
        self.created.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The UID of an object's controller, without allocating.
fn controller_uid(o: &Value) -> Option<&str> {
    o.at("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")?
        .as_str()
}

/// The Deployment a controller reference names, if it is in the cache with that UID.
fn resolve(cache: &Cache, ns: &str, r: &obj::OwnerRefView) -> Option<String> {
    kit::owners::resolve(cache, DEPLOYMENTS, ns, r)
}

/// A Deployment's selector as upstream's GetDeploymentsForReplicaSet matches with it: None
/// when it is invalid or empty (it then selects nothing).
fn selecting_selector(d: &Value) -> Option<Value> {
    d.at("/spec/selector")
        .filter(|s| super::kit::selector::is_valid(s) && !super::kit::selector::is_empty(s))
        .cloned()
}

impl DeploymentController {
    fn replica_set_keys(&self, d: &Delta, cache: &Cache) -> Vec<String> {
        kit::owners::owner_keys(
            d,
            kit::owners::Deleting::AsUpdate,
            |rs, r| resolve(cache, obj::namespace(rs), r),
            |rs| self.selectors.matching(rs),
        )
    }

    /// A deleted pod wakes its Recreate Deployment once none of its pods remain.
    fn pod_keys(&self, pod: &Value, cache: &Cache) -> Vec<String> {
        let Some(r) = obj::controller_ref(pod).filter(|r| r.kind == "ReplicaSet") else {
            return vec![];
        };
        let ns = obj::namespace(pod);
        let rss = cache.store(REPLICASETS);
        let rs = rss.get_metadata_in(ns, r.name);
        let Some(rs) = rs.filter(|rs| obj::uid(rs) == r.uid) else {
            return vec![];
        };
        let Some(key) = obj::controller_ref(&rs).and_then(|r| resolve(cache, ns, &r)) else {
            return vec![];
        };
        let d = cache
            .store(DEPLOYMENTS)
            .get_fields(&key, &["/spec/strategy", "/spec/selector"]);
        let Some(d) = d else {
            return vec![];
        };
        if d.at("/spec/strategy/type").and_then(Value::as_str) != Some("Recreate") {
            return vec![];
        }
        let selector = d.at("/spec/selector");
        let pods = cache.store(PODS);
        let duid = obj::uid(&d);
        let any_pod = rss
            .by_owner(duid)
            .iter()
            .filter(|rs| controller_uid(rs) == Some(duid))
            .any(|rs| {
                let uid = obj::uid(rs);
                pods.by_owner(uid).iter().any(|p| {
                    controller_uid(p) == Some(uid)
                        && selector.is_some_and(|s| obj::selector_matches(s, p))
                })
            });
        if any_pod {
            vec![]
        } else {
            vec![key]
        }
    }

    /// Upstream's getReplicaSetsForDeployment: the ReplicaSets of the namespace this
    /// Deployment owns, adopting matching orphans (after a live check that the Deployment
    /// is not being deleted) and releasing owned ones that stopped matching.
    fn claim_replica_sets(
        &self,
        cx: &Cx,
        d: &Deployment,
        actions: &mut Vec<Action>,
    ) -> Result<Vec<ReplicaSet>> {
        let mut owned = Vec::new();
        let mut adoption_checked = false;
        let selector = d.selector.as_ref();
        let takeable = |m: &Value| refmanager::may_take(&d.obj, selector, m);
        for rs in cx
            .cache
            .store(REPLICASETS)
            .claimable(&d.namespace, &d.uid, takeable)
        {
            match refmanager::claim(&d.obj, selector, &rs) {
                refmanager::Claim::Owned => owned.push(ReplicaSet::parse(&rs)),
                refmanager::Claim::Adopt => {
                    if !adoption_checked {
                        refmanager::recheck_deletion(cx.client, &DEPLOYMENTS, &d.obj)?;
                        adoption_checked = true;
                    }
                    actions.push(refmanager::adopt_action(
                        REPLICASETS,
                        &d.namespace,
                        &rs,
                        &DEPLOYMENTS,
                        &d.obj,
                    ));
                    owned.push(ReplicaSet::parse(&rs));
                }
                refmanager::Claim::Release => actions.push(refmanager::release_action(
                    REPLICASETS,
                    &d.namespace,
                    &rs,
                    &d.uid,
                )),
                refmanager::Claim::Ignore => {}
            }
        }
        Ok(owned)
    }

    fn selecting_all(&self, d: &Deployment) -> Outcome {
        let mut actions = vec![Action::Event(EventSpec {
            involved: ObjectRef::of(&DEPLOYMENTS, &d.obj),
            event_type: EventType::Warning,
            reason: "SelectingAll".into(),
            message: "This deployment is selecting all pods. A non-empty selector is required."
                .into(),
        })];
        if d.status.observed_generation < d.generation {
            let mut o = (*d.obj).clone();
            let mut s = d.status.clone();
            s.observed_generation = d.generation;
            o["status"] = s.to_json();
            actions.push(Action::UpdateSubresource {
                kind: DEPLOYMENTS,
                object: o,
                subresource: "status",
            });
        }
        Outcome::with(actions)
    }
}

fn is_owner_patch(patch: &Value) -> bool {
    patch.at("/metadata/ownerReferences").is_some()
}

impl Controller for DeploymentController {
    fn watches(&self) -> Vec<Watch> {
        vec![
            Watch::full(DEPLOYMENTS),
            Watch::full(REPLICASETS),
            super::replicaset::POD_WATCH,
        ]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        if w.kind == DEPLOYMENTS {
            self.selectors.observe(d, selecting_selector);
            vec![obj::key(d.object())]
        } else if w.kind == REPLICASETS {
            self.replica_set_keys(d, cache)
        } else if w.kind == PODS && d.kind == DeltaKind::Deleted {
            self.pod_keys(d.object(), cache)
        } else {
            vec![]
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let (ns, name) = obj::split_key(key);
        let Some(o): Option<Obj> = cx.cache.store(DEPLOYMENTS).get_in(ns, name) else {
            log::debug!("{NAME}: deployment {key} has been deleted");
            self.failures().remove(key);
            self.created().remove(key);
            return Ok(Outcome::none());
        };
        let d = match Deployment::parse(o) {
            Ok(d) => d,
            Err(e) => {
                log::warn!("{NAME}: skipping deployment {key}: {e}");
                return Ok(Outcome::none());
            }
        };
        let Some(selector) = d.selector.as_ref() else {
            log::warn!("{NAME}: skipping deployment {key}: no spec.selector");
            return Ok(Outcome::none());
        };
        if super::kit::selector::is_empty(selector) {
            return Ok(self.selecting_all(&d));
        }
        if !super::kit::selector::is_valid(selector) {
            log::warn!("{NAME}: skipping deployment {key}: invalid label selector");
            return Ok(Outcome::none());
        }

        let mut actions = Vec::new();
        let rss = self.claim_replica_sets(cx, &d, &mut actions)?;
        let failure = self.failures().get(key).cloned();
        let mut plan = Plan::new(cx.cache, cx.now, d, rss);
        plan.create_failure = failure.and_then(|f| Some((f.message?, f.count)));
        plan.created = self.created().get(key).cloned();
        // A halted pass still ends with the status update of what it changed.
        let _ = plan.sync_deployment();
        let (planned, requeue_after, note) = plan.finish();
        match note {
            FailureNote::None => {}
            FailureNote::Reported => {
                if let Some(f) = self.failures().get_mut(key) {
                    f.message = None;
                }
            }
            FailureNote::Resolved => {
                self.failures().remove(key);
                self.created().remove(key);
            }
        }
        actions.extend(planned);
        Ok(Outcome {
            actions,
            requeue_after,
            ..Outcome::default()
        })
    }

    /// How a creation of a new ReplicaSet went: remembered for the next pass of `key`.
    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        let Action::Create { kind, object, .. } = action else {
            return;
        };
        if *kind != REPLICASETS {
            return;
        }
        match result {
            Applied::Done(answer) => {
                let rs = answer.unwrap_or(object);
                let replicas = rs.at("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
                self.created()
                    .insert(key.to_string(), (obj::name(rs).to_string(), replicas));
            }
            Applied::Failed(e) if !e.is_already_exists() && !e.is_namespace_terminating() => {
                self.remember_create_failure(key, object, e);
            }
            _ => {}
        }
    }

    fn on_error(&self, action: &Action, err: &Error) -> OnError {
        if err.is_namespace_terminating() {
            return OnError::Ignore;
        }
        match action {
            Action::Patch { kind, patch, .. } if *kind == REPLICASETS && is_owner_patch(patch) => {
                // The ReplicaSet went away or was replaced: nothing to adopt or release.
                let gone = err.is_not_found() || matches!(err.code(), Some(409 | 422));
                if gone {
                    OnError::Ignore
                } else {
                    OnError::Retry
                }
            }
            _ => OnError::Retry,
        }
    }
}

impl DeploymentController {
    fn remember_create_failure(&self, key: &str, rs: &Value, err: &Error) {
        let why = match err {
            Error::Api { message, .. } => message.clone(),
            other => other.to_string(),
        };
        let message = format!(
            "Failed to create new replica set {}: {why}",
            sync::quoted(obj::name(rs))
        );
        let mut f = self.failures();
        let e = f.entry(key.to_string()).or_default();
        e.message = Some(message);
        e.count = e.count.saturating_add(1);
    }
}

#[cfg(test)]
mod tests;
