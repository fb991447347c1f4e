//! One pod's claims (`syncPod`, `handleClaim`) and one claim's consumers (`syncClaim`).

use super::decide::{self, NameError};
use super::{lock, ClaimStep, ResourceClaimController, CLAIM_WATCH, FIELD_MANAGER, NAME};
use super::{POD_WATCH, TEMPLATE_WATCH};
use crate::api::client::DeleteOptions;
use crate::api::resources::{PODS, RESOURCECLAIMS};
use crate::compat::quote::go_quote;
use crate::controllers::{Action, Cx, EventSpec, EventType, ObjectRef, Outcome, Report};
use crate::error::Result;
use crate::obj;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// What one entry of a pod's `spec.resourceClaims` needs.
enum Handled {
    Nothing,
    /// A claim generated for it exists, not recorded in the pod's status yet.
    Found(String),
    Create(Value),
    /// Why it cannot be handled (the Event's and the retry's text).
    Failed(String),
}

fn failed_event(pod: &Value, entry: &str, why: &str) -> Action {
    Action::Event(EventSpec {
        involved: ObjectRef::of(&PODS, pod),
        event_type: EventType::Warning,
        reason: "FailedResourceClaimCreation".into(),
        message: format!("PodResourceClaim {entry}: {why}"),
    })
}

fn create(pod: &Value, entry: &str, claim: Value) -> Action {
    Action::Reported {
        action: Box::new(Action::Create {
            kind: RESOURCECLAIMS,
            namespace: obj::namespace(pod).to_string(),
            object: claim,
        }),
        report: Report {
            about: ObjectRef::of(&PODS, pod),
            success_reason: "",
            success_prefix: "",
            failure_reason: "FailedResourceClaimCreation",
            // The claim has no name before the server gives it one.
            failure_prefix: format!("PodResourceClaim {entry}: create ResourceClaim : ").into(),
        },
    }
}

/// The server-side apply of the pod's `status.resourceClaimStatuses`.
fn status_apply(pod: &Value, names: &BTreeMap<String, String>) -> Action {
    let statuses: Vec<Value> = names
        .iter()
        .map(|(n, c)| json!({"name": n, "resourceClaimName": c}))
        .collect();
    let (ns, name) = (obj::namespace(pod), obj::name(pod));
    Action::Apply {
        kind: PODS,
        namespace: ns.to_string(),
        name: name.to_string(),
        field_manager: FIELD_MANAGER,
        object: json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "status": {"resourceClaimStatuses": statuses}}),
        fallback: None,
        subresource: Some("status"),
    }
}

fn failing(actions: Vec<Action>, why: String) -> Outcome {
    Outcome {
        actions,
        retry_quietly: Some(why),
        ..Outcome::default()
    }
}

impl ResourceClaimController {
    /// `syncPod`; `may_create`: false once the creates of this sync are done (the claims made
    /// are in the cache then, and are recorded in the pod's status).
    pub(super) fn sync_pod(
        &self,
        cx: &Cx,
        key: &str,
        ns: &str,
        name: &str,
        may_create: bool,
    ) -> Result<Outcome> {
        let Some(pod) = cx.cache.store_for(&POD_WATCH).get_in(ns, name) else {
            log::debug!("{NAME}: nothing to do for pod {ns}/{name}, it is gone");
            return Ok(Outcome::none());
        };
        if obj::is_deleting(&pod) {
            log::debug!("{NAME}: nothing to do for pod {ns}/{name}, it is marked for deletion");
            return Ok(Outcome::none());
        }
        if let Some(g) = pod["spec"]["schedulingGroup"]["podGroupName"].as_str() {
            log::error!(
                "{NAME}: work item failed, will not retry: get PodGroup for Pod {ns}/{name}: Pod is a member of PodGroup {g} but GenericWorkload feature is disabled"
            );
            return Ok(Outcome::none());
        }
        let mut found = BTreeMap::new();
        let mut creates = Vec::new();
        for e in decide::entries(&pod) {
            let entry = e["name"].as_str().unwrap_or("");
            match self.handle_claim(cx, &pod, e, may_create) {
                Handled::Nothing => {}
                Handled::Found(c) => {
                    found.insert(entry.to_string(), c);
                }
                Handled::Create(c) => creates.push(create(&pod, entry, c)),
                Handled::Failed(why) => {
                    let why_all = format!("pod {ns}/{name}, PodResourceClaim {entry}: {why}");
                    log::warn!("{NAME}: work item {key} failed: {why_all}");
                    let mut actions = creates;
                    actions.push(failed_event(&pod, entry, &why));
                    return Ok(failing(actions, why_all));
                }
            }
        }
        if !creates.is_empty() {
            return Ok(Outcome {
                actions: vec![Action::SlowStart(creates)],
                status_after_writes: true,
                ..Outcome::default()
            });
        }
        let mut actions = Vec::new();
        if !found.is_empty() {
            let mut merged: BTreeMap<String, String> =
                decide::recorded_statuses(&pod).into_iter().collect();
            merged.extend(found);
            actions.push(status_apply(&pod, &merged));
        }
        if !decide::is_scheduled(&pod) {
            log::debug!("{NAME}: nothing to do for pod {ns}/{name}, scheduler will deal with it");
            return Ok(Outcome::with(actions));
        }
        let claims = cx.cache.store_for(&CLAIM_WATCH);
        for e in decide::entries(&pod) {
            let (claim_name, check) = match decide::claim_name(&pod, e) {
                Err(err) => return Ok(failing(actions, err.to_string())),
                Ok((None, _)) => continue,
                Ok((Some(n), check)) => (n, check),
            };
            let Some(claim) = claims.get_in(ns, &claim_name) else {
                return Ok(Outcome::with(actions));
            };
            if check {
                if let Some(why) = decide::not_for_pod(&pod, &claim) {
                    return Ok(failing(actions, why));
                }
            }
            if decide::is_allocated(&claim) && !decide::is_reserved_for(&pod, &claim) {
                log::debug!("{NAME}: reserve claim {ns}/{claim_name} for pod {name}");
                let mut next = (*claim).clone();
                let entry = json!({"resource": "pods", "name": name, "uid": obj::uid(&pod)});
                match next["status"]["reservedFor"].as_array_mut() {
                    Some(r) => r.push(entry),
                    None => next["status"]["reservedFor"] = json!([entry]),
                }
                actions.push(Action::UpdateSubresource {
                    kind: RESOURCECLAIMS,
                    object: next,
                    subresource: "status",
                });
            }
        }
        Ok(Outcome::with(actions))
    }

