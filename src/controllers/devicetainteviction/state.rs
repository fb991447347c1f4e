//! What the controller knows and decides from its watches (upstream's event handlers of
//! `devicetainteviction.Controller`): the allocated claims and when each must go, the
//! devices' NoExecute taints by pool, the DeviceTaintRules, and the pods whose deletion is
//! scheduled. Pure: a change goes in, work items and cancelled deletions come out.

use crate::controllers::kit::{podclaims, taints};
use crate::obj::{self, At as _};
use serde_json::Map;
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, SystemTime};

pub const NO_EXECUTE: &str = "NoExecute";
/// `ruleStatusPeriod`: the shortest time between two status updates of a rule.
pub const RULE_STATUS_PERIOD: Duration = Duration::from_secs(10);
/// Evicted pods remembered, at most (`maxUIDCacheEntries`).
const MAX_EVICTED: usize = 500;

/// When a claim's (or pod's) eviction is due, and the taints that call for it: their
/// [`rule_source`] and [`slice_source`] keys, sorted as upstream sorts them (rules first, by
/// name; then slice taints by driver, pool, device and index).
#[derive(Debug, Clone, PartialEq)]
pub struct Eviction {
    pub when: SystemTime,
    pub reasons: Vec<String>,
}

/// A rule as a reason: `0<name>\0<uid>`.
pub fn rule_source(name: &str, uid: &str) -> String {
    format!("0{name}\0{uid}")
}

/// A slice taint as a reason: `1<driver>\0<pool>\0<device>\0<index>`.
pub fn slice_source(driver: &str, pool: &str, device: &str, index: usize) -> String {
    format!("1{driver}\0{pool}\0{device}\0{index:05}")
}

/// The rule (name, UID) of a reason, if it is a rule.
pub fn source_rule(src: &str) -> Option<(&str, &str)> {
    src.strip_prefix('0')?.split_once('\0')
}

/// The work item of a pod that may have to be deleted: `p<uid>/<namespace>/<name>` (also
/// how the scheduled deletions are keyed).
pub fn pod_work(key: &str, uid: &str) -> String {
    format!("p{uid}/{key}")
}

/// The work item of a rule whose status may need writing: `r<uid>/<name>`.
pub fn rule_work(name: &str, uid: &str) -> String {
    format!("r{uid}/{name}")
}

/// A work item's kind (`p` or `r`), UID and key (pod key, or rule name).
pub fn parse_work(w: &str) -> (char, &str, &str) {
    let kind = w.chars().next().unwrap_or(' ');
    let (uid, key) = w.get(1..).unwrap_or("").split_once('/').unwrap_or(("", ""));
    (kind, uid, key)
}

/// What a change asks of the controller.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// Queue the work item after this delay (zero: at once).
    Add(String, Duration),
    /// A pod's scheduled deletion was cancelled (a "Cancelling deletion" Event).
    Cancelled(String),
}

/// One allocated device of a claim.
#[derive(Debug)]
struct Device {
    driver: String,
    pool: String,
    name: String,
    tolerations: Vec<Value>,
}

/// An allocated claim.
#[derive(Debug)]
struct Claim {
    uid: String,
    /// The UID of its controlling owner.
    owner: String,
    /// `status.reservedFor`: (is a pod, name, UID).
    reserved: Vec<(bool, String, String)>,
    devices: Vec<Device>,
    eviction: Option<Eviction>,
}

/// A slice's generation and its devices with their NoExecute taints (index, taint).
type SliceDevices = (i64, Vec<(String, Vec<(usize, Value)>)>);

/// A pool's key: `<driver>\0<pool>`.
fn pool_id(driver: &str, pool: &str) -> String {
    format!("{driver}\0{pool}")
}

/// The model. Callers hold it under one lock, as upstream's mutex.
#[derive(Default)]
pub struct State {
    claims: HashMap<String, Claim>,
    pools: HashMap<String, HashMap<String, SliceDevices>>,
    slice_pool: HashMap<String, String>,
    /// Every rule by name: `{"uid", "spec"}`.
    rules: Map<String, Value>,
    /// Pods deleted because of each rule since the start, by rule UID.
    pub evicted_by_rule: HashMap<String, i64>,
    /// Scheduled deletions (`deletePodAt`), by pod work item.
    pub delete_at: HashMap<String, Eviction>,
    evicted: (VecDeque<String>, HashSet<String>),
}

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.at(p).and_then(Value::as_str).unwrap_or("")
}

