//! statefulset-controller: pods with a stable identity per ordinal (`<set>-<ordinal>`, the
//! `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index` labels, hostname
//! and subdomain), their PersistentVolumeClaims from `volumeClaimTemplates` (made before the
//! pod, never deleted here; their owner references follow
//! `persistentVolumeClaimRetentionPolicy` so the garbage collector deletes them when the
//! policy says), OrderedReady and Parallel pod management, `.spec.ordinals.start`,
//! `minReadySeconds`, RollingUpdate with `partition` and OnDelete, the template's history as
//! ControllerRevisions (`kit::history`), and the status upstream v1.37 writes.
//!
//! Upstream v1.37 behaviour (MaxUnavailableStatefulSet and StaleControllerConsistencyStatefulSet
//! read at the emulated version, StatefulSetSemanticRevisionComparison in `semantic`, the
//! alpha Recreate strategy in `recreate`; the v1.29-v1.37 changes are listed in
//! `docs/controllers/statefulset.md`). Where this differs in form:
//! - a sync returns its writes in upstream's order as one sequence that stops at the first
//!   failure (creating a revision, then claims before their pod, then the pod), followed
//!   by the status write and the history truncation, which upstream also makes after a
//!   failed step;
//! - a new claim is created with the owner reference upstream's retention update adds right
//!   after creating the pod (one write instead of two, same object);
//! - a pod whose identity labels are wrong is patched (labels only) instead of PUT whole; a
//!   pod whose claim volumes differ from the templates is not rewritten (upstream's PUT of
//!   an existing pod's volumes is refused by the API server: volumes are immutable);

mod consistency;
mod identity;
mod metrics;
mod recreate;
mod revisions;
mod rolling;
mod semantic;
#[cfg(test)]
mod semantic_tests;
mod status;
mod sync;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_recreate;
#[cfg(test)]
mod tests_rolling;

pub use identity::{POD_INDEX_LABEL, POD_NAME_LABEL, REVISION_LABEL};

use super::kit::{self, selector};
use super::refmanager;
use super::{Action, Applied, Controller, Cx, OnError, Outcome, Watch};
use crate::api::resources::{CONTROLLERREVISIONS, PERSISTENTVOLUMECLAIMS, PODS, STATEFULSETS};
use crate::cache::{Cache, Delta};
use crate::error::{Error, Result};
use crate::obj::{self, At as _};
use serde_json::Value;

/// What the controller reads of a pod beyond its metadata (the replica controllers read the
/// same, so the pod cache keeps one shape).
pub const POD_WATCH: Watch = Watch::fields(PODS, &["/spec/nodeName", "/status"]);

/// The statefulset-controller's row in the controller table.
pub fn build(_: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    crate::metrics::register_collector("statefulset", std::sync::Arc::new(metrics::families));
    Ok(Some(super::Runnable::reconciles(
        StatefulSetController::new(),
    )))
}

pub struct StatefulSetController {
    /// The sets' selectors, for finding who selects an orphan pod.
    selectors: refmanager::SelectorIndex,
    /// The versions of its own writes per set, while StaleControllerConsistencyStatefulSet
    /// is on.
    written: consistency::Written,
    /// StatefulSetRecreateStrategy, read once at start.
    recreate_gate: bool,
}

impl Default for StatefulSetController {
    fn default() -> Self {
        Self::new()
    }
}

impl StatefulSetController {
    /// The prefix of its log lines (its row's name).
    fn name(&self) -> &'static str {
        "statefulset-controller"
    }

    pub fn new() -> Self {
        StatefulSetController {
            selectors: Default::default(),
            written: Default::default(),
            recreate_gate: crate::config::gates::enabled(recreate::GATE),
        }
    }

    /// Upstream re-reads the set from the API server once before adopting anything.
    fn can_adopt(&self, cx: &Cx, set: &Value) -> Result<()> {
        let (ns, name, uid) = (obj::namespace(set), obj::name(set), obj::uid(set));
        let fresh = cx.client.get(&STATEFULSETS, Some(ns), name)?;
        if obj::uid(&fresh) != uid {
            return Err(Error::Config(format!(
                "original StatefulSet {ns}/{name} is gone: got uid {}, wanted {uid}",
                obj::uid(&fresh)
            )));
        }
        if obj::is_deleting(&fresh) {
            return Err(Error::Config(format!("{ns}/{name} has just been deleted")));
        }
        Ok(())
    }
}

