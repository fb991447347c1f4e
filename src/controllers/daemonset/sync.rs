//! One sync of a DaemonSet (upstream's `syncDaemonSet`): its revisions, the pods it should
//! have on each node, the rolling update, the history limit and the status.

use super::placement::{self, Rollout};
use super::{history, DaemonSetController, Node, BURST_REPLICAS};
use crate::api::client::{DeleteOptions, PatchType};
use crate::api::resources::{CONTROLLERREVISIONS, DAEMONSETS, PODS};
use crate::controllers::kit::pod::{is_pod_available, is_pod_ready, pod_from_template, ready_time};
use crate::controllers::refmanager::{self, Claim};
use crate::controllers::{Action, Cx, EventSpec, EventType, ObjectRef, Outcome, Report};
use crate::error::Result;
use crate::obj::{self, At as _, Obj};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

fn event(ds: &Value, t: EventType, reason: &str, message: String) -> Action {
    Action::Event(EventSpec {
        involved: ObjectRef::of(&DAEMONSETS, ds),
        event_type: t,
        reason: reason.into(),
        message,
    })
}

impl DaemonSetController {
    pub(super) fn sync(&self, cx: &Cx, key: &str, act: bool) -> Result<Outcome> {
        let Some(ds) = cx.cache.store(DAEMONSETS).get(key) else {
            self.forget(key);
            return Ok(Outcome::none());
        };
        let ns = obj::namespace(&ds).to_string();
        let uid = obj::uid(&ds).to_string();
        let sel = ds.at("/spec/selector").filter(|s| !s.is_null()).cloned();
        if sel
            .as_ref()
            .is_none_or(crate::controllers::kit::selector::is_empty)
        {
            if !act {
                return Ok(Outcome::none());
            }
            return Ok(Outcome::with(vec![event(
                &ds,
                EventType::Warning,
                "SelectingAll",
                "This daemon set is selecting all pods. A non-empty selector is required.".into(),
            )]));
        }
        if obj::is_deleting(&ds) {
            return Ok(Outcome::none());
        }
        let nodes = self.nodes();

        // Revisions (constructHistory).
        let (revs, mut actions) = self.claim_revisions(cx, &ds, sel.as_ref(), act);
        if act {
            for r in &revs {
                if obj::label(r, history::HASH_LABEL).is_none() {
                    let mut up = (**r).clone();
                    up["metadata"]["labels"][history::HASH_LABEL] = json!(obj::name(r));
                    actions.push(Action::Update {
                        kind: CONTROLLERREVISIONS,
                        object: up,
                    });
                }
            }
            if !actions.is_empty() {
                return Ok(Outcome::with(actions));
            }
        }
        let split = history::split(&ds, &revs);
        let hash = match split.current.last() {
            Some(cur) => {
                if act && split.current.len() > 1 {
                    return Ok(Outcome::with(self.dedup(cx, &ds, &split.current)));
                }
                if act && history::number(cur) < split.next_number {
                    let mut up = (**cur).clone();
                    up["revision"] = json!(split.next_number);
                    actions.push(Action::Update {
                        kind: CONTROLLERREVISIONS,
                        object: up,
                    });
                }
                obj::label(cur, history::HASH_LABEL)
                    .unwrap_or("")
                    .to_string()
            }
            None => {
                let template = ds.at("/spec/template").cloned().unwrap_or(json!({}));
                let hash = history::hash(&template, history::collision_count(&ds));
                if act {
                    return Ok(self.snapshot(cx, &ds, &hash, split.next_number));
                }
                hash
            }
        };

        let pods = cx.cache.store(PODS);
        let settled = self.track().inflight.settled(key, &uid, &ns, &pods);
        let (claimed, claim_actions) = self.claim_pods(cx, &ds, sel.as_ref(), act);
        actions.extend(claim_actions);
        let by_node = by_node(&claimed, false);

        let mut requeue: Option<Duration> = None;
        let mut pod_writes = false;
        let mut observed_gen = !act;
        if act {
            match settled {
                Err(wait) => {
                    super::metrics::observe_pod_skip();
                    requeue = Some(wait);
                }
                Ok(()) => {
                    observed_gen = true;
                    let (acts, delay) = self.manage(cx, &ds, &nodes, &by_node, &hash);
                    requeue = delay;
                    let mut manage_writes = acts.iter().any(is_pod_write);
                    actions.extend(acts);
                    if !manage_writes && placement::is_rolling(&ds) {
                        let acts = self.rolling(cx, &ds, &nodes, &by_node, &hash)?;
                        manage_writes = acts.iter().any(is_pod_write);
                        actions.extend(acts);
                    }
                    pod_writes = manage_writes;
                    actions.extend(self.cleanup_history(&ds, &split.old, &claimed));
                }
            }
        }
        if !pod_writes {
            if let Some(a) = status_action(&ds, &nodes, &by_node, &hash, observed_gen, cx) {
                actions.push(a);
            }
        }
        let min_ready = super::min_ready_seconds(&ds);
        if min_ready > 0 && !pod_writes {
            let next = claimed
                .iter()
                .filter(|p| is_pod_ready(p) && !is_pod_available(p, min_ready, cx.now))
                .filter_map(|p| ready_time(p))
                .map(|t| {
                    (t + Duration::from_secs(min_ready as u64))
                        .duration_since(cx.now)
                        .unwrap_or_default()
                        + Duration::from_millis(100)
                })
                .min();
            requeue = crate::controllers::sooner(requeue, next);
        }
        Ok(Outcome {
            actions,
            requeue_after: requeue,
            status_after_writes: pod_writes,
            ..Outcome::default()
        })
    }

