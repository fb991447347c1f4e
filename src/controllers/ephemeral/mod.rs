//! ephemeral-volume-controller: a PersistentVolumeClaim `<pod>-<volume>` for each generic
//! ephemeral volume of a pod, owned by the pod, as upstream's
//! `pkg/controller/volume/ephemeral`.
//!
//! As upstream:
//! - A pod is queued when it shows up (and, here, when it changes: a re-list after an outage
//!   brings every pod as an update) unless it is being deleted, and when a claim that one of
//!   its ephemeral volumes names is deleted.
//! - A sync takes the pod's volumes in order. A claim that exists and is controlled by the
//!   pod is left alone; one that is not (another owner, none) is a conflict: `Warning
//!   FailedBinding` "ephemeral volume <vol>: PVC <ns>/<pvc> was not created for pod <ns>/<pod>
//!   (pod is not owner)" on the pod, and the pod is tried again with backoff. A missing claim
//!   is created with the template's labels, annotations and spec, and an owner reference to
//!   the pod (`controller` and `blockOwnerDeletion` true); a failed create is `Warning
//!   FailedBinding` "ephemeral volume <vol>: create PVC <name>: <error>".
//! - Queue `ephemeral_volume`, `--concurrent-ephemeralvolume-syncs` workers (5), Events from
//!   `ephemeral_volume`, counters `ephemeral_volume_controller_create_total` and
//!   `ephemeral_volume_controller_create_failures_total`.
//!
//! Pods are cached with their volumes' names and `ephemeral` parts only.

use super::{Action, Applied, Controller, Cx, EventSpec, EventType, ObjectRef, Outcome, Report};
use crate::api::resources::{PERSISTENTVOLUMECLAIMS, PODS};
use crate::cache::{Cache, Delta, DeltaKind, Watch};
use crate::error::Result;
use crate::obj;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The parts of a pod read here besides metadata.
pub const POD_WATCH: Watch =
    Watch::fields(PODS, &["/spec/volumes/*/name", "/spec/volumes/*/ephemeral"]);
/// Claims: their metadata (owner references) only.
pub const PVC_WATCH: Watch = Watch::fields(PERSISTENTVOLUMECLAIMS, &[]);

static CREATES: AtomicU64 = AtomicU64::new(0);
static CREATE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Its row in the controller table.
pub fn build(_: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    crate::metrics::register_collector("ephemeral-volume", std::sync::Arc::new(metric_families));
    Ok(Some(super::Runnable::reconciles(Ephemeral::new())))
}

/// The controller's counters (registered when it is built, as upstream's).
pub fn metric_families() -> Vec<crate::metrics::Family> {
    let help = "Number of PersistenVolumeClaims creation requests";
    [
        ("ephemeral_volume_controller_create_total", &CREATES),
        (
            "ephemeral_volume_controller_create_failures_total",
            &CREATE_FAILURES,
        ),
    ]
    .into_iter()
    .map(|(name, c)| {
        let mut f = crate::metrics::Family::alpha(name, help, crate::metrics::MetricType::Counter);
        f.push(&[], c.load(Ordering::Relaxed) as f64);
        f
    })
    .collect()
}

pub struct Ephemeral {
    /// Claim key -> the pods whose ephemeral volumes name it (upstream's pod-PVC index).
    claims: Mutex<HashMap<String, Vec<String>>>,
}

/// The claim name of an ephemeral volume (upstream's `ephemeral.VolumeClaimName`).
pub fn claim_name(pod: &str, volume: &str) -> String {
    format!("{pod}-{volume}")
}

/// The names of the pod's generic ephemeral volumes, in order.
fn ephemeral_volumes(pod: &Value) -> impl Iterator<Item = &Value> {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["ephemeral"].is_object())
}

/// Whether `pvc` is controlled by `pod` (upstream's `ephemeral.VolumeIsForPod`).
pub fn is_for_pod(pod: &Value, pvc: &Value) -> bool {
    obj::namespace(pod) == obj::namespace(pvc)
        && obj::controller_ref(pvc).is_some_and(|r| r.uid == obj::uid(pod))
}

