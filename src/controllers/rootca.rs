//! root-ca-certificate-publisher-controller: ConfigMap `kube-root-ca.crt` with `ca.crt` in
//! every namespace, kept equal to the cluster's root CA. Each namespace's sync is counted and
//! timed by its HTTP code (`root_ca_cert_publisher_sync_total`,
//! `root_ca_cert_publisher_sync_duration_seconds`), as upstream's.

use super::kit::syncsbycode::SyncsByCode;
use super::{Action, Controller, Cx, OnError, Outcome, SyncEnd, Watch};
use crate::api::resources::{CONFIGMAPS, NAMESPACES};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::Result;
use crate::obj;
use serde_json::{json, Value};

pub const CONFIGMAP_NAME: &str = "kube-root-ca.crt";
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
/// The text upstream writes into the description annotation.
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// Only the well-known ConfigMap is watched, not every ConfigMap in the cluster.
pub const CONFIGMAP_WATCH: Watch = Watch::named(CONFIGMAPS, "metadata.name=kube-root-ca.crt");

/// `root_ca_cert_publisher_sync_total` and `..._sync_duration_seconds` (upstream gives both
/// the same help text).
pub static METRICS: SyncsByCode = SyncsByCode::new(
    "root_ca_cert_publisher",
    "Number of namespace syncs happened in root ca cert publisher.",
    "Number of namespace syncs happened in root ca cert publisher.",
);

/// Its row in the controller table: the CA published is `--root-ca-file`, else the
/// kubeconfig's inline CA.
pub fn build(cx: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    let root_ca = match &cx.cfg.sa_controller.root_ca_file {
        Some(p) => String::from_utf8_lossy(&crate::config::files::read_ca(p)?).into_owned(),
        None => cx
            .rest
            .ca_inline
            .as_ref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default(),
    };
    crate::metrics::register_collector("rootca", std::sync::Arc::new(|| METRICS.families()));
    Ok(Some(super::Runnable::reconciles(RootCaPublisher {
        root_ca,
    })))
}

pub struct RootCaPublisher {
    /// PEM bundle published as `ca.crt` (from --root-ca-file, else the kubeconfig's inline CA).
    pub root_ca: String,
}

impl RootCaPublisher {
    fn desired_data(&self) -> Value {
        json!({ "ca.crt": self.root_ca })
    }
}

