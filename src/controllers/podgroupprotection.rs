//! podgroup-protection-controller (upstream's `scheduling/podgroupprotection`, v1.36 alpha,
//! v1.37 beta, gate GenericWorkload, off by default): kube-apiserver gives every
//! `scheduling.k8s.io/v1beta1` PodGroup the `scheduling.k8s.io/podgroup-protection`
//! finalizer; this controller removes it from a PodGroup being deleted once no pod that is
//! not terminated (phase neither Succeeded nor Failed) names the group in
//! `spec.schedulingGroup.podGroupName`.
//!
//! - Queue `podgroupprotection`, one worker; the finalizer goes by a PUT of the group (its
//!   bootstrap role has `update`), as `podgroup-protection-controller`; no Events.
//! - A group is queued when it is added or updated while being deleted with the finalizer,
//!   and when a pod naming it ends (Succeeded or Failed), is deleted, or is replaced by one
//!   of another UID (upstream's handlers).
//! - Which active pods name which group is kept by the watch handlers (upstream's informer
//!   index `activePodSchedulingGroup`).
//! - Off, with one line, when the API server does not serve `scheduling.k8s.io/v1beta1`
//!   PodGroups (kube-apiserver needs the gate and that group version turned on).

use crate::api::resources::{PODGROUPS, PODS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controllers::{Action, Controller, Cx, Outcome, Watch};
use crate::error::Result;
use crate::obj::{self, At as _};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

pub const NAME: &str = "podgroup-protection-controller";
pub const FINALIZER: &str = "scheduling.k8s.io/podgroup-protection";

/// PodGroups, whole (they are written back).
pub const GROUP_WATCH: Watch = Watch::full(PODGROUPS);
/// Pods: the group they name and whether they ended.
pub const POD_WATCH: Watch = Watch::fields(PODS, &["/spec/schedulingGroup", "/status/phase"]);

/// Its row in the controller table.
pub fn build(
    cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controllers::Runnable>> {
    let path = "/apis/scheduling.k8s.io/v1beta1";
    if super::kit::served::served(cx.rest, path, "podgroups") == Some(false) {
        log::info!(
            "{NAME}: the API server does not serve scheduling.k8s.io/v1beta1 podgroups; not starting it"
        );
        return Ok(None);
    }
    Ok(Some(crate::controllers::Runnable::reconciles(
        PodGroupProtection::default(),
    )))
}

/// The group key (`namespace/name`) a pod names, if any.
pub fn group_of(pod: &Value) -> Option<String> {
    let name = pod
        .at("/spec/schedulingGroup/podGroupName")
        .and_then(Value::as_str)?;
    Some(format!("{}/{name}", obj::namespace(pod)))
}

/// Succeeded or Failed.
pub fn terminated(pod: &Value) -> bool {
    matches!(
        pod.at("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

fn has_finalizer(o: &Value) -> bool {
    o.at("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

/// `IsDeletionCandidate`: being deleted, the finalizer still on.
pub fn deletion_candidate(pg: &Value) -> bool {
    obj::is_deleting(pg) && has_finalizer(pg)
}

/// Active pods by the group they name: pod key -> (uid, group), group -> pod keys.
#[derive(Default)]
struct Index {
    of: HashMap<String, (String, String)>,
    by_group: HashMap<String, BTreeSet<String>>,
}

impl Index {
    /// Records a pod now (None: gone or not active); returns what it was before.
    fn set(&mut self, key: &str, now: Option<(String, String)>) -> Option<(String, String)> {
        let before = match &now {
            Some(v) => self.of.insert(key.to_string(), v.clone()),
            None => self.of.remove(key),
        };
        if let Some((_, g)) = &before {
            if let Some(s) = self.by_group.get_mut(g) {
                s.remove(key);
                if s.is_empty() {
                    self.by_group.remove(g);
                }
            }
        }
        if let Some((_, g)) = &now {
            self.by_group
                .entry(g.clone())
                .or_default()
                .insert(key.to_string());
        }
        before
    }

    fn used(&self, group: &str) -> bool {
        self.by_group.contains_key(group)
    }
}

#[derive(Default)]
pub struct PodGroupProtection {
    pods: Mutex<Index>,
}

impl PodGroupProtection {
    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether an active pod names `group` (`namespace/name`).
    pub fn in_use(&self, group: &str) -> bool {
        self.index().used(group)
    }

    /// A pod's change: the index updated, and the groups upstream's pod handler queues.
    fn pod_keys(&self, d: &Delta) -> Vec<String> {
        let pod = d.object();
        let key = obj::key(pod);
        let gone = d.kind == DeltaKind::Deleted;
        let uid = obj::uid(pod).to_string();
        let group = group_of(pod);
        let now = match (&group, gone || terminated(pod)) {
            (Some(g), false) => Some((uid.clone(), g.clone())),
            _ => None,
        };
        let before = self.index().set(&key, now);
        let mut keys = BTreeSet::new();
        // An ended pod queues its group; a deleted one too; one replaced by another UID
        // queues the old one's.
        if !gone && terminated(pod) {
            keys.extend(group.clone());
        }
        if let Some((old_uid, old_group)) = before {
            if gone || old_uid != uid {
                keys.insert(old_group);
            }
        } else if gone {
            keys.extend(group);
        }
        keys.into_iter().collect()
    }
}

impl Controller for PodGroupProtection {
    fn watches(&self) -> Vec<Watch> {
        vec![GROUP_WATCH, POD_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        if w.kind == PODGROUPS {
            return match (&d.kind, &d.new) {
                (DeltaKind::Added | DeltaKind::Updated, Some(pg)) if deletion_candidate(pg) => {
                    vec![obj::key(pg)]
                }
                _ => vec![],
            };
        }
        self.pod_keys(d)
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(pg) = cx.cache.store_for(&GROUP_WATCH).get(key) else {
            return Ok(Outcome::none());
        };
        if !deletion_candidate(&pg) {
            return Ok(Outcome::none());
        }
        if self.in_use(key) {
            log::debug!("{NAME}: keeping PodGroup {key}: active pods name it");
            return Ok(Outcome::none());
        }
        let mut next = (*pg).clone();
        if let Some(f) = next["metadata"]["finalizers"].as_array_mut() {
            f.retain(|x| x != FINALIZER);
        }
        Ok(Outcome::with(vec![Action::Update {
            kind: PODGROUPS,
            object: next,
        }]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testing::Harness;
    use serde_json::json;

    fn group(deleting: bool) -> Value {
        let mut g = json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "uid": "g1", "resourceVersion": "5",
                "finalizers": [FINALIZER, "example.com/keep"]}});
        if deleting {
            g["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            g["metadata"]["resourceVersion"] = json!("6");
        }
        g
    }

    fn pod(name: &str, uid: &str, phase: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {"schedulingGroup": {"podGroupName": "g"}}, "status": {"phase": phase}})
    }

    fn removed(h: &Harness<PodGroupProtection>) -> bool {
        h.sync("ns/g").updates.iter().any(|(k, _, o)| {
            *k == PODGROUPS
                && o["metadata"]["finalizers"] == json!(["example.com/keep"])
                && o["metadata"]["resourceVersion"].is_string()
        })
    }

    fn queued(h: &mut Harness<PodGroupProtection>) -> Vec<String> {
        h.take_queued()
    }

    #[test]
    fn the_finalizer_goes_once_no_active_pod_names_the_group() {
        let mut h = Harness::new(PodGroupProtection::default());
        h.add(PODS, pod("a", "u1", "Running"));
        h.add(PODS, pod("b", "u2", "Succeeded"));
        queued(&mut h);
        h.add(PODGROUPS, group(false));
        assert!(queued(&mut h).is_empty(), "not being deleted");
        assert!(h.sync("ns/g").updates.is_empty());
        h.update(PODGROUPS, group(true));
        assert_eq!(queued(&mut h), ["ns/g"]);
        assert!(!removed(&h), "a running pod names it");
        // The running pod fails: its group is queued, and the finalizer goes.
        h.update(PODS, pod("a", "u1", "Failed"));
        assert_eq!(queued(&mut h), ["ns/g"]);
        assert!(removed(&h));
    }

    #[test]
    fn deleted_and_replaced_pods_queue_their_group() {
        let mut h = Harness::new(PodGroupProtection::default());
        h.add(PODGROUPS, group(true));
        queued(&mut h);
        h.add(PODS, pod("a", "u1", "Pending"));
        assert!(queued(&mut h).is_empty());
        assert!(!removed(&h));
        // Same name, new UID: the old pod's group is queued; the new one still uses it.
        h.update(PODS, pod("a", "u9", "Pending"));
        assert_eq!(queued(&mut h), ["ns/g"]);
        assert!(!removed(&h));
        h.delete(PODS, pod("a", "u9", "Pending"));
        assert_eq!(queued(&mut h), ["ns/g"]);
        assert!(removed(&h));
    }

    #[test]
    fn pods_of_no_group_are_ignored() {
        let mut h = Harness::new(PodGroupProtection::default());
        let p = json!({"metadata": {"name": "x", "namespace": "ns", "uid": "u"},
            "spec": {}, "status": {"phase": "Failed"}});
        h.add(PODS, p.clone());
        h.delete(PODS, p);
        assert!(queued(&mut h).is_empty());
        assert_eq!(group_of(&pod("a", "u", "Running")).as_deref(), Some("ns/g"));
    }
}
