//! Deletion: preconditions, propagation policies as finalizers, namespaces that terminate
//! before they go, and objects that wait for their finalizers.

use edgekcm::obj::At as _;
use serde_json::{json, Value};
use std::sync::Arc;

use super::{set_path, DeleteOpts, Deleted, EvType, Kind, State, NAMESPACES};
use crate::meta::{
    self, finalizers, is_deleting, meta_mut, meta_str, now_rfc3339, rv_of, set_finalizers, ApiError,
};

/// Namespaces that can not be deleted.
pub const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

impl State {
    /// Remove an object for good (a DELETED event with its last state).
    pub(super) fn remove(&mut self, kind: &Kind, last: Value, old: Arc<Value>) -> Arc<Value> {
        if kind.group == "apiextensions.k8s.io" && kind.plural == "customresourcedefinitions" {
            self.crd_removed(&last);
        }
        self.commit(kind, EvType::Deleted, last, Some(old))
    }

    pub fn delete(
        &mut self,
        kind: &Kind,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Deleted, ApiError> {
        let old = self
            .get(kind, ns, name)
            .ok_or_else(|| ApiError::not_found(kind, name))?;
        let old_uid = meta_str(&old, "uid").unwrap_or("");
        if let Some(uid) = opts.uid.as_deref() {
            if uid != old_uid {
                return Err(ApiError::precondition(kind, name, "UID", uid, old_uid));
            }
        }
        if let Some(rv) = opts.resource_version.as_deref() {
            let have = rv_of(&old).to_string();
            if rv != have {
                return Err(ApiError::precondition(
                    kind,
                    name,
                    "ResourceVersion",
                    rv,
                    &have,
                ));
            }
        }
        let mut obj = (*old).clone();
        if *kind == NAMESPACES {
            if IMMORTAL_NAMESPACES.contains(&name) {
                return Err(ApiError::forbidden(
                    kind,
                    name,
                    "this namespace may not be deleted",
                ));
            }
            if !is_deleting(&obj) {
                meta_mut(&mut obj).insert("deletionTimestamp".into(), json!(now_rfc3339()));
            }
            set_path(&mut obj, &["status", "phase"], Some(json!("Terminating")));
            let spec_empty = obj
                .at("/spec/finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
            if spec_empty && finalizers(&obj).is_empty() {
                return Ok(Deleted::Now(self.remove(kind, obj, old)));
            }
            if obj == *old {
                return Ok(Deleted::Pending(old));
            }
            return Ok(Deleted::Pending(self.commit(
                kind,
                EvType::Modified,
                obj,
                Some(old),
            )));
        }
        let is_pod = kind.group.is_empty() && kind.plural == "pods";
        let mut waits = false;
        if is_pod {
            match pod_grace(&mut obj, opts) {
                Grace::Pending => return Ok(Deleted::Pending(old)),
                Grace::Period(p) => waits = p > 0,
                Grace::None => {}
            }
        }
        let policy = match (opts.propagation.as_deref(), opts.orphan_dependents) {
            (Some(p @ ("Orphan" | "Foreground" | "Background")), _) => Some(p),
            (Some(other), _) => {
                return Err(ApiError::invalid(
                    kind,
                    name,
                    "propagationPolicy",
                    "FieldValueNotSupported",
                    &format!("Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""),
                ))
            }
            (None, Some(true)) => Some("Orphan"),
            (None, Some(false)) => Some("Background"),
            (None, None) => None,
        };
        let mut fins = finalizers(&obj);
        let add = |fins: &mut Vec<String>, f: &str| {
            if !fins.iter().any(|x| x == f) {
                fins.push(f.to_string());
            }
        };
        match policy {
            Some("Orphan") => {
                fins.retain(|f| f != "foregroundDeletion");
                add(&mut fins, "orphan");
            }
            Some("Foreground") => {
                fins.retain(|f| f != "orphan");
                add(&mut fins, "foregroundDeletion");
            }
            Some(_) => fins.retain(|f| f != "orphan" && f != "foregroundDeletion"),
            None => {
                if !is_deleting(&obj)
                    && meta::default_propagation(kind) == "Orphan"
                    && !fins.iter().any(|f| f == "foregroundDeletion")
                {
                    add(&mut fins, "orphan");
                }
            }
        }
        set_finalizers(&mut obj, &fins);
        if fins.is_empty() && !waits {
            return Ok(Deleted::Now(self.remove(kind, obj, old)));
        }
        if !is_deleting(&obj) {
            let g = obj
                .at("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let m = meta_mut(&mut obj);
            m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            m.insert("generation".into(), json!(g + 1));
        }
        if obj == *old {
            return Ok(Deleted::Pending(old));
        }
        Ok(Deleted::Pending(self.commit(
            kind,
            EvType::Modified,
            obj,
            Some(old),
        )))
    }
}

/// How a pod's delete goes (kube-apiserver's `rest.BeforeDelete` with the pod strategy's
/// `CheckGracefulDelete`).
enum Grace {
    /// Not graceful: deleted now, or marked deleting while finalizers remain.
    None,
    /// A graceful deletion already waits and this request does not shorten it: nothing changes.
    Pending,
    /// Graceful with this period, already written into the pod: a period above 0 waits for
    /// the kubelet (which the sandbox does not have: it waits until a delete with 0).
    Period(i64),
}

fn meta_i64(o: &Value, f: &str) -> Option<i64> {
    o.get("metadata")?.get(f)?.as_i64()
}

fn pod_grace(pod: &mut Value, opts: &DeleteOpts) -> Grace {
    // Negative values mean one second.
    let asked = opts.grace_period_seconds.map(|g| if g < 0 { 1 } else { g });
    let at = |secs: i64| {
        let now = std::time::SystemTime::now();
        let d = std::time::Duration::from_secs(secs.unsigned_abs());
        meta::format_time(if secs >= 0 { now + d } else { now - d })
    };
    if is_deleting(pod) {
        let current = meta_i64(pod, "deletionGracePeriodSeconds").unwrap_or(0);
        if current <= 0 {
            return Grace::None;
        }
        let Some(period) = asked.filter(|p| *p < current) else {
            return Grace::Pending;
        };
        // Only a shorter grace period may be given: the deadline moves earlier.
        let deadline = pod
            .at("/metadata/deletionTimestamp")
            .and_then(Value::as_str)
            .and_then(edgekcm::compat::timefmt::parse_rfc3339)
            .map(|t| t - std::time::Duration::from_secs((current - period) as u64))
            .map(meta::format_time)
            .unwrap_or_else(|| at(period));
        let m = meta_mut(pod);
        m.insert("deletionTimestamp".into(), json!(deadline));
        m.insert("deletionGracePeriodSeconds".into(), json!(period));
        return Grace::Period(period);
    }
    let mut period = asked.unwrap_or_else(|| {
        pod.at("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    });
    let bound = pod
        .at("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = pod.at("/status/phase").and_then(Value::as_str);
    if !bound || matches!(phase, Some("Succeeded" | "Failed")) {
        period = 0;
    }
    if period == 0 {
        return Grace::None;
    }
    let g = meta_i64(pod, "generation").unwrap_or(0);
    let m = meta_mut(pod);
    m.insert("deletionTimestamp".into(), json!(at(period)));
    m.insert("deletionGracePeriodSeconds".into(), json!(period));
    if g > 0 {
        m.insert("generation".into(), json!(g + 1));
    }
    Grace::Period(period)
}

#[cfg(test)]
mod tests {
    use super::super::{DeleteOpts, Deleted, State, WriteMode};
    use edgekcm::api::resources::PODS;
    use serde_json::{json, Value};

    fn pod(s: &mut State, name: &str, node: &str, phase: &str, fins: &[&str]) {
        let p = json!({"metadata": {"name": name, "namespace": "default", "finalizers": fins},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}});
        s.create(&PODS, None, p).unwrap();
        let mut p = (*s.get(&PODS, "default", name).unwrap()).clone();
        p["status"]["phase"] = json!(phase);
        s.update(&PODS, "default", name, p, WriteMode::Status)
            .unwrap();
    }

    fn grace(g: Option<i64>) -> DeleteOpts {
        DeleteOpts {
            grace_period_seconds: g,
            ..DeleteOpts::default()
        }
    }

    fn meta(s: &State, name: &str) -> Option<Value> {
        s.get(&PODS, "default", name).map(|p| p["metadata"].clone())
    }

    #[test]
    fn pods_bound_to_a_node_wait_for_their_grace_period_as_on_kube_apiserver() {
        let mut s = State::new(100);
        // Bound and running: the pod's own 30 s (defaulted), kept until a delete with 0.
        pod(&mut s, "run", "n1", "Running", &[]);
        let d = s.delete(&PODS, "default", "run", &grace(None)).unwrap();
        assert!(matches!(d, Deleted::Pending(_)));
        let m = meta(&s, "run").unwrap();
        assert_eq!(m["deletionGracePeriodSeconds"], 30);
        let deadline =
            edgekcm::compat::timefmt::parse_rfc3339(m["deletionTimestamp"].as_str().unwrap());
        assert!(deadline.unwrap() > std::time::SystemTime::now());
        // Asking again changes nothing; a longer period neither; a shorter one moves the
        // deadline; 0 deletes.
        let rv = m["resourceVersion"].clone();
        s.delete(&PODS, "default", "run", &grace(None)).unwrap();
        s.delete(&PODS, "default", "run", &grace(Some(60))).unwrap();
        assert_eq!(meta(&s, "run").unwrap()["resourceVersion"], rv);
        s.delete(&PODS, "default", "run", &grace(Some(10))).unwrap();
        assert_eq!(meta(&s, "run").unwrap()["deletionGracePeriodSeconds"], 10);
        let d = s.delete(&PODS, "default", "run", &grace(Some(0))).unwrap();
        assert!(matches!(d, Deleted::Now(_)));
        // Unscheduled, or terminal: at once whatever was asked.
        pod(&mut s, "unscheduled", "", "Pending", &[]);
        pod(&mut s, "done", "n1", "Succeeded", &[]);
        for name in ["unscheduled", "done"] {
            let d = s.delete(&PODS, "default", name, &grace(Some(30))).unwrap();
            assert!(matches!(d, Deleted::Now(_)), "{name}");
        }
        // A finalizer keeps a pod deleted with 0, with grace 0.
        pod(&mut s, "held", "n1", "Running", &["example.com/hold"]);
        s.delete(&PODS, "default", "held", &grace(Some(0))).unwrap();
        assert_eq!(meta(&s, "held").unwrap()["deletionGracePeriodSeconds"], 0);
        // A graceful deletion shortened to 0 with a finalizer: kept, at 0.
        pod(&mut s, "held2", "n1", "Running", &["example.com/hold"]);
        s.delete(&PODS, "default", "held2", &grace(Some(30)))
            .unwrap();
        assert_eq!(meta(&s, "held2").unwrap()["deletionGracePeriodSeconds"], 30);
        s.delete(&PODS, "default", "held2", &grace(Some(0)))
            .unwrap();
        assert_eq!(meta(&s, "held2").unwrap()["deletionGracePeriodSeconds"], 0);
    }
}
