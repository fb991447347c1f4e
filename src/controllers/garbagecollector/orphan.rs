//! Orphan deletion: an owner deleted with the `orphan` finalizer has its reference removed
//! from every dependent, then the finalizer removed.

use std::sync::Mutex;

use super::decide;
use super::graph::{Identity, FINALIZER_ORPHAN};
use super::{Inner, Next, Stop, NAME};

/// Dependents orphaned at the same time.
const PARALLEL_ORPHANING: usize = 8;

impl Inner {
    pub(super) fn attempt_to_orphan(&self, uid: &str) -> Next {
        let (owner, dependents) = {
            let g = self.graph.read().unwrap_or_else(|p| p.into_inner());
            let Some(n) = g.get(uid) else {
                return Next::Forget;
            };
            let deps: Vec<Identity> = n
                .dependents
                .iter()
                .filter_map(|d| g.get(d))
                .map(|d| d.identity.clone())
                .collect();
            (n.identity.clone(), deps)
        };
        if let Err(e) = self.orphan_dependents(&owner, &dependents) {
            log::warn!("{NAME}: orphanDependents for {owner} failed with {e}");
            return Next::Requeue;
        }
        match self.remove_finalizer(&owner, FINALIZER_ORPHAN) {
            Ok(()) | Err(Stop::VirtualDeleted | Stop::NotFound) => Next::Forget,
            Err(Stop::ClusterScopedRefersNamespaced) => Next::Forget,
            Err(Stop::Mapping(e) | Stop::Failed(e)) => {
                log::warn!("{NAME}: removeOrphanFinalizer for {owner} failed with {e}");
                Next::Requeue
            }
        }
    }

    /// Remove the owner's reference from every dependent, a few at a time.
    fn orphan_dependents(
        &self,
        owner: &Identity,
        deps: &[Identity],
    ) -> std::result::Result<(), String> {
        let errors: Mutex<Vec<String>> = Mutex::new(Vec::new());
        let uids = [owner.uid.clone()];
        crate::runtime::pool::for_each_parallel(deps.len(), PARALLEL_ORPHANING, |i| {
            let dep = &deps[i];
            let smp = decide::delete_refs_smp(&dep.uid, &uids);
            match self.patch(dep, &smp, |cur| Ok(decide::delete_refs_merge(cur, &uids))) {
                Ok(()) | Err(Stop::VirtualDeleted | Stop::NotFound) => {}
                Err(Stop::ClusterScopedRefersNamespaced) => {}
                Err(Stop::Mapping(e) | Stop::Failed(e)) => errors
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(format!("orphaning {dep} failed, {e}")),
            }
            true
        });
        let errors = errors.into_inner().unwrap_or_else(|p| p.into_inner());
        if errors.is_empty() {
            log::debug!("{NAME}: successfully updated all dependents of {owner}");
            Ok(())
        } else {
            Err(format!(
                "failed to orphan dependents of owner {owner}, got errors: {}",
                errors.join(", ")
            ))
        }
    }
}
