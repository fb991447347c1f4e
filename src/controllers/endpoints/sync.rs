//! One Service's Endpoints, decided as upstream's `syncService` decides them: the subsets its
//! pods give, repacked and capped, and whether the Endpoints object needs writing at all.

use super::repack::{self, MAX_CAPACITY};
use super::subsets::{self, Subset};
use crate::obj;
use crate::obj::At as _;
use serde_json::{json, Map, Value};

/// The label marking the Endpoints of a headless Service.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// The label upstream v1.33 and later put on every Endpoints this controller writes, with
/// [`MANAGED_BY_VALUE`]; an Endpoints without it is written again.
pub const MANAGED_BY_LABEL: &str = "endpoints.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "endpoint-controller";
pub const TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
pub const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";
/// Endpoints carrying this annotation are leader-election records: never cleaned up.
pub const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";

/// The subsets `pods` (those the selector selects) give `svc`, repacked; with the counts of
/// ready and not-ready entries (one per pod and port, as upstream counts for its log).
pub fn desired_subsets(svc: &Value, pods: &[obj::Obj]) -> (Vec<Subset>, usize, usize) {
    let publish = svc
        .at("/spec/publishNotReadyAddresses")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let ports: &[Value] = svc
        .at("/spec/ports")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let mut raw = Vec::new();
    let (mut ready, mut not_ready) = (0, 0);
    for pod in pods {
        if !subsets::should_be_in_endpoints(pod, publish) {
            continue;
        }
        let Some(mut addr) = subsets::address_for(svc, pod) else {
            log::debug!(
                "endpoints-controller: no address of the family of service {} on pod {}",
                obj::key(svc),
                obj::key(pod)
            );
            continue;
        };
        if let Some(h) = subsets::hostname_for(svc, pod) {
            addr.hostname = h.to_string();
        }
        let is_ready = publish || subsets::is_ready(pod);
        let mut add = |port: Option<subsets::Port>| {
            let mut sub = Subset {
                ports: port.into_iter().collect(),
                ..Subset::default()
            };
            if is_ready {
                sub.addresses.push(addr.clone());
                ready += 1;
            } else {
                sub.not_ready.push(addr.clone());
                not_ready += 1;
            }
            raw.push(sub);
        };
        if ports.is_empty() {
            // A headless Service may have no ports: its pods are listed without any.
            if svc.at("/spec/clusterIP").and_then(Value::as_str) == Some("None") {
                add(None);
            }
            continue;
        }
        for sp in ports {
            match subsets::find_port(pod, sp) {
                Some(n) => add(Some(subsets::endpoint_port(sp, n))),
                None => log::debug!(
                    "endpoints-controller: no port {} of service {} on pod {}",
                    sp.get("name").and_then(Value::as_str).unwrap_or(""),
                    obj::key(svc),
                    obj::key(pod)
                ),
            }
        }
    }
    (repack::repack(&raw), ready, not_ready)
}

/// upstream's `capacityAnnotationSetCorrectly` on the current object.
fn capacity_annotation_right(current: &Value, current_subsets: &[Subset]) -> bool {
    let n: usize = current_subsets.iter().map(Subset::count).sum();
    n <= MAX_CAPACITY && obj::annotation(current, OVER_CAPACITY).is_none()
}

/// The Endpoints object to write for `svc`, or None when `current` already says it. `current`
/// is the cached object (None: there is none yet, so it is created). `trigger` is the
/// trigger-time annotation's value, if any.
pub fn endpoints_to_write(
    svc: &Value,
    current: Option<&Value>,
    subsets: Vec<Subset>,
    trigger: Option<String>,
) -> Option<Value> {
    let svc_labels = obj::string_map(svc.at("/metadata/labels"));
    if let Some(cur) = current {
        let cur_subsets = Subset::all_from(cur);
        let mut cur_labels = obj::string_map(cur.at("/metadata/labels"));
        cur_labels.remove(HEADLESS_LABEL);
        let managed = cur_labels.remove(MANAGED_BY_LABEL) == Some(json!(MANAGED_BY_VALUE));
        if subsets::equal_ignoring_resource_version(&cur_subsets, &subsets)
            && managed
            && cur_labels == svc_labels
            && capacity_annotation_right(cur, &cur_subsets)
        {
            return None;
        }
    }
    let mut subsets = subsets;
    let truncated = repack::truncate(&mut subsets);
    let mut out = match current {
        Some(c) => c.clone(),
        None => json!({"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": obj::name(svc)}}),
    };
    if !out.is_object() {
        out = json!({});
    }
    let meta = out
        .as_object_mut()
        .expect("an object")
        .entry("metadata")
        .or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    let meta = meta.as_object_mut().expect("an object");
    let mut annotations = meta
        .get("annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    match trigger {
        Some(t) => annotations.insert(TRIGGER_TIME.into(), json!(t)),
        None => annotations.remove(TRIGGER_TIME),
    };
    if truncated {
        annotations.insert(OVER_CAPACITY.into(), json!("truncated"));
    } else {
        annotations.remove(OVER_CAPACITY);
    }
    set_or_drop(meta, "annotations", annotations);
    let mut labels = svc_labels;
    if subsets::is_headless(svc) {
        labels.insert(HEADLESS_LABEL.into(), json!(""));
    } else {
        labels.remove(HEADLESS_LABEL);
    }
    labels.insert(MANAGED_BY_LABEL.into(), json!(MANAGED_BY_VALUE));
    set_or_drop(meta, "labels", labels);
    let list: Vec<Value> = subsets.iter().map(Subset::to_json).collect();
    let o = out.as_object_mut().expect("an object");
    if list.is_empty() {
        o.remove("subsets");
    } else {
        o.insert("subsets".into(), Value::Array(list));
    }
    Some(out)
}

/// Go's `omitempty` on a map: an empty one is not written.
fn set_or_drop(meta: &mut Map<String, Value>, key: &str, m: Map<String, Value>) {
    if m.is_empty() {
        meta.remove(key);
    } else {
        meta.insert(key.into(), Value::Object(m));
    }
}
