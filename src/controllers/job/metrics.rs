//! The job controller's metrics, with upstream's names and labels (`job_controller_*`):
//! syncs and their duration, finished Jobs, finished pods counted in a Job's status, failed
//! pods handled by a failure policy, terminated pods holding the tracking finalizer, and
//! (since v1.28) finished indexes, pod creations by reason, Jobs managed by other
//! controllers and syncs skipped for a stale cache.
//!
//! Counted as upstream counts them, with two differences of timing: a sync's duration and
//! result are those of its decision (the manager applies its writes afterwards; a write that
//! fails sends the key back, and that next sync is the one counted as `error` when it fails),
//! and the counters of a status write are added once the server accepted the write.

use super::indexes::Intervals;
use super::policy;
use super::sync::{self, has_finalizer};
use crate::controllers::kit::pod::phase;
use crate::metrics::Histogram;
use crate::metrics::{Family, MetricType};
use crate::obj::{self, At as _, Obj};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// What one status write adds to the counters once it is accepted.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Flush {
    pub mode: &'static str,
    pub succeeded: usize,
    pub failed: usize,
    /// Failure-policy action -> pods newly counted with it.
    pub policy: BTreeMap<&'static str, usize>,
    /// The job finished: ("succeeded" or "failed", the condition's reason).
    pub finished: Option<(&'static str, String)>,
    /// Indexed: (`backoffLimit` label, indexes newly succeeded, indexes newly failed).
    pub indexes: Option<(&'static str, usize, usize)>,
}

#[derive(Default)]
struct Counters {
    syncs: BTreeMap<(&'static str, &'static str, &'static str), (u64, Histogram)>,
    finished: BTreeMap<(&'static str, &'static str, String), u64>,
    pods: BTreeMap<(&'static str, &'static str), u64>,
    policy: BTreeMap<&'static str, u64>,
    tracking: BTreeMap<&'static str, u64>,
    /// UIDs of terminated pods seen holding the tracking finalizer.
    terminated_with_finalizer: HashSet<String>,
    /// (status, backoffLimit) -> finished indexes.
    indexes: BTreeMap<(&'static str, &'static str), u64>,
    /// (reason, status) -> pod creations.
    creations: BTreeMap<(&'static str, &'static str), u64>,
    /// controller_name -> Jobs seen managed by it.
    external: BTreeMap<String, u64>,
    /// (group, resource) -> syncs skipped because the cache was older than our write.
    stale: BTreeMap<(&'static str, &'static str), u64>,
}

/// Upstream's reason of a pod creation (`recordJobPodsCreationTotal`): `new`, or a
/// re-creation after failures (`recreate_failed` with podReplacementPolicy Failed) or after
/// failed or terminating pods (`recreate_terminating_or_failed`).
pub fn creation_reason(job: &Value, failed: usize, terminating: usize) -> &'static str {
    let only_failed =
        job.at("/spec/podReplacementPolicy").and_then(Value::as_str) == Some("Failed");
    if only_failed && failed > 0 {
        "recreate_failed"
    } else if failed > 0 || terminating > 0 {
        "recreate_terminating_or_failed"
    } else {
        "new"
    }
}

/// A pod creation of the Job controller went through or failed.
pub fn observe_creation(reason: &'static str, ok: bool) {
    let status = if ok { "succeeded" } else { "failed" };
    *counters().creations.entry((reason, status)).or_insert(0) += 1;
}

/// A Job managed by another controller was added (upstream counts it in `addJob`).
pub fn observe_external(controller: &str) {
    *counters()
        .external
        .entry(controller.to_string())
        .or_insert(0) += 1;
}

/// A sync skipped: the cached Job is older than the status last written.
pub fn observe_stale_skip() {
    // edgekcm always waits for its own Job writes; the count is upstream's, gated.
    if crate::config::gates::enabled("StaleControllerConsistencyJob") {
        *counters().stale.entry(("batch", "jobs")).or_insert(0) += 1;
    }
}

fn counters() -> std::sync::MutexGuard<'static, Counters> {
    static C: OnceLock<Mutex<Counters>> = OnceLock::new();
    C.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Upstream's buckets: 4 ms doubling, 15 of them.
fn new_histogram() -> Histogram {
    let bounds: Vec<f64> = (0..15).map(|i| 0.004 * f64::from(1u32 << i)).collect();
    Histogram::new(&bounds)
}

/// `completion_mode` label of a Job.
pub fn mode(job: &Value) -> &'static str {
    if sync::is_indexed(job) {
        "Indexed"
    } else {
        "NonIndexed"
    }
}

