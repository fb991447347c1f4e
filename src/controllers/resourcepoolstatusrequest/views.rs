//! The two views of a complete pool beside its device counts (upstream's `views.go`): the
//! partition summary (partitionable devices grouped by their partition type attribute, each
//! group's total and how many more of it the shared counters still allow) and the shareable
//! summary (devices with `allowMultipleAllocations`: how many are untouched, how many partly
//! used, and each capacity's total, consumed and available amounts).
//!
//! A structural problem is a `validationError` with a machine-readable prefix; the views are
//! then left out but the counts stay.

use crate::compat::quantity::Quantity;
use crate::compat::quote::go_quote;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The status lists' `maxItems` (32): more is an error, never a truncation.
pub const MAX_LIST_ITEMS: usize = 32;

/// The one transient error: the request is looked at again.
pub const POOL_INCOMPLETE: &str = "PoolIncomplete:";
pub const PARTITION_TYPE_MISSING: &str = "PartitionTypeMissing:";
pub const PARTITION_COST_MISMATCH: &str = "PartitionCostMismatch:";
pub const PARTITION_SUMMARY_OVER_CAP: &str = "PartitionSummaryOverCap:";
pub const SHAREABLE_OVER_CAP: &str = "ShareableSummaryOverCap:";

/// Counter name -> amount.
pub type Counters = BTreeMap<String, Quantity>;

/// A small map kept as a list sorted by key (less code than another `BTreeMap` kind): the
/// value of `key`, made by `make` when it is not there yet.
pub fn slot<K: Ord, T>(v: &mut Vec<(K, T)>, key: K, make: impl FnOnce() -> T) -> &mut T {
    let i = match v.binary_search_by(|(k, _)| k.cmp(&key)) {
        Ok(i) => i,
        Err(i) => {
            v.insert(i, (key, make()));
            i
        }
    };
    &mut v[i].1
}

/// The value of `key` in a list [`slot`] keeps.
pub fn get<'a, K: Ord, T>(v: &'a [(K, T)], key: &K) -> Option<&'a T> {
    v.binary_search_by(|(k, _)| k.cmp(key))
        .ok()
        .map(|i| &v[i].1)
}

/// What a device draws from one counter set.
#[derive(Debug, Clone, PartialEq)]
pub struct Consumption {
    pub set: String,
    pub counters: Counters,
}

/// One device of a pool, as the views need it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Device {
    pub name: String,
    /// The attribute its partition type is read from: its slice's `partitionTypeAttribute`,
    /// or the request's default when no slice of the pool names one; "" when neither does.
    pub partition_attr: String,
    /// The string value of `partition_attr` on the device; None when it has none.
    pub partition_type: Option<String>,
    pub consumes: Vec<Consumption>,
    pub allow_multiple: bool,
    /// Capacity name -> value.
    pub capacity: BTreeMap<String, Quantity>,
    /// Its string attributes (name as written -> value); others never name a type.
    pub attributes: BTreeMap<String, String>,
}

/// Everything the views of one complete pool are computed from.
#[derive(Debug, Clone, Default)]
pub struct PoolInput {
    pub driver: String,
    pub pool: String,
    pub devices: Vec<Device>,
    /// The pool's counter sets, from all its slices: set -> counters.
    pub shared_counters: Vec<(String, Counters)>,
    /// Devices allocated to at least one claim (admin access does not count).
    pub in_use: BTreeSet<String>,
    /// Capacity consumed by the pool's allocations, per capacity name.
    pub consumed: BTreeMap<String, Quantity>,
}

/// The value of attribute `fqn` on a device: written in full, or bare when its domain is the
/// driver's (as device selectors read it); the full form wins.
pub fn partition_type(driver: &str, attrs: &BTreeMap<String, String>, fqn: &str) -> Option<String> {
    if let Some(v) = attrs.get(fqn) {
        return Some(v.clone());
    }
    let bare = fqn.strip_prefix(driver)?.strip_prefix('/')?;
    attrs.get(bare).cloned()
}

