//! Pure helpers of the deployment controller: typed views of Deployments and ReplicaSets,
//! surge/unavailable arithmetic, the pod-template hash, revisions and their annotations,
//! conditions and the progress checks. Nothing here reads the cache or the clock.

mod annotations;
mod hash;

pub use annotations::*;
pub use hash::*;

use crate::controllers::kit::conditions;
use crate::obj;
use crate::obj::At as _;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
const DEPRECATED_ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
/// Longest revision-history annotation kept (characters).
pub const MAX_REV_HISTORY_CHARS: usize = 2000;

// Condition types and reasons (upstream's names).
pub const PROGRESSING: &str = "Progressing";
pub const AVAILABLE: &str = "Available";
pub const REPLICA_FAILURE: &str = "ReplicaFailure";
pub const REASON_RS_UPDATED: &str = "ReplicaSetUpdated";
pub const REASON_FAILED_RS_CREATE: &str = "ReplicaSetCreateError";
pub const REASON_NEW_RS_CREATED: &str = "NewReplicaSetCreated";
pub const REASON_FOUND_NEW_RS: &str = "FoundNewReplicaSet";
pub const REASON_NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const REASON_TIMED_OUT: &str = "ProgressDeadlineExceeded";
pub const REASON_PAUSED: &str = "DeploymentPaused";
pub const REASON_RESUMED: &str = "DeploymentResumed";
pub const REASON_MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
pub const REASON_MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

const MAX_INT32: i64 = i32::MAX as i64;

// ---------------------------------------------------------------------------------------------
// intstr

/// An `IntOrString` as used by maxSurge / maxUnavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i64),
    Percent(i64),
    /// A string that is not `<int>%` (validation rejects it; it resolves to 0 as upstream's
    /// callers that ignore the error do).
    Invalid,
}

impl IntOrPercent {
    pub fn parse(v: &Value) -> IntOrPercent {
        match v {
            Value::Number(n) => n.as_i64().map_or(IntOrPercent::Invalid, IntOrPercent::Int),
            Value::String(s) => match s.strip_suffix('%').map(str::parse::<i64>) {
                Some(Ok(p)) => IntOrPercent::Percent(p),
                _ => IntOrPercent::Invalid,
            },
            _ => IntOrPercent::Invalid,
        }
    }

    /// Upstream's GetScaledValueFromIntOrPercent: a percentage of `total`, rounded up or down.
    pub fn scaled(self, total: i64, round_up: bool) -> Option<i64> {
        match self {
            IntOrPercent::Int(i) => Some(i),
            IntOrPercent::Percent(p) => {
                let num = p * total;
                Some(if round_up {
                    num.div_euclid(100) + i64::from(num.rem_euclid(100) != 0)
                } else {
                    num.div_euclid(100)
                })
            }
            IntOrPercent::Invalid => None,
        }
    }
}

/// Upstream's ResolveFenceposts: (surge, unavailable) for `desired` replicas; surge rounds up,
/// unavailable rounds down, and when both resolve to 0 unavailable becomes 1.
pub fn resolve_fenceposts(
    max_surge: Option<IntOrPercent>,
    max_unavailable: Option<IntOrPercent>,
    desired: i64,
) -> (i64, i64) {
    let surge = max_surge
        .unwrap_or(IntOrPercent::Int(0))
        .scaled(desired, true);
    let unavailable = max_unavailable
        .unwrap_or(IntOrPercent::Int(0))
        .scaled(desired, false);
    match (surge, unavailable) {
        (Some(0), Some(0)) => (0, 1),
        (Some(s), Some(u)) => (s, u),
        // An invalid value is an error upstream; its callers then use zeros.
        _ => (0, 0),
    }
}

// ---------------------------------------------------------------------------------------------
// typed views

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    Recreate,
    RollingUpdate {
        max_surge: Option<IntOrPercent>,
        max_unavailable: Option<IntOrPercent>,
    },
    Other(String),
}

/// A condition of a Deployment (also used for ReplicaSet conditions).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub last_update_time: String,
    pub last_transition_time: String,
    pub reason: String,
    pub message: String,
}

impl Condition {
    pub fn new(type_: &str, status: &str, reason: &str, message: String, now: &str) -> Self {
        Condition {
            type_: type_.into(),
            status: status.into(),
            last_update_time: now.into(),
            last_transition_time: now.into(),
            reason: reason.into(),
            message,
        }
    }

