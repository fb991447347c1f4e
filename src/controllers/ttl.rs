//! ttl-controller: the `node.alpha.kubernetes.io/ttl` annotation on every node, the number of
//! seconds kubelets may cache Secrets and ConfigMaps, chosen by the size of the cluster
//! (upstream's `pkg/controller/ttl`).
//!
//! As upstream:
//! - The node count is kept from the watch: +1 for every node added, -1 for every node
//!   deleted. The cluster's step in [`BOUNDARIES`] moves up one when the count passes the
//!   step's `size_max`, down one when it falls under its `size_min`; the steps overlap, so a
//!   cluster near a boundary does not flap between two TTLs.
//! - A node is looked at when it is added or changes (a deletion changes the count only):
//!   when its annotation is not the step's TTL (missing, not a number, or another number), one
//!   strategic merge patch sets it. A change of step reaches each node at its next change (a
//!   kubelet's status update); nodes are not all patched at once.
//! - Five workers, queue `ttlcontroller` in the `workqueue_*` metrics, no Events.
//!
//! Unlike upstream, nodes are not looked at again on the informer's 12-24 h resync (edgekcm's
//! caches do not resync on a timer).

use super::{Action, Applied, Controller, Cx, Outcome, Watch};
use crate::api::client::PatchType;
use crate::api::resources::NODES;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::Result;
use crate::obj;
use serde_json::json;
use std::sync::Mutex;

/// The annotation kubelets read (`v1.ObjectTTLAnnotationKey`).
pub const ANNOTATION: &str = "node.alpha.kubernetes.io/ttl";

/// A step: clusters of `size_min..=size_max` nodes get `ttl_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundary {
    pub size_min: i64,
    pub size_max: i64,
    pub ttl_seconds: i64,
}

/// Upstream's `ttlBoundaries`.
pub const BOUNDARIES: [Boundary; 5] = [
    Boundary {
        size_min: 0,
        size_max: 100,
        ttl_seconds: 0,
    },
    Boundary {
        size_min: 90,
        size_max: 500,
        ttl_seconds: 15,
    },
    Boundary {
        size_min: 450,
        size_max: 1000,
        ttl_seconds: 30,
    },
    Boundary {
        size_min: 900,
        size_max: 2000,
        ttl_seconds: 60,
    },
    Boundary {
        size_min: 1800,
        size_max: i32::MAX as i64,
        ttl_seconds: 300,
    },
];

/// The node count and the step it has reached.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClusterSize {
    pub nodes: i64,
    pub step: usize,
}

impl ClusterSize {
    /// A node was added: one step up when the count passes the step's maximum.
    pub fn added(&mut self) {
        self.nodes += 1;
        if self.nodes > BOUNDARIES[self.step].size_max && self.step + 1 < BOUNDARIES.len() {
            self.step += 1;
        }
    }

    /// A node was deleted: one step down when the count falls under the step's minimum.
    pub fn deleted(&mut self) {
        self.nodes -= 1;
        if self.nodes < BOUNDARIES[self.step].size_min && self.step > 0 {
            self.step -= 1;
        }
    }

    /// The TTL every node should carry now.
    pub fn ttl_seconds(&self) -> i64 {
        BOUNDARIES[self.step].ttl_seconds
    }
}

/// Nodes as this controller reads them: metadata only.
pub const NODE_WATCH: Watch = Watch {
    kind: NODES,
    field_selector: "",
    metadata_only: true,
    fields: None,
};

/// Its row in the controller table.
pub fn build(_: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    Ok(Some(super::Runnable::reconciles(TtlController::new())))
}

pub struct TtlController {
    size: Mutex<ClusterSize>,
}

impl Default for TtlController {
    fn default() -> Self {
        Self::new()
    }
}

impl TtlController {
    pub fn new() -> Self {
        TtlController {
            size: Mutex::new(ClusterSize::default()),
        }
    }

    fn size(&self) -> std::sync::MutexGuard<'_, ClusterSize> {
        self.size.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The TTL nodes should carry now.
    pub fn desired_ttl_seconds(&self) -> i64 {
        self.size().ttl_seconds()
    }
}

/// The annotation's value as Go's `strconv.Atoi` reads it; None when missing or not a number.
fn current_ttl(node: &serde_json::Value) -> Option<i64> {
    let v = obj::annotation(node, ANNOTATION)?;
    match v.parse::<i64>() {
        Ok(n) => Some(n),
        Err(_) => {
            log::info!(
                "ttl-controller: node {}: annotation {ANNOTATION} is not a number: {v:?}",
                obj::name(node)
            );
            None
        }
    }
}

/// Whole seconds as Go prints a `time.Duration` (`0s`, `15s`, `5m0s`).
fn go_seconds(s: i64) -> String {
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{}s", s / 60, s % 60),
        s => format!("{}h{}m{}s", s / 3600, s % 3600 / 60, s % 60),
    }
}

impl Controller for TtlController {
    fn watches(&self) -> Vec<Watch> {
        vec![NODE_WATCH]
    }