/// One sync: `action` is upstream's `reconciling`, `tracking`, `pods_created` or
/// `pods_deleted`.
pub fn observe_sync(mode: &'static str, ok: bool, action: &'static str, took: Duration) {
    let result = if ok { "success" } else { "error" };
    let mut c = counters();
    let e = c
        .syncs
        .entry((mode, result, action))
        .or_insert_with(|| (0, new_histogram()));
    e.0 += 1;
    e.1.observe(took.as_secs_f64());
}

/// What writing `new` over `old` (a Job's status) adds to the counters; `pods` are the Job's
/// pods the sync saw, `removals` the pods whose finalizer it removes.
pub fn flush(old: &Value, new: &Value, pods: &[Obj], removals: &[String]) -> Flush {
    let count = |j: &Value, f: &str| j.at(f).and_then(Value::as_i64).unwrap_or(0).max(0);
    let succeeded = if sync::is_indexed(new) {
        let n = count(new, "/spec/completions").max(0) as usize;
        let ix = |j: &Value| {
            Intervals::parse(
                j.at("/status/completedIndexes")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                n,
            )
            .total()
        };
        ix(new).saturating_sub(ix(old))
    } else {
        (count(new, "/status/succeeded") - count(old, "/status/succeeded")).max(0) as usize
    };
    let failed = (count(new, "/status/failed") - count(old, "/status/failed")).max(0) as usize;
    let uncounted_failed: HashSet<&str> = old
        .at("/status/uncountedTerminatedPods/failed")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut by_action = BTreeMap::new();
    if policy::policy(new).is_some() {
        for p in pods.iter().filter(|p| {
            removals.iter().any(|n| n == obj::name(p))
                && !uncounted_failed.contains(obj::uid(p))
                && policy::is_pod_failed(p, new)
        }) {
            if let Some(a) = policy::match_policy(new, p).action {
                *by_action.entry(a.as_str()).or_insert(0) += 1;
            }
        }
    }
    let finished = if sync::is_finished(new) && !sync::is_finished(old) {
        new.at("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| {
                matches!(c["type"].as_str(), Some("Complete" | "Failed")) && c["status"] == "True"
            })
            .map(|c| {
                let reason = c["reason"].as_str().unwrap_or("").to_string();
                match c["type"].as_str() {
                    Some("Complete") => ("succeeded", reason),
                    _ => ("failed", reason),
                }
            })
    } else {
        None
    };
    let indexes = sync::is_indexed(new).then(|| {
        let n = count(new, "/spec/completions").max(0) as usize;
        let per = super::perindex::enabled(new);
        let failed_ix = |j: &Value| {
            j.at("/status/failedIndexes")
                .and_then(Value::as_str)
                .map_or(0, |s| Intervals::parse(s, n).total())
        };
        let new_failed = if per {
            failed_ix(new).saturating_sub(failed_ix(old))
        } else {
            0
        };
        let label = if per { "perIndex" } else { "global" };
        (label, succeeded, new_failed)
    });
    Flush {
        mode: mode(new),
        succeeded,
        failed,
        indexes,
        policy: by_action,
        finished,
    }
}

/// A status write was accepted: add what it carried.
pub fn flushed(f: &Flush) {
    let mut c = counters();
    *c.pods.entry((f.mode, "succeeded")).or_insert(0) += f.succeeded as u64;
    *c.pods.entry((f.mode, "failed")).or_insert(0) += f.failed as u64;
    for (a, n) in &f.policy {
        *c.policy.entry(a).or_insert(0) += *n as u64;
    }
    if let Some((result, reason)) = &f.finished {
        *c.finished
            .entry((f.mode, result, reason.clone()))
            .or_insert(0) += 1;
    }
    if let Some((label, ok, failed)) = f.indexes {
        *c.indexes.entry(("succeeded", label)).or_insert(0) += ok as u64;
        if failed > 0 {
            *c.indexes.entry(("failed", label)).or_insert(0) += failed as u64;
        }
    }
}

fn finished_with_finalizer(p: &Value) -> bool {
    has_finalizer(p) && matches!(phase(p), "Succeeded" | "Failed")
}

/// A pod event (`new` None: deleted): counts terminated pods gaining or losing the tracking
/// finalizer, owned by a Job or not (upstream's `terminated_pods_tracking_finalizer_total`).
pub fn observe_pod(uid: &str, new: Option<&Value>) {
    let is = new.is_some_and(finished_with_finalizer);
    let mut c = counters();
    let was = if is {
        !c.terminated_with_finalizer.insert(uid.to_string())
    } else {
        c.terminated_with_finalizer.remove(uid)
    };
    if was != is {
        *c.tracking
            .entry(if is { "add" } else { "delete" })
            .or_insert(0) += 1;
    }
}

