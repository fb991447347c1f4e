//! One sync of a StatefulSet (upstream's `sync`, `UpdateStatefulSet`, `updateStatefulSet`
//! and `StatefulPodControl`): adopt revisions and pods, find or make the update revision,
//! walk the ordinals, and report status.

use super::identity::{self as id, partition, update_strategy};
use super::{recreate, StatefulSetController};
use crate::api::client::{DeleteOptions, PatchType};
use crate::api::resources::{CONTROLLERREVISIONS, PERSISTENTVOLUMECLAIMS, PODS, STATEFULSETS};
use crate::controllers::kit::history;
use crate::controllers::refmanager::{self, Claim};
use crate::controllers::{Action, Cx, EventSpec, EventType, ObjectRef, Outcome, Report};
use crate::error::Result;
use crate::obj::{self, At as _, Obj};
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;

/// Writes in order, each only after the one before succeeded (nested slow starts of one).
pub fn seq(list: Vec<Action>) -> Option<Action> {
    let mut acc: Option<Action> = None;
    for a in list.into_iter().rev() {
        acc = Some(match acc {
            None => Action::SlowStart(vec![a]),
            Some(rest) => Action::SlowStart(vec![a, rest]),
        });
    }
    acc
}

/// A slot of the ordinal range: the pod there, or the one to create.
pub(super) struct Slot {
    pub(super) ord: i64,
    pub(super) pod: Option<Obj>,
    /// The pod a missing one would be: its revision's template, labelled.
    pub(super) revision: String,
}

pub struct Sync<'a> {
    pub(super) ctrl: &'a StatefulSetController,
    pub(super) cx: &'a Cx<'a>,
    pub(super) set: &'a Value,
    pub(super) selector: &'a Value,
    pub(super) ns: String,
    pub(super) name: String,
}

#[derive(Default, Clone, PartialEq, Debug)]
pub(super) struct Counts {
    pub(super) replicas: i64,
    pub(super) ready: i64,
    pub(super) available: i64,
    pub(super) current: i64,
    pub(super) updated: i64,
}

impl<'a> Sync<'a> {
    pub fn new(
        ctrl: &'a StatefulSetController,
        cx: &'a Cx<'a>,
        set: &'a Value,
        selector: &'a Value,
    ) -> Self {
        Sync {
            ctrl,
            cx,
            set,
            selector,
            ns: obj::namespace(set).to_string(),
            name: obj::name(set).to_string(),
        }
    }

    fn about(&self) -> ObjectRef {
        ObjectRef::of(&STATEFULSETS, self.set)
    }

    pub(super) fn event(&self, t: EventType, reason: &str, message: String) -> Action {
        Action::Event(EventSpec {
            involved: self.about(),
            event_type: t,
            reason: reason.to_string(),
            message,
        })
    }

    /// A pod write with upstream's `recordPodEvent` around it: the failure from the answer,
    /// the success after it.
    fn pod_write(&self, verb: &str, pod: &str, action: Action) -> Vec<Action> {
        let title = title(verb);
        vec![
            Action::Reported {
                action: Box::new(action),
                report: Report {
                    about: self.about(),
                    success_reason: "",
                    success_prefix: "",
                    failure_reason: failed_reason(verb),
                    failure_prefix: format!(
                        "{title} Pod {pod} in StatefulSet {} failed error: ",
                        self.name
                    )
                    .into(),
                },
            },
            self.event(
                EventType::Normal,
                &format!("Successful{title}"),
                format!("{title} Pod {pod} in StatefulSet {} successful", self.name),
            ),
        ]
    }

