//! Recreate: scale every old ReplicaSet to 0, wait until their pods are gone, then scale the
//! new one up (upstream's recreate.go).

use super::sync::{Plan, Step};
use super::util::*;
use crate::api::resources::PODS;
use crate::obj;
use crate::obj::At as _;
use serde_json::Value;

impl Plan<'_> {
    /// Upstream's rolloutRecreate.
    pub fn rollout_recreate(&mut self) -> Step<()> {
        let (mut new, mut old) = self.sync_revision(false)?;
        let mut all = Self::all(&old, new);
        let mut scaled = false;
        for i in self.active(&old) {
            scaled |= self.scale_rs_and_record(i, 0);
        }
        if scaled {
            self.sync_rollout_status(&all, new);
            return Ok(());
        }
        if self.old_pods_running(new, &old) {
            self.sync_rollout_status(&all, new);
            return Ok(());
        }
        if new.is_none() {
            (new, old) = self.sync_revision(true)?;
            all = Self::all(&old, new);
        }
        if let Some(n) = new {
            self.scale_rs_and_record(n, self.d.replicas);
        }
        if deployment_complete(&self.d, &self.d.status) {
            self.cleanup(&old);
        }
        self.sync_rollout_status(&all, new);
        Ok(())
    }

    /// Upstream's oldPodsRunning: old ReplicaSets still report pods, or a pod of one of them
    /// (by controller reference) is not yet Succeeded or Failed.
    pub fn old_pods_running(&self, new: Option<usize>, old: &[usize]) -> bool {
        if self.sum(old, |r| r.status_replicas) > 0 {
            return true;
        }
        let pods = self.cache.store(PODS);
        let selector = self.d.selector.as_ref();
        self.rss.iter().enumerate().any(|(i, rs)| {
            if Some(i) == new || rs.uid.is_empty() {
                return false;
            }
            pods.by_owner(&rs.uid).iter().any(|p| {
                obj::controller_ref(p).is_some_and(|r| r.uid == rs.uid)
                    && selector.is_some_and(|s| obj::selector_matches(s, p))
                    && !matches!(
                        p.at("/status/phase").and_then(Value::as_str),
                        Some("Succeeded" | "Failed")
                    )
            })
        })
    }
}
