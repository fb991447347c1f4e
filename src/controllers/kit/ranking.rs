//! Which pods go first on scale-down (upstream's `ActivePodsWithRanks` ordering): unassigned
//! before assigned, pending before unknown before running, not ready before ready, higher
//! pod-deletion-cost last, more pods of the owner on the same node first, recently ready or
//! created first (on a log scale), more restarts first.

use super::pod::{is_pod_active, is_pod_ready, phase, ready_condition, time_field};

/// Pod annotation lowering (or raising) a pod's preference for deletion on scale-down.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
use crate::obj::At as _;
use crate::obj::{self, Obj};
use serde_json::Value;
use std::collections::HashMap;
use std::time::SystemTime;

fn deletion_cost(p: &Value) -> i32 {
    let Some(v) = obj::annotation(p, POD_DELETION_COST) else {
        return 0;
    };
    let b = v.as_bytes();
    let first_ok = match b.first() {
        Some(b'-') => true,
        Some(b'0') => v == "0",
        Some(c) => c.is_ascii_digit(),
        None => false,
    };
    if !first_ok {
        return 0;
    }
    v.parse::<i32>().unwrap_or(0)
}

/// What the ranking compares, read once per pod.
struct Ranked<'a> {
    pod: &'a Obj,
    rank: usize,
    assigned: bool,
    node: &'a str,
    phase: u8,
    ready: bool,
    ready_time: Option<SystemTime>,
    cost: i32,
    /// The most restarts of a regular container, then of a sidecar (v1.31+).
    restarts: (i64, i64),
    created: Option<SystemTime>,
    uid: &'a str,
}

impl<'a> Ranked<'a> {
    fn new(pod: &'a Obj, rank: usize) -> Self {
        let node = pod
            .at("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        let phase = match phase(pod) {
            "Unknown" => 1,
            "Running" => 2,
            _ => 0,
        };
        let ready = is_pod_ready(pod);
        let ready_time = if ready {
            time_field(ready_condition(pod).and_then(|c| c.get("lastTransitionTime")))
        } else {
            None
        };
        let restarts = max_restarts(pod);
        Ranked {
            pod,
            rank,
            assigned: !node.is_empty(),
            node,
            phase,
            ready,
            ready_time,
            cost: deletion_cost(pod),
            restarts,
            created: time_field(pod.at("/metadata/creationTimestamp")),
            uid: obj::uid(pod),
        }
    }
}

