//! The disruption controller's pure decisions: how many pods a budget expects and wants
//! healthy, which pods count as healthy, which recorded disruptions still hold, the status to
//! write, and whether a pod's `DisruptionTarget` condition is stale.

use crate::compat::timefmt::{parse_rfc3339, rfc3339};
use crate::controllers::kit::pod::is_pod_ready;
use crate::obj::At as _;
use crate::obj::{self};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// How long a pod listed in `status.disruptedPods` is expected to take to be deleted
/// (upstream's `DeletionTimeout`).
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a `DisruptionTarget=True` condition may stay on a pod that is not being deleted
/// (upstream's `stalePodDisruptionTimeout`).
pub const STALE_POD_DISRUPTION_TIMEOUT: Duration = Duration::from_secs(120);

pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
pub const SUFFICIENT_PODS: &str = "SufficientPods";
pub const INSUFFICIENT_PODS: &str = "InsufficientPods";
pub const SYNC_FAILED: &str = "SyncFailed";
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// A `DisruptionTarget` reason the kubelet sets; such conditions are never reset.
pub const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";

/// apimachinery's `GetScaledValueFromIntOrPercent` with rounding up: an int as it is, a
/// percentage of `total`, anything else an error with upstream's text.
pub fn scaled_value(v: &Value, total: i64) -> Result<i64, String> {
    let inner = match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) => return Ok(i),
            None => Err("invalid type: neither int nor percentage".to_string()),
        },
        Value::String(s) => match s.strip_suffix('%') {
            None => Err("invalid type: string is not a percentage".to_string()),
            Some(p) => match p.parse::<i64>() {
                Ok(pct) => return Ok(((pct as f64) * (total as f64) / 100.0).ceil() as i64),
                Err(e) => Err(format!(
                    "invalid value {s:?}: strconv.Atoi: parsing {p:?}: {}",
                    go_atoi_error(&e)
                )),
            },
        },
        Value::Null => return Err("nil value for IntOrString".to_string()),
        _ => Err("invalid type: neither int nor percentage".to_string()),
    };
    inner.map_err(|e| format!("invalid value for IntOrString: {e}"))
}

fn go_atoi_error(e: &std::num::ParseIntError) -> &'static str {
    use std::num::IntErrorKind::*;
    match e.kind() {
        PosOverflow | NegOverflow => "value out of range",
        _ => "invalid syntax",
    }
}

/// What the budget asks of its pods: `spec.maxUnavailable` wins over `spec.minAvailable`.
#[derive(Debug, Clone, PartialEq)]
pub enum Budget {
    MaxUnavailable(Value),
    /// An integer `minAvailable`: the expected count is the number of selected pods.
    MinAvailableInt(i64),
    /// A percentage (or any string) `minAvailable`: needs the controllers' scale.
    MinAvailableScaled(Value),
    None,
}

impl Budget {
    pub fn of(pdb: &Value) -> Budget {
        let set = |p: &str| pdb.at(p).filter(|v| !v.is_null()).cloned();
        if let Some(m) = set("/spec/maxUnavailable") {
            return Budget::MaxUnavailable(m);
        }
        match set("/spec/minAvailable") {
            Some(Value::Number(n)) => Budget::MinAvailableInt(n.as_i64().unwrap_or(0)),
            Some(v @ Value::String(_)) => Budget::MinAvailableScaled(v),
            _ => Budget::None,
        }
    }

    /// Whether the expected count comes from the pods' controllers.
    pub fn needs_scale(&self) -> bool {
        matches!(
            self,
            Budget::MaxUnavailable(_) | Budget::MinAvailableScaled(_)
        )
    }

    /// (expectedCount, desiredHealthy) from the expected scale (`scale`, when the budget
    /// needs it) or the number of selected pods.
    pub fn counts(&self, scale: i64, pods: usize) -> Result<(i64, i64), String> {
        match self {
            Budget::MaxUnavailable(v) => {
                let max = scaled_value(v, scale)?;
                Ok((scale, (scale - max).max(0)))
            }
            Budget::MinAvailableInt(m) => Ok((pods as i64, *m)),
            Budget::MinAvailableScaled(v) => Ok((scale, scaled_value(v, scale)?)),
            Budget::None => Ok((0, 0)),
        }
    }
}

fn time_of(v: Option<&Value>) -> Option<SystemTime> {
    v.and_then(Value::as_str).and_then(parse_rfc3339)
}

/// The disruptions recorded in the budget's status that still hold: pods selected, not being
/// deleted, recorded less than [`DELETION_TIMEOUT`] ago. Also the pods whose time ran out
/// (upstream records `NotDeleted` on each) and when the next recorded one runs out.
#[derive(Debug, Default, PartialEq)]
pub struct Disrupted {
    /// Pod name -> the time as recorded (kept as written).
    pub holding: BTreeMap<String, String>,
    pub expired: Vec<String>,
    pub recheck: Option<SystemTime>,
}

