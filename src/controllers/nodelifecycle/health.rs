//! A node's health as the controller sees it (upstream's `tryUpdateNodeHealth`), and zone
//! states (`ComputeZoneState`, the disruption rate functions). Pure: the time is an argument.

use crate::compat::timefmt;
use crate::obj::{self, At as _};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

/// What the controller remembers of a node between passes (upstream's `nodeHealthData`).
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// When the node last showed a sign of life (a new heartbeat or lease renewal), by this
    /// controller's clock.
    pub probe: SystemTime,
    pub ready_transition: SystemTime,
    /// The node's Ready condition as last seen (None: the node had none).
    pub ready: Option<Value>,
    /// Whether a lease was seen, and its renew time.
    pub lease: Option<Option<SystemTime>>,
}

/// The grace periods of a node (`--node-monitor-grace-period`, `--node-startup-grace-period`).
#[derive(Debug, Clone, Copy)]
pub struct Grace {
    pub monitor: Duration,
    pub startup: Duration,
}

/// The outcome of one look at a node.
#[derive(Debug, Clone, PartialEq)]
pub struct Look {
    /// The Ready condition as the node carried it when the pass began (upstream's
    /// `observedReadyCondition`; a node without one is seen as Unknown since its creation).
    pub observed: Value,
    /// The Ready condition after this look (None: the node has none and none was written).
    pub current: Option<Value>,
    /// The node to PUT to `nodes/<name>/status` (conditions set to Unknown), if any.
    pub update: Option<Value>,
    /// What to remember if the update is not sent or fails.
    pub health: Health,
    /// What to remember once the update succeeded.
    pub health_after_update: Option<Health>,
    /// The node's grace period had passed without a sign of life (what the lease circuit
    /// breaker double-checks against the live Lease).
    pub expired: bool,
}

pub const READY: &str = "Ready";
/// The conditions set to Unknown once a node stops reporting, in upstream's order.
pub const WATCHED_CONDITIONS: [&str; 4] =
    ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

pub fn condition<'a>(node: &'a Value, type_: &str) -> Option<&'a Value> {
    node.at("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

pub fn cond_status(c: Option<&Value>) -> &str {
    c.and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn field<'a>(c: &'a Value, f: &str) -> Option<&'a Value> {
    c.get(f).filter(|v| !v.is_null())
}

/// `metav1.Time` equality as Go's struct comparison of parsed times sees it.
fn same_time(a: Option<&Value>, b: Option<&Value>) -> bool {
    let t = |v: Option<&Value>| v.and_then(Value::as_str).and_then(timefmt::parse_rfc3339);
    t(a) == t(b)
}

fn creation(node: &Value) -> SystemTime {
    timefmt::parse_rfc3339(obj::creation_timestamp(node)).unwrap_or(SystemTime::UNIX_EPOCH)
}

/// The renew time of a Lease (None when it has none).
pub fn renew_time(lease: &Value) -> Option<SystemTime> {
    lease
        .at("/spec/renewTime")
        .and_then(Value::as_str)
        .and_then(timefmt::parse_rfc3339)
}

