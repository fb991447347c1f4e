//! job-controller: run a Job's pods to completion (upstream v1.28's `pkg/controller/job`).
//!
//! - NonIndexed and Indexed completion modes, parallelism and completions, pods created in
//!   slow-start batches with the `batch.kubernetes.io/job-tracking` finalizer (Indexed: the
//!   completion index annotation and label, `JOB_COMPLETION_INDEX`, hostname, `<job>-<ix>-`
//!   names), at most 500 creations or deletions per sync;
//! - suspend and resume (`Suspended` condition, Events, startTime reset), activeDeadlineSeconds,
//!   backoffLimit (and restart counts with restartPolicy OnFailure) with the pod-recreation
//!   backoff ([`backoff`]), podFailurePolicy ([`policy`]), `FailureTarget` then `Failed`, or
//!   `Complete`;
//! - status counters through `uncountedTerminatedPods` and the tracking finalizer, as
//!   [`sync`] explains: a finalizer is removed only after the pod is in the Job's status;
//! - pods left with the tracking finalizer by a deleted or finished Job, or without a
//!   controller, get it removed (upstream's orphan queue; here keys `orphan:<ns>/<name>` in the
//!   one queue).
//!
//! Created and deleted pods not yet seen by the watch are waited for as upstream's
//! expectations do (`kit::inflight`); the pod-recreation backoff record lives in memory as
//! upstream's does (lost on restart, as there).

pub mod backoff;
mod claim;
pub mod finish;
pub mod indexes;
pub mod metrics;
pub mod perindex;
pub mod policy;
pub mod success;
pub mod sync;
mod tracking;

use super::kit::inflight::InFlight;
use super::kit::{self, selector};
use super::refmanager::SelectorIndex;
use super::{
    Action, Applied, Controller, Cx, EventSpec, EventType, ObjectRef, OnError, Outcome, Watch,
};
use crate::api::client::{DeleteOptions, PatchType};
use crate::api::resources::{JOBS, PODS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::{Error, Result};
use crate::obj::{self, At as _, Obj};
use crate::queue::{ItemExponential, RateLimiter};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use sync::{has_finalizer, Input, Mode, Plan};

const ORPHAN: &str = "orphan:";

#[derive(Default)]
struct State {
    /// Pods created, and pods deleted until the watch shows them deleting or gone
    /// (upstream's expectations).
    inflight: InFlight,
    /// Per job key: the pod-recreation backoff record.
    records: HashMap<String, backoff::Record>,
    /// Per job key: the record to keep once the status write of the sync succeeds.
    pending: HashMap<String, backoff::Record>,
    /// Per job key: what its status write adds to the metrics once accepted.
    pending_flush: HashMap<String, metrics::Flush>,
    /// Per job key: the `completion_mode` and `action` labels of the sync being applied, for
    /// `job_syncs_total` and `job_sync_duration_seconds` once its writes are done.
    sync_labels: HashMap<String, (&'static str, &'static str)>,
    /// Per job key: the reason label of the pod creations of its last sync.
    create_reason: HashMap<String, &'static str>,
    /// Per job key: the resourceVersion of its last status written here. A cache that shows
    /// an older Job (a re-list answered from before that write) is not acted on: its counters
    /// lack pods whose finalizers are already gone, which would be created again.
    written: HashMap<String, u64>,
}

pub struct JobController {
    state: Mutex<State>,
    /// The Jobs' selectors: which Jobs an orphan pod may be adopted by.
    selectors: SelectorIndex,
}

/// The job-controller's row in the controller table.
pub fn build(_: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    crate::metrics::register_collector("job", std::sync::Arc::new(metrics::metric_families));
    Ok(Some(super::Runnable::reconciles(JobController::new())))
}

/// What the controller reads of pods beyond metadata: their status (shared with the replica
/// controllers' pod watch).
pub const POD_WATCH: Watch = super::replicaset::POD_WATCH;

/// The cached Job `key` exists and is not finished. Only its metadata and conditions are
/// decoded: every event of a Job's pods asks, and a whole Job is several times that.
fn job_unfinished(cache: &Cache, key: &str) -> bool {
    cache
        .store(JOBS)
        .get_fields(key, &["/status/conditions"])
        .is_some_and(|j| !sync::is_finished(&j))
}

fn remove_finalizer_patch() -> Value {
    json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [sync::TRACKING_FINALIZER]}})
}

