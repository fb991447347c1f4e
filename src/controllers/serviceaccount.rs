//! serviceaccount-controller: a `default` ServiceAccount in every active namespace,
//! re-created if deleted.

use super::{Action, Controller, Cx, Outcome, Watch};
use crate::api::resources::{NAMESPACES, SERVICEACCOUNTS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::Result;
use crate::obj;
use crate::obj::At as _;
use serde_json::json;

/// The ServiceAccounts ensured in every namespace (upstream's default options: `default`).
pub const MANAGED: &[&str] = &["default"];

/// Its row in the controller table (one worker, as upstream).
pub fn build(_: &super::registry::BuildCx<'_>) -> Result<Option<super::Runnable>> {
    Ok(Some(super::Runnable::reconciles(ServiceAccountController)))
}

pub struct ServiceAccountController;

impl Controller for ServiceAccountController {
    fn name(&self) -> &'static str {
        "serviceaccount-controller"
    }
    fn queue_name(&self) -> &'static str {
        "serviceaccount"
    }

    fn watches(&self) -> Vec<Watch> {
        vec![Watch::full(NAMESPACES), Watch::full(SERVICEACCOUNTS)]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _cache: &Cache) -> Vec<String> {
        let o = d.object();
        if w.kind == NAMESPACES {
            return super::namespace_key(d);
        }
        // A managed ServiceAccount went away: look at its namespace again.
        if d.kind == DeltaKind::Deleted && MANAGED.contains(&obj::name(o)) {
            return vec![obj::namespace(o).to_string()];
        }
        vec![]
    }

    fn reconcile(&self, cx: &Cx, ns: &str) -> Result<Outcome> {
        let Some(namespace) = cx.cache.store(NAMESPACES).get(ns) else {
            return Ok(Outcome::none());
        };
        // Only active namespaces get ServiceAccounts.
        let phase = namespace
            .at("/status/phase")
            .and_then(|p| p.as_str())
            .unwrap_or("Active");
        if phase != "Active" || obj::is_deleting(&namespace) {
            return Ok(Outcome::none());
        }
        let sas = cx.cache.store(SERVICEACCOUNTS);
        let actions = MANAGED
            .iter()
            .filter(|name| sas.get_in(ns, name).is_none())
            .map(|name| Action::Create {
                kind: SERVICEACCOUNTS,
                namespace: ns.to_string(),
                object: json!({
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": name},
                }),
            })
            .collect();
        Ok(Outcome::with(actions))
    }

    fn on_error(&self, _a: &Action, err: &crate::Error) -> super::OnError {
        // Exists already, or the namespace went away / is terminating: nothing to do.
        if err.is_already_exists() || err.is_not_found() || err.is_namespace_terminating() {
            super::OnError::Ignore
        } else {
            super::OnError::Retry
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testutil::cx_with;
    use serde_json::json;

    #[test]
    fn creates_default_in_active_namespace_only() {
        let (cache, client) = cx_with(&[
            (
                NAMESPACES,
                json!({"metadata":{"name":"a","resourceVersion":"1"},"status":{"phase":"Active"}}),
            ),
            (
                NAMESPACES,
                json!({"metadata":{"name":"t","resourceVersion":"2","deletionTimestamp":"2024-01-01T00:00:00Z"},"status":{"phase":"Terminating"}}),
            ),
            (
                NAMESPACES,
                json!({"metadata":{"name":"b","resourceVersion":"3"},"status":{"phase":"Active"}}),
            ),
            (
                SERVICEACCOUNTS,
                json!({"metadata":{"name":"default","namespace":"b","resourceVersion":"4"}}),
            ),
        ]);
        let cx = Cx {
            cache: &cache,
            now: std::time::SystemTime::now(),
            client: &client,
        };
        let c = ServiceAccountController;
        let out = c.reconcile(&cx, "a").expect("reconcile");
        assert_eq!(out.actions.len(), 1);
        match &out.actions[0] {
            Action::Create {
                kind,
                namespace,
                object,
            } => {
                assert_eq!(*kind, SERVICEACCOUNTS);
                assert_eq!(namespace, "a");
                assert_eq!(object["metadata"]["name"], "default");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(c.reconcile(&cx, "t").expect("reconcile").actions.is_empty());
        assert!(c.reconcile(&cx, "b").expect("reconcile").actions.is_empty());
        assert!(c
            .reconcile(&cx, "missing")
            .expect("reconcile")
            .actions
            .is_empty());
    }

    #[test]
    fn deleted_default_sa_requeues_its_namespace() {
        let (cache, _) = cx_with(&[]);
        let c = ServiceAccountController;
        let sa = std::sync::Arc::new(json!({"metadata":{"name":"default","namespace":"x"}}));
        let d = Delta {
            kind: DeltaKind::Deleted,
            old: Some(sa),
            new: None,
        };
        assert_eq!(
            c.keys_for(&Watch::full(SERVICEACCOUNTS), &d, &cache),
            vec!["x".to_string()]
        );
        let other = std::sync::Arc::new(json!({"metadata":{"name":"builder","namespace":"x"}}));
        let d = Delta {
            kind: DeltaKind::Deleted,
            old: Some(other),
            new: None,
        };
        assert!(c
            .keys_for(&Watch::full(SERVICEACCOUNTS), &d, &cache)
            .is_empty());
    }

    #[test]
    fn terminating_namespace_errors_are_ignored() {
        let e = crate::Error::api(403, "Forbidden", "serviceaccounts \"default\" is forbidden: unable to create new content in namespace x because it is being terminated");
        assert!(e.is_namespace_terminating());
    }
}
