//! node-lifecycle-controller (upstream's `pkg/controller/nodelifecycle`, v1.37). Since 1.29
//! (SeparateTaintEvictionController, locked on since 1.34) it only taints: the pods of
//! NoExecute-tainted nodes are evicted by `taint-eviction-controller`
//! (`controllers::tainteviction`), which runs under its own `--controllers` name.
//!
//! - Every `--node-monitor-period` (from the end of one pass to the start of the next, as
//!   `wait.Until`), each node's health: a new Ready heartbeat in its status or a newer renew
//!   time of its Lease in `kube-node-lease` is a sign of life; none for
//!   `--node-monitor-grace-period` (`--node-startup-grace-period` while it never reported
//!   Ready) sets Ready, MemoryPressure, DiskPressure and PIDPressure to Unknown
//!   (`NodeStatusUnknown`, "Kubelet stopped posting node status."; conditions never posted:
//!   `NodeStatusNeverUpdated`) with a PUT of `nodes/<name>/status` (`health.rs`).
//! - A node that turns not ready: `NodeNotReady` Event, its pods' Ready condition set False
//!   (PUT `pods/<name>/status`, Warning `NodeNotReady` on each); a node seen for the first
//!   time or gone: `RegisteredNode` / `RemovingNode`.
//! - The pass after a node was seen not ready (False) or unreachable (Unknown), it waits in
//!   its zone's rate-limited queue (`queue.rs`) for the `node.kubernetes.io/not-ready` or
//!   `unreachable` NoExecute taint; a ready node loses both. Zones are Normal,
//!   PartialDisruption or FullDisruption (`--unhealthy-zone-threshold`), with
//!   `--node-eviction-rate`, `--secondary-node-eviction-rate` (0 for zones of
//!   `--large-cluster-size-threshold` nodes or fewer) and, when every zone is fully
//!   disrupted, no tainting at all; nodes labelled `node.kubernetes.io/exclude-disruption`
//!   are not counted.
//! - On every node change, the NoSchedule taints its conditions call for
//!   (TaintNodesByCondition) and the beta OS/arch labels.
//!
//! - edgekcm's own, opt-in: nodes annotated `node.edgekcm.io/autonomy: "true"` keep their
//!   pods and endpoints for `--node-autonomy-duration` after their link is lost
//!   (`autonomy.rs`).
//!
//! Requests go out with the `node-controller` identity; Events from `node-controller`.
//! Unlike upstream, the DaemonSet informer is not started (upstream only waits for it to
//! sync).

pub mod autonomy;
pub mod health;
pub mod metrics;
pub mod pods;
pub mod queue;
pub mod taints;

mod monitor;

