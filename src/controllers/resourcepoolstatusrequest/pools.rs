//! A request's status from the cache's ResourceSlices, ResourceClaims and DeviceTaintRules
//! (upstream's `calculatePoolStatus`): the driver's pools (one pool, with `spec.poolName`)
//! at their newest generation, sorted by pool name and cut to `spec.limit`; a pool whose
//! slices are not all published yet gets a `PoolIncomplete:` validation error and no counts,
//! a complete one its device counts and views.

use super::views::{self, get, slot, Consumption, Counters, Device, PoolInput, POOL_INCOMPLETE};
use crate::compat::quantity::Quantity;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// `spec.limit` when the request has none (the API server defaults it to this).
pub const LIMIT_DEFAULT: i64 = 100;
/// The longest `validationError` the API takes (bytes).
const MAX_ERROR_BYTES: usize = 256;

pub const COMPLETE: &str = "Complete";
pub const REASON_COMPLETE: &str = "CalculationComplete";

/// What a request asks about.
#[derive(Debug, Clone, Default)]
pub struct Query<'a> {
    pub driver: &'a str,
    pub pool: Option<&'a str>,
    pub limit: i64,
    pub default_partition_attr: Option<&'a str>,
}

impl<'a> Query<'a> {
    pub fn of(request: &'a Value) -> Self {
        let spec = &request["spec"];
        Query {
            driver: spec["driver"].as_str().unwrap_or(""),
            pool: spec["poolName"].as_str(),
            limit: spec["limit"].as_i64().unwrap_or(LIMIT_DEFAULT),
            default_partition_attr: spec["defaultPartitionTypeAttribute"].as_str(),
        }
    }
}

/// The status to write, and whether a returned pool is incomplete (then nothing is written
/// and the request is looked at again).
#[derive(Debug, Clone, PartialEq)]
pub struct Computed {
    pub status: Value,
    pub incomplete: bool,
}

/// One pool as its newest slices show it.
#[derive(Default)]
struct Pool {
    node: Option<String>,
    mixed_nodes: bool,
    total: i32,
    unavailable: i32,
    slices: i32,
    expected: i64,
    generation: i64,
    devices: Vec<Device>,
    counters: Vec<(String, Counters)>,
}

fn quantity(v: &Value) -> Quantity {
    v.as_str()
        .and_then(|s| Quantity::parse(s.trim()))
        .unwrap_or(Quantity::ZERO)
}

fn counters(v: &Value) -> Counters {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(n, c)| (n.clone(), quantity(&c["value"])))
                .collect()
        })
        .unwrap_or_default()
}

fn array(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

fn unavailable_effect(effect: &Value) -> bool {
    matches!(effect.as_str(), Some("NoSchedule" | "NoExecute"))
}

/// A DeviceTaintRule that puts a NoSchedule or NoExecute taint on this device (a rule
/// without a selector selects nothing).
fn rule_selects(rule: &Value, driver: &str, pool: &str, device: &str) -> bool {
    let spec = &rule["spec"];
    let sel = &spec["deviceSelector"];
    if !unavailable_effect(&spec["taint"]["effect"]) || !sel.is_object() {
        return false;
    }
    let matches = |field: &str, want: &str| sel[field].as_str().is_none_or(|v| v == want);
    matches("driver", driver) && matches("pool", pool) && matches("device", device)
}

fn device_unavailable(device: &Value, driver: &str, pool: &str, rules: &[&Value]) -> bool {
    let name = device["name"].as_str().unwrap_or("");
    array(&device["taints"])
        .iter()
        .any(|t| unavailable_effect(&t["effect"]))
        || rules.iter().any(|r| rule_selects(r, driver, pool, name))
}

fn device_record(d: &Value, slice_attr: &str) -> Device {
    let attributes = d["attributes"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, a)| Some((k.clone(), a["string"].as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let consumes = array(&d["consumesCounters"])
        .iter()
        .map(|c| Consumption {
            set: c["counterSet"].as_str().unwrap_or("").to_string(),
            counters: counters(&c["counters"]),
        })
        .collect();
    let capacity = d["capacity"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, c)| (k.clone(), quantity(&c["value"])))
                .collect()
        })
        .unwrap_or_default();
    Device {
        name: d["name"].as_str().unwrap_or("").to_string(),
        partition_attr: slice_attr.to_string(),
        partition_type: None,
        consumes,
        allow_multiple: d["allowMultipleAllocations"].as_bool() == Some(true),
        capacity,
        attributes,
    }
}

