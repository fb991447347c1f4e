//! The cleaner's decisions, pure: what to do with one token Secret, the tracking
//! ConfigMap's date, the Secret names a pod references.

use crate::obj::{self, At as _};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::{Duration, SystemTime};

pub const LAST_USED: &str = "kubernetes.io/legacy-token-last-used";
pub const INVALID_SINCE: &str = "kubernetes.io/legacy-token-invalid-since";
const DAY: Duration = Duration::from_secs(24 * 3600);

/// What one pass knows about one Secret.
pub struct Facts<'a> {
    pub secret: &'a Value,
    /// Its ServiceAccount by the `kubernetes.io/service-account.name` annotation, if cached.
    pub service_account: Option<&'a Value>,
    /// The Secret names the pods of its namespace reference.
    pub mounted: &'a HashSet<String>,
    pub now: SystemTime,
    pub period: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Keep,
    /// Its last-used label is not a date (logged, kept).
    BadLastUsed(String),
    /// Label it invalid since this date.
    MarkInvalid(String),
    Delete,
}

/// A time's date in UTC, as Go formats `2006-01-02`.
pub fn date(t: SystemTime) -> String {
    crate::compat::timefmt::rfc3339(t)[..10].to_string()
}

/// Go's `time.Parse("2006-01-02", s)`: midnight UTC of that day, or Go's complaint.
pub fn parse_date(s: &str) -> Result<SystemTime, String> {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b.get(r.clone())
            .filter(|d| d.iter().all(u8::is_ascii_digit))
            .map(|_| s[r].parse::<u32>().unwrap_or(0))
    };
    let bad = || format!("parsing time {s:?} as \"2006-01-02\": cannot parse {s:?} as \"2006\"");
    let (Some(y), Some(m), Some(d)) = (digits(0..4), digits(5..7), digits(8..10)) else {
        return Err(bad());
    };
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad());
    }
    if !(1..=12).contains(&m) {
        return Err(format!("parsing time {s:?}: month out of range"));
    }
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if d < 1 || d > days[m as usize - 1] {
        return Err(format!("parsing time {s:?}: day out of range"));
    }
    crate::compat::timefmt::parse_rfc3339(&format!("{s}T00:00:00Z")).ok_or_else(bad)
}

/// `latestPossibleTrackedSinceTime`: the day after the ConfigMap's `since` date.
pub fn tracked_since(cm: &Value) -> Result<SystemTime, String> {
    let Some(since) = cm.at("/data/since").and_then(Value::as_str) else {
        return Err("configMap does not have since label".into());
    };
    parse_date(since)
        .map(|t| t + DAY)
        .map_err(|e| format!("error parsing trackedSince time: {e}"))
}

fn label<'a>(o: &'a Value, k: &str) -> Option<&'a str> {
    obj::labels(o)
        .and_then(|l| l.get(k))
        .and_then(Value::as_str)
}

/// The loop body of `evaluateSATokens`, in its order.
pub fn decide(f: &Facts) -> Decision {
    let s = f.secret;
    if s.get("type").and_then(Value::as_str) != Some("kubernetes.io/service-account-token") {
        return Decision::Keep;
    }
    let cutoff = f
        .now
        .checked_sub(f.period)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let created = s
        .at("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(crate::compat::timefmt::parse_rfc3339)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    if created >= cutoff
        || s.at("/metadata/deletionTimestamp")
            .is_some_and(|v| !v.is_null())
    {
        return Decision::Keep;
    }
    let preserve = date(cutoff);
    if let Some(used) = label(s, LAST_USED) {
        if let Err(e) = parse_date(used) {
            return Decision::BadLastUsed(e);
        }
        if used >= preserve.as_str() {
            return Decision::Keep;
        }
    }
    let Some(sa) = f.service_account else {
        return Decision::Keep;
    };
    let want_uid = s
        .at("/metadata/annotations/kubernetes.io~1service-account.uid")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !want_uid.is_empty() && want_uid != obj::uid(sa) {
        return Decision::Keep;
    }
    let name = obj::name(s);
    let listed = sa
        .get("secrets")
        .and_then(Value::as_array)
        .is_some_and(|l| {
            l.iter()
                .any(|r| r.get("name").and_then(Value::as_str) == Some(name))
        });
    if !listed || f.mounted.contains(name) {
        return Decision::Keep;
    }
    match label(s, INVALID_SINCE).filter(|v| parse_date(v).is_ok()) {
        None => Decision::MarkInvalid(date(f.now)),
        Some(since) if since >= preserve.as_str() => Decision::Keep,
        Some(_) => Decision::Delete,
    }
}

/// The merge patch upstream marshals from `applyv1.Secret(name, ns).WithUID(uid).WithLabels(...)`.
pub fn invalid_since_patch(secret: &Value, since: &str) -> Value {
    json!({"kind": "Secret", "apiVersion": "v1", "metadata": {
        "name": obj::name(secret), "namespace": obj::namespace(secret),
        "uid": obj::uid(secret), "labels": {INVALID_SINCE: since}}})
}

/// `VisitPodSecretNames`: image pull secrets, containers' (all kinds) `envFrom` and `env`
/// secret references, and the Secret names of its volumes (the first source a volume has, in
/// upstream's order), empty names skipped.
pub fn pod_secret_names(pod: &Value, visit: &mut dyn FnMut(&str)) {
    let mut v = |n: Option<&Value>| {
        if let Some(n) = n.and_then(Value::as_str).filter(|n| !n.is_empty()) {
            visit(n);
        }
    };
    let list = |p: &str| -> &[Value] {
        pod.at(p)
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    };
    for r in list("/spec/imagePullSecrets") {
        v(r.get("name"));
    }
    for kind in ["initContainers", "containers", "ephemeralContainers"] {
        for c in list(&format!("/spec/{kind}")) {
            for e in c
                .get("envFrom")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                v(e.at("/secretRef/name"));
            }
            for e in c.get("env").and_then(Value::as_array).into_iter().flatten() {
                v(e.at("/valueFrom/secretKeyRef/name"));
            }
        }
    }
    const SOURCES: [(&str, &str); 12] = [
        ("azureFile", "/secretName"),
        ("cephfs", "/secretRef/name"),
        ("cinder", "/secretRef/name"),
        ("flexVolume", "/secretRef/name"),
        ("projected", ""),
        ("rbd", "/secretRef/name"),
        ("secret", "/secretName"),
        ("scaleIO", "/secretRef/name"),
        ("iscsi", "/secretRef/name"),
        ("storageos", "/secretRef/name"),
        ("csi", "/nodePublishSecretRef/name"),
        ("", ""),
    ];
    for vol in list("/spec/volumes") {
        let Some((src, path)) = SOURCES
            .iter()
            .find(|(k, _)| !k.is_empty() && vol.get(*k).is_some_and(|s| !s.is_null()))
        else {
            continue;
        };
        let s = &vol[*src];
        if *src == "projected" {
            for p in s
                .get("sources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                v(p.at("/secret/name"));
            }
        } else {
            v(s.at(path));
        }
    }
}
