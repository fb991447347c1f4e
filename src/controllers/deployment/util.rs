//! Pure helpers of the deployment controller: typed views of Deployments and ReplicaSets,
//! surge/unavailable arithmetic, the pod-template hash, revisions and their annotations,
//! conditions and the progress checks. Nothing here reads the cache or the clock.

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
        Value::Object(m)
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Upstream's SetDeploymentCondition: no change when status and reason are the same;
    /// keeps lastTransitionTime when only the reason changes; the condition goes last.
    pub fn set_condition(&mut self, mut c: Condition) {
        if let Some(cur) = self.condition(&c.type_) {
            if cur.status == c.status && cur.reason == c.reason {
                return;
            }
            if cur.status == c.status {
                c.last_transition_time = cur.last_transition_time.clone();
            }
        }
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
        }
    }

    /// Upstream's Revision: 0 without the annotation, None when it is not a number.
    pub fn revision(&self) -> Option<i64> {
        match self.annotations.get(REVISION) {
            None => Some(0),
            Some(v) => v.parse().ok(),
        }
    }

    fn int_annotation(&self, key: &str) -> Option<i64> {
        self.annotations.get(key)?.parse().ok()
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
// pod-template hash

/// FNV-1a, 32 bit.
pub fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// JSON with object keys sorted at every level: a serialization that does not depend on the
/// order fields arrived in.
pub fn canonical_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The characters upstream's rand.SafeEncodeString maps to (no vowels, no confusable digits).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Upstream's SafeEncodeString.
pub fn safe_encode(s: &str) -> String {
    s.chars()
        .map(|c| ALPHANUMS[(c as usize) % ALPHANUMS.len()] as char)
        .collect()
}

/// The `pod-template-hash` of a template: FNV-32a over its canonical JSON, followed (when the
/// Deployment has a collisionCount) by the count as 8 little-endian bytes, as upstream's
/// ComputeHash; the decimal value of the sum encoded with SafeEncodeString.
pub fn compute_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut s = String::new();
    canonical_json(template, &mut s);
    let mut bytes = s.into_bytes();
    if let Some(c) = collision_count {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&(c as u32).to_le_bytes());
        bytes.extend_from_slice(&b);
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// Is `v` absent in the sense of Go's semantic equality (nil/empty slices and maps, and
/// structs holding nothing else)?
fn is_empty_value(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(m)) => m.values().all(|v| is_empty_value(Some(v))),
        _ => false,
    }
}

/// Deep equality where null, absent, `[]` and `{}` are the same (as apimachinery's semantic
/// equality treats nil and empty slices and maps) and numbers compare by value.
pub fn semantic_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.iter().all(|(k, v)| match y.get(k) {
                Some(w) => {
                    semantic_eq(v, w) || (is_empty_value(Some(v)) && is_empty_value(Some(w)))
                }
                None => is_empty_value(Some(v)),
            }) && y
                .iter()
                .all(|(k, w)| x.contains_key(k) || is_empty_value(Some(w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| semantic_eq(v, w))
        }
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b || (is_empty_value(Some(a)) && is_empty_value(Some(b))),
    }
}

/// Upstream's EqualIgnoreHash: two pod templates equal apart from the `pod-template-hash`
/// label. This is what finds an existing ReplicaSet for a template whatever hash it was
/// named with. Compared in place: every sync compares its Deployment's template with each
/// of its ReplicaSets', and copying both templates to drop one label was most of the cost.
pub fn equal_ignore_hash(t1: &Value, t2: &Value) -> bool {
    const HASH_LABEL: [&str; 3] = ["metadata", "labels", POD_TEMPLATE_HASH];
    semantic_eq_without(Some(t1), Some(t2), &HASH_LABEL)
}