fn array<'a>(v: &'a Value, p: &str) -> &'a [Value] {
    v.at(p).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// A rule's taint has the NoExecute effect.
fn evicting(spec: &Value) -> bool {
    s(spec, "/taint/effect") == NO_EXECUTE
}

/// `ruleMatchesDevice`: a rule without a selector matches nothing.
pub fn rule_matches(spec: &Value, driver: &str, pool: &str, device: &str) -> bool {
    let Some(sel) = spec.get("deviceSelector").filter(|s| s.is_object()) else {
        return false;
    };
    let ok = |f: &str, v: &str| sel.get(f).and_then(Value::as_str).is_none_or(|x| x == v);
    ok("driver", driver) && ok("pool", pool) && ok("device", device)
}

/// When a taint stops being tolerated by `tolerations`: None when one of them tolerates it
/// for ever; else the taint's `timeAdded` plus the shortest `tolerationSeconds` of those
/// that tolerate it for a while (none: at once). Only tolerations with the NoExecute effect
/// count, as upstream's. A taint without `timeAdded` (the API server always sets it) gives
/// no time.
pub fn taint_due(taint: &Value, tolerations: &[Value]) -> Option<Option<SystemTime>> {
    let mut secs: Option<i64> = None;
    for t in tolerations {
        if s(t, "/effect") != NO_EXECUTE || !taints::tolerates(t, taint) {
            continue;
        }
        match t.get("tolerationSeconds").and_then(Value::as_i64) {
            None => return None,
            Some(n) => secs = Some(secs.map_or(n.max(0), |m| m.min(n.max(0)))),
        }
    }
    let added = crate::compat::timefmt::parse_rfc3339(s(taint, "/timeAdded"));
    Some(added.map(|a| a + Duration::from_secs(secs.unwrap_or(0) as u64)))
}

impl State {
    /// The NoExecute taints of a device, from the pool's slices of its newest generation.
    fn device_taints(&self, driver: &str, pool: &str, device: &str) -> &[(usize, Value)] {
        let Some(slices) = self.pools.get(&pool_id(driver, pool)) else {
            return &[];
        };
        let max = slices.values().map(|s| s.0).max();
        slices
            .values()
            .filter(|s| Some(s.0) == max)
            .flat_map(|s| s.1.iter())
            .find(|d| d.0 == device)
            .map_or(&[], |d| d.1.as_slice())
    }

    /// The devices of a pool with NoExecute taints (newest generation), by name.
    fn pool_taints(&self, id: &str) -> Map<String, Value> {
        let mut out = Map::new();
        if let Some(slices) = self.pools.get(id) {
            let max = slices.values().map(|s| s.0).max();
            for (name, t) in slices
                .values()
                .filter(|s| Some(s.0) == max)
                .flat_map(|s| &s.1)
            {
                if !t.is_empty() {
                    let e = out
                        .entry(name.clone())
                        .or_insert_with(|| Value::Array(vec![]));
                    if let Value::Array(a) = e {
                        a.extend(t.iter().map(|x| x.1.clone()));
                    }
                }
            }
        }
        out
    }

    /// `claimEvictionTime`, with `extra` counted as an evicting rule too (the None-effect
    /// rule's simulation).
    fn claim_eviction(&self, c: &Claim, extra: Option<(&str, &str, &Value)>) -> Option<Eviction> {
        let mut when: Option<SystemTime> = None;
        let mut reasons = Vec::new();
        let rules = self
            .rules
            .iter()
            .filter(|r| evicting(&r.1["spec"]))
            .map(|(n, r)| (n.as_str(), s(r, "/uid"), &r["spec"]))
            .chain(extra);
        let rules: Vec<_> = rules.collect();
        for d in &c.devices {
            let from_slice = self
                .device_taints(&d.driver, &d.pool, &d.name)
                .iter()
                .map(|(i, t)| (slice_source(&d.driver, &d.pool, &d.name, *i), t));
            let from_rules = rules
                .iter()
                .filter(|r| rule_matches(r.2, &d.driver, &d.pool, &d.name))
                .map(|(n, u, spec)| (rule_source(n, u), &spec["taint"]));
            for (src, taint) in from_slice.chain(from_rules) {
                let Some(due) = taint_due(taint, &d.tolerations) else {
                    continue;
                };
                reasons.push(src);
                if let Some(t) = due {
                    when = Some(when.map_or(t, |w| w.min(t)));
                }
            }
        }
        crate::sort::sort(&mut reasons[..]);
        reasons.dedup();
        Some(Eviction {
            when: when?,
            reasons,
        })
    }