pub fn disrupted_pods(pdb: &Value, pods: &[&Value], now: SystemTime) -> Disrupted {
    let mut out = Disrupted::default();
    let Some(recorded) = pdb.at("/status/disruptedPods").and_then(Value::as_object) else {
        return out;
    };
    for p in pods {
        if obj::is_deleting(p) {
            continue;
        }
        let name = obj::name(p);
        let Some(raw) = recorded.get(name) else {
            continue;
        };
        // An unreadable time is the zero time upstream would decode: long expired.
        let at = time_of(Some(raw)).unwrap_or(SystemTime::UNIX_EPOCH);
        let expected = at + DELETION_TIMEOUT;
        if expected < now {
            out.expired.push(name.to_string());
        } else {
            if out.recheck.is_none_or(|r| expected < r) {
                out.recheck = Some(expected);
            }
            let text = raw.as_str().map_or_else(|| rfc3339(at), str::to_string);
            out.holding.insert(name.to_string(), text);
        }
    }
    out
}

/// Ready pods that are neither being deleted nor disrupted (upstream's `countHealthyPods`).
pub fn healthy_pods(pods: &[&Value], disrupted: &BTreeMap<String, String>, now: SystemTime) -> i64 {
    pods.iter()
        .filter(|p| !obj::is_deleting(p))
        .filter(|p| {
            disrupted
                .get(obj::name(p))
                .and_then(|t| parse_rfc3339(t))
                .is_none_or(|t| t + DELETION_TIMEOUT <= now)
        })
        .filter(|p| is_pod_ready(p))
        .count() as i64
}

/// The numbers of a budget's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    pub current_healthy: i64,
    pub desired_healthy: i64,
    pub expected_pods: i64,
    pub disruptions_allowed: i64,
}

impl Counts {
    pub fn new(current_healthy: i64, desired_healthy: i64, expected_pods: i64) -> Counts {
        let allowed = current_healthy - desired_healthy;
        Counts {
            current_healthy,
            desired_healthy,
            expected_pods,
            disruptions_allowed: if expected_pods <= 0 || allowed <= 0 {
                0
            } else {
                allowed
            },
        }
    }
}

fn int_at(v: &Value, p: &str) -> i64 {
    v.at(p).and_then(Value::as_i64).unwrap_or(0)
}

fn str_at<'a>(v: &'a Value, p: &str) -> &'a str {
    v.at(p).and_then(Value::as_str).unwrap_or("")
}

/// The `DisruptionAllowed` condition's (status, reason) for a number of allowed disruptions.
fn allowed_condition(allowed: i64) -> (&'static str, &'static str) {
    if allowed > 0 {
        ("True", SUFFICIENT_PODS)
    } else {
        ("False", INSUFFICIENT_PODS)
    }
}

fn condition(status: &str, reason: &str, message: &str, generation: i64, now: SystemTime) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), json!(DISRUPTION_ALLOWED));
    m.insert("status".into(), json!(status));
    if generation != 0 {
        m.insert("observedGeneration".into(), json!(generation));
    }
    m.insert("lastTransitionTime".into(), json!(rfc3339(now)));
    m.insert("reason".into(), json!(reason));
    m.insert("message".into(), json!(message));
    Value::Object(m)
}

/// The budget's status as upstream's `updatePdbStatus` writes it, or None when the status
/// already says all this (upstream's comparison: counts, disrupted pods, observed generation,
/// and a `DisruptionAllowed` condition of the right status and reason). A new status carries
/// only the `DisruptionAllowed` condition, with a new transition time, as upstream's does.
pub fn status_update(
    pdb: &Value,
    c: &Counts,
    disrupted: &BTreeMap<String, String>,
    now: SystemTime,
) -> Option<Value> {
    let generation = int_at(pdb, "/metadata/generation");
    let observed = int_at(pdb, "/status/observedGeneration");
    let recorded: BTreeMap<String, String> = pdb
        .at("/status/disruptedPods")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default();
    let (want_status, want_reason) = allowed_condition(c.disruptions_allowed);
    let cond = pdb
        .at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|l| l.iter().find(|x| str_at(x, "/type") == DISRUPTION_ALLOWED));
    let up_to_date = cond.is_some_and(|x| {
        observed == generation
            && str_at(x, "/status") == want_status
            && str_at(x, "/reason") == want_reason
    });
    let same = int_at(pdb, "/status/currentHealthy") == c.current_healthy
        && int_at(pdb, "/status/desiredHealthy") == c.desired_healthy
        && int_at(pdb, "/status/expectedPods") == c.expected_pods
        && int_at(pdb, "/status/disruptionsAllowed") == c.disruptions_allowed
        && same_times(&recorded, disrupted)
        && observed == generation
        && up_to_date;
    if same {
        return None;
    }
    let mut status = Map::new();
    if generation != 0 {
        status.insert("observedGeneration".into(), json!(generation));
    }
    if !disrupted.is_empty() {
        status.insert("disruptedPods".into(), json!(disrupted));
    }
    status.insert("disruptionsAllowed".into(), json!(c.disruptions_allowed));
    status.insert("currentHealthy".into(), json!(c.current_healthy));
    status.insert("desiredHealthy".into(), json!(c.desired_healthy));
    status.insert("expectedPods".into(), json!(c.expected_pods));
    status.insert(
        "conditions".into(),
        json!([condition(want_status, want_reason, "", generation, now)]),
    );
    Some(with_status(pdb, Value::Object(status)))
}

