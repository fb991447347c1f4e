//! The EndpointSlices a controller wrote and the generation each write left (upstream's
//! `EndpointSliceTracker`): a sync whose cache shows an older generation of one of them, or
//! still shows one it deleted, or misses one it wrote, waits for the watch (the cache is
//! stale); the watch's events of slices at a generation it wrote itself queue nothing.

use crate::obj::{self, At as _};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;

/// The generation recorded for a slice whose deletion is expected.
const DELETION_EXPECTED: i64 = -1;

#[derive(Default)]
pub struct SliceTracker {
    /// Service key -> slice UID -> the generation written (or [`DELETION_EXPECTED`]).
    gens: Mutex<HashMap<String, HashMap<String, i64>>>,
    /// Slice key -> (Service key, UID) of deletes asked for and not yet answered.
    deleting: Mutex<HashMap<String, (String, String)>>,
}

/// The Service key of a slice: its namespace and `kubernetes.io/service-name` label.
pub fn service_key(slice: &Value) -> String {
    obj::make_key(
        obj::namespace(slice),
        obj::label(slice, "kubernetes.io/service-name").unwrap_or(""),
    )
}

fn generation(slice: &Value) -> i64 {
    slice
        .at("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

impl SliceTracker {
    fn all(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, i64>>> {
        self.gens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The slice `ns/name` (with `uid`) of Service `key` is about to be deleted: its answer
    /// makes the deletion expected (see [`SliceTracker::applied`]).
    pub fn deleting(&self, key: &str, ns: &str, name: &str, uid: &str) {
        self.deleting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(obj::make_key(ns, name), (key.to_string(), uid.to_string()));
    }

    /// `Has`.
    pub fn has(&self, slice: &Value) -> bool {
        self.all()
            .get(&service_key(slice))
            .is_some_and(|g| g.contains_key(obj::uid(slice)))
    }

    /// `ShouldSync`: not written here, or changed since by someone else.
    pub fn should_sync(&self, slice: &Value) -> bool {
        match self
            .all()
            .get(&service_key(slice))
            .and_then(|g| g.get(obj::uid(slice)))
        {
            None => true,
            Some(g) => generation(slice) > *g,
        }
    }

    /// `StaleSlices`: the cached `slices` of Service `key` are behind what was written.
    pub fn stale(&self, key: &str, slices: &[obj::Obj]) -> bool {
        let all = self.all();
        let Some(gens) = all.get(key) else {
            return false;
        };
        let mut seen = std::collections::HashSet::new();
        for s in slices {
            seen.insert(obj::uid(s));
            if let Some(g) = gens.get(obj::uid(s)) {
                if *g == DELETION_EXPECTED || *g > generation(s) {
                    return true;
                }
            }
        }
        gens.iter()
            .any(|(uid, g)| *g != DELETION_EXPECTED && !seen.contains(uid.as_str()))
    }

    /// `Update`: the server answered a create or update with `slice`.
    pub fn update(&self, slice: &Value) {
        self.all()
            .entry(service_key(slice))
            .or_default()
            .insert(obj::uid(slice).to_string(), generation(slice));
    }

    /// `ExpectDeletion`: the slice of Service `key` with `uid` was deleted.
    pub fn expect_deletion(&self, key: &str, uid: &str) {
        self.all()
            .entry(key.to_string())
            .or_default()
            .insert(uid.to_string(), DELETION_EXPECTED);
    }

    /// What a controller's `applied` does with its slice writes: a created or updated slice's
    /// generation is recorded; a delete that went through (noted by
    /// [`SliceTracker::deleting`] when it was planned) is expected.
    pub fn applied(
        &self,
        action: &crate::controller::Action,
        result: crate::controller::Applied<'_>,
    ) {
        use crate::controller::{Action, Applied};
        match (action, result) {
            (Action::Create { .. } | Action::Update { .. }, Applied::Done(Some(v))) => {
                self.update(v)
            }
            (
                Action::Delete {
                    namespace, name, ..
                },
                r,
            ) => {
                let pending = self
                    .deleting
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&obj::make_key(namespace, name));
                if let (Some((key, uid)), Applied::Done(_)) = (pending, r) {
                    self.expect_deletion(&key, &uid);
                }
            }
            _ => {}
        }
    }

    /// `HandleDeletion`: the watch saw the slice deleted; true when that was expected (or not
    /// tracked), so nothing needs syncing.
    pub fn handle_deletion(&self, slice: &Value) -> bool {
        let mut all = self.all();
        let Some(gens) = all.get_mut(&service_key(slice)) else {
            return true;
        };
        match gens.remove(obj::uid(slice)) {
            Some(g) => g == DELETION_EXPECTED,
            None => true,
        }
    }

    /// `DeleteService`.
    pub fn delete_service(&self, key: &str) {
        self.all().remove(key);
    }
}

/// Which slice of an update upstream's slice handler reads as the changed one: the new one
/// (endpointslice), or the old one (mirroring, whose handler has them the wrong way round).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateReads {
    New,
    Old,
}

/// The Service key of a slice labelled with a Service name, else None.
fn named_service_key(slice: &Value) -> Option<String> {
    obj::label(slice, "kubernetes.io/service-name")
        .filter(|n| !n.is_empty())
        .map(|_| service_key(slice))
}

/// The EndpointSlices one controller manages, by Service key (namespace and
/// `kubernetes.io/service-name`), kept in step with the slice watch: a sync finds its slices
/// without going through the namespace's (upstream lists them by label from its informer).
pub struct SliceIndex {
    managed_by: &'static str,
    names: Mutex<HashMap<String, std::collections::BTreeSet<String>>>,
}

impl SliceIndex {
    pub fn new(managed_by: &'static str) -> Self {
        SliceIndex {
            managed_by,
            names: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the slice carries this controller's `managed-by` label.
    pub fn manages(&self, slice: &Value) -> bool {
        obj::label(slice, "endpointslice.kubernetes.io/managed-by") == Some(self.managed_by)
    }

    /// Follow one delta of the slice watch.
    pub fn observe(&self, d: &crate::cache::Delta) {
        let mut all = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = &d.old {
            let k = service_key(old);
            if let Some(set) = all.get_mut(&k) {
                set.remove(obj::name(old));
                if set.is_empty() {
                    all.remove(&k);
                }
            }
        }
        if let Some(new) = &d.new {
            let named =
                obj::label(new, "kubernetes.io/service-name").is_some_and(|s| !s.is_empty());
            if self.manages(new) && named {
                all.entry(service_key(new))
                    .or_default()
                    .insert(obj::name(new).to_string());
            }
        }
    }

    /// Upstream's `onEndpointSliceAdd/Update/Delete`: follow one delta of the slice watch and
    /// answer the Services to sync. A slice this controller manages counts when `tracker`
    /// says it should be synced (not written here at that generation), or, deleted, when its
    /// deletion was not expected.
    pub fn keys_for(
        &self,
        tracker: &SliceTracker,
        d: &crate::cache::Delta,
        reads: UpdateReads,
    ) -> Vec<String> {
        use crate::cache::DeltaKind;
        self.observe(d);
        match (d.kind, &d.old, &d.new) {
            (DeltaKind::Added, _, Some(s)) if self.manages(s) && tracker.should_sync(s) => {
                named_service_key(s).into_iter().collect()
            }
            (DeltaKind::Updated, Some(old), Some(new)) => {
                let (cur, other) = match reads {
                    UpdateReads::New => (new, old),
                    UpdateReads::Old => (old, new),
                };
                const NAME: &str = "kubernetes.io/service-name";
                if obj::label(old, NAME) != obj::label(new, NAME) {
                    return named_service_key(cur)
                        .into_iter()
                        .chain(named_service_key(other))
                        .collect();
                }
                let changed = self.manages(old) != self.manages(new);
                if changed || (self.manages(cur) && tracker.should_sync(cur)) {
                    return named_service_key(cur).into_iter().collect();
                }
                vec![]
            }
            (DeltaKind::Deleted, _, _) => {
                let s = d.object();
                if self.manages(s) && tracker.has(s) && !tracker.handle_deletion(s) {
                    return named_service_key(s).into_iter().collect();
                }
                vec![]
            }
            _ => vec![],
        }
    }

    /// The cached slices of Service `key` managed here, in name order, not being deleted
    /// unless `with_deleting`.
    pub fn slices(
        &self,
        cache: &crate::cache::Cache,
        key: &str,
        with_deleting: bool,
    ) -> Vec<obj::Obj> {
        let (ns, _) = obj::split_key(key);
        let names: Vec<String> = self
            .names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        let store = cache.store(crate::api::resources::ENDPOINTSLICES);
        names
            .iter()
            .filter_map(|n| store.get_in(ns, n))
            .filter(|s| {
                self.manages(s) && service_key(s) == key && (with_deleting || !obj::is_deleting(s))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{Delta, DeltaKind};
    use serde_json::json;
    use std::sync::Arc;

    fn slice(uid: &str, gen: i64) -> obj::Obj {
        Arc::new(
            json!({"metadata": {"name": uid, "namespace": "ns", "uid": uid,
            "generation": gen, "labels": {"kubernetes.io/service-name": "svc"}}}),
        )
    }

    #[test]
    fn written_generations_make_an_older_cache_stale() {
        let t = SliceTracker::default();
        assert!(t.should_sync(&slice("a", 1)));
        assert!(!t.stale("ns/svc", &[]));
        t.update(&slice("a", 2));
        assert!(t.has(&slice("a", 2)));
        assert!(!t.should_sync(&slice("a", 2)), "our own write");
        assert!(t.should_sync(&slice("a", 3)), "changed by someone else");
        assert!(
            t.stale("ns/svc", &[slice("a", 1)]),
            "older generation cached"
        );
        assert!(t.stale("ns/svc", &[]), "written slice not cached yet");
        assert!(!t.stale("ns/svc", &[slice("a", 2)]));
        t.expect_deletion("ns/svc", "a");
        assert!(
            t.stale("ns/svc", &[slice("a", 2)]),
            "deleted slice still cached"
        );
        assert!(!t.stale("ns/svc", &[]));
        assert!(t.handle_deletion(&slice("a", 2)), "expected deletion");
        t.update(&slice("b", 1));
        assert!(
            !t.handle_deletion(&slice("b", 1)),
            "deleted by someone else"
        );
        t.delete_service("ns/svc");
        assert!(!t.has(&slice("b", 1)));
    }

    fn managed(name: &str, uid: &str, svc: &str, gen: i64) -> obj::Obj {
        Arc::new(
            json!({"metadata": {"name": name, "namespace": "ns", "uid": uid,
            "generation": gen, "labels": {"kubernetes.io/service-name": svc,
                "endpointslice.kubernetes.io/managed-by": "me"}}}),
        )
    }

    fn delta(kind: DeltaKind, old: Option<&obj::Obj>, new: Option<&obj::Obj>) -> Delta {
        Delta {
            kind,
            old: old.cloned(),
            new: new.cloned(),
        }
    }

    #[test]
    fn slice_events_queue_their_service_unless_written_here() {
        let (index, t) = (SliceIndex::new("me"), SliceTracker::default());
        let a = managed("a", "ua", "svc", 1);
        let keys = |d: &Delta, r| index.keys_for(&t, d, r);
        assert_eq!(
            keys(&delta(DeltaKind::Added, None, Some(&a)), UpdateReads::New),
            ["ns/svc"]
        );
        t.update(&a);
        assert!(keys(&delta(DeltaKind::Added, None, Some(&a)), UpdateReads::New).is_empty());
        // Changed by someone else: only the slice the handler reads counts.
        let a2 = managed("a", "ua", "svc", 2);
        let up = delta(DeltaKind::Updated, Some(&a), Some(&a2));
        assert_eq!(keys(&up, UpdateReads::New), ["ns/svc"]);
        assert!(
            keys(&up, UpdateReads::Old).is_empty(),
            "the old one is ours"
        );
        // Moved to another Service: both, the one read first.
        let moved = managed("a", "ua", "other", 2);
        let up = delta(DeltaKind::Updated, Some(&a), Some(&moved));
        assert_eq!(keys(&up, UpdateReads::New), ["ns/other", "ns/svc"]);
        assert_eq!(keys(&up, UpdateReads::Old), ["ns/svc", "ns/other"]);
        // Deleted: queued unless the deletion was expected.
        t.update(&a);
        t.deleting("ns/svc", "ns", "a", "ua");
        t.applied(
            &crate::controller::Action::Delete {
                kind: crate::api::resources::ENDPOINTSLICES,
                namespace: "ns".into(),
                name: "a".into(),
                options: Default::default(),
            },
            crate::controller::Applied::Done(None),
        );
        assert!(keys(&delta(DeltaKind::Deleted, Some(&a), None), UpdateReads::New).is_empty());
        t.update(&a);
        assert_eq!(
            keys(&delta(DeltaKind::Deleted, Some(&a), None), UpdateReads::New),
            ["ns/svc"]
        );
    }
}
