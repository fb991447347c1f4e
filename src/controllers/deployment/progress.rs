//! The rollout's status: Progressing (with the progress deadline), ReplicaFailure copied
//! from the ReplicaSets, and the requeue that notices a deadline passing (upstream's
//! progress.go).

use super::sync::{quoted, Plan};
use super::util::*;
use std::time::Duration;

impl Plan<'_> {
    /// Upstream's syncRolloutStatus.
    pub fn sync_rollout_status(&mut self, all: &[usize], new: Option<usize>) {
        let mut ns = self.calculate_status(all, new);
        let has_pd = self.d.has_progress_deadline();
        if !has_pd {
            ns.remove_condition(PROGRESSING);
        }
        let current = self.d.status.condition(PROGRESSING).cloned();
        let complete_before = ns.replicas == ns.updated_replicas
            && current
                .as_ref()
                .is_some_and(|c| c.reason == REASON_NEW_RS_AVAILABLE);
        if has_pd && !complete_before {
            let subject = match new {
                Some(n) => format!("ReplicaSet {}", quoted(&self.rss[n].name)),
                None => format!("Deployment {}", quoted(&self.d.name)),
            };
            if deployment_complete(&self.d, &ns) {
                let c = Condition::new(
                    PROGRESSING,
                    "True",
                    REASON_NEW_RS_AVAILABLE,
                    format!("{subject} has successfully progressed."),
                    &self.now_str,
                );
                ns.set_condition(c);
            } else if deployment_progressing(&self.d, &ns) {
                let mut c = Condition::new(
                    PROGRESSING,
                    "True",
                    REASON_RS_UPDATED,
                    format!("{subject} is progressing."),
                    &self.now_str,
                );
                if let Some(cur) = &current {
                    if cur.status == "True" {
                        c.last_transition_time = cur.last_transition_time.clone();
                    }
                    ns.remove_condition(PROGRESSING);
                }
                ns.set_condition(c);
            } else if deployment_timed_out(&self.d, &ns, self.now) {
                let c = Condition::new(
                    PROGRESSING,
                    "False",
                    REASON_TIMED_OUT,
                    format!("{subject} has timed out progressing."),
                    &self.now_str,
                );
                ns.set_condition(c);
            }
        }
        match self.replica_failure(all, new) {
            Some(c) => ns.set_condition(c),
            None => ns.remove_condition(REPLICA_FAILURE),
        }
        if ns == self.d.status {
            self.requeue = self.requeue_stuck(&ns);
            return;
        }
        self.d.status = ns;
    }

    /// Upstream's getReplicaFailures: the new ReplicaSet's ReplicaFailure condition, else the
    /// first one found on any of them.
    fn replica_failure(&self, all: &[usize], new: Option<usize>) -> Option<Condition> {
        let failure = |i: usize| {
            self.rss[i]
                .conditions
                .iter()
                .find(|c| c.type_ == REPLICA_FAILURE)
                .map(Condition::from_replica_set)
        };
        new.and_then(failure)
            .or_else(|| all.iter().find_map(|&i| failure(i)))
    }

    /// Upstream's requeueStuckDeployment: when to look again so that a passing progress
    /// deadline is noticed even if nothing else happens.
    fn requeue_stuck(&self, ns: &DeploymentStatus) -> Option<Duration> {
        let cur = self.d.status.condition(PROGRESSING)?;
        if !self.d.has_progress_deadline() {
            return None;
        }
        if deployment_complete(&self.d, ns) || cur.reason == REASON_TIMED_OUT {
            return None;
        }
        let at = deadline(&self.d, cur);
        match at.duration_since(self.now) {
            Ok(after) if after >= Duration::from_secs(1) => Some(after + Duration::from_secs(1)),
            Ok(after) => Some(after + Duration::from_millis(10)),
            Err(_) => Some(Duration::from_millis(10)),
        }
    }
}
