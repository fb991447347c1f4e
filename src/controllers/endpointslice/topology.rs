//! Topology-aware hints (upstream's `topologycache`): from the ready nodes' zones and
//! allocatable CPU, each zone's share; a Service with `service.kubernetes.io/topology-mode:
//! Auto` (or the deprecated `topology-aware-hints` annotation) gets, on each ready endpoint,
//! a hint for its own zone, then endpoints of zones with more than their share are hinted to
//! zones with less. Hints are dropped (with a `TopologyAwareHintsDisabled` Event) when the
//! nodes do not say enough, when there are fewer endpoints than zones, or when an endpoint has
//! no zone. Zones are visited in name order where upstream ranges over a Go map.

use super::model::{Endpoint, Slice};
use crate::controller::EventType;
use crate::obj::{self, At as _};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

const OVERLOAD_THRESHOLD: f64 = 0.2;

pub const NO_ZONE_SPECIFIED: &str = "One or more endpoints do not have a zone specified";
pub const NO_ALLOCATED_HINTS: &str = "No hints allocated for zones";
pub const ENABLED: &str = "Topology Aware Hints has been enabled";
pub const DISABLED: &str = "Topology Aware Hints has been disabled";
pub const INSUFFICIENT_NODE_INFO: &str =
    "Insufficient Node information: allocatable CPU or zone not specified on one or more nodes";
pub const ONE_ZONE_ONLY: &str = "Nodes only ready in one zone";
pub const INSUFFICIENT_ENDPOINTS: &str = "Insufficient number of endpoints";
pub const MIN_ALLOCATION_EXCEEDS: &str =
    "Unable to allocate minimum required endpoints to each zone without exceeding overload threshold";