    fn keys_for(&self, _w: &Watch, d: &Delta, _cache: &Cache) -> Vec<String> {
        match d.kind {
            DeltaKind::Added => self.size().added(),
            DeltaKind::Deleted => {
                self.size().deleted();
                return vec![];
            }
            DeltaKind::Updated => {}
        }
        vec![obj::name(d.object()).to_string()]
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(node) = cx.cache.store_for(&NODE_WATCH).get(key) else {
            return Ok(Outcome::none());
        };
        let desired = self.desired_ttl_seconds();
        if current_ttl(&node) == Some(desired) {
            return Ok(Outcome::none());
        }
        Ok(Outcome::with(vec![Action::Patch {
            kind: NODES,
            namespace: String::new(),
            name: key.to_string(),
            patch_type: PatchType::Strategic,
            patch: json!({"metadata": {"annotations": {ANNOTATION: desired.to_string()}}}),
            subresource: None,
        }]))
    }

    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        let Action::Patch { patch, .. } = action else {
            return;
        };
        let ttl = patch["metadata"]["annotations"][ANNOTATION]
            .as_str()
            .and_then(|s| s.parse::<i64>().ok())
            .unwrap_or(0);
        match result {
            Applied::Done(_) => log::debug!(
                "ttl-controller: changed ttl annotation of node {key} to {}",
                go_seconds(ttl)
            ),
            Applied::Failed(e) => {
                log::debug!("ttl-controller: failed to change ttl annotation for node {key}: {e}")
            }
            Applied::Skipped => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testing::Harness;
    use serde_json::{json, Value};

    fn node(name: &str, ttl: Option<&str>) -> Value {
        let mut n = json!({"metadata": {"name": name, "resourceVersion": "1"}});
        if let Some(t) = ttl {
            n["metadata"]["annotations"] = json!({ANNOTATION: t, "other": "x"});
        }
        n
    }

    #[test]
    fn steps_follow_the_node_count_with_upstreams_hysteresis() {
        let mut s = ClusterSize::default();
        let mut ttl_at = Vec::new();
        for _ in 0..2100 {
            s.added();
            ttl_at.push((s.nodes, s.ttl_seconds()));
        }
        let ttl_of = |n: i64| ttl_at[(n - 1) as usize].1;
        assert_eq!((ttl_of(1), ttl_of(100), ttl_of(101)), (0, 0, 15));
        assert_eq!((ttl_of(500), ttl_of(501)), (15, 30));
        assert_eq!((ttl_of(1000), ttl_of(1001)), (30, 60));
        assert_eq!((ttl_of(2000), ttl_of(2001), ttl_of(2100)), (60, 300, 300));
        assert_eq!(s.step, 4);
        // Down again: each step is left only below its minimum.
        let mut down = Vec::new();
        while s.nodes > 0 {
            s.deleted();
            down.push((s.nodes, s.ttl_seconds()));
        }
        let ttl_down = |n: i64| down.iter().find(|(c, _)| *c == n).expect("count").1;
        assert_eq!((ttl_down(1800), ttl_down(1799)), (300, 60));
        assert_eq!((ttl_down(900), ttl_down(899)), (60, 30));
        assert_eq!((ttl_down(450), ttl_down(449)), (30, 15));
        assert_eq!((ttl_down(90), ttl_down(89), ttl_down(0)), (15, 0, 0));
        // Never below the first step, never past the last.
        s.deleted();
        assert_eq!((s.nodes, s.step), (-1, 0));
        let mut top = ClusterSize {
            nodes: i32::MAX as i64,
            step: 4,
        };
        top.added();
        assert_eq!(top.step, 4);
    }

    #[test]
    fn a_small_cluster_gets_zero_and_a_step_change_reaches_nodes_as_they_change() {
        let mut h = Harness::new(TtlController::new());
        for i in 0..100 {
            h.add(NODES, node(&format!("n{i:03}"), Some("0")));
        }
        assert_eq!(h.take_queued().len(), 100);
        assert!(h.sync("n000").is_empty());
        // The 101st node: 15 s for every node, each patched when it is looked at.
        h.add(NODES, node("n100", None));
        assert_eq!(h.take_queued(), ["n100"]);
        assert_eq!(h.ctrl.desired_ttl_seconds(), 15);
        let w = h.sync("n100");
        assert_eq!(
            w.patches,
            [(
                NODES,
                "n100".to_string(),
                json!({"metadata": {"annotations": {ANNOTATION: "15"}}})
            )]
        );
        // An update of an old node queues it; it is patched from 0 to 15.
        h.update(NODES, node("n000", Some("0")));
        assert_eq!(h.take_queued(), ["n000"]);
        assert_eq!(h.sync("n000").patches.len(), 1);
        // A deletion only counts: nothing queued, and 100 nodes stay at 15 (down under 90).
        h.delete(NODES, node("n099", Some("0")));
        assert!(h.take_queued().is_empty());
        assert_eq!(h.ctrl.desired_ttl_seconds(), 15);
        assert!(h.sync("n099").is_empty(), "a node no longer cached");
    }

    #[test]
    fn the_annotation_is_read_as_go_reads_an_int() {
        let mut h = Harness::new(TtlController::new());
        let cases = [
            ("a", Some("0"), false),
            ("b", Some("+0"), false),
            ("c", Some("00"), false),
            ("d", None, true),
            ("e", Some(""), true),
            ("f", Some("0s"), true),
            ("g", Some(" 0"), true),
            ("h", Some("15"), true),
            ("i", Some("-0"), false),
            ("j", Some("99999999999999999999"), true),
        ];
        for (name, ttl, _) in cases {
            h.add(NODES, node(name, ttl));
        }
        for (name, _, patched) in cases {
            let w = h.sync(name);
            assert_eq!(!w.patches.is_empty(), patched, "{name}");
            assert!(w.creates.is_empty() && w.updates.is_empty() && w.deletes.is_empty());
        }
    }

    #[test]
    fn go_durations_of_whole_seconds() {
        assert_eq!(go_seconds(0), "0s");
        assert_eq!(go_seconds(15), "15s");
        assert_eq!(go_seconds(60), "1m0s");
        assert_eq!(go_seconds(300), "5m0s");
        assert_eq!(go_seconds(3661), "1h1m1s");
    }
}
