//! One Service's EndpointSlices, decided as upstream's `Reconciler` (k8s.io/endpointslice)
//! decides them: per address family and per set of ports, the endpoints its pods give are
//! matched against the existing slices; slices keep the endpoints still wanted, take new ones
//! into the slices already being updated (fullest first), then into the unchanged slice they
//! fill best, and only then into new slices of at most `max` endpoints. Slices left empty are
//! deleted, or renamed into a slice to create (an update instead of a create and a delete); a
//! Service without endpoints keeps one empty placeholder slice. Where upstream picks from a
//! Go map (in random order), this picks in pod-name order.

use super::metrics::AddressTypeSync;
use super::model::{self, Endpoint, Slice, HEADLESS_LABEL, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
use super::topology::{self, SliceInfo, TopologyCache};
use super::trafficdist;
use crate::controller::EventType;
use crate::controllers::kit::servicepods as sp;
use crate::obj::{self, At as _, Obj};
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// What one sync writes, in upstream's order (per family: creates, updates, deletes; then the
/// slices of families the Service no longer has), and its Events.
#[derive(Debug, Default)]
pub struct Plan {
    pub create: Vec<Slice>,
    pub update: Vec<Slice>,
    pub delete: Vec<Slice>,
    /// (type, reason, message) about the Service.
    pub events: Vec<(EventType, &'static str, String)>,
    /// Pods skipped because their node is not known (upstream's sync errors).
    pub errors: Vec<String>,
    /// What each address type gives the metrics, in order.
    pub metrics: Vec<AddressTypeSync>,
}

/// The inputs of one sync.
pub struct Input<'a> {
    pub svc: &'a Value,
    /// The pods the Service selects.
    pub pods: &'a [Obj],
    /// Node by name.
    pub node: &'a dyn Fn(&str) -> Option<Obj>,
    /// The slices labelled with this Service and this controller, not being deleted.
    pub existing: Vec<Slice>,
    pub max: usize,
    pub controller: &'static str,
    /// The trigger-time annotation's value (None: removed).
    pub trigger: Option<String>,
}

/// upstream's `hintsEnabled`: the deprecated annotation first, else `topology-mode`.
pub fn hints_enabled(svc: &Value) -> bool {
    let v = obj::annotation(svc, "service.kubernetes.io/topology-aware-hints")
        .or_else(|| obj::annotation(svc, "service.kubernetes.io/topology-mode"));
    matches!(v, Some("Auto") | Some("auto"))
}

/// `getAddressTypesForService`, in a fixed order.
pub fn address_types(svc: &Value) -> Vec<&'static str> {
    let mut out = Vec::new();
    if let Some(f) = svc.at("/spec/ipFamilies").and_then(Value::as_array) {
        for fam in f {
            let t = match fam.as_str() {
                Some("IPv4") => "IPv4",
                Some("IPv6") => "IPv6",
                _ => continue,
            };
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    if !out.is_empty() {
        return out;
    }
    if !sp::is_headless(svc) {
        let v6 = sp::is_ipv6(sp::str_at(svc, "/spec/clusterIP"));
        return vec![if v6 { "IPv6" } else { "IPv4" }];
    }
    vec!["IPv4", "IPv6"]
}

/// `setEndpointSliceLabels`: the Service's labels (reserved keys aside) plus the reserved
/// ones; and whether the non-reserved labels differ from the slice's.
pub fn slice_labels(
    current: &Map<String, Value>,
    svc: &Value,
    controller: &str,
) -> (Map<String, Value>, bool) {
    let reserved =
        |k: &str| k == SERVICE_NAME_LABEL || k == MANAGED_BY_LABEL || k == HEADLESS_LABEL;
    let mine: Map<String, Value> = current
        .iter()
        .filter(|(k, _)| !reserved(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut want: Map<String, Value> = svc
        .at("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(k, v)| !reserved(k) && v.is_string())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let changed = mine != want;
    if sp::is_headless(svc) {
        want.insert(HEADLESS_LABEL.into(), json!(""));
    }
    want.insert(SERVICE_NAME_LABEL.into(), json!(obj::name(svc)));
    want.insert(MANAGED_BY_LABEL.into(), json!(controller));
    (want, changed)
}

/// `newEndpointSlice`: no name yet, the Service as controller owner.
pub fn new_slice(svc: &Value, ports: Vec<Value>, address_type: &str, controller: &str) -> Slice {
    let (labels, _) = slice_labels(&Map::new(), svc, controller);
    Slice {
        name: String::new(),
        from: None,
        address_type: address_type.to_string(),
        ports,
        endpoints: Vec::new(),
        labels,
        annotations: Map::new(),
        owner_refs: vec![
            json!({"apiVersion": "v1", "kind": "Service", "name": obj::name(svc),
            "uid": obj::uid(svc), "controller": true, "blockOwnerDeletion": true}),
        ],
    }
}

/// `podToEndpoint`.
pub fn pod_endpoint(
    pod: &Value,
    node: Option<&Value>,
    svc: &Value,
    address_type: &str,
) -> Endpoint {
    let serving = sp::is_ready(pod);
    let terminating = obj::is_deleting(pod);
    let publish = svc
        .at("/spec/publishNotReadyAddresses")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let v6 = address_type == "IPv6";
    let addresses = pod
        .at("/status/podIPs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|p| sp::str_at(p, "/ip"))
                .filter(|ip| sp::is_ipv6(ip) == v6)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let mut target = Map::new();
    target.insert("kind".into(), json!("Pod"));
    for (k, v) in [
        ("namespace", obj::namespace(pod)),
        ("name", obj::name(pod)),
        ("uid", obj::uid(pod)),
    ] {
        if !v.is_empty() {
            target.insert(k.into(), json!(v));
        }
    }
    let node_name = sp::str_at(pod, "/spec/nodeName");
    Endpoint {
        addresses,
        ready: Some(publish || (serving && !terminating)),
        serving: Some(serving),
        terminating: Some(terminating),
        hostname: sp::hostname_for(svc, pod).map(str::to_string),
        target: Some(target),
        node_name: (!node_name.is_empty()).then(|| node_name.to_string()),
        zone: node
            .and_then(|n| obj::label(n, model::ZONE_LABEL))
            .filter(|z| !z.is_empty())
            .map(str::to_string),
        hints: None,
        node_hints: None,
    }
}

/// `getEndpointPorts`, sorted as the port-map key sorts them.
pub fn pod_ports(svc: &Value, pod: &Value) -> Vec<Value> {
    let ports: &[Value] = svc
        .at("/spec/ports")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let mut out = Vec::new();
    for p in ports {
        let Some(n) = sp::find_port(pod, p) else {
            continue;
        };
        let mut m = Map::new();
        m.insert("name".into(), json!(sp::str_at(p, "/name")));
        m.insert("port".into(), json!(n));
        m.insert("protocol".into(), json!(sp::str_at(p, "/protocol")));
        if let Some(a) = p.get("appProtocol").and_then(Value::as_str) {
            m.insert("appProtocol".into(), json!(a));
        }
        out.push(Value::Object(m));
    }
    model::sort_ports(&mut out);
    out
}

/// upstream's `EndpointSet`, popped in insertion order.
#[derive(Default)]
pub struct EndpointSet {
    list: Vec<Option<Endpoint>>,
    index: HashMap<String, usize>,
    len: usize,
    next: usize,
}

impl EndpointSet {
    pub fn insert(&mut self, e: Endpoint) {
        let id = e.identity();
        match self.index.get(&id) {
            Some(&i) => {
                if self.list[i].is_none() {
                    self.len += 1;
                }
                self.list[i] = Some(e);
            }
            None => {
                self.index.insert(id, self.list.len());
                self.list.push(Some(e));
                self.len += 1;
            }
        }
    }
    pub fn get(&self, e: &Endpoint) -> Option<&Endpoint> {
        self.index
            .get(&e.identity())
            .and_then(|&i| self.list[i].as_ref())
    }
    pub fn delete(&mut self, e: &Endpoint) {
        if let Some(&i) = self.index.get(&e.identity()) {
            if self.list[i].take().is_some() {
                self.len -= 1;
            }
        }
    }
    pub fn pop(&mut self) -> Option<Endpoint> {
        while self.next < self.list.len() {
            let i = self.next;
            self.next += 1;
            if let Some(e) = self.list[i].take() {
                self.len -= 1;
                return Some(e);
            }
        }
        None
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// `getSliceToFill`: the slice `n` endpoints fill closest to `max` without passing it.
fn slice_to_fill(slices: &[&Slice], n: usize, max: usize) -> Option<String> {
    let mut closest = max;
    let mut found = None;
    for s in slices {
        let total = n + s.endpoints.len();
        if total <= max && max - total < closest {
            closest = max - total;
            found = Some(s.name.clone());
            if closest == 0 {
                break;
            }
        }
    }
    found
}

/// An insertion-ordered set of names.
#[derive(Default)]
struct Names(Vec<String>);

impl Names {
    fn insert(&mut self, n: &str) {
        if !self.0.iter().any(|x| x == n) {
            self.0.push(n.to_string());
        }
    }
    fn remove(&mut self, n: &str) {
        self.0.retain(|x| x != n);
    }
}

/// The slices of one set of ports: (create, update, delete).
type PortWrites = (Vec<Slice>, Vec<Slice>, Vec<Slice>);

/// `reconcileByPortMapping`: the writes for one set of ports, and the endpoints added and
/// removed.
fn by_port_mapping(
    input: &Input,
    existing: Vec<Slice>,
    mut desired: EndpointSet,
    ports: &[Value],
    address_type: &str,
) -> (PortWrites, usize, usize) {
    let max = input.max.max(1);
    let mut removed = 0;
    let mut by_name: HashMap<String, Slice> = HashMap::new();
    let (mut unchanged, mut to_update, mut to_delete) =
        (Names::default(), Names::default(), Names::default());
    for s in existing {
        let mut kept = Vec::new();
        let mut updated = false;
        for e in &s.endpoints {
            if let Some(got) = desired.get(e).cloned() {
                if !got.equal_beyond_hash(e) {
                    updated = true;
                }
                kept.push(got);
                desired.delete(e);
            }
        }
        let (labels, labels_changed) = slice_labels(&s.labels, input.svc, input.controller);
        let name = s.name.clone();
        if updated || kept.len() != s.endpoints.len() {
            removed += s.endpoints.len().saturating_sub(kept.len());
            if kept.is_empty() {
                to_delete.insert(&name);
                by_name.insert(name, s);
            } else {
                let mut s = s;
                s.endpoints = kept;
                s.labels = labels;
                to_update.insert(&name);
                by_name.insert(name, s);
            }
        } else if labels_changed {
            let mut s = s;
            s.labels = labels;
            to_update.insert(&name);
            by_name.insert(name, s);
        } else {
            unchanged.insert(&name);
            by_name.insert(name, s);
        }
    }
    let added = desired.len();
    // New endpoints go first into the slices being updated anyway, fullest first.
    if !desired.is_empty() && !to_update.0.is_empty() {
        let mut names = to_update.0.clone();
        crate::sort::sort_by_key(&mut names[..], |n| {
            std::cmp::Reverse(by_name[n].endpoints.len())
        });
        for n in names {
            let s = by_name.get_mut(&n).expect("known");
            while !desired.is_empty() && s.endpoints.len() < max {
                s.endpoints.extend(desired.pop());
            }
        }
    }
    let mut create = Vec::new();
    while !desired.is_empty() {
        let mut fill = None;
        if desired.len() < max && !unchanged.0.is_empty() {
            let list: Vec<&Slice> = unchanged.0.iter().map(|n| &by_name[n]).collect();
            fill = slice_to_fill(&list, desired.len(), max);
        }
        match fill {
            Some(n) => {
                let s = by_name.get_mut(&n).expect("known");
                while !desired.is_empty() && s.endpoints.len() < max {
                    s.endpoints.extend(desired.pop());
                }
                to_update.insert(&n);
                unchanged.remove(&n);
            }
            None => {
                let mut s = new_slice(input.svc, ports.to_vec(), address_type, input.controller);
                while !desired.is_empty() && s.endpoints.len() < max {
                    s.endpoints.extend(desired.pop());
                }
                create.push(s);
            }
        }
    }
    let take = |names: Names, by_name: &mut HashMap<String, Slice>| -> Vec<Slice> {
        names.0.iter().filter_map(|n| by_name.remove(n)).collect()
    };
    let update = take(to_update, &mut by_name);
    let delete = take(to_delete, &mut by_name);
    ((create, update, delete), added, removed)
}

/// `Reconcile`: the writes for one Service.
pub fn reconcile(input: &Input, topo: &TopologyCache) -> Plan {
    let key = obj::key(input.svc);
    let types = address_types(input.svc);
    let mut plan = Plan::default();
    let mut unsupported = Vec::new();
    let mut by_type: Vec<(&str, Vec<Slice>)> = types.iter().map(|t| (*t, Vec::new())).collect();
    for s in &input.existing {
        match by_type.iter_mut().find(|(t, _)| *t == s.address_type) {
            Some((_, list)) => list.push(s.clone()),
            None => {
                topo.remove_hints(&key, &s.address_type);
                unsupported.push(s.clone());
            }
        }
    }
    for (t, existing) in by_type {
        by_address_type(input, topo, existing, t, &mut plan);
    }
    plan.delete.extend(unsupported);
    plan
}

fn by_address_type(
    input: &Input,
    topo: &TopologyCache,
    existing: Vec<Slice>,
    address_type: &str,
    plan: &mut Plan,
) {
    let svc = input.svc;
    let (uid, key) = (obj::uid(svc), obj::key(svc));
    let mut to_delete: Vec<Slice> = Vec::new();
    let mut by_ports: Vec<(String, Vec<Slice>)> = Vec::new();
    for s in &existing {
        if s.owned_by(uid, "Service", "v1") {
            let k = s.port_key();
            match by_ports.iter_mut().find(|(x, _)| *x == k) {
                Some((_, l)) => l.push(s.clone()),
                None => by_ports.push((k, vec![s.clone()])),
            }
        } else {
            to_delete.push(s.clone());
        }
    }
    let publish = svc
        .at("/spec/publishNotReadyAddresses")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut desired: Vec<(String, Vec<Value>, EndpointSet)> = Vec::new();
    for pod in input.pods {
        if !sp::should_be_in_endpoints(pod, true) {
            continue;
        }
        let ports = pod_ports(svc, pod);
        let k = model::port_key(&ports);
        let i = match desired.iter().position(|(x, _, _)| *x == k) {
            Some(i) => i,
            None => {
                desired.push((k, ports, EndpointSet::default()));
                desired.len() - 1
            }
        };
        let node_name = sp::str_at(pod, "/spec/nodeName");
        let node = (input.node)(node_name);
        if node.is_none() && !publish {
            log::info!(
                "endpointslice-controller: skipping pod {} for service {key}: node {node_name:?} not found",
                obj::key(pod)
            );
            plan.errors.push(format!(
                "skipping Pod {} for Service {key}: Node {node_name} Not Found",
                obj::name(pod)
            ));
            continue;
        }
        let e = pod_endpoint(pod, node.as_deref(), svc, address_type);
        if !e.addresses.is_empty() {
            desired[i].2.insert(e);
        }
    }
    let (mut create, mut update) = (Vec::new(), Vec::new());
    let mut stats = AddressTypeSync::default();
    for (k, ports, set) in desired {
        let pos = by_ports.iter().position(|(x, _)| *x == k);
        let slices = pos.map(|p| by_ports.remove(p).1).unwrap_or_default();
        let wanted = set.len();
        let before = slices.len();
        let ((c, u, d), added, removed) = by_port_mapping(input, slices, set, &ports, address_type);
        stats.added += added;
        stats.removed += removed;
        let after = (before + c.len()).saturating_sub(d.len());
        stats.ports.insert(k, (wanted, after));
        create.extend(c);
        update.extend(u);
        to_delete.extend(d);
    }
    for (_, rest) in by_ports {
        to_delete.extend(rest);
    }
    if existing.len() == to_delete.len() && create.is_empty() {
        let placeholder = new_slice(svc, Vec::new(), address_type, input.controller);
        if to_delete.len() == 1 && is_placeholder(&to_delete[0], &placeholder) {
            to_delete.clear();
        } else {
            create.push(placeholder);
        }
        stats.ports.insert(model::port_key(&[]), (0, 1));
    }
    let changed: Vec<&str> = update
        .iter()
        .chain(&to_delete)
        .map(|s| s.name.as_str())
        .collect();
    let unchanged: Vec<Slice> = existing
        .iter()
        .filter(|s| !changed.contains(&s.name.as_str()))
        .cloned()
        .collect();
    let mut si = SliceInfo {
        service_key: key.clone(),
        address_type: address_type.to_string(),
        to_create: create,
        to_update: update,
        unchanged,
    };
    // The topology annotation wins over `trafficDistribution`.
    let distribution = trafficdist::valid(svc).filter(|_| !hints_enabled(svc));
    if hints_enabled(svc) {
        plan.events.extend(topo.add_hints(&mut si));
    } else {
        if topo.has_populated_hints(&key) {
            log::info!("endpointslice-controller: {key}: topology aware hints annotation changed, removing hints");
            plan.events.push((
                EventType::Warning,
                "TopologyAwareHintsDisabled",
                topology::with_address_type(topology::DISABLED, address_type),
            ));
        }
        topo.remove_hints(&key, address_type);
        if distribution.is_none() {
            topology::remove_hints_from_slices(&mut si);
        }
    }
    if distribution.is_some() {
        trafficdist::reconcile_hints(distribution, &mut si);
    }
    stats.traffic_distribution = distribution.map(str::to_string);
    stats.topology_auto = hints_enabled(svc);
    let (mut create, mut update) = (si.to_create, si.to_update);
    // A slice to delete becomes one to create, under its name: an update instead of two writes.
    let mut i = 0;
    while i < to_delete.len() && !create.is_empty() {
        let d = &to_delete[i];
        if d.address_type == address_type && d.owned_by(uid, "Service", "v1") {
            let mut c = create.pop().expect("not empty");
            c.name = d.name.clone();
            update.push(c);
            to_delete.remove(i);
        } else {
            i += 1;
        }
    }
    // Counted before a deleting Service's creates are dropped, as upstream counts them.
    stats.changed = create.len() + update.len() + to_delete.len();
    plan.metrics.push(stats);
    if obj::is_deleting(svc) {
        create.clear();
    }
    for s in create.iter_mut().chain(update.iter_mut()) {
        match &input.trigger {
            Some(t) => s.annotations.insert(model::TRIGGER_TIME.into(), json!(t)),
            None => s.annotations.remove(model::TRIGGER_TIME),
        };
    }
    plan.create.extend(create);
    plan.update.extend(update);
    plan.delete.extend(to_delete);
}

/// upstream's `placeholderSliceCompare`: namespace and labels of the metadata, and the rest
/// of the object (nil and empty lists alike).
fn is_placeholder(s: &Slice, p: &Slice) -> bool {
    s.labels == p.labels
        && s.address_type == p.address_type
        && s.endpoints.is_empty()
        && s.ports.is_empty()
}
