//! One Endpoints object's mirrored EndpointSlices, decided as upstream's mirroring
//! `reconciler` decides them: the subsets repacked, at most `max` addresses of each mirrored
//! (ready ones first; addresses that are not IPs skipped), one slice per address family and
//! set of ports, holding at most `max` endpoints. The first existing slice of a set of ports
//! is rewritten whole when anything differs (endpoints, the Endpoints' labels or annotations)
//! and the others deleted; a slice to create takes the name of one to delete of the same
//! family (one update instead of two writes).

use super::metrics::MirrorSync;
use crate::controller::EventType;
use crate::controllers::endpoints::repack;
use crate::controllers::endpoints::subsets::{Address, Subset};
use crate::controllers::endpointslice::model::{
    self, Endpoint, Slice, MANAGED_BY_LABEL, SERVICE_NAME_LABEL,
};
use crate::controllers::endpointslice::reconciler::EndpointSet;
use crate::obj;
use crate::obj::At as _;
use serde_json::{json, Map, Value};

pub const CONTROLLER_NAME: &str = "endpointslicemirroring-controller.k8s.io";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[derive(Debug, Default)]
pub struct Plan {
    pub create: Vec<Slice>,
    pub update: Vec<Slice>,
    pub delete: Vec<Slice>,
    /// (type, reason, message) about the Endpoints.
    pub events: Vec<(EventType, &'static str, String)>,
    /// What the sync gives the metrics.
    pub metrics: MirrorSync,
}

/// netutils' `ParseIPSloppy` and `To4`: the family of an address, None when it is not one
/// (IPv4 octets may have leading zeros).
pub fn address_type(ip: &str) -> Option<&'static str> {
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => Some("IPv4"),
        Ok(std::net::IpAddr::V6(a)) => Some(if a.to_ipv4_mapped().is_some() {
            "IPv4"
        } else {
            "IPv6"
        }),
        Err(_) => {
            let parts: Vec<&str> = ip.split('.').collect();
            let sloppy = parts.len() == 4
                && parts.iter().all(|p| {
                    !p.is_empty()
                        && p.len() <= 3
                        && p.bytes().all(|b| b.is_ascii_digit())
                        && p.parse::<u16>().is_ok_and(|n| n <= 255)
                });
            sloppy.then_some("IPv4")
        }
    }
}

/// `addressToEndpoint`.
fn endpoint(a: &Address, ready: bool) -> Endpoint {
    let target = a.target.as_ref().map(|t| t.to_json());
    Endpoint {
        addresses: vec![a.ip.clone()],
        ready: Some(ready),
        hostname: (!a.hostname.is_empty()).then(|| a.hostname.clone()),
        target,
        node_name: a.node_name.clone(),
        ..Endpoint::default()
    }
}

/// The Endpoints' annotations a mirrored slice carries.
fn mirrored_annotations(ep: &Value) -> Map<String, Value> {
    let mut a = obj::string_map(ep.at("/metadata/annotations"));
    a.remove(model::TRIGGER_TIME);
    a.remove(LAST_APPLIED);
    a
}

/// `newEndpointSlice` of the mirroring controller.
fn new_slice(ep: &Value, ports: &[Value], address_type: &str, name: &str) -> Slice {
    let mut labels = obj::string_map(ep.at("/metadata/labels"));
    labels.insert(SERVICE_NAME_LABEL.into(), json!(obj::name(ep)));
    labels.insert(MANAGED_BY_LABEL.into(), json!(CONTROLLER_NAME));
    Slice {
        name: name.to_string(),
        from: None,
        address_type: address_type.to_string(),
        ports: ports.to_vec(),
        endpoints: Vec::new(),
        labels,
        annotations: mirrored_annotations(ep),
        owner_refs: vec![
            json!({"apiVersion": "v1", "kind": "Endpoints", "name": obj::name(ep),
            "uid": obj::uid(ep), "controller": true, "blockOwnerDeletion": true}),
        ],
    }
}

/// `epPortsToEpsPorts`: every field set (an empty name or protocol is written as such).
fn slice_ports(s: &Subset) -> Vec<Value> {
    let mut out: Vec<Value> = s
        .ports
        .iter()
        .map(|p| {
            let mut m = Map::new();
            m.insert("name".into(), json!(p.name));
            m.insert("port".into(), json!(p.port));
            m.insert("protocol".into(), json!(p.protocol));
            if let Some(a) = &p.app_protocol {
                m.insert("appProtocol".into(), json!(a));
            }
            Value::Object(m)
        })
        .collect();
    model::sort_ports(&mut out);
    out
}

fn key(address_type: &str, ports: &[Value]) -> String {
    format!("{address_type}-{}", model::port_key(ports))
}