/// `semantic_eq` of `a` and `b` (None: absent) once the key at `path` (object keys, the
/// last one the key to leave out) is taken out of both.
fn semantic_eq_without(a: Option<&Value>, b: Option<&Value>, path: &[&str]) -> bool {
    let same = |v: Option<&Value>, w: Option<&Value>| match (v, w) {
        (Some(v), Some(w)) => {
            semantic_eq(v, w) || (is_empty_value(Some(v)) && is_empty_value(Some(w)))
        }
        (v, w) => is_empty_value(v) && is_empty_value(w),
    };
    let Some((key, rest)) = path.split_first() else {
        return same(a, b);
    };
    fn as_map(v: Option<&Value>) -> Option<Option<&serde_json::Map<String, Value>>> {
        match v {
            None => Some(None),
            Some(Value::Object(m)) => Some(Some(m)),
            Some(_) => None,
        }
    }
    let (Some(x), Some(y)) = (as_map(a), as_map(b)) else {
        // Not an object here on one side: nothing is taken out of that side.
        return semantic_eq_without_by_copy(a, b, path);
    };
    let empty = serde_json::Map::new();
    let (x, y) = (x.unwrap_or(&empty), y.unwrap_or(&empty));
    let left_out = |k: &str| rest.is_empty() && k == *key;
    let going_down = |k: &str| !rest.is_empty() && k == *key;
    x.iter().filter(|(k, _)| !left_out(k)).all(|(k, v)| {
        if going_down(k) {
            semantic_eq_without(Some(v), y.get(k), rest)
        } else {
            same(Some(v), y.get(k))
        }
    }) && y
        .iter()
        .filter(|(k, _)| !left_out(k) && !x.contains_key(*k))
        .all(|(k, w)| {
            if going_down(k) {
                semantic_eq_without(None, Some(w), rest)
            } else {
                is_empty_value(Some(w))
            }
        })
}

/// `semantic_eq_without` by copying both sides and removing the key, for shapes the in-place
/// walk does not take apart (a non-object on the way to the key).
fn semantic_eq_without_by_copy(a: Option<&Value>, b: Option<&Value>, path: &[&str]) -> bool {
    let strip = |v: Option<&Value>| {
        let mut v = v.cloned().unwrap_or(Value::Null);
        if let Some((last, parents)) = path.split_last() {
            let mut at = Some(&mut v);
            for p in parents {
                at = at.and_then(|x| x.get_mut(*p));
            }
            if let Some(m) = at.and_then(Value::as_object_mut) {
                m.remove(*last);
            }
        }
        v
    };
    let (a, b) = (strip(a), strip(b));
    semantic_eq(&a, &b) || (is_empty_value(Some(&a)) && is_empty_value(Some(&b)))
}

/// A copy of `selector` whose matchLabels also require `key=value`.
pub fn selector_with_label(selector: &Value, key: &str, value: &str) -> Value {
    let mut s = selector.clone();
    if !s.is_object() {
        s = json!({});
    }
    let ml = s
        .as_object_mut()
        .map(|m| m.entry("matchLabels").or_insert_with(|| json!({})));
    if let Some(ml) = ml {
        if !ml.is_object() {
            *ml = json!({});
        }
        if let Some(m) = ml.as_object_mut() {
            m.insert(key.into(), json!(value));
        }
    }
    s
}

/// A copy of a pod template with `key=value` among its labels.
pub fn template_with_label(template: &Value, key: &str, value: &str) -> Value {
    let mut t = template.clone();
    if let Some(m) = t.as_object_mut() {
        let meta = m.entry("metadata").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        if let Some(meta) = meta.as_object_mut() {
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            if !labels.is_object() {
                *labels = json!({});
            }
            if let Some(l) = labels.as_object_mut() {
                l.insert(key.into(), json!(value));
            }
        }
    }
    t
}

// ---------------------------------------------------------------------------------------------
// annotations

fn skip_copy_annotation(k: &str) -> bool {
    matches!(
        k,
        LAST_APPLIED
            | REVISION
            | REVISION_HISTORY
            | DESIRED_REPLICAS
            | MAX_REPLICAS
            | DEPRECATED_ROLLBACK_TO
    )
}

