//! Deletion: preconditions, propagation policies as finalizers, namespaces that terminate
//! before they go, and objects that wait for their finalizers.

use crate::obj::At as _;
use serde_json::{json, Value};
use std::sync::Arc;

use super::{set_path, DeleteOpts, Deleted, EvType, Kind, State, NAMESPACES};
use crate::sandbox::meta::{
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
        if fins.is_empty() {
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
