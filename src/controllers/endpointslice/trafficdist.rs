//! Hints from a Service's `spec.trafficDistribution` (v1.30 and later), as upstream's
//! `trafficdist` package gives them: `PreferClose` and its v1.33 spelling `PreferSameZone`
//! hint every ready endpoint to its own zone, `PreferSameNode` to its zone and its node; any
//! other value, or none, leaves no hints. The `service.kubernetes.io/topology-mode`
//! annotation wins over the field (see `reconciler::hints_enabled`).

use super::model::{Endpoint, Slice};
use super::topology::SliceInfo;
use crate::obj::At as _;
use serde_json::Value;

pub const PREFER_CLOSE: &str = "PreferClose";
pub const PREFER_SAME_ZONE: &str = "PreferSameZone";
pub const PREFER_SAME_NODE: &str = "PreferSameNode";

/// `validTrafficDistribution`: the Service's value when this cluster knows it.
/// PreferSameTrafficDistribution is GA and locked on in v1.37, so all three are known.
pub fn valid(svc: &Value) -> Option<&str> {
    svc.at("/spec/trafficDistribution")
        .and_then(Value::as_str)
        .filter(|v| [PREFER_CLOSE, PREFER_SAME_ZONE, PREFER_SAME_NODE].contains(v))
}

/// `forZones` and `forNodes` names (None: the list is left out).
type Hints = (Option<Vec<String>>, Option<Vec<String>>);

/// The hints a ready endpoint should carry under `td` (upstream's `preferCloseHeuristic`).
fn wanted(td: &str, e: &Endpoint) -> Hints {
    let zones = e.zone.clone().map(|z| vec![z]);
    let nodes = e
        .node_name
        .clone()
        .filter(|_| td == PREFER_SAME_NODE)
        .map(|n| vec![n]);
    (zones, nodes)
}

/// `needsUpdate`: whether an unchanged slice's hints are not what `td` wants.
fn needs_update(td: Option<&str>, s: &Slice) -> bool {
    match td {
        None => s.endpoints.iter().any(Endpoint::has_hints),
        Some(td) => s.endpoints.iter().filter(|e| e.is_ready()).any(|e| {
            let (zones, nodes) = wanted(td, e);
            // Upstream compares the lists, so an empty list and none are alike.
            let same = |have: &Option<Vec<String>>, want: &Option<Vec<String>>| {
                have.as_deref().unwrap_or_default() == want.as_deref().unwrap_or_default()
            };
            !same(&e.hints, &zones) || !same(&e.node_hints, &nodes)
        }),
    }
}

/// `update`: the hints written on a slice being created or updated.
fn update(td: Option<&str>, s: &mut Slice) {
    for e in s.endpoints.iter_mut() {
        let Some(td) = td else {
            e.clear_hints();
            continue;
        };
        if !e.is_ready() {
            continue;
        }
        let (zones, nodes) = wanted(td, e);
        e.hints = zones;
        e.node_hints = nodes;
    }
}

/// `ReconcileHints`: unchanged slices whose hints are wrong become updates, and every slice
/// written gets the hints `td` wants (`td` None: none).
pub fn reconcile_hints(td: Option<&str>, si: &mut SliceInfo) {
    let mut keep = Vec::new();
    for s in std::mem::take(&mut si.unchanged) {
        if needs_update(td, &s) {
            si.to_update.push(s);
        } else {
            keep.push(s);
        }
    }
    si.unchanged = keep;
    for s in si.to_create.iter_mut().chain(si.to_update.iter_mut()) {
        update(td, s);
    }
}