/// Copy the Deployment's annotations (but the revision/replica ones and the apply one) to a
/// ReplicaSet's. Returns whether anything changed.
fn copy_deployment_annotations(d: &Deployment, rs: &mut BTreeMap<String, String>) -> bool {
    let mut changed = false;
    for (k, v) in &d.annotations {
        if skip_copy_annotation(k) || rs.get(k) == Some(v) {
            continue;
        }
        rs.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// Upstream's SetReplicasAnnotations.
pub fn set_replicas_annotations(a: &mut BTreeMap<String, String>, desired: i64, max: i64) -> bool {
    let mut updated = false;
    for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let s = v.to_string();
        if a.get(k) != Some(&s) {
            a.insert(k.into(), s);
            updated = true;
        }
    }
    updated
}

/// Upstream's ReplicasAnnotationsNeedUpdate.
pub fn replicas_annotations_need_update(
    a: &BTreeMap<String, String>,
    desired: i64,
    max: i64,
) -> bool {
    a.get(DESIRED_REPLICAS) != Some(&desired.to_string())
        || a.get(MAX_REPLICAS) != Some(&max.to_string())
}

/// Upstream's SetNewReplicaSetAnnotations: copy the Deployment's annotations, raise the
/// revision to `new_revision` (remembering the previous one in the revision history), and
/// for a ReplicaSet about to be created, the replica annotations. Returns whether anything
/// changed.
pub fn set_new_rs_annotations(
    d: &Deployment,
    rs: &mut BTreeMap<String, String>,
    new_revision: i64,
    exists: bool,
    history_limit_chars: usize,
) -> bool {
    let mut changed = copy_deployment_annotations(d, rs);
    let old = rs.get(REVISION).cloned();
    let old_int = match old.as_deref() {
        None | Some("") => 0,
        Some(s) => match s.parse::<i64>() {
            Ok(v) => v,
            Err(_) => {
                log::info!("deployment-controller: replica set revision {s:?} is not a number");
                return false;
            }
        },
    };
    if old_int < new_revision {
        rs.insert(REVISION.into(), new_revision.to_string());
        changed = true;
    }
    if let Some(old) = old.filter(|_| old_int < new_revision) {
        let history = rs.get(REVISION_HISTORY).cloned().unwrap_or_default();
        let parts: Vec<&str> = history.split(',').collect();
        if parts[0].is_empty() {
            rs.insert(REVISION_HISTORY.into(), old);
        } else {
            let mut total = history.len() + old.len() + 1;
            let mut start = 0;
            while total > history_limit_chars && start < parts.len() {
                total -= parts[start].len() + 1;
                start += 1;
            }
            if total <= history_limit_chars {
                let mut kept: Vec<&str> = parts[start..].to_vec();
                kept.push(&old);
                rs.insert(REVISION_HISTORY.into(), kept.join(","));
            } else {
                log::info!(
                    "deployment-controller: not appending revision: history length limit reached"
                );
            }
        }
    }
    if !exists && set_replicas_annotations(rs, d.replicas, d.replicas + d.max_surge()) {
        changed = true;
    }
    changed
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

/// Upstream's getReplicaSetFraction.
fn replica_set_fraction(rs: &ReplicaSet, d: &Deployment) -> i64 {
    if d.replicas == 0 {
        return -rs.replicas;
    }
    let deployment_replicas = d.replicas + d.max_surge();
    let annotated = rs.int_annotation(MAX_REPLICAS).unwrap_or(d.status.replicas);
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
    crate::timefmt::parse_rfc3339(s).unwrap_or(SystemTime::UNIX_EPOCH)
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
mod tests {
    use super::*;
    use std::sync::Arc;

    fn dep(spec: Value) -> Deployment {
        Deployment::parse(Arc::new(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "d-1", "generation": 1},
            "spec": spec,
        })))
        .expect("parse")
    }

    fn rolling(replicas: i64, surge: Value, unavailable: Value) -> Deployment {
        dep(json!({"replicas": replicas, "template": {},
            "strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}}))
    }

    #[test]
    fn int_or_percent_scaling() {
        let p = IntOrPercent::parse(&json!("25%"));
        assert_eq!(p, IntOrPercent::Percent(25));
        assert_eq!(p.scaled(10, true), Some(3));
        assert_eq!(p.scaled(10, false), Some(2));
        assert_eq!(p.scaled(4, true), Some(1));
        assert_eq!(p.scaled(4, false), Some(1));
        assert_eq!(p.scaled(0, true), Some(0));
        assert_eq!(IntOrPercent::parse(&json!(3)).scaled(10, true), Some(3));
        assert_eq!(IntOrPercent::parse(&json!("3")), IntOrPercent::Invalid);
        assert_eq!(IntOrPercent::parse(&json!("x%")), IntOrPercent::Invalid);
        assert_eq!(IntOrPercent::Percent(1).scaled(1, true), Some(1));
        assert_eq!(IntOrPercent::Percent(1).scaled(1, false), Some(0));
        assert_eq!(IntOrPercent::Percent(100).scaled(7, false), Some(7));
    }

    #[test]
    fn fenceposts() {
        let p = |s: &str| Some(IntOrPercent::parse(&json!(s)));
        // Surge rounds up, unavailable rounds down.
        assert_eq!(resolve_fenceposts(p("25%"), p("25%"), 10), (3, 2));
        // Both zero after rounding: one may be unavailable.
        assert_eq!(resolve_fenceposts(p("1%"), p("1%"), 0), (0, 1));
        assert_eq!(resolve_fenceposts(p("0%"), p("1%"), 2), (0, 1));
        assert_eq!(
            resolve_fenceposts(Some(IntOrPercent::Int(0)), Some(IntOrPercent::Int(0)), 5),
            (0, 1)
        );
        assert_eq!(resolve_fenceposts(p("1%"), p("25%"), 2), (1, 0));
        assert_eq!(resolve_fenceposts(None, None, 3), (0, 1));

        let d = rolling(10, json!("25%"), json!("25%"));
        assert_eq!((d.max_surge(), d.max_unavailable()), (3, 2));
        let d = rolling(3, json!(1), json!(0));
        assert_eq!((d.max_surge(), d.max_unavailable()), (1, 0));
        // maxUnavailable never exceeds the replicas; 0 replicas -> 0.
        let d = rolling(2, json!(0), json!(5));
        assert_eq!(d.max_unavailable(), 2);
        let d = rolling(0, json!(1), json!(1));
        assert_eq!(d.max_unavailable(), 0);
        // Recreate: neither.
        let d = dep(json!({"replicas": 3, "template": {}, "strategy": {"type": "Recreate"}}));
        assert_eq!((d.max_surge(), d.max_unavailable()), (0, 0));
        // Defaults: 25% / 25%.
        let d = dep(json!({"replicas": 4, "template": {}}));
        assert_eq!((d.max_surge(), d.max_unavailable()), (1, 1));
    }

    #[test]
    fn safe_encode_and_fnv() {
        // FNV-1a test vectors.
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
        // Each character maps through the 27-character alphabet by its code point.
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
        assert_eq!(safe_encode(""), "");
        assert_eq!(safe_encode("abc"), "vwx");
    }

    #[test]
    fn hash_is_stable_and_depends_on_collision_count() {
        let t1 = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}});
        let t2 = json!({"spec": {"containers": [{"image": "nginx:1", "name": "c"}]},
            "metadata": {"labels": {"tier": "fe", "app": "web"}}});
        let h = compute_hash(&t1, None);
        assert_eq!(h, compute_hash(&t2, None));
        assert!(h.chars().all(|c| ALPHANUMS.contains(&(c as u8))));
        assert!(!h.is_empty() && h.len() <= 10);
        assert_ne!(h, compute_hash(&t1, Some(0)));
        assert_ne!(compute_hash(&t1, Some(0)), compute_hash(&t1, Some(1)));
        let t3 = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}});
        assert_ne!(h, compute_hash(&t3, None));
        // The exact value is fixed: ReplicaSet names must not change between releases.
        let mut s = String::new();
        canonical_json(&t1, &mut s);
        assert_eq!(
            s,
            r#"{"metadata":{"labels":{"app":"web","tier":"fe"}},"spec":{"containers":[{"image":"nginx:1","name":"c"}]}}"#
        );
        assert_eq!(h, safe_encode(&fnv32a(s.as_bytes()).to_string()));
    }

    #[test]
    fn equal_ignoring_the_hash_label() {
        let d = json!({"metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
            "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}});
        let rs = json!({"metadata": {"labels": {"app": "web", "pod-template-hash": "abc"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1", "env": []}]}});
        assert!(equal_ignore_hash(&d, &rs));
        let other = json!({"metadata": {"labels": {"app": "web", "pod-template-hash": "abc"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}});
        assert!(!equal_ignore_hash(&d, &other));
        let only_hash = json!({"metadata": {"labels": {"pod-template-hash": "x"}}});
        assert!(equal_ignore_hash(&only_hash, &json!({})));
        assert!(!equal_ignore_hash(
            &json!({"metadata": {"labels": {"a": "1"}}}),
            &json!({"metadata": {"labels": {"a": "2"}}})
        ));
    }

    #[test]
    fn equal_ignoring_the_hash_label_agrees_with_removing_it_first() {
        let templates = [
            json!({}),
            json!(null),
            json!({"metadata": null}),
            json!({"metadata": {}}),
            json!({"metadata": {"labels": null}}),
            json!({"metadata": {"labels": {}}}),
            json!({"metadata": {"labels": "odd"}}),
            json!({"metadata": "odd"}),
            json!({"metadata": {"labels": {"pod-template-hash": "h1"}}}),
            json!({"metadata": {"labels": {"pod-template-hash": "h2"}}}),
            json!({"metadata": {"labels": {"pod-template-hash": "h1", "app": "web"}}}),
            json!({"metadata": {"labels": {"app": "web"}}}),
            json!({"metadata": {"labels": {"app": "web", "x": ""}}}),
            json!({"metadata": {"labels": {"app": "web"}, "annotations": {}}}),
            json!({"metadata": {"labels": {"app": "db"}}}),
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}),
            json!({"metadata": {"name": "n"}, "spec": {"containers": [{"name": "c"}]}}),
            json!({"spec": {"containers": [{"name": "c"}]}}),
        ];
        for a in &templates {
            for b in &templates {
                assert_eq!(
                    equal_ignore_hash(a, b),
                    semantic_eq_without_by_copy(
                        Some(a),
                        Some(b),
                        &["metadata", "labels", POD_TEMPLATE_HASH]
                    ),
                    "{a} vs {b}"
                );
            }
        }
    }

    #[test]
    fn selector_helpers() {
        let s = selector_with_label(
            &json!({"matchLabels": {"app": "web"}}),
            POD_TEMPLATE_HASH,
            "h",
        );
        assert_eq!(
            s,
            json!({"matchLabels": {"app": "web", "pod-template-hash": "h"}})
        );
        let s = selector_with_label(
            &json!({"matchExpressions": [{"key": "a", "operator": "Exists"}]}),
            POD_TEMPLATE_HASH,
            "h",
        );
        assert_eq!(s["matchLabels"]["pod-template-hash"], "h");
        assert_eq!(s["matchExpressions"][0]["key"], "a");
        let t = template_with_label(&json!({"spec": {}}), POD_TEMPLATE_HASH, "h");
        assert_eq!(t["metadata"]["labels"]["pod-template-hash"], "h");
    }

    fn rs(name: &str, created: &str, replicas: i64, rev: Option<&str>) -> ReplicaSet {
        let mut o = json!({"metadata": {"name": name, "uid": format!("u-{name}"),
            "creationTimestamp": created}, "spec": {"replicas": replicas}});
        if let Some(r) = rev {
            o["metadata"]["annotations"] = json!({REVISION: r});
        }
        ReplicaSet::parse(&o)
    }

    #[test]
    fn orderings() {
        let a = rs("a", "2024-01-01T00:00:00Z", 3, Some("2"));
        let b = rs("b", "2024-01-02T00:00:00Z", 3, Some("1"));
        let c = rs("c", "2024-01-02T00:00:00Z", 5, Some("x"));
        let mut v = vec![c.clone(), b.clone(), a.clone()];
        v.sort_by(by_creation);
        assert_eq!(names(&v), ["a", "b", "c"]);
        // b(1) < a(2); c is unparsable and sorts by age against both.
        let mut w = vec![a.clone(), b.clone()];
        w.sort_by(by_revision);
        assert_eq!(names(&w), ["b", "a"]);
        let mut v = vec![a.clone(), b.clone(), c.clone()];
        v.sort_by(by_size_older);
        assert_eq!(names(&v), ["c", "a", "b"]);
        v.sort_by(by_size_newer);
        assert_eq!(names(&v), ["c", "b", "a"]);
    }

    fn names(v: &[ReplicaSet]) -> Vec<&str> {
        v.iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn new_rs_annotations() {
        let mut d = rolling(3, json!(1), json!(0));
        d.annotations.insert("team".into(), "a".into());
        d.annotations.insert(REVISION.into(), "9".into());
        d.annotations.insert(LAST_APPLIED.into(), "{}".into());
        // A ReplicaSet about to be created.
        let mut a = BTreeMap::new();
        assert!(set_new_rs_annotations(
            &d,
            &mut a,
            1,
            false,
            MAX_REV_HISTORY_CHARS
        ));
        assert_eq!(a.get("team").map(String::as_str), Some("a"));
        assert_eq!(a.get(REVISION).map(String::as_str), Some("1"));
        assert_eq!(a.get(DESIRED_REPLICAS).map(String::as_str), Some("3"));
        assert_eq!(a.get(MAX_REPLICAS).map(String::as_str), Some("4"));
        assert!(!a.contains_key(LAST_APPLIED));
        assert!(!a.contains_key(REVISION_HISTORY));
        // Nothing new: unchanged.
        assert!(!set_new_rs_annotations(
            &d,
            &mut a,
            1,
            true,
            MAX_REV_HISTORY_CHARS
        ));
        // Rolled back to: the old revision goes into the history.
        assert!(set_new_rs_annotations(
            &d,
            &mut a,
            4,
            true,
            MAX_REV_HISTORY_CHARS
        ));
        assert_eq!(a.get(REVISION).map(String::as_str), Some("4"));
        assert_eq!(a.get(REVISION_HISTORY).map(String::as_str), Some("1"));
        assert!(set_new_rs_annotations(
            &d,
            &mut a,
            6,
            true,
            MAX_REV_HISTORY_CHARS
        ));
        assert_eq!(a.get(REVISION_HISTORY).map(String::as_str), Some("1,4"));
        // The history is trimmed from the front to the character limit.
        assert!(set_new_rs_annotations(&d, &mut a, 10, true, 4));
        assert_eq!(a.get(REVISION_HISTORY).map(String::as_str), Some("4,6"));
        // A higher revision already there stays.
        assert!(!set_new_rs_annotations(
            &d,
            &mut a,
            2,
            true,
            MAX_REV_HISTORY_CHARS
        ));
        assert_eq!(a.get(REVISION).map(String::as_str), Some("10"));
        // An unparsable revision: nothing reported as changed.
        let mut bad = BTreeMap::from([(REVISION.to_string(), "x".to_string())]);
        assert!(!set_new_rs_annotations(
            &d,
            &mut bad,
            2,
            true,
            MAX_REV_HISTORY_CHARS
        ));
    }

    #[test]
    fn new_replicas_for_rolling_and_recreate() {
        // 3 replicas, surge 1: total may reach 4.
        let d = rolling(3, json!(1), json!(0));
        assert_eq!(new_rs_new_replicas(&d, 3, 0), Ok(1));
        assert_eq!(new_rs_new_replicas(&d, 4, 1), Ok(1));
        assert_eq!(new_rs_new_replicas(&d, 3, 1), Ok(2));
        // Never above the desired count.
        assert_eq!(new_rs_new_replicas(&d, 0, 0), Ok(3));
        // 5 replicas with 25% surge: a fresh deployment starts at full size.
        let d = rolling(5, json!("25%"), json!("25%"));
        assert_eq!(new_rs_new_replicas(&d, 0, 0), Ok(5));
        let d = dep(json!({"replicas": 4, "template": {}, "strategy": {"type": "Recreate"}}));
        assert_eq!(new_rs_new_replicas(&d, 10, 0), Ok(4));
    }

    #[test]
    fn proportions() {
        // Deployment scaled 10 -> 15 during a rollout with surge 3 (max 13 -> 18).
        let mut d = rolling(15, json!(3), json!(2));
        d.status.replicas = 13;
        let mut a = rs("a", "t1", 8, None);
        a.annotations.insert(MAX_REPLICAS.into(), "13".into());
        let mut b = rs("b", "t2", 5, None);
        b.annotations.insert(MAX_REPLICAS.into(), "13".into());
        // 18 allowed, 13 there: add 5. a: 8*18/13 = 11.08 -> 11 (+3); b: 5*18/13 = 6.9 -> 7 (+2).
        assert_eq!(proportion(&a, &d, 5, 0), 3);
        assert_eq!(proportion(&b, &d, 5, 3), 2);
        // Bounded by what is left.
        assert_eq!(proportion(&b, &d, 5, 4), 1);
        assert_eq!(proportion(&b, &d, 5, 5), 0);
        // Without the annotation the deployment's status replicas stand in.
        a.annotations.clear();
        assert_eq!(proportion(&a, &d, 5, 0), 3);
        // Scaling down to 0: the whole size.
        let mut z = rolling(0, json!(3), json!(2));
        z.status.replicas = 13;
        let a = rs("a", "t1", 8, None);
        assert_eq!(proportion(&a, &z, -13, 0), -8);
        // Down: the larger (negative) of the fraction and what is left.
        let mut d = rolling(5, json!(1), json!(1));
        d.status.replicas = 11;
        let mut a = rs("a", "t1", 8, None);
        a.annotations.insert(MAX_REPLICAS.into(), "11".into());
        // 8*6/11 = 4.36 -> 4 (-4); bounded by -5 allowed.
        assert_eq!(proportion(&a, &d, -5, 0), -4);
        assert_eq!(proportion(&a, &d, -5, -3), -2);
        assert_eq!(round(2.5), 3);
        assert_eq!(round(-2.5), -3);
        assert_eq!(round(2.49), 2);
    }

    #[test]
    fn conditions_follow_upstream_rules() {
        let mut s = DeploymentStatus::default();
        s.set_condition(Condition::new(
            PROGRESSING,
            "True",
            REASON_NEW_RS_CREATED,
            "m1".into(),
            "t1",
        ));
        s.set_condition(Condition::new(
            AVAILABLE,
            "False",
            REASON_MIN_UNAVAILABLE,
            "m".into(),
            "t1",
        ));
        // Same status and reason: nothing changes, not even the message.
        s.set_condition(Condition::new(
            PROGRESSING,
            "True",
            REASON_NEW_RS_CREATED,
            "m2".into(),
            "t2",
        ));
        assert_eq!(s.conditions[0].message, "m1");
        // Same status, other reason: transition time kept, condition moves last.
        s.set_condition(Condition::new(
            PROGRESSING,
            "True",
            REASON_RS_UPDATED,
            "m3".into(),
            "t3",
        ));
        let p = s.condition(PROGRESSING).expect("progressing");
        assert_eq!(
            (p.last_transition_time.as_str(), p.last_update_time.as_str()),
            ("t1", "t3")
        );
        assert_eq!(s.conditions[1].type_, PROGRESSING);
        // Other status: a new transition time.
        s.set_condition(Condition::new(
            PROGRESSING,
            "False",
            REASON_TIMED_OUT,
            "m4".into(),
            "t4",
        ));
        assert_eq!(
            s.condition(PROGRESSING).expect("p").last_transition_time,
            "t4"
        );
        s.remove_condition(PROGRESSING);
        assert!(s.condition(PROGRESSING).is_none());
        // JSON round trip, zeros omitted.
        s.replicas = 2;
        s.collision_count = Some(0);
        let j = s.to_json();
        assert!(j.get("updatedReplicas").is_none());
        assert_eq!(j["collisionCount"], 0);
        let back = DeploymentStatus::parse(&json!({"status": j}));
        assert_eq!(back, s);
    }

    #[test]
    fn progress_checks() {
        let mut d = rolling(3, json!(1), json!(0));
        d.progress_deadline_seconds = Some(10);
        d.generation = 2;
        let mut s = DeploymentStatus {
            observed_generation: 2,
            replicas: 3,
            updated_replicas: 3,
            available_replicas: 3,
            ..Default::default()
        };
        assert!(deployment_complete(&d, &s));
        s.observed_generation = 1;
        assert!(!deployment_complete(&d, &s));
        d.status = DeploymentStatus {
            replicas: 4,
            updated_replicas: 1,
            ..Default::default()
        };
        let mut n = d.status.clone();
        assert!(!deployment_progressing(&d, &n));
        n.updated_replicas = 2;
        assert!(deployment_progressing(&d, &n));
        let mut n = d.status.clone();
        n.replicas = 3; // one old pod fewer
        assert!(deployment_progressing(&d, &n));

        let t0 = crate::timefmt::parse_rfc3339("2024-01-01T00:00:00Z").expect("t");
        let mut n = DeploymentStatus::default();
        assert!(!deployment_timed_out(&d, &n, t0));
        n.set_condition(Condition::new(
            PROGRESSING,
            "True",
            REASON_RS_UPDATED,
            String::new(),
            "2024-01-01T00:00:00Z",
        ));
        assert!(!deployment_timed_out(&d, &n, t0 + Duration::from_secs(10)));
        assert!(deployment_timed_out(&d, &n, t0 + Duration::from_secs(11)));
        d.progress_deadline_seconds = Some(i32::MAX as i64);
        assert!(!deployment_timed_out(&d, &n, t0 + Duration::from_secs(11)));
    }
}
