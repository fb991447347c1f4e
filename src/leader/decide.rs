//! The pure part: the election record as a Lease holds it, and what one attempt should do.

use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Map, Value};

use crate::compat::timefmt;

/// The leader election record as stored in a Lease's spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    pub holder_identity: String,
    pub lease_duration_seconds: i64,
    pub acquire_time: Option<SystemTime>,
    pub renew_time: Option<SystemTime>,
    pub lease_transitions: i64,
}

impl LeaseRecord {
    /// Read the record from a Lease object; absent fields read as empty/zero.
    pub fn from_lease(lease: &Value) -> Self {
        let spec = &lease["spec"];
        let time = |f: &str| spec[f].as_str().and_then(timefmt::parse_rfc3339);
        LeaseRecord {
            holder_identity: spec["holderIdentity"].as_str().unwrap_or("").to_string(),
            lease_duration_seconds: spec["leaseDurationSeconds"].as_i64().unwrap_or(0),
            acquire_time: time("acquireTime"),
            renew_time: time("renewTime"),
            lease_transitions: spec["leaseTransitions"].as_i64().unwrap_or(0),
        }
    }

    /// Write the record into `lease.spec`, leaving every other field of the object alone.
    pub fn write_into(&self, lease: &mut Value) {
        if !lease.is_object() {
            *lease = Value::Object(Map::new());
        }
        let Some(obj) = lease.as_object_mut() else {
            return;
        };
        let spec = obj
            .entry("spec")
            .or_insert_with(|| Value::Object(Map::new()));
        if !spec.is_object() {
            *spec = Value::Object(Map::new());
        }
        let Some(spec) = spec.as_object_mut() else {
            return;
        };
        let time = |t: Option<SystemTime>| match t {
            Some(t) => Value::String(timefmt::rfc3339_micro(t)),
            None => Value::Null,
        };
        spec.insert("holderIdentity".into(), json!(self.holder_identity));
        spec.insert(
            "leaseDurationSeconds".into(),
            json!(self.lease_duration_seconds),
        );
        spec.insert("acquireTime".into(), time(self.acquire_time));
        spec.insert("renewTime".into(), time(self.renew_time));
        spec.insert("leaseTransitions".into(), json!(self.lease_transitions));
    }

    /// A new Lease object holding this record, for POST.
    pub fn new_lease(&self, namespace: &str, name: &str) -> Value {
        let mut lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
        });
        self.write_into(&mut lease);
        lease
    }

    /// The record that gives the lease up, as client-go's `release` (`ReleaseOnCancel`)
    /// writes it: no holder, a one-second duration, acquire and renew times both `now`, the
    /// transition count kept. A candidate takes a lease without a holder at once.
    pub fn released(&self, now: SystemTime) -> LeaseRecord {
        LeaseRecord {
            holder_identity: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(now),
            renew_time: Some(now),
            lease_transitions: self.lease_transitions,
        }
    }
}

/// What one acquire-or-renew attempt should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No Lease exists: create it naming us (transitions 0).
    Create,
    /// Someone else holds an unexpired lease.
    Wait(String),
    /// We hold it: keep acquireTime and leaseTransitions, bump renewTime.
    Renew,
    /// Free or expired: take it with this transition count and a new acquireTime.
    TakeOver(i64),
}

