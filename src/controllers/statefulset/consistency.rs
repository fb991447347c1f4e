//! StaleControllerConsistencyStatefulSet (v1.36 beta, on): the resourceVersions of the
//! controller's own writes per set (pods created, updated or adopted, claims created or
//! updated, the set's status), as upstream's `consistency.RealConsistencyStore`. A sync of
//! the set waits until each informer that took one of those writes has passed its
//! resourceVersion (the store's last watched version), so it never decides from a cache
//! older than what it wrote: the sync fails with upstream's message, is retried through the
//! rate limiter and counted in `statefulset_controller_stale_sync_skips_total` by group and
//! resource. Deletes and revisions are not tracked (upstream neither). Once a sync finds
//! everything caught up the set's record is dropped; so is a deleted set's.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// A resource whose writes are tracked: its group and resource, upstream's metric labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Res {
    Pods,
    Claims,
    Sets,
}

impl Res {
    pub fn group(self) -> &'static str {
        match self {
            Res::Sets => "apps",
            _ => "",
        }
    }
    pub fn resource(self) -> &'static str {
        match self {
            Res::Pods => "pods",
            Res::Claims => "persistentvolumeclaims",
            Res::Sets => "statefulsets",
        }
    }
}

/// The cache is behind one of the set's writes (upstream's `ConsistencyError`).
#[derive(Debug, PartialEq, Eq)]
pub struct Stale {
    pub res: Res,
    pub read: u64,
    pub wrote: u64,
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gr = match self.res.group() {
            "" => self.res.resource().to_string(),
            g => format!("{}.{g}", self.res.resource()),
        };
        write!(
            f,
            "read version: {} is not as new as written version: {} for group resource {gr}",
            self.read, self.wrote
        )
    }
}

struct Record {
    uid: String,
    versions: BTreeMap<Res, u64>,
}

/// The written versions per set key.
#[derive(Default)]
pub struct Written {
    sets: Mutex<HashMap<String, Record>>,
}

impl Written {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        self.sets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The set `key` (uid `uid`, when the write tells it) wrote `res` at `rv`. A write for
    /// another uid of the same name starts a fresh record; an older version never replaces
    /// a newer one.
    pub fn wrote(&self, key: &str, uid: Option<&str>, res: Res, rv: u64) {
        let mut m = self.lock();
        let fresh = match (m.get(key), uid) {
            (Some(r), Some(u)) => r.uid != u,
            (Some(_), None) => false,
            (None, _) => true,
        };
        if fresh {
            let uid = uid.unwrap_or_default().to_string();
            m.insert(
                key.to_string(),
                Record {
                    uid,
                    versions: BTreeMap::new(),
                },
            );
        }
        if let Some(r) = m.get_mut(key) {
            let v = r.versions.entry(res).or_insert(rv);
            *v = (*v).max(rv);
        }
    }

