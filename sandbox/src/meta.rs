//! Object metadata helpers, time formatting, random names and `Status` errors.

use serde_json::{json, Map, Value};
use std::time::{SystemTime, UNIX_EPOCH};

use edgekcm::api::resources::Kind;

/// An API error, turned into a `Status` object on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn not_found(kind: &Kind, name: &str) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", kind.resource_name(), name),
        )
        .with_details(details(kind, name))
    }

    /// A missing object's subresource, as kube-apiserver words it (`replicasets/scale.apps`).
    pub fn sub_not_found(kind: &Kind, sub: &str, name: &str) -> Self {
        let resource = match kind.resource_name().split_once('.') {
            Some((plural, group)) => format!("{plural}/{sub}.{group}"),
            None => format!("{}/{sub}", kind.plural),
        };
        ApiError::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
            .with_details(details(kind, name))
    }

    pub fn namespace_not_found(ns: &str) -> Self {
        ApiError::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
            .with_details(json!({"name": ns, "kind": "namespaces"}))
    }

    pub fn already_exists(kind: &Kind, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", kind.resource_name(), name),
        )
        .with_details(details(kind, name))
    }

    pub fn conflict(kind: &Kind, name: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                kind.resource_name(),
                name
            ),
        )
        .with_details(details(kind, name))
    }

    pub fn precondition(kind: &Kind, name: &str, what: &str, want: &str, have: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": Precondition failed: {what} in precondition: {want}, {what} in object meta: {have}",
                kind.resource_name(),
                name
            ),
        )
        .with_details(details(kind, name))
    }

    pub fn forbidden(kind: &Kind, name: &str, why: &str) -> Self {
        ApiError::new(
            403,
            "Forbidden",
            format!(
                "{} \"{}\" is forbidden: {}",
                kind.resource_name(),
                name,
                why
            ),
        )
        .with_details(details(kind, name))
    }

    /// 422 with one field cause, shaped like upstream's `NewInvalid`.
    pub fn invalid(kind: &Kind, name: &str, field: &str, cause_reason: &str, detail: &str) -> Self {
        let msg = format!(
            "{} \"{}\" is invalid: {}: {}",
            kind.kind, name, field, detail
        );
        let mut d = json!({
            "name": name,
            "kind": kind.kind,
            "causes": [{"reason": cause_reason, "message": detail, "field": field}],
        });
        if !kind.group.is_empty() {
            d["group"] = json!(kind.group);
        }
        ApiError::new(422, "Invalid", msg).with_details(d)
    }

    pub fn expired(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

/// `details` of a Status for an object: name, group (when not core), kind = plural.
pub fn details(kind: &Kind, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": kind.plural});
    if !kind.group.is_empty() {
        d["group"] = json!(kind.group);
    }
    d
}

/// A success `Status` as returned by an immediate delete.
pub fn success_status(kind: &Kind, name: &str, uid: &str) -> Value {
    let mut d = details(kind, name);
    d["uid"] = json!(uid);
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}

/// RFC 3339 UTC with second precision, as Kubernetes writes `metav1.Time`.
pub fn format_time(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

pub fn now_rfc3339() -> String {
    format_time(SystemTime::now())
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A random UUID (version 4) in its text form.
pub fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    for x in b.iter_mut() {
        *x = fastrand::u8(..);
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Five characters from the alphabet upstream uses for `generateName` suffixes.
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

/// A random opaque token.
pub fn random_token(len: usize) -> String {
    (0..len).map(|_| fastrand::alphanumeric()).collect()
}

// ---- small JSON accessors -------------------------------------------------------------------

pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str)
}

pub fn name_of(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub fn namespace_of(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or("")
}

pub fn rv_of(obj: &Value) -> u64 {
    meta_str(obj, "resourceVersion")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// `metadata` as a mutable map, created when missing (a non-object becomes `{}` first).
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let holder = match obj {
        Value::Object(o) => o
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new())),
        _ => unreachable!("made an object above"),
    };
    if !holder.is_object() {
        *holder = Value::Object(Map::new());
    }
    match holder {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn set_finalizers(obj: &mut Value, f: &[String]) {
    let m = meta_mut(obj);
    if f.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(f));
    }
}

pub fn is_deleting(obj: &Value) -> bool {
    meta(obj)
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|v| !v.is_null())
}

/// Whether a kind has a `status` subresource (writes to the main resource ignore status).
pub fn has_status_subresource(kind: &Kind) -> bool {
    matches!(
        (kind.group, kind.plural),
        ("", "namespaces")
            | ("", "nodes")
            | ("", "pods")
            | ("", "services")
            | ("", "replicationcontrollers")
            | ("", "persistentvolumes")
            | ("", "persistentvolumeclaims")
            | ("", "resourcequotas")
            | ("apps", "deployments")
            | ("apps", "replicasets")
            | ("apps", "statefulsets")
            | ("apps", "daemonsets")
            | ("batch", "jobs")
            | ("batch", "cronjobs")
            | ("certificates.k8s.io", "certificatesigningrequests")
            | ("policy", "poddisruptionbudgets")
            | ("autoscaling", "horizontalpodautoscalers")
            | ("storage.k8s.io", "volumeattachments")
            | ("networking.k8s.io", "servicecidrs")
            | ("internal.apiserver.k8s.io", "storageversions")
            | ("resource.k8s.io", "resourceclaims")
            | ("resource.k8s.io", "devicetaintrules")
            | ("resource.k8s.io", "resourcepoolstatusrequests")
            | ("apiextensions.k8s.io", "customresourcedefinitions")
            | ("storagemigration.k8s.io", "storageversionmigrations")
            | (
                "admissionregistration.k8s.io",
                "validatingadmissionpolicies"
            )
    )
}

/// Kinds with a `scale` subresource.
pub fn has_scale_subresource(kind: &Kind) -> bool {
    matches!(
        (kind.group, kind.plural),
        ("apps", "deployments")
            | ("apps", "replicasets")
            | ("apps", "statefulsets")
            | ("", "replicationcontrollers")
    )
}

/// Kinds that are only ever created (reviews): never stored.
pub fn is_review(kind: &Kind) -> bool {
    matches!(kind.plural, "tokenreviews" | "subjectaccessreviews")
}

/// Upstream's default garbage-collection policy when a DELETE names none.
pub fn default_propagation(kind: &Kind) -> &'static str {
    match (kind.group, kind.plural) {
        ("", "replicationcontrollers") | ("batch", "jobs") => "Orphan",
        _ => "Background",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn time_format() {
        assert_eq!(format_time(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(format_time(t), "2023-11-14T22:13:20Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(format_time(t), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn uuid_shape() {
        let u = uuid_v4();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"));
        assert_eq!(name_suffix().len(), 5);
    }
}