    pub fn run(self) -> Result<Outcome> {
        let set = self.set;
        let uid = obj::uid(set).to_string();
        let mut pre: Vec<Action> = Vec::new();

        // Revisions: the parent's and orphans its selector matches; orphans are adopted.
        let revstore = self.cx.cache.store(CONTROLLERREVISIONS);
        let revisions = history::owned(&revstore, &self.ns, &uid, self.selector);
        self.adopt_orphan_revisions(&revisions, &mut pre)?;
        let pods = self.claim_pods(&uid, &mut pre)?;

        // The update revision: the newest equal one, an older equal one renumbered, or a new one.
        let mut steps: Vec<Action> = Vec::new();
        let (update_rev, collision) = self.update_revision(&revstore, &revisions, &mut steps);
        let status_current = set
            .at("/status/currentRevision")
            .and_then(Value::as_str)
            .unwrap_or("");
        let current_rev: Value = revisions
            .iter()
            .find(|r| obj::name(r) == status_current)
            .map(|r| (**r).clone())
            .unwrap_or_else(|| update_rev.clone());
        let current_name = obj::name(&current_rev).to_string();
        let update_name = obj::name(&update_rev).to_string();
        if recreate::is_recreate(set) && !self.ctrl.recreate_gate {
            // Upstream stops before any pod or status work, and retries.
            let (warning, why) = self.unknown_strategy();
            log::warn!("{}: {}/{}: {why}", self.ctrl.name(), self.ns, self.name);
            let mut actions = pre;
            actions.extend(seq(steps));
            actions.push(warning);
            actions.extend(seq(self.truncate_history(
                &revisions,
                &pods,
                current_name,
                update_name,
            )));
            return Ok(Outcome {
                actions,
                retry_quietly: Some(why),
                ..Outcome::default()
            });
        }

        let mut plan = Plan::default();
        if !obj::is_deleting(set) {
            self.update_pods(&mut plan, &current_rev, &update_rev, &pods);
        }
        let live_pods = pods
            .iter()
            .filter(|p| !plan.replaced.contains(obj::name(p)));
        let mut counts = self.counts(live_pods, &current_name, &update_name);
        // Upstream can write -1 here (a pod deleted for the update that was not counted as
        // current), which the API server refuses; never below zero.
        counts.current = (counts.current - plan.current_less).max(0);
        steps.extend(plan.steps);
        let plan_progress = plan.progressing;

        let mut actions = pre;
        actions.extend(seq(steps));
        actions.extend(self.status_update(
            &counts,
            &current_name,
            &update_name,
            collision,
            plan_progress,
        ));
        actions.extend(seq(self.truncate_history(
            &revisions,
            &pods,
            current_name,
            update_name,
        )));

        let min_ready = set
            .at("/spec/minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let requeue_after = (min_ready > 0 && counts.available != id::replicas(set))
            .then(|| Duration::from_secs(min_ready as u64));
        Ok(Outcome {
            actions,
            requeue_after,
            ..Outcome::default()
        })
    }

    /// Upstream's `getPodsForStatefulSet`: members by name that the set controls, or orphans
    /// it may adopt (adopted by patches into `pre`; ones no longer matching are released).
    fn claim_pods(&self, uid: &str, pre: &mut Vec<Action>) -> Result<Vec<Obj>> {
        let set = self.set;
        let pods_store = self.cx.cache.store(PODS);
        let candidates = pods_store.claimable(&self.ns, uid, |m| {
            id::is_member_of(set, m)
                && !obj::is_deleting(m)
                && obj::selector_matches(self.selector, m)
        });
        let mut pods: Vec<Obj> = Vec::new();
        let mut adopt: Vec<Obj> = Vec::new();
        for p in candidates {
            if !id::is_member_of(set, &p) {
                continue;
            }
            match refmanager::claim(set, Some(self.selector), &p) {
                Claim::Owned => pods.push(p),
                Claim::Adopt => adopt.push(p),
                Claim::Release => pre.push(refmanager::release_action(PODS, &self.ns, &p, uid)),
                Claim::Ignore => {}
            }
        }
        if !adopt.is_empty() {
            self.ctrl.can_adopt(self.cx, set).map_err(|e| {
                crate::Error::Config(format!(
                    "can't adopt Pod {}/{}: {e}",
                    self.ns,
                    obj::name(&adopt[0])
                ))
            })?;
            for p in adopt {
                pre.push(refmanager::adopt_action(
                    PODS,
                    &self.ns,
                    &p,
                    &STATEFULSETS,
                    set,
                ));
                pods.push(p);
            }
        }
        Ok(pods)
    }

    /// Upstream's `updateStatefulSet` after the revisions are known: the writes for the
    /// ordinals in range, those past it, and the rolling update.
    fn update_pods(&self, plan: &mut Plan, current_rev: &Value, update_rev: &Value, pods: &[Obj]) {
        let set = self.set;
        let current_set = id::apply_revision(set, current_rev);
        let update_set = id::apply_revision(set, update_rev);
        let (current_name, update_name) = (obj::name(current_rev), obj::name(update_rev));
        let start = id::start_ordinal(set);
        let replicas = id::replicas(set);
        let min_ready = set
            .at("/spec/minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let now = self.cx.now;

        let mut slots: Vec<Slot> = (0..replicas)
            .map(|i| Slot {
                ord: start + i,
                pod: None,
                revision: String::new(),
            })
            .collect();
        let mut condemned: Vec<Obj> = Vec::new();
        for p in pods {
            let ord = id::ordinal(p);
            if id::in_range(set, ord) {
                slots[(ord - start) as usize].pod = Some(p.clone());
            } else if ord >= 0 {
                condemned.push(p.clone());
            }
        }
        crate::sort::sort_by_key(&mut condemned[..], |p| std::cmp::Reverse(id::ordinal(p)));
        // Which revision a missing pod gets (upstream's `newVersionedStatefulSetPod`).
        let partition = partition(set);
        let rolling = update_strategy(set) == "RollingUpdate";
        let status_current = set
            .at("/status/currentReplicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        for s in &mut slots {
            let below = match partition {
                None => rolling && s.ord < start + status_current,
                Some(p) => s.ord < start + p,
            };
            s.revision = if below { current_name } else { update_name }.to_string();
        }
        // The first unavailable pod, in range first (a missing pod is unavailable), then past
        // it from the lowest ordinal.
        let first_unhealthy: Option<String> = slots
            .iter()
            .find(|s| id::is_unavailable(s.pod.as_deref(), min_ready, now))
            .map(|s| id::pod_name(set, s.ord))
            .or_else(|| {
                condemned
                    .iter()
                    .rev()
                    .find(|p| id::is_unavailable(Some(p), min_ready, now))
                    .map(|p| obj::name(p).to_string())
            });

        if recreate::is_recreate(set) {
            if !self.recreate_delete_and_wait(plan, &slots, &condemned, update_name) {
                return;
            }
            if current_name != update_name {
                plan.progressing = Some((
                    "True",
                    recreate::IN_PROGRESS,
                    "Waiting for new-revision pods to be created",
                ));
            }
        }
        let monotonic =
            set.at("/spec/podManagementPolicy").and_then(Value::as_str) != Some("Parallel");
        let mut burst: Vec<Action> = Vec::new();
        for s in &slots {
            let tmpl_set = if s.revision == current_name {
                &current_set
            } else {
                &update_set
            };
            let (acts, exit) =
                self.process_replica(plan, tmpl_set, &update_set, s, monotonic, min_ready);
            if monotonic {
                plan.steps.extend(acts);
                if exit {
                    return;
                }
            } else if let Some(a) = seq(acts) {
                burst.push(a);
            }
        }
        if !burst.is_empty() {
            plan.steps
                .push(Action::SlowStart(std::mem::take(&mut burst)));
        }

        // Past the range: claims' references for the retention policy, then deletions.
        for p in &condemned {
            plan.steps.extend(self.fix_claims(&update_set, p, false));
        }
        for p in &condemned {
            let pname = obj::name(p).to_string();
            if id::is_terminating(p) {
                if monotonic {
                    return;
                }
                continue;
            }
            let not_first = first_unhealthy.as_deref() != Some(pname.as_str());
            if monotonic && not_first && !id::is_running_and_ready(p) {
                return;
            }
            if monotonic && not_first && !id::is_running_and_available(p, min_ready, now) {
                return;
            }
            log::debug!(
                "{}: pod {}/{pname} is terminating for scale down",
                self.ctrl.name(),
                self.ns
            );
            let del = self.delete_pod(&pname);
            if monotonic {
                plan.steps.extend(del);
                return;
            }
            burst.extend(seq(del));
        }
        if !burst.is_empty() {
            plan.steps.push(Action::Parallel(burst));
        }

        if matches!(update_strategy(set), "OnDelete" | "Recreate") {
            return;
        }
        // A failed pod being replaced counts as missing.
        for s in &mut slots {
            if s.pod
                .as_ref()
                .is_some_and(|p| plan.replaced.contains(obj::name(p)))
            {
                s.pod = None;
            }
        }
        let gate = crate::config::gates::enabled("MaxUnavailableStatefulSet");
        if gate {
            let unavailable = slots
                .iter()
                .filter(|s| id::is_unavailable(s.pod.as_deref(), min_ready, now))
                .count();
            super::metrics::set_unavailable(&self.ns, &self.name, policy(set), unavailable as i64);
        }
        let deletions = match super::rolling::rolling_targets(set, &slots, update_name, gate, now) {
            Ok(d) => d,
            Err(e) => {
                log::warn!("{}: {}/{}: {e}", self.ctrl.name(), self.ns, self.name);
                return;
            }
        };
        for name in deletions {
            log::debug!(
                "{}: pod {}/{name} is terminating for update",
                self.ctrl.name(),
                self.ns
            );
            plan.steps.extend(self.delete_pod(&name));
            plan.current_less += 1;
        }
    }

    /// Upstream's `processReplica`: the writes for one ordinal in range, and whether a
    /// monotonic walk stops here.
    fn process_replica(
        &self,
        plan: &mut Plan,
        tmpl_set: &Value,
        update_set: &Value,
        s: &Slot,
        monotonic: bool,
        min_ready: i64,
    ) -> (Vec<Action>, bool) {
        let set = self.set;
        let name = id::pod_name(set, s.ord);
        let mut acts = Vec::new();
        let Some(pod) = s.pod.as_ref().filter(|p| !id::is_terminal(p)) else {
            if let Some(failed) = &s.pod {
                plan.replaced.insert(obj::name(failed).to_string());
                if !id::is_terminating(failed) {
                    acts.extend(self.delete_pod(obj::name(failed)));
                }
                // Created again once the old one is gone.
                return (acts, true);
            }
            // A claim still naming an earlier pod of this ordinal: wait for the garbage
            // collector (upstream's `PodClaimIsStale`).
            if id::retention(set).1 && self.claim_is_stale(&name) {
                return (acts, true);
            }
            let pod = match id::new_pod(tmpl_set, s.ord, &s.revision) {
                Ok(p) => p,
                Err(e) => {
                    log::warn!("{}: {}/{}: {e}", self.ctrl.name(), self.ns, self.name);
                    return (acts, true);
                }
            };
            match self.create_claims(set, s.ord, &name) {
                Ok(c) => acts.extend(c),
                Err(()) => return (acts, true),
            }
            // Claims that were there already get the retention policy's references right
            // after the pod is made (upstream's `CreateStatefulPod`).
            let existing = self.fix_claims(update_set, &pod, true);
            acts.extend(self.pod_write(
                "create",
                &name,
                Action::Create {
                    kind: PODS,
                    namespace: self.ns.clone(),
                    object: pod,
                },
            ));
            acts.extend(existing);
            return (acts, monotonic);
        };
        // A Pending pod: its missing claims made and its claims' references fixed on every
        // sync (upstream's `createMissingPersistentVolumeClaims`).
        let pending = id::is_pending(pod);
        if pending {
            match self.create_claims(set, s.ord, &name) {
                Ok(c) => acts.extend(c),
                Err(()) => return (acts, true),
            }
            acts.extend(self.fix_claims(update_set, pod, true));
        }
        if monotonic
            && (id::is_terminating(pod)
                || !id::is_running_and_ready(pod)
                || !id::is_running_and_available(pod, min_ready, self.cx.now))
        {
            return (acts, true);
        }
        let claims = if pending {
            Vec::new()
        } else {
            self.fix_claims(update_set, pod, false)
        };
        let claims_fixed = !claims.is_empty();
        acts.extend(claims);
        if !id::identity_matches(set, pod) {
            acts.extend(self.pod_write(
                "update",
                &name,
                Action::Patch {
                    kind: PODS,
                    namespace: self.ns.clone(),
                    name: name.clone(),
                    patch_type: PatchType::Merge,
                    patch: id::identity_patch(set, pod),
                    subresource: None,
                },
            ));
        } else if claims_fixed {
            acts.push(self.event(
                EventType::Normal,
                "SuccessfulUpdate",
                format!("Update Pod {name} in StatefulSet {} successful", self.name),
            ));
        }
        (acts, false)
    }

    fn claim_is_stale(&self, pod_name: &str) -> bool {
        let store = self.cx.cache.store(PERSISTENTVOLUMECLAIMS);
        let ord = id::parent_and_ordinal(pod_name).1;
        id::claims_for(self.set, ord).iter().any(|(_, c)| {
            store
                .get_in(&self.ns, obj::name(c))
                .is_some_and(|pvc| id::has_stale_owner(&pvc, pod_name, ""))
        })
    }

    /// The claims of ordinal `ord` not in the cache, created (with their Events); Err when
    /// one is being deleted (the pod must wait).
    fn create_claims(
        &self,
        set: &Value,
        ord: i64,
        pod: &str,
    ) -> std::result::Result<Vec<Action>, ()> {
        let store = self.cx.cache.store(PERSISTENTVOLUMECLAIMS);
        let mut out = Vec::new();
        for (_, mut claim) in id::claims_for(set, ord) {
            let cname = obj::name(&claim).to_string();
            match store.get_in(&self.ns, &cname) {
                Some(existing) if obj::is_deleting(&existing) => {
                    log::debug!(
                        "{}: pvc {}/{cname} is being deleted",
                        self.ctrl.name(),
                        self.ns
                    );
                    return Err(());
                }
                Some(_) => continue,
                None => {}
            }
            if let Some(refs) = id::new_claim_refs(set, ord) {
                claim["metadata"]["ownerReferences"] = refs;
            }
            let report = Report {
                about: self.about(),
                success_reason: "",
                success_prefix: "",
                failure_reason: "FailedCreate",
                failure_prefix: format!(
                    "Create Claim {cname} for Pod {pod} in StatefulSet {} failed error: ",
                    self.name
                )
                .into(),
            };
            out.extend(seq(vec![
                Action::Reported {
                    action: Box::new(Action::Create {
                        kind: PERSISTENTVOLUMECLAIMS,
                        namespace: self.ns.clone(),
                        object: claim,
                    }),
                    report,
                },
                self.event(
                    EventType::Normal,
                    "SuccessfulCreate",
                    format!(
                        "Create Claim {cname} Pod {pod} in StatefulSet {} success",
                        self.name
                    ),
                ),
            ]));
        }
        Ok(match out.len() {
            0 => vec![],
            _ => vec![Action::Parallel(out)],
        })
    }

    /// Updates of the pod's claims whose owner references do not fit the retention policy,
    /// each after upstream's `ConflictingController` Warning when another controller holds
    /// the claim (our references are then only removed). `always`: upstream's
    /// `UpdatePodClaimForRetentionPolicy` called without checking first (after a create, for
    /// a Pending pod), which warns about such a claim even when nothing is to be fixed.
    fn fix_claims(&self, update_set: &Value, pod: &Value, always: bool) -> Vec<Action> {
        let store = self.cx.cache.store(PERSISTENTVOLUMECLAIMS);
        let mut out = Vec::new();
        for (_, c) in id::claims_for(update_set, id::ordinal(pod)) {
            let Some(pvc) = store.get_in(&self.ns, obj::name(&c)) else {
                continue;
            };
            let fits = id::claim_refs_match(update_set, &pvc, pod);
            if fits && !always {
                continue;
            }
            if id::has_unexpected_controller(update_set, &pvc, pod) {
                out.push(self.event(
                    EventType::Warning,
                    "ConflictingController",
                    format!(
                        "PersistentVolumeClaim {} has a conflicting OwnerReference that acts as \
                         a manging controller, the retention policy is ignored for this claim",
                        obj::name(&pvc)
                    ),
                ));
            }
            if fits {
                continue;
            }
            if let Some(object) = id::fix_claim_refs(update_set, &pvc, pod) {
                out.push(Action::Update {
                    kind: PERSISTENTVOLUMECLAIMS,
                    object,
                });
            }
        }
        out
    }

    pub(super) fn delete_pod(&self, pod: &str) -> Vec<Action> {
        self.pod_write(
            "delete",
            pod,
            Action::Delete {
                kind: PODS,
                namespace: self.ns.clone(),
                name: pod.to_string(),
                options: DeleteOptions::default(),
            },
        )
    }
}

#[derive(Default)]
pub(super) struct Plan {
    /// The writes, in order.
    pub(super) steps: Vec<Action>,
    /// The `Progressing` condition to set (the Recreate strategy).
    pub(super) progressing: Option<super::recreate::Progress>,
    /// Failed pods being replaced (not counted in status, as upstream's replaced objects).
    replaced: BTreeSet<String>,
    /// Pods deleted for the rolling update (upstream's `status.CurrentReplicas--`).
    current_less: i64,
}

/// `spec.podManagementPolicy` as stored (the metrics' label).
pub(super) fn policy(set: &Value) -> &str {
    set.at("/spec/podManagementPolicy")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn title(verb: &str) -> String {
    let mut c = verb.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn failed_reason(verb: &str) -> &'static str {
    match verb {
        "create" => "FailedCreate",
        "update" => "FailedUpdate",
        _ => "FailedDelete",
    }
}