/// Conditions compared as `apiequality.Semantic.DeepEqual` compares two `NodeCondition`s.
fn same_condition(a: &Value, b: &Value) -> bool {
    let s = |c: &Value, f: &str| {
        field(c, f)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    ["type", "status", "reason", "message"]
        .iter()
        .all(|f| s(a, f) == s(b, f))
        && ["lastHeartbeatTime", "lastTransitionTime"]
            .iter()
            .all(|f| same_time(field(a, f), field(b, f)))
}

/// Upstream's `tryUpdateNodeHealth` for `node` (whole, as cached): `saved` is what was
/// remembered of it, `lease` its Lease in `kube-node-lease` if there is one.
pub fn look(
    node: &Value,
    saved: Option<&Health>,
    lease: Option<&Value>,
    grace: Grace,
    now: SystemTime,
) -> Look {
    let created = creation(node);
    let current_ready = condition(node, READY).cloned();
    let mut health = saved.cloned();
    let (observed, grace_period) = match &current_ready {
        None => {
            let t = json!(obj::creation_timestamp(node));
            let observed = json!({"type": READY, "status": "Unknown",
                "lastHeartbeatTime": t, "lastTransitionTime": t});
            health = Some(match health {
                Some(mut h) => {
                    h.ready = None;
                    h
                }
                None => Health {
                    probe: created,
                    ready_transition: created,
                    ready: None,
                    lease: None,
                },
            });
            (observed, grace.startup)
        }
        Some(c) => (c.clone(), grace.monitor),
    };
    // What was remembered, as upstream reads it after the step above.
    let saved_ready = health.as_ref().and_then(|h| h.ready.clone());
    let saved_lease = health.as_ref().and_then(|h| h.lease);
    let fresh = |ready: Option<Value>| Health {
        probe: now,
        ready_transition: now,
        ready,
        lease: None,
    };
    let mut health = match (health, &saved_ready, &current_ready) {
        // Never seen: now is the timestamp.
        (None, _, _) => fresh(current_ready.clone()),
        // A Ready condition appeared (upstream's "removed" case cannot happen: a node without
        // one was remembered without one above).
        (Some(_), None, Some(_)) => fresh(current_ready.clone()),
        (Some(h), Some(s), Some(c))
            if !same_time(field(s, "lastHeartbeatTime"), field(c, "lastHeartbeatTime")) =>
        {
            let transition = if same_time(
                field(s, "lastTransitionTime"),
                field(c, "lastTransitionTime"),
            ) {
                h.ready_transition
            } else {
                now
            };
            Health {
                probe: now,
                ready_transition: transition,
                ready: current_ready.clone(),
                lease: None,
            }
        }
        (Some(h), _, _) => h,
    };
    let observed_lease = lease.map(renew_time);
    if let Some(renew) = observed_lease {
        // Compared with the lease remembered before this look, even when the record was
        // replaced above (the new record has none, as upstream's).
        let newer = match saved_lease {
            None => true,
            Some(old) => matches!((old, renew), (Some(a), Some(b)) if a < b),
        };
        if newer {
            health.lease = Some(renew);
            health.probe = now;
        }
    }
    let mut out = Look {
        observed: observed.clone(),
        current: current_ready.clone(),
        update: None,
        health: health.clone(),
        health_after_update: None,
        expired: now > health.probe + grace_period,
    };
    if !out.expired {
        return out;
    }
    let stamp = timefmt::rfc3339(now);
    let mut updated = node.clone();
    if !updated["status"].is_object() {
        updated["status"] = json!({});
    }
    if !updated["status"]["conditions"].is_array() {
        updated["status"]["conditions"] = json!([]);
    }
    let conds = updated["status"]["conditions"]
        .as_array_mut()
        .expect("conditions made an array above");
    for t in WATCHED_CONDITIONS {
        match conds
            .iter_mut()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
        {
            None => {
                log::debug!(
                    "node-lifecycle-controller: condition {t} of node {} was never updated by kubelet",
                    obj::name(node)
                );
                conds.push(json!({"type": t, "status": "Unknown",
                    "lastHeartbeatTime": obj::creation_timestamp(node),
                    "lastTransitionTime": stamp,
                    "reason": "NodeStatusNeverUpdated",
                    "message": "Kubelet never posted node status."}));
            }
            Some(c) => {
                if c.get("status").and_then(Value::as_str) != Some("Unknown") {
                    c["status"] = json!("Unknown");
                    c["reason"] = json!("NodeStatusUnknown");
                    c["message"] = json!("Kubelet stopped posting node status.");
                    c["lastTransitionTime"] = json!(stamp);
                }
            }
        }
    }
    let new_ready = condition(&updated, READY).cloned();
    if new_ready
        .as_ref()
        .is_some_and(|c| same_condition(c, &observed))
    {
        return out;
    }
    out.health_after_update = Some(Health {
        probe: health.probe,
        ready_transition: now,
        ready: new_ready.clone(),
        lease: observed_lease,
    });
    out.current = new_ready;
    out.update = Some(updated);
    out
}

/// Upstream's zone states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneState {
    Initial,
    Normal,
    PartialDisruption,
    FullDisruption,
}

impl ZoneState {
    pub fn as_str(self) -> &'static str {
        match self {
            ZoneState::Initial => "Initial",
            ZoneState::Normal => "Normal",
            ZoneState::PartialDisruption => "PartialDisruption",
            ZoneState::FullDisruption => "FullDisruption",
        }
    }
}

/// Upstream's `ComputeZoneState`: the count of not-ready nodes and the state, from the
/// Ready statuses of a zone's nodes ("" for a node without the condition).
pub fn zone_state(ready: &[&str], unhealthy_threshold: f32) -> (usize, ZoneState) {
    let ok = ready.iter().filter(|s| **s == "True").count();
    let bad = ready.len() - ok;
    if ok == 0 && bad > 0 {
        (bad, ZoneState::FullDisruption)
    } else if bad > 2 && (bad as f32) / ((bad + ok) as f32) >= unhealthy_threshold {
        (bad, ZoneState::PartialDisruption)
    } else {
        (bad, ZoneState::Normal)
    }
}

/// The eviction rates (nodes per second) of the three states.
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    pub healthy: f32,
    pub secondary: f32,
    pub large_cluster_threshold: i32,
}

impl Rates {
    /// The limiter a zone of `size` nodes gets in `state` (upstream's `setLimiterInZone`);
    /// None for `Initial`, which keeps the limiter it has.
    pub fn for_state(&self, state: ZoneState, size: usize) -> Option<f32> {
        match state {
            ZoneState::Normal => Some(self.healthy),
            ZoneState::PartialDisruption => {
                Some(if size as i64 > i64::from(self.large_cluster_threshold) {
                    self.secondary
                } else {
                    0.0
                })
            }
            ZoneState::FullDisruption => Some(self.healthy),
            ZoneState::Initial => None,
        }
    }
}

/// `topology.GetZoneKey`: region and zone labels (stable first, then beta), joined with
/// `:\x00:`; "" without either.
pub fn zone_key(node: &Value) -> String {
    let l = |k: &str| obj::label(node, k).unwrap_or("");
    let region = Some(l("topology.kubernetes.io/region"))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| l("failure-domain.beta.kubernetes.io/region"));
    let zone = Some(l("topology.kubernetes.io/zone"))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| l("failure-domain.beta.kubernetes.io/zone"));
    if region.is_empty() && zone.is_empty() {
        return String::new();
    }
    format!("{region}:\x00:{zone}")
}

/// The label that keeps a node out of the zone's disruption count.
pub const EXCLUDE_DISRUPTION: &str = "node.kubernetes.io/exclude-disruption";

pub fn excluded_from_disruption(node: &Value) -> bool {
    obj::labels(node).is_some_and(|l| l.contains_key(EXCLUDE_DISRUPTION))
}
