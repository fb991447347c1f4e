//! cronjob-controller: starts a Job at each time a CronJob's schedule names, as upstream's
//! `pkg/controller/cronjob` (the v2 controller) does.
//!
//! As upstream:
//! - Schedules are read as `robfig/cron`'s standard parser reads them ([`schedule`]), in the
//!   CronJob's `timeZone` (IANA names; [`gotime`]) or, without one, the process's own zone. A
//!   schedule naming `TZ`/`CRON_TZ` itself is used as written, with an `UnsupportedSchedule`
//!   warning (the apiserver refuses it only together with `timeZone`).
//! - Its Jobs are those whose controller reference carries its UID (v1.37).
//! - One sync: Jobs beyond `successfulJobsHistoryLimit`/`failedJobsHistoryLimit` are deleted
//!   (oldest start first, `SuccessfulDelete`); finished Jobs leave the active list
//!   (`SawCompletedJob`) and move `lastSuccessfulTime`; active Jobs that are gone are dropped
//!   (`MissingJob`, after a live GET), unknown running ones reported (`UnexpectedJob`, after a
//!   live GET of the CronJob). Then, unless it is being deleted, suspended, or its zone or
//!   schedule is bad (`UnknownTimeZone`, `UnparseableSchedule`, `InvalidSchedule`): the most
//!   recent missed start time (`TooManyMissedTimes` past 100 of them), skipped past
//!   `startingDeadlineSeconds` (`MissSchedule`), or already started, or with `Forbid` and a Job
//!   running (`JobAlreadyActive`); with `Replace` the running Jobs are deleted first. The Job
//!   `<name>-<minutes since the epoch>` is created from the template with the
//!   `batch.kubernetes.io/cronjob-scheduled-timestamp` annotation (`SuccessfulCreate`,
//!   `FailedCreate`), and one status write records the active list and `lastScheduleTime`.
//! - The CronJob is looked at again 100 ms after its next start time (the workqueue's
//!   `AddAfter`: no polling); a change of schedule or zone waits for the new next start time.
//! - Jobs are deleted with background propagation; `--concurrent-cron-job-syncs` workers
//!   (5); queue `cronjob`; Events from `cronjob-controller`; the histogram
//!   `cronjob_controller_job_creation_skew_duration_seconds`.
//!
//! Unlike upstream: a schedule that never fires (`0 0 30 2 *`) is not looked at again until
//! it changes (upstream requeues it at once, over and over). A change to an unparseable
//! schedule is, as upstream, an `UnParseableCronJobSchedule` Event and no sync (recorded by
//! the worker rather than the watch handler).

pub mod gotime;
pub mod schedule;
pub mod sync;

#[cfg(test)]
mod tests;