    fn parse(v: &Value) -> Condition {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Condition {
            type_: s("type"),
            status: s("status"),
            last_update_time: s("lastUpdateTime"),
            last_transition_time: s("lastTransitionTime"),
            reason: s("reason"),
            message: s("message"),
        }
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), json!(self.type_));
        m.insert("status".into(), json!(self.status));
        if !self.last_update_time.is_empty() {
            m.insert("lastUpdateTime".into(), json!(self.last_update_time));
        }
        if !self.last_transition_time.is_empty() {
            m.insert(
                "lastTransitionTime".into(),
                json!(self.last_transition_time),
            );
        }
        if !self.reason.is_empty() {
            m.insert("reason".into(), json!(self.reason));
        }
        if !self.message.is_empty() {
            m.insert("message".into(), json!(self.message));
        }
        Value::Object(m)
    }

    /// Upstream's ReplicaSetToDeploymentCondition.
    pub fn from_replica_set(c: &Condition) -> Condition {
        Condition {
            last_update_time: c.last_transition_time.clone(),
            ..c.clone()
        }
    }
}

/// `status` of a Deployment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeploymentStatus {
    pub observed_generation: i64,
    pub replicas: i64,
    pub updated_replicas: i64,
    pub ready_replicas: i64,
    pub available_replicas: i64,
    pub unavailable_replicas: i64,
    pub conditions: Vec<Condition>,
    pub collision_count: Option<i64>,
    /// Pods of its ReplicaSets being deleted (v1.33+, DeploymentReplicaSetTerminatingReplicas):
    /// None when not reported, or when a ReplicaSet the controller synced does not report it.
    pub terminating_replicas: Option<i64>,
}

fn int_at(v: &Value, ptr: &str) -> i64 {
    v.at(ptr).and_then(Value::as_i64).unwrap_or(0)
}

fn conditions_of(v: &Value) -> Vec<Condition> {
    v.at("/status/conditions")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(Condition::parse).collect())
        .unwrap_or_default()
}

impl DeploymentStatus {
    pub fn parse(d: &Value) -> Self {
        DeploymentStatus {
            observed_generation: int_at(d, "/status/observedGeneration"),
            replicas: int_at(d, "/status/replicas"),
            updated_replicas: int_at(d, "/status/updatedReplicas"),
            ready_replicas: int_at(d, "/status/readyReplicas"),
            available_replicas: int_at(d, "/status/availableReplicas"),
            unavailable_replicas: int_at(d, "/status/unavailableReplicas"),
            conditions: conditions_of(d),
            collision_count: d.at("/status/collisionCount").and_then(Value::as_i64),
            terminating_replicas: d.at("/status/terminatingReplicas").and_then(Value::as_i64),
        }
    }

    /// The JSON form, zero fields omitted as the API server does.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        let mut put = |k: &str, v: i64| {
            if v != 0 {
                m.insert(k.into(), json!(v));
            }
        };
        put("observedGeneration", self.observed_generation);
        put("replicas", self.replicas);
        put("updatedReplicas", self.updated_replicas);
        put("readyReplicas", self.ready_replicas);
        put("availableReplicas", self.available_replicas);
        put("unavailableReplicas", self.unavailable_replicas);
        if !self.conditions.is_empty() {
            m.insert(
                "conditions".into(),
                Value::Array(self.conditions.iter().map(Condition::to_json).collect()),
            );
        }
        if let Some(c) = self.collision_count {
            m.insert("collisionCount".into(), json!(c));
        }
        // A pointer upstream: 0 is written, not omitted.
        if let Some(t) = self.terminating_replicas {
            m.insert("terminatingReplicas".into(), json!(t));
        }
        Value::Object(m)
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Upstream's SetDeploymentCondition: no change when status and reason are the same;
    /// keeps lastTransitionTime when only the reason changes; the condition goes last.
    pub fn set_condition(&mut self, mut c: Condition) {
        let old = self.condition(&c.type_).map(|o| {
            (
                o.status.as_str(),
                o.reason.as_str(),
                o.last_transition_time.as_str(),
            )
        });
        let Some(t) =
            conditions::replacing_transition(old, &c.status, &c.reason, &c.last_transition_time)
        else {
            return;
        };
        c.last_transition_time = t.to_string();
        self.remove_condition(&c.type_.clone());
        self.conditions.push(c);
    }

    pub fn remove_condition(&mut self, type_: &str) {
        self.conditions.retain(|c| c.type_ != type_);
    }
}

fn string_map(v: Option<&Map<String, Value>>) -> BTreeMap<String, String> {
    v.map(|m| {
        m.iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect()
    })
    .unwrap_or_default()
}