/// The families, registered when the controller is built (as upstream's).
pub fn metric_families() -> Vec<Family> {
    let c = counters();
    let mut dur = Family::new(
        "job_controller_job_sync_duration_seconds",
        "[STABLE] The time it took to sync a job",
        MetricType::Histogram,
    );
    let mut syncs = Family::new(
        "job_controller_job_syncs_total",
        "[STABLE] The number of job syncs",
        MetricType::Counter,
    );
    for ((m, r, a), (n, h)) in &c.syncs {
        let l = [("action", *a), ("completion_mode", *m), ("result", *r)];
        dur.push_histogram(&l, h.clone());
        syncs.push(&l, *n as f64);
    }
    let mut fin = Family::new(
        "job_controller_jobs_finished_total",
        "[STABLE] The number of finished jobs",
        MetricType::Counter,
    );
    for ((m, r, reason), n) in &c.finished {
        fin.push(
            &[("completion_mode", *m), ("reason", reason), ("result", *r)],
            *n as f64,
        );
    }
    let mut pods = Family::new(
        "job_controller_job_pods_finished_total",
        "[STABLE] The number of finished Pods that are fully tracked",
        MetricType::Counter,
    );
    for ((m, r), n) in &c.pods {
        pods.push(&[("completion_mode", *m), ("result", *r)], *n as f64);
    }
    let mut pol = Family::new(
        "job_controller_pod_failures_handled_by_failure_policy_total",
        "[BETA] The number of failed Pods handled by failure policy with\n\t\t\trespect to the failure policy action applied based on the matched\n\t\t\trule. Possible values of the action label correspond to the\n\t\t\tpossible values for the failure policy rule action, which are:\n\t\t\t\"FailJob\", \"Ignore\" and \"Count\".",
        MetricType::Counter,
    );
    for (a, n) in &c.policy {
        pol.push(&[("action", *a)], *n as f64);
    }
    let mut tr = Family::new(
        "job_controller_terminated_pods_tracking_finalizer_total",
        "[BETA] The number of terminated pods (phase=Failed|Succeeded)\nthat have the finalizer batch.kubernetes.io/job-tracking\nThe event label can be \"add\" or \"delete\".",
        MetricType::Counter,
    );
    for (e, n) in &c.tracking {
        tr.push(&[("event", *e)], *n as f64);
    }
    let mut v = vec![dur, syncs, fin, pods, pol, tr];
    v.extend(newer_families(&c));
    v
}

