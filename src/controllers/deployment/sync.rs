//! One pass over a Deployment, as upstream's syncDeployment: the ReplicaSets it owns are held
//! in memory, every write the pass decides is recorded as an action and applied to the
//! in-memory copies, so later steps of the same pass see it (as upstream's sequential calls
//! do). The Deployment's own changes (revision annotation, status) become one status update
//! at the end, made only when something changed.

use super::util::*;
use crate::api::client::{DeleteOptions, PatchType};
use crate::api::resources::{DEPLOYMENTS, REPLICASETS};
use crate::cache::Cache;
use crate::config::gates;
use crate::controllers::{refmanager, Action, EventSpec, EventType, ObjectRef};
use crate::obj;
use crate::obj::At as _;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// A step of the pass stopped the rest of it (upstream returns an error there).
#[derive(Debug)]
pub struct Halt;
pub type Step<T> = Result<T, Halt>;

/// What happened to a remembered ReplicaSet creation failure during the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureNote {
    None,
    /// The failure was reported (condition and Event): forget its message.
    Reported,
    /// The new ReplicaSet exists: forget the failure altogether.
    Resolved,
}

pub struct Plan<'a> {
    pub cache: &'a Cache,
    pub now: SystemTime,
    pub now_str: String,
    pub d: Deployment,
    orig_annotations: BTreeMap<String, String>,
    orig_status: DeploymentStatus,
    /// The ReplicaSets this Deployment owns (claimed), with this pass's writes applied.
    pub rss: Vec<ReplicaSet>,
    pub actions: Vec<Action>,
    pub requeue: Option<Duration>,
    /// A ReplicaSet creation that failed on an earlier pass: (message, failures so far).
    pub create_failure: Option<(String, u32)>,
    /// The ReplicaSet an earlier pass created: (name, replicas it was created with).
    pub created: Option<(String, i64)>,
    pub failure_note: FailureNote,
}

pub fn quoted(s: &str) -> String {
    format!("\"{s}\"")
}

/// The rate limiter's delay after `n` failures (5 ms doubling, at most 1000 s).
pub fn backoff(n: u32) -> Duration {
    let ms = 5u64.saturating_mul(1u64 << n.saturating_sub(1).min(30));
    Duration::from_millis(ms.min(1_000_000))
}

impl<'a> Plan<'a> {
    pub fn new(cache: &'a Cache, now: SystemTime, d: Deployment, rss: Vec<ReplicaSet>) -> Self {
        Plan {
            cache,
            now,
            now_str: crate::compat::timefmt::rfc3339(now),
            orig_annotations: d.annotations.clone(),
            orig_status: d.status.clone(),
            d,
            rss,
            actions: Vec::new(),
            requeue: None,
            create_failure: None,
            created: None,
            failure_note: FailureNote::None,
        }
    }

    fn event(&mut self, event_type: EventType, reason: &str, message: String) {
        self.actions.push(Action::Event(EventSpec {
            involved: ObjectRef::of(&DEPLOYMENTS, &self.d.obj),
            event_type,
            reason: reason.into(),
            message,
        }));
    }