/// The claim upstream creates for one ephemeral volume.
pub fn claim_for(pod: &Value, volume: &Value) -> Value {
    let tpl = &volume["ephemeral"]["volumeClaimTemplate"];
    let mut meta = json!({
        "name": claim_name(obj::name(pod), volume["name"].as_str().unwrap_or("")),
        "namespace": obj::namespace(pod),
        "ownerReferences": [{
            "apiVersion": "v1", "kind": "Pod", "name": obj::name(pod), "uid": obj::uid(pod),
            "controller": true, "blockOwnerDeletion": true,
        }],
    });
    for part in ["labels", "annotations"] {
        if let Some(m) = tpl["metadata"][part].as_object().filter(|m| !m.is_empty()) {
            meta[part] = Value::Object(m.clone());
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": tpl.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

impl Default for Ephemeral {
    fn default() -> Self {
        Self::new()
    }
}

impl Ephemeral {
    pub fn new() -> Self {
        Ephemeral {
            claims: Mutex::default(),
        }
    }

    fn claims(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<String>>> {
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keep the claim index of one pod's change.
    fn index(&self, d: &Delta) {
        let pod = d.object();
        let key = obj::key(pod);
        let names: Vec<String> = ephemeral_volumes(pod)
            .map(|v| {
                obj::make_key(
                    obj::namespace(pod),
                    &claim_name(obj::name(pod), v["name"].as_str().unwrap_or("")),
                )
            })
            .collect();
        if names.is_empty() {
            return;
        }
        let mut idx = self.claims();
        for c in names {
            let pods = idx.entry(c.clone()).or_default();
            pods.retain(|p| p != &key);
            if d.kind != DeltaKind::Deleted {
                pods.push(key.clone());
            }
            if pods.is_empty() {
                idx.remove(&c);
            }
        }
    }
}

impl Controller for Ephemeral {
    fn watches(&self) -> Vec<Watch> {
        vec![POD_WATCH, PVC_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        if w.kind == PODS {
            self.index(d);
            return match (&d.kind, &d.new) {
                (DeltaKind::Added | DeltaKind::Updated, Some(p))
                    if !obj::is_deleting(p) && ephemeral_volumes(p).next().is_some() =>
                {
                    vec![obj::key(p)]
                }
                _ => vec![],
            };
        }
        if d.kind != DeltaKind::Deleted {
            return vec![];
        }
        self.claims()
            .get(&obj::key(d.object()))
            .cloned()
            .unwrap_or_default()
    }

    fn on_error(&self, _: &Action, _: &crate::Error) -> super::OnError {
        // Upstream retries every failed create (an AlreadyExists too: the claim is then
        // checked for its owner).
        super::OnError::Retry
    }

    fn applied(&self, _: &str, action: &Action, result: Applied<'_>) {
        let create = match action {
            Action::Reported { action, .. } => matches!(**action, Action::Create { .. }),
            a => matches!(a, Action::Create { .. }),
        };
        if !create {
            return;
        }
        match result {
            Applied::Done(_) => {
                CREATES.fetch_add(1, Ordering::Relaxed);
            }
            Applied::Failed(_) => {
                CREATES.fetch_add(1, Ordering::Relaxed);
                CREATE_FAILURES.fetch_add(1, Ordering::Relaxed);
            }
            Applied::Skipped => {}
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(pod) = cx.cache.store_for(&POD_WATCH).get(key) else {
            return Ok(Outcome::none());
        };
        if obj::is_deleting(&pod) {
            return Ok(Outcome::none());
        }
        let ns = obj::namespace(&pod);
        let claims = cx.cache.store_for(&PVC_WATCH);
        let about = ObjectRef::of(&PODS, &pod);
        let mut creates = Vec::new();
        for vol in ephemeral_volumes(&pod) {
            let vname = vol["name"].as_str().unwrap_or("");
            let cname = claim_name(obj::name(&pod), vname);
            match claims.get_in(ns, &cname) {
                Some(pvc) if is_for_pod(&pod, &pvc) => continue,
                Some(_) => {
                    let message = format!(
                        "ephemeral volume {vname}: PVC {ns}/{cname} was not created for pod \
                         {key} (pod is not owner)"
                    );
                    let mut out = Outcome::with(creates);
                    out.actions.push(Action::Event(EventSpec {
                        involved: about,
                        event_type: EventType::Warning,
                        reason: "FailedBinding".into(),
                        message: message.clone(),
                    }));
                    out.retry_quietly = Some(format!("pod {key}: {message}"));
                    return Ok(out);
                }
                None => creates.push(Action::Reported {
                    action: Box::new(Action::Create {
                        kind: PERSISTENTVOLUMECLAIMS,
                        namespace: ns.to_string(),
                        object: claim_for(&pod, vol),
                    }),
                    report: Report {
                        about: about.clone(),
                        success_reason: "",
                        success_prefix: "",
                        failure_reason: "FailedBinding",
                        failure_prefix: format!("ephemeral volume {vname}: create PVC {cname}: ")
                            .into(),
                    },
                }),
            }
        }
        Ok(match creates.len() {
            0 => Outcome::none(),
            1 => Outcome::with(creates),
            _ => Outcome::with(vec![Action::SlowStart(creates)]),
        })
    }
}

#[cfg(test)]
mod tests;
