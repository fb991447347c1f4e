//! node-ipam-controller: the range allocator (upstream's `pkg/controller/nodeipam` with
//! `--cidr-allocator-type=RangeAllocator`). Every node gets one pod CIDR from each
//! `--cluster-cidr` (two for dual-stack, in the flag's order) in `spec.podCIDR` and
//! `spec.podCIDRs`.
//!
//! As upstream:
//! - Starts only with `--allocate-node-cidrs`; the configuration is checked at start with
//!   upstream's messages (`params`): cluster CIDRs parse, two at most and then one of each
//!   family, node CIDR sizes (`--node-cidr-mask-size[-ipv4|-ipv6]`, 24 and 64 by default,
//!   the family flags only where upstream allows them) no larger than their cluster CIDR,
//!   an IPv6 node CIDR at most 16 bits longer than its cluster CIDR, two
//!   `--service-cluster-ip-range`s of different families.
//! - The service ranges are taken out of the cluster CIDRs they overlap; then the CIDRs of
//!   every node in the first list are taken before any node gets a new one, so a restart
//!   never hands out a CIDR a node already has.
//! - A node without `spec.podCIDRs` gets the next free CIDR after the last one handed out
//!   (wrapping), in the order the watch shows the nodes: the same node sequence gets the same
//!   CIDRs as from kube-controller-manager. One strategic merge patch
//!   `{"spec":{"podCIDR":..,"podCIDRs":[..]}}` sets them, tried three times; then
//!   `CIDRAssignmentFailed` and the CIDRs are released (kept when the server timed out: the
//!   write may have been done), and the node is tried again.
//! - No free CIDR: a `Normal CIDRNotAvailable` Event `Node <name> status is now:
//!   CIDRNotAvailable` from `cidrAllocator`, and the node is tried again at its next change.
//!   The range allocator writes no node condition (`NetworkUnavailable` is the cloud
//!   allocators' and the routes controller's).
//! - A deleted node's CIDRs are free again. A node whose CIDR is outside the cluster CIDRs,
//!   unparsable, or has more CIDRs than there are cluster CIDRs is logged with upstream's
//!   error and left alone.
//! - No `--concurrent-*` flag; no work queue, so no `workqueue_*` series.
//!
//! Unlike upstream:
//! - A node with an unusable CIDR in the first list is logged and skipped; upstream refuses to
//!   start (the whole process exits, and keeps exiting until the node is fixed).
//! - Upstream requeues a node whose patch failed three times with the CIDRs it has just
//!   released (another node may get them meanwhile); here the node gets fresh CIDRs. A
//!   reservation for a node deleted before its patch is released (upstream keeps retrying it).
//! - When a dual-stack allocation finds the second family exhausted, the first family's CIDR
//!   is given back (upstream keeps it taken until a restart).
//! - 4 patches in flight at most (upstream: 30 goroutines); the client's QPS limit bounds
//!   both, and 30 threads cost more CPU and memory for no speed.
//! - A node seen with CIDRs on an update (someone else set them) has them taken, as on an
//!   add; and a node that shows up with a CIDR another node holds in a reservation not yet
//!   written (after a re-list) makes that node get another.

pub mod cidrset;
mod metrics;
pub mod params;
#[cfg(test)]
mod tests;

use super::{Action, Applied, Controller, Cx, EventSpec, EventType, ObjectRef, Outcome, Watch};
use crate::api::client::PatchType;
use crate::api::resources::NODES;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::{Error, Result};
use crate::obj;
use cidrset::{CidrSet, Net};
use params::Params;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Upstream's `cidrUpdateRetries`: patches of one reservation before it is given up.
const PATCH_TRIES: u32 = 3;
pub const CIDR_NOT_AVAILABLE: &str = "CIDRNotAvailable";
pub const CIDR_ASSIGNMENT_FAILED: &str = "CIDRAssignmentFailed";

/// Nodes as this controller reads them.
pub const NODE_WATCH: Watch = Watch::fields(NODES, &["/spec/podCIDR", "/spec/podCIDRs"]);