/// Recorded times compared as instants (`metav1.Time` equality), a missing map as empty.
fn same_times(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> bool {
    a.len() == b.len()
        && a.iter().all(|(k, v)| {
            b.get(k).is_some_and(|w| {
                v == w || (parse_rfc3339(v).is_some() && parse_rfc3339(v) == parse_rfc3339(w))
            })
        })
}

fn with_status(pdb: &Value, status: Value) -> Value {
    let mut out = pdb.clone();
    if let Some(m) = out.as_object_mut() {
        m.insert("status".into(), status);
    }
    out
}

/// Upstream's `failSafe`: the status as it is, with no disruption allowed and the
/// `DisruptionAllowed` condition False for `SyncFailed` with the error's text (set as
/// `meta.SetStatusCondition` sets it: the transition time moves only with the status).
pub fn fail_safe(pdb: &Value, message: &str, now: SystemTime) -> Value {
    let mut status = match pdb.get("status") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    let observed = status
        .get("observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    status.insert("disruptionsAllowed".into(), json!(0));
    let conds = status.entry("conditions").or_insert_with(|| json!([]));
    if !conds.is_array() {
        *conds = json!([]);
    }
    let list = conds.as_array_mut().expect("an array");
    match list
        .iter_mut()
        .find(|x| str_at(x, "/type") == DISRUPTION_ALLOWED)
    {
        None => list.push(condition("False", SYNC_FAILED, message, observed, now)),
        Some(old) => {
            if str_at(old, "/status") != "False" {
                old["status"] = json!("False");
                old["lastTransitionTime"] = json!(rfc3339(now));
            }
            old["reason"] = json!(SYNC_FAILED);
            old["message"] = json!(message);
            match old.as_object_mut() {
                Some(m) if observed == 0 => {
                    m.remove("observedGeneration");
                }
                _ => old["observedGeneration"] = json!(observed),
            }
        }
    }
    with_status(pdb, Value::Object(status))
}

/// Whether a pod carries a `DisruptionTarget=True` condition nobody acted on, and how long
/// until it is stale (zero: now). Pods being deleted, in a terminal phase, or marked by the
/// kubelet are left alone (upstream's `nonTerminatingPodHasStaleDisruptionCondition`).
pub fn stale_disruption(pod: &Value, now: SystemTime) -> Option<Duration> {
    if obj::is_deleting(pod) {
        return None;
    }
    let cond = pod
        .at("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| str_at(c, "/type") == DISRUPTION_TARGET)?;
    let phase = str_at(pod, "/status/phase");
    if str_at(cond, "/status") != "True"
        || str_at(cond, "/reason") == TERMINATION_BY_KUBELET
        || phase == "Failed"
        || phase == "Succeeded"
    {
        return None;
    }
    let since = time_of(cond.get("lastTransitionTime")).unwrap_or(SystemTime::UNIX_EPOCH);
    let age = now.duration_since(since).unwrap_or(Duration::ZERO);
    Some(STALE_POD_DISRUPTION_TIMEOUT.saturating_sub(age))
}

/// Go's `%v` of a `*metav1.LabelSelector` (its generated `String`), as upstream's
/// `UnmanagedPods` message prints it.
pub fn go_selector(sel: Option<&Value>) -> String {
    let Some(sel) = sel.filter(|s| s.is_object()) else {
        return "nil".to_string();
    };
    let mut labels: Vec<(&String, &str)> = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k, v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    crate::sort::sort(&mut labels[..]);
    let labels: String = labels.iter().map(|(k, v)| format!("{k}: {v},")).collect();
    let exprs: String = sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                str_at(e, "/key"),
                str_at(e, "/operator"),
                values.join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"
    )
}
