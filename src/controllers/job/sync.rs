//! One sync of a Job as a pure decision (upstream's `syncJob`, `manageJob` and
//! `trackJobStatusAndRemoveFinalizers`): from the Job, its pods, the time and the in-memory
//! backoff record, what to create and delete, which tracking finalizers to remove, and the
//! status to write first.
//!
//! Upstream writes the status (new uncounted pods), removes finalizers, then writes the
//! status again (counters) in one sync. Here a pass gives the first write and the removals,
//! applied in that order with the removals skipped if the write fails; the pass right after
//! the writes ([`Mode::After`]) counts the pods whose finalizers are gone and, once nothing is
//! uncounted, adds the finished condition. A pod's finalizer is thus removed only once its
//! UID (or, Indexed, its index) is in the Job's status on the server.

use super::backoff::{self, Record};
use super::finish;
use super::indexes::{self, Intervals};
use super::perindex;
use super::policy;
use super::tracking;
use crate::api::resources::JOBS;
use crate::controllers::kit::pod::{is_pod_active, phase, pod_from_template};
use crate::controllers::kit::ranking::pods_to_delete;
use crate::obj::{self, At as _, Obj};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, SystemTime};

pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// Upstream's `MaxUncountedPods` and `MaxPodCreateDeletePerSync`.
pub const MAX_UNCOUNTED: usize = 500;
pub const MAX_CREATE_DELETE: usize = 500;
/// Upstream's `syncJobBatchPeriod`: the least delay of a requeue.
pub const BATCH_PERIOD: Duration = Duration::from_secs(1);

/// Which pass of a sync this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// May create and delete pods; when it does, the status is left to the `After` pass.
    Act,
    /// Right after the writes of an `Act` pass: status and finalizers only.
    After,
}

/// What a sync reads.
pub struct Input<'a> {
    pub job: &'a Value,
    /// The pods the job controls.
    pub pods: &'a [Obj],
    pub now: SystemTime,
    pub record: Record,
    /// No creation or deletion of this job waits for the watch (upstream's expectations).
    pub settled: bool,
    pub mode: Mode,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Delete {
    pub name: String,
    pub uid: String,
    /// Remove the tracking finalizer before deleting (pods deleted by `manageJob`; an
    /// active pod deleted so the job can finish keeps it until it is counted).
    pub remove_finalizer: bool,
}

/// An Event: warning?, reason, message.
pub type Ev = (bool, &'static str, String);

#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub creates: Vec<Value>,
    pub deletes: Vec<Delete>,
    /// The job with its new status, to write first.
    pub status: Option<Value>,
    /// Pods whose tracking finalizer to remove once `status` is written.
    pub removals: Vec<String>,
    /// Events once `status` is written (or at once without a status write).
    pub events: Vec<Ev>,
    /// Events independent of any write.
    pub warnings: Vec<Ev>,
    /// The backoff record to keep once `status` is written.
    pub record: Option<Record>,
    pub requeue: Option<Duration>,
    /// The job is finished: forget its backoff record.
    pub finished: bool,
    /// The status adds an interim condition (`FailureTarget`, `SuccessCriteriaMet`): look
    /// again once it is written, for the final one.
    pub again: bool,
    /// The `reason` label of `creates` in `job_pods_creation_total`.
    pub create_reason: &'static str,
}

impl Plan {
    pub fn manages(&self) -> bool {
        !self.creates.is_empty() || !self.deletes.is_empty()
    }
}

/// A job condition as upstream's `newCondition` makes it.
pub fn condition(type_: &str, status: &str, reason: &str, message: &str, now: &str) -> Value {
    let mut c =
        json!({"type": type_, "status": status, "lastProbeTime": now, "lastTransitionTime": now});
    if !reason.is_empty() {
        c["reason"] = json!(reason);
    }
    if !message.is_empty() {
        c["message"] = json!(message);
    }
    c
}

