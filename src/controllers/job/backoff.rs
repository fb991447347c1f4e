//! Upstream's pod-recreation backoff (`backoff_utils.go`): after failures since the last
//! success, new pods wait 10 s doubling per failure, capped at 10 minutes (v1.28's
//! `MaxJobPodFailureBackOff`), counted from the last failure's finish time.

use crate::controllers::kit::pod::time_field;
use crate::obj::{self, At as _};
use serde_json::Value;
use std::time::{Duration, SystemTime};

pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(10);
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// Failures since the last success of one job, kept in memory as upstream does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    pub failures_after_last_success: u32,
    pub last_failure: Option<SystemTime>,
}

/// When a pod finished: the last container's finish time if all finished, else the
/// `Ready=False` transition, else deletion time minus the grace period, else its creation.
pub fn finished_time(p: &Value) -> SystemTime {
    if let Some(t) = finish_from_containers(p) {
        return t;
    }
    let ready_false = p
        .at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|l| {
            l.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        })
        .filter(|c| c.get("status").and_then(Value::as_str) == Some("False"))
        .and_then(|c| time_field(c.get("lastTransitionTime")));
    if let Some(t) = ready_false {
        return t;
    }
    if let Some(t) = time_field(p.at("/metadata/deletionTimestamp")) {
        let grace = p
            .at("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        return t - Duration::from_secs(grace);
    }
    crate::compat::timefmt::parse_rfc3339(obj::creation_timestamp(p))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

fn finish_from_containers(p: &Value) -> Option<SystemTime> {
    let list = p
        .at("/status/containerStatuses")
        .and_then(Value::as_array)?;
    let mut latest: Option<SystemTime> = None;
    for cs in list {
        let t = time_field(cs.at("/state/terminated/finishedAt"))?;
        latest = Some(latest.map_or(t, |l| l.max(t)));
    }
    latest
}

/// The record after this sync's newly finished pods (upstream's `newBackoffRecord`).
pub fn next_record(old: Record, succeeded: &[&Value], failed: &[&Value]) -> Record {
    let mut s: Vec<SystemTime> = succeeded.iter().map(|p| finished_time(p)).collect();
    let mut f: Vec<SystemTime> = failed.iter().map(|p| finished_time(p)).collect();
    crate::sort::sort(&mut s[..]);
    crate::sort::sort(&mut f[..]);
    match (s.last(), f.last()) {
        (None, None) => old,
        (None, Some(last)) => Record {
            failures_after_last_success: old.failures_after_last_success + f.len() as u32,
            last_failure: Some(*last),
        },
        (Some(_), None) => Record::default(),
        (Some(last_success), Some(_)) => {
            let mut r = Record::default();
            for t in f.iter().rev() {
                if t <= last_success {
                    break;
                }
                if r.last_failure.is_none() {
                    r.last_failure = Some(*t);
                }
                r.failures_after_last_success += 1;
            }
            r
        }
    }
}

/// How long new pods still wait at `now`.
pub fn remaining(r: &Record, now: SystemTime) -> Duration {
    let (n, Some(last)) = (r.failures_after_last_success, r.last_failure) else {
        return Duration::ZERO;
    };
    if n == 0 {
        return Duration::ZERO;
    }
    let mut backoff = DEFAULT_BACKOFF;
    for _ in 1..n {
        backoff *= 2;
        if backoff >= MAX_BACKOFF {
            backoff = MAX_BACKOFF;
            break;
        }
    }
    let elapsed = now.duration_since(last).unwrap_or_default();
    backoff.saturating_sub(elapsed)
}
