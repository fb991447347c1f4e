//! node-lifecycle-controller (upstream's `pkg/controller/nodelifecycle`, v1.28), with the
//! NoExecute taint manager that 1.28 runs inside it (`eviction.rs`).
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
//! Requests go out with the `node-controller` identity; Events from `node-controller` and
//! (evictions) `taint-controller`. Unlike upstream, the DaemonSet informer is not started
//! (1.28 only waits for it to sync), and a pod deletion that fails after its five tries is
//! tried again with backoff instead of being forgotten until the pod or node changes.

pub mod eviction;
pub mod health;
pub mod metrics;
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
/// Pods: their node, tolerations and status (written back whole with a PUT).
pub const POD_WATCH: Watch =
    Watch::fields(PODS, &["/spec/nodeName", "/spec/tolerations", "/status"]);
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
    }))))
}

#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub monitor_period: Duration,
    pub grace: Grace,
    pub rates: Rates,
    pub unhealthy_zone_threshold: f32,
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
    /// One key: the next health pass.
    passes: Arc<WorkQueue<()>>,
    /// One key: the next NoExecute tainting pass (queued only while a zone queue holds nodes).
    tainting: Arc<WorkQueue<()>>,
    /// `node_lifecycle_controller`: nodes whose NoSchedule taints and labels to check.
    nodes: Arc<WorkQueue<String>>,
    /// `node_lifecycle_controller_pods`: pods newly bound to a node.
    pods: Arc<WorkQueue<String>>,
    tm: eviction::TaintManager,
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
                passes: WorkQueue::new(""),
                tainting: WorkQueue::new(""),
                nodes: WorkQueue::new("node_lifecycle_controller"),
                pods: WorkQueue::new("node_lifecycle_controller_pods"),
                tm: eviction::TaintManager::default(),
            }),
        }
    }
}

impl Inner {
    fn on_node(&self, d: &Delta) {
        let n = d.object();
        let deleted = d.kind == DeltaKind::Deleted;
        self.tm.node_changed(n, deleted);
        if deleted {
            lock(&self.to_retry).remove(crate::obj::name(n));
        } else {
            self.nodes.add(crate::obj::name(n).to_string());
        }
    }

    fn on_pod(&self, d: &Delta) {
        let deleted = d.kind == DeltaKind::Deleted;
        if self.tm.pod_changed(d.object(), deleted).is_some() {
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
        serve(
            eviction::COMPONENT,
            &i.tm.node_queue,
            NODE_WORKERS,
            |i, e, k| i.tm.handle_node(&env_of(e), k),
        );
        serve(
            eviction::COMPONENT,
            &i.tm.fire_queue,
            NODE_WORKERS,
            |i, e, k| i.tm.fire(&env_of(e), k),
        );
        let (inner, e) = (i.clone(), env.clone());
        env.serve(
            eviction::COMPONENT,
            i.tm.pod_queue.clone(),
            NODE_WORKERS,
            move |(k, n): &(String, String)| inner.tm.handle_pod(&env_of(&e), k, n),
        );
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
        i.tm.node_queue.shut_down();
        i.tm.pod_queue.shut_down();
        i.tm.fire_queue.shut_down();
    }
}

fn env_of(e: &RunEnv) -> eviction::Env<'_> {
    eviction::Env {
        cache: &e.cache,
        client: &e.client,
        recorder: &e.recorder,
    }
}

#[cfg(test)]
mod tests;
