//! One node's sync, in the steps of upstream's `reconciler` (detaches and attaches of the
//! desired state against the actual one) and its `nodeStatusUpdater` (the node's
//! `status.volumesAttached`).

use super::{
    event, metrics, volume_msg, AttachDetach, Memo, Want, ATTACH_TIMEOUT, KEEP_TERMINATED, MANAGED,
    MAX_WAIT_FOR_UNMOUNT, OUT_OF_SERVICE, PV_WATCH, VA_WATCH,
};
use crate::api::client::{DeleteOptions, PatchType};
use crate::api::resources::{NODES, VOLUMEATTACHMENTS};
use crate::cache::Store;
use crate::controller::{sooner, Action, Cx, EventType, ObjectRef, Outcome};
use crate::controllers::kit::volume::{attachment_name, csi_source, csi_unique_name};
use crate::obj;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::Duration;

/// What one node's sync gathers as it goes.
struct NodeSync<'a> {
    node: &'a str,
    actions: Vec<Action>,
    /// The unique names the node's `volumesAttached` is to list.
    report: Vec<String>,
    requeue: Option<Duration>,
}

impl NodeSync<'_> {
    fn requeue_in(&mut self, d: Duration) {
        self.requeue = sooner(self.requeue, Some(d));
    }

    /// The same Event on each pod.
    fn events(&mut self, pods: &[ObjectRef], t: EventType, reason: &str, msg: &str) {
        for p in pods {
            self.actions.push(event(p, t, reason, msg));
        }
    }
}

/// What the node says of itself.
struct NodeFacts<'a> {
    healthy: bool,
    out_of_service: bool,
    /// `status.volumesInUse`.
    in_use: HashSet<&'a str>,
    /// `status.volumesAttached`, and its names.
    reported: Vec<&'a Value>,
    reported_names: HashSet<&'a str>,
}

