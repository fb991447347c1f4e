//! Upstream's `trackJobStatusAndRemoveFinalizers` (its `tracking_utils.go` keeps the
//! uncounted pods): the pods whose tracking finalizer can go, their UIDs (or, Indexed, their
//! indexes) added to the status first, the counters, and the finished condition once nothing
//! is left uncounted.

use super::backoff::Record;
use super::policy::{self, PolicyAction};
use super::sync::{
    condition, ensure_condition, field, has_finalizer, int, uid_list, Pass, PerIndex, Plan,
    MAX_UNCOUNTED,
};
use crate::controllers::kit::pod::{is_pod_ready, phase};
use crate::obj;
use serde_json::{json, Map, Value};
use std::collections::HashSet;

/// What the steps before tracking leave to it.
pub(super) struct Track {
    pub status: Value,
    pub conds: Vec<Value>,
    /// The condition that finishes the Job, once nothing is uncounted.
    pub finished: Option<Value>,
    pub suspend_changed: bool,
    pub record: Record,
    pub per: PerIndex,
}

/// The uncounted lists and counters as this pass leaves them.
struct Counted {
    succeeded: Vec<String>,
    failed: Vec<String>,
    n_succeeded: usize,
    n_failed: usize,
    /// Indexes newly succeeded (Indexed).
    new_ix: Vec<usize>,
    /// `MAX_UNCOUNTED` reached: more pods wait for the next pass.
    reached_max: bool,
    needs_flush: bool,
}

/// Track the Job's pods into `out`: the finalizers to remove and the status to write.
pub(super) fn track_status(pass: &Pass, t: Track, out: &mut Plan) {
    let Track {
        mut status,
        mut conds,
        mut finished,
        suspend_changed,
        record,
        per,
    } = t;
    let job = pass.job;
    let active = pass.active_pods.len();
    let ready = pass.active_pods.iter().filter(|p| is_pod_ready(p)).count();
    let old_active = int(job, "/status/active").unwrap_or(0);
    let old_ready = int(job, "/status/ready");
    let needs_flush =
        suspend_changed || active as i64 != old_active || old_ready != Some(ready as i64);
    let failing = finished.as_ref().is_some_and(|f| {
        field(f, "type") != "SuccessCriteriaMet" && field(f, "type") != "Complete"
    });
    let mut c = count_uncounted(pass, (finished.is_some(), failing), &per, needs_flush, out);
    if let Some(f) = &per.failed {
        let s = f.to_string();
        if status.get("failedIndexes").and_then(Value::as_str) != Some(s.as_str()) {
            c.needs_flush = true;
            status["failedIndexes"] = json!(s);
        }
    }
    if pass.indexed {
        let all = pass.prev_ix.with_indexes(std::mem::take(&mut c.new_ix));
        let s = all.to_string();
        if s != status
            .get("completedIndexes")
            .and_then(Value::as_str)
            .unwrap_or("")
        {
            c.needs_flush = true;
        }
        c.n_succeeded = all.total();
        if s.is_empty() {
            status.as_object_mut().map(|m| m.remove("completedIndexes"));
        } else {
            status["completedIndexes"] = json!(s);
        }
    }
    // The interim conditions are written first (with the pods' finalizers still on); the
    // final one follows once every pod is counted and none is terminating.
    let mut interim_added = false;
    match finished.as_ref().map(|f| field(f, "type")) {
        Some("FailureTarget") => {
            let f = finished.take().unwrap_or_default();
            conds.push(f.clone());
            c.needs_flush = true;
            interim_added = true;
            finished = Some(condition(
                "Failed",
                "True",
                field(&f, "reason"),
                field(&f, "message"),
                &pass.now_s,
            ));
        }
        Some("SuccessCriteriaMet") => {
            let f = finished.take().unwrap_or_default();
            if !conds
                .iter()
                .any(|x| field(x, "type") == "SuccessCriteriaMet" && field(x, "status") == "True")
            {
                conds.push(f.clone());
                c.needs_flush = true;
                interim_added = true;
            }
            finished = Some(condition(
                "Complete",
                "True",
                field(&f, "reason"),
                field(&f, "message"),
                &pass.now_s,
            ));
        }
        _ => {}
    }
    if pass.terminating as i64 != int(job, "/status/terminating").unwrap_or(-1) {
        c.needs_flush = true;
    }
    // Finished once everything is counted, no finalizer is left to remove and no pod is
    // terminating (upstream's `enactJobFinished`), in a write after the one adding the
    // interim condition, as upstream's two writes.
    out.again = interim_added;
    let done = !interim_added
        && !c.reached_max
        && c.succeeded.is_empty()
        && c.failed.is_empty()
        && pass.terminating == 0;
    if let Some(f) = finished
        .as_ref()
        .filter(|_| done && out.removals.is_empty())
    {
        finish(pass, f, &c, &mut conds, &mut status, out);
        c.needs_flush = true;
    }
    status["terminating"] = json!(pass.terminating);
    write_counts(&mut status, &c, active, ready, conds);
    if c.needs_flush {
        let mut j = job.clone();
        j["status"] = status;
        out.status = Some(j);
        out.record = Some(record);
    }
}