/// Each device's grouping attribute and partition type: its slice's attribute, else the
/// request's default, but the default only while no slice of the pool names one.
pub fn resolve_partitions(request_attr: Option<&str>, pool: &mut PoolInput) {
    let pool_declares = pool.devices.iter().any(|d| !d.partition_attr.is_empty());
    for d in &mut pool.devices {
        if d.partition_attr.is_empty() {
            match request_attr {
                Some(a) if !pool_declares => d.partition_attr = a.to_string(),
                _ => continue,
            }
        }
        d.partition_type = partition_type(&pool.driver, &d.attributes, &d.partition_attr);
    }
}

/// The pool's `partitionSummary` and `shareableSummary` (JSON), and its first structural
/// error ("" for none). With an error the partition summary is left out; the shareable
/// summary stays unless its own computation failed.
pub fn pool_views(pool: &PoolInput) -> (Option<Value>, Option<Value>, String) {
    let grouped = pool.devices.iter().any(|d| !d.partition_attr.is_empty());
    let (mut partitions, mut err) = (None, String::new());
    if grouped && pool.shared_counters.is_empty() {
        err = format!(
            "{PARTITION_TYPE_MISSING} pool {}/{} declares partitionTypeAttribute but publishes no sharedCounters",
            pool.driver, pool.pool
        );
    } else if grouped {
        match partition_summary(pool) {
            Ok(p) => partitions = Some(p),
            Err(e) => err = e,
        }
    }
    let shareable = match shareable_summary(pool) {
        Ok(s) => s,
        Err(e) => {
            if err.is_empty() {
                err = e;
            }
            None
        }
    };
    if !err.is_empty() {
        partitions = None;
    }
    // An empty list is left out of the status, as Go's `omitempty`.
    let partitions = partitions.filter(|p: &Value| p.as_array().is_some_and(|a| !a.is_empty()));
    (partitions, shareable, err)
}

/// A stable text of a device's counter cost: devices of one partition type must cost alike.
fn cost_key(cost: &[Consumption]) -> String {
    let mut parts: Vec<String> = cost
        .iter()
        .flat_map(|c| {
            c.counters
                .iter()
                .map(move |(n, q)| format!("{}/{n}={q}", c.set))
        })
        .collect();
    crate::sort::sort(&mut parts[..]);
    parts.join(",")
}

/// Counter set -> counters left.
type Avail = Vec<(String, Counters)>;

fn fits(cost: &[Consumption], avail: &Avail) -> bool {
    cost.iter().all(|c| {
        let set = get(avail, &c.set);
        c.counters.iter().all(|(n, q)| {
            set.and_then(|s| s.get(n))
                .is_some_and(|have| have.cmp_value(q).is_ge())
        })
    })
}

fn deduct(cost: &[Consumption], avail: &mut Avail) {
    for c in cost {
        let Ok(i) = avail.binary_search_by(|(k, _)| k.cmp(&c.set)) else {
            continue;
        };
        let set = &mut avail[i].1;
        for (n, q) in &c.counters {
            if let Some(have) = set.get_mut(n) {
                have.sub(q);
            }
        }
    }
}

/// The counters left once every device in use took its cost (once per device, not per
/// claim, as the scheduler counts).
fn available_counters(pool: &PoolInput) -> Avail {
    let mut avail = Avail::new();
    for (set, counters) in &pool.shared_counters {
        let m = slot(&mut avail, set.clone(), Counters::new);
        for (n, q) in counters {
            m.insert(n.clone(), *q);
        }
    }
    for d in pool
        .devices
        .iter()
        .filter(|d| pool.in_use.contains(&d.name))
    {
        deduct(&d.consumes, &mut avail);
    }
    avail
}

