//! How a Job finishes, as v1.37 decides it (upstream's `syncJob` before `manageJob`): the
//! interim `SuccessCriteriaMet` or `FailureTarget` condition, from the conditions already
//! written, the pod failure policy, the backoff limit, the active deadline, the failed
//! indexes and the success policy; and whether the Job is this controller's at all.

use super::indexes::Intervals;
use super::perindex;
use super::policy;
use super::sync::{condition, field, int, suspended, Pass, Plan};
use crate::controllers::kit::pod::phase;
use crate::obj::{At as _, Obj};
use serde_json::Value;
use std::time::{Duration, SystemTime};

/// Sum of container restarts of running and pending pods reaches the limit (restartPolicy
/// OnFailure only; upstream's `pastBackoffLimitOnFailure`).
fn past_backoff_on_failure(job: &Value, pods: &[Obj], backoff_limit: i64) -> bool {
    if job
        .at("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
        != Some("OnFailure")
    {
        return false;
    }
    let mut restarts = 0i64;
    for p in pods
        .iter()
        .filter(|p| matches!(phase(p), "Running" | "Pending"))
    {
        for list in ["/status/initContainerStatuses", "/status/containerStatuses"] {
            for cs in p.at(list).and_then(Value::as_array).into_iter().flatten() {
                restarts += cs.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
            }
        }
    }
    if backoff_limit == 0 {
        restarts > 0
    } else {
        restarts >= backoff_limit
    }
}

/// The part of upstream's `syncJob` that finds the condition finishing the Job, in v1.37's
/// order: a `SuccessCriteriaMet` already written (the Job completes), a `FailureTarget`
/// already written (it becomes `Failed`), a pod the failure policy fails the Job for, the
/// backoff limit, the active deadline. A new failure is the interim `FailureTarget`; the
/// `Failed` condition follows once the pods are gone ([`super::tracking`]). A deadline still
/// ahead sets the requeue.
pub(super) fn finishing_condition(
    pass: &Pass,
    conds: &[Value],
    failed: usize,
    start: Option<SystemTime>,
    out: &mut Plan,
) -> Option<Value> {
    let (job, now_s) = (pass.job, pass.now_s.as_str());
    let is_true = |t: &str| {
        conds
            .iter()
            .find(|c| field(c, "type") == t && field(c, "status") == "True")
    };
    if let Some(scm) = is_true("SuccessCriteriaMet") {
        return Some(scm.clone());
    }
    if let Some(ft) = is_true("FailureTarget") {
        return Some(condition(
            "Failed",
            "True",
            field(ft, "reason"),
            field(ft, "message"),
            now_s,
        ));
    }
    if policy::policy(job).is_some() {
        if let Some(msg) = pass
            .pods
            .iter()
            .filter(|p| policy::is_pod_failed(p, job))
            .find_map(|p| policy::match_policy(job, p).fail_job)
        {
            return Some(failure_target("PodFailurePolicy", &msg, now_s));
        }
    }
    // kube-apiserver defaults backoffLimit to 6, or to the int32 maximum with
    // backoffLimitPerIndex.
    let backoff_limit = int(job, "/spec/backoffLimit").unwrap_or(if perindex::enabled(job) {
        i64::from(i32::MAX)
    } else {
        6
    });
    let ads = int(job, "/spec/activeDeadlineSeconds");
    if failed as i64 > backoff_limit || past_backoff_on_failure(job, &pass.pods, backoff_limit) {
        return Some(failure_target(
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            now_s,
        ));
    }
    if let (Some(ads), Some(start), false) = (ads, start, suspended(job)) {
        let allowed = Duration::from_secs(ads.max(0) as u64);
        let since = pass.inp.now.duration_since(start).unwrap_or_default();
        if since >= allowed {
            return Some(failure_target(
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
                now_s,
            ));
        }
        out.requeue = Some(allowed - since);
    }
    None
}

/// Upstream's `newFailureCondition`: the interim `FailureTarget`.
fn failure_target(reason: &str, message: &str, now: &str) -> Value {
    condition("FailureTarget", "True", reason, message, now)
}

/// Upstream's `newSuccessCondition`: the interim `SuccessCriteriaMet` of a Job that reached
/// its completions.
pub(super) fn success_criteria_met(now: &str) -> Value {
    condition(
        "SuccessCriteriaMet",
        "True",
        "CompletionsReached",
        "Reached expected number of succeeded pods",
        now,
    )
}

/// The Job is managed by another controller (`spec.managedBy` set to anything but
/// `kubernetes.io/job-controller`; JobManagedBy, GA in v1.35): left alone.
pub fn managed_elsewhere(job: &Value) -> bool {
    job.at("/spec/managedBy")
        .and_then(Value::as_str)
        .is_some_and(|m| m != JOB_CONTROLLER_NAME)
}

/// Upstream's `batch.JobControllerName`.
pub const JOB_CONTROLLER_NAME: &str = "kubernetes.io/job-controller";

/// Upstream's failure scenarios of backoffLimitPerIndex: more failed indexes than
/// `maxFailedIndexes`, or every index finished with some failed.
pub(super) fn failed_indexes_condition(
    job: &Value,
    failed: &Intervals,
    succeeded: &Intervals,
    pass: &Pass,
) -> Option<Value> {
    let n = failed.total();
    if int(job, "/spec/maxFailedIndexes").is_some_and(|max| n as i64 > max) {
        return Some(failure_target(
            "MaxFailedIndexesExceeded",
            "Job has exceeded the specified maximal number of failed indexes",
            &pass.now_s,
        ));
    }
    if n > 0 && n + succeeded.total() >= pass.comp_n {
        return Some(failure_target(
            "FailedIndexes",
            "Job has failed indexes",
            &pass.now_s,
        ));
    }
    None
}