/// What the controller reads of a Deployment (defaults as the API server applies them).
#[derive(Debug, Clone)]
pub struct Deployment {
    pub obj: obj::Obj,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: i64,
    pub replicas: i64,
    pub selector: Option<Value>,
    pub template: Value,
    pub strategy: Strategy,
    pub min_ready_seconds: i64,
    pub revision_history_limit: Option<i64>,
    pub progress_deadline_seconds: Option<i64>,
    pub paused: bool,
    pub deleting: bool,
    pub annotations: BTreeMap<String, String>,
    pub status: DeploymentStatus,
}

impl Deployment {
    pub fn parse(o: obj::Obj) -> Result<Deployment, String> {
        let spec = o.get("spec").filter(|s| s.is_object()).ok_or("no spec")?;
        let template = spec
            .get("template")
            .filter(|t| t.is_object())
            .cloned()
            .ok_or("no spec.template")?;
        let selector = spec.get("selector").filter(|s| !s.is_null()).cloned();
        let strategy = match spec.at("/strategy/type").and_then(Value::as_str) {
            Some("Recreate") => Strategy::Recreate,
            None | Some("RollingUpdate") => {
                let p = |k: &str| {
                    spec.at(&format!("/strategy/rollingUpdate/{k}"))
                        .filter(|v| !v.is_null())
                        .map(IntOrPercent::parse)
                };
                Strategy::RollingUpdate {
                    // The API server defaults both to 25%.
                    max_surge: Some(p("maxSurge").unwrap_or(IntOrPercent::Percent(25))),
                    max_unavailable: Some(p("maxUnavailable").unwrap_or(IntOrPercent::Percent(25))),
                }
            }
            Some(other) => Strategy::Other(other.to_string()),
        };
        let opt_int = |k: &str| spec.get(k).and_then(Value::as_i64);
        Ok(Deployment {
            namespace: obj::namespace(&o).to_string(),
            name: obj::name(&o).to_string(),
            uid: obj::uid(&o).to_string(),
            generation: int_at(&o, "/metadata/generation"),
            replicas: opt_int("replicas").unwrap_or(1).max(0),
            selector,
            template,
            strategy,
            min_ready_seconds: opt_int("minReadySeconds").unwrap_or(0),
            revision_history_limit: opt_int("revisionHistoryLimit"),
            progress_deadline_seconds: opt_int("progressDeadlineSeconds"),
            paused: spec.get("paused").and_then(Value::as_bool) == Some(true),
            deleting: obj::is_deleting(&o),
            annotations: string_map(obj::annotations(&o)),
            status: DeploymentStatus::parse(&o),
            obj: o,
        })
    }

    pub fn key(&self) -> String {
        obj::make_key(&self.namespace, &self.name)
    }

    pub fn is_rolling(&self) -> bool {
        matches!(self.strategy, Strategy::RollingUpdate { .. })
    }

    fn fenceposts(&self) -> (i64, i64) {
        match self.strategy {
            Strategy::RollingUpdate {
                max_surge,
                max_unavailable,
            } => resolve_fenceposts(max_surge, max_unavailable, self.replicas),
            _ => (0, 0),
        }
    }

    /// Upstream's MaxSurge.
    pub fn max_surge(&self) -> i64 {
        self.fenceposts().0
    }

    /// Upstream's MaxUnavailable (never more than the replicas).
    pub fn max_unavailable(&self) -> i64 {
        if !self.is_rolling() || self.replicas == 0 {
            return 0;
        }
        self.fenceposts().1.min(self.replicas)
    }

    pub fn has_progress_deadline(&self) -> bool {
        self.progress_deadline_seconds
            .is_some_and(|s| s != MAX_INT32)
    }

    pub fn has_revision_history_limit(&self) -> bool {
        self.revision_history_limit.is_some_and(|l| l != MAX_INT32)
    }

    /// Upstream's SetDeploymentRevision.
    pub fn set_revision(&mut self, revision: &str) -> bool {
        if self.annotations.get(REVISION).map(String::as_str) == Some(revision) {
            return false;
        }
        self.annotations.insert(REVISION.into(), revision.into());
        true
    }
}

/// What the controller reads of a ReplicaSet; `replicas` and `annotations` follow the writes
/// planned in this pass.
#[derive(Debug, Clone)]
pub struct ReplicaSet {
    pub name: String,
    pub uid: String,
    pub created: String,
    pub replicas: i64,
    pub min_ready_seconds: i64,
    pub annotations: BTreeMap<String, String>,
    pub template: Value,
    pub generation: i64,
    pub deleting: bool,
    pub status_replicas: i64,
    pub ready_replicas: i64,
    pub available_replicas: i64,
    pub observed_generation: i64,
    pub conditions: Vec<Condition>,
    /// `status.terminatingReplicas` as the replicaset-controller reports it (None: absent).
    pub terminating_replicas: Option<i64>,
}

