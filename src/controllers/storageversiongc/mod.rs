//! storageversion-garbage-collector-controller (upstream's `storageversiongc`; since 1.20,
//! gates APIServerIdentity and StorageVersionAPI, the second alpha and off): removes from
//! each StorageVersion (`internal.apiserver.k8s.io/v1alpha1`) the entries of API servers
//! whose identity Lease (`kube-system`, label `apiserver.kubernetes.io/identity:
//! kube-apiserver`) is gone, and deletes a StorageVersion left with none.
//!
//! - Two queues, one worker each, client-go's default rate limiter and retries without end,
//!   as upstream: `storage_version_garbage_collector_leases` (an identity Lease deleted: every
//!   StorageVersion listed live, the entries of that server removed) and
//!   `storage_version_garbage_collector_storageversions` (a StorageVersion added or updated
//!   with an entry whose server's Lease the cache does not hold as an identity Lease: read
//!   live, each entry's Lease read live, the entries without one removed).
//! - A StorageVersion keeping some entries is written by a PUT of `status`, with
//!   `commonEncodingVersion` and the `AllEncodingVersionsEqual` condition recomputed as the
//!   API server's updater does; one left with none is deleted.
//! - Writes as `storage-version-garbage-collector`; no Events.

mod decide;

use crate::api::client::{Client, DeleteOptions, ListOptions};
use crate::api::resources::{LEASES, STORAGEVERSIONS};
use crate::cache::{Cache, Delta, DeltaKind, Watch};
use crate::controller::{RunEnv, SelfDriven};
use crate::error::Result;
use crate::obj;
use crate::queue::WorkQueue;
pub use decide::{entries_without, identity_lease, set_common_encoding_version};
use serde_json::Value;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::SystemTime;

pub const NAME: &str = "storageversion-garbage-collector-controller";
pub const LEASE_QUEUE: &str = "storage_version_garbage_collector_leases";
pub const SV_QUEUE: &str = "storage_version_garbage_collector_storageversions";

/// Leases: the labels are all it reads.
pub const LEASE_WATCH: Watch = Watch::fields(LEASES, &[]);
/// StorageVersions, whole.
pub const SV_WATCH: Watch = Watch::full(STORAGEVERSIONS);

