//! The passes and workers of the node lifecycle controller, and its writes: node health
//! (`monitorNodeHealth`), disruption handling, the NoExecute tainting pass, the NoSchedule
//! taints and labels of a changed node, pods newly bound to a node that is not ready.

use super::health::{self, ZoneState};
use super::taints::{self, Taint, NOT_READY, NO_EXECUTE, UNREACHABLE};
use super::{lock, queue::ZoneQueue, Inner, COMPONENT, EVICTION_PERIOD, NAME, NODE_WORKERS};
use crate::api::client::{Client, PatchType};
use crate::api::resources::{LEASES, NODES, PODS};
use crate::cache::{Cache, Store};
use crate::config::gates;
use crate::controller::{EventSpec, EventType, ObjectRef, RunEnv};
use crate::obj::{self, At as _, Obj};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// What the health pass reads of a node besides its metadata.
const NODE_FACTS: &[&str] = &["/spec/taints", "/status/conditions"];
/// Tries of a node's health update (`NodeHealthUpdateRetry`), 20 ms apart.
const HEALTH_RETRIES: usize = 5;
/// Tries of a taint or label patch on conflicts (`UpdateTaintBackoff`: 5 steps, 100 ms).
const PATCH_TRIES: usize = 5;

fn node_ref(name: &str, uid: &str) -> ObjectRef {
    ObjectRef {
        kind: "Node".into(),
        api_version: "v1".into(),
        namespace: String::new(),
        name: name.into(),
        uid: uid.into(),
        resource_version: String::new(),
    }
}

fn event(e: &RunEnv, involved: ObjectRef, t: EventType, reason: &str, message: String) {
    e.recorder.record(
        &e.client,
        COMPONENT,
        EventSpec {
            involved,
            event_type: t,
            reason: reason.into(),
            message,
        },
    );
}

/// `RecordNodeEvent`.
fn node_event(e: &RunEnv, name: &str, uid: &str, reason: &str, what: &str) {
    event(
        e,
        node_ref(name, uid),
        EventType::Normal,
        reason,
        format!("Node {name} event: {what}"),
    );
}

fn get_node(client: &Client, name: &str, from_cache_first: bool) -> crate::Result<Value> {
    if from_cache_first {
        client.get_path(&format!("/api/v1/nodes/{name}?resourceVersion=0"))
    } else {
        client.get(&NODES, None, name)
    }
}