impl ReplicaSet {
    /// What this ReplicaSet counts against a rolling update's maxSurge: its replicas, or
    /// the pods it still has while a scale-down is being carried out (ARCHITECTURE.md).
    pub fn surge_count(&self) -> i64 {
        self.replicas.max(self.status_replicas)
    }

    pub fn parse(o: &Value) -> ReplicaSet {
        ReplicaSet {
            name: obj::name(o).to_string(),
            uid: obj::uid(o).to_string(),
            created: obj::creation_timestamp(o).to_string(),
            replicas: o.at("/spec/replicas").and_then(Value::as_i64).unwrap_or(1),
            min_ready_seconds: int_at(o, "/spec/minReadySeconds"),
            annotations: string_map(obj::annotations(o)),
            template: o.at("/spec/template").cloned().unwrap_or(Value::Null),
            generation: int_at(o, "/metadata/generation"),
            deleting: obj::is_deleting(o),
            status_replicas: int_at(o, "/status/replicas"),
            ready_replicas: int_at(o, "/status/readyReplicas"),
            available_replicas: int_at(o, "/status/availableReplicas"),
            observed_generation: int_at(o, "/status/observedGeneration"),
            conditions: conditions_of(o),
            terminating_replicas: o.at("/status/terminatingReplicas").and_then(Value::as_i64),
        }
    }

    /// Upstream's Revision: 0 without the annotation, None when it is not a number.
    pub fn revision(&self) -> Option<i64> {
        match self.annotations.get(REVISION) {
            None => Some(0),
            Some(v) => v.parse().ok(),
        }
    }

    /// A replica count annotation as upstream reads it since v1.33
    /// (`getNonNegativeInt32FromAnnotation`): a plain decimal in 0..=2^31-1; a sign, a
    /// negative or larger number, or anything else reads as absent.
    fn int_annotation(&self, key: &str) -> Option<i64> {
        non_negative_int32(self.annotations.get(key)?)
    }

    pub fn desired_replicas_annotation(&self) -> Option<i64> {
        self.int_annotation(DESIRED_REPLICAS)
    }
}

// ---------------------------------------------------------------------------------------------
// ordering

/// Upstream's ReplicaSetsByCreationTimestamp: older first, then by name.
pub fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> std::cmp::Ordering {
    a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name))
}

/// Upstream's ReplicaSetsByRevision: lower revision first; ties and unparsable ones by age.
pub fn by_revision(a: &ReplicaSet, b: &ReplicaSet) -> std::cmp::Ordering {
    match (a.revision(), b.revision()) {
        (Some(x), Some(y)) if x != y => x.cmp(&y),
        _ => by_creation(a, b),
    }
}

/// Upstream's ReplicaSetsBySizeOlder: larger first, ties older first.
pub fn by_size_older(a: &ReplicaSet, b: &ReplicaSet) -> std::cmp::Ordering {
    b.replicas.cmp(&a.replicas).then_with(|| by_creation(a, b))
}

/// Upstream's ReplicaSetsBySizeNewer: larger first, ties newer first.
pub fn by_size_newer(a: &ReplicaSet, b: &ReplicaSet) -> std::cmp::Ordering {
    b.replicas.cmp(&a.replicas).then_with(|| by_creation(b, a))
}

// ---------------------------------------------------------------------------------------------
// replica arithmetic

/// Upstream's NewRSNewReplicas: how large the new ReplicaSet may be now, given the replicas
/// of every ReplicaSet (`total`, the new one included).
pub fn new_rs_new_replicas(
    d: &Deployment,
    total: i64,
    new_rs_replicas: i64,
) -> Result<i64, String> {
    match d.strategy {
        Strategy::RollingUpdate { max_surge, .. } => {
            let surge = max_surge
                .unwrap_or(IntOrPercent::Percent(25))
                .scaled(d.replicas, true)
                .ok_or("invalid maxSurge")?;
            let max_total = d.replicas + surge;
            if total >= max_total {
                return Ok(new_rs_replicas);
            }
            let up = (max_total - total).min(d.replicas - new_rs_replicas);
            Ok(new_rs_replicas + up)
        }
        Strategy::Recreate => Ok(d.replicas),
        Strategy::Other(ref t) => Err(format!("deployment type {t} isn't supported")),
    }
}

