//! Edge autonomy, edgekcm's own and opt-in (no upstream counterpart; openyurt and kubeedge
//! patch node-lifecycle for the same end). A node whose link to the control plane drops
//! usually goes Unknown after `--node-monitor-grace-period`, is tainted
//! `node.kubernetes.io/unreachable` (NoSchedule at once, NoExecute from its zone's queue, and
//! taint-eviction-controller then evicts its pods) and its pods are marked not ready, so they
//! leave every Service's endpoints. For a node whose workloads run on without the control
//! plane, that turns a link outage into an application outage.
//!
//! With `--node-autonomy-duration` above zero, a node annotated
//! `node.edgekcm.io/autonomy: "true"` that goes Unknown keeps, for that long after its grace
//! period ran out (that is, until its last sign of life + grace + duration):
//! - no `unreachable` taint, NoSchedule or NoExecute, so nothing is evicted;
//! - its pods' Ready conditions as they were, so its endpoints stay as they were.
//!
//! Its status is still set Unknown (the `NodeNotReady` Event too): the node is not reachable,
//! and `kubectl get nodes` says so. Afterwards, or as soon as the annotation goes, upstream's
//! behaviour: the taints go on and the pods are marked not ready within a pass. A node that
//! reports itself not ready (False) is not covered: that is not a lost link. The node still
//! counts as not ready in its zone's disruption state. Without the taint the scheduler may
//! place new pods on the node during the window; cordon it if that is not wanted. Default:
//! duration 0s, nothing changes.

use super::{lock, Inner};
use crate::obj::{self, At as _};
use serde_json::Value;
use std::time::{Duration, SystemTime};

/// The annotation a node opts in with (value `"true"`).
pub const ANNOTATION: &str = "node.edgekcm.io/autonomy";

/// Whether `node` carries the opt-in annotation.
pub fn opted_in(node: &Value) -> bool {
    node.at("/metadata/annotations")
        .and_then(|a| a.get(ANNOTATION))
        .and_then(Value::as_str)
        == Some("true")
}

/// Whether the window of a node last alive at `probe` still runs at `now`.
pub fn within(probe: SystemTime, grace: Duration, autonomy: Duration, now: SystemTime) -> bool {
    !autonomy.is_zero() && now < probe + grace + autonomy
}

impl Inner {
    /// Whether `node` (whose Ready is Unknown) is in its autonomy window: left untainted
    /// and its pods left ready.
    pub(super) fn autonomous(&self, node: &Value) -> bool {
        if self.opts.autonomy.is_zero() || !opted_in(node) {
            return false;
        }
        let Some(probe) = lock(&self.health).get(obj::name(node)).map(|h| h.probe) else {
            return false;
        };
        let on = within(
            probe,
            self.opts.grace.monitor,
            self.opts.autonomy,
            SystemTime::now(),
        );
        if on {
            log::debug!(
                "{}: node {} is autonomous: not tainted unreachable, its pods left as they are",
                super::NAME,
                obj::name(node)
            );
        }
        on
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn opt_in_is_the_annotation_true() {
        let n = |a: Value| json!({"metadata": {"name": "n", "annotations": a}});
        assert!(opted_in(&n(json!({ANNOTATION: "true"}))));
        assert!(!opted_in(&n(json!({ANNOTATION: "false"}))));
        assert!(!opted_in(&n(json!({ANNOTATION: "True "}))));
        assert!(!opted_in(&n(json!({}))));
        assert!(!opted_in(&json!({"metadata": {"name": "n"}})));
    }

    #[test]
    fn the_window_runs_from_the_last_sign_of_life_past_grace() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let (grace, d) = (Duration::from_secs(50), Duration::from_secs(600));
        assert!(within(t0, grace, d, t0 + Duration::from_secs(51)));
        assert!(within(t0, grace, d, t0 + Duration::from_secs(649)));
        assert!(!within(t0, grace, d, t0 + Duration::from_secs(650)));
        // Off by default.
        assert!(!within(
            t0,
            grace,
            Duration::ZERO,
            t0 + Duration::from_secs(51)
        ));
    }
}