    /// Forget the set `key` (deleted).
    pub fn clear(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Whether the cache has caught up with every write of the set `key`: `read` gives an
    /// informer's last watched version (None: unknown, not waited for). Caught up: the
    /// record is dropped.
    pub fn ensure_ready(&self, key: &str, read: impl Fn(Res) -> Option<u64>) -> Result<(), Stale> {
        let mut m = self.lock();
        let Some(r) = m.get(key) else {
            return Ok(());
        };
        for (&res, &wrote) in &r.versions {
            match read(res) {
                Some(read) if read < wrote => return Err(Stale { res, read, wrote }),
                _ => {}
            }
        }
        m.remove(key);
        Ok(())
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_waits_until_every_written_resource_is_read_at_or_past_its_write() {
        let w = Written::default();
        w.wrote("ns/web", Some("u1"), Res::Pods, 10);
        w.wrote("ns/web", None, Res::Claims, 12);
        w.wrote("ns/web", Some("u1"), Res::Sets, 15);
        let at = |p: u64, c: u64, s: u64| {
            move |r: Res| {
                Some(match r {
                    Res::Pods => p,
                    Res::Claims => c,
                    Res::Sets => s,
                })
            }
        };
        assert_eq!(
            w.ensure_ready("ns/web", at(9, 20, 20)),
            Err(Stale {
                res: Res::Pods,
                read: 9,
                wrote: 10
            })
        );
        let e = w.ensure_ready("ns/web", at(20, 20, 14)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "read version: 14 is not as new as written version: 15 for group resource statefulsets.apps"
        );
        assert_eq!(w.len(), 1);
        assert_eq!(w.ensure_ready("ns/web", at(10, 12, 15)), Ok(()));
        assert_eq!(w.len(), 0, "caught up: the record is dropped");
        assert_eq!(w.ensure_ready("ns/web", at(0, 0, 0)), Ok(()));
    }

    #[test]
    fn older_writes_never_lower_the_version_and_a_new_uid_starts_afresh() {
        let w = Written::default();
        w.wrote("ns/web", Some("u1"), Res::Pods, 30);
        w.wrote("ns/web", Some("u1"), Res::Pods, 20);
        assert!(w.ensure_ready("ns/web", |_| Some(25)).is_err());
        w.wrote("ns/web", Some("u2"), Res::Claims, 5);
        assert_eq!(w.ensure_ready("ns/web", |_| Some(25)), Ok(()));
        w.wrote("ns/web", Some("u2"), Res::Pods, 40);
        assert_eq!(w.ensure_ready("ns/web", |_| None), Ok(()), "unknown read");
        w.wrote("ns/web", Some("u2"), Res::Pods, 40);
        w.clear("ns/web");
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn upstreams_message_names_the_core_group_resource_bare() {
        let s = Stale {
            res: Res::Claims,
            read: 1,
            wrote: 2,
        };
        assert_eq!(
            s.to_string(),
            "read version: 1 is not as new as written version: 2 for group resource persistentvolumeclaims"
        );
    }

    #[test]
    fn the_controller_skips_a_sync_until_the_informers_pass_its_own_writes() {
        use crate::api::resources::{PERSISTENTVOLUMECLAIMS, PODS, STATEFULSETS};
        use crate::controllers::testing::Harness;
        use crate::controllers::{Action, Applied, Controller, Cx, Watch};
        use serde_json::json;
        let set = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web",
                "resourceVersion": "5", "generation": 1},
            "spec": {"replicas": 0, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        let mut h = Harness::new(super::super::StatefulSetController::new());
        h.add(STATEFULSETS, set.clone());
        let pods = h.cache.store_for(&super::super::POD_WATCH);
        pods.set_resource_version("40");
        let claims = h.cache.store_for(&Watch::full(PERSISTENTVOLUMECLAIMS));
        claims.set_resource_version("40");
        let pod = json!({"metadata": {"name": "web-0", "namespace": "ns", "resourceVersion": "41",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                "uid": "uid-web", "controller": true}]}});
        let create = Action::Create {
            kind: PODS,
            namespace: "ns".into(),
            object: pod.clone(),
        };
        h.ctrl.applied("ns/web", &create, Applied::Done(Some(&pod)));
        let claim =
            json!({"metadata": {"name": "data-web-0", "namespace": "ns", "resourceVersion": "42"}});
        let create_claim = Action::Create {
            kind: PERSISTENTVOLUMECLAIMS,
            namespace: "ns".into(),
            object: claim.clone(),
        };
        h.ctrl
            .applied("ns/web", &create_claim, Applied::Done(Some(&claim)));
        let sync = |h: &Harness<super::super::StatefulSetController>| {
            let cx = Cx {
                cache: &h.cache,
                now: h.now,
                client: &h.client,
            };
            h.ctrl.reconcile(&cx, "ns/web").map(|_| ())
        };
        let err = sync(&h).expect_err("pods not yet watched past 41");
        assert_eq!(
            err.to_string(),
            "read version: 40 is not as new as written version: 41 for group resource pods"
        );
        pods.set_resource_version("41");
        let err = sync(&h).expect_err("claims not yet watched past 42");
        assert!(err.to_string().contains("persistentvolumeclaims"), "{err}");
        claims.set_resource_version("43");
        assert!(sync(&h).is_ok());
        // A pod released (no controller) is not recorded.
        let released =
            json!({"metadata": {"name": "web-9", "namespace": "ns", "resourceVersion": "99"}});
        let patch = Action::Patch {
            kind: PODS,
            namespace: "ns".into(),
            name: "web-9".into(),
            patch_type: crate::api::client::PatchType::Strategic,
            patch: json!({}),
            subresource: None,
        };
        h.ctrl
            .applied("ns/web", &patch, Applied::Done(Some(&released)));
        assert!(sync(&h).is_ok());
        // The set deleted: its record goes.
        h.ctrl.applied("ns/web", &create, Applied::Done(Some(&json!({"metadata": {"name": "web-0",
            "namespace": "ns", "resourceVersion": "500", "ownerReferences": pod["metadata"]["ownerReferences"]}}))));
        h.delete(STATEFULSETS, set);
        pods.set_resource_version("600");
        assert!(sync(&h).is_ok());
        assert_eq!(h.ctrl.written.len(), 0);
    }
}