use super::{RunEnv, SelfDriven, Watch};
use crate::api::resources::{LEASES, NODES, PODS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::queue::WorkQueue;
use health::{Grace, Health, Rates, ZoneState};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

pub const NAME: &str = "node-lifecycle-controller";
pub const COMPONENT: &str = "node-controller";
/// How often the NoExecute tainting queues are looked at (`NodeEvictionPeriod`).
pub const EVICTION_PERIOD: Duration = Duration::from_millis(100);
/// Workers of the node health pass and of the node queue (`UpdateWorkerSize`).
const NODE_WORKERS: usize = 8;
/// Workers of the pod queue (`podUpdateWorkerSize`).
const POD_WORKERS: usize = 4;

/// Nodes are read whole (their status is written back with a PUT).
pub const NODE_WATCH: Watch = Watch::full(NODES);
/// Pods: their node and status (written back with a PUT of `pods/status`).
pub const POD_WATCH: Watch = Watch::fields(PODS, &["/spec/nodeName", "/status"]);
pub const LEASE_WATCH: Watch = Watch::fields(LEASES, &["/spec/renewTime"]);

/// Its row in the controller table.
pub fn build(
    cx: &super::BuildCx<'_, crate::config::Config>,
) -> crate::Result<Option<super::Runnable>> {
    let o = &cx.cfg.node_lifecycle;
    Ok(Some(super::Runnable::drives(NodeLifecycle::new(Options {
        monitor_period: cx.cfg.kube_cloud_shared.node_monitor_period,
        grace: Grace {
            monitor: o.node_monitor_grace_period,
            startup: o.node_startup_grace_period,
        },
        rates: Rates {
            healthy: o.node_eviction_rate,
            secondary: o.secondary_node_eviction_rate,
            large_cluster_threshold: o.large_cluster_size_threshold,
        },
        unhealthy_zone_threshold: o.unhealthy_zone_threshold,
        autonomy: o.node_autonomy_duration,
    }))))
}

#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub monitor_period: Duration,
    pub grace: Grace,
    pub rates: Rates,
    pub unhealthy_zone_threshold: f32,
    /// `--node-autonomy-duration` (edgekcm's own; `autonomy.rs`): zero is off.
    pub autonomy: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the health passes keep.
#[derive(Default)]
struct State {
    /// Nodes seen by a pass (`knownNodeSet`): name -> UID.
    known: HashMap<String, String>,
    zone_states: HashMap<String, ZoneState>,
}

pub(crate) struct Inner {
    opts: Options,
    state: Mutex<State>,
    health: Mutex<HashMap<String, Health>>,
    /// The per-zone tainting queues (`zoneNoExecuteTainter`).
    zones: Mutex<HashMap<String, queue::ZoneQueue>>,
    /// Nodes whose pods could not all be marked not ready (`nodesToRetry`).
    to_retry: Mutex<HashSet<String>>,
    /// NodeControllerLeaseCircuitBreaker: a live Lease was newer than the cached one, so no
    /// node is judged until the Lease cache has reached this resourceVersion.
    lease_wait: Mutex<Option<u64>>,
    /// One key: the next health pass.
    passes: Arc<WorkQueue<()>>,
    /// One key: the next NoExecute tainting pass (queued only while a zone queue holds nodes).
    tainting: Arc<WorkQueue<()>>,
    /// `node_lifecycle_controller`: nodes whose NoSchedule taints and labels to check.
    nodes: Arc<WorkQueue<String>>,
    /// `node_lifecycle_controller_pods`: pods newly bound to a node.
    pods: Arc<WorkQueue<String>>,
    /// The pods of each node.
    index: pods::PodIndex,
}

pub struct NodeLifecycle {
    inner: Arc<Inner>,
}

impl NodeLifecycle {
    pub fn new(opts: Options) -> Self {
        NodeLifecycle {
            inner: Arc::new(Inner {
                opts,
                state: Mutex::default(),
                health: Mutex::default(),
                zones: Mutex::default(),
                to_retry: Mutex::default(),
                lease_wait: Mutex::default(),
                passes: WorkQueue::new(""),
                tainting: WorkQueue::new(""),
                nodes: WorkQueue::new("node_lifecycle_controller"),
                pods: WorkQueue::new("node_lifecycle_controller_pods"),
                index: pods::PodIndex::default(),
            }),
        }
    }
}

impl Inner {
    fn on_node(&self, d: &Delta) {
        let n = d.object();
        let deleted = d.kind == DeltaKind::Deleted;
        if deleted {
            lock(&self.to_retry).remove(crate::obj::name(n));
        } else {
            self.nodes.add(crate::obj::name(n).to_string());
        }
    }

    fn on_pod(&self, d: &Delta) {
        let deleted = d.kind == DeltaKind::Deleted;
        if self.index.changed(d.object(), deleted).is_some() {
            self.pods.add(crate::obj::key(d.object()));
        }
    }
}

impl SelfDriven for NodeLifecycle {
    fn register(&self, cache: &Arc<Cache>) {
        cache.informer_for(&LEASE_WATCH);
        let inner = Arc::downgrade(&self.inner);
        cache
            .informer_for(&NODE_WATCH)
            .add_handler(Arc::new(move |d: &Delta| {
                if let Some(i) = inner.upgrade() {
                    i.on_node(d);
                }
            }));
        let inner = Arc::downgrade(&self.inner);
        cache
            .informer_for(&POD_WATCH)
            .add_handler(Arc::new(move |d: &Delta| {
                if let Some(i) = inner.upgrade() {
                    i.on_pod(d);
                }
            }));
    }

    fn start(&self, env: &RunEnv) -> Vec<JoinHandle<()>> {
        crate::metrics::register_collector("nodelifecycle", Arc::new(metrics::families));
        let i = &self.inner;
        let serve =
            |name: &str, q: &Arc<WorkQueue<String>>, n: usize, f: fn(&Inner, &RunEnv, &str)| {
                let (inner, e) = (i.clone(), env.clone());
                env.serve(name, q.clone(), n, move |k: &String| f(&inner, &e, k));
            };
        serve(NAME, &i.nodes, NODE_WORKERS, monitor::node_work);
        serve(NAME, &i.pods, POD_WORKERS, monitor::pod_work);
        let (inner, e) = (i.clone(), env.clone());
        env.serve(NAME, i.passes.clone(), 1, move |_: &()| {
            inner.monitor(&e);
            inner.passes.add_after((), inner.opts.monitor_period);
        });
        let (inner, e) = (i.clone(), env.clone());
        env.serve(NAME, i.tainting.clone(), 1, move |_: &()| {
            inner.tainting_pass(&e);
        });
        i.passes.add(());
        Vec::new()
    }

    fn shutdown(&self) {
        let i = &self.inner;
        i.passes.shut_down();
        i.tainting.shut_down();
        i.nodes.shut_down();
        i.pods.shut_down();
    }
}

#[cfg(test)]
mod tests;