/// The pools of `q.driver` (and `q.pool`) from `slices`, only slices of each pool's newest
/// generation counted.
fn pools_of(q: &Query, slices: &[&Value], rules: &[&Value]) -> Vec<(String, Pool)> {
    let wanted = |s: &Value| {
        let spec = &s["spec"];
        spec["driver"].as_str() == Some(q.driver)
            && q.pool
                .is_none_or(|p| spec["pool"]["name"].as_str() == Some(p))
    };
    let name_of = |s: &Value| s["spec"]["pool"]["name"].as_str().unwrap_or("").to_string();
    let generation = |s: &Value| s["spec"]["pool"]["generation"].as_i64().unwrap_or(0);
    let mut newest: Vec<(String, i64)> = Vec::new();
    for s in slices.iter().filter(|s| wanted(s)) {
        let g = slot(&mut newest, name_of(s), || i64::MIN);
        *g = (*g).max(generation(s));
    }
    let mut pools: Vec<(String, Pool)> = Vec::new();
    for s in slices.iter().filter(|s| wanted(s)) {
        let name = name_of(s);
        let gen = get(&newest, &name).copied().unwrap_or(0);
        if generation(s) < gen {
            continue;
        }
        let spec = &s["spec"];
        let devices = array(&spec["devices"]);
        let unavailable = devices
            .iter()
            .filter(|d| device_unavailable(d, q.driver, &name, rules))
            .count() as i32;
        let node = spec["nodeName"].as_str().unwrap_or("").to_string();
        let p = slot(&mut pools, name.clone(), || Pool {
            node: Some(node.clone()),
            expected: spec["pool"]["resourceSliceCount"].as_i64().unwrap_or(0),
            generation: gen,
            ..Pool::default()
        });
        p.mixed_nodes |= p.node.as_deref().unwrap_or("") != node;
        p.slices += 1;
        p.total += devices.len() as i32;
        p.unavailable += unavailable;
        let attr = spec["partitionTypeAttribute"].as_str().unwrap_or("");
        p.devices
            .extend(devices.iter().map(|d| device_record(d, attr)));
        for c in array(&spec["sharedCounters"]) {
            let set = c["name"].as_str().unwrap_or("").to_string();
            p.counters.push((set, counters(&c["counters"])));
        }
    }
    pools
}

/// Per pool: the devices allocated (each once, however many claims share it) and the
/// capacity they consume; admin access is not consumption.
type Allocations = Vec<(String, (BTreeSet<String>, Counters))>;

fn allocations(driver: &str, claims: &[&Value]) -> Allocations {
    let mut out = Allocations::new();
    for c in claims {
        for r in array(&c["status"]["allocation"]["devices"]["results"]) {
            if r["adminAccess"].as_bool() == Some(true) || r["driver"].as_str() != Some(driver) {
                continue;
            }
            let pool = r["pool"].as_str().unwrap_or("").to_string();
            let e = slot(&mut out, pool, Default::default);
            e.0.insert(r["device"].as_str().unwrap_or("").to_string());
            if let Some(m) = r["consumedCapacity"].as_object() {
                for (k, q) in m {
                    e.1.entry(k.clone())
                        .or_insert(Quantity::ZERO)
                        .add(&quantity(q));
                }
            }
        }
    }
    out
}

