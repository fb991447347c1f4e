//! The `endpoints.kubernetes.io/last-change-trigger-time` annotation (endpoints and endpointslice): upstream's
//! `TriggerTimeTracker`. Per Service it remembers the trigger times seen at the last sync (the
//! Service's creation time, each selected pod's `Ready` condition transition time); a sync
//! reports the earliest of those that moved since, or the Service's creation time the first
//! time the Service is seen (after a restart too). None: the annotation is removed.

use crate::obj;
use crate::obj::At as _;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

#[derive(Default)]
struct State {
    service: Option<SystemTime>,
    pods: HashMap<String, SystemTime>,
}

#[derive(Default)]
pub struct Tracker(Mutex<HashMap<String, State>>);

fn time(v: Option<&Value>) -> Option<SystemTime> {
    v.and_then(Value::as_str)
        .and_then(crate::compat::timefmt::parse_rfc3339)
}

/// A pod's trigger time: when its `Ready` condition last changed.
fn pod_time(pod: &Value) -> Option<SystemTime> {
    let ready = pod
        .at("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))?;
    time(ready.get("lastTransitionTime"))
}

fn earliest(a: Option<SystemTime>, b: SystemTime) -> Option<SystemTime> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl Tracker {
    /// `ComputeEndpointLastChangeTriggerTime` for the Service `key` and the pods its selector
    /// selects; the state is updated whether or not the Endpoints are written.
    pub fn compute(&self, key: &str, svc: &Value, pods: &[crate::obj::Obj]) -> Option<SystemTime> {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let known = all.contains_key(key);
        let state = all.entry(key.to_string()).or_default();
        let mut changed: Option<SystemTime> = None;
        let mut seen = HashMap::new();
        for p in pods {
            if let Some(t) = pod_time(p) {
                let name = obj::name(p).to_string();
                if state.pods.get(&name).is_none_or(|last| t > *last) {
                    changed = earliest(changed, t);
                }
                seen.insert(name, t);
            }
        }
        let created = time(svc.at("/metadata/creationTimestamp"));
        if let Some(c) = created {
            if state.service.is_none_or(|last| c > last) {
                changed = earliest(changed, c);
            }
        }
        state.pods = seen;
        state.service = created;
        if known {
            changed
        } else {
            created
        }
    }

    /// The Service is gone.
    pub fn forget(&self, key: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

/// Go's `time.RFC3339Nano` in UTC: fractional seconds only when there are any, without
/// trailing zeros.
pub fn format(t: SystemTime) -> String {
    let whole = crate::compat::timefmt::rfc3339(t);
    let nanos = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.subsec_nanos(),
        Err(e) => (1_000_000_000 - e.duration().subsec_nanos()) % 1_000_000_000,
    };
    if nanos == 0 {
        return whole;
    }
    let frac = format!("{nanos:09}");
    let frac = frac.trim_end_matches('0');
    format!("{}.{frac}Z", &whole[..whole.len() - 1])
}