/// Upstream's maxContainerRestarts: the most restarts of any regular container, and of any
/// sidecar (an init container with `restartPolicy: Always`); the sidecars' count breaks a
/// tie of the first (upstream's compareMaxContainerRestarts, v1.31+).
fn max_restarts(pod: &Value) -> (i64, i64) {
    let most = |statuses: &str, only: Option<&[&str]>| {
        pod.at(statuses)
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter(|c| {
                        only.is_none_or(|names| {
                            c.get("name")
                                .and_then(Value::as_str)
                                .is_some_and(|n| names.contains(&n))
                        })
                    })
                    .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                    .fold(0, i64::max)
            })
            .unwrap_or(0)
    };
    let sidecars: Vec<&str> = pod
        .at("/spec/initContainers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter(|c| c.get("restartPolicy").and_then(Value::as_str) == Some("Always"))
                .filter_map(|c| c.get("name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let sidecar = if sidecars.is_empty() {
        0
    } else {
        most("/status/initContainerStatuses", Some(&sidecars))
    };
    (most("/status/containerStatuses", None), sidecar)
}

/// t1 after t2, a missing (zero) time counting as after any other.
fn after_or_zero(t1: Option<SystemTime>, t2: Option<SystemTime>) -> bool {
    match (t1, t2) {
        (Some(a), Some(b)) => a > b,
        (a, _) => a.is_none(),
    }
}

/// The difference of the base-2 logarithms of the ages (in nanoseconds) of two times.
pub(crate) fn log_rank_diff(t1: SystemTime, t2: SystemTime, now: SystemTime) -> i64 {
    let rank = |t: SystemTime| match now.duration_since(t) {
        Ok(d) if !d.is_zero() => (d.as_nanos() as f64).log2() as i64,
        _ => -1,
    };
    rank(t1) - rank(t2)
}

/// Compare two times newer-first, on a logarithmic scale with the UID as tie-break.
fn newer_first(
    a: &Ranked,
    b: &Ranked,
    t1: Option<SystemTime>,
    t2: Option<SystemTime>,
    now: SystemTime,
) -> bool {
    match (t1, t2) {
        (Some(x), Some(y)) => match log_rank_diff(x, y, now) {
            0 => a.uid < b.uid,
            d => d < 0,
        },
        _ => after_or_zero(t1, t2),
    }
}

/// Upstream's `ActivePodsWithRanks.Less`: true when `a` should be deleted before `b`.
fn delete_first(a: &Ranked, b: &Ranked, now: SystemTime) -> bool {
    if a.node != b.node && (!a.assigned || !b.assigned) {
        return !a.assigned;
    }
    if a.phase != b.phase {
        return a.phase < b.phase;
    }
    if a.ready != b.ready {
        return !a.ready;
    }
    if a.cost != b.cost {
        return a.cost < b.cost;
    }
    if a.rank != b.rank {
        return a.rank > b.rank;
    }
    if a.ready && b.ready && a.ready_time != b.ready_time {
        return newer_first(a, b, a.ready_time, b.ready_time, now);
    }
    if a.restarts != b.restarts {
        // Tuples compare the regular count first, then the sidecars'.
        return a.restarts > b.restarts;
    }
    if a.created != b.created {
        return newer_first(a, b, a.created, b.created, now);
    }
    false
}

/// Stable merge sort by a "less" function that need not be a total order (a comparator
/// that is not one may make the standard sorts panic).
fn merge_sort_by<T>(v: Vec<T>, less: &impl Fn(&T, &T) -> bool) -> Vec<T> {
    if v.len() <= 1 {
        return v;
    }
    let mut left = v;
    let right = left.split_off(left.len() / 2);
    let (left, right) = (merge_sort_by(left, less), merge_sort_by(right, less));
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut l, mut r) = (left.into_iter().peekable(), right.into_iter().peekable());
    loop {
        let take_right = match (l.peek(), r.peek()) {
            (Some(a), Some(b)) => less(b, a),
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (None, None) => break,
        };
        let next = if take_right { r.next() } else { l.next() };
        out.extend(next);
    }
    out
}

/// The `n` pods to delete first: ranked by upstream's rules, with the rank of a pod the
/// number of active related pods on its node.
pub fn pods_to_delete(pods: &[Obj], related: &[Obj], n: usize, now: SystemTime) -> Vec<Obj> {
    let mut on_node: HashMap<&str, usize> = HashMap::new();
    for p in related.iter().filter(|p| is_pod_active(p)) {
        let node = p.at("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        *on_node.entry(node).or_default() += 1;
    }
    pods_to_delete_by_node(pods, |node| on_node.get(node).copied().unwrap_or(0), n, now)
}

/// `pods_to_delete` with the related pods already counted: `on_node` tells how many active
/// related pods run on a node (`""`: unassigned).
pub fn pods_to_delete_by_node(
    pods: &[Obj],
    on_node: impl Fn(&str) -> usize,
    n: usize,
    now: SystemTime,
) -> Vec<Obj> {
    if n >= pods.len() {
        return pods.to_vec();
    }
    let ranked: Vec<Ranked> = pods
        .iter()
        .map(|p| {
            let node = p.at("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
            Ranked::new(p, on_node(node))
        })
        .collect();
    merge_sort_by(ranked, &|a: &Ranked, b: &Ranked| delete_first(a, b, now))
        .into_iter()
        .take(n)
        .map(|r| r.pod.clone())
        .collect()
}