    /// Upstream's `controlledHistories`: the DaemonSet's own revisions and the orphans it
    /// selects (not every revision of the namespace), with the adoptions and releases.
    fn claim_revisions(
        &self,
        cx: &Cx,
        ds: &Value,
        sel: Option<&Value>,
        act: bool,
    ) -> (Vec<Obj>, Vec<Action>) {
        let (ns, uid) = (obj::namespace(ds), obj::uid(ds));
        let mut actions = Vec::new();
        let revs_all = cx
            .cache
            .store(CONTROLLERREVISIONS)
            .claimable(ns, uid, |m| refmanager::may_take(ds, sel, m));
        let mut revs: Vec<Obj> = Vec::new();
        for r in revs_all {
            match refmanager::claim(ds, sel, &r) {
                Claim::Owned => revs.push(r),
                Claim::Adopt if act => {
                    actions.push(refmanager::adopt_action(
                        CONTROLLERREVISIONS,
                        ns,
                        &r,
                        &DAEMONSETS,
                        ds,
                    ));
                    revs.push(r);
                }
                Claim::Release if act => {
                    actions.push(refmanager::release_action(CONTROLLERREVISIONS, ns, &r, uid))
                }
                _ => {}
            }
        }
        (revs, actions)
    }

    /// The revision for the current template: created, or when another of that name holds
    /// another template, the collision count raised so the next hash differs.
    fn snapshot(&self, cx: &Cx, ds: &Value, hash: &str, number: i64) -> Outcome {
        let name = history::name(obj::name(ds), hash);
        let ns = obj::namespace(ds);
        if let Some(existing) = cx.cache.store(CONTROLLERREVISIONS).get_in(ns, &name) {
            if history::matches(ds, &existing) {
                // Someone else's revision with our template: upstream takes it as current.
                return Outcome {
                    requeue_after: Some(Duration::from_secs(1)),
                    ..Outcome::none()
                };
            }
            let mut up = ds.clone();
            let count = history::collision_count(ds).unwrap_or(0) + 1;
            up["status"]["collisionCount"] = json!(count);
            return Outcome::with(vec![Action::UpdateSubresource {
                kind: DAEMONSETS,
                object: up,
                subresource: "status",
            }]);
        }
        Outcome::with(vec![Action::Create {
            kind: CONTROLLERREVISIONS,
            namespace: ns.to_string(),
            object: history::new_revision(&DAEMONSETS, ds, hash, number),
        }])
    }

    /// Several revisions hold the current template: keep the highest, relabel the pods of
    /// the others, delete them.
    fn dedup(&self, cx: &Cx, ds: &Value, current: &[&Value]) -> Vec<Action> {
        let Some(keep) = current.last() else {
            return vec![];
        };
        let keep_hash = obj::label(keep, history::HASH_LABEL).unwrap_or("");
        let mut out = Vec::new();
        let ns = obj::namespace(ds);
        for p in cx.cache.store(PODS).by_owner(obj::uid(ds)) {
            if obj::label(&p, history::HASH_LABEL) != Some(keep_hash) {
                out.push(Action::Patch {
                    kind: PODS,
                    namespace: ns.to_string(),
                    name: obj::name(&p).to_string(),
                    patch_type: PatchType::Merge,
                    patch: json!({"metadata": {"labels": {history::HASH_LABEL: keep_hash}}}),
                    subresource: None,
                });
            }
        }
        for r in &current[..current.len() - 1] {
            out.push(Action::Delete {
                kind: CONTROLLERREVISIONS,
                namespace: ns.to_string(),
                name: obj::name(r).to_string(),
                options: DeleteOptions::default(),
            });
        }
        out
    }