    /// `podEvictionTime`: the earliest eviction of the claims the pod uses (its own, and
    /// reserved for it), with all their reasons; None for a pod not scheduled.
    pub fn pod_eviction(&self, pod: &Value) -> Option<Eviction> {
        self.pod_eviction_with(pod, |c| c.eviction.clone())
    }

    fn pod_eviction_with(
        &self,
        pod: &Value,
        ev: impl Fn(&Claim) -> Option<Eviction>,
    ) -> Option<Eviction> {
        if s(pod, "/spec/nodeName").is_empty() {
            return None;
        }
        let (ns, uid) = (obj::namespace(pod), obj::uid(pod));
        let mut out: Option<Eviction> = None;
        for (name, check) in podclaims::claims_of(pod) {
            let Some(c) = self.claims.get(&obj::make_key(ns, &name)) else {
                continue;
            };
            if (check && c.owner != uid) || !c.reserved.iter().any(|r| r.2 == uid) {
                continue;
            }
            let Some(e) = ev(c) else { continue };
            out = Some(match out {
                None => e,
                Some(mut o) => {
                    o.when = o.when.min(e.when);
                    o.reasons.extend(e.reasons);
                    crate::sort::sort(&mut o.reasons[..]);
                    o.reasons.dedup();
                    o
                }
            });
        }
        out
    }

    pub fn was_evicted(&self, uid: &str) -> bool {
        self.evicted.1.contains(uid)
    }

    /// A deletion went through (or was no longer needed): forget it, remember the pod.
    pub fn evicted(&mut self, work: &str) {
        self.delete_at.remove(work);
        let uid = parse_work(work).1.to_string();
        let (order, set) = &mut self.evicted;
        if set.insert(uid.clone()) {
            order.push_back(uid);
        }
        while order.len() > MAX_EVICTED {
            if let Some(u) = order.pop_front() {
                set.remove(&u);
            }
        }
    }

    /// `handlePod`: schedule the pod's deletion, or cancel it.
    pub fn handle_pod(&mut self, pod: &Value, now: SystemTime, out: &mut Vec<Out>) {
        let r = pod_work(&obj::key(pod), obj::uid(pod));
        let Some(e) = self.pod_eviction(pod) else {
            if self.delete_at.remove(&r).is_some() {
                out.push(Out::Cancelled(r));
            }
            return;
        };
        let delay = e.when.duration_since(now).unwrap_or_default();
        for (name, uid) in e.reasons.iter().filter_map(|r| source_rule(r)) {
            out.push(Out::Add(rule_work(name, uid), RULE_STATUS_PERIOD));
        }
        self.delete_at.insert(r.clone(), e);
        out.push(Out::Add(r, delay));
    }

    /// `handlePodChange`: a deleted pod's scheduled deletion is forgotten (no Event). A pod
    /// already evicted is not looked at again (upstream skips updates that change neither
    /// its node nor its claims, such as its DisruptionTarget condition and deletion).
    pub fn pod_changed(&mut self, pod: &Value, deleted: bool, now: SystemTime, out: &mut Vec<Out>) {
        let uid = obj::uid(pod);
        if deleted {
            self.delete_at.remove(&pod_work(&obj::key(pod), uid));
        } else if !self.was_evicted(uid) {
            self.handle_pod(pod, now, out);
        }
    }

    /// `handlePods`: the pods a claim is reserved for, as the cache has them.
    fn handle_pods(
        &mut self,
        ns: &str,
        reserved: &[(bool, String, String)],
        pods: &dyn Fn(&str, &str) -> Option<obj::Obj>,
        now: SystemTime,
        out: &mut Vec<Out>,
    ) {
        for (_, name, uid) in reserved.iter().filter(|r| r.0) {
            if let Some(p) = pods(ns, name).filter(|p| obj::uid(p) == uid) {
                self.handle_pod(&p, now, out);
            }
        }
    }