    /// `handleClaim` for one entry of the pod's `spec.resourceClaims`.
    fn handle_claim(&self, cx: &Cx, pod: &Value, e: &Value, may_create: bool) -> Handled {
        let ns = obj::namespace(pod);
        let entry = e["name"].as_str().unwrap_or("");
        match decide::claim_name(pod, e) {
            Err(NameError::NotCreated(_)) => {}
            Err(err) => {
                return Handled::Failed(format!("checking for claim before creating it: {err}"))
            }
            Ok((None, _)) => return Handled::Nothing,
            Ok((Some(n), check)) if !n.is_empty() => {
                let key = obj::make_key(ns, &n);
                let claim = match cx.cache.store_for(&CLAIM_WATCH).get_in(ns, &n) {
                    Some(c) => {
                        self.seen(&key);
                        Some((*c).clone())
                    }
                    // Created here and not in the cache (not yet, or deleted since): taken
                    // as existing, as upstream's mutation cache answers.
                    None if self.created_here(&key) => return Handled::Nothing,
                    None => match cx.client.get(&RESOURCECLAIMS, Some(ns), &n) {
                        Ok(c) => Some(c),
                        Err(err) if err.is_not_found() => None,
                        Err(err) => {
                            return Handled::Failed(format!("checking claim existence: {err}"))
                        }
                    },
                };
                if let Some(c) = claim {
                    match decide::not_for_pod(pod, &c).filter(|_| check) {
                        None => return Handled::Nothing,
                        Some(why) => log::error!(
                            "{NAME}: claim that was created for the pod is no longer owned by the pod, creating a new one: {why}"
                        ),
                    }
                }
            }
            Ok(_) => {}
        }
        let Some(template_name) = e.get("resourceClaimTemplateName").and_then(Value::as_str) else {
            return Handled::Nothing;
        };
        let uid = obj::uid(pod);
        let generated = cx
            .cache
            .store_for(&CLAIM_WATCH)
            .by_owner(uid)
            .into_iter()
            .find(|c| obj::namespace(c) == ns && decide::generated_for(c, uid, entry));
        if let Some(c) = generated {
            return Handled::Found(obj::name(&c).to_string());
        }
        if !may_create {
            return Handled::Nothing;
        }
        let Some(template) = cx
            .cache
            .store_for(&TEMPLATE_WATCH)
            .get_in(ns, template_name)
        else {
            let q = go_quote(template_name);
            return Handled::Failed(format!(
                "resource claim template {q}: resourceclaimtemplate.resource.k8s.io {q} not found"
            ));
        };
        if !self.admin_access && decide::needs_admin_access(&template) {
            return Handled::Failed(
                "admin access is requested, but the feature is disabled".into(),
            );
        }
        if !self.prioritized_list && decide::has_prioritized_list(&template) {
            return Handled::Failed(
                "template includes a prioritized list of subrequests, but the feature is disabled"
                    .into(),
            );
        }
        Handled::Create(decide::new_claim(pod, entry, &template))
    }