/// Upstream's IsSaturated.
pub fn is_saturated(d: &Deployment, rs: &ReplicaSet) -> bool {
    rs.desired_replicas_annotation() == Some(d.replicas)
        && rs.replicas == d.replicas
        && rs.available_replicas == d.replicas
}

/// k8s.io/utils/integer RoundToInt32: halves away from zero.
fn round(a: f64) -> i64 {
    if a < 0.0 {
        (a - 0.5) as i64
    } else {
        (a + 0.5) as i64
    }
}

/// Upstream's generateReplicaSetName (v1.34+): `<deployment>-<hash>`, the Deployment's name
/// cut so that the whole fits a DNS subdomain (253 characters).
pub fn replica_set_name(deployment: &str, hash: &str) -> String {
    let max = 253usize.saturating_sub(1 + hash.len());
    let base = if deployment.len() > max && max > 0 {
        // Names are DNS subdomains: ASCII, so any byte index is a character boundary.
        deployment.get(..max).unwrap_or(deployment)
    } else {
        deployment
    };
    format!("{base}-{hash}")
}

/// Go's `strconv.ParseUint(v, 10, 32)` bounded to int32: digits only (no sign), at most
/// 2^31-1.
pub fn non_negative_int32(v: &str) -> Option<i64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = v.parse().ok()?;
    (n <= i32::MAX as u64).then_some(n as i64)
}

/// Upstream's getReplicaSetFraction (v1.33+: a missing, invalid or zero max-replicas
/// annotation falls back to the Deployment's status.replicas; when that is 0 too, nothing).
fn replica_set_fraction(rs: &ReplicaSet, d: &Deployment) -> i64 {
    if d.replicas == 0 {
        return -rs.replicas;
    }
    let deployment_replicas = d.replicas + d.max_surge();
    let annotated = match rs.int_annotation(MAX_REPLICAS) {
        Some(n) if n != 0 => n,
        _ => d.status.replicas,
    };
    if annotated == 0 {
        return 0;
    }
    let new_size = (rs.replicas * deployment_replicas) as f64 / annotated as f64;
    round(new_size) - rs.replicas
}

/// Upstream's GetProportion: this ReplicaSet's share of `to_add` (negative when scaling down),
/// bounded by what is still left to add.
pub fn proportion(rs: &ReplicaSet, d: &Deployment, to_add: i64, added: i64) -> i64 {
    if rs.replicas == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = replica_set_fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

// ---------------------------------------------------------------------------------------------
// progress

/// Upstream's GetTerminatingReplicaCountForReplicaSets: the sum of the ReplicaSets'
/// `terminatingReplicas`; a ReplicaSet never synced (observedGeneration 0, no count) adds
/// nothing, and one synced without a count makes the sum unknown (None).
pub fn terminating_replicas<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> Option<i64> {
    let mut sum = 0;
    for rs in rss {
        match rs.terminating_replicas {
            Some(n) => sum += n,
            None if rs.observed_generation == 0 => {}
            None => return None,
        }
    }
    Some(sum)
}

/// Upstream's DeploymentComplete.
pub fn deployment_complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    s.updated_replicas == d.replicas
        && s.replicas == d.replicas
        && s.available_replicas == d.replicas
        && s.observed_generation >= d.generation
}

/// Upstream's DeploymentProgressing: more updated, ready or available pods, or fewer old ones.
pub fn deployment_progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = &d.status;
    let old_old = old.replicas - old.updated_replicas;
    let new_old = new.replicas - new.updated_replicas;
    new.updated_replicas > old.updated_replicas
        || new_old < old_old
        || new.ready_replicas > old.ready_replicas
        || new.available_replicas > old.available_replicas
}

fn parse_time(s: &str) -> SystemTime {
    crate::compat::timefmt::parse_rfc3339(s).unwrap_or(SystemTime::UNIX_EPOCH)
}

/// When the progress deadline of the Progressing condition `c` passes.
pub fn deadline(d: &Deployment, c: &Condition) -> SystemTime {
    let secs = d.progress_deadline_seconds.unwrap_or(0).max(0) as u64;
    parse_time(&c.last_update_time) + Duration::from_secs(secs)
}

/// Upstream's DeploymentTimedOut.
pub fn deployment_timed_out(d: &Deployment, new: &DeploymentStatus, now: SystemTime) -> bool {
    if !d.has_progress_deadline() {
        return false;
    }
    let Some(c) = new.condition(PROGRESSING) else {
        return false;
    };
    if c.reason == REASON_NEW_RS_AVAILABLE {
        return false;
    }
    if c.reason == REASON_TIMED_OUT {
        return true;
    }
    deadline(d, c) < now
}

#[cfg(test)]
mod tests;
