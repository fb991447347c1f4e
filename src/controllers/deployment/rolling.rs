//! RollingUpdate: grow the new ReplicaSet within maxSurge, shrink old ones within
//! maxUnavailable (upstream's rolling.go).

use super::sync::{Plan, Step};
use super::util::*;

impl Plan<'_> {
    /// Upstream's rolloutRolling.
    pub fn rollout_rolling(&mut self) -> Step<()> {
        let (new, old) = self.sync_revision(true)?;
        let Some(new_i) = new else {
            return Ok(());
        };
        let all = Self::all(&old, new);
        if self.reconcile_new_replica_set(&all, new_i) {
            self.sync_rollout_status(&all, new);
            return Ok(());
        }
        let active_old = self.active(&old);
        if self.reconcile_old_replica_sets(&all, active_old, new_i) {
            self.sync_rollout_status(&all, new);
            return Ok(());
        }
        if deployment_complete(&self.d, &self.d.status) {
            self.cleanup(&old);
        }
        self.sync_rollout_status(&all, new);
        Ok(())
    }

    /// Upstream's reconcileNewReplicaSet. Returns whether it scaled.
    fn reconcile_new_replica_set(&mut self, all: &[usize], new: usize) -> bool {
        let cur = self.rss[new].replicas;
        if cur == self.d.replicas {
            return false;
        }
        if cur > self.d.replicas {
            return self.scale_rs_and_record(new, self.d.replicas);
        }
        // Upstream sums the ReplicaSets' spec.replicas only, so right after an old one is
        // scaled down the new one may grow before the old one's pod is deleted: for a moment
        // there are more pods than replicas + maxSurge. A ReplicaSet counts here with its
        // pods still there (status.replicas) until its controller has removed them; the
        // status update that follows the deletion wakes this Deployment again.
        let total = self.sum(all, ReplicaSet::surge_count);
        match new_rs_new_replicas(&self.d, total, cur) {
            Ok(n) => self.scale_rs_and_record(new, n),
            Err(e) => {
                log::warn!("deployment-controller: {}: {e}", self.d.key());
                false
            }
        }
    }

    /// Upstream's reconcileOldReplicaSets. Returns whether it scaled anything down.
    fn reconcile_old_replica_sets(&mut self, all: &[usize], old: Vec<usize>, new: usize) -> bool {
        let old_pods = self.sum(&old, |r| r.replicas);
        if old_pods == 0 {
            return false;
        }
        let all_pods = self.sum(all, |r| r.replicas);
        let min_available = self.d.replicas - self.d.max_unavailable();
        let new_rs = &self.rss[new];
        let new_unavailable = new_rs.replicas - new_rs.available_replicas;
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return false;
        }
        let Some((old, cleaned)) = self.cleanup_unhealthy_replicas(old, max_scaled_down) else {
            return false;
        };
        let all: Vec<usize> = Self::all(&old, Some(new));
        let scaled = self.scale_down_old_replica_sets_for_rolling_update(&all, old);
        cleaned + scaled > 0
    }

    /// Upstream's cleanupUnhealthyReplicas: old replicas that are not available go first,
    /// oldest ReplicaSet first, at most `max` of them. None on an impossible request.
    fn cleanup_unhealthy_replicas(
        &mut self,
        mut old: Vec<usize>,
        max: i64,
    ) -> Option<(Vec<usize>, i64)> {
        crate::sort::sort_by(&mut old[..], |&a, &b| {
            by_creation(&self.rss[a], &self.rss[b])
        });
        let mut total = 0;
        for &i in &old {
            if total >= max {
                break;
            }
            let rs = &self.rss[i];
            if rs.replicas == 0 || rs.replicas == rs.available_replicas {
                continue;
            }
            let count = (max - total).min(rs.replicas - rs.available_replicas);
            let target = rs.replicas - count;
            if target > rs.replicas {
                log::warn!(
                    "deployment-controller: when cleaning up unhealthy replicas, got invalid request to scale down {}/{} {} -> {target}",
                    self.d.namespace,
                    rs.name,
                    rs.replicas
                );
                return None;
            }
            self.scale_rs_and_record(i, target);
            total += count;
        }
        Some((old, total))
    }

    /// Upstream's scaleDownOldReplicaSetsForRollingUpdate: scale old ReplicaSets down (oldest
    /// first) as far as the available pods above the minimum allow.
    fn scale_down_old_replica_sets_for_rolling_update(
        &mut self,
        all: &[usize],
        mut old: Vec<usize>,
    ) -> i64 {
        let min_available = self.d.replicas - self.d.max_unavailable();
        let available = self.sum(all, |r| r.available_replicas);
        if available <= min_available {
            return 0;
        }
        crate::sort::sort_by(&mut old[..], |&a, &b| {
            by_creation(&self.rss[a], &self.rss[b])
        });
        let to_scale = available - min_available;
        let mut total = 0;
        for &i in &old {
            if total >= to_scale {
                break;
            }
            let cur = self.rss[i].replicas;
            if cur == 0 {
                continue;
            }
            let count = cur.min(to_scale - total);
            self.scale_rs_and_record(i, cur - count);
            total += count;
        }
        total
    }
}
