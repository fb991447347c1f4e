//! The queue's work (upstream's `maybeDeletePod` and `maybeUpdateRuleStatus`): a pod due
//! for eviction gets its `DisruptionTarget` condition and is deleted; a rule gets its
//! `EvictionInProgress` condition, at most every ten seconds while its eviction goes on.

use super::state::{parse_work, rule_work, source_rule, NO_EXECUTE, RULE_STATUS_PERIOD};
use super::{lock, pod_event, Inner, METRICS, NAME, POD_WATCH};
use crate::api::client::{DeleteOptions, PatchType};
use crate::api::resources::{DEVICETAINTRULES, PODS};
use crate::compat::timefmt::{parse_rfc3339, rfc3339};
use crate::controller::RunEnv;
use crate::controllers::kit::conditions::{pod_status_patch, Condition};
use crate::obj::{self, At as _};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

pub const CONDITION: &str = "EvictionInProgress";

/// What a piece of work asks next: nothing, or to look again after a while.
type Next = crate::Result<Option<Duration>>;

impl Inner {
    pub(super) fn handle(&self, env: &RunEnv, w: &str) {
        let res = match parse_work(w) {
            ('p', uid, key) => self.maybe_delete(env, w, uid, key),
            (_, uid, name) => self.rule_status(env, name, uid),
        };
        match res {
            Err(e) => {
                log::debug!("{NAME}: processing work item failed, will retry: {e}");
                self.queue.add_rate_limited(w.to_string());
            }
            Ok(Some(d)) => self.queue.add_after(w.to_string(), d),
            Ok(None) => self.queue.forget(&w.to_string()),
        }
    }

    /// `maybeDeletePod`.
    fn maybe_delete(&self, env: &RunEnv, w: &str, uid: &str, key: &str) -> Next {
        let st = lock(&self.state);
        let Some(e) = st
            .delete_at
            .get(w)
            .cloned()
            .filter(|_| !st.was_evicted(uid))
        else {
            return Ok(None);
        };
        drop(st);
        let now = SystemTime::now();
        if let Ok(d) = e.when.duration_since(now) {
            if !d.is_zero() {
                return Ok(Some(d));
            }
        }
        let res = delete_with_condition(env, w, uid, key);
        if res.as_ref().is_err_and(|e| !e.is_not_found()) {
            return res.map(|_| None);
        }
        let mut st = lock(&self.state);
        st.evicted(w);
        if res.is_err() {
            return Ok(None);
        }
        let late = SystemTime::now().duration_since(e.when).unwrap_or_default();
        log::debug!("{NAME}: evicted pod {key} by deleting it, latency {late:?}");
        METRICS.pod_deleted(late);
        for (name, uid) in e.reasons.iter().filter_map(|r| source_rule(r)) {
            *st.evicted_by_rule.entry(uid.to_string()).or_default() += 1;
            self.queue
                .add_after(rule_work(name, uid), RULE_STATUS_PERIOD);
        }
        Ok(None)
    }

    /// `maybeUpdateRuleStatus`.
    fn rule_status(&self, env: &RunEnv, name: &str, uid: &str) -> Next {
        let Some(rule) = env.cache.store(DEVICETAINTRULES).get(name) else {
            return Ok(None);
        };
        if obj::uid(&rule) != uid {
            return Ok(None);
        }
        let generation = rule
            .at("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let existing = rule
            .at("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|l| l.iter().find(|c| c["type"] == CONDITION));
        let now = SystemTime::now();
        if let Some(c) = existing {
            let since = c["lastTransitionTime"]
                .as_str()
                .and_then(parse_rfc3339)
                .map(|t| now.duration_since(t).unwrap_or_default());
            let observed = c["observedGeneration"].as_i64().unwrap_or(0);
            if let Some(since) = since.filter(|s| observed == generation && *s < RULE_STATUS_PERIOD)
            {
                return Ok(Some(RULE_STATUS_PERIOD - since));
            }
        }
        let effect = rule
            .at("/spec/taint/effect")
            .and_then(Value::as_str)
            .unwrap_or("");
        let counts = if effect == NO_EXECUTE || effect == "None" {
            let pods = env.cache.store_for(&POD_WATCH).list();
            let st = lock(&self.state);
            let (p, ns) = st.pending_pods(&rule, &pods);
            let (sd, ad) = if effect == "None" {
                st.selected_devices(&rule["spec"])
            } else {
                (0, 0)
            };
            [p, ns, sd, ad]
        } else {
            [0; 4]
        };
        let evicted = lock(&self.state)
            .evicted_by_rule
            .get(uid)
            .copied()
            .unwrap_or(0);
        let (status, reason, message) = condition(effect, counts, evicted);
        let same = existing.is_some_and(|c| {
            c["status"] == status
                && c["reason"] == reason
                && c["message"].as_str().unwrap_or("") == message
                && c["observedGeneration"].as_i64().unwrap_or(0) == generation
        });
        if same {
            return Ok(None);
        }
        log::debug!("{NAME}: DeviceTaintRule {name}: {CONDITION} {status} {reason}: {message}");
        let apply = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": name, "uid": uid},
            "status": {"conditions": [{"type": CONDITION, "status": status, "reason": reason,
                "message": message, "observedGeneration": generation,
                "lastTransitionTime": rfc3339(now)}]}});
        let shape = env.cache.write_shape(DEVICETAINTRULES);
        let at = (None, name, Some("status"));
        let v = env
            .client
            .apply_shaped(&DEVICETAINTRULES, at, NAME, &apply, shape.as_deref())?;
        env.cache.observe_write(DEVICETAINTRULES, &v);
        Ok(None)
    }
}