/// `reconcile`: the writes mirroring `ep` into `existing` (its mirrored slices, name order).
pub fn reconcile(ep: &Value, existing: Vec<Slice>, max: usize) -> Plan {
    let max = max.max(1);
    let mut plan = Plan::default();
    let mut desired: Vec<(String, &'static str, Vec<Value>, EndpointSet)> = Vec::new();
    let (mut invalid, mut skipped) = (0usize, 0usize);
    for subset in repack::repack(&Subset::all_from(ep)) {
        let ports = slice_ports(&subset);
        for fam in ["IPv4", "IPv6"] {
            let k = key(fam, &ports);
            match desired.iter_mut().find(|d| d.0 == k) {
                Some(d) => d.2 = ports.clone(),
                None => desired.push((k, fam, ports.clone(), EndpointSet::default())),
            }
        }
        let total = subset.addresses.len() + subset.not_ready.len();
        let mut added = 0;
        let all = subset
            .addresses
            .iter()
            .map(|a| (a, true))
            .chain(subset.not_ready.iter().map(|a| (a, false)));
        for (a, ready) in all {
            if added >= max {
                break;
            }
            match address_type(&a.ip) {
                Some(fam) => {
                    let k = key(fam, &ports);
                    if let Some(d) = desired.iter_mut().find(|d| d.0 == k) {
                        d.3.insert(endpoint(a, ready));
                    }
                    added += 1;
                }
                None => {
                    invalid += 1;
                    log::info!(
                        "endpointslice-mirroring-controller: address {:?} of Endpoints {} is not a valid IP, not mirrored",
                        a.ip,
                        obj::key(ep)
                    );
                }
            }
        }
        skipped += total - added;
    }
    plan.metrics.skipped = skipped;
    if invalid > 0 {
        plan.events.push((
            EventType::Warning,
            "InvalidIPAddress",
            format!("Skipped {invalid} invalid IP addresses when mirroring to EndpointSlices"),
        ));
    }
    if skipped > invalid {
        plan.events.push((
            EventType::Warning,
            "TooManyAddressesToMirror",
            format!(
                "A max of {max} addresses can be mirrored to EndpointSlices per Endpoints subset. {skipped} addresses were skipped"
            ),
        ));
    }
    let mut by_key: Vec<(String, Vec<Slice>)> = Vec::new();
    for s in existing {
        let k = key(&s.address_type, &s.ports);
        match by_key.iter_mut().find(|(x, _)| *x == k) {
            Some((_, l)) => l.push(s),
            None => by_key.push((k, vec![s])),
        }
    }
    for (k, fam, ports, set) in desired {
        let slices = by_key
            .iter()
            .position(|(x, _)| *x == k)
            .map(|p| by_key.remove(p).1)
            .unwrap_or_default();
        let (wanted, before) = (set.len(), slices.len());
        let (creates, deletes) = (plan.create.len(), plan.delete.len());
        by_port_mapping(ep, slices, set, &ports, fam, max, &mut plan);
        let made = plan.create.len() - creates;
        let after = (before + made).saturating_sub(plan.delete.len() - deletes);
        plan.metrics.ports.insert(k, (wanted, after));
    }
    for (_, rest) in by_key {
        plan.delete.extend(rest);
    }
    recycle(&mut plan);
    if obj::is_deleting(ep) {
        plan.create.clear();
    }
    plan
}

fn by_port_mapping(
    ep: &Value,
    mut existing: Vec<Slice>,
    mut set: EndpointSet,
    ports: &[Value],
    fam: &str,
    max: usize,
    plan: &mut Plan,
) {
    if set.is_empty() {
        plan.metrics.removed += existing.iter().map(|s| s.endpoints.len()).sum::<usize>();
        plan.delete.extend(existing);
        return;
    }
    if existing.is_empty() {
        plan.metrics.added += set.len();
    }
    let mut name = String::new();
    if !existing.is_empty() {
        let rest = existing.split_off(1);
        plan.delete.extend(rest);
        let first = &existing[0];
        let mut labels = first.labels.clone();
        labels.remove(MANAGED_BY_LABEL);
        labels.remove(SERVICE_NAME_LABEL);
        let mut matches = 0;
        let mut changed = false;
        for e in &first.endpoints {
            match set.get(e) {
                None => {
                    changed = true;
                    plan.metrics.removed += 1;
                }
                Some(got) => {
                    matches += 1;
                    if !got.equal_beyond_hash(e) {
                        changed = true;
                        plan.metrics.updated += 1;
                    }
                }
            }
        }
        let added = set.len() != matches;
        plan.metrics.added += set.len().saturating_sub(matches);
        if !changed
            && !added
            && labels == obj::string_map(ep.at("/metadata/labels"))
            && mirrored_annotations(ep) == first.annotations
        {
            return;
        }
        name = first.name.clone();
    }
    let mut s = new_slice(ep, ports, fam, &name);
    while !set.is_empty() && s.endpoints.len() < max {
        s.endpoints.extend(set.pop());
    }
    if s.name.is_empty() {
        plan.create.push(s);
    } else {
        plan.update.push(s);
    }
}

/// `recycleSlices`: per family, the i-th slice to create takes the name of the i-th to delete.
fn recycle(plan: &mut Plan) {
    for fam in ["IPv4", "IPv6"] {
        loop {
            let c = plan.create.iter().position(|s| s.address_type == fam);
            let d = plan.delete.iter().position(|s| s.address_type == fam);
            let (Some(c), Some(d)) = (c, d) else { break };
            let mut s = plan.create.remove(c);
            s.name = plan.delete.remove(d).name;
            plan.update.push(s);
        }
    }
}