    /// Whether the pod a claim reserves (`entry` of `reservedFor`) still may use it.
    fn keeps(&self, cx: &Cx, ns: &str, entry: &Value) -> Result<bool> {
        let (name, uid) = (
            entry["name"].as_str().unwrap_or(""),
            entry["uid"].as_str().unwrap_or(""),
        );
        if self.was_deleted(uid) {
            return Ok(false);
        }
        if let Some(pod) = cx.cache.store_for(&POD_WATCH).get_in(ns, name) {
            return Ok(obj::uid(&pod) == uid && !decide::is_pod_done(&pod));
        }
        match cx.client.get_metadata(&PODS, Some(ns), name) {
            Ok(p) => Ok(obj::uid(&p) == uid),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `syncClaim`.
    pub(super) fn sync_claim(&self, cx: &Cx, key: &str, ns: &str, name: &str) -> Result<Outcome> {
        let Some(claim) = cx.cache.store_for(&CLAIM_WATCH).get_in(ns, name) else {
            log::debug!("{NAME}: nothing to do for claim {ns}/{name}, it is gone");
            return Ok(Outcome::none());
        };
        let reserved = decide::reserved_for(&claim);
        let mut remaining = Vec::with_capacity(reserved.len());
        for r in reserved {
            let group = r.get("apiGroup").and_then(Value::as_str).unwrap_or("");
            if group.is_empty() && r["resource"] == "pods" && !self.keeps(cx, ns, r)? {
                continue;
            }
            remaining.push(r.clone());
        }
        let finalizer = decide::has_finalizer(&claim);
        if remaining.len() < reserved.len() {
            let none_left = remaining.is_empty();
            let mut next = (*claim).clone();
            if let Some(st) = next["status"].as_object_mut() {
                if none_left {
                    st.remove("reservedFor");
                    if finalizer {
                        st.remove("allocation");
                    }
                } else {
                    st.insert("reservedFor".into(), Value::Array(remaining));
                }
            }
            lock(&self.steps).insert(key.to_string(), ClaimStep::Removed { none_left });
            return Ok(Outcome {
                actions: vec![Action::UpdateSubresource {
                    kind: RESOURCECLAIMS,
                    object: next,
                    subresource: "status",
                }],
                status_after_writes: true,
                ..Outcome::default()
            });
        }
        if finalizer && obj::is_deleting(&claim) && remaining.is_empty() {
            if decide::is_allocated(&claim) {
                let mut next = (*claim).clone();
                if let Some(st) = next["status"].as_object_mut() {
                    st.remove("allocation");
                }
                lock(&self.steps).insert(key.to_string(), ClaimStep::Deallocated);
                return Ok(Outcome {
                    actions: vec![Action::UpdateSubresource {
                        kind: RESOURCECLAIMS,
                        object: next,
                        subresource: "status",
                    }],
                    status_after_writes: true,
                    ..Outcome::default()
                });
            }
            let mut actions = vec![without_finalizer(&claim)];
            actions.extend(self.delete_if_unused(cx, &claim));
            return Ok(Outcome::with(vec![Action::SlowStart(actions)]));
        }
        if remaining.is_empty() {
            return Ok(Outcome::with(
                self.delete_if_unused(cx, &claim).into_iter().collect(),
            ));
        }
        Ok(Outcome::none())
    }

    /// After a claim's status write: the finalizer of a deallocated claim, then the delete of
    /// an unused generated claim.
    pub(super) fn after_claim_status(
        &self,
        cx: &Cx,
        ns: &str,
        name: &str,
        step: ClaimStep,
    ) -> Outcome {
        let Some(claim) = cx.cache.store_for(&CLAIM_WATCH).get_in(ns, name) else {
            return Outcome::none();
        };
        let mut actions = Vec::new();
        if decide::has_finalizer(&claim) && !decide::is_allocated(&claim) {
            actions.push(without_finalizer(&claim));
        }
        let none_left = match step {
            ClaimStep::Removed { none_left } => none_left,
            ClaimStep::Deallocated => true,
        };
        if none_left {
            actions.extend(self.delete_if_unused(cx, &claim));
        }
        if actions.is_empty() {
            return Outcome::none();
        }
        Outcome::with(vec![Action::SlowStart(actions)])
    }

    /// The delete of a generated claim (no consumers left) whose pod is done or replaced.
    fn delete_if_unused(&self, cx: &Cx, claim: &Value) -> Option<Action> {
        let key = obj::key(claim);
        let Some((pod_name, pod_uid)) = decide::owning_pod(claim) else {
            log::debug!("{NAME}: claim {key} not generated for a pod");
            return None;
        };
        let ns = obj::namespace(claim);
        let Some(pod) = cx.cache.store_for(&POD_WATCH).get_in(ns, &pod_name) else {
            log::debug!("{NAME}: pod {ns}/{pod_name} for claim {key} not found");
            return None;
        };
        if obj::uid(&pod) != pod_uid || decide::is_pod_done(&pod) {
            log::debug!("{NAME}: deleting unused generated claim {key}");
            return Some(Action::Delete {
                kind: RESOURCECLAIMS,
                namespace: ns.to_string(),
                name: obj::name(claim).to_string(),
                options: DeleteOptions::default(),
            });
        }
        None
    }
}

/// The PUT that removes the delete-protection finalizer.
fn without_finalizer(claim: &Value) -> Action {
    let mut next = claim.clone();
    if let Some(f) = next["metadata"]["finalizers"].as_array_mut() {
        f.retain(|x| x != decide::FINALIZER);
    }
    Action::Update {
        kind: RESOURCECLAIMS,
        object: next,
    }
}
