//! The pods a Job counts (upstream's `getPodsForJob` with its `PodControllerRefManager`):
//! the pods it controls that its selector still matches, plus orphans the selector matches,
//! adopted with the tracking finalizer added; controlled pods that stopped matching are
//! released with the finalizer removed.

use super::sync::{has_finalizer, TRACKING_FINALIZER};
use crate::api::client::PatchType;
use crate::api::resources::{JOBS, PODS};
use crate::cache::Store;
use crate::controllers::refmanager::{self, Claim};
use crate::controllers::{Action, Cx};
use crate::error::Result;
use crate::obj::{self, At as _, Obj};
use serde_json::{json, Value};
use std::sync::Arc;

/// Strategic-merge patch adopting a pod: the controller reference and the tracking finalizer.
pub fn adopt_patch(job: &Value, pod_uid: &str) -> Value {
    let mut p = refmanager::adopt_patch(&JOBS, job, pod_uid);
    p["metadata"]["finalizers"] = json!([TRACKING_FINALIZER]);
    p
}

/// Strategic-merge patch releasing a pod: the reference to the Job and the tracking finalizer
/// go.
pub fn release_patch(job_uid: &str, pod_uid: &str) -> Value {
    let mut p = refmanager::release_patch(job_uid, pod_uid);
    p["metadata"]["$deleteFromPrimitiveList/finalizers"] = json!([TRACKING_FINALIZER]);
    p
}

/// The pods the Job counts, and the adoptions and releases to send first. `act`: this pass
/// may write (the pass right after the writes only reads).
pub fn pods(cx: &Cx, job: &Value, store: &Store, act: bool) -> Result<(Vec<Obj>, Vec<Action>)> {
    let (ns, uid) = (obj::namespace(job), obj::uid(job));
    let selector = job.at("/spec/selector");
    let candidates = store.claimable(ns, uid, |p| {
        refmanager::claim(job, selector, p) != Claim::Ignore
    });
    let (mut pods, mut actions, mut rechecked) = (Vec::new(), Vec::new(), false);
    let patch = |p: &Value, patch: Value| Action::Patch {
        kind: PODS,
        namespace: ns.to_string(),
        name: obj::name(p).to_string(),
        patch_type: PatchType::Strategic,
        patch,
        subresource: None,
    };
    for p in candidates {
        match refmanager::claim(job, selector, &p) {
            Claim::Owned => pods.push(p),
            Claim::Adopt if act => {
                if !rechecked {
                    refmanager::recheck_deletion(cx.client, &JOBS, job)?;
                    rechecked = true;
                }
                log::debug!(
                    "job-controller: {}: adopting pod {}",
                    obj::key(job),
                    obj::name(&p)
                );
                actions.push(patch(&p, adopt_patch(job, obj::uid(&p))));
                // Counted as adopted, with the finalizer the patch adds.
                let mut adopted = (*p).clone();
                adopted["metadata"]["ownerReferences"] =
                    json!([refmanager::controller_owner_ref(&JOBS, job)]);
                if !has_finalizer(&adopted) {
                    match adopted["metadata"]["finalizers"].as_array_mut() {
                        Some(f) => f.push(json!(TRACKING_FINALIZER)),
                        None => adopted["metadata"]["finalizers"] = json!([TRACKING_FINALIZER]),
                    }
                }
                pods.push(Arc::new(adopted));
            }
            Claim::Release if act => {
                log::debug!(
                    "job-controller: {}: releasing pod {} (no longer selected)",
                    obj::key(job),
                    obj::name(&p)
                );
                actions.push(patch(&p, release_patch(uid, obj::uid(&p))));
            }
            _ => {}
        }
    }
    Ok((pods, actions))
}
