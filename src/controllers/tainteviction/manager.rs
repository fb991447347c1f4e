//! The NoExecute taint manager (upstream's `tainteviction.Controller` and its
//! `TimedWorkerQueue`): pods on a node with NoExecute taints they do not tolerate are deleted
//! at once, those tolerating them for a while when that time is over, those tolerating them
//! for ever stay. A deletion first sets the `DisruptionTarget` condition
//! (`DeletionByTaintManager`, with the pod's generation as `observedGeneration`) through
//! `pods/status`, then deletes the pod with its own grace period; `TaintManagerEviction`
//! Events (source `taint-eviction-controller`) tell of each scheduled deletion that starts or
//! is cancelled.

use super::metrics;
use crate::api::client::{Client, DeleteOptions, PatchType};
use crate::api::resources::PODS;
use crate::cache::Cache;
use crate::controller::{EventSpec, EventType, ObjectRef};
use crate::controllers::kit::taints;
use crate::events::Recorder;
use crate::obj::{self, At as _};
use crate::queue::WorkQueue;
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

/// The Event source: the controller's name, as upstream gives its recorder.
pub const COMPONENT: &str = "taint-eviction-controller";
pub const REASON: &str = "TaintManagerEviction";
/// Deletion attempts per firing (`retries`), 10 ms apart.
const RETRIES: usize = 5;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn hash_of(v: Option<&Value>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.map(|v| v.to_string()).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// What the watch handlers remember of pods and nodes, to tell which changes matter (the
/// previous version an update carries has metadata only): each pod's node and tolerations,
/// the pods of each node, and each node's NoExecute taints.
#[derive(Default)]
pub struct Index {
    pods: HashMap<String, (String, u64)>,
    by_node: HashMap<String, BTreeSet<String>>,
    node_taints: HashMap<String, u64>,
}

/// A scheduled deletion (`TimedWorker`); None once it ran and succeeded.
#[derive(Debug, Clone, Copy)]
struct Scheduled {
    created: Instant,
    fire_at: Instant,
}

const LOG: &str = "taint-eviction-controller";

pub struct TaintManager {
    /// Whether `Lt` and `Gt` tolerations compare (TaintTolerationComparisonOperators).
    pub comparisons: bool,
    pub index: Mutex<Index>,
    /// Nodes with NoExecute taints, and those taints (`taintedNodes`).
    tainted: Mutex<HashMap<String, Vec<Value>>>,
    evictions: Mutex<HashMap<String, Option<Scheduled>>>,
    /// `noexec_taint_node`, `noexec_taint_pod`: node names, and (pod key, node) pairs.
    pub node_queue: Arc<WorkQueue<String>>,
    pub pod_queue: Arc<WorkQueue<(String, String)>>,
    /// Pod keys whose deletion is due (the timers of upstream's `TimedWorkerQueue`).
    pub fire_queue: Arc<WorkQueue<String>>,
}

impl TaintManager {
    pub fn new(comparisons: bool) -> Self {
        TaintManager {
            comparisons,
            index: Mutex::default(),
            tainted: Mutex::default(),
            evictions: Mutex::default(),
            node_queue: WorkQueue::new("noexec_taint_node"),
            pod_queue: WorkQueue::new("noexec_taint_pod"),
            fire_queue: WorkQueue::new(""),
        }
    }
}

/// The objects of the deletion handler.
pub struct Env<'a> {
    pub cache: &'a Cache,
    pub client: &'a Client,
    pub recorder: &'a Recorder,
}

fn pod_ref(key: &str) -> ObjectRef {
    let (ns, name) = obj::split_key(key);
    ObjectRef {
        kind: "Pod".into(),
        api_version: String::new(),
        namespace: ns.into(),
        name: name.into(),
        uid: String::new(),
        resource_version: String::new(),
    }
}

