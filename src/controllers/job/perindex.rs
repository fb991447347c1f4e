//! `backoffLimitPerIndex` and `maxFailedIndexes` of Indexed Jobs (upstream's
//! `indexed_job_utils.go` and `backoff_utils.go`; JobBackoffLimitPerIndex, GA in v1.33):
//! an index fails once its pods failed more than the limit (or a `FailIndex` rule matched),
//! is written to `status.failedIndexes` and not started again; a failed pod's finalizer is
//! kept until its replacement exists, so that the replacement carries the index's failure
//! counts in the `batch.kubernetes.io/job-index-failure-count` and
//! `job-index-ignored-failure-count` annotations; each index waits its own recreation backoff.

use super::backoff::{self, DEFAULT_BACKOFF, MAX_BACKOFF};
use super::indexes::{self, Intervals};
use super::policy::{self, PolicyAction};
use super::sync::{has_finalizer, int};
use crate::obj::{self, At as _, Obj};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

pub const FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
pub const IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";

/// The Job has `spec.backoffLimitPerIndex`.
pub fn enabled(job: &Value) -> bool {
    int(job, "/spec/backoffLimitPerIndex").is_some()
}

/// An annotation's count; 0 when absent or not a non-negative 32-bit number.
fn count(pod: &Value, key: &str) -> i64 {
    obj::annotation(pod, key)
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|v| *v >= 0)
        .map_or(0, i64::from)
}

/// The index of this failed pod fails: a `FailIndex` rule matched, or its counted failures
/// reached `backoffLimitPerIndex` (upstream's `isIndexFailed`).
pub fn is_index_failed(job: &Value, pod: &Value) -> bool {
    if !policy::is_pod_failed(pod, job) {
        return false;
    }
    let counted = if policy::policy(job).is_some() {
        let m = policy::match_policy(job, pod);
        if m.action == Some(PolicyAction::FailIndex) {
            return true;
        }
        m.counts
    } else {
        true
    };
    let limit = int(job, "/spec/backoffLimitPerIndex").unwrap_or(0);
    counted && count(pod, FAILURE_COUNT) >= limit
}

/// `status.failedIndexes` with the indexes newly failed by pods still holding the finalizer.
pub fn failed_indexes(job: &Value, pods: &[Obj], completions: usize) -> Intervals {
    let prev = Intervals::parse(
        job.at("/status/failedIndexes")
            .and_then(Value::as_str)
            .unwrap_or(""),
        completions,
    );
    let new: BTreeSet<usize> = pods
        .iter()
        .filter(|p| has_finalizer(p) && is_index_failed(job, p))
        .filter_map(|p| indexes::valid_index(p, completions))
        .collect();
    prev.with_indexes(new)
}

/// Per index neither succeeded, failed nor active: the last failed pod (by failure count,
/// then finish time) whose finalizer stays until its replacement is made (upstream's
/// `getPodsWithDelayedDeletionPerIndex`).
pub fn delayed_deletion(
    job: &Value,
    pods: &[Obj],
    active: &[Obj],
    succeeded: &Intervals,
    failed: &Intervals,
    completions: usize,
) -> BTreeMap<usize, Obj> {
    let active_ix: BTreeSet<usize> = active
        .iter()
        .filter_map(|p| indexes::completion_index(p))
        .collect();
    let mut out: BTreeMap<usize, Obj> = BTreeMap::new();
    for p in pods
        .iter()
        .filter(|p| has_finalizer(p) && policy::is_pod_failed(p, job))
    {
        let Some(ix) = indexes::valid_index(p, completions) else {
            continue;
        };
        if succeeded.has(ix) || failed.has(ix) || active_ix.contains(&ix) {
            continue;
        }
        let later = out.get(&ix).is_none_or(|last| {
            absolute_failures(last) <= absolute_failures(p)
                && backoff::finished_time(p) >= backoff::finished_time(last)
        });
        if later {
            out.insert(ix, p.clone());
        }
    }
    out
}

fn absolute_failures(p: &Value) -> i64 {
    count(p, FAILURE_COUNT) + count(p, IGNORED_FAILURE_COUNT)
}

/// The failure counts a replacement of `replaced` carries (upstream's
/// `getNewIndexFailureCounts`): (counted, ignored).
pub fn new_failure_counts(job: &Value, replaced: Option<&Value>) -> (i64, i64) {
    let Some(p) = replaced else { return (0, 0) };
    let (mut counted, mut ignored) = (count(p, FAILURE_COUNT), count(p, IGNORED_FAILURE_COUNT));
    if policy::policy(job).is_none() || policy::match_policy(job, p).counts {
        counted += 1;
    } else {
        ignored += 1;
    }
    (counted, ignored)
}

/// How long the index of `last_failed` still waits before its pod is made again (upstream's
/// `getRemainingTimePerIndex`).
pub fn remaining(last_failed: Option<&Value>, now: SystemTime) -> Duration {
    let Some(p) = last_failed else {
        return Duration::ZERO;
    };
    let failures = absolute_failures(p) + 1;
    let mut wait = DEFAULT_BACKOFF;
    for _ in 1..failures {
        wait *= 2;
        if wait >= MAX_BACKOFF {
            wait = MAX_BACKOFF;
            break;
        }
    }
    let elapsed = now
        .duration_since(backoff::finished_time(p))
        .unwrap_or_default();
    wait.saturating_sub(elapsed)
}

/// Of `wanted`, the indexes whose backoff is over; when none is, the shortest wait left
/// (upstream's `getPodCreationInfoForIndependentIndexes`).
pub fn creatable(
    wanted: Vec<usize>,
    delayed: &BTreeMap<usize, Obj>,
    now: SystemTime,
) -> (Vec<usize>, Duration) {
    let mut now_ok = Vec::new();
    let mut least: Option<Duration> = None;
    for ix in wanted {
        let wait = remaining(delayed.get(&ix).map(|p| &**p), now);
        if wait.is_zero() {
            now_ok.push(ix);
        } else {
            least = Some(least.map_or(wait, |l| l.min(wait)));
        }
    }
    if now_ok.is_empty() {
        (now_ok, least.unwrap_or_default())
    } else {
        (now_ok, Duration::ZERO)
    }
}