    /// The DaemonSet's pods: those it controls that it still selects, and orphans it selects
    /// (adopted); those it controls and no longer selects are released.
    fn claim_pods(
        &self,
        cx: &Cx,
        ds: &Value,
        sel: Option<&Value>,
        act: bool,
    ) -> (Vec<Obj>, Vec<Action>) {
        let ns = obj::namespace(ds);
        let pods = cx.cache.store(PODS);
        let mut candidates: BTreeMap<String, Obj> = BTreeMap::new();
        for p in pods.by_owner(obj::uid(ds)) {
            if obj::namespace(&p) == ns {
                candidates.insert(obj::name(&p).to_string(), p);
            }
        }
        let orphans: Vec<String> = self
            .track()
            .orphans
            .get(ns)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for name in orphans {
            if candidates.contains_key(&name) {
                continue;
            }
            if let Some(p) = pods.get_in(ns, &name) {
                candidates.insert(name, p);
            }
        }
        let (mut claimed, mut actions) = (vec![], vec![]);
        let mut t = self.track();
        for p in candidates.into_values() {
            if t.inflight.hides(&obj::key(&p), obj::uid(&p)) {
                continue;
            }
            match refmanager::claim(ds, sel, &p) {
                Claim::Owned => claimed.push(p),
                Claim::Adopt if act => {
                    actions.push(refmanager::adopt_action(PODS, ns, &p, &DAEMONSETS, ds));
                    claimed.push(p);
                }
                Claim::Release if act => {
                    actions.push(refmanager::release_action(PODS, ns, &p, obj::uid(ds)))
                }
                _ => {}
            }
        }
        (claimed, actions)
    }

