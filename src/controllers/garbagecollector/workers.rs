//! The workers: each queued UID is looked at live (the object, then its owners), decided
//! (`decide.rs`) and deleted, patched or unblocked; foreground deletions wait for their
//! blocking dependents. The writes tolerate an object that is already gone.

use crate::api::client::{DeleteOptions, PatchType};
use crate::api::Kind;
use crate::error::Result;
use crate::obj::{self, OwnerRef};
use serde_json::Value;
use std::time::Duration;

use super::decide::{self, Decision, OwnerState};
use super::graph::{Change, Identity, FINALIZER_FOREGROUND};
use super::{Inner, Item, Next, Snapshot, Stop, NAME};

impl Inner {
    /// One queued item (the worker loop is `crate::runtime::workers`, started once the monitors
    /// synced).
    pub(super) fn work(&self, item: &Item) {
        let next = {
            let _running = self.monitors().working();
            match item {
                Item::Delete(uid) => self.attempt_to_delete(uid),
                Item::Orphan(uid) => self.attempt_to_orphan(uid),
            }
        };
        match next {
            Next::Forget => self.queue.forget(item),
            Next::Requeue => self.queue.add_rate_limited(item.clone()),
        }
    }

    fn mapping(&self, api_version: &str, kind: &str) -> std::result::Result<Kind, Stop> {
        let d = self.monitors().discovery();
        match d.kind_for(api_version, kind) {
            Some(k) => Ok(k),
            None => {
                self.monitors().request_discovery();
                Err(Stop::Mapping(format!(
                    "unable to get REST mapping for {api_version}/{kind}"
                )))
            }
        }
    }

    /// The kind and the namespace to use for an identity.
    fn locate(&self, id: &Identity) -> std::result::Result<(Kind, Option<String>), Stop> {
        let k = self.mapping(&id.api_version, &id.kind)?;
        if !k.namespaced {
            return Ok((k, None));
        }
        if id.namespace.is_empty() {
            return Err(Stop::ClusterScopedRefersNamespaced);
        }
        Ok((k, Some(id.namespace.clone())))
    }