/// Its row in the controller table. Off, with one line, when the API server does not serve
/// `internal.apiserver.k8s.io/v1alpha1` storageversions (its StorageVersionAPI gate off).
pub fn build(
    cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controller::Runnable>> {
    if crate::controllers::kit::served::served(
        cx.rest,
        "/apis/internal.apiserver.k8s.io/v1alpha1",
        "storageversions",
    ) == Some(false)
    {
        log::info!(
            "{NAME}: the API server does not serve internal.apiserver.k8s.io/v1alpha1 storageversions; not starting it"
        );
        return Ok(None);
    }
    Ok(Some(crate::controller::Runnable::drives(
        StorageVersionGc {
            leases: WorkQueue::new(LEASE_QUEUE),
            versions: WorkQueue::new(SV_QUEUE),
        },
    )))
}

pub struct StorageVersionGc {
    leases: Arc<WorkQueue<String>>,
    versions: Arc<WorkQueue<String>>,
}

/// The handlers' decisions, on the watch path (cache lookups only).
pub fn on_lease_delta(d: &Delta) -> Option<String> {
    let l = d.object();
    (d.kind == DeltaKind::Deleted && obj::namespace(l) == "kube-system" && identity_lease(l))
        .then(|| obj::name(l).to_string())
}

/// A StorageVersion added or updated with an entry whose server has no identity Lease in
/// the cache.
pub fn on_storage_version_delta(d: &Delta, cache: &Cache) -> Option<String> {
    if d.kind == DeltaKind::Deleted {
        return None;
    }
    let sv = d.object();
    let leases = cache.store_for(&LEASE_WATCH);
    let stale = decide::server_ids(sv).iter().any(|id| {
        !leases
            .get(&obj::make_key("kube-system", id))
            .is_some_and(|l| identity_lease(&l))
    });
    if stale {
        log::debug!(
            "Observed storage version with invalid apiserver entry objName=\"{}\"",
            obj::name(sv)
        );
    }
    stale.then(|| obj::name(sv).to_string())
}

impl SelfDriven for StorageVersionGc {
    fn register(&self, cache: &Arc<Cache>) {
        let q = Arc::downgrade(&self.leases);
        cache
            .informer_for(&LEASE_WATCH)
            .add_handler(Arc::new(move |d: &Delta| {
                if let (Some(q), Some(k)) = (q.upgrade(), on_lease_delta(d)) {
                    log::debug!("Observed lease deleted castObjName=\"{k}\"");
                    q.add(k);
                }
            }));
        let (q, c) = (Arc::downgrade(&self.versions), Arc::downgrade(cache));
        cache
            .informer_for(&SV_WATCH)
            .add_handler(Arc::new(move |d: &Delta| {
                let (Some(q), Some(c)) = (q.upgrade(), c.upgrade()) else {
                    return;
                };
                if let Some(k) = on_storage_version_delta(d, &c) {
                    q.add(k);
                }
            }));
    }

    fn start(&self, env: &RunEnv) -> Vec<JoinHandle<()>> {
        log::info!("Starting storage version garbage collector");
        let (q, client) = (self.leases.clone(), env.client.clone());
        env.serve(
            LEASE_QUEUE,
            self.leases.clone(),
            1,
            move |k: &String| match deleted_lease(&client, k) {
                Ok(()) => q.forget(k),
                Err(e) => {
                    log::error!("lease {k} failed with: {e}");
                    q.add_rate_limited(k.clone());
                }
            },
        );
        let (q, client) = (self.versions.clone(), env.client.clone());
        env.serve(
            SV_QUEUE,
            self.versions.clone(),
            1,
            move |k: &String| match sync_storage_version(&client, k) {
                Ok(()) => q.forget(k),
                Err(e) => {
                    log::error!("storage version {k} failed with: {e}");
                    q.add_rate_limited(k.clone());
                }
            },
        );
        Vec::new()
    }

    fn shutdown(&self) {
        log::info!("Shutting down storage version garbage collector");
        self.leases.shut_down();
        self.versions.shut_down();
    }
}

/// `processDeletedLease`: nothing while the Lease exists again; else every StorageVersion
/// (listed live) with an entry of that server loses it.
fn deleted_lease(client: &Client, id: &str) -> Result<()> {
    match client.get(&LEASES, Some("kube-system"), id) {
        Ok(_) => return Ok(()),
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e),
    }
    let list = client.list(&STORAGEVERSIONS, None, &ListOptions::default())?;
    let mut first_err = None;
    for sv in &list.items {
        let Some(keep) = entries_without(sv, |sid| sid == id) else {
            continue;
        };
        if let Err(e) = update_or_delete(client, sv, keep) {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// `syncStorageVersion`: the StorageVersion read live, each entry's Lease read live; the
/// entries without an identity Lease removed.
fn sync_storage_version(client: &Client, name: &str) -> Result<()> {
    let sv = match client.get(&STORAGEVERSIONS, None, name) {
        Ok(sv) => sv,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e),
    };
    let keep = entries_without(&sv, |id| {
        !client
            .get(&LEASES, Some("kube-system"), id)
            .is_ok_and(|l| identity_lease(&l))
    });
    match keep {
        Some(keep) => update_or_delete(client, &sv, keep),
        None => Ok(()),
    }
}

/// `updateOrDeleteStorageVersion`.
fn update_or_delete(client: &Client, sv: &Value, keep: Vec<Value>) -> Result<()> {
    if keep.is_empty() {
        return client.delete(
            &STORAGEVERSIONS,
            None,
            obj::name(sv),
            &DeleteOptions::default(),
        );
    }
    let mut next = sv.clone();
    next["status"]["storageVersions"] = Value::Array(keep);
    set_common_encoding_version(&mut next, SystemTime::now());
    client.update_status(&STORAGEVERSIONS, &next).map(|_| ())
}

#[cfg(test)]
mod tests;