/// Its row in the controller table.
pub fn build(cx: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    match Params::from_config(cx.cfg).map_err(Error::Config)? {
        None => Ok(None),
        Some(p) => {
            let c = NodeIpamController::new(&p).map_err(Error::Config)?;
            let state = Arc::downgrade(&c.state);
            crate::metrics::register_collector(
                "nodeipam",
                Arc::new(move || match state.upgrade() {
                    Some(s) => metrics::families(&s.lock().unwrap_or_else(|p| p.into_inner()).sets),
                    None => Vec::new(),
                }),
            );
            crate::metrics::controller_started("nodeipam");
            Ok(Some(super::Runnable::reconciles(c)))
        }
    }
}

/// What is under way for one node.
#[derive(Debug, Clone, PartialEq)]
enum Work {
    /// CIDRs taken for it, not yet written; failed patches so far.
    Reserved { cidrs: Vec<Net>, failures: u32 },
    /// No CIDR was free: an Event to record.
    Exhausted,
    /// Patches failed `PATCH_TRIES` times: an Event to record, then new CIDRs.
    AssignFailed,
}

struct State {
    sets: Vec<CidrSet>,
    /// The nodes of the first list have been taken in.
    primed: bool,
    work: HashMap<String, Work>,
}

pub struct NodeIpamController {
    state: Arc<Mutex<State>>,
}