impl Default for JobController {
    fn default() -> Self {
        Self::new()
    }
}

impl JobController {
    pub fn new() -> Self {
        JobController {
            state: Mutex::new(State::default()),
            selectors: SelectorIndex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn forget(&self, key: &str) {
        let mut s = self.state();
        s.inflight.forget(key);
        s.records.remove(key);
        s.pending.remove(key);
        s.pending_flush.remove(key);
        s.written.remove(key);
        s.create_reason.remove(key);
    }

    fn finalizer_patch(ns: &str, name: &str) -> Action {
        Action::Patch {
            kind: PODS,
            namespace: ns.to_string(),
            name: name.to_string(),
            patch_type: PatchType::Strategic,
            patch: remove_finalizer_patch(),
            subresource: None,
        }
    }

    /// An orphan pod: drop the tracking finalizer unless a live, unfinished Job controls it.
    fn sync_orphan(&self, cx: &Cx, pod_key: &str) -> Result<Outcome> {
        let Some(pod) = cx.cache.store(PODS).get(pod_key) else {
            return Ok(Outcome::none());
        };
        if let Some(r) = obj::controller_ref(&pod) {
            // Owned by something else than a Job: not ours to release.
            if r.kind != "Job" || r.api_version != "batch/v1" {
                return Ok(Outcome::none());
            }
            if let Some(jk) = kit::owners::resolve(cx.cache, JOBS, obj::namespace(&pod), &r) {
                let managed_elsewhere = cx
                    .cache
                    .store(JOBS)
                    .get_fields(&jk, &["/spec/managedBy"])
                    .is_some_and(|j| finish::managed_elsewhere(&j));
                if managed_elsewhere || job_unfinished(cx.cache, &jk) {
                    return Ok(Outcome::none());
                }
            }
        }
        if !has_finalizer(&pod) {
            return Ok(Outcome::none());
        }
        Ok(Outcome::with(vec![Self::finalizer_patch(
            obj::namespace(&pod),
            obj::name(&pod),
        )]))
    }

    fn sync(&self, cx: &Cx, key: &str, mode: Mode) -> Result<Outcome> {
        if let Some(pk) = key.strip_prefix(ORPHAN) {
            return if mode == Mode::Act {
                self.sync_orphan(cx, pk)
            } else {
                Ok(Outcome::none())
            };
        }
        let Some(job) = cx.cache.store(JOBS).get(key) else {
            self.forget(key);
            return Ok(Outcome::none());
        };
        if finish::managed_elsewhere(&job) {
            log::debug!("job-controller: {key}: managed by another controller; skipped");
            return Ok(Outcome::none());
        }
        let ns = obj::namespace(&job).to_string();
        let uid = obj::uid(&job).to_string();
        {
            let mut s = self.state();
            let rv: Option<u64> = obj::resource_version(&job).parse().ok();
            match (s.written.get(key), rv) {
                (Some(w), Some(rv)) if rv < *w => {
                    metrics::observe_stale_skip();
                    log::debug!(
                        "job-controller: {key}: the cache shows an older Job than written; waiting"
                    );
                    return Ok(Outcome {
                        requeue_after: Some(Duration::from_millis(200)),
                        ..Outcome::default()
                    });
                }
                (Some(_), _) => {
                    s.written.remove(key);
                }
                _ => {}
            }
        }
        if sync::is_finished(&job) {
            let mut s = self.state();
            s.records.remove(key);
            s.pending.remove(key);
            return Ok(Outcome::none());
        }
        if let Some(sel) = job.get("spec").and_then(|s| s.get("selector")) {
            if !selector::is_valid(sel) {
                if mode == Mode::Act {
                    self.state()
                        .sync_labels
                        .insert(key.to_string(), (metrics::mode(&job), "reconciling"));
                }
                return Err(Error::Config(format!(
                    "couldn't convert Job selector: {sel}"
                )));
            }
        }
        let store = cx.cache.store(PODS);
        let (pods, claims) = claim::pods(cx, &job, &store, mode == Mode::Act)?;
        let (settled, record) = {
            let mut s = self.state();
            let created_ok = s.inflight.settled(key, &uid, &ns, &store).is_ok();
            let deletes_ok = s.inflight.deletes_settled(key);
            (
                created_ok && deletes_ok,
                s.records.get(key).copied().unwrap_or_default(),
            )
        };
        let plan = sync::plan(&Input {
            job: &job,
            pods: &pods,
            now: cx.now,
            record,
            settled,
            mode,
        });
        if plan.finished {
            self.state().records.remove(key);
        }
        if mode == Mode::Act {
            let action = if !settled {
                "reconciling"
            } else if !plan.creates.is_empty() {
                "pods_created"
            } else if !plan.deletes.is_empty() {
                "pods_deleted"
            } else {
                "tracking"
            };
            self.state()
                .sync_labels
                .insert(key.to_string(), (metrics::mode(&job), action));
        }
        let mut out = self.actions(&job, &pods, key, plan, mode, settled);
        if !claims.is_empty() {
            out.actions.splice(0..0, claims);
        }
        Ok(out)
    }

    fn event(&self, job: &Value, (warning, reason, message): sync::Ev) -> Action {
        Action::Event(EventSpec {
            involved: ObjectRef::of(&JOBS, job),
            event_type: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            message,
        })
    }

    fn actions(
        &self,
        job: &Value,
        pods: &[Obj],
        key: &str,
        plan: Plan,
        mode: Mode,
        settled: bool,
    ) -> Outcome {
        let ns = obj::namespace(job).to_string();
        let about = ObjectRef::of(&JOBS, job);
        let mut actions: Vec<Action> = plan
            .warnings
            .into_iter()
            .map(|e| self.event(job, e))
            .collect();
        if !plan.creates.is_empty() || !plan.deletes.is_empty() {
            if !plan.creates.is_empty() {
                self.state()
                    .create_reason
                    .insert(key.to_string(), plan.create_reason);
                let report = kit::pod::write_report(about.clone(), true);
                let creates = plan
                    .creates
                    .into_iter()
                    .map(|object| Action::Reported {
                        action: Box::new(Action::Create {
                            kind: PODS,
                            namespace: ns.clone(),
                            object,
                        }),
                        report: report.clone(),
                    })
                    .collect();
                actions.push(Action::SlowStart(creates));
            }
            if !plan.deletes.is_empty() {
                let report = kit::pod::write_report(about, false);
                let mut s = self.state();
                let deletes = plan
                    .deletes
                    .into_iter()
                    .map(|d| {
                        // A finishing Job's deletes (finalizer kept) are not waited for, as
                        // upstream's `deleteActivePods` sets no expectations.
                        if d.remove_finalizer {
                            s.inflight
                                .deleting(key, obj::make_key(&ns, &d.name), &d.uid);
                        }
                        let del = Action::Reported {
                            action: Box::new(Action::Delete {
                                kind: PODS,
                                namespace: ns.clone(),
                                name: d.name.clone(),
                                options: DeleteOptions::default(),
                            }),
                            report: report.clone(),
                        };
                        if d.remove_finalizer {
                            // The finalizer first, then the delete (skipped if the patch fails).
                            Action::SlowStart(vec![Self::finalizer_patch(&ns, &d.name), del])
                        } else {
                            del
                        }
                    })
                    .collect();
                actions.push(Action::Parallel(deletes));
            }
            return Outcome {
                actions,
                requeue_after: plan.requeue,
                status_after_writes: true,
                ..Outcome::default()
            };
        }
        let events: Vec<Action> = plan
            .events
            .into_iter()
            .map(|e| self.event(job, e))
            .collect();
        let removals: Vec<Action> = plan
            .removals
            .iter()
            .map(|n| Self::finalizer_patch(&ns, n))
            .collect();
        let recount = (!removals.is_empty() || plan.again) && mode == Mode::Act;
        if let Some(updated) = plan.status {
            let flush = metrics::flush(job, &updated, pods, &plan.removals);
            let mut s = self.state();
            if let Some(r) = plan.record {
                s.pending.insert(key.to_string(), r);
            }
            s.pending_flush.insert(key.to_string(), flush);
            drop(s);
            let mut after: Vec<Action> = removals;
            after.extend(events);
            let write = Action::UpdateSubresource {
                kind: JOBS,
                object: updated,
                subresource: "status",
            };
            if after.is_empty() {
                actions.push(write);
            } else {
                // The status first; the removals and Events only once it is written.
                actions.push(Action::SlowStart(vec![write, Action::Parallel(after)]));
            }
        } else {
            if !removals.is_empty() {
                actions.push(Action::Parallel(removals));
            }
            actions.extend(events);
        }
        let mut requeue = plan.requeue;
        if !settled && mode == Mode::Act {
            requeue = super::sooner(requeue, Some(kit::inflight::EXPECTATIONS_TIMEOUT));
        }
        Outcome {
            actions,
            requeue_after: requeue,
            status_after_writes: recount,
            ..Outcome::default()
        }
    }
}

impl Controller for JobController {
    fn watches(&self) -> Vec<Watch> {
        vec![Watch::full(JOBS), POD_WATCH]
    }

    fn key_delay(&self, w: &Watch) -> Duration {
        if w.kind == PODS {
            sync::BATCH_PERIOD
        } else {
            Duration::ZERO
        }
    }

    /// Upstream's job queue: 1 s doubling to 1 min per key.
    fn rate_limiter(&self) -> Option<Box<dyn RateLimiter<String>>> {
        Some(Box::new(ItemExponential::new(
            Duration::from_secs(1),
            Duration::from_secs(60),
        )))
    }

    fn keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        if w.kind == JOBS {
            self.selectors.observe(d, |j| {
                j.get("spec")
                    .and_then(|s| s.get("selector"))
                    .filter(|s| selector::is_valid(s))
                    .cloned()
            });
            let job = d.object();
            let key = obj::key(job);
            if d.kind == DeltaKind::Added && finish::managed_elsewhere(job) {
                if let Some(name) = job.at("/spec/managedBy").and_then(Value::as_str) {
                    metrics::observe_external(name);
                }
            }
            let replaced =
                matches!((&d.old, &d.new), (Some(o), Some(n)) if obj::uid(o) != obj::uid(n));
            let mut keys = vec![key.clone()];
            if d.kind == DeltaKind::Deleted || replaced {
                self.forget(&key);
                // Its pods still holding the tracking finalizer are released.
                let old = d.old.as_deref().unwrap_or(job);
                for p in cache.store(PODS).by_owner(obj::uid(old)) {
                    if has_finalizer(&p)
                        && obj::controller_ref(&p).is_some_and(|r| r.uid == obj::uid(old))
                    {
                        keys.push(format!("{ORPHAN}{}", obj::key(&p)));
                    }
                }
            }
            return keys;
        }
        if w.kind != PODS {
            return vec![];
        }
        let pod = d.object();
        metrics::observe_pod(
            obj::uid(pod),
            (d.kind != DeltaKind::Deleted).then_some(&**pod),
        );
        if d.kind == DeltaKind::Deleted || obj::is_deleting(pod) {
            self.state().inflight.observe(d, |_| true);
        }
        let job_of = |p: &Value| {
            obj::controller_ref(p)
                .and_then(|r| kit::owners::resolve(cache, JOBS, obj::namespace(p), &r))
        };
        let mut keys = kit::owners::owner_keys(
            d,
            kit::owners::Deleting::AsDeletion,
            |p, r| kit::owners::resolve(cache, JOBS, obj::namespace(p), r),
            |_| vec![],
        );
        // An orphan: the Jobs that select it may adopt it.
        if d.kind != DeltaKind::Deleted
            && obj::controller_ref(pod).is_none()
            && !obj::is_deleting(pod)
        {
            keys.extend(self.selectors.matching(pod));
        }
        // A pod with the finalizer and no live, unfinished Job: an orphan to release.
        if d.kind != DeltaKind::Deleted && has_finalizer(pod) {
            let job_key = job_of(pod);
            let live = job_key.as_deref().is_some_and(|k| job_unfinished(cache, k));
            let orphan = obj::controller_ref(pod).is_none();
            if orphan || (!live && (obj::is_deleting(pod) || job_key.is_none())) {
                keys.push(format!("{ORPHAN}{}", obj::key(pod)));
            }
        }
        keys
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        self.sync(cx, key, Mode::Act)
    }

    fn status_after_writes(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        self.sync(cx, key, Mode::After)
    }

    fn synced(&self, key: &str, began: Instant, end: super::SyncEnd<'_>) {
        let labels = self.state().sync_labels.remove(key);
        if let Some((mode, action)) = labels {
            let ok = !matches!(end, super::SyncEnd::Failed(_));
            metrics::observe_sync(mode, ok, action, began.elapsed());
        }
    }

    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        match (action, result) {
            (Action::Create { .. }, Applied::Done(Some(pod))) => {
                let mut s = self.state();
                s.inflight.created(key, pod);
                let reason = s.create_reason.get(key).copied().unwrap_or("new");
                metrics::observe_creation(reason, true);
            }
            // A create refused because the namespace is terminating is not counted; any other
            // failure is counted as failed and, as upstream's counting falls through, as
            // succeeded too.
            (Action::Create { .. }, Applied::Failed(e)) if !e.is_namespace_terminating() => {
                let s = self.state();
                let reason = s.create_reason.get(key).copied().unwrap_or("new");
                metrics::observe_creation(reason, false);
                metrics::observe_creation(reason, true);
            }
            (Action::UpdateSubresource { .. }, Applied::Done(answer)) => {
                let mut s = self.state();
                if let Some(rv) = answer.and_then(|v| obj::resource_version(v).parse::<u64>().ok())
                {
                    s.written.insert(key.to_string(), rv);
                }
                if let Some(r) = s.pending.remove(key) {
                    s.records.insert(key.to_string(), r);
                }
                if let Some(f) = s.pending_flush.remove(key) {
                    metrics::flushed(&f);
                }
            }
            (Action::UpdateSubresource { .. }, _) => {
                let mut s = self.state();
                s.pending.remove(key);
                s.pending_flush.remove(key);
            }
            (
                Action::Delete {
                    namespace, name, ..
                },
                Applied::Failed(_) | Applied::Skipped,
            ) => {
                // Not deleted: nothing to wait for (the next sync decides again).
                let pk = obj::make_key(namespace, name);
                self.state().inflight.delete_failed(key, &pk);
            }
            _ => {}
        }
    }

    fn on_error(&self, action: &Action, err: &Error) -> OnError {
        match action {
            // A pod already gone has no finalizer left to remove.
            Action::Patch { .. } if err.is_not_found() => OnError::Ignore,
            Action::Create { .. } if err.is_namespace_terminating() => OnError::Ignore,
            _ if err.is_already_exists() => OnError::Ignore,
            _ => OnError::Retry,
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_v137;