    /// The object's live metadata; None when it does not exist.
    fn get_object(&self, id: &Identity) -> std::result::Result<Option<Value>, Stop> {
        let (k, ns) = self.locate(id)?;
        match self.env().client.get_metadata(&k, ns.as_deref(), &id.name) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn virtual_delete(&self, id: &Identity) {
        log::debug!("{NAME}: {id} not found; removing it from the graph");
        self.change(Change::VirtualDelete(id.clone()));
    }

    fn attempt_to_delete(&self, uid: &str) -> Next {
        let Some(node) = self.snapshot(uid) else {
            return Next::Forget;
        };
        match self.attempt_to_delete_item(&node) {
            Ok(()) => {
                let still_virtual = self.snapshot(uid).is_some_and(|n| n.virtual_);
                if still_virtual {
                    Next::Requeue
                } else {
                    Next::Forget
                }
            }
            Err(Stop::VirtualDeleted) => Next::Forget,
            // Gone between the read and the write: the next look finds it absent.
            Err(Stop::NotFound) => Next::Requeue,
            Err(Stop::ClusterScopedRefersNamespaced) => {
                log::info!(
                    "{NAME}: {}: cluster-scoped objects cannot refer to namespaced owners",
                    node.identity
                );
                Next::Forget
            }
            Err(Stop::Mapping(e)) => {
                log::debug!("{NAME}: error syncing item {}: {e}", node.identity);
                Next::Requeue
            }
            Err(Stop::Failed(e)) => {
                log::warn!("{NAME}: error syncing item {}: {e}", node.identity);
                Next::Requeue
            }
        }
    }

    fn attempt_to_delete_item(&self, item: &Snapshot) -> std::result::Result<(), Stop> {
        log::debug!(
            "{NAME}: processing item {} (virtual: {})",
            item.identity,
            item.virtual_
        );
        if item.being_deleted && !item.deleting_dependents {
            return Ok(());
        }
        // Garbage in a namespace being deleted: the namespace controller deletes all of it
        // (with background propagation, as this would), so the live reads and deletes are
        // saved. Foreground deletions still get their dependents processed here.
        if !item.deleting_dependents && self.namespace_terminating(&item.identity.namespace) {
            log::debug!(
                "{NAME}: item {}: its namespace is terminating; left to the namespace controller",
                item.identity
            );
            return Ok(());
        }
        let latest = match self.get_object(&item.identity)? {
            Some(v) if obj::uid(&v) == item.identity.uid => v,
            // Gone, or another object by that name: drop the node.
            _ => {
                self.virtual_delete(&item.identity);
                return Err(Stop::VirtualDeleted);
            }
        };
        if item.deleting_dependents {
            return self.process_deleting_dependents(item);
        }
        let refs = obj::owner_refs(&latest);
        if refs.is_empty() {
            return Ok(());
        }
        let mut classified = Vec::with_capacity(refs.len());
        for r in refs {
            let st = self.owner_state(&r, &item.identity)?;
            classified.push((r, st));
        }
        let (has_deps, dep_deleting) = {
            let g = self.graph.read().unwrap_or_else(|p| p.into_inner());
            match g.get(&item.identity.uid) {
                Some(n) => (
                    !n.dependents.is_empty(),
                    n.dependents
                        .iter()
                        .filter_map(|d| g.get(d))
                        .any(|d| d.deleting_dependents),
                ),
                None => (false, false),
            }
        };
        let decision = decide::decide(
            &classified,
            has_deps,
            dep_deleting,
            &decide::finalizers(&latest),
        );
        log::debug!("{NAME}: item {}: {decision:?}", item.identity);
        match decision {
            Decision::Keep => Ok(()),
            Decision::RemoveRefs(uids) => {
                log::info!(
                    "{NAME}: removing references to absent or deleting owners {uids:?} from {}",
                    item.identity
                );
                let smp = decide::delete_refs_smp(&item.identity.uid, &uids);
                self.patch(&item.identity, &smp, |cur| {
                    Ok(decide::delete_refs_merge(cur, &uids))
                })
            }
            Decision::DeleteForeground { unblock_first } => {
                if unblock_first {
                    log::info!(
                        "{NAME}: {}: an owner and a dependent both delete in the foreground; making its references non-blocking first",
                        item.identity
                    );
                    let smp = decide::unblock_smp(&item.identity.uid, &item.owners);
                    self.patch(&item.identity, &smp, |cur| {
                        Ok(decide::unblock_merge(
                            obj::resource_version(cur),
                            &item.owners,
                        ))
                    })?;
                }
                log::info!(
                    "{NAME}: deleting {} in the foreground: an owner waits for its dependents",
                    item.identity
                );
                self.delete(&item.identity, "Foreground")
            }
            Decision::Delete(policy) => {
                log::info!(
                    "{NAME}: deleting {} (propagation {policy}): its owners are gone",
                    item.identity
                );
                self.delete(&item.identity, policy)
            }
        }
    }

    /// Upstream's isDangling + classification of one reference.
    fn owner_state(&self, r: &OwnerRef, item: &Identity) -> std::result::Result<OwnerState, Stop> {
        let cluster_key = Identity::of_ref(r, "");
        let ns_key = Identity::of_ref(r, &item.namespace);
        {
            let mut a = self.absent.lock().unwrap_or_else(|p| p.into_inner());
            if a.has(&cluster_key) || a.has(&ns_key) {
                return Ok(OwnerState::Dangling);
            }
        }
        let k = self.mapping(&r.api_version, &r.kind)?;
        if item.namespace.is_empty() && k.namespaced {
            return Err(Stop::ClusterScopedRefersNamespaced);
        }
        let (ns, key) = if k.namespaced {
            (Some(item.namespace.as_str()), ns_key)
        } else {
            (None, cluster_key)
        };
        match self.env().client.get_metadata(&k, ns, &r.name) {
            Err(e) if e.is_not_found() => {
                self.absent
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .add(key);
                Ok(OwnerState::Dangling)
            }
            Err(e) => Err(e.into()),
            Ok(owner) if obj::uid(&owner) != r.uid => {
                self.absent
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .add(key);
                Ok(OwnerState::Dangling)
            }
            Ok(owner) => Ok(OwnerState::of_owner(&owner)),
        }
    }

    fn process_deleting_dependents(&self, item: &Snapshot) -> std::result::Result<(), Stop> {
        let blocking: Vec<(String, bool)> = {
            let g = self.graph.read().unwrap_or_else(|p| p.into_inner());
            g.blocking_dependents(&item.identity.uid)
                .iter()
                .map(|d| (d.identity.uid.clone(), d.deleting_dependents))
                .collect()
        };
        if blocking.is_empty() {
            log::info!(
                "{NAME}: no blocking dependents left; removing the {FINALIZER_FOREGROUND} finalizer from {}",
                item.identity
            );
            return self.remove_finalizer(&item.identity, FINALIZER_FOREGROUND);
        }
        for (uid, deleting) in blocking {
            if !deleting {
                self.queue.add(Item::Delete(uid));
            }
        }
        Ok(())
    }

    /// Strategic merge patch, or the JSON merge patch `merge(current)` when the resource does
    /// not support it (415). A dependent that is gone is fine.
    pub(super) fn patch(
        &self,
        id: &Identity,
        smp: &Value,
        merge: impl Fn(&Value) -> Result<Value>,
    ) -> std::result::Result<(), Stop> {
        let (k, ns) = self.locate(id)?;
        let client = &self.env().client;
        match client.patch(&k, ns.as_deref(), &id.name, PatchType::Strategic, smp, None) {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Err(Stop::NotFound),
            Err(e) if e.code() == Some(415) => {
                let cur = match client.get_metadata(&k, ns.as_deref(), &id.name) {
                    Ok(v) => v,
                    Err(e) if e.is_not_found() => return Err(Stop::NotFound),
                    Err(e) => return Err(e.into()),
                };
                let jmp = merge(&cur)?;
                match client.patch(&k, ns.as_deref(), &id.name, PatchType::Merge, &jmp, None) {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_not_found() => Err(Stop::NotFound),
                    Err(e) => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    fn delete(&self, id: &Identity, policy: &'static str) -> std::result::Result<(), Stop> {
        let (k, ns) = self.locate(id)?;
        let opts = DeleteOptions {
            propagation_policy: Some(policy),
            precondition_uid: Some(id.uid.clone()),
            ..Default::default()
        };
        match self.env().client.delete(&k, ns.as_deref(), &id.name, &opts) {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Remove `finalizer` from the object with a JSON merge patch guarded by its
    /// resourceVersion, retrying conflicts (client-go's DefaultBackoff: 4 tries).
    pub(super) fn remove_finalizer(
        &self,
        id: &Identity,
        finalizer: &str,
    ) -> std::result::Result<(), Stop> {
        const TRIES: u32 = 4;
        let (k, ns) = self.locate(id)?;
        let client = &self.env().client;
        let mut wait = Duration::from_millis(10);
        for attempt in 1..=TRIES {
            let cur = match client.get_metadata(&k, ns.as_deref(), &id.name) {
                Ok(v) => v,
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => {
                    return Err(Stop::Failed(format!(
                        "cannot finalize owner {id}, because cannot get it: {e}. The garbage collector will retry later"
                    )))
                }
            };
            let Some(patch) = decide::remove_finalizer_patch(&cur, finalizer) else {
                log::debug!("{NAME}: finalizer {finalizer} already removed from {id}");
                return Ok(());
            };
            match client.patch(&k, ns.as_deref(), &id.name, PatchType::Merge, &patch, None) {
                Ok(_) => return Ok(()),
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) if e.is_conflict() && attempt < TRIES => {
                    std::thread::sleep(wait.mul_f64(1.0 + 0.1 * fastrand::f64()));
                    wait *= 5;
                }
                Err(e) if e.is_conflict() => break,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Stop::Failed(format!(
            "updateMaxRetries({TRIES}) has reached. The garbage collector will retry later for owner {id}"
        )))
    }
}