impl TaintManager {
    /// A pod was added, changed or deleted (`PodUpdated`), and the node -> pods index
    /// (`getPodsAssignedToNode`) kept. Returns the pod's node when it changed (or it is new).
    pub fn pod_changed(&self, pod: &Value, deleted: bool) -> Option<String> {
        let key = obj::key(pod);
        let node = obj::At::at(pod, "/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let tol = hash_of(pod.at("/spec/tolerations"));
        let mut ix = lock(&self.index);
        let before = ix.pods.get(&key).cloned();
        if deleted {
            if let Some((n, _)) = &before {
                if let Some(s) = ix.by_node.get_mut(n) {
                    s.remove(&key);
                    if s.is_empty() {
                        ix.by_node.remove(n);
                    }
                }
                ix.pods.remove(&key);
            }
            drop(ix);
            self.pod_queue
                .add((key, before.map(|b| b.0).unwrap_or(node)));
            return None;
        }
        if before.as_ref() == Some(&(node.clone(), tol)) {
            return None;
        }
        if let Some((n, _)) = &before {
            if *n != node {
                if let Some(s) = ix.by_node.get_mut(n) {
                    s.remove(&key);
                }
            }
        }
        if !node.is_empty() {
            ix.by_node
                .entry(node.clone())
                .or_default()
                .insert(key.clone());
        }
        ix.pods.insert(key.clone(), (node.clone(), tol));
        drop(ix);
        let node_changed = before.as_ref().map(|b| &b.0) != Some(&node);
        self.pod_queue.add((key, node.clone()));
        (node_changed && !node.is_empty()).then_some(node)
    }

    /// A node was added, changed or deleted (`NodeUpdated`): queued when its NoExecute taints
    /// changed.
    pub fn node_changed(&self, node: &Value, deleted: bool) {
        let name = obj::name(node).to_string();
        let h = hash_of(Some(&Value::Array(taints::no_execute(node))));
        let mut ix = lock(&self.index);
        if deleted {
            ix.node_taints.remove(&name);
        } else if ix.node_taints.insert(name.clone(), h) == Some(h) {
            return;
        }
        drop(ix);
        self.node_queue.add(name);
    }

    /// Pod keys on `node`, as the watch last showed them.
    pub fn pods_on(&self, node: &str) -> Vec<String> {
        lock(&self.index)
            .by_node
            .get(node)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn cancel(&self, env: &Env, key: &str) {
        let was = lock(&self.evictions).remove(key);
        if let Some(Some(_)) = was {
            log::debug!("{LOG}: cancelling the deletion of pod {key}");
            env.recorder.record(
                env.client,
                COMPONENT,
                EventSpec {
                    involved: pod_ref(key),
                    event_type: EventType::Normal,
                    reason: REASON.into(),
                    message: format!("Cancelling deletion of Pod {key}"),
                },
            );
        }
    }

    fn add_work(&self, key: &str, created: Instant, fire_at: Instant) {
        let mut ev = lock(&self.evictions);
        if ev.contains_key(key) {
            log::info!("{LOG}: trying to add already existing work for pod {key}, skipping");
            return;
        }
        ev.insert(key.to_string(), Some(Scheduled { created, fire_at }));
        drop(ev);
        self.fire_queue.add_after(
            key.to_string(),
            fire_at.saturating_duration_since(Instant::now()),
        );
    }

    /// `processPodOnNode`.
    fn process_pod(
        &self,
        env: &Env,
        key: &str,
        tolerations: &[Value],
        taints: &[Value],
        now: Instant,
    ) {
        if taints.is_empty() {
            self.cancel(env, key);
        }
        let c = self.comparisons;
        let Some(wait) = taints::toleration_time(taints, tolerations, c) else {
            log::trace!("{LOG}: tolerations of pod {key} tolerate for ever");
            self.cancel(env, key);
            return;
        };
        if wait.is_zero() && !taints::all_tolerated(taints, tolerations, c) {
            log::debug!("{LOG}: not all taints are tolerated by pod {key}");
            self.cancel(env, key);
            self.add_work(key, now, now);
            return;
        }
        let mut start = now;
        let trigger = now + wait;
        let scheduled = lock(&self.evictions).get(key).copied();
        if let Some(s) = scheduled {
            // A deletion that already ran stays as it is; one scheduled sooner too.
            let Some(s) = s else { return };
            start = s.created;
            if start + wait < trigger {
                return;
            }
            self.cancel(env, key);
        }
        self.add_work(key, start, trigger);
    }

    /// `handlePodUpdate`.
    pub fn handle_pod(&self, env: &Env, key: &str, node: &str) {
        let (ns, name) = obj::split_key(key);
        let Some(pod) = env.cache.store(PODS).get_in(ns, name) else {
            self.cancel(env, key);
            return;
        };
        let pod_node = pod
            .at("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if pod_node != node || node.is_empty() {
            return;
        }
        let Some(taints) = lock(&self.tainted).get(node).cloned() else {
            return;
        };
        let tol = tolerations(&pod);
        self.process_pod(env, key, &tol, &taints, Instant::now());
    }

    /// `handleNodeUpdate`.
    pub fn handle_node(&self, env: &Env, name: &str) {
        let Some(node) = env.cache.store(crate::api::resources::NODES).get(name) else {
            lock(&self.tainted).remove(name);
            return;
        };
        let taints = taints::no_execute(&node);
        {
            let mut t = lock(&self.tainted);
            if taints.is_empty() {
                t.remove(name);
            } else {
                t.insert(name.to_string(), taints.clone());
            }
        }
        let pods = self.pods_on(name);
        if pods.is_empty() {
            return;
        }
        if taints.is_empty() {
            for p in &pods {
                self.cancel(env, p);
            }
            return;
        }
        let now = Instant::now();
        let store = env.cache.store(PODS);
        for key in pods {
            let (ns, n) = obj::split_key(&key);
            let Some(pod) = store.get_in(ns, n) else {
                continue;
            };
            self.process_pod(env, &key, &tolerations(&pod), &taints, now);
        }
    }

    /// A scheduled deletion is due (upstream's timer firing `deletePodHandler`).
    pub fn fire(&self, env: &Env, key: &str) {
        let due = match lock(&self.evictions).get(key) {
            Some(Some(s)) => s.fire_at,
            _ => return,
        };
        let fired_at = due;
        let now = Instant::now();
        if now < due {
            self.fire_queue.add_after(key.to_string(), due - now);
            return;
        }
        log::info!(controller:% = LOG, pod:% = key; "Deleting pod");
        env.recorder.record(
            env.client,
            COMPONENT,
            EventSpec {
                involved: pod_ref(key),
                event_type: EventType::Normal,
                reason: REASON.into(),
                message: format!("Marking for deletion Pod {key}"),
            },
        );
        let mut res = Ok(());
        for i in 0..RETRIES {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(10));
            }
            res = delete_with_condition(env, key);
            if res.is_ok() {
                metrics::pod_deleted(fired_at.elapsed());
                break;
            }
        }
        let mut ev = lock(&self.evictions);
        match res {
            Ok(()) => {
                if ev.contains_key(key) {
                    ev.insert(key.to_string(), None);
                }
            }
            Err(e) => {
                log::error!("{LOG}: deleting pod {key}: {e}");
                // Upstream forgets it until the pod or node changes; it is tried again
                // with backoff while it is still scheduled, so a restarting apiserver
                // loses nothing.
                drop(ev);
                self.fire_queue.add_rate_limited(key.to_string());
                return;
            }
        }
        drop(ev);
        self.fire_queue.forget(&key.to_string());
    }
}