    /// `handleClaimChange`.
    pub fn claim_changed(
        &mut self,
        claim: &Value,
        deleted: bool,
        pods: &dyn Fn(&str, &str) -> Option<obj::Obj>,
        now: SystemTime,
        out: &mut Vec<Out>,
    ) {
        let (key, ns) = (obj::key(claim), obj::namespace(claim));
        let reserved: Vec<(bool, String, String)> = array(claim, "/status/reservedFor")
            .iter()
            .map(|r| {
                let pod = s(r, "/apiGroup").is_empty() && s(r, "/resource") == "pods";
                (pod, s(r, "/name").into(), s(r, "/uid").into())
            })
            .collect();
        let before = self.claims.remove(&key);
        let allocated = !deleted && claim.at("/status/allocation").is_some_and(|a| !a.is_null());
        if allocated {
            let same = before.as_ref().filter(|b| b.uid == obj::uid(claim));
            let mut c = Claim {
                uid: obj::uid(claim).into(),
                owner: obj::controller_ref(claim).map_or("", |r| r.uid).into(),
                reserved: reserved.clone(),
                devices: array(claim, "/status/allocation/devices/results")
                    .iter()
                    .map(|d| Device {
                        driver: s(d, "/driver").into(),
                        pool: s(d, "/pool").into(),
                        name: s(d, "/device").into(),
                        tolerations: array(d, "/tolerations").to_vec(),
                    })
                    .collect(),
                eviction: None,
            };
            // The allocation does not change: neither does its eviction.
            c.eviction = match same {
                Some(b) => b.eviction.clone(),
                None => self.claim_eviction(&c, None),
            };
            self.claims.insert(key, c);
        }
        if before.is_none() && !allocated {
            return;
        }
        if let Some(b) = &before {
            if b.reserved != reserved {
                self.handle_pods(ns, &b.reserved, pods, now, out);
            }
        }
        self.handle_pods(ns, &reserved, pods, now, out);
    }

    /// Recompute the eviction of the claims `which` selects; the pods of those that changed
    /// are handled again.
    fn reevaluate(
        &mut self,
        which: impl Fn(&Claim) -> bool,
        pods: &dyn Fn(&str, &str) -> Option<obj::Obj>,
        now: SystemTime,
        out: &mut Vec<Out>,
    ) {
        let mut changed = Vec::new();
        for (k, c) in &self.claims {
            if which(c) {
                let e = self.claim_eviction(c, None);
                if e != c.eviction {
                    changed.push((k.clone(), e));
                }
            }
        }
        for (k, e) in changed {
            let Some(c) = self.claims.get_mut(&k) else {
                continue;
            };
            c.eviction = e;
            let reserved = c.reserved.clone();
            self.handle_pods(obj::split_key(&k).0, &reserved, pods, now, out);
        }
    }

    /// `handleSliceChange`: the devices whose NoExecute taints changed, and the claims that
    /// use them.
    pub fn slice_changed(
        &mut self,
        slice: &Value,
        deleted: bool,
        pods: &dyn Fn(&str, &str) -> Option<obj::Obj>,
        now: SystemTime,
        out: &mut Vec<Out>,
    ) {
        let name = obj::name(slice).to_string();
        let id = pool_id(s(slice, "/spec/driver"), s(slice, "/spec/pool/name"));
        let mut ids = vec![id.clone()];
        ids.extend(self.slice_pool.get(&name).filter(|p| **p != id).cloned());
        let before: Vec<_> = ids.iter().map(|i| self.pool_taints(i)).collect();
        if let Some(old) = self.slice_pool.remove(&name) {
            if let Some(p) = self.pools.get_mut(&old) {
                p.remove(&name);
                if p.is_empty() {
                    self.pools.remove(&old);
                }
            }
        }
        if !deleted {
            let devices = array(slice, "/spec/devices")
                .iter()
                .map(|d| {
                    let t = array(d, "/taints")
                        .iter()
                        .enumerate()
                        .filter(|(_, t)| s(t, "/effect") == NO_EXECUTE)
                        .map(|(i, t)| (i, t.clone()))
                        .collect();
                    (s(d, "/name").to_string(), t)
                })
                .collect();
            let generation = slice.at("/spec/pool/generation").and_then(Value::as_i64);
            let entry = (generation.unwrap_or(0), devices);
            self.pools
                .entry(id.clone())
                .or_default()
                .insert(name.clone(), entry);
            self.slice_pool.insert(name, id);
        }
        let mut modified: HashSet<String> = HashSet::new();
        for (i, b) in ids.iter().zip(before) {
            let a = self.pool_taints(i);
            for d in a.keys().chain(b.keys()) {
                if a.get(d) != b.get(d) {
                    modified.insert(format!("{i}\0{d}"));
                }
            }
        }
        if modified.is_empty() {
            return;
        }
        let uses = |c: &Claim| {
            c.devices
                .iter()
                .any(|d| modified.contains(&format!("{}\0{}", pool_id(&d.driver, &d.pool), d.name)))
        };
        self.reevaluate(uses, pods, now, out);
    }