impl StatefulSetController {
    /// Upstream's `EnsureReady`: Err while an informer has not yet watched past one of the
    /// set's own writes (counted; the sync is retried through the rate limiter).
    fn ensure_ready(&self, cx: &Cx, key: &str) -> Result<()> {
        use consistency::Res;
        let read = |res: Res| {
            let w = match res {
                Res::Pods => POD_WATCH,
                Res::Claims => Watch::full(PERSISTENTVOLUMECLAIMS),
                Res::Sets => Watch::full(STATEFULSETS),
            };
            cx.cache
                .store_for(&w)
                .resource_version()
                .parse::<u64>()
                .ok()
        };
        self.written.ensure_ready(key, read).map_err(|stale| {
            metrics::observe_stale_skip(stale.res);
            Error::Config(stale.to_string())
        })
    }
}

fn selector_of(set: &Value) -> Option<Value> {
    set.at("/spec/selector").filter(|s| !s.is_null()).cloned()
}

impl Controller for StatefulSetController {
    fn watches(&self) -> Vec<Watch> {
        vec![
            Watch::full(STATEFULSETS),
            POD_WATCH,
            Watch::full(PERSISTENTVOLUMECLAIMS),
            Watch::full(CONTROLLERREVISIONS),
        ]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        if w.kind == STATEFULSETS {
            self.selectors
                .observe(d, |o| selector_of(o).filter(|s| !selector::is_empty(s)));
            return vec![obj::key(d.object())];
        }
        if w.kind != PODS {
            // Claims and revisions are read, never waited on (upstream has no handlers).
            return vec![];
        }
        kit::owners::owner_keys(
            d,
            kit::owners::Deleting::AsUpdate,
            |p, r| kit::owners::resolve(cache, STATEFULSETS, obj::namespace(p), r),
            |p| {
                let found = self.selectors.matching(p);
                if found.len() > 1 {
                    log::warn!(
                        "user error: more than one StatefulSet is selecting pods with labels: {:?}",
                        obj::labels(p)
                    );
                }
                found
            },
        )
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        if metrics::consistency_gate_on() {
            self.ensure_ready(cx, key)?;
        }
        let Some(set) = cx.cache.store(STATEFULSETS).get(key) else {
            self.written.clear(key);
            log::info!("{}: StatefulSet {key} has been deleted", self.name());
            return Ok(Outcome::none());
        };
        let Some(sel) = selector_of(&set).filter(selector::is_valid) else {
            log::warn!("{}: {key}: invalid or missing selector", self.name());
            return Ok(Outcome::none());
        };
        sync::Sync::new(self, cx, &set, &sel).run()
    }

    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        let Applied::Done(Some(answer)) = result else {
            return;
        };
        if !metrics::consistency_gate_on() {
            return;
        }
        let (kind, status) = match action {
            Action::Create { kind, .. } | Action::Update { kind, .. } => (*kind, false),
            Action::Patch {
                kind, subresource, ..
            } => (*kind, subresource.is_some()),
            Action::UpdateSubresource { kind, .. } => (*kind, true),
            _ => return,
        };
        let Ok(rv) = obj::resource_version(answer).parse::<u64>() else {
            return;
        };
        use consistency::Res;
        match kind {
            // Pods are recorded for their controller (a released pod is not recorded).
            k if k == PODS => {
                if let Some(r) = obj::controller_ref(answer) {
                    self.written.wrote(key, Some(r.uid), Res::Pods, rv);
                }
            }
            k if k == PERSISTENTVOLUMECLAIMS => self.written.wrote(key, None, Res::Claims, rv),
            k if k == STATEFULSETS && status => {
                self.written
                    .wrote(key, Some(obj::uid(answer)), Res::Sets, rv)
            }
            _ => {}
        }
    }

    fn on_error(&self, action: &Action, err: &Error) -> OnError {
        match action {
            // A child gone (or its owner reference already invalid) needs nothing more.
            Action::Patch { .. } if err.is_not_found() || err.code() == Some(422) => {
                OnError::Ignore
            }
            Action::Create { .. } if err.is_namespace_terminating() => OnError::Ignore,
            // Upstream returns every other failure, AlreadyExists included, and retries.
            _ => OnError::Retry,
        }
    }
}