use super::kit::owners::{self, Deleting};
use super::{Action, Applied, Controller, Cx, EventType, Outcome, Report, Watch};
use crate::api::resources::{CRONJOBS, JOBS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controller::ObjectRef;
use crate::error::Result;
use crate::obj;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use sync::Plan;

/// The parts of a Job this controller reads besides its metadata.
pub const JOB_WATCH: Watch = Watch::fields(JOBS, &["/status"]);

/// Its row in the controller table.
pub fn build(_: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    crate::metrics::register_collector("cronjob", std::sync::Arc::new(metric_families));
    Ok(Some(super::Runnable::reconciles(CronJobController::new())))
}

/// How the create of a sync went.
#[derive(Debug, Clone)]
enum Created {
    Done(Value),
    Exists,
    Failed(crate::Error),
    Skipped,
}

/// A sync whose writes are being applied.
struct Pending {
    plan: Plan,
    deleted: Vec<String>,
    created: Option<Created>,
}

pub struct CronJobController {
    pending: Mutex<HashMap<String, Pending>>,
    /// The schedule and zone each CronJob had when last seen, to tell a change of them.
    schedules: Mutex<HashMap<String, (String, Option<String>)>>,
    /// CronJobs whose schedule changed to one that does not parse: the Event is due.
    unparseable: Mutex<HashMap<String, Value>>,
}

impl Default for CronJobController {
    fn default() -> Self {
        Self::new()
    }
}

impl CronJobController {
    pub fn new() -> Self {
        CronJobController {
            pending: Mutex::new(HashMap::new()),
            schedules: Mutex::new(HashMap::new()),
            unparseable: Mutex::new(HashMap::new()),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn now_ns(cx: &Cx) -> i64 {
    gotime::from_system(cx.now)
}

fn status_write(cj: Value) -> Action {
    Action::UpdateSubresource {
        kind: CRONJOBS,
        object: cj,
        subresource: "status",
    }
}

fn delete(cj: &Value, name: &str) -> Action {
    Action::Reported {
        action: Box::new(Action::Delete {
            kind: JOBS,
            namespace: obj::namespace(cj).to_string(),
            name: name.to_string(),
            options: sync::background(),
        }),
        report: Report {
            about: ObjectRef::of(&CRONJOBS, cj),
            success_reason: "SuccessfulDelete",
            success_prefix: "Deleted job ",
            failure_reason: "FailedDelete",
            failure_prefix: "Deleted job: ".into(),
        },
    }
}

fn to_duration(ns: i64) -> Duration {
    Duration::from_nanos(ns.max(0) as u64)
}

impl Controller for CronJobController {
    fn watches(&self) -> Vec<Watch> {
        vec![Watch::full(CRONJOBS), JOB_WATCH]
    }

    fn keys_for(&self, watch: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        if watch.kind == CRONJOBS {
            return self
                .delayed_keys_for(watch, d, cache)
                .into_iter()
                .map(|(k, _)| k)
                .collect();
        }
        if let (Some(old), Some(cur)) = (&d.old, &d.new) {
            if obj::resource_version(old) == obj::resource_version(cur) {
                return vec![];
            }
        }
        owners::owner_keys(
            d,
            Deleting::AsUpdate,
            |o, r| owners::resolve(cache, CRONJOBS, obj::namespace(o), r),
            |_| vec![],
        )
    }

    /// A CronJob whose schedule or zone changed is looked at again at its new next start
    /// time (not at once); with an unparseable new schedule, not at all (upstream's
    /// `updateCronJob`). Other changes queue it at once.
    fn delayed_keys_for(&self, watch: &Watch, d: &Delta, cache: &Cache) -> Vec<(String, Duration)> {
        if watch.kind != CRONJOBS {
            return self
                .keys_for(watch, d, cache)
                .into_iter()
                .map(|k| (k, Duration::ZERO))
                .collect();
        }
        let cj = d.object();
        let key = obj::key(cj);
        let now_schedule = (
            cj["spec"]["schedule"].as_str().unwrap_or("").to_string(),
            cj["spec"]["timeZone"].as_str().map(str::to_string),
        );
        let before = {
            let mut seen = self.schedules.lock().unwrap_or_else(|p| p.into_inner());
            if d.kind == DeltaKind::Deleted {
                seen.remove(&key)
            } else {
                seen.insert(key.clone(), now_schedule.clone())
            }
        };
        let changed = d.kind == DeltaKind::Updated && before.is_some_and(|b| b != now_schedule);
        if !changed {
            return vec![(key, Duration::ZERO)];
        }
        let Ok(sched) = schedule::parse(&sync::formatted_schedule(cj, None)) else {
            log::info!(
                "cronjob-controller: {key}: unparseable schedule {:?}",
                now_schedule.0
            );
            // Upstream records the Event from its handler and does not sync: the key is
            // queued for the Event alone.
            self.unparseable
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key.clone(), (**d.object()).clone());
            return vec![(key, Duration::ZERO)];
        };
        let now = gotime::from_system(std::time::SystemTime::now());
        let delay = sync::requeue(cj, &sched, now).map_or(Duration::ZERO, to_duration);
        vec![(key, delay)]
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        self.pending().remove(key);
        let changed_to = self
            .unparseable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        if let Some(cj) = changed_to {
            return Ok(Outcome::with(vec![Action::Event(sync::event(
                &cj,
                EventType::Warning,
                "UnParseableCronJobSchedule",
                format!(
                    "unparseable schedule for cronjob: {}",
                    cj["spec"]["schedule"].as_str().unwrap_or("")
                ),
            ))]));
        }
        let Some(cj) = cx.cache.store(CRONJOBS).get(key) else {
            return Ok(Outcome::none());
        };
        let ns = obj::namespace(&cj);
        let jobs: Vec<Value> = cx
            .cache
            .store_for(&JOB_WATCH)
            .list_namespace(ns)
            .into_iter()
            // Its Jobs by the controller reference's UID (v1.37; before, by name, so a Job of an
            // earlier CronJob of the same name was taken too).
            .filter(|j| obj::controller_ref(j).is_some_and(|r| r.uid == obj::uid(&cj)))
            .map(|j| (*j).clone())
            .collect();
        let plan = sync::plan(&cj, &jobs, now_ns(cx), cx.client)?;
        let mut actions: Vec<Action> = plan.events.iter().cloned().map(Action::Event).collect();
        actions.extend(plan.history_deletes.iter().map(|(n, _)| delete(&cj, n)));
        let writes = !plan.history_deletes.is_empty() || plan.start.is_some();
        if let Some(start) = &plan.start {
            let create = Action::Create {
                kind: JOBS,
                namespace: ns.to_string(),
                object: start.job.clone(),
            };
            let replace: Vec<Action> = plan
                .replace_deletes
                .iter()
                .map(|(n, _)| delete(&cj, n))
                .collect();
            if replace.is_empty() {
                actions.push(create);
            } else {
                // The new Job only once the old ones are gone.
                actions.push(Action::SlowStart(vec![Action::Parallel(replace), create]));
            }
        }
        let mut out = Outcome {
            // With a create, the requeue is decided once it is done (`finish`).
            requeue_after: plan
                .requeue
                .filter(|_| plan.start.is_none())
                .map(to_duration),
            retry_quietly: plan.retry.clone(),
            ..Outcome::default()
        };
        if writes {
            out.status_after_writes = true;
            self.pending().insert(
                key.to_string(),
                Pending {
                    plan,
                    deleted: Vec::new(),
                    created: None,
                },
            );
        } else if plan.update_status {
            actions.push(status_write(plan.cronjob));
        }
        out.actions = actions;
        Ok(out)
    }

    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        let mut pending = self.pending();
        let Some(p) = pending.get_mut(key) else {
            return;
        };
        match (action, result) {
            (Action::Delete { name, .. }, Applied::Done(_)) => p.deleted.push(name.clone()),
            (Action::Create { .. }, Applied::Done(Some(job))) => {
                p.created = Some(Created::Done(job.clone()))
            }
            (Action::Create { .. }, Applied::Failed(e)) if e.is_already_exists() => {
                p.created = Some(Created::Exists)
            }
            (Action::Create { .. }, Applied::Failed(e)) => {
                p.created = Some(Created::Failed(e.clone()))
            }
            (Action::Create { .. }, Applied::Skipped) => p.created = Some(Created::Skipped),
            _ => {}
        }
    }

    fn status_after_writes(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(p) = self.pending().remove(key) else {
            return Ok(Outcome::none());
        };
        finish(cx, p)
    }
}

/// The status write of a sync with writes, once they were applied: deleted Jobs leave the
/// active list; the created Job (or one of ours that already had the name) joins it.
fn finish(cx: &Cx, p: Pending) -> Result<Outcome> {
    let Pending {
        plan,
        deleted,
        created,
    } = p;
    let mut cj = plan.cronjob;
    let mut update = plan.update_status;
    let mut actions = Vec::new();
    for (name, uid) in plan.history_deletes.iter().chain(&plan.replace_deletes) {
        if deleted.contains(name) {
            sync::remove_active(&mut cj, uid);
            update = true;
        }
    }
    let mut requeue = None;
    if let (Some(start), Some(created)) = (&plan.start, created) {
        let ev = |t, reason: &str, msg: String| Action::Event(sync::event(&cj, t, reason, msg));
        let job = match created {
            Created::Done(job) => {
                observe_skew(&job, start.scheduled);
                actions.push(ev(
                    EventType::Normal,
                    "SuccessfulCreate",
                    format!("Created job {}", obj::name(&job)),
                ));
                Some(job)
            }
            Created::Exists => {
                let name = obj::name(&start.job);
                let job = sync::Live::job(cx.client, obj::namespace(&cj), name)?;
                let ours = obj::controller_ref(&job).is_some_and(|r| r.uid == obj::uid(&cj));
                let active = cj["status"]["active"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|r| r["uid"] == obj::uid(&job)));
                (ours && !active).then(|| {
                    log::info!(
                        "cronjob-controller: {}: job {name} already exists",
                        obj::key(&cj)
                    );
                    job
                })
            }
            Created::Failed(e) => {
                if !e.is_namespace_terminating() {
                    actions.push(ev(
                        EventType::Warning,
                        "FailedCreate",
                        format!("Error creating job: {}", e.message()),
                    ));
                }
                None
            }
            Created::Skipped => None,
        };
        if let Some(job) = job {
            sync::started(&mut cj, &job, start.scheduled);
            update = true;
            requeue = plan.requeue.map(to_duration);
        }
    }
    if update {
        actions.push(status_write(cj));
    }
    Ok(Outcome {
        actions,
        requeue_after: requeue,
        ..Outcome::default()
    })
}

/// `cronjob_controller_job_creation_skew_duration_seconds` (STABLE upstream): seconds from a
/// start time to its Job's creation, buckets 1, 2, 4, ... 512.
fn creation_skew() -> std::sync::MutexGuard<'static, crate::metrics::Histogram> {
    static H: std::sync::OnceLock<Mutex<crate::metrics::Histogram>> = std::sync::OnceLock::new();
    H.get_or_init(|| {
        let bounds: Vec<f64> = (0..10).map(|i| f64::from(1u32 << i)).collect();
        Mutex::new(crate::metrics::Histogram::new(&bounds))
    })
    .lock()
    .unwrap_or_else(|p| p.into_inner())
}

/// The controller's metric family (registered when the controller is built, as upstream's).
pub fn metric_families() -> Vec<crate::metrics::Family> {
    let mut f = crate::metrics::Family::new(
        "cronjob_controller_job_creation_skew_duration_seconds",
        "[STABLE] Time between when a cronjob is scheduled to be run, and when the corresponding job is created",
        crate::metrics::MetricType::Histogram,
    );
    f.push_histogram(&[], creation_skew().clone());
    vec![f]
}

/// Observe the skew of a created Job (its creation time less its start time).
fn observe_skew(job: &Value, scheduled: i64) {
    if let Some(created) = job["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(crate::compat::timefmt::parse_rfc3339)
    {
        let skew = (gotime::from_system(created) - scheduled) as f64 / 1e9;
        creation_skew().observe(skew);
    }
}