/// The pure decision. `observed_at` is the local time at which `current` was first seen in its
/// present form; the lease is valid until `observed_at + current.lease_duration_seconds`.
pub fn decide(
    current: Option<&LeaseRecord>,
    observed_at: Instant,
    me: &str,
    now: Instant,
) -> Decision {
    let Some(cur) = current else {
        return Decision::Create;
    };
    let duration = Duration::from_secs(cur.lease_duration_seconds.max(0) as u64);
    let valid = observed_at
        .checked_add(duration)
        .is_none_or(|expiry| expiry > now);
    if !cur.holder_identity.is_empty() && valid && cur.holder_identity != me {
        return Decision::Wait(cur.holder_identity.clone());
    }
    if cur.holder_identity == me {
        Decision::Renew
    } else {
        Decision::TakeOver(cur.lease_transitions + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decide_table() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let rec = |holder: &str, secs: i64, tr: i64| LeaseRecord {
            holder_identity: holder.into(),
            lease_duration_seconds: secs,
            lease_transitions: tr,
            ..Default::default()
        };
        let cases: Vec<(Option<LeaseRecord>, Duration, Decision)> = vec![
            (None, s(0), Decision::Create),
            (
                Some(rec("other", 15, 3)),
                s(0),
                Decision::Wait("other".into()),
            ),
            (
                Some(rec("other", 15, 3)),
                s(14),
                Decision::Wait("other".into()),
            ),
            // Exactly at expiry the lease is no longer valid.
            (Some(rec("other", 15, 3)), s(15), Decision::TakeOver(4)),
            (Some(rec("other", 15, 3)), s(100), Decision::TakeOver(4)),
            (Some(rec("me", 15, 3)), s(0), Decision::Renew),
            // Our own lease, even expired, is renewed (acquireTime and transitions kept).
            (Some(rec("me", 15, 3)), s(100), Decision::Renew),
            // Released / empty holder: take it at once.
            (Some(rec("", 15, 7)), s(0), Decision::TakeOver(8)),
            // A zero duration expires immediately.
            (Some(rec("other", 0, 0)), s(0), Decision::TakeOver(1)),
            // A one-second lease (the duration a release writes) held by someone else is
            // valid for one second from when it was seen.
            (
                Some(rec("other", 1, 2)),
                Duration::from_millis(999),
                Decision::Wait("other".into()),
            ),
            (Some(rec("other", 1, 2)), s(1), Decision::TakeOver(3)),
        ];
        for (cur, elapsed, want) in cases {
            assert_eq!(
                decide(cur.as_ref(), t0, "me", t0 + elapsed),
                want,
                "{cur:?} after {elapsed:?}"
            );
        }
    }

    #[test]
    fn record_round_trip_keeps_unknown_fields() {
        let mut lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "kube-controller-manager", "namespace": "kube-system",
                         "resourceVersion": "42", "labels": {"x": "y"}},
            "spec": {
                "holderIdentity": "old",
                "leaseDurationSeconds": 15,
                "acquireTime": "2024-01-02T03:04:05.123456Z",
                "renewTime": "2024-01-02T03:04:06.000001Z",
                "leaseTransitions": 2,
                "preferredHolder": "keep-me"
            }
        });
        let r = LeaseRecord::from_lease(&lease);
        assert_eq!(r.holder_identity, "old");
        assert_eq!(r.lease_duration_seconds, 15);
        assert_eq!(r.lease_transitions, 2);
        assert_eq!(
            r.acquire_time,
            timefmt::parse_rfc3339("2024-01-02T03:04:05.123456Z")
        );
        let new = LeaseRecord {
            holder_identity: "me".into(),
            lease_transitions: 3,
            ..r.clone()
        };
        new.write_into(&mut lease);
        assert_eq!(lease["metadata"]["resourceVersion"], "42");
        assert_eq!(lease["metadata"]["labels"]["x"], "y");
        assert_eq!(lease["spec"]["preferredHolder"], "keep-me");
        assert_eq!(lease["spec"]["holderIdentity"], "me");
        assert_eq!(lease["spec"]["leaseTransitions"], 3);
        assert_eq!(lease["spec"]["acquireTime"], "2024-01-02T03:04:05.123456Z");
        assert_eq!(lease["spec"]["renewTime"], "2024-01-02T03:04:06.000001Z");
        assert_eq!(LeaseRecord::from_lease(&lease), new);
        // Missing spec reads as the empty record.
        assert_eq!(LeaseRecord::from_lease(&json!({})), LeaseRecord::default());
        let mut odd = json!("not an object");
        new.write_into(&mut odd);
        assert_eq!(odd["spec"]["holderIdentity"], "me");
    }

    #[test]
    fn released_record_is_free_at_once() {
        let held = LeaseRecord {
            holder_identity: "a".into(),
            lease_duration_seconds: 15,
            acquire_time: timefmt::parse_rfc3339("2024-01-02T03:04:05Z"),
            renew_time: timefmt::parse_rfc3339("2024-01-02T03:05:00Z"),
            lease_transitions: 6,
        };
        let now = timefmt::parse_rfc3339("2024-01-02T03:05:01.5Z").unwrap();
        let r = held.released(now);
        assert_eq!(
            r,
            LeaseRecord {
                holder_identity: String::new(),
                lease_duration_seconds: 1,
                acquire_time: Some(now),
                renew_time: Some(now),
                lease_transitions: 6,
            }
        );
        // As a Lease: an empty holder (not an absent one), as client-go writes it.
        let mut lease = json!({"metadata": {"resourceVersion": "9"}});
        r.write_into(&mut lease);
        assert_eq!(lease["spec"]["holderIdentity"], "");
        assert_eq!(lease["spec"]["leaseDurationSeconds"], 1);
        assert_eq!(lease["spec"]["acquireTime"], "2024-01-02T03:05:01.500000Z");
        assert_eq!(lease["spec"]["renewTime"], lease["spec"]["acquireTime"]);
        assert_eq!(lease["spec"]["leaseTransitions"], 6);
        assert_eq!(lease["metadata"]["resourceVersion"], "9");
        // Another candidate takes it the moment it sees it; so would the old holder.
        let t0 = Instant::now();
        assert_eq!(decide(Some(&r), t0, "b", t0), Decision::TakeOver(7));
        assert_eq!(decide(Some(&r), t0, "a", t0), Decision::TakeOver(7));
    }
}