/// Read the node (first from the apiserver's cache, as `resourceVersion=0`), change its
/// taints with `change`, and patch them with the resourceVersion read; again on a conflict.
fn patch_taints(
    cache: &Cache,
    client: &Client,
    name: &str,
    change: impl Fn(&Value) -> Option<Vec<Value>>,
) -> crate::Result<()> {
    let mut last = Ok(());
    for i in 0..PATCH_TRIES {
        let node = get_node(client, name, i == 0)?;
        let Some(list) = change(&node) else {
            return Ok(());
        };
        let patch = taints::taints_patch(obj::resource_version(&node), list);
        match client.patch(&NODES, None, name, PatchType::Strategic, &patch, None) {
            Ok(v) => {
                cache.observe_write(NODES, &v);
                return Ok(());
            }
            Err(e) if e.is_conflict() => {
                last = Err(e);
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
        }
    }
    last
}

/// `SwapNodeControllerTaint`: add `add` (time added now), then remove `del` if the node as
/// cached has any of them.
fn swap_taints(cache: &Cache, client: &Client, node: &Value, add: &[Taint], del: &[Taint]) -> bool {
    let name = obj::name(node);
    if !add.is_empty() {
        let now = crate::compat::timefmt::rfc3339(SystemTime::now());
        let add: Vec<Value> = add.iter().map(|t| t.to_json(&now)).collect();
        if let Err(e) = patch_taints(cache, client, name, |n| taints::with_added(n, &add)) {
            log::error!("{NAME}: unable to taint {add:?} unresponsive Node {name:?}: {e}");
            return false;
        }
    }
    if let Err(e) = remove_taints(cache, client, node, del) {
        log::error!(
            "{NAME}: unable to remove {del:?} unneeded taint from unresponsive Node {name:?}: {e}"
        );
        return false;
    }
    true
}

/// `RemoveTaintOffNode` with the node as cached.
fn remove_taints(cache: &Cache, client: &Client, node: &Value, del: &[Taint]) -> crate::Result<()> {
    if del.is_empty() || !del.iter().any(|t| taints::has(node, t)) {
        return Ok(());
    }
    patch_taints(cache, client, obj::name(node), |n| {
        taints::with_removed(n, del)
    })
}

fn not_ready_taint() -> Taint {
    Taint::new(NOT_READY, NO_EXECUTE)
}
fn unreachable_taint() -> Taint {
    Taint::new(UNREACHABLE, NO_EXECUTE)
}

/// A `node_lifecycle_controller` key: NoSchedule taints, then labels.
pub(super) fn node_work(i: &Inner, e: &RunEnv, name: &str) {
    let Some(node) = e.cache.store(NODES).get(name) else {
        return;
    };
    let (mut add, del) = taints::no_schedule_diff(&node);
    if i.autonomous(&node) {
        add.retain(|t| t.key != UNREACHABLE);
    }
    if (!add.is_empty() || !del.is_empty()) && !swap_taints(&e.cache, &e.client, &node, &add, &del)
    {
        log::error!("{NAME}: failed to taint NoSchedule on node {name}, requeue it");
    }
    let labels = taints::labels_to_reconcile(&node);
    if !labels.is_empty() {
        let mut m = serde_json::Map::new();
        for (k, v) in &labels {
            m.insert((*k).into(), json!(v));
        }
        let patch = json!({"metadata": {"labels": m}});
        match e
            .client
            .patch(&NODES, None, name, PatchType::Strategic, &patch, None)
        {
            Ok(v) => e.cache.observe_write(NODES, &v),
            Err(err) => log::error!("{NAME}: failed to reconcile labels for node {name}: {err}"),
        }
    }
    let _ = i;
}

/// A `node_lifecycle_controller_pods` key (`processPod`).
pub(super) fn pod_work(i: &Inner, e: &RunEnv, key: &str) {
    let (ns, name) = obj::split_key(key);
    let Some(pod) = e.cache.store(PODS).get_in(ns, name) else {
        i.pods.forget(&key.to_string());
        return;
    };
    let node = pod
        .at("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let node = node.as_str();
    let ready = match lock(&i.health).get(node) {
        None => return,
        Some(h) => h.ready.clone(),
    };
    if e.cache.store(NODES).get(node).is_none() {
        log::info!("{NAME}: failed to read node {node}");
        i.pods.add_rate_limited(key.to_string());
        return;
    }
    let Some(ready) = ready else { return };
    let status = health::cond_status(Some(&ready));
    if status == "Unknown"
        && e.cache
            .store(NODES)
            .get(node)
            .is_some_and(|n| i.autonomous(&n))
    {
        // Marked by the health pass's retry once the window is over.
        return;
    }
    if status != "True" && mark_pods_not_ready(e, &[pod], node).is_err() {
        i.pods.add_rate_limited(key.to_string());
        return;
    }
    i.pods.forget(&key.to_string());
}

/// `MarkPodsNotReady`: each pod's Ready condition set False with a PUT of its status, and a
/// `NodeNotReady` Warning on it.
fn mark_pods_not_ready(e: &RunEnv, pods: &[Obj], node: &str) -> crate::Result<()> {
    log::debug!("{NAME}: update ready status of pods on node {node}");
    let now = crate::compat::timefmt::rfc3339(SystemTime::now());
    let mut failed = None;
    for pod in pods {
        if pod.at("/spec/nodeName").and_then(Value::as_str) != Some(node) {
            continue;
        }
        let mut p = (**pod).clone();
        let Some(conds) = p.at_mut("/status/conditions").and_then(Value::as_array_mut) else {
            continue;
        };
        let Some(c) = conds
            .iter_mut()
            .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        else {
            continue;
        };
        if c.get("status").and_then(Value::as_str) == Some("False") {
            continue;
        }
        c["status"] = json!("False");
        c["lastTransitionTime"] = json!(now);
        log::debug!(
            "{NAME}: updating ready status of pod {} to false",
            obj::key(pod)
        );
        match e.client.update_subresource(&PODS, &p, "status") {
            Ok(v) => e.cache.observe_write(PODS, &v),
            Err(err) if err.is_not_found() => continue,
            Err(err) => {
                log::info!(
                    "{NAME}: failed to update status for pod {}: {err}",
                    obj::key(pod)
                );
                failed = Some(err);
            }
        }
        event(
            e,
            ObjectRef::of(&PODS, pod),
            EventType::Warning,
            "NodeNotReady",
            "Node is not ready".into(),
        );
    }
    failed.map_or(Ok(()), Err)
}

impl Inner {
    fn add_zone(&self, node: &Value, states: &mut HashMap<String, ZoneState>) {
        let zone = health::zone_key(node);
        if states.contains_key(&zone) {
            return;
        }
        states.insert(zone.clone(), ZoneState::Initial);
        lock(&self.zones).insert(zone.clone(), ZoneQueue::new(self.opts.rates.healthy));
        log::info!("{NAME}: initializing eviction metric for zone {zone:?}");
        super::metrics::zone_seen(&zone);
    }

    /// `markNodeAsReachable`: both NoExecute taints off, out of the zone's queue.
    fn mark_reachable(&self, e: &RunEnv, node: &Value) -> crate::Result<bool> {
        for t in [unreachable_taint(), not_ready_taint()] {
            if let Err(err) = remove_taints(&e.cache, &e.client, node, &[t]) {
                log::error!(
                    "{NAME}: failed to remove taint from node {}: {err}",
                    obj::name(node)
                );
                return Err(err);
            }
        }
        let zone = health::zone_key(node);
        Ok(lock(&self.zones)
            .get_mut(&zone)
            .is_some_and(|q| q.remove(obj::name(node))))
    }

    /// `markNodeForTainting`.
    fn mark_for_tainting(&self, node: &Value, status: &str) -> bool {
        let name = obj::name(node);
        let mut zones = lock(&self.zones);
        let Some(q) = zones.get_mut(&health::zone_key(node)) else {
            return false;
        };
        if (status == "False" && !taints::has(node, &not_ready_taint()))
            || (status == "Unknown" && !taints::has(node, &unreachable_taint()))
        {
            q.remove(name);
        }
        let added = q.add(name, obj::uid(node), Instant::now());
        drop(zones);
        if added {
            self.tainting.add(());
        }
        added
    }

    /// `processTaintBaseEviction`.
    fn taint_based_eviction(&self, e: &RunEnv, node: &Value, observed: &str) {
        let name = obj::name(node);
        let (swap, opposite) = match observed {
            "False" => (not_ready_taint(), unreachable_taint()),
            "Unknown" => (unreachable_taint(), not_ready_taint()),
            _ => (not_ready_taint(), not_ready_taint()),
        };
        match observed {
            "Unknown" if self.autonomous(node) => {}
            "False" | "Unknown" if taints::has(node, &opposite) => {
                let ok = swap_taints(&e.cache, &e.client, node, std::slice::from_ref(&swap), std::slice::from_ref(&opposite));
                if !ok {
                    log::error!("{NAME}: failed to instantly swap {} to {} on node {name}. Will try again in the next cycle", opposite.key, swap.key);
                }
            }
            "False" | "Unknown" => {
                let added = self.mark_for_tainting(node, observed);
                if added {
                    log::debug!("{NAME}: node {name} is {observed}, adding it to the taint queue");
                }
            }
            "True" => match self.mark_reachable(e, node) {
                Ok(true) => log::debug!("{NAME}: node {name} is healthy again, removing all taints"),
                Ok(false) => {}
                Err(_) => log::error!("{NAME}: failed to remove taints from node {name}. Will retry in next iteration"),
            },
            _ => {}
        }
    }

    /// One node's part of the health pass: its Ready status for the zone count (None when
    /// excluded or skipped).
    fn node_health(&self, e: &RunEnv, node: Obj) -> Option<(String, String)> {
        let leases = e.cache.store_for(&super::LEASE_WATCH);
        let name = obj::name(&node).to_string();
        let mut node: Obj = node;
        let mut look = None;
        let breaker = gates::enabled("NodeControllerLeaseCircuitBreaker");
        for i in 0..HEALTH_RETRIES {
            if breaker && !self.lease_cache_ready(&leases) {
                log::error!("{NAME}: update health of Node {name} from Controller error, Skipping - no pods will be evicted: the Lease cache is behind the live Leases");
                return None;
            }
            let saved = lock(&self.health).get(&name).cloned();
            let lease = leases.get_in("kube-node-lease", &name);
            let now = SystemTime::now();
            let grace = self.opts.grace;
            let mut l = health::look(&node, saved.as_ref(), lease.as_deref(), grace, now);
            if breaker && l.expired {
                if let Err(why) = self.live_lease_agrees(e, &name, lease.as_deref()) {
                    // A short circuit is not retried (upstream's shortCircuitError).
                    log::error!("{NAME}: update health of Node {name} from Controller error, Skipping - no pods will be evicted: {why}");
                    lock(&self.health).insert(name.clone(), l.health.clone());
                    return None;
                }
            }
            if l.update.is_some() && i == 0 {
                // The pass read only the node's facts; the status is written back whole.
                if let Some(whole) = e.cache.store(NODES).get(&name) {
                    l = health::look(&whole, saved.as_ref(), lease.as_deref(), grace, now);
                    node = whole;
                }
            }
            let Some(update) = &l.update else {
                lock(&self.health).insert(name.clone(), l.health.clone());
                look = Some(l);
                break;
            };
            match e.client.update_subresource(&NODES, update, "status") {
                Ok(v) => {
                    e.cache.observe_write(NODES, &v);
                    if let Some(h) = &l.health_after_update {
                        lock(&self.health).insert(name.clone(), h.clone());
                    }
                    node = std::sync::Arc::new(v);
                    look = Some(l);
                    break;
                }
                Err(err) => {
                    log::error!("{NAME}: error updating node {name}: {err}");
                    lock(&self.health).insert(name.clone(), l.health.clone());
                    if i + 1 == HEALTH_RETRIES {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    match e.client.get(&NODES, None, &name) {
                        Ok(n) => node = std::sync::Arc::new(n),
                        Err(err) => {
                            log::error!("{NAME}: failed while getting a Node to retry updating node health. Probably Node was deleted: {name}: {err}");
                            break;
                        }
                    }
                }
            }
        }
        let Some(look) = look else {
            log::error!("{NAME}: update health of Node {name} from Controller error, Skipping - no pods will be evicted");
            return None;
        };
        let zone = (!health::excluded_from_disruption(&node)).then(|| {
            (
                health::zone_key(&node),
                health::cond_status(look.current.as_ref()).to_string(),
            )
        });
        if let Some(current) = &look.current {
            let observed = health::cond_status(Some(&look.observed));
            let current = health::cond_status(Some(current));
            self.taint_based_eviction(e, &node, observed);
            let needs_retry = lock(&self.to_retry).contains(&name);
            let turned = current != "True" && observed == "True";
            if turned {
                log::debug!("{NAME}: recording status change NodeNotReady for node {name}");
                event(
                    e,
                    node_ref(&name, obj::uid(&node)),
                    EventType::Normal,
                    "NodeNotReady",
                    format!("Node {name} status is now: NodeNotReady"),
                );
            }
            if current == "Unknown" && self.autonomous(&node) {
                // Pods left ready for the window; marked by a later pass once it is over,
                // and the NoSchedule taint then comes from the node queue.
                lock(&self.to_retry).insert(name.clone());
                self.nodes.add(name.clone());
                return zone;
            }
            if turned || (needs_retry && observed != "True") {
                let store = e.cache.store(PODS);
                let pods: Vec<Obj> = self
                    .index
                    .on(&name)
                    .iter()
                    .filter_map(|k| {
                        let (ns, n) = obj::split_key(k);
                        store.get_in(ns, n)
                    })
                    .collect();
                if let Err(err) = mark_pods_not_ready(e, &pods, &name) {
                    log::error!("{NAME}: unable to mark all pods NotReady on node {name}: {err}; queuing for retry");
                    lock(&self.to_retry).insert(name);
                    return zone;
                }
            }
        }
        lock(&self.to_retry).remove(&name);
        zone
    }

    /// NodeControllerLeaseCircuitBreaker's controller-wide check: false while the Lease cache
    /// has not yet reached the resourceVersion a live Lease was seen at.
    fn lease_cache_ready(&self, leases: &Store) -> bool {
        let mut wait = lock(&self.lease_wait);
        let Some(want) = *wait else {
            return true;
        };
        let have = leases.resource_version().parse::<u64>().unwrap_or(0);
        if have >= want {
            *wait = None;
            return true;
        }
        false
    }

    /// NodeControllerLeaseCircuitBreaker: before a node whose Lease looks expired in the cache
    /// is judged, its live Lease is read; a different resourceVersion means the cache is
    /// stale (the node is not judged, nor is any other until the cache catches up). A Lease
    /// that is gone lets the judgement go on; any other error stops it for this node.
    fn live_lease_agrees(
        &self,
        e: &RunEnv,
        name: &str,
        cached: Option<&Value>,
    ) -> Result<(), String> {
        let cached_rv = cached.map(obj::resource_version).unwrap_or("");
        match e.client.get(&LEASES, Some("kube-node-lease"), name) {
            Ok(live) => {
                let live_rv = obj::resource_version(&live);
                if live_rv == cached_rv {
                    return Ok(());
                }
                *lock(&self.lease_wait) = live_rv.parse().ok();
                Err(format!(
                    "Lease kube-node-lease/{name} is at resourceVersion {live_rv}, the cache at {cached_rv:?}"
                ))
            }
            Err(err) if err.is_not_found() => Ok(()),
            Err(err) => Err(format!(
                "error looking up lease to verify node {name}: {err}"
            )),
        }
    }

    /// `monitorNodeHealth`.
    pub(super) fn monitor(&self, e: &RunEnv) {
        let start = Instant::now();
        // Each node's metadata, taints and conditions: what the pass reads (a node's status
        // is read whole only when it is written).
        let store = e.cache.store(NODES);
        let nodes: Vec<Obj> = store
            .keys()
            .iter()
            .filter_map(|k| store.get_fields(k, NODE_FACTS))
            .collect();
        {
            let mut st = lock(&self.state);
            let st = &mut *st;
            let mut added = Vec::new();
            for n in &nodes {
                if !st.known.contains_key(obj::name(n)) {
                    added.push(n.clone());
                } else if !st.zone_states.contains_key(&health::zone_key(n)) {
                    self.add_zone(n, &mut st.zone_states);
                }
            }
            let names: std::collections::HashSet<&str> =
                nodes.iter().map(|n| obj::name(n)).collect();
            let deleted: Vec<(String, String)> = st
                .known
                .iter()
                .filter(|(k, _)| !names.contains(k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for n in &added {
                let name = obj::name(n);
                log::info!("{NAME}: controller observed a new Node {name}");
                node_event(
                    e,
                    name,
                    obj::uid(n),
                    "RegisteredNode",
                    &format!("Registered Node {name} in Controller"),
                );
                st.known.insert(name.to_string(), obj::uid(n).to_string());
                self.add_zone(n, &mut st.zone_states);
                let _ = self.mark_reachable(e, n);
            }
            for (name, uid) in deleted {
                log::info!("{NAME}: controller observed a Node deletion {name}");
                node_event(
                    e,
                    &name,
                    &uid,
                    "RemovingNode",
                    &format!("Removing Node {name} from Controller"),
                );
                st.known.remove(&name);
            }
        }
        let zones: Mutex<HashMap<String, Vec<String>>> = Mutex::default();
        crate::runtime::pool::for_each_parallel(nodes.len(), NODE_WORKERS, |i| {
            let one = Instant::now();
            if let Some((zone, status)) = self.node_health(e, nodes[i].clone()) {
                lock(&zones).entry(zone).or_default().push(status);
            }
            super::metrics::node_health_took(one.elapsed());
            true
        });
        let zones = zones.into_inner().unwrap_or_else(|p| p.into_inner());
        self.handle_disruption(e, &zones, &nodes);
        self.tainting.add(());
        super::metrics::all_nodes_health_took(start.elapsed());
    }

    /// `handleDisruption`.
    fn handle_disruption(&self, e: &RunEnv, zones: &HashMap<String, Vec<String>>, nodes: &[Obj]) {
        let threshold = self.opts.unhealthy_zone_threshold;
        let mut new_states = HashMap::new();
        let mut all_are_full = true;
        let mut st = lock(&self.state);
        for (zone, statuses) in zones {
            let s: Vec<&str> = statuses.iter().map(String::as_str).collect();
            let (unhealthy, state) = health::zone_state(&s, threshold);
            super::metrics::zone(zone, s.len(), unhealthy);
            if state != ZoneState::FullDisruption {
                all_are_full = false;
            }
            new_states.insert(zone.clone(), state);
            if !st.zone_states.contains_key(zone) {
                log::error!("{NAME}: setting initial state for unseen zone {zone:?}");
                st.zone_states.insert(zone.clone(), ZoneState::Initial);
            }
        }
        st.zone_states.retain(|z, _| {
            let keep = zones.contains_key(z);
            if !keep {
                super::metrics::zone_gone(z);
            }
            keep
        });
        let all_was_full = st
            .zone_states
            .values()
            .all(|s| *s == ZoneState::FullDisruption);
        if all_are_full && all_was_full {
            return;
        }
        let now = Instant::now();
        if all_are_full {
            log::info!("{NAME}: controller detected that all Nodes are not-Ready. Entering master disruption mode");
            let zone_names: Vec<String> = st.zone_states.keys().cloned().collect();
            for z in &zone_names {
                st.zone_states.insert(z.clone(), ZoneState::FullDisruption);
            }
            drop(st);
            for n in nodes {
                if self.mark_reachable(e, n).is_err() {
                    log::error!("{NAME}: failed to remove taints from Node {}", obj::name(n));
                }
            }
            let mut q = lock(&self.zones);
            for z in &zone_names {
                if let Some(q) = q.get_mut(z) {
                    q.swap_limiter(0.0, now);
                }
            }
            return;
        }
        if all_was_full {
            log::info!("{NAME}: controller detected that some Nodes are Ready. Exiting master disruption mode");
            let t = SystemTime::now();
            for h in lock(&self.health).values_mut() {
                h.probe = t;
                h.ready_transition = t;
            }
        }
        let mut q = lock(&self.zones);
        for (z, state) in st.zone_states.iter_mut() {
            let new = new_states.get(z).copied().unwrap_or(ZoneState::Initial);
            if *state == new && !all_was_full {
                continue;
            }
            if *state != new {
                log::info!(
                    "{NAME}: controller detected that zone {z:?} is now in state {}",
                    new.as_str()
                );
            }
            let size = zones.get(z).map_or(0, Vec::len);
            if let (Some(qps), Some(zq)) = (self.opts.rates.for_state(new, size), q.get_mut(z)) {
                zq.swap_limiter(qps, now);
            }
            *state = new;
        }
    }

    /// `doNoExecuteTaintingPass`; queued again while a zone queue holds nodes.
    pub(super) fn tainting_pass(&self, e: &RunEnv) {
        let nodes = e.cache.store(NODES);
        let mut next: Option<Duration> = None;
        let mut zones = lock(&self.zones);
        for q in zones.values_mut() {
            q.try_process(Instant::now(), |tv| {
                let Some(node) = nodes.get(&tv.value) else {
                    log::info!("{NAME}: node {} no longer present in nodeLister", tv.value);
                    return (true, Duration::ZERO);
                };
                let status = health::cond_status(health::condition(&node, health::READY));
                let (add, opposite) = match status {
                    "False" => (not_ready_taint(), unreachable_taint()),
                    "Unknown" => (unreachable_taint(), not_ready_taint()),
                    _ => {
                        log::debug!("{NAME}: node {} was in a taint queue, but it's ready now. Ignoring taint request", tv.value);
                        return (true, Duration::ZERO);
                    }
                };
                let done = swap_taints(&e.cache, &e.client, &node, &[add], &[opposite]);
                if done {
                    super::metrics::eviction(&health::zone_key(&node));
                }
                (done, Duration::ZERO)
            });
            if let Some(d) = q.next_due(Instant::now()) {
                next = Some(next.map_or(d, |n| n.min(d)));
            }
        }
        drop(zones);
        if let Some(d) = next {
            self.tainting.add_after((), d.max(EVICTION_PERIOD));
        }
    }
}