/// Partitionable devices (those that consume counters and have a grouping attribute) by
/// (attribute, type): each group's total, and how many of its unused devices still fit in
/// what the counters have left, each group measured on its own.
fn partition_summary(pool: &PoolInput) -> Result<Value, String> {
    struct Group<'a> {
        total: i32,
        fresh: Vec<&'a Device>,
        cost: String,
    }
    let mut groups: Vec<((&str, &str), Group)> = Vec::new();
    for d in &pool.devices {
        if d.consumes.is_empty() || d.partition_attr.is_empty() {
            continue;
        }
        let Some(typ) = d.partition_type.as_deref() else {
            return Err(format!(
                "{PARTITION_TYPE_MISSING} device {} in pool {}/{} does not carry partition type attribute {}",
                go_quote(&d.name),
                pool.driver,
                pool.pool,
                go_quote(&d.partition_attr)
            ));
        };
        let key = cost_key(&d.consumes);
        let g = slot(&mut groups, (d.partition_attr.as_str(), typ), || Group {
            total: 0,
            fresh: Vec::new(),
            cost: key.clone(),
        });
        if g.total > 0 && g.cost != key {
            return Err(format!(
                "{PARTITION_COST_MISMATCH} devices of partition type {} in pool {}/{} consume different counters",
                go_quote(typ),
                pool.driver,
                pool.pool
            ));
        }
        g.total += 1;
        if !pool.in_use.contains(&d.name) {
            g.fresh.push(d);
        }
    }
    if groups.len() > MAX_LIST_ITEMS {
        return Err(format!(
            "{PARTITION_SUMMARY_OVER_CAP} pool {}/{} has {} partition types, exceeding the maximum of {MAX_LIST_ITEMS}",
            pool.driver,
            pool.pool,
            groups.len()
        ));
    }
    let baseline = available_counters(pool);
    let mut out = Vec::with_capacity(groups.len());
    for ((attr, typ), g) in &groups {
        let mut avail = baseline.clone();
        let mut allocatable = 0i32;
        for d in &g.fresh {
            if fits(&d.consumes, &avail) {
                allocatable += 1;
                deduct(&d.consumes, &mut avail);
            }
        }
        out.push(json!({"attribute": attr, "type": typ, "total": g.total,
            "allocatable": allocatable}));
    }
    Ok(Value::Array(out))
}

/// max(0, a - b), in `a`'s format.
fn non_negative_diff(a: &Quantity, b: &Quantity) -> Quantity {
    let mut out = *a;
    out.sub(b);
    if out.cmp_value(&Quantity::ZERO).is_lt() {
        let mut z = Quantity::ZERO;
        z.format = a.format;
        return z;
    }
    out
}

/// The shareable devices' summary; None when the pool has none.
fn shareable_summary(pool: &PoolInput) -> Result<Option<Value>, String> {
    let (mut full, mut partial, mut any) = (0i32, 0i32, false);
    let mut total = Counters::new();
    for d in pool.devices.iter().filter(|d| d.allow_multiple) {
        any = true;
        if pool.in_use.contains(&d.name) {
            partial += 1;
        } else {
            full += 1;
        }
        for (k, q) in &d.capacity {
            total.entry(k.clone()).or_insert(Quantity::ZERO).add(q);
        }
    }
    if !any {
        return Ok(None);
    }
    if total.len() > MAX_LIST_ITEMS {
        return Err(format!(
            "{SHAREABLE_OVER_CAP} pool {}/{} has {} shareable capacity keys, exceeding the maximum of {MAX_LIST_ITEMS}",
            pool.driver,
            pool.pool,
            total.len()
        ));
    }
    let capacity: Vec<Value> = total
        .iter()
        .map(|(k, t)| {
            let consumed = pool.consumed.get(k).copied().unwrap_or(Quantity::ZERO);
            let available = non_negative_diff(t, &consumed);
            json!({"name": k, "total": t.to_string(), "consumed": consumed.to_string(),
                "available": available.to_string()})
        })
        .collect();
    let mut m = Map::new();
    m.insert("fullyAvailableDevices".into(), json!(full));
    m.insert("partiallyAvailableDevices".into(), json!(partial));
    if !capacity.is_empty() {
        m.insert("capacity".into(), Value::Array(capacity));
    }
    Ok(Some(Value::Object(m)))
}