/// `addConditionAndDeletePod`: read the pod live; one replaced under the same name counts
/// as gone (not found), one already being deleted as done; else the "Marking for deletion"
/// Event, the `DisruptionTarget` condition when it is not set so, and the deletion with the
/// pod's UID as precondition.
fn delete_with_condition(env: &RunEnv, w: &str, uid: &str, key: &str) -> crate::Result<()> {
    let (ns, name) = obj::split_key(key);
    let pod = env.client.get(&PODS, Some(ns), name)?;
    if obj::uid(&pod) != uid {
        return Err(crate::Error::api(
            404,
            "NotFound",
            format!("pods \"{name}\" not found"),
        ));
    }
    if obj::is_deleting(&pod) {
        return Ok(());
    }
    pod_event(env, w, "Marking for deletion");
    if let Some(patch) = disruption_patch(&pod, SystemTime::now()) {
        let shape = env.cache.write_shape(PODS);
        let pt = PatchType::Strategic;
        let v = env.client.patch_shaped(
            &PODS,
            Some(ns),
            name,
            pt,
            &patch,
            Some("status"),
            shape.as_deref(),
        )?;
        env.cache.observe_write(PODS, &v);
    }
    let opts = DeleteOptions {
        precondition_uid: Some(uid.to_string()),
        ..DeleteOptions::default()
    };
    env.client.delete(&PODS, Some(ns), name, &opts)
}

/// The `pods/status` patch for `DisruptionTarget` (True, `DeletionByDeviceTaintManager`,
/// no `observedGeneration`, as upstream sets it), the pod's UID as precondition; None when
/// the pod has it so already.
pub fn disruption_patch(pod: &Value, now: SystemTime) -> Option<Value> {
    let c = Condition {
        type_: "DisruptionTarget",
        status: "True",
        reason: "DeletionByDeviceTaintManager",
        message: "Device Taint manager: deleting due to NoExecute taint",
    };
    let status = pod_status_patch(pod, &c, now)?;
    Some(json!({"metadata": {"uid": obj::uid(pod)}, "status": status}))
}

fn plural(n: i64, one: &str, many: &str) -> String {
    if n == 1 {
        one.to_string()
    } else {
        format!("{n} {many}")
    }
}

/// The rule's `EvictionInProgress` status, reason and message: `counts` are the pods
/// pending eviction, their namespaces, and (None effect) the published and allocated devices
/// the rule selects; `evicted` the pods it evicted since the start.
pub fn condition(
    effect: &str,
    counts: [i64; 4],
    evicted: i64,
) -> (&'static str, &'static str, String) {
    let [pods, namespaces, published, allocated] = counts;
    let (mut status, reason, mut msg) = ("False", "OtherEffect", String::new());
    let reason = match effect {
        NO_EXECUTE if pods > 0 => {
            status = "True";
            msg = plural(pods, "1 pod needs", "pods need") + " to be evicted in ";
            msg += &plural(namespaces, "1 namespace.", "different namespaces.");
            "PodsPendingEviction"
        }
        NO_EXECUTE if evicted > 0 => "Completed",
        NO_EXECUTE => "NotStarted",
        "None" => {
            msg = plural(published, "1 published device", "published devices") + " selected. ";
            msg += &plural(allocated, "1 allocated device", "allocated devices");
            msg += " selected. ";
            msg += &plural(pods, "1 pod", "pods");
            msg += " would be evicted in ";
            msg += &plural(namespaces, "1 namespace", "different namespaces");
            msg += " if the effect was NoExecute. This information will not be updated again. Recreate the DeviceTaintRule to trigger an update.";
            "NoEffect"
        }
        _ => {
            msg = "Eviction only happens for the NoExecute effect.".into();
            reason
        }
    };
    if evicted > 0 {
        if !msg.is_empty() {
            msg.push(' ');
        }
        msg += &plural(evicted, "1 pod", "pods");
        msg += " evicted since starting the controller.";
    }
    (status, reason, msg)
}