/// At most `MAX_ERROR_BYTES` of `s`, cut at a character boundary.
fn cut(mut s: String) -> String {
    if s.len() > MAX_ERROR_BYTES {
        let mut n = MAX_ERROR_BYTES;
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        s.truncate(n);
    }
    s
}

/// One pool's entry of `status.pools`.
fn pool_status(q: &Query, name: &str, p: Pool, allocs: &mut Allocations) -> Value {
    let mut m = Map::new();
    m.insert("driver".into(), json!(q.driver));
    m.insert("poolName".into(), json!(name));
    m.insert("generation".into(), json!(p.generation));
    if let Some(n) = p
        .node
        .as_deref()
        .filter(|n| !n.is_empty() && !p.mixed_nodes)
    {
        m.insert("nodeName".into(), json!(n));
    }
    if i64::from(p.slices) < p.expected {
        let e = format!(
            "{POOL_INCOMPLETE} pool {}/{name} is incomplete: observed {}/{} slices at generation {}",
            q.driver, p.slices, p.expected, p.generation
        );
        m.insert("validationError".into(), json!(cut(e)));
        return Value::Object(m);
    }
    let (in_use, consumed) = match allocs.binary_search_by(|(k, _)| k.as_str().cmp(name)) {
        Ok(i) => std::mem::take(&mut allocs[i].1),
        Err(_) => Default::default(),
    };
    let allocated = in_use.len() as i32;
    let available = (p.total - allocated - p.unavailable).max(0);
    m.insert("resourceSliceCount".into(), json!(p.slices));
    m.insert("totalDevices".into(), json!(p.total));
    m.insert("allocatedDevices".into(), json!(allocated));
    m.insert("availableDevices".into(), json!(available));
    m.insert("unavailableDevices".into(), json!(p.unavailable));
    let mut input = PoolInput {
        driver: q.driver.to_string(),
        pool: name.to_string(),
        devices: p.devices,
        shared_counters: p.counters,
        in_use,
        consumed,
    };
    views::resolve_partitions(q.default_partition_attr, &mut input);
    let (partitions, shareable, err) = views::pool_views(&input);
    if let Some(v) = partitions {
        m.insert("partitionSummary".into(), v);
    }
    if let Some(v) = shareable {
        m.insert("shareableSummary".into(), v);
    }
    if !err.is_empty() {
        m.insert("validationError".into(), json!(cut(err)));
    }
    Value::Object(m)
}

/// The status of a request asking `q`, at `now` (`metav1.Time` text). `rules` are the
/// DeviceTaintRules (none while DRADeviceTaintRules is off).
pub fn compute(
    q: &Query,
    slices: &[&Value],
    claims: &[&Value],
    rules: &[&Value],
    now: &str,
) -> Computed {
    let mut allocs = allocations(q.driver, claims);
    let pools = pools_of(q, slices, rules);
    let count = pools.len();
    let limit = usize::try_from(q.limit).unwrap_or(0);
    let listed: Vec<Value> = pools
        .into_iter()
        .take(limit)
        .map(|(name, p)| pool_status(q, &name, p, &mut allocs))
        .collect();
    let error = |p: &Value| p["validationError"].as_str().map(str::to_string);
    let flagged = listed.iter().filter(|p| error(p).is_some()).count();
    let incomplete = listed
        .iter()
        .any(|p| error(p).is_some_and(|e| e.starts_with(POOL_INCOMPLETE)));
    let message = if flagged > 0 {
        format!(
            "Calculated status for {} pools ({flagged} incomplete)",
            listed.len()
        )
    } else {
        format!("Calculated status for {} pools", listed.len())
    };
    let mut status = Map::new();
    status.insert("poolCount".into(), json!(count));
    if !listed.is_empty() {
        status.insert("pools".into(), Value::Array(listed));
    }
    status.insert(
        "conditions".into(),
        json!([{"type": COMPLETE, "status": "True", "lastTransitionTime": now,
            "reason": REASON_COMPLETE, "message": message}]),
    );
    Computed {
        status: Value::Object(status),
        incomplete,
    }
}
