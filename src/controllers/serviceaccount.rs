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
pub fn build(_: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    Ok(Some(super::Runnable::reconciles(ServiceAccountController)))
}

pub struct ServiceAccountController;

impl Controller for ServiceAccountController {
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
    use crate::controllers::testing::Harness;
    use serde_json::json;

    #[test]
    fn creates_default_in_active_namespace_only() {
        let mut h = Harness::new(ServiceAccountController);
        h.add(
            NAMESPACES,
            json!({"metadata":{"name":"a","resourceVersion":"1"},"status":{"phase":"Active"}}),
        )
        .add(
            NAMESPACES,
            json!({"metadata":{"name":"t","resourceVersion":"2","deletionTimestamp":"2024-01-01T00:00:00Z"},"status":{"phase":"Terminating"}}),
        )
        .add(
            NAMESPACES,
            json!({"metadata":{"name":"b","resourceVersion":"3"},"status":{"phase":"Active"}}),
        )
        .add(
            SERVICEACCOUNTS,
            json!({"metadata":{"name":"default","namespace":"b","resourceVersion":"4"}}),
        );
        // Every namespace is looked at; the ServiceAccount's own event names its namespace.
        assert_eq!(h.take_queued(), ["a", "b", "t"]);
        let w = h.sync("a");
        assert_eq!(w.created_names(), ["default"]);
        assert_eq!(w.creates[0].0, SERVICEACCOUNTS);
        assert!(w.updates.is_empty() && w.deletes.is_empty() && w.events.is_empty());
        assert!(h.sync("t").is_empty());
        assert!(h.sync("b").is_empty());
        assert!(h.sync("missing").is_empty());
    }

    #[test]
    fn deleted_default_sa_requeues_its_namespace() {
        let mut h = Harness::new(ServiceAccountController);
        h.delete(
            SERVICEACCOUNTS,
            json!({"metadata":{"name":"default","namespace":"x"}}),
        );
        assert_eq!(h.take_queued(), ["x"]);
        h.delete(
            SERVICEACCOUNTS,
            json!({"metadata":{"name":"builder","namespace":"x"}}),
        );
        assert!(h.take_queued().is_empty());
    }

    #[test]
    fn terminating_namespace_errors_are_ignored() {
        let e = crate::Error::api(403, "Forbidden", "serviceaccounts \"default\" is forbidden: unable to create new content in namespace x because it is being terminated");
        assert!(e.is_namespace_terminating());
    }
}