/// The families added since v1.28.
fn newer_families(c: &Counters) -> Vec<Family> {
    let mut ix = Family::alpha(
        "job_controller_job_finished_indexes_total",
        "The number of finished indexes. Possible values for the\n\t\t\tstatus label are: \"succeeded\", \"failed\". Possible values for the\n\t\t\tbackoffLimit label are: \"perIndex\" and \"global\"",
        MetricType::Counter,
    );
    for ((st, b), n) in &c.indexes {
        ix.push(&[("backoffLimit", *b), ("status", *st)], *n as f64);
    }
    let mut cr = Family::alpha(
        "job_controller_job_pods_creation_total",
        "The number of Pods created by the Job controller labelled with a reason for the Pod creation.\nThis metric also distinguishes between Pods created using different PodReplacementPolicy settings.\nPossible values of the \"reason\" label are:\n\"new\", \"recreate_terminating_or_failed\", \"recreate_failed\".\nPossible values of the \"status\" label are:\n\"succeeded\", \"failed\".",
        MetricType::Counter,
    );
    for ((r, st), n) in &c.creations {
        cr.push(&[("reason", *r), ("status", *st)], *n as f64);
    }
    let mut ext = Family::alpha(
        "job_controller_jobs_by_external_controller_total",
        "The number of Jobs managed by an external controller",
        MetricType::Counter,
    );
    for (name, n) in &c.external {
        ext.push(&[("controller_name", name)], *n as f64);
    }
    let mut stale = Family::alpha(
        "job_controller_stale_sync_skips_total",
        "Total number of Job syncs skipped due to a stale watch cache.",
        MetricType::Counter,
    );
    for ((g, r), n) in &c.stale {
        stale.push(&[("group", *g), ("resource", *r)], *n as f64);
    }
    vec![ix, cr, ext, stale]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn tracking_adds() -> f64 {
        let text = crate::metrics::encode(&metric_families());
        text.lines()
            .find(|l| {
                l.starts_with(
                    "job_controller_terminated_pods_tracking_finalizer_total{event=\"add\"}",
                )
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    #[test]
    fn a_status_write_counts_new_pods_and_the_finish() {
        let old = json!({"spec": {"completions": 3},
            "status": {"succeeded": 1, "uncountedTerminatedPods": {"failed": ["f0"]}}});
        let new = json!({"spec": {"completions": 3, "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}}]}},
            "status": {"succeeded": 3, "failed": 1, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached"}]}});
        let failed = |name: &str, uid: &str| -> Obj {
            Arc::new(json!({"metadata": {"name": name, "uid": uid,
                "finalizers": [sync::TRACKING_FINALIZER]},
                "spec": {"restartPolicy": "Never"},
                "status": {"phase": "Failed", "containerStatuses": [
                    {"name": "c", "state": {"terminated": {"exitCode": 42}}}]}}))
        };
        let pods = vec![failed("a", "fa"), failed("b", "f0")];
        let f = flush(&old, &new, &pods, &["a".into(), "b".into()]);
        assert_eq!(f.mode, "NonIndexed");
        assert_eq!((f.succeeded, f.failed), (2, 1));
        // "b" was already uncounted before: only "a" is new to the policy's count.
        assert_eq!(f.policy.get("Ignore"), Some(&1));
        assert_eq!(
            f.finished,
            Some(("succeeded", "CompletionsReached".to_string()))
        );
        // Nothing new: nothing counted.
        let again = flush(&new, &new, &[], &[]);
        assert_eq!(
            (again.succeeded, again.failed, again.finished),
            (0, 0, None)
        );
    }

    #[test]
    fn indexed_jobs_count_completed_indexes_and_failures_say_why() {
        let old = json!({"spec": {"completionMode": "Indexed", "completions": 5},
            "status": {"completedIndexes": "0"}});
        let new = json!({"spec": {"completionMode": "Indexed", "completions": 5},
            "status": {"completedIndexes": "0-2", "conditions": [
                {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}});
        let f = flush(&old, &new, &[], &[]);
        assert_eq!((f.mode, f.succeeded), ("Indexed", 2));
        assert_eq!(f.finished, Some(("failed", "DeadlineExceeded".into())));
    }

    #[test]
    fn terminated_pods_with_the_finalizer_are_counted_once() {
        let done = json!({"metadata": {"uid": "metrics-t1", "finalizers": [sync::TRACKING_FINALIZER]},
            "status": {"phase": "Succeeded"}});
        let released = json!({"metadata": {"uid": "metrics-t1"}, "status": {"phase": "Succeeded"}});
        let before = tracking_adds();
        observe_pod("metrics-t1", Some(&done));
        observe_pod("metrics-t1", Some(&done));
        assert_eq!(tracking_adds() - before, 1.0);
        observe_pod("metrics-t1", Some(&released));
        observe_pod("metrics-t1", None);
        observe_sync("NonIndexed", true, "tracking", Duration::from_millis(3));
        let text = crate::metrics::encode(&metric_families());
        assert!(text.contains("# TYPE job_controller_job_sync_duration_seconds histogram"));
        assert!(text
            .contains("job_controller_terminated_pods_tracking_finalizer_total{event=\"delete\"}"));
    }

    #[test]
    fn creation_reasons_and_finished_indexes_as_upstream_labels_them() {
        let j = json!({"spec": {}});
        assert_eq!(creation_reason(&j, 0, 0), "new");
        assert_eq!(creation_reason(&j, 0, 1), "recreate_terminating_or_failed");
        assert_eq!(creation_reason(&j, 2, 0), "recreate_terminating_or_failed");
        let j = json!({"spec": {"podReplacementPolicy": "Failed"}});
        assert_eq!(creation_reason(&j, 1, 0), "recreate_failed");
        assert_eq!(creation_reason(&j, 0, 1), "recreate_terminating_or_failed");
        let spec = json!({"completionMode": "Indexed", "completions": 5,
            "backoffLimitPerIndex": 1});
        let old = json!({"spec": spec, "status": {"completedIndexes": "0", "failedIndexes": ""}});
        let new = json!({"spec": spec,
            "status": {"completedIndexes": "0-2", "failedIndexes": "4"}});
        let f = flush(&old, &new, &[], &[]);
        assert_eq!(f.indexes, Some(("perIndex", 2, 1)));
        let new = json!({"spec": {"completionMode": "Indexed", "completions": 5},
            "status": {"completedIndexes": "0,1"}});
        let f = flush(&json!({"spec": {}}), &new, &[], &[]);
        assert_eq!(f.indexes, Some(("global", 2, 0)));
        assert_eq!(flush(&j, &j, &[], &[]).indexes, None);
    }
}