    /// `handleRuleChange`: a new rule, or one whose spec changed, gets a status update at
    /// once; every allocated claim is looked at again.
    pub fn rule_changed(
        &mut self,
        rule: &Value,
        deleted: bool,
        pods: &dyn Fn(&str, &str) -> Option<obj::Obj>,
        now: SystemTime,
        out: &mut Vec<Out>,
    ) {
        let (name, uid) = (obj::name(rule).to_string(), obj::uid(rule).to_string());
        let spec = rule.get("spec").cloned().unwrap_or(Value::Null);
        let before = self.rules.remove(&name);
        if deleted {
            self.evicted_by_rule.remove(&uid);
        } else {
            let same = before.as_ref().filter(|b| s(b, "/uid") == uid);
            let unchanged = same.is_some_and(|b| b["spec"] == spec);
            if !unchanged {
                out.push(Out::Add(rule_work(&name, &uid), Duration::ZERO));
            }
            let r = serde_json::json!({"uid": uid, "spec": spec});
            self.rules.insert(name, r);
            if unchanged {
                return;
            }
        }
        self.reevaluate(|_| true, pods, now, out);
    }

    /// `countPendingPods` (the pods not being deleted whose eviction the rule calls for)
    /// and the namespaces they are in; the rule counts as NoExecute whatever its effect (the
    /// None effect's simulation).
    pub fn pending_pods(&self, rule: &Value, pods: &[obj::Obj]) -> (i64, i64) {
        let (name, uid) = (obj::name(rule), obj::uid(rule));
        let spec = &rule["spec"];
        let mut as_no_execute = spec.clone();
        as_no_execute["taint"]["effect"] = NO_EXECUTE.into();
        let me = rule_source(name, uid);
        let simulated = |c: &Claim| self.claim_eviction(c, Some((name, uid, &as_no_execute)));
        let mut namespaces = Vec::new();
        let mut n = 0;
        for p in pods.iter().filter(|p| !obj::is_deleting(p)) {
            let e = if evicting(spec) {
                self.pod_eviction(p)
            } else {
                self.pod_eviction_with(p, simulated)
            };
            if e.is_some_and(|e| e.reasons.contains(&me)) {
                n += 1;
                namespaces.push(obj::namespace(p));
            }
        }
        crate::sort::sort(&mut namespaces[..]);
        namespaces.dedup();
        (n, namespaces.len() as i64)
    }

    /// `countTaintedDevices`: the published devices (newest generation) and the allocated
    /// devices the rule selects.
    pub fn selected_devices(&self, spec: &Value) -> (i64, i64) {
        let mut published = 0;
        for (id, slices) in &self.pools {
            let (driver, pool) = id.split_once('\0').unwrap_or_default();
            let max = slices.values().map(|s| s.0).max();
            for s in slices.values().filter(|s| Some(s.0) == max) {
                published +=
                    s.1.iter()
                        .filter(|d| rule_matches(spec, driver, pool, &d.0))
                        .count();
            }
        }
        let allocated = self
            .claims
            .values()
            .flat_map(|c| &c.devices)
            .filter(|d| rule_matches(spec, &d.driver, &d.pool, &d.name))
            .count();
        (published as i64, allocated as i64)
    }
}