impl Controller for RootCaPublisher {
    fn watches(&self) -> Vec<Watch> {
        vec![Watch::full(NAMESPACES), CONFIGMAP_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _cache: &Cache) -> Vec<String> {
        let o = d.object();
        if w.kind == NAMESPACES {
            return super::namespace_key(d);
        }
        if obj::name(o) != CONFIGMAP_NAME {
            return vec![];
        }
        match d.kind {
            DeltaKind::Deleted => vec![obj::namespace(o).to_string()],
            // Someone edited it: put it back if it no longer matches.
            DeltaKind::Updated | DeltaKind::Added => {
                let matches = o.get("data") == Some(&self.desired_data())
                    && obj::annotation(o, DESCRIPTION_ANNOTATION).is_some_and(|a| !a.is_empty());
                if matches {
                    vec![]
                } else {
                    vec![obj::namespace(o).to_string()]
                }
            }
        }
    }

    fn reconcile(&self, cx: &Cx, ns: &str) -> Result<Outcome> {
        let Some(namespace) = cx.cache.store(NAMESPACES).get(ns) else {
            return Ok(Outcome::none());
        };
        if obj::is_deleting(&namespace) {
            return Ok(Outcome::none());
        }
        let data = self.desired_data();
        let current = cx
            .cache
            .store_for(&CONFIGMAP_WATCH)
            .get_in(ns, CONFIGMAP_NAME);
        let Some(cm) = current else {
            return Ok(Outcome::with(vec![Action::Create {
                kind: CONFIGMAPS,
                namespace: ns.to_string(),
                object: json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": CONFIGMAP_NAME,
                        "annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION},
                    },
                    "data": data,
                }),
            }]));
        };
        let described = obj::annotation(&cm, DESCRIPTION_ANNOTATION).is_some_and(|a| !a.is_empty());
        if cm.get("data") == Some(&data) && described {
            return Ok(Outcome::none());
        }
        // Update the whole cached object (its resourceVersion makes a stale write a 409).
        let mut updated = (*cm).clone();
        updated["data"] = data;
        let meta = &mut updated["metadata"];
        if !meta.get("annotations").is_some_and(Value::is_object) {
            meta["annotations"] = json!({});
        }
        meta["annotations"][DESCRIPTION_ANNOTATION] = json!(DESCRIPTION);
        Ok(Outcome::with(vec![Action::Update {
            kind: CONFIGMAPS,
            object: updated,
        }]))
    }

    fn on_error(&self, a: &Action, err: &crate::Error) -> OnError {
        // Do not retry a create into a namespace that is gone or terminating (a sync that
        // succeeded, for the metrics, as upstream's); anything else is retried, an
        // AlreadyExists too (the cache then has the ConfigMap).
        let create = matches!(a, Action::Create { .. });
        if create && (err.is_not_found() || err.is_namespace_terminating()) {
            OnError::Ignore
        } else {
            OnError::Retry
        }
    }

    fn synced(&self, _: &str, began: std::time::Instant, end: SyncEnd<'_>) {
        METRICS.synced(SyncsByCode::code(&end), began.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::DeltaKind;
    use crate::controllers::testing::cx_with;
    use serde_json::json;

    fn publisher() -> RootCaPublisher {
        RootCaPublisher {
            root_ca: "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n".into(),
        }
    }

    #[test]
    fn creates_missing_configmap() {
        let (cache, client) = cx_with(&[(
            NAMESPACES,
            json!({"metadata":{"name":"a","resourceVersion":"1"}}),
        )]);
        let cx = Cx {
            cache: &cache,
            now: std::time::SystemTime::now(),
            client: &client,
        };
        let out = publisher().reconcile(&cx, "a").expect("reconcile");
        let Action::Create {
            object, namespace, ..
        } = &out.actions[0]
        else {
            panic!("expected create, got {:?}", out.actions);
        };
        assert_eq!(namespace, "a");
        assert_eq!(object["metadata"]["name"], CONFIGMAP_NAME);
        assert_eq!(object["data"]["ca.crt"], publisher().root_ca.as_str());
        assert_eq!(
            object["metadata"]["annotations"][DESCRIPTION_ANNOTATION],
            DESCRIPTION
        );
    }

    #[test]
    fn repairs_edited_configmap_keeping_other_fields() {
        let (cache, client) = cx_with(&[(
            NAMESPACES,
            json!({"metadata":{"name":"a","resourceVersion":"1"}}),
        )]);
        cache.store_for(&CONFIGMAP_WATCH).apply(
            DeltaKind::Added,
            json!({"metadata":{"name":CONFIGMAP_NAME,"namespace":"a","resourceVersion":"7",
                "labels":{"keep":"me"}},"data":{"ca.crt":"tampered"}}),
        );
        let cx = Cx {
            cache: &cache,
            now: std::time::SystemTime::now(),
            client: &client,
        };
        let out = publisher().reconcile(&cx, "a").expect("reconcile");
        let Action::Update { object, .. } = &out.actions[0] else {
            panic!("expected update, got {:?}", out.actions);
        };
        assert_eq!(object["metadata"]["resourceVersion"], "7");
        assert_eq!(object["metadata"]["labels"]["keep"], "me");
        assert_eq!(object["data"]["ca.crt"], publisher().root_ca.as_str());
        assert_eq!(
            object["metadata"]["annotations"][DESCRIPTION_ANNOTATION],
            DESCRIPTION
        );
    }

    #[test]
    fn correct_configmap_needs_nothing() {
        let p = publisher();
        let (cache, client) = cx_with(&[(
            NAMESPACES,
            json!({"metadata":{"name":"a","resourceVersion":"1"}}),
        )]);
        let cm = json!({"metadata":{"name":CONFIGMAP_NAME,"namespace":"a","resourceVersion":"7",
            "annotations":{DESCRIPTION_ANNOTATION: DESCRIPTION}},"data":{"ca.crt":p.root_ca}});
        cache
            .store_for(&CONFIGMAP_WATCH)
            .apply(DeltaKind::Added, cm.clone());
        let cx = Cx {
            cache: &cache,
            now: std::time::SystemTime::now(),
            client: &client,
        };
        assert!(p.reconcile(&cx, "a").expect("reconcile").actions.is_empty());
        let d = Delta {
            kind: DeltaKind::Updated,
            old: None,
            new: Some(std::sync::Arc::new(cm)),
        };
        assert!(p.keys_for(&CONFIGMAP_WATCH, &d, &cache).is_empty());
    }

    #[test]
    fn failures_retried_as_upstream() {
        let p = publisher();
        let create = Action::Create {
            kind: CONFIGMAPS,
            namespace: "a".into(),
            object: json!({}),
        };
        let update = Action::Update {
            kind: CONFIGMAPS,
            object: json!({}),
        };
        let gone = crate::Error::api(404, "NotFound", "namespaces \"a\" not found");
        let terminating = crate::Error::api(
            403,
            "Forbidden",
            "unable to create new content in namespace a because it is being terminated",
        );
        let exists = crate::Error::api(409, "AlreadyExists", "exists");
        // A create into a namespace gone or terminating is a sync that succeeded.
        assert!(matches!(p.on_error(&create, &gone), OnError::Ignore));
        assert!(matches!(p.on_error(&create, &terminating), OnError::Ignore));
        assert!(matches!(p.on_error(&create, &exists), OnError::Retry));
        assert!(matches!(p.on_error(&update, &gone), OnError::Retry));
        let before = crate::metrics::encode(&METRICS.families());
        p.synced("a", std::time::Instant::now(), SyncEnd::Failed(&exists));
        let after = crate::metrics::encode(&METRICS.families());
        let count = |t: &str| {
            t.lines()
                .find_map(|l| l.strip_prefix("root_ca_cert_publisher_sync_total{code=\"409\"} "))
                .map_or(0.0, |v| v.parse::<f64>().unwrap_or(0.0))
        };
        assert_eq!(count(&after), count(&before) + 1.0, "{after}");
    }
}