fn tolerations(pod: &Value) -> Vec<Value> {
    pod.at("/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// `addConditionAndDeletePod`: read the pod live, set `DisruptionTarget` through
/// `pods/status` when it is not set as wanted, then delete it.
fn delete_with_condition(env: &Env, key: &str) -> crate::Result<()> {
    let (ns, name) = obj::split_key(key);
    let pod = env.client.get(&PODS, Some(ns), name)?;
    if let Some(patch) = disruption_patch(&pod, SystemTime::now()) {
        let shape = env.cache.write_shape(PODS);
        let v = env.client.patch_shaped(
            &PODS,
            Some(ns),
            name,
            PatchType::Strategic,
            &patch,
            Some("status"),
            shape.as_deref(),
        )?;
        env.cache.observe_write(PODS, &v);
    }
    env.client
        .delete(&PODS, Some(ns), name, &DeleteOptions::default())
}

/// The `pods/status` patch `PatchPodStatus` sends for `DisruptionTarget` set as
/// `UpdatePodCondition` sets it (status True, `DeletionByTaintManager`, "Taint manager:
/// deleting due to NoExecute taint", and since 1.35 (PodObservedGenerationTracking, GA and
/// locked) the pod's `metadata.generation` as `observedGeneration`), the pod's UID as a
/// precondition; None when the pod has it already as wanted (`UpdatePodCondition` does not
/// compare `observedGeneration`).
pub fn disruption_patch(pod: &Value, now: SystemTime) -> Option<Value> {
    let c = crate::controllers::kit::conditions::Condition {
        type_: "DisruptionTarget",
        status: "True",
        reason: "DeletionByTaintManager",
        message: "Taint manager: deleting due to NoExecute taint",
    };
    let mut status = crate::controllers::kit::conditions::pod_status_patch(pod, &c, now)?;
    let generation = pod
        .at("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let before = pod
        .at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|l| l.iter().find(|c| c["type"] == "DisruptionTarget"))
        .and_then(|c| c.get("observedGeneration"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if generation != before {
        if let Some(Value::Object(m)) = status
            .get_mut("conditions")
            .and_then(Value::as_array_mut)
            .and_then(|l| l.last_mut())
        {
            let v = if generation == 0 {
                Value::Null
            } else {
                json!(generation)
            };
            m.insert("observedGeneration".into(), v);
        }
    }
    Some(json!({"metadata": {"uid": obj::uid(pod)}, "status": status}))
}