pub(super) fn field<'a>(c: &'a Value, f: &str) -> &'a str {
    c.get(f).and_then(Value::as_str).unwrap_or("")
}

/// Upstream's `ensureJobConditionStatus`: set the condition of that type, appended only if
/// not False; true when the list changed.
pub fn ensure_condition(
    list: &mut Vec<Value>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
) -> bool {
    if let Some(c) = list.iter_mut().find(|c| field(c, "type") == type_) {
        if field(c, "status") != status
            || field(c, "reason") != reason
            || field(c, "message") != message
        {
            *c = condition(type_, status, reason, message, now);
            return true;
        }
        return false;
    }
    if status != "False" {
        list.push(condition(type_, status, reason, message, now));
        return true;
    }
    false
}

/// Finished: a `Complete` or `Failed` condition that is True.
pub fn is_finished(job: &Value) -> bool {
    conditions(job)
        .iter()
        .any(|c| matches!(field(c, "type"), "Complete" | "Failed") && field(c, "status") == "True")
}

fn conditions(job: &Value) -> Vec<Value> {
    job.at("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub fn has_finalizer(p: &Value) -> bool {
    p.at("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(|f| f.as_str() == Some(TRACKING_FINALIZER)))
}

pub(super) fn int(v: &Value, path: &str) -> Option<i64> {
    v.at(path).and_then(Value::as_i64)
}

pub fn is_indexed(job: &Value) -> bool {
    job.at("/spec/completionMode").and_then(Value::as_str) == Some("Indexed")
}

pub fn suspended(job: &Value) -> bool {
    job.at("/spec/suspend").and_then(Value::as_bool) == Some(true)
}

pub(super) fn uid_list(job: &Value, which: &str) -> Vec<String> {
    job.at(&format!("/status/uncountedTerminatedPods/{which}"))
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Terminating: being deleted and not terminal (upstream's `CountTerminatingPods`).
pub(super) fn is_terminating(p: &Value) -> bool {
    obj::is_deleting(p) && !matches!(phase(p), "Succeeded" | "Failed")
}

/// The pod the job creates, for a completion index or none (upstream's template changes:
/// the tracking finalizer; Indexed: the index env var, annotation and label, hostname and
/// `generateName`).
pub fn new_pod(job: &Value, index: Option<usize>) -> Result<Value, String> {
    let mut pod = pod_from_template(&JOBS, job)?;
    let meta = pod["metadata"].as_object_mut().expect("a pod has metadata");
    let fins = meta.entry("finalizers").or_insert_with(|| json!([]));
    if let Some(l) = fins.as_array_mut() {
        if !l.iter().any(|f| f.as_str() == Some(TRACKING_FINALIZER)) {
            l.push(json!(TRACKING_FINALIZER));
        }
    }
    let Some(ix) = index else { return Ok(pod) };
    let name = obj::name(job);
    meta.insert(
        "generateName".into(),
        json!(indexes::generate_name(name, ix)),
    );
    for f in ["annotations", "labels"] {
        if let Some(m) = meta.entry(f).or_insert_with(|| json!({})).as_object_mut() {
            m.insert(indexes::COMPLETION_INDEX.into(), json!(ix.to_string()));
        }
    }
    let spec = pod["spec"].as_object_mut().expect("a pod has a spec");
    for list in ["initContainers", "containers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let env = c
                .as_object_mut()
                .map(|c| c.entry("env").or_insert_with(|| json!([])));
            if let Some(Value::Array(env)) = env {
                if !env.iter().any(|e| {
                    e.get("name").and_then(Value::as_str) == Some(indexes::COMPLETION_INDEX_ENV)
                }) {
                    env.push(json!({"name": indexes::COMPLETION_INDEX_ENV, "valueFrom": {"fieldRef": {
                        "fieldPath": format!("metadata.labels['{}']", indexes::COMPLETION_INDEX)}}}));
                }
            }
        }
    }
    spec.insert("hostname".into(), json!(format!("{name}-{ix}")));
    Ok(pod)
}

/// Active pods to remove: Indexed, duplicates of an index (all but the best), pods without a
/// valid index; then the first by upstream's ranking (upstream's `activePodsForRemoval`).
fn active_pods_for_removal(
    job: &Value,
    active: &[Obj],
    at_least: usize,
    completions: usize,
    now: SystemTime,
) -> Vec<Obj> {
    let mut rm: Vec<Obj> = Vec::new();
    let mut left: Vec<Obj> = Vec::new();
    if is_indexed(job) {
        let mut by_ix: std::collections::BTreeMap<usize, Vec<Obj>> = Default::default();
        for p in active {
            match indexes::valid_index(p, completions) {
                Some(ix) => by_ix.entry(ix).or_default().push(p.clone()),
                None => rm.push(p.clone()),
            }
        }
        for (_, pods) in by_ix {
            if pods.len() == 1 {
                left.extend(pods);
            } else {
                // Keep the one ranked last for deletion.
                let mut order = pods_to_delete(&pods, &[], pods.len(), now);
                let keep = order.pop();
                rm.extend(order);
                left.extend(keep);
            }
        }
    } else {
        left = active.to_vec();
    }
    if rm.len() < at_least {
        let more = pods_to_delete(&left, &[], at_least - rm.len(), now);
        rm.extend(more);
    }
    rm
}

/// What a pass reads of the Job and its pods, worked out once for its steps.
pub(super) struct Pass<'a> {
    pub inp: &'a Input<'a>,
    pub job: &'a Value,
    pub now_s: String,
    pub indexed: bool,
    pub completions: Option<usize>,
    /// `completions`, 0 when unset.
    pub comp_n: usize,
    /// The UIDs in `status.uncountedTerminatedPods.succeeded` and `.failed`.
    pub unc_s: HashSet<String>,
    pub unc_f: HashSet<String>,
    /// The pods, Indexed ones in index order.
    pub pods: Vec<Obj>,
    pub active_pods: Vec<Obj>,
    /// Pods being deleted and not yet terminal (`status.terminating`).
    pub terminating: usize,
    /// `status.completedIndexes` as the Job has it.
    pub prev_ix: Intervals,
}

impl<'a> Pass<'a> {
    fn new(inp: &'a Input<'a>) -> Self {
        let job = inp.job;
        let indexed = is_indexed(job);
        let completions = int(job, "/spec/completions").map(|c| c.max(0) as usize);
        let comp_n = completions.unwrap_or(0);
        let mut pods: Vec<Obj> = inp.pods.to_vec();
        if indexed {
            crate::sort::sort_by_key(&mut pods[..], |p| {
                indexes::completion_index(p).map_or(-1, |i| i as i64)
            });
        }
        let active_pods = pods.iter().filter(|p| is_pod_active(p)).cloned().collect();
        let terminating = pods.iter().filter(|p| is_terminating(p)).count();
        Pass {
            inp,
            job,
            now_s: crate::compat::timefmt::rfc3339(inp.now),
            indexed,
            completions,
            comp_n,
            unc_s: uid_list(job, "succeeded").into_iter().collect(),
            unc_f: uid_list(job, "failed").into_iter().collect(),
            pods,
            active_pods,
            terminating,
            prev_ix: Intervals::parse(
                job.at("/status/completedIndexes")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                comp_n,
            ),
        }
    }

    /// Whether the pod counts for the Job: any pod, or for an Indexed Job one with a valid
    /// index.
    pub fn counts_index(&self, p: &Value) -> bool {
        !self.indexed || indexes::valid_index(p, self.comp_n).is_some()
    }

    /// The pods finished since the last count: succeeded, failed (with the finalizer, not
    /// yet in the uncounted lists).
    fn newly_terminated(&self) -> (Vec<&Value>, Vec<&Value>) {
        let fresh = |p: &&Value, uncounted: &HashSet<String>| {
            has_finalizer(p) && !uncounted.contains(obj::uid(p)) && self.counts_index(p)
        };
        let succeeded = self
            .pods
            .iter()
            .map(|p| &**p)
            .filter(|p| fresh(p, &self.unc_s) && phase(p) == "Succeeded")
            .collect();
        let failed = self
            .pods
            .iter()
            .map(|p| &**p)
            .filter(|p| fresh(p, &self.unc_f) && policy::is_pod_failed(p, self.job))
            .collect();
        (succeeded, failed)
    }
}

/// Decide one pass (see the module docs). None: nothing to do for this job at all.
pub fn plan(inp: &Input) -> Plan {
    let job = inp.job;
    let mut out = Plan::default();
    if is_finished(job) {
        out.finished = true;
        return out;
    }
    let mode = job.at("/spec/completionMode").and_then(Value::as_str);
    if !matches!(mode, None | Some("NonIndexed") | Some("Indexed")) {
        out.warnings.push((
            true,
            "UnknownCompletionMode",
            "Skipped Job sync because completion mode is unknown".into(),
        ));
        return out;
    }
    let pass = Pass::new(inp);
    let (new_succeeded, new_failed) = pass.newly_terminated();
    let counted_new_failed = new_failed
        .iter()
        .filter(|p| policy::match_policy(job, p).counts)
        .count();
    let mut succeeded = int(job, "/status/succeeded").unwrap_or(0).max(0) as usize
        + new_succeeded.len()
        + pass.unc_s.len();
    let failed = int(job, "/status/failed").unwrap_or(0).max(0) as usize
        + counted_new_failed
        + pass.unc_f.len();

    let mut status = job
        .get("status")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    if status.get("startTime").is_none_or(Value::is_null) && !suspended(job) {
        status["startTime"] = json!(pass.now_s);
    }
    let start = status
        .get("startTime")
        .and_then(Value::as_str)
        .and_then(crate::compat::timefmt::parse_rfc3339);
    let record = backoff::next_record(inp.record, &new_succeeded, &new_failed);

    let mut conds = conditions(job);
    // The condition that finishes the job: Complete, Failed, or the interim FailureTarget.
    let mut finished = finish::finishing_condition(&pass, &conds, failed, start, &mut out);
    let mut succeeded_ix = Intervals::default();
    let mut per = PerIndex::default();
    if pass.indexed {
        per.terminating_ix = pass
            .pods
            .iter()
            .filter(|p| is_terminating(p))
            .filter_map(|p| indexes::completion_index(p))
            .collect();
        let new_ix: BTreeSet<usize> = pass
            .pods
            .iter()
            .filter(|p| phase(p) == "Succeeded" && has_finalizer(p))
            .filter_map(|p| indexes::valid_index(p, pass.comp_n))
            .collect();
        succeeded_ix = pass.prev_ix.with_indexes(new_ix);
        succeeded = succeeded_ix.total();
        if perindex::enabled(job) {
            let failed_ix = perindex::failed_indexes(job, &pass.pods, pass.comp_n);
            if finished.is_none() {
                finished = finish::failed_indexes_condition(job, &failed_ix, &succeeded_ix, &pass);
            }
            per.delayed = perindex::delayed_deletion(
                job,
                &pass.pods,
                &pass.active_pods,
                &succeeded_ix,
                &failed_ix,
                pass.comp_n,
            );
            per.failed = Some(failed_ix);
        }
        if finished.is_none() {
            if let Some(msg) = super::success::matched(job, pass.comp_n, &succeeded_ix) {
                finished = Some(condition(
                    "SuccessCriteriaMet",
                    "True",
                    "SuccessPolicy",
                    &msg,
                    &pass.now_s,
                ));
            }
        }
    }
    out.create_reason = super::metrics::creation_reason(job, failed, pass.terminating);
    let managed = Managed {
        succeeded,
        succeeded_ix,
        record,
        per,
    };
    let Some(suspend_changed) = sync_pods(
        &pass,
        &managed,
        &mut out,
        &mut finished,
        &mut conds,
        &mut status,
    ) else {
        return out;
    };
    if out.requeue.is_some() && (finished.is_some() || suspended(job)) {
        out.requeue = None;
    }
    let track = tracking::Track {
        status,
        conds,
        finished,
        suspend_changed,
        record,
        per: managed.per,
    };
    tracking::track_status(&pass, track, &mut out);
    out
}

/// What `manageJob` goes by besides the pods.
struct Managed {
    succeeded: usize,
    succeeded_ix: Intervals,
    record: Record,
    per: PerIndex,
}

/// What `backoffLimitPerIndex` adds ([`perindex`]); empty without it.
#[derive(Default)]
pub(super) struct PerIndex {
    /// The failed indexes (`status.failedIndexes`); None without backoffLimitPerIndex.
    pub failed: Option<Intervals>,
    /// Per index: the failed pod whose finalizer waits for its replacement.
    pub delayed: BTreeMap<usize, Obj>,
    /// The indexes of terminating pods (not started again with podReplacementPolicy Failed).
    pub terminating_ix: BTreeSet<usize>,
}

/// Upstream's `syncJob` around `manageJob`: a finishing Job's active pods are deleted (it
/// finishes once none is left); any other Job's pods are managed, then it is Complete, or
/// its Suspended condition follows `spec.suspend`. None: this pass creates or deletes pods,
/// and the status is left to the pass after those writes. Else whether the Suspended
/// condition changed.
fn sync_pods(
    pass: &Pass,
    m: &Managed,
    out: &mut Plan,
    finished: &mut Option<Value>,
    conds: &mut Vec<Value>,
    status: &mut Value,
) -> Option<bool> {
    let (inp, job, now_s) = (pass.inp, pass.job, pass.now_s.as_str());
    let active_pods = &pass.active_pods;
    if finished.is_some() {
        // The finishing Job's active pods are deleted with their finalizers kept (upstream's
        // `deleteActivePods`); they are counted as terminating until they are gone.
        if !active_pods.is_empty() || !inp.settled {
            if inp.mode == Mode::Act {
                out.deletes = active_pods
                    .iter()
                    .map(|p| Delete {
                        name: obj::name(p).into(),
                        uid: obj::uid(p).into(),
                        remove_finalizer: false,
                    })
                    .collect();
                if out.manages() {
                    return None;
                }
            }
            *finished = None;
        }
        return Some(false);
    }
    let manage = inp.settled && !obj::is_deleting(job);
    if manage && inp.mode == Mode::Act {
        let parallelism = int(job, "/spec/parallelism").unwrap_or(1).max(0) as usize;
        manage_job(
            inp,
            out,
            active_pods,
            pass.terminating,
            m.succeeded,
            &m.succeeded_ix,
            pass.completions,
            parallelism,
            m.record,
            &m.per,
        );
        if out.manages() {
            return None;
        }
    }
    let active = active_pods.len();
    let complete = match pass.completions {
        None => m.succeeded > 0 && active == 0,
        Some(c) => m.succeeded >= c && active == 0,
    };
    if complete {
        *finished = Some(finish::success_criteria_met(now_s));
        return Some(false);
    }
    if !manage {
        return Some(false);
    }
    if suspended(job) {
        let changed = ensure_condition(
            conds,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            now_s,
        );
        if changed {
            out.events
                .push((false, "Suspended", "Job suspended".into()));
            // MutableSchedulingDirectivesForSuspendedJobs (beta, on since v1.36): a
            // suspended Job has no startTime; resuming sets a new one.
            if let Some(m) = status.as_object_mut() {
                m.remove("startTime");
            }
        }
        return Some(changed);
    }
    let changed = ensure_condition(
        conds,
        "Suspended",
        "False",
        "JobResumed",
        "Job resumed",
        now_s,
    );
    if changed {
        out.events.push((false, "Resumed", "Job resumed".into()));
        status["startTime"] = json!(now_s);
    }
    Some(changed)
}

/// Upstream's `manageJob`: suspend, delete extra pods, or create missing ones (after the
/// backoff).
#[allow(clippy::too_many_arguments)]
fn manage_job(
    inp: &Input,
    out: &mut Plan,
    active_pods: &[Obj],
    terminating: usize,
    succeeded: usize,
    succeeded_ix: &Intervals,
    completions: Option<usize>,
    parallelism: usize,
    record: Record,
    per: &PerIndex,
) {
    let job = inp.job;
    let active = active_pods.len();
    let del = |p: &Obj| Delete {
        name: obj::name(p).into(),
        uid: obj::uid(p).into(),
        remove_finalizer: true,
    };
    if suspended(job) {
        out.deletes = active_pods.iter().map(del).collect();
        return;
    }
    let terminating = if policy::only_replace_failed(job) {
        terminating
    } else {
        0
    };
    let want = match completions {
        None if succeeded > 0 => active,
        None => parallelism,
        Some(c) => c.saturating_sub(succeeded).min(parallelism),
    };
    let rm_at_least = active.saturating_sub(want);
    let mut rm = active_pods_for_removal(
        job,
        active_pods,
        rm_at_least,
        completions.unwrap_or(0),
        inp.now,
    );
    rm.truncate(MAX_CREATE_DELETE);
    if !rm.is_empty() {
        out.deletes = rm.iter().map(del).collect();
        return;
    }
    let diff = want.saturating_sub(terminating + active);
    if diff == 0 {
        return;
    }
    // With backoffLimitPerIndex each index waits its own backoff instead.
    let wait = if per.failed.is_some() {
        Duration::ZERO
    } else {
        backoff::remaining(&record, inp.now)
    };
    if wait > Duration::ZERO {
        out.requeue = crate::controller::sooner(out.requeue, Some(wait.max(BATCH_PERIOD)));
        return;
    }
    let diff = diff.min(MAX_CREATE_DELETE);
    let index_list: Vec<Option<usize>> = if is_indexed(job) {
        let comp = completions.unwrap_or(0);
        let mut held: BTreeSet<usize> = active_pods
            .iter()
            .filter_map(|p| indexes::completion_index(p))
            .collect();
        if policy::only_replace_failed(job) {
            held.extend(per.terminating_ix.iter().copied());
        }
        let done = match &per.failed {
            Some(f) => succeeded_ix.merge(f),
            None => succeeded_ix.clone(),
        };
        let mut ixs = indexes::first_pending(&done, &held, diff, comp);
        if per.failed.is_some() {
            let (now_ok, wait) = perindex::creatable(ixs, &per.delayed, inp.now);
            if !wait.is_zero() {
                out.requeue = crate::controller::sooner(out.requeue, Some(wait));
                return;
            }
            ixs = now_ok;
        }
        ixs.into_iter().map(Some).collect()
    } else {
        vec![None; diff]
    };
    for ix in index_list {
        let made = new_pod(job, ix).map(|mut p| {
            if let (Some(ix), Some(_)) = (ix, &per.failed) {
                let replaced = per.delayed.get(&ix).map(|p| &**p);
                let (counted, ignored) = perindex::new_failure_counts(job, replaced);
                let ann = &mut p["metadata"]["annotations"];
                ann[perindex::FAILURE_COUNT] = json!(counted.to_string());
                if ignored > 0 {
                    ann[perindex::IGNORED_FAILURE_COUNT] = json!(ignored.to_string());
                }
            }
            p
        });
        match made {
            Ok(p) => out.creates.push(p),
            Err(e) => {
                log::warn!("job-controller: {}: {e}", obj::key(job));
                out.warnings
                    .push((true, "FailedCreate", format!("Error creating: {e}")));
                return;
            }
        }
    }
}