/// The CIDRs a node has (`spec.podCIDRs`).
fn pod_cidrs(node: &Value) -> Vec<&str> {
    node["spec"]["podCIDRs"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

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

/// Upstream's `RecordNodeStatusChange`.
fn status_event(name: &str, uid: &str, reason: &str) -> Action {
    Action::Event(EventSpec {
        involved: node_ref(name, uid),
        event_type: EventType::Normal,
        reason: reason.into(),
        message: format!("Node {name} status is now: {reason}"),
    })
}

/// The patch that sets a node's CIDRs (upstream's `PatchNodeCIDRs`).
pub fn cidr_patch(cidrs: &[Net]) -> Value {
    let list: Vec<String> = cidrs.iter().map(Net::to_string).collect();
    json!({"spec": {"podCIDR": list[0], "podCIDRs": list}})
}

impl State {
    /// Take the CIDRs `node` has. Upstream's `occupyCIDRs`, with its errors.
    fn occupy(&mut self, node: &Value) -> std::result::Result<(), String> {
        let name = obj::name(node);
        for (idx, c) in pod_cidrs(node).into_iter().enumerate() {
            let net = Net::parse(c).map_err(|_| {
                format!(
                    "failed to parse node {name}, CIDR {}",
                    node["spec"]["podCIDR"].as_str().unwrap_or("")
                )
            })?;
            let Some(set) = self.sets.get_mut(idx) else {
                return Err(format!("node:{name} has an allocated cidr: {net} at index:{idx} that does not exist in cluster cidrs configuration"));
            };
            set.occupy(&net).map_err(|e| {
                format!(
                    "failed to mark cidr[{net}] at idx [{idx}] as occupied for node: {name}: {e}"
                )
            })?;
        }
        Ok(())
    }

    /// Free the CIDRs `node` had (upstream's `ReleaseCIDR`).
    fn release_node(&mut self, node: &Value) -> std::result::Result<(), String> {
        let name = obj::name(node);
        for (idx, c) in pod_cidrs(node).into_iter().enumerate() {
            let net = Net::parse(c)
                .map_err(|e| format!("failed to parse CIDR {c} on Node {name}: {e}"))?;
            let Some(set) = self.sets.get_mut(idx) else {
                return Err(format!("node:{name} has an allocated cidr: {net} at index:{idx} that does not exist in cluster cidrs configuration"));
            };
            set.release(&net)
                .map_err(|e| format!("error when releasing CIDR {c}: {e}"))?;
        }
        Ok(())
    }

    fn release(&mut self, cidrs: &[Net]) {
        for (set, c) in self.sets.iter_mut().zip(cidrs) {
            if let Err(e) = set.release(c) {
                log::error!("node-ipam-controller: error when releasing CIDR {c}: {e}");
            }
        }
    }

    /// One CIDR from every set, or none at all.
    fn allocate(&mut self) -> std::result::Result<Vec<Net>, (usize, String)> {
        let mut out = Vec::with_capacity(self.sets.len());
        for idx in 0..self.sets.len() {
            match self.sets[idx].allocate_next() {
                Ok(c) => out.push(c),
                Err(e) => {
                    self.release(&out);
                    return Err((idx, e.to_string()));
                }
            }
        }
        Ok(out)
    }

    /// Allocate for `name` and record what is to be done; upstream's `AllocateOrOccupyCIDR`
    /// for a node without CIDRs.
    fn allocate_for(&mut self, name: &str) {
        let w = match self.allocate() {
            Ok(cidrs) => Work::Reserved { cidrs, failures: 0 },
            Err((idx, e)) => {
                log::error!("node-ipam-controller: node {name}: failed to allocate cidr from cluster cidr at idx:{idx}: {e}");
                Work::Exhausted
            }
        };
        self.work.insert(name.into(), w);
    }

    /// Take in every node of the first list before any allocation (upstream lists the nodes
    /// when it starts for this).
    fn prime(&mut self, cache: &Cache) {
        self.primed = true;
        let nodes = cache
            .store_for(&NODE_WATCH)
            .scan(|n| (!pod_cidrs(n).is_empty()).then(|| n.clone()));
        for n in &nodes {
            if let Err(e) = self.occupy(n) {
                log::error!("node-ipam-controller: {e}");
            }
        }
    }

    /// Nodes other than `name` whose unwritten reservations hold one of `node`'s CIDRs: they
    /// lose them (the CIDRs are `node`'s) and are allocated again.
    fn evict_conflicts(&mut self, name: &str, node: &Value) -> Vec<String> {
        let taken: Vec<Net> = pod_cidrs(node)
            .into_iter()
            .filter_map(|c| Net::parse(c).ok())
            .collect();
        let losers: Vec<String> = self
            .work
            .iter()
            .filter(|(n, w)| {
                n.as_str() != name
                    && matches!(w, Work::Reserved { cidrs, .. } if cidrs.iter().any(|c| taken.contains(c)))
            })
            .map(|(n, _)| n.clone())
            .collect();
        for n in &losers {
            if let Some(Work::Reserved { cidrs, .. }) = self.work.remove(n) {
                for (set, c) in self.sets.iter_mut().zip(&cidrs) {
                    if !taken.contains(c) {
                        let _ = set.release(c);
                    }
                }
                log::info!("node-ipam-controller: node {name} has CIDRs reserved for node {n}; allocating again for {n}");
            }
        }
        losers
    }
}

impl NodeIpamController {
    pub fn new(p: &Params) -> std::result::Result<Self, String> {
        let mut sets = p.sets()?;
        for svc in [p.service_cidr, p.secondary_service_cidr]
            .into_iter()
            .flatten()
        {
            for set in sets.iter_mut().filter(|s| s.cluster().overlaps(&svc)) {
                if let Err(e) = set.occupy(&svc) {
                    log::error!("node-ipam-controller: error filtering out service cidr {svc} out of cluster cidr {}: {e}", set.cluster());
                }
            }
        }
        Ok(NodeIpamController {
            state: Arc::new(Mutex::new(State {
                sets,
                primed: false,
                work: HashMap::new(),
            })),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// (allocated, max) of each cluster CIDR, for tests and logs.
    pub fn usage(&self) -> Vec<(u64, u64)> {
        self.state()
            .sets
            .iter()
            .map(|s| (s.allocated(), s.max_cidrs()))
            .collect()
    }
}

impl Controller for NodeIpamController {
    fn watches(&self) -> Vec<Watch> {
        vec![NODE_WATCH]
    }

    /// Upstream allocates in its informer handlers, in the order of the watch; so does this.
    fn keys_for(&self, _w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        let mut st = self.state();
        if !st.primed {
            st.prime(cache);
        }
        let node = d.object();
        let name = obj::name(node);
        if d.kind == DeltaKind::Deleted {
            if let Err(e) = st.release_node(node) {
                log::error!("node-ipam-controller: {e}");
            }
            if let Some(Work::Reserved { cidrs, .. }) = st.work.remove(name) {
                st.release(&cidrs);
            }
            return vec![];
        }
        if !pod_cidrs(node).is_empty() {
            if let Err(e) = st.occupy(node) {
                log::error!("node-ipam-controller: {e}");
                return vec![];
            }
            let mut keys = st.evict_conflicts(name, node);
            if st.work.contains_key(name) {
                keys.push(name.to_string());
            }
            return keys;
        }
        if st.work.contains_key(name) {
            log::debug!(
                "node-ipam-controller: node {name} is already in a process of CIDR assignment"
            );
            return vec![];
        }
        st.allocate_for(name);
        vec![name.to_string()]
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let node = cx.cache.store_for(&NODE_WATCH).get(key);
        let mut st = self.state();
        let Some(node) = node else {
            if let Some(Work::Reserved { cidrs, .. }) = st.work.remove(key) {
                st.release(&cidrs);
            }
            return Ok(Outcome::none());
        };
        let has = pod_cidrs(&node);
        let uid = obj::uid(&node);
        let mut actions = Vec::new();
        match st.work.get(key).cloned() {
            Some(Work::Exhausted) => {
                st.work.remove(key);
                return Ok(Outcome::with(vec![status_event(
                    key,
                    uid,
                    CIDR_NOT_AVAILABLE,
                )]));
            }
            Some(Work::AssignFailed) => {
                st.work.remove(key);
                actions.push(status_event(key, uid, CIDR_ASSIGNMENT_FAILED));
            }
            Some(Work::Reserved { cidrs, .. }) => {
                let mine: Vec<String> = cidrs.iter().map(Net::to_string).collect();
                if has == mine {
                    st.work.remove(key);
                    return Ok(Outcome::none());
                }
                if !has.is_empty() {
                    log::error!("node-ipam-controller: node {key} already has a CIDR allocated {has:?}; releasing the new one");
                    st.work.remove(key);
                    st.release(&cidrs);
                    return Ok(Outcome::none());
                }
                return Ok(Outcome::with(vec![patch(key, &cidrs)]));
            }
            None => {}
        }
        if has.is_empty() {
            st.allocate_for(key);
            match st.work.get(key).cloned() {
                Some(Work::Reserved { cidrs, .. }) => actions.push(patch(key, &cidrs)),
                Some(Work::Exhausted) => {
                    st.work.remove(key);
                    actions.push(status_event(key, uid, CIDR_NOT_AVAILABLE));
                }
                _ => {}
            }
        }
        Ok(Outcome::with(actions))
    }

    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        let Action::Patch { patch, .. } = action else {
            return;
        };
        let mut st = self.state();
        let Some(Work::Reserved { cidrs, failures }) = st.work.get_mut(key) else {
            return;
        };
        // Only the answer to this reservation's own patch.
        if cidr_patch(cidrs) != *patch {
            return;
        }
        match result {
            Applied::Done(_) => {
                log::info!(
                    "node-ipam-controller: set node {key} PodCIDR to {}",
                    patch["spec"]["podCIDRs"]
                );
                st.work.remove(key);
            }
            Applied::Failed(e) => {
                *failures += 1;
                if *failures < PATCH_TRIES {
                    return;
                }
                let cidrs = cidrs.clone();
                log::error!("node-ipam-controller: failed to update node {key} PodCIDR after multiple attempts: {e}");
                // The write may have been done when the answer did not come: those CIDRs stay
                // taken (a restart frees them if not).
                let unknown = matches!(e, Error::Transport(_))
                    || matches!(e, Error::Api { reason, .. } if reason == "ServerTimeout");
                if !unknown {
                    st.release(&cidrs);
                }
                st.work.insert(key.into(), Work::AssignFailed);
            }
            Applied::Skipped => {}
        }
    }
}

fn patch(name: &str, cidrs: &[Net]) -> Action {
    Action::Patch {
        kind: NODES,
        namespace: String::new(),
        name: name.into(),
        patch_type: PatchType::Strategic,
        patch: cidr_patch(cidrs),
        subresource: None,
    }
}