/// The pods whose finalizer can go (into `out.removals`), and the uncounted lists and
/// counters with them: UIDs no longer held by a finalizer counted, the finished ones added.
fn count_uncounted(
    pass: &Pass,
    (finishing, failing): (bool, bool),
    per: &PerIndex,
    needs_flush: bool,
    out: &mut Plan,
) -> Counted {
    let job = pass.job;
    let job_deleting = obj::is_deleting(job);
    let with_fin: HashSet<&str> = pass
        .pods
        .iter()
        .filter(|p| has_finalizer(p))
        .map(|p| obj::uid(p))
        .collect();
    let mut c = Counted {
        succeeded: uid_list(job, "succeeded"),
        failed: uid_list(job, "failed"),
        n_succeeded: int(job, "/status/succeeded").unwrap_or(0).max(0) as usize,
        n_failed: int(job, "/status/failed").unwrap_or(0).max(0) as usize,
        new_ix: Vec::new(),
        reached_max: false,
        needs_flush,
    };
    let (ls, lf) = (c.succeeded.len(), c.failed.len());
    c.succeeded.retain(|u| with_fin.contains(u.as_str()));
    c.failed.retain(|u| with_fin.contains(u.as_str()));
    if c.succeeded.len() != ls || c.failed.len() != lf {
        c.needs_flush = true;
        c.n_succeeded += ls - c.succeeded.len();
        c.n_failed += lf - c.failed.len();
    }
    for p in pass.pods.iter().filter(|p| has_finalizer(p)) {
        let uid = obj::uid(p);
        // A Job that met its success criteria deletes its other pods in the same sync as it
        // removes their finalizers; upstream, which reads them as not yet deleting then,
        // does not count them as failed. Only pods that did fail are.
        let failed_pod = if finishing && !failing {
            phase(p) == "Failed"
        } else {
            policy::is_pod_failed(p, job)
        };
        let can_remove = job_deleting || finishing || phase(p) == "Succeeded" || failed_pod;
        if !can_remove {
            continue;
        }
        // backoffLimitPerIndex: the last failed pod of an index keeps its finalizer until its
        // replacement is made (upstream's `canRemoveFinalizer`).
        let delayed = super::indexes::completion_index(p)
            .and_then(|ix| per.delayed.get(&ix))
            .is_some_and(|d| obj::uid(d) == uid);
        if delayed && !job_deleting && !finishing && phase(p) != "Succeeded" {
            continue;
        }
        out.removals.push(obj::name(p).to_string());
        if phase(p) == "Succeeded" && !pass.unc_f.contains(uid) {
            if pass.indexed {
                if let Some(ix) = super::indexes::valid_index(p, pass.comp_n) {
                    if !pass.prev_ix.has(ix) {
                        c.new_ix.push(ix);
                        c.needs_flush = true;
                    }
                }
            } else if !pass.unc_s.contains(uid) {
                c.needs_flush = true;
                c.succeeded.push(uid.to_string());
            }
        } else if (failed_pod || failing) && !pass.unc_f.contains(uid) && pass.counts_index(p) {
            let m = policy::match_policy(job, p);
            if m.counts {
                c.needs_flush = true;
                c.failed.push(uid.to_string());
            }
            if let Some(PolicyAction::Count | PolicyAction::Ignore | PolicyAction::FailJob) =
                m.action
            {
                log::trace!(
                    "job-controller: pod {} handled by the failure policy: {:?}",
                    obj::name(p),
                    m.action
                );
            }
        }
        if c.new_ix.len() + c.succeeded.len() + c.failed.len() >= MAX_UNCOUNTED {
            c.reached_max = true;
            break;
        }
    }
    c
}

/// The Job finishes: its condition, completion time and Events.
fn finish(
    pass: &Pass,
    f: &Value,
    c: &Counted,
    conds: &mut Vec<Value>,
    status: &mut Value,
    out: &mut Plan,
) {
    let t = field(f, "type").to_string();
    ensure_condition(
        conds,
        &t,
        "True",
        field(f, "reason"),
        field(f, "message"),
        &pass.now_s,
    );
    if t == "Complete" {
        status["completionTime"] = json!(pass.now_s);
        if pass.completions.is_some_and(|n| c.n_succeeded > n) {
            out.events.push((
                true,
                "TooManySucceededPods",
                "Too many succeeded pods running after completion count reached".into(),
            ));
        }
        out.events
            .push((false, "Completed", "Job completed".into()));
    } else {
        out.events.push((
            true,
            leak(field(f, "reason")),
            field(f, "message").to_string(),
        ));
    }
    out.finished = true;
}

/// The counters, the uncounted lists and the conditions into `status`.
fn write_counts(status: &mut Value, c: &Counted, active: usize, ready: usize, conds: Vec<Value>) {
    let set_count = |status: &mut Value, f: &str, n: usize| {
        if n == 0 {
            status.as_object_mut().map(|m| m.remove(f));
        } else {
            status[f] = json!(n);
        }
    };
    set_count(status, "active", active);
    status["ready"] = json!(ready);
    set_count(status, "succeeded", c.n_succeeded);
    set_count(status, "failed", c.n_failed);
    let mut unc = Map::new();
    if !c.succeeded.is_empty() {
        unc.insert("succeeded".into(), json!(c.succeeded));
    }
    if !c.failed.is_empty() {
        unc.insert("failed".into(), json!(c.failed));
    }
    status["uncountedTerminatedPods"] = Value::Object(unc);
    if conds.is_empty() {
        status.as_object_mut().map(|m| m.remove("conditions"));
    } else {
        status["conditions"] = json!(conds);
    }
}

/// Event reasons are upstream's fixed strings; a FailureTarget's reason is one of them.
fn leak(reason: &str) -> &'static str {
    match reason {
        "BackoffLimitExceeded" => "BackoffLimitExceeded",
        "DeadlineExceeded" => "DeadlineExceeded",
        "PodFailurePolicy" => "PodFailurePolicy",
        "FailedIndexes" => "FailedIndexes",
        "MaxFailedIndexesExceeded" => "MaxFailedIndexesExceeded",
        _ => "Failed",
    }
}
