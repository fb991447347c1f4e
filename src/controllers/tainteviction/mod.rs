//! taint-eviction-controller (upstream's `pkg/controller/tainteviction`, split out of the node
//! lifecycle controller in 1.29 behind SeparateTaintEvictionController, GA and locked on
//! since 1.34): pods on nodes with NoExecute taints they do not tolerate, or tolerate for a
//! while, are deleted (`manager.rs`), whoever put the taint there (the node lifecycle
//! controller's `not-ready` and `unreachable` taints, or a user's).
//!
//! - Its own `--controllers` name, on by default; requests go out as the `node-controller`
//!   ServiceAccount under `--use-service-account-credentials` (upstream reuses that role);
//!   Events from `taint-eviction-controller`.
//! - Queues `noexec_taint_node` and `noexec_taint_pod` (nodes first, as upstream's workers
//!   prefer node updates), eight workers each; due deletions are keys queued with `add_after`.
//! - Metrics `taint_eviction_controller_pod_deletions_total` and
//!   `taint_eviction_controller_pod_deletion_duration_seconds` (`metrics.rs`).
//! - Tolerations with `Lt` and `Gt` compare only with `--feature-gates`
//!   TaintTolerationComparisonOperators=true (alpha in 1.35, off by default).
//!
//! Unlike upstream, a pod deletion that fails after its five tries is tried again with
//! backoff while it is still due, instead of being forgotten until the pod or node changes.

pub mod manager;
pub mod metrics;

use super::{RunEnv, SelfDriven, Watch};
use crate::api::resources::{NODES, PODS};
use crate::cache::{Cache, Delta, DeltaKind};
use std::sync::Arc;
use std::thread::JoinHandle;

pub const NAME: &str = "taint-eviction-controller";
/// Upstream's `UpdateWorkerSize`.
const WORKERS: usize = 8;

/// Nodes: their taints.
pub const NODE_WATCH: Watch = Watch::fields(NODES, &["/spec/taints"]);
/// Pods: their node and tolerations.
pub const POD_WATCH: Watch = Watch::fields(PODS, &["/spec/nodeName", "/spec/tolerations"]);

/// Its row in the controller table.
pub fn build(
    cx: &super::BuildCx<'_, crate::config::Config>,
) -> crate::Result<Option<super::Runnable>> {
    let gates = cx.cfg.given.get("feature-gates").map(String::as_str);
    let comparisons = gate_given(gates, "TaintTolerationComparisonOperators").unwrap_or(false);
    Ok(Some(super::Runnable::drives(TaintEviction::new(
        comparisons,
    ))))
}

/// A gate's value in a `--feature-gates` text (`A=true,B=false`), when it is named there.
pub fn gate_given(text: Option<&str>, gate: &str) -> Option<bool> {
    text?.split(',').rev().find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == gate).then(|| crate::compat::parse::parse_go_bool(v.trim()).ok())?
    })
}

pub struct TaintEviction {
    tm: Arc<manager::TaintManager>,
}

impl TaintEviction {
    pub fn new(comparisons: bool) -> Self {
        TaintEviction {
            tm: Arc::new(manager::TaintManager::new(comparisons)),
        }
    }
}

impl SelfDriven for TaintEviction {
    fn register(&self, cache: &Arc<Cache>) {
        let tm = Arc::downgrade(&self.tm);
        cache
            .informer_for(&NODE_WATCH)
            .add_handler(Arc::new(move |d: &Delta| {
                if let Some(tm) = tm.upgrade() {
                    tm.node_changed(d.object(), d.kind == DeltaKind::Deleted);
                }
            }));
        let tm = Arc::downgrade(&self.tm);
        cache
            .informer_for(&POD_WATCH)
            .add_handler(Arc::new(move |d: &Delta| {
                if let Some(tm) = tm.upgrade() {
                    tm.pod_changed(d.object(), d.kind == DeltaKind::Deleted);
                }
            }));
    }

    fn start(&self, env: &RunEnv) -> Vec<JoinHandle<()>> {
        crate::metrics::register_collector("tainteviction", Arc::new(metrics::families));
        log::info!(controller:% = NAME; "Starting");
        let (tm, e) = (self.tm.clone(), env.clone());
        env.serve(NAME, self.tm.node_queue.clone(), WORKERS, move |k| {
            tm.handle_node(&env_of(&e), k)
        });
        let (tm, e) = (self.tm.clone(), env.clone());
        env.serve(NAME, self.tm.fire_queue.clone(), WORKERS, move |k| {
            tm.fire(&env_of(&e), k)
        });
        let (tm, e) = (self.tm.clone(), env.clone());
        env.serve(
            NAME,
            self.tm.pod_queue.clone(),
            WORKERS,
            move |(k, n): &(String, String)| tm.handle_pod(&env_of(&e), k, n),
        );
        Vec::new()
    }

    fn shutdown(&self) {
        self.tm.node_queue.shut_down();
        self.tm.pod_queue.shut_down();
        self.tm.fire_queue.shut_down();
    }
}

fn env_of(e: &RunEnv) -> manager::Env<'_> {
    manager::Env {
        cache: &e.cache,
        client: &e.client,
        recorder: &e.recorder,
    }
}

#[cfg(test)]
mod tests;