impl<'a> NodeFacts<'a> {
    fn of(node_obj: &'a Value) -> Self {
        let conds = node_obj["status"]["conditions"].as_array();
        let healthy = conds
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let out_of_service = node_obj["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["key"] == OUT_OF_SERVICE && t["effect"] == "NoExecute");
        let in_use = node_obj["status"]["volumesInUse"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let reported: Vec<&Value> = node_obj["status"]["volumesAttached"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        let reported_names = reported.iter().filter_map(|v| v["name"].as_str()).collect();
        NodeFacts {
            healthy,
            out_of_service,
            in_use,
            reported,
            reported_names,
        }
    }
}

pub(super) fn delete_va(name: &str) -> Action {
    Action::Delete {
        kind: VOLUMEATTACHMENTS,
        namespace: String::new(),
        name: name.to_string(),
        options: DeleteOptions::default(),
    }
}

impl AttachDetach {
    /// Whether an attachment is one this controller would have made: a PersistentVolume
    /// source, named as the CSI attacher names it (or its volume is gone).
    pub(super) fn ours(&self, cx: &Cx, va: &Value, node: &str) -> bool {
        let Some(pv) = va["spec"]["source"]["persistentVolumeName"].as_str() else {
            return false;
        };
        match cx.cache.store_for(&PV_WATCH).get(pv) {
            None => true,
            Some(pv) => {
                csi_source(&pv).is_some_and(|(d, h)| attachment_name(h, d, node) == obj::name(va))
            }
        }
    }

    fn unique_of(&self, cx: &Cx, va: &Value) -> Option<String> {
        let pv = va["spec"]["source"]["persistentVolumeName"].as_str()?;
        let pv = cx.cache.store_for(&PV_WATCH).get(pv)?;
        csi_source(&pv).map(|(d, h)| csi_unique_name(d, h))
    }

    pub(super) fn sync_node(&self, cx: &Cx, node_obj: &Value) -> Outcome {
        let node = obj::name(node_obj);
        if obj::annotation(node_obj, MANAGED).is_none() {
            self.stats.node_gone(node);
            return Outcome::none();
        }
        let keep_terminated = obj::annotation(node_obj, KEEP_TERMINATED) == Some("true");
        let facts = NodeFacts::of(node_obj);
        let wanted = self.wanted(cx, node, keep_terminated);
        let vas = cx.cache.store_for(&VA_WATCH);
        let mut s = NodeSync {
            node,
            actions: Vec::new(),
            report: Vec::new(),
            requeue: None,
        };
        let mut memo = self.memo();
        for (name, want) in &wanted {
            memo.detach_requested.remove(name);
            self.attach(cx, &mut s, &mut memo, &vas, name, want, &facts);
        }
        for name in self.index().attachments_on(node) {
            if !wanted.contains_key(&name) {
                self.detach(cx, &mut s, &mut memo, &vas, &name, &facts);
            }
        }
        drop(memo);
        self.count(cx, node, &wanted);
        let NodeSync {
            mut actions,
            report,
            requeue,
            ..
        } = s;
        if let Some(patch) = volumes_attached_patch(node, &facts.reported, report) {
            // The status patch goes before the deletes it makes safe.
            actions.insert(0, patch);
        }
        Outcome {
            actions,
            requeue_after: requeue,
            ..Outcome::default()
        }
    }

    /// A wanted volume: reported once attached, waited for (its errors and the attacher's
    /// timeout as Events), or its VolumeAttachment created unless the volume is held by
    /// another node.
    #[allow(clippy::too_many_arguments)]
    fn attach(
        &self,
        cx: &Cx,
        s: &mut NodeSync,
        memo: &mut Memo,
        vas: &Store,
        name: &String,
        want: &Want,
        facts: &NodeFacts,
    ) {
        match vas.get(name) {
            Some(va) if obj::is_deleting(&va) => {}
            Some(va) if va["status"]["attached"] == true => {
                memo.attach_errors.remove(name);
                memo.waiting.remove(name);
                memo.multi_attach
                    .remove(&(s.node.to_string(), want.pv.clone()));
                if !facts.reported_names.contains(want.unique.as_str()) {
                    let msg = volume_msg("AttachVolume.Attach succeeded", &want.pv, "");
                    s.events(
                        &want.pods,
                        EventType::Normal,
                        "SuccessfulAttachVolume",
                        &msg,
                    );
                }
                s.report.push(want.unique.clone());
            }
            Some(va) => {
                let err = va["status"]["attachError"]["message"]
                    .as_str()
                    .unwrap_or("");
                wait_for_attach(cx, s, memo, name, want, err);
            }
            None => {
                if !want.multi && self.held_elsewhere(cx, s, memo, vas, want) {
                    return;
                }
                s.actions.push(Action::Create {
                    kind: VOLUMEATTACHMENTS,
                    namespace: String::new(),
                    object: json!({
                        "apiVersion": "storage.k8s.io/v1",
                        "kind": "VolumeAttachment",
                        "metadata": {"name": name},
                        "spec": {
                            "attacher": want.driver,
                            "nodeName": s.node,
                            "source": {"persistentVolumeName": want.pv},
                        },
                    }),
                });
            }
        }
    }

    /// Whether a volume that cannot be attached to several nodes has an attachment on
    /// another node (then its pods get the Multi-Attach error once, if it is attached there).
    fn held_elsewhere(
        &self,
        cx: &Cx,
        s: &mut NodeSync,
        memo: &mut Memo,
        vas: &Store,
        want: &Want,
    ) -> bool {
        let elsewhere: Vec<(String, bool)> = self
            .index()
            .attachments_of(&want.pv)
            .into_iter()
            .filter(|(_, n)| n != s.node)
            .map(|(va, n)| {
                // One this controller created that the cache has not seen yet (its watch
                // may lag the pod's) is there, not attached.
                let attached = vas
                    .get(&va)
                    .is_some_and(|v| v["status"]["attached"] == true);
                (n, attached)
            })
            .collect();
        if elsewhere.is_empty() {
            return false;
        }
        let key = (s.node.to_string(), want.pv.clone());
        let attached: Vec<String> = elsewhere
            .iter()
            .filter(|(_, a)| *a)
            .map(|(n, _)| n.clone())
            .collect();
        if !attached.is_empty() && !memo.multi_attach.contains(&key) {
            memo.multi_attach.insert(key);
            for p in &want.pods {
                let msg = self.multi_attach_message(cx, want, p, &attached);
                s.actions
                    .push(event(p, EventType::Warning, "FailedAttachVolume", &msg));
            }
        }
        true
    }

    /// An attachment no longer wanted: detached once the node no longer uses it (or at
    /// once out of service, or after the unmount wait on a node not Ready), the node's
    /// report losing it first.
    fn detach(
        &self,
        cx: &Cx,
        s: &mut NodeSync,
        memo: &mut Memo,
        vas: &Store,
        name: &String,
        facts: &NodeFacts,
    ) {
        let Some(va) = vas.get(name) else { return };
        if obj::is_deleting(&va) || !self.ours(cx, &va, s.node) {
            return;
        }
        let unique = self.unique_of(cx, &va);
        let mounted = unique.as_deref().is_some_and(|u| facts.in_use.contains(u));
        let since = *memo.detach_requested.entry(name.clone()).or_insert(cx.now);
        let elapsed = cx.now.duration_since(since).unwrap_or_default();
        let timeout = elapsed > MAX_WAIT_FOR_UNMOUNT && self.force_on_timeout;
        let force = timeout && !facts.healthy;
        if mounted && !force && !facts.out_of_service {
            if va["status"]["attached"] == true {
                if let Some(u) = unique {
                    s.report.push(u);
                }
            }
            if !facts.healthy {
                s.requeue_in(MAX_WAIT_FOR_UNMOUNT.saturating_sub(elapsed) + Duration::from_secs(1));
            }
            return;
        }
        // Detach: the node stops reporting it first; the delete follows once it does.
        if unique
            .as_deref()
            .is_some_and(|u| facts.reported_names.contains(u))
        {
            return;
        }
        if mounted {
            log::info!(
                "attachdetach: force detaching {name} from node {} (still mounted; {})",
                s.node,
                if facts.out_of_service {
                    "node out of service"
                } else {
                    "unmount wait expired"
                }
            );
        }
        if timeout {
            self.stats.forced_detach(metrics::TIMEOUT);
        } else if facts.out_of_service {
            self.stats.forced_detach(metrics::OUT_OF_SERVICE);
        }
        memo.detach_requested.remove(name);
        memo.attach_errors.remove(name);
        memo.waiting.remove(name);
        s.actions.push(delete_va(name));
    }
}

/// An attachment not attached yet: without an answer, the attacher's timeout is reported
/// after its wait; an `attachError` once per message.
fn wait_for_attach(
    cx: &Cx,
    s: &mut NodeSync,
    memo: &mut Memo,
    name: &String,
    want: &Want,
    err: &str,
) {
    if err.is_empty() {
        // No answer yet: after the attacher's wait, its timeout is reported.
        let since = *memo.waiting.entry(name.clone()).or_insert(cx.now);
        let waited = cx.now.duration_since(since).unwrap_or_default();
        let left = if waited >= ATTACH_TIMEOUT {
            memo.waiting.insert(name.clone(), cx.now);
            let msg = volume_msg(
                "AttachVolume.Attach failed",
                &want.pv,
                &format!(
                    ": timed out waiting for external-attacher of {} CSI driver to attach volume {}",
                    want.driver, want.handle
                ),
            );
            s.events(&want.pods, EventType::Warning, "FailedAttachVolume", &msg);
            ATTACH_TIMEOUT
        } else {
            ATTACH_TIMEOUT - waited
        };
        s.requeue_in(left);
    }
    if !err.is_empty() && memo.attach_errors.get(name).map(String::as_str) != Some(err) {
        memo.waiting.remove(name);
        memo.attach_errors.insert(name.clone(), err.to_string());
        let msg = volume_msg("AttachVolume.Attach failed", &want.pv, &format!(": {err}"));
        s.events(&want.pods, EventType::Warning, "FailedAttachVolume", &msg);
    }
}

/// The node's report (upstream's `nodeStatusUpdater`): what it listed and still holds, in
/// its order, then the new ones; a strategic merge patch of its status when that differs.
fn volumes_attached_patch(node: &str, reported: &[&Value], report: Vec<String>) -> Option<Action> {
    let keep: HashSet<&str> = report.iter().map(String::as_str).collect();
    let mut list: Vec<Value> = reported
        .iter()
        .filter(|v| v["name"].as_str().is_some_and(|n| keep.contains(n)))
        .map(|v| json!({"devicePath": v["devicePath"].as_str().unwrap_or(""), "name": v["name"]}))
        .collect();
    let mut seen: HashSet<String> = list
        .iter()
        .filter_map(|v| v["name"].as_str().map(str::to_string))
        .collect();
    for u in report {
        if seen.insert(u.clone()) {
            list.push(json!({"devicePath": "", "name": u}));
        }
    }
    let changed = list.len() != reported.len()
        || list
            .iter()
            .zip(reported)
            .any(|(a, b)| a["name"] != b["name"]);
    if !changed {
        return None;
    }
    let value = if list.is_empty() {
        Value::Null
    } else {
        Value::Array(list)
    };
    Some(Action::Patch {
        kind: NODES,
        namespace: String::new(),
        name: node.to_string(),
        patch_type: PatchType::Strategic,
        patch: json!({"status": {"volumesAttached": value}}),
        subresource: Some("status"),
    })
}
