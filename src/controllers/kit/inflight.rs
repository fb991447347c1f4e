//! A controller's own writes of children that the watch has not confirmed yet: what
//! upstream's `ControllerExpectations` guard against (a sync deciding again from a cache that
//! does not show the pods it just created or deleted), with the same 5-minute expiry. One
//! type for creates and deletes, as upstream's.
//!
//! Upstream counts expected adds and deletes per owner and lowers the counts in its event
//! handlers. Here each write is remembered by name: the manager puts the answer of a create
//! into the cache at once, so a created child counts from the moment it exists, and it stays
//! expected until the child watch has passed its resourceVersion (a re-list from an older
//! snapshot cannot hide it then).
//!
//! A delete is noted when it is decided ([`InFlight::deleting`]), before the request, so a
//! watch event that comes before the answer is not missed. From there two uses:
//! - waiting, as upstream's deletion expectations: the owner is not settled
//!   ([`InFlight::deletes_settled`]) until the watch shows the child deleting or gone, or the
//!   request failed ([`InFlight::delete_failed`]);
//! - hiding: once the request is answered ([`InFlight::delete_done`]), the child is hidden
//!   from the owner's syncs ([`InFlight::hides`]), even if a late event of the watch brings it
//!   back, until the watch confirms the deletion.

use crate::cache::{Delta, DeltaKind, Store};
use crate::obj;
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a write is waited for at most (upstream's `ExpectationsTimeout`).
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// A child created and not yet confirmed.
struct Created {
    owner_uid: String,
    name: String,
    rv: Option<u64>,
    at: Instant,
}

/// A delete decided and not yet answered or confirmed.
struct Deleting {
    uid: String,
    at: Instant,
    /// The watch showed the child deleting or gone: no longer waited for.
    seen: bool,
}

/// Writes of children waiting for the watch (see the module docs). Not locked: a controller
/// keeps it in the state its own lock guards.
#[derive(Default)]
pub struct InFlight {
    /// Per owner key: children created and not yet confirmed by the watch.
    created: HashMap<String, Vec<Created>>,
    /// Per owner key: child key -> deletes decided, until answered or confirmed.
    deleting: HashMap<String, HashMap<String, Deleting>>,
    /// Child key -> (uid, when) of children deleted: hidden while the cache may show them.
    deleted: HashMap<String, (String, Instant)>,
}

impl InFlight {
    /// The owner `owner_key` created `child` (the server's answer: its name, its
    /// resourceVersion, its controller's UID).
    pub fn created(&mut self, owner_key: &str, child: &Value) {
        let owner_uid = obj::controller_ref(child)
            .map(|r| r.uid.to_string())
            .unwrap_or_default();
        self.created
            .entry(owner_key.to_string())
            .or_default()
            .push(Created {
                owner_uid,
                name: obj::name(child).to_string(),
                rv: obj::resource_version(child).parse().ok(),
                at: Instant::now(),
            });
    }

    /// The owner `owner_key` decided to delete the child `child_key` with `uid`: noted
    /// before the request is sent.
    pub fn deleting(&mut self, owner_key: &str, child_key: String, uid: &str) {
        self.deleting
            .entry(owner_key.to_string())
            .or_default()
            .insert(
                child_key,
                Deleting {
                    uid: uid.to_string(),
                    at: Instant::now(),
                    seen: false,
                },
            );
    }

    /// The delete of `child_key` was not done (failed, or skipped): nothing to wait for.
    pub fn delete_failed(&mut self, owner_key: &str, child_key: &str) {
        self.take_deleting(owner_key, child_key);
    }

    /// The delete of `child_key` was done: the child is hidden from the owner's syncs until
    /// the watch confirms it, and no longer waited for.
    pub fn delete_done(&mut self, owner_key: &str, child_key: &str) {
        if let Some(d) = self.take_deleting(owner_key, child_key) {
            if self.deleted.len() > 10_000 {
                self.deleted
                    .retain(|_, (_, at)| at.elapsed() < EXPECTATIONS_TIMEOUT);
            }
            self.deleted
                .insert(child_key.to_string(), (d.uid, Instant::now()));
        }
    }

    fn take_deleting(&mut self, owner_key: &str, child_key: &str) -> Option<Deleting> {
        let m = self.deleting.get_mut(owner_key)?;
        let d = m.remove(child_key);
        if m.is_empty() {
            self.deleting.remove(owner_key);
        }
        d
    }

    /// Has the watch shown every child `owner_key` decided to delete deleting or gone (or
    /// has waiting for them expired)?
    pub fn deletes_settled(&mut self, owner_key: &str) -> bool {
        let Some(m) = self.deleting.get_mut(owner_key) else {
            return true;
        };
        m.retain(|_, d| !d.seen && d.at.elapsed() < EXPECTATIONS_TIMEOUT);
        if m.is_empty() {
            self.deleting.remove(owner_key);
            return true;
        }
        false
    }

    /// From the child watch: a delete decided is seen once the child is deleting or gone; a
    /// deletion done is confirmed once the child is gone, replaced by another UID, or no
    /// longer `counts` (a pod that finished, say).
    pub fn observe(&mut self, d: &Delta, counts: impl Fn(&Value) -> bool) {
        let c = d.object();
        let key = obj::key(c);
        if d.kind == DeltaKind::Deleted || obj::is_deleting(c) {
            if let Some(r) = obj::controller_ref(c) {
                let owner = obj::make_key(obj::namespace(c), r.name);
                if let Some(e) = self.deleting.get_mut(&owner).and_then(|m| m.get_mut(&key)) {
                    if e.uid == obj::uid(c) {
                        e.seen = true;
                    }
                }
            }
        }
        let confirmed = match self.deleted.get(&key) {
            Some((uid, _)) => d.kind == DeltaKind::Deleted || uid != obj::uid(c) || !counts(c),
            None => false,
        };
        if confirmed {
            self.deleted.remove(&key);
        }
    }

    /// Whether a child the cache shows is one deleted here and not confirmed yet (so the
    /// owner must not count it).
    pub fn hides(&mut self, child_key: &str, uid: &str) -> bool {
        match self.deleted.get(child_key) {
            Some((u, at)) if u == uid && at.elapsed() < EXPECTATIONS_TIMEOUT => true,
            Some(_) => {
                self.deleted.remove(child_key);
                false
            }
            None => false,
        }
    }

    /// Are the children `owner_key` (with `owner_uid`) created all in `children` (the
    /// namespace `ns` of the child store), or confirmed by the watch? If not, how long until
    /// waiting for them expires.
    pub fn settled(
        &mut self,
        owner_key: &str,
        owner_uid: &str,
        ns: &str,
        children: &Store,
    ) -> Result<(), Duration> {
        let store_rv: Option<u64> = children.resource_version().parse().ok();
        let Some(list) = self.created.get_mut(owner_key) else {
            return Ok(());
        };
        list.retain(|c| {
            let confirmed = match (store_rv, c.rv) {
                (Some(s), Some(r)) => s >= r,
                _ => true,
            };
            c.owner_uid == owner_uid && !confirmed && c.at.elapsed() < EXPECTATIONS_TIMEOUT
        });
        let waiting = list
            .iter()
            .filter(|c| children.get_in(ns, &c.name).is_none())
            .map(|c| EXPECTATIONS_TIMEOUT.saturating_sub(c.at.elapsed()))
            .min();
        if list.is_empty() {
            self.created.remove(owner_key);
        }
        match waiting {
            Some(d) => Err(d),
            None => Ok(()),
        }
    }

    /// The owner is gone (or replaced): forget what it created and decided to delete.
    pub fn forget(&mut self, owner_key: &str) {
        self.created.remove(owner_key);
        self.deleting.remove(owner_key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn pod(name: &str, uid: &str, rv: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                "uid": "owner", "controller": true}]}})
    }

    #[test]
    fn a_created_child_is_waited_for_until_the_watch_passes_it() {
        let store = Store::new();
        store.set_resource_version("5");
        let mut f = InFlight::default();
        f.created("ns/rs", &pod("a", "u1", "10"));
        assert!(f.settled("ns/rs", "owner", "ns", &store).is_err());
        // Seen in the cache: settled, yet still remembered until the watch passes rv 10.
        store.apply(DeltaKind::Added, pod("a", "u1", "10"));
        assert!(f.settled("ns/rs", "owner", "ns", &store).is_ok());
        // Another owner UID (the owner was re-created): not waited for.
        f.created("ns/rs", &pod("b", "u2", "11"));
        assert!(f.settled("ns/rs", "other", "ns", &store).is_ok());
        f.forget("ns/rs");
        assert!(f.settled("ns/rs", "owner", "ns", &store).is_ok());
    }

    #[test]
    fn a_deleted_child_is_hidden_until_confirmed() {
        let mut f = InFlight::default();
        f.deleting("ns/rs", "ns/a".into(), "u1");
        assert!(!f.hides("ns/a", "u1"), "not hidden before the answer");
        f.delete_done("ns/rs", "ns/a");
        assert!(f.hides("ns/a", "u1"));
        assert!(
            !f.hides("ns/a", "u2"),
            "another pod of the same name counts"
        );
        f.deleting("ns/rs", "ns/a".into(), "u1");
        f.delete_done("ns/rs", "ns/a");
        let p = Arc::new(pod("a", "u1", "12"));
        f.observe(&updated(&p, &p), |_| true);
        assert!(f.hides("ns/a", "u1"));
        f.observe(&gone(&p), |_| true);
        assert!(!f.hides("ns/a", "u1"));
    }

    fn updated(old: &Arc<Value>, new: &Arc<Value>) -> Delta {
        Delta {
            kind: DeltaKind::Updated,
            old: Some(old.clone()),
            new: Some(new.clone()),
        }
    }

    fn gone(p: &Arc<Value>) -> Delta {
        Delta {
            kind: DeltaKind::Deleted,
            old: Some(p.clone()),
            new: None,
        }
    }

    #[test]
    fn a_failed_delete_is_neither_hidden_nor_waited_for() {
        let mut f = InFlight::default();
        f.deleting("ns/rs", "ns/a".into(), "u1");
        assert!(!f.deletes_settled("ns/rs"));
        f.delete_failed("ns/rs", "ns/a");
        assert!(f.deletes_settled("ns/rs"));
        f.delete_done("ns/rs", "ns/a");
        assert!(!f.hides("ns/a", "u1"), "nothing decided, nothing hidden");
    }

    #[test]
    fn a_delete_is_waited_for_until_the_watch_shows_it_deleting_or_gone() {
        let mut f = InFlight::default();
        let p = Arc::new(pod("a", "u1", "12"));
        f.deleting("ns/rs", "ns/a".into(), "u1");
        f.observe(&updated(&p, &p), |_| true);
        assert!(
            !f.deletes_settled("ns/rs"),
            "a live pod is still waited for"
        );
        // Another pod of the same name does not confirm it.
        let other = Arc::new(pod("a", "u2", "13"));
        f.observe(&gone(&other), |_| true);
        assert!(!f.deletes_settled("ns/rs"));
        let mut deleting = pod("a", "u1", "14");
        deleting["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        let deleting = Arc::new(deleting);
        f.observe(&updated(&p, &deleting), |_| true);
        assert!(f.deletes_settled("ns/rs"));
        // Seen before the answer: a done delete still hides the child.
        f.deleting("ns/rs", "ns/a".into(), "u1");
        f.observe(&gone(&p), |_| true);
        assert!(f.deletes_settled("ns/rs"));
        f.deleting("ns/rs", "ns/a".into(), "u1");
        f.observe(&gone(&p), |_| true);
        f.delete_done("ns/rs", "ns/a");
        assert!(f.hides("ns/a", "u1"));
        // Forgetting the owner forgets its deletes.
        f.deleting("ns/rs", "ns/a".into(), "u1");
        f.forget("ns/rs");
        assert!(f.deletes_settled("ns/rs"));
    }
}