    /// The status update closing the pass, when the Deployment changed.
    pub fn finish(mut self) -> (Vec<Action>, Option<Duration>, FailureNote) {
        let ann_changed = self.d.annotations != self.orig_annotations;
        if ann_changed || self.d.status != self.orig_status {
            let mut o = (*self.d.obj).clone();
            if ann_changed {
                let a: Map<String, Value> = self
                    .d
                    .annotations
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v)))
                    .collect();
                if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.insert("annotations".into(), Value::Object(a));
                }
            }
            o["status"] = self.d.status.to_json();
            self.actions.push(Action::UpdateSubresource {
                kind: DEPLOYMENTS,
                object: o,
                subresource: "status",
            });
        }
        (self.actions, self.requeue, self.failure_note)
    }

    // -----------------------------------------------------------------------------------------
    // new and old ReplicaSets

    /// Upstream's FindNewReplicaSet: the oldest ReplicaSet whose template equals the
    /// Deployment's, the hash label aside.
    pub fn find_new(&self) -> Option<usize> {
        let mut idx: Vec<usize> = (0..self.rss.len()).collect();
        crate::sort::sort_by(&mut idx[..], |&a, &b| {
            by_creation(&self.rss[a], &self.rss[b])
        });
        idx.into_iter()
            .find(|&i| equal_ignore_hash(&self.rss[i].template, &self.d.template))
    }

    pub fn all(old: &[usize], new: Option<usize>) -> Vec<usize> {
        old.iter().copied().chain(new).collect()
    }

    pub fn sum(&self, idx: &[usize], f: impl Fn(&ReplicaSet) -> i64) -> i64 {
        idx.iter().map(|&i| f(&self.rss[i])).sum()
    }

    pub fn active(&self, idx: &[usize]) -> Vec<usize> {
        idx.iter()
            .copied()
            .filter(|&i| self.rss[i].replicas > 0)
            .collect()
    }

    /// Upstream's getAllReplicaSetsAndSyncRevision / getNewReplicaSet: the new ReplicaSet
    /// (its annotations and the Deployment's revision brought in line, or created when
    /// `create`) and every old one.
    pub fn sync_revision(&mut self, create: bool) -> Step<(Option<usize>, Vec<usize>)> {
        let existing = self.find_new();
        let old: Vec<usize> = (0..self.rss.len())
            .filter(|&i| Some(i) != existing)
            .collect();
        let max_old = old
            .iter()
            .filter_map(|&i| self.rss[i].revision())
            .max()
            .unwrap_or(0)
            .max(0);
        let new_revision = max_old + 1;

        if let Some(i) = existing {
            self.failure_note = FailureNote::Resolved;
            if self
                .created
                .as_ref()
                .is_some_and(|(n, _)| *n == self.rss[i].name)
            {
                if let Some((name, replicas)) = self.created.take() {
                    self.created_confirmed(i, &name, replicas);
                }
            }
            let mut ann = self.rss[i].annotations.clone();
            let updated = set_new_rs_annotations(
                &self.d,
                &mut ann,
                new_revision,
                true,
                MAX_REV_HISTORY_CHARS,
            );
            let mrs_differs = self.rss[i].min_ready_seconds != self.d.min_ready_seconds;
            if updated || mrs_differs {
                self.update_rs_annotations(i, ann);
                return Ok((Some(i), old));
            }
            let rev = self.rss[i]
                .annotations
                .get(REVISION)
                .cloned()
                .unwrap_or_default();
            self.d.set_revision(&rev);
            if self.d.has_progress_deadline() && self.d.status.condition(PROGRESSING).is_none() {
                let msg = format!("Found new replica set {}", quoted(&self.rss[i].name));
                let c =
                    Condition::new(PROGRESSING, "True", REASON_FOUND_NEW_RS, msg, &self.now_str);
                self.d.status.set_condition(c);
            }
            return Ok((Some(i), old));
        }
        if !create {
            return Ok((None, old));
        }
        if let Some((msg, n)) = self.create_failure.take() {
            self.report_create_failure(msg, n);
            return Err(Halt);
        }
        self.create_new(old, new_revision)
    }

    /// What upstream does right after creating the new ReplicaSet, done on the pass after the
    /// creation succeeded: the Event, the revision and NewReplicaSetCreated.
    fn created_confirmed(&mut self, i: usize, name: &str, replicas: i64) {
        if replicas > 0 {
            self.event(
                EventType::Normal,
                "ScalingReplicaSet",
                format!("Scaled up replica set {name} from 0 to {replicas}"),
            );
        }
        if let Some(rev) = self.rss[i].annotations.get(REVISION).cloned() {
            self.d.set_revision(&rev);
        }
        if self.d.has_progress_deadline() {
            let msg = format!("Created new replica set {}", quoted(name));
            let c = Condition::new(
                PROGRESSING,
                "True",
                REASON_NEW_RS_CREATED,
                msg,
                &self.now_str,
            );
            self.d.status.set_condition(c);
        }
    }

    /// The new ReplicaSet's annotations (and minReadySeconds) brought in line.
    fn update_rs_annotations(&mut self, i: usize, ann: BTreeMap<String, String>) {
        let rs = &mut self.rss[i];
        let changed: Map<String, Value> = ann
            .iter()
            .filter(|(k, v)| rs.annotations.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        rs.annotations = ann;
        rs.min_ready_seconds = self.d.min_ready_seconds;
        if rs.uid.is_empty() {
            return;
        }
        let mut meta = json!({"uid": rs.uid});
        if !changed.is_empty() {
            meta["annotations"] = Value::Object(changed);
        }
        let patch =
            json!({"metadata": meta, "spec": {"minReadySeconds": self.d.min_ready_seconds}});
        self.actions.push(Action::Patch {
            kind: REPLICASETS,
            namespace: self.d.namespace.clone(),
            name: rs.name.clone(),
            patch_type: PatchType::Merge,
            patch,
            subresource: None,
        });
    }

    fn report_create_failure(&mut self, msg: String, n: u32) {
        if self.d.has_progress_deadline() {
            let c = Condition::new(
                PROGRESSING,
                "False",
                REASON_FAILED_RS_CREATE,
                msg.clone(),
                &self.now_str,
            );
            self.d.status.set_condition(c);
        }
        self.event(EventType::Warning, REASON_FAILED_RS_CREATE, msg);
        self.failure_note = FailureNote::Reported;
        self.requeue = Some(backoff(n));
    }

    fn create_new(
        &mut self,
        old: Vec<usize>,
        new_revision: i64,
    ) -> Step<(Option<usize>, Vec<usize>)> {
        let hash = compute_hash(&self.d.template, self.d.status.collision_count);
        let name = replica_set_name(&self.d.name, &hash);
        let template = template_with_label(&self.d.template, POD_TEMPLATE_HASH, &hash);
        let selector = selector_with_label(
            self.d.selector.as_ref().unwrap_or(&Value::Null),
            POD_TEMPLATE_HASH,
            &hash,
        );

        // A ReplicaSet of that name already there: ours (a slow cache) or a hash collision.
        if let Some(found) = self
            .cache
            .store(REPLICASETS)
            .get_in(&self.d.namespace, &name)
        {
            let ours = obj::controller_ref(&found).is_some_and(|r| r.uid == self.d.uid)
                && equal_ignore_hash(
                    &self.d.template,
                    found.at("/spec/template").unwrap_or(&Value::Null),
                );
            if !ours {
                let before = self.d.status.collision_count.unwrap_or(0);
                self.d.status.collision_count = Some(before + 1);
                log::info!(
                    "deployment-controller: found a hash collision for deployment {} - bumping collisionCount ({before}->{}) to resolve it",
                    self.d.key(),
                    before + 1
                );
                return Err(Halt);
            }
            let rs = ReplicaSet::parse(&found);
            self.rss.push(rs);
            self.d.set_revision(&new_revision.to_string());
            return Ok((Some(self.rss.len() - 1), old));
        }

        let total = self.sum(&old, ReplicaSet::surge_count);
        let replicas = match new_rs_new_replicas(&self.d, total, 0) {
            Ok(n) => n,
            Err(e) => {
                log::warn!("deployment-controller: {}: {e}", self.d.key());
                return Err(Halt);
            }
        };
        let mut annotations = BTreeMap::new();
        set_new_rs_annotations(
            &self.d,
            &mut annotations,
            new_revision,
            false,
            MAX_REV_HISTORY_CHARS,
        );
        let labels = template
            .at("/metadata/labels")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let object = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": self.d.namespace,
                "ownerReferences": [refmanager::controller_owner_ref(&DEPLOYMENTS, &self.d.obj)],
                "labels": labels,
                "annotations": annotations,
            },
            "spec": {
                "replicas": replicas,
                "minReadySeconds": self.d.min_ready_seconds,
                "selector": selector,
                "template": template,
            },
        });
        // The pass ends with the creation. The controller learns how it went; the next pass
        // (the new ReplicaSet's watch event, or the retry after a failure) carries on from
        // there: the Event, revision and condition of a creation, or the creation error.
        self.actions.push(Action::Create {
            kind: REPLICASETS,
            namespace: self.d.namespace.clone(),
            object,
        });
        Err(Halt)
    }

    // -----------------------------------------------------------------------------------------
    // scaling

    /// Upstream's scaleReplicaSet: set the size and the replica annotations when either
    /// differs; an Event when the size changed ("up" or "down" by this ReplicaSet's own
    /// change, by v1.34). Returns whether the size changed.
    pub fn scale_rs(&mut self, i: usize, new_scale: i64) -> bool {
        let desired = self.d.replicas;
        let max = self.d.replicas + self.d.max_surge();
        let rs = &mut self.rss[i];
        let size_changes = rs.replicas != new_scale;
        if !size_changes && !replicas_annotations_need_update(&rs.annotations, desired, max) {
            return false;
        }
        if rs.uid.is_empty() {
            // Created in this pass: its size was decided at creation.
            return false;
        }
        let old = rs.replicas;
        let op = if old < new_scale { "up" } else { "down" };
        rs.replicas = new_scale;
        set_replicas_annotations(&mut rs.annotations, desired, max);
        let patch = json!({
            "metadata": {
                "uid": rs.uid,
                "annotations": {
                    DESIRED_REPLICAS: desired.to_string(),
                    MAX_REPLICAS: max.to_string(),
                },
            },
            "spec": {"replicas": new_scale},
        });
        let name = rs.name.clone();
        self.actions.push(Action::Patch {
            kind: REPLICASETS,
            namespace: self.d.namespace.clone(),
            name: name.clone(),
            patch_type: PatchType::Merge,
            patch,
            subresource: None,
        });
        if size_changes {
            self.event(
                EventType::Normal,
                "ScalingReplicaSet",
                format!("Scaled {op} replica set {name} from {old} to {new_scale}"),
            );
        }
        size_changes
    }

    /// Upstream's scaleReplicaSetAndRecordEvent.
    pub fn scale_rs_and_record(&mut self, i: usize, new_scale: i64) -> bool {
        if self.rss[i].replicas == new_scale {
            return false;
        }
        self.scale_rs(i, new_scale)
    }

    /// Upstream's FindActiveOrLatest (sorts `old` newest first, as upstream does in place).
    fn active_or_latest(&self, new: Option<usize>, old: &mut [usize]) -> Option<usize> {
        if new.is_none() && old.is_empty() {
            return None;
        }
        crate::sort::sort_by(&mut old[..], |&a, &b| {
            by_creation(&self.rss[b], &self.rss[a])
        });
        let all = self.active(&Self::all(old, new));
        match all.len() {
            0 => new.or_else(|| old.first().copied()),
            1 => Some(all[0]),
            _ => None,
        }
    }

    /// Upstream's scale: a scaling event (or a paused Deployment) resizes the one active
    /// ReplicaSet, or spreads the difference over all active ones in proportion to their
    /// sizes, the leftover going to the largest.
    pub fn scale(&mut self, new: Option<usize>, old: &[usize]) {
        let mut old = old.to_vec();
        if let Some(i) = self.active_or_latest(new, &mut old) {
            if self.rss[i].replicas != self.d.replicas {
                self.scale_rs_and_record(i, self.d.replicas);
            }
            return;
        }
        if new.is_some_and(|n| is_saturated(&self.d, &self.rss[n])) {
            for o in self.active(&old) {
                self.scale_rs_and_record(o, 0);
            }
            return;
        }
        if !self.d.is_rolling() {
            return;
        }
        let mut all = self.active(&Self::all(&old, new));
        let total = self.sum(&all, |r| r.replicas);
        let allowed = if self.d.replicas > 0 {
            self.d.replicas + self.d.max_surge()
        } else {
            0
        };
        let to_add = allowed - total;
        match to_add.signum() {
            1 => crate::sort::sort_by(&mut all[..], |&a, &b| {
                by_size_newer(&self.rss[a], &self.rss[b])
            }),
            -1 => crate::sort::sort_by(&mut all[..], |&a, &b| {
                by_size_older(&self.rss[a], &self.rss[b])
            }),
            _ => {}
        }
        let mut added = 0;
        let mut sizes = Vec::with_capacity(all.len());
        for &i in &all {
            let rs = &self.rss[i];
            if to_add != 0 {
                let p = proportion(rs, &self.d, to_add, added);
                sizes.push(rs.replicas + p);
                added += p;
            } else {
                sizes.push(rs.replicas);
            }
        }
        for (k, &i) in all.iter().enumerate() {
            let mut size = sizes[k];
            if k == 0 && to_add != 0 {
                size = (size + to_add - added).max(0);
            }
            self.scale_rs(i, size);
        }
    }

    // -----------------------------------------------------------------------------------------
    // history

    /// Upstream's cleanupDeployment: delete the oldest revisions beyond revisionHistoryLimit,
    /// only those fully scaled down and observed so.
    pub fn cleanup(&mut self, old: &[usize]) {
        if !self.d.has_revision_history_limit() {
            return;
        }
        let limit = self.d.revision_history_limit.unwrap_or(0);
        let mut cleanable: Vec<usize> = old
            .iter()
            .copied()
            .filter(|&i| !self.rss[i].deleting && !self.rss[i].uid.is_empty())
            .collect();
        let diff = cleanable.len() as i64 - limit;
        if diff <= 0 {
            return;
        }
        crate::sort::sort_by(&mut cleanable[..], |&a, &b| {
            by_revision(&self.rss[a], &self.rss[b])
        });
        for &i in cleanable.iter().take(diff as usize) {
            let rs = &self.rss[i];
            if rs.status_replicas != 0
                || rs.replicas != 0
                || rs.generation > rs.observed_generation
                || rs.deleting
            {
                continue;
            }
            log::debug!(
                "deployment-controller: {}: cleaning up replica set {}",
                self.d.key(),
                rs.name
            );
            self.actions.push(Action::Delete {
                kind: REPLICASETS,
                namespace: self.d.namespace.clone(),
                name: rs.name.clone(),
                options: DeleteOptions::default(),
            });
        }
    }

    // -----------------------------------------------------------------------------------------
    // status

    /// Upstream's calculateStatus.
    pub fn calculate_status(&self, all: &[usize], new: Option<usize>) -> DeploymentStatus {
        let available = self.sum(all, |r| r.available_replicas);
        let total = self.sum(all, |r| r.replicas);
        let mut s = DeploymentStatus {
            observed_generation: self.d.generation,
            replicas: self.sum(all, |r| r.status_replicas),
            updated_replicas: new.map_or(0, |n| self.rss[n].status_replicas),
            ready_replicas: self.sum(all, |r| r.ready_replicas),
            available_replicas: available,
            unavailable_replicas: (total - available).max(0),
            conditions: self.d.status.conditions.clone(),
            collision_count: self.d.status.collision_count,
            terminating_replicas: gates::enabled("DeploymentReplicaSetTerminatingReplicas")
                .then(|| terminating_replicas(all.iter().map(|&i| &self.rss[i])))
                .flatten(),
        };
        let c = if available >= self.d.replicas - self.d.max_unavailable() {
            Condition::new(
                AVAILABLE,
                "True",
                REASON_MIN_AVAILABLE,
                "Deployment has minimum availability.".into(),
                &self.now_str,
            )
        } else {
            Condition::new(
                AVAILABLE,
                "False",
                REASON_MIN_UNAVAILABLE,
                "Deployment does not have minimum availability.".into(),
                &self.now_str,
            )
        };
        s.set_condition(c);
        s
    }

    /// Upstream's syncDeploymentStatus.
    pub fn sync_deployment_status(&mut self, all: &[usize], new: Option<usize>) {
        self.d.status = self.calculate_status(all, new);
    }

    /// Upstream's checkPausedConditions.
    pub fn check_paused_conditions(&mut self) {
        if !self.d.has_progress_deadline() {
            return;
        }
        let cond = self.d.status.condition(PROGRESSING);
        if cond.is_some_and(|c| c.reason == REASON_TIMED_OUT) {
            return;
        }
        let paused_exists = cond.is_some_and(|c| c.reason == REASON_PAUSED);
        let c = if self.d.paused && !paused_exists {
            Condition::new(
                PROGRESSING,
                "Unknown",
                REASON_PAUSED,
                "Deployment is paused".into(),
                &self.now_str,
            )
        } else if !self.d.paused && paused_exists {
            Condition::new(
                PROGRESSING,
                "Unknown",
                REASON_RESUMED,
                "Deployment is resumed".into(),
                &self.now_str,
            )
        } else {
            return;
        };
        self.d.status.set_condition(c);
    }

    // -----------------------------------------------------------------------------------------
    // the paths of syncDeployment

    /// Upstream's syncDeployment after the ReplicaSets are claimed: status only while being
    /// deleted, `sync` when paused or scaled, else the strategy's rollout.
    pub fn sync_deployment(&mut self) -> Step<()> {
        if self.d.deleting {
            return self.sync_status_only();
        }
        self.check_paused_conditions();
        if self.d.paused {
            return self.sync();
        }
        if self.is_scaling_event()? {
            return self.sync();
        }
        match self.d.strategy.clone() {
            Strategy::Recreate => self.rollout_recreate(),
            Strategy::RollingUpdate { .. } => self.rollout_rolling(),
            Strategy::Other(t) => {
                log::warn!(
                    "deployment-controller: {}: unexpected deployment strategy type: {t}",
                    self.d.key()
                );
                Ok(())
            }
        }
    }

    /// Upstream's syncStatusOnly (a Deployment being deleted).
    pub fn sync_status_only(&mut self) -> Step<()> {
        let (new, old) = self.sync_revision(false)?;
        self.sync_deployment_status(&Self::all(&old, new), new);
        Ok(())
    }

    /// Upstream's sync: scaling events and paused Deployments.
    pub fn sync(&mut self) -> Step<()> {
        let (new, old) = self.sync_revision(false)?;
        self.scale(new, &old);
        if self.d.paused {
            self.cleanup(&old);
        }
        self.sync_deployment_status(&Self::all(&old, new), new);
        Ok(())
    }

    /// Upstream's isScalingEvent: an active ReplicaSet records another desired size.
    pub fn is_scaling_event(&mut self) -> Step<bool> {
        let (new, old) = self.sync_revision(false)?;
        let all = self.active(&Self::all(&old, new));
        Ok(all.iter().any(|&i| {
            self.rss[i]
                .desired_replicas_annotation()
                .is_some_and(|d| d != self.d.replicas)
        }))
    }
}