pub type Event = (EventType, &'static str, String);

pub fn with_address_type(s: &str, t: &str) -> String {
    format!("{s}, addressType: {t}")
}

fn disabled(msg: String) -> Event {
    (EventType::Warning, "TopologyAwareHintsDisabled", msg)
}

/// The slices of one Service and family a sync decided (upstream's `SliceInfo`).
pub struct SliceInfo {
    pub service_key: String,
    pub address_type: String,
    pub to_create: Vec<Slice>,
    pub to_update: Vec<Slice>,
    pub unchanged: Vec<Slice>,
}

#[derive(Clone, Copy, Debug)]
struct Allocation {
    minimum: usize,
    maximum: usize,
    desired: f64,
}

#[derive(Default)]
struct State {
    /// Zone -> share of the allocatable CPU; None without sufficient node information.
    ratios: Option<BTreeMap<String, f64>>,
    /// Service key -> family -> hints per zone.
    by_service: BTreeMap<String, BTreeMap<String, BTreeMap<String, usize>>>,
    populated: BTreeSet<String>,
}

#[derive(Default)]
pub struct TopologyCache(Mutex<State>);

pub use crate::compat::quantity::milli_value;

fn node_ready(n: &Value) -> bool {
    n.at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| {
            c.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        })
        .is_some_and(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

/// What the node watch compares before recomputing: readiness and zone.
pub fn node_fingerprint(n: &Value) -> (bool, Option<String>) {
    (
        node_ready(n),
        obj::label(n, super::model::ZONE_LABEL).map(str::to_string),
    )
}

fn ready_count(s: &Slice) -> usize {
    s.endpoints.iter().filter(|e| e.is_ready()).count()
}

impl TopologyCache {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `SetNodes`.
    pub fn set_nodes(&self, nodes: &[crate::obj::Obj]) {
        let mut cpu: BTreeMap<String, i64> = BTreeMap::new();
        let mut sufficient = true;
        let mut total = 0i64;
        for n in nodes {
            let excluded = obj::label(n, "node-role.kubernetes.io/control-plane").is_some()
                || obj::label(n, "node-role.kubernetes.io/master").is_some();
            if excluded || !node_ready(n) {
                continue;
            }
            let c = n
                .at("/status/allocatable/cpu")
                .and_then(Value::as_str)
                .map_or(0, milli_value);
            let zone = obj::label(n, super::model::ZONE_LABEL).unwrap_or("");
            if zone.is_empty() || c == 0 {
                cpu.clear();
                sufficient = false;
                log::info!(
                    "endpointslice-controller: can't get CPU or zone information for node {}",
                    obj::name(n)
                );
                break;
            }
            total += c;
            *cpu.entry(zone.to_string()).or_default() += c;
        }
        let mut st = self.state();
        if total == 0 || !sufficient || cpu.len() < 2 {
            st.ratios = None;
        } else {
            st.ratios = Some(
                cpu.into_iter()
                    .map(|(z, c)| (z, c as f64 / total as f64))
                    .collect(),
            );
        }
    }

    /// `GetOverloadedServices`.
    pub fn overloaded_services(&self) -> Vec<String> {
        let st = self.state();
        let empty = BTreeMap::new();
        let ratios = st.ratios.as_ref().unwrap_or(&empty);
        st.by_service
            .iter()
            .filter(|(_, fams)| fams.values().any(|ezi| overloaded(ezi, ratios)))
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub fn has_populated_hints(&self, key: &str) -> bool {
        self.state().populated.contains(key)
    }

    pub fn remove_hints(&self, key: &str, address_type: &str) {
        let mut st = self.state();
        if let Some(f) = st.by_service.get_mut(key) {
            f.remove(address_type);
            if f.is_empty() {
                st.by_service.remove(key);
            }
        }
        st.populated.remove(key);
    }

    pub fn delete_service(&self, key: &str) {
        let mut st = self.state();
        st.by_service.remove(key);
        st.populated.remove(key);
    }

    fn allocations(&self, n: usize) -> Result<BTreeMap<String, Allocation>, String> {
        let st = self.state();
        let Some(ratios) = &st.ratios else {
            return Err(INSUFFICIENT_NODE_INFO.to_string());
        };
        if ratios.len() < 2 {
            return Err(ONE_ZONE_ONLY.to_string());
        }
        if ratios.len() > n {
            return Err(format!(
                "{INSUFFICIENT_ENDPOINTS} ({n} endpoints, {} zones)",
                ratios.len()
            ));
        }
        let mut remaining = n as i64;
        let mut min_total = 0;
        let mut out = BTreeMap::new();
        for (zone, ratio) in ratios {
            let desired = ratio * n as f64;
            let minimum = (desired * (1.0 / (1.0 + OVERLOAD_THRESHOLD))).ceil() as usize;
            out.insert(
                zone.clone(),
                Allocation {
                    minimum,
                    maximum: 0,
                    desired: desired.max(minimum as f64),
                },
            );
            min_total += minimum;
            remaining -= minimum as i64;
            if remaining < 0 {
                return Err(format!(
                    "{MIN_ALLOCATION_EXCEEDS} ({n} endpoints, {} zones)",
                    ratios.len()
                ));
            }
        }
        for a in out.values_mut() {
            a.maximum = a.minimum + n - min_total;
        }
        Ok(out)
    }

    /// `AddHints`: hints on the slices to create and update (and unchanged slices whose hints
    /// no longer fit moved to the updates); the Events to record.
    pub fn add_hints(&self, si: &mut SliceInfo) -> Vec<Event> {
        let total: usize = si
            .to_create
            .iter()
            .chain(&si.to_update)
            .chain(&si.unchanged)
            .map(ready_count)
            .sum();
        let mut events = Vec::new();
        let allocations = match self.allocations(total) {
            Ok(a) => a,
            Err(msg) => {
                log::info!(
                    "endpointslice-controller: {}: {msg}, removing hints",
                    si.service_key
                );
                events.push(disabled(with_address_type(&msg, &si.address_type)));
                self.remove_hints(&si.service_key, &si.address_type);
                remove_hints_from_slices(si);
                return events;
            }
        };
        // Unchanged slices keep their hints when those still fit.
        let mut by_zone: BTreeMap<String, usize> = BTreeMap::new();
        let mut keep = Vec::new();
        for s in std::mem::take(&mut si.unchanged) {
            match hints_by_zone(&s, &by_zone, &allocations) {
                Some(h) => {
                    for (z, n) in h {
                        *by_zone.entry(z).or_default() += n;
                    }
                    keep.push(s);
                }
                None => si.to_update.push(s),
            }
        }
        si.unchanged = keep;
        for s in si.to_create.iter_mut().chain(si.to_update.iter_mut()) {
            for e in s.endpoints.iter_mut() {
                if !e.is_ready() {
                    e.clear_hints();
                    continue;
                }
                let Some(zone) = e.zone.clone().filter(|z| !z.is_empty()) else {
                    log::info!(
                        "endpointslice-controller: {}: endpoint without zone, removing hints",
                        si.service_key
                    );
                    events.push(disabled(with_address_type(
                        NO_ZONE_SPECIFIED,
                        &si.address_type,
                    )));
                    self.remove_hints(&si.service_key, &si.address_type);
                    remove_hints_from_slices(si);
                    return events;
                };
                *by_zone.entry(zone.clone()).or_default() += 1;
                e.set_zone_hint(zone);
            }
        }
        let (mut giving, mut receiving) = giving_and_receiving(&allocations, &by_zone);
        let moved = redistribute(si, &mut giving, &mut receiving);
        for (z, d) in moved {
            let v = by_zone.entry(z).or_default();
            *v = (*v as i64 + d).max(0) as usize;
        }
        if by_zone.is_empty() {
            events.push(disabled(with_address_type(
                NO_ALLOCATED_HINTS,
                &si.address_type,
            )));
            self.remove_hints(&si.service_key, &si.address_type);
            remove_hints_from_slices(si);
            return events;
        }
        let mut st = self.state();
        let was = st.populated.contains(&si.service_key);
        st.by_service
            .entry(si.service_key.clone())
            .or_default()
            .insert(si.address_type.clone(), by_zone);
        st.populated.insert(si.service_key.clone());
        if !was {
            log::info!(
                "endpointslice-controller: {}: topology aware hints enabled, adding hints",
                si.service_key
            );
            events.push((
                EventType::Normal,
                "TopologyAwareHintsEnabled",
                with_address_type(ENABLED, &si.address_type),
            ));
        }
        events
    }
}

/// `RemoveHintsFromSlices`: no hints on the slices written; unchanged slices with hints are
/// written without them.
pub fn remove_hints_from_slices(si: &mut SliceInfo) {
    for s in si.to_create.iter_mut().chain(si.to_update.iter_mut()) {
        for e in s.endpoints.iter_mut() {
            e.clear_hints();
        }
    }
    let mut keep = Vec::new();
    for mut s in std::mem::take(&mut si.unchanged) {
        if s.endpoints.iter().any(Endpoint::has_hints) {
            for e in s.endpoints.iter_mut() {
                e.clear_hints();
            }
            si.to_update.push(s);
        } else {
            keep.push(s);
        }
    }
    si.unchanged = keep;
}

/// `getHintsByZone`: the hints of an unchanged slice per zone, or None when they must be
/// recomputed.
fn hints_by_zone(
    s: &Slice,
    allocated: &BTreeMap<String, usize>,
    allocations: &BTreeMap<String, Allocation>,
) -> Option<BTreeMap<String, usize>> {
    let mut out: BTreeMap<String, usize> = BTreeMap::new();
    for e in s.endpoints.iter().filter(|e| e.is_ready()) {
        let zones = e.hints.as_ref().filter(|h| !h.is_empty())?;
        for z in zones {
            if !allocations.contains_key(z) {
                return None;
            }
            *out.entry(z.clone()).or_default() += 1;
        }
    }
    for (z, n) in &out {
        let already = allocated.get(z).copied().unwrap_or(0);
        if n + already > allocations.get(z)?.maximum {
            return None;
        }
    }
    Some(out)
}

fn most(zones: &BTreeMap<String, f64>) -> (Option<String>, f64) {
    let mut best = (None, 0.0);
    for (z, n) in zones {
        if *n > best.1 {
            best = (Some(z.clone()), *n);
        }
    }
    best
}

/// `getGivingAndReceivingZones`.
fn giving_and_receiving(
    allocations: &BTreeMap<String, Allocation>,
    allocated: &BTreeMap<String, usize>,
) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut giving_want = BTreeMap::new();
    let mut receiving_want = BTreeMap::new();
    for (z, a) in allocations {
        let have = allocated.get(z).copied().unwrap_or(0) as f64;
        if have > a.desired {
            giving_want.insert(z.clone(), have - a.desired);
        } else if have < a.desired {
            receiving_want.insert(z.clone(), a.desired - have);
        }
    }
    let (mut giving, mut receiving) = (BTreeMap::new(), BTreeMap::new());
    loop {
        let (g, ng) = most(&giving_want);
        let (r, nr) = most(&receiving_want);
        let (Some(g), Some(r)) = (g, r) else { break };
        if (ng < 1.0 && nr < 1.0) || ng < 0.5 || nr < 0.5 {
            break;
        }
        *giving.entry(g.clone()).or_default() += 1;
        *giving_want.get_mut(&g).expect("present") -= 1.0;
        *receiving.entry(r.clone()).or_default() += 1;
        *receiving_want.get_mut(&r).expect("present") -= 1.0;
    }
    (giving, receiving)
}

/// `redistributeHints`: endpoints of giving zones hinted to receiving zones; the change per
/// zone.
fn redistribute(
    si: &mut SliceInfo,
    giving: &mut BTreeMap<String, usize>,
    receiving: &mut BTreeMap<String, usize>,
) -> BTreeMap<String, i64> {
    let mut moved: BTreeMap<String, i64> = BTreeMap::new();
    for s in si.to_create.iter_mut().chain(si.to_update.iter_mut()) {
        for e in s.endpoints.iter_mut() {
            if !e.is_ready() {
                e.clear_hints();
                continue;
            }
            if giving.is_empty() || receiving.is_empty() {
                return moved;
            }
            let Some(zone) = e.zone.clone().filter(|z| !z.is_empty()) else {
                continue;
            };
            if giving.get(&zone).copied().unwrap_or(0) == 0 {
                continue;
            }
            let Some(to) = receiving
                .iter()
                .find(|(_, n)| **n > 0)
                .map(|(z, _)| z.clone())
            else {
                continue;
            };
            e.set_zone_hint(to.clone());
            for (m, z) in [(&mut *giving, &zone), (&mut *receiving, &to)] {
                let n = m.get_mut(z).expect("present");
                if *n == 1 {
                    m.remove(z);
                } else {
                    *n -= 1;
                }
            }
            *moved.entry(to).or_default() += 1;
            *moved.entry(zone).or_default() -= 1;
        }
    }
    moved
}

/// `serviceOverloaded`.
fn overloaded(ezi: &BTreeMap<String, usize>, ratios: &BTreeMap<String, f64>) -> bool {
    if ezi.is_empty() {
        return false;
    }
    if ratios.is_empty() {
        return true;
    }
    let total: usize = ezi.values().sum();
    ratios.iter().any(|(z, r)| match ezi.get(z) {
        None => true,
        Some(n) => (*n as f64) < (total as f64 * r * (1.0 / (1.0 + OVERLOAD_THRESHOLD))).ceil(),
    })
}