    /// Upstream's `manage`: per node, the pods to create and delete; the Events about failed
    /// and succeeded pods; the delay of a failed-pod backoff.
    fn manage(
        &self,
        cx: &Cx,
        ds: &Value,
        nodes: &[Arc<Node>],
        by_node: &BTreeMap<String, Vec<Obj>>,
        hash: &str,
    ) -> (Vec<Action>, Option<Duration>) {
        let p = placement::placement(ds);
        let surge = placement::allows_surge(ds);
        let min_ready = super::min_ready_seconds(ds);
        let observed = ds
            .at("/status/observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let (mut create_on, mut delete, mut events) = (vec![], vec![], vec![]);
        let mut delay: Option<Duration> = None;
        for node in nodes {
            let (run, keep) = placement::should_run(&p, &node.view());
            let pods = by_node.get(&node.name);
            match pods {
                None if run => create_on.push(node.name.clone()),
                Some(pods) if keep => {
                    let mut running: Vec<Obj> = vec![];
                    for pod in pods.iter().filter(|p| !obj::is_deleting(p)) {
                        let (pns, pname) = (obj::namespace(pod), obj::name(pod));
                        match crate::controllers::kit::pod::phase(pod) {
                            "Failed" => {
                                let bkey = format!("{}/{observed}/{}", obj::uid(ds), node.name);
                                if let Err(d) = self.backoff_step(bkey, cx.now) {
                                    delay = crate::controllers::sooner(delay, Some(d));
                                    continue;
                                }
                                events.push(event(ds, EventType::Warning, "FailedDaemonPod", format!(
                                    "Found failed daemon pod {pns}/{pname} on node {}, will try to kill it",
                                    node.name
                                )));
                                delete.push(pod.clone());
                            }
                            "Succeeded" => {
                                events.push(event(ds, EventType::Normal, "SucceededDaemonPod", format!(
                                    "Found succeeded daemon pod {pns}/{pname} on node {}, will try to delete it",
                                    node.name
                                )));
                                delete.push(pod.clone());
                            }
                            _ => running.push(pod.clone()),
                        }
                    }
                    placement::sort_pods(&mut running);
                    if !surge {
                        delete.extend(running.into_iter().skip(1));
                        continue;
                    }
                    if running.len() <= 1 {
                        if running.is_empty() && run {
                            create_on.push(node.name.clone());
                        }
                        continue;
                    }
                    let (mut newest, mut oldest_old): (Option<Obj>, Option<Obj>) = (None, None);
                    for pod in running {
                        let slot = if obj::label(&pod, history::HASH_LABEL) == Some(hash) {
                            &mut newest
                        } else {
                            &mut oldest_old
                        };
                        if slot.is_none() {
                            *slot = Some(pod);
                        } else {
                            delete.push(pod);
                        }
                    }
                    if let (Some(n), Some(o)) = (newest, oldest_old) {
                        if !placement::ready(&o) || is_pod_available(&n, min_ready, cx.now) {
                            delete.push(o);
                        }
                    }
                }
                Some(pods) if !keep => {
                    delete.extend(pods.iter().filter(|p| !obj::is_deleting(p)).cloned());
                }
                _ => {}
            }
        }
        // Pods meant for nodes that are gone and never scheduled.
        let known: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        for (n, pods) in by_node {
            if known.contains(n.as_str()) {
                continue;
            }
            delete.extend(
                pods.iter()
                    .filter(|p| {
                        p.at("/spec/nodeName")
                            .and_then(Value::as_str)
                            .is_none_or(str::is_empty)
                    })
                    .cloned(),
            );
        }
        let mut actions = events;
        actions.extend(self.sync_nodes(ds, &create_on, &delete, hash));
        (actions, delay)
    }

    /// Upstream's `rollingUpdate` for a sync whose `manage` had nothing to do.
    fn rolling(
        &self,
        cx: &Cx,
        ds: &Value,
        nodes: &[Arc<Node>],
        by_node: &BTreeMap<String, Vec<Obj>>,
        hash: &str,
    ) -> Result<Vec<Action>> {
        let p = placement::placement(ds);
        let mut all = by_node.clone();
        let mut desired = 0;
        let runs: BTreeMap<&str, bool> = nodes
            .iter()
            .map(|n| (n.name.as_str(), placement::should_run(&p, &n.view()).0))
            .collect();
        for n in nodes {
            if runs.get(n.name.as_str()) == Some(&true) {
                desired += 1;
                all.entry(n.name.clone()).or_default();
            }
        }
        let Rollout { delete, create_on } = placement::rolling_update(
            ds,
            &all,
            desired,
            hash,
            |n| runs.get(n) == Some(&true),
            cx.now,
        )
        .map_err(|e| crate::Error::Config(format!("couldn't get unavailable numbers: {e}")))?;
        let names: BTreeSet<String> = delete.into_iter().collect();
        let victims: Vec<Obj> = by_node
            .values()
            .flatten()
            .filter(|p| names.contains(obj::name(p)))
            .cloned()
            .collect();
        Ok(self.sync_nodes(ds, &create_on, &victims, hash))
    }

    /// Upstream's `syncNodes`: pod creations (slow start) and deletions, each at most 250.
    fn sync_nodes(
        &self,
        ds: &Value,
        create_on: &[String],
        delete: &[Obj],
        hash: &str,
    ) -> Vec<Action> {
        let ns = obj::namespace(ds);
        let mut actions = Vec::new();
        if !create_on.is_empty() {
            let mut template = ds.at("/spec/template").cloned().unwrap_or(json!({}));
            if let Some(spec) = template.get_mut("spec") {
                crate::controllers::kit::nodefit::add_daemon_tolerations(spec);
            }
            let labels = &mut template["metadata"]["labels"];
            if !labels.is_object() {
                *labels = json!({});
            }
            if let Some(g) = placement::template_generation(ds) {
                labels[placement::TEMPLATE_GENERATION_LABEL] = json!(g.to_string());
            }
            if !hash.is_empty() {
                labels[history::HASH_LABEL] = json!(hash);
            }
            let owner = json!({"metadata": ds.get("metadata").cloned().unwrap_or(json!({})),
                "spec": {"template": template}});
            match pod_from_template(&DAEMONSETS, &owner) {
                Ok(base) => {
                    let report = report(ds, true);
                    let creates = create_on
                        .iter()
                        .take(BURST_REPLICAS)
                        .map(|node| {
                            let mut pod = base.clone();
                            placement::set_node_affinity(&mut pod["spec"], node);
                            Action::Reported {
                                action: Box::new(Action::Create {
                                    kind: PODS,
                                    namespace: ns.to_string(),
                                    object: pod,
                                }),
                                report: report.clone(),
                            }
                        })
                        .collect();
                    actions.push(Action::SlowStart(creates));
                }
                Err(e) => log::warn!("{}: {}: {e}", self.name(), obj::key(ds)),
            }
        }
        if !delete.is_empty() {
            let report = report(ds, false);
            let owner_key = obj::key(ds);
            let mut t = self.track();
            let pods = delete.iter().take(BURST_REPLICAS);
            let deletes = crate::controllers::kit::pod::delete_actions(
                &mut t.inflight,
                &owner_key,
                ns,
                pods,
                &report,
            );
            actions.push(Action::Parallel(deletes));
        }
        actions
    }

    /// Old revisions past `revisionHistoryLimit` (default 10) whose hash no pod carries.
    fn cleanup_history(&self, ds: &Value, old: &[&Value], pods: &[Obj]) -> Vec<Action> {
        let limit = ds
            .at("/spec/revisionHistoryLimit")
            .and_then(Value::as_i64)
            .unwrap_or(10)
            .max(0) as usize;
        let live: BTreeSet<String> = pods
            .iter()
            .filter_map(|p| obj::label(p, history::HASH_LABEL))
            .map(str::to_string)
            .collect();
        history::to_truncate(old, limit, &live)
            .into_iter()
            .map(|r| Action::Delete {
                kind: CONTROLLERREVISIONS,
                namespace: obj::namespace(ds).to_string(),
                name: obj::name(r).to_string(),
                options: DeleteOptions::default(),
            })
            .collect()
    }
}

fn report(ds: &Value, create: bool) -> Report {
    crate::controllers::kit::pod::write_report(ObjectRef::of(&DAEMONSETS, ds), create)
}

fn is_pod_write(a: &Action) -> bool {
    matches!(a, Action::SlowStart(_) | Action::Parallel(_))
}

/// Claimed pods by the node they are for; terminal pods being deleted are left out unless
/// `include_deleted_terminal`.
fn by_node(pods: &[Obj], include_deleted_terminal: bool) -> BTreeMap<String, Vec<Obj>> {
    let mut out: BTreeMap<String, Vec<Obj>> = BTreeMap::new();
    for p in pods {
        let phase = crate::controllers::kit::pod::phase(p);
        let terminal = phase == "Failed" || phase == "Succeeded";
        if !include_deleted_terminal && terminal && obj::is_deleting(p) {
            continue;
        }
        if let Some(n) = placement::target_node(p) {
            out.entry(n).or_default().push(p.clone());
        }
    }
    out
}

/// The status update (upstream's `updateDaemonSetStatus`), None when nothing changes.
fn status_action(
    ds: &Value,
    nodes: &[Arc<Node>],
    by_node: &BTreeMap<String, Vec<Obj>>,
    hash: &str,
    observed_gen: bool,
    cx: &Cx,
) -> Option<Action> {
    let p = placement::placement(ds);
    let min_ready = super::min_ready_seconds(ds);
    let gen = placement::template_generation(ds);
    let (mut desired, mut current, mut mis, mut ready, mut updated, mut available) =
        (0i64, 0i64, 0i64, 0i64, 0i64, 0i64);
    for n in nodes {
        let (run, _) = placement::should_run(&p, &n.view());
        let pods = by_node.get(&n.name).filter(|v| !v.is_empty());
        if run {
            desired += 1;
            let Some(pods) = pods else { continue };
            current += 1;
            let mut pods = pods.clone();
            placement::sort_pods(&mut pods);
            let pod = &pods[0];
            if is_pod_ready(pod) {
                ready += 1;
                if is_pod_available(pod, min_ready, cx.now) {
                    available += 1;
                }
            }
            if placement::is_updated(pod, hash, gen) {
                updated += 1;
            }
        } else if pods.is_some() {
            mis += 1;
        }
    }
    let unavailable = desired - available;
    let st = |f: &str| {
        ds.at(&format!("/status/{f}"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let generation = ds
        .at("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let fields = [
        ("desiredNumberScheduled", desired),
        ("currentNumberScheduled", current),
        ("numberMisscheduled", mis),
        ("numberReady", ready),
        ("updatedNumberScheduled", updated),
        ("numberAvailable", available),
        ("numberUnavailable", unavailable),
    ];
    if fields.iter().all(|(f, v)| st(f) == *v) && st("observedGeneration") >= generation {
        return None;
    }
    let mut up = ds.clone();
    if !up.get("status").is_some_and(Value::is_object) {
        up["status"] = json!({});
    }
    for (f, v) in fields {
        up["status"][f] = json!(v);
    }
    if observed_gen {
        up["status"]["observedGeneration"] = json!(generation);
    }
    Some(Action::UpdateSubresource {
        kind: DAEMONSETS,
        object: up,
        subresource: "status",
    })
}
