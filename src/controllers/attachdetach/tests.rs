use super::*;
use crate::controllers::testing::Harness;
use serde_json::json;

const DRIVER: &str = "csi.example.com";

/// A change as the watch brings it: a newer resourceVersion.
fn upd(h: &mut Harness<AttachDetach>, kind: crate::api::Kind, mut v: Value) {
    static RV: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(100);
    let rv = RV.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    v["metadata"]["resourceVersion"] = rv.to_string().into();
    h.update(kind, v);
}

fn node(name: &str, managed: bool) -> Value {
    let mut n = json!({"metadata": {"name": name, "uid": format!("u-{name}"),
                                    "resourceVersion": "1"},
                       "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    if managed {
        n["metadata"]["annotations"] = json!({MANAGED: "true"});
    }
    n
}

fn pod(name: &str, node: &str, claim: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                        "resourceVersion": "1"},
           "spec": {"nodeName": node, "volumes": [
               {"name": "data", "persistentVolumeClaim": {"claimName": claim}},
               {"name": "cfg", "configMap": {"name": "c"}}]},
           "status": {"phase": "Running"}})
}

fn pvc(name: &str, pv: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("c-{name}"),
                        "resourceVersion": "1"},
           "spec": {"volumeName": pv}, "status": {"phase": "Bound"}})
}

fn pv(name: &str, claim: &str, modes: &[&str]) -> Value {
    json!({"metadata": {"name": name, "uid": format!("v-{name}"), "resourceVersion": "1"},
           "spec": {"csi": {"driver": DRIVER, "volumeHandle": format!("h-{name}")},
                    "accessModes": modes,
                    "claimRef": {"namespace": "ns", "name": claim, "uid": format!("c-{claim}")}}})
}

fn va(pv: &str, node: &str, attached: bool) -> Value {
    json!({"metadata": {"name": attachment_name(&format!("h-{pv}"), DRIVER, node),
                        "uid": format!("a-{pv}-{node}"), "resourceVersion": "1"},
           "spec": {"attacher": DRIVER, "nodeName": node,
                    "source": {"persistentVolumeName": pv}},
           "status": {"attached": attached}})
}

fn unique(pv: &str) -> String {
    csi_unique_name(DRIVER, &format!("h-{pv}"))
}

/// A managed node n1 with pod p using claim c bound to CSI volume v.
fn setup() -> Harness<AttachDetach> {
    let mut h = Harness::new(AttachDetach::new()).at("2024-01-01T00:00:00Z");
    h.add(NODES, node("n1", true));
    h.add(PERSISTENTVOLUMES, pv("v", "c", &["ReadWriteOnce"]));
    h.add(PERSISTENTVOLUMECLAIMS, pvc("c", "v"));
    h.add(PODS, pod("p", "n1", "c"));
    h
}

#[test]
fn a_pods_csi_volume_gets_its_attachment_on_a_managed_node_only() {
    let mut h = setup();
    assert_eq!(h.take_queued(), ["n1"]);
    let w = h.sync("n1");
    assert_eq!(w.creates.len(), 1);
    assert_eq!(
        w.creates[0].1,
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
               "metadata": {"name": attachment_name("h-v", DRIVER, "n1")},
               "spec": {"attacher": DRIVER, "nodeName": "n1",
                        "source": {"persistentVolumeName": "v"}}})
    );
    assert!(w.patches.is_empty() && w.events.is_empty());

    h.add(NODES, node("n2", false));
    h.add(PODS, pod("q", "n2", "c"));
    assert!(h.sync("n2").is_empty());
}

#[test]
fn unbound_claims_non_csi_volumes_and_drivers_without_attach_are_skipped() {
    let mut h = setup();
    let mut pending = pvc("c", "v");
    pending["status"]["phase"] = "Pending".into();
    upd(&mut h, PERSISTENTVOLUMECLAIMS, pending);
    assert!(h.sync("n1").is_empty());
    upd(&mut h, PERSISTENTVOLUMECLAIMS, pvc("c", "v"));
    h.add(
        CSIDRIVERS,
        json!({"metadata": {"name": DRIVER, "resourceVersion": "1"},
               "spec": {"attachRequired": false}}),
    );
    assert!(h.sync("n1").is_empty());
    h.add(
        CSIDRIVERS,
        json!({"metadata": {"name": DRIVER, "resourceVersion": "2"},
               "spec": {"attachRequired": true}}),
    );
    assert_eq!(h.sync("n1").creates.len(), 1);
    // A volume bound to another claim (UID mismatch) is not the pod's.
    let mut other = pv("v", "c", &["ReadWriteOnce"]);
    other["spec"]["claimRef"]["uid"] = "someone-else".into();
    upd(&mut h, PERSISTENTVOLUMES, other);
    assert!(h.sync("n1").is_empty());
}

#[test]
fn an_attached_volume_is_reported_on_the_node_with_an_event() {
    let mut h = setup();
    h.add(VOLUMEATTACHMENTS, va("v", "n1", false));
    assert_eq!(h.take_queued(), ["n1"]);
    let w = h.sync("n1");
    assert!(w.events.is_empty() && w.patches.is_empty());
    assert_eq!(w.requeue_after, Some(ATTACH_TIMEOUT));
    // No answer from the external attacher within its wait: reported.
    h.now += ATTACH_TIMEOUT;
    let w = h.sync("n1");
    assert_eq!(
        w.events,
        [(
            EventType::Warning,
            "FailedAttachVolume".to_string(),
            "AttachVolume.Attach failed for volume \"v\" : timed out waiting for \
             external-attacher of csi.example.com CSI driver to attach volume h-v"
                .to_string()
        )]
    );
    upd(&mut h, VOLUMEATTACHMENTS, va("v", "n1", true));
    let w = h.sync("n1");
    assert_eq!(
        w.patches,
        [(
            NODES,
            "n1".to_string(),
            json!({"status": {"volumesAttached": [{"devicePath": "", "name": unique("v")}]}})
        )]
    );
    assert_eq!(
        w.events,
        [(
            EventType::Normal,
            "SuccessfulAttachVolume".to_string(),
            "AttachVolume.Attach succeeded for volume \"v\" ".to_string()
        )]
    );
    let mut n = node("n1", true);
    n["status"]["volumesAttached"] = json!([{"name": unique("v"), "devicePath": ""}]);
    upd(&mut h, NODES, n);
    assert!(h.sync("n1").is_empty());
}

#[test]
fn an_attach_error_is_reported_once() {
    let mut h = setup();
    let mut failing = va("v", "n1", false);
    failing["status"]["attachError"] = json!({"message": "no such disk"});
    h.add(VOLUMEATTACHMENTS, failing.clone());
    let w = h.sync("n1");
    assert_eq!(
        w.events,
        [(
            EventType::Warning,
            "FailedAttachVolume".to_string(),
            "AttachVolume.Attach failed for volume \"v\" : no such disk".to_string()
        )]
    );
    assert!(h.sync("n1").is_empty());
}

fn attached_node(in_use: bool) -> Value {
    let mut n = node("n1", true);
    n["status"]["volumesAttached"] = json!([{"name": unique("v"), "devicePath": ""}]);
    if in_use {
        n["status"]["volumesInUse"] = json!([unique("v")]);
    }
    n
}

#[test]
fn a_volume_no_longer_used_is_detached_after_the_node_unmounts_it() {
    let mut h = setup();
    h.add(VOLUMEATTACHMENTS, va("v", "n1", true));
    upd(&mut h, NODES, attached_node(true));
    let mut done = pod("p", "n1", "c");
    done["status"]["phase"] = "Succeeded".into();
    upd(&mut h, PODS, done);
    assert_eq!(h.take_queued(), ["n1"]);
    // Still mounted: kept and still reported.
    let w = h.sync("n1");
    assert!(w.is_empty(), "{w:?}");
    // Unmounted: the report goes first, then the attachment.
    upd(&mut h, NODES, attached_node(false));
    let w = h.sync("n1");
    assert_eq!(
        w.patches,
        [(
            NODES,
            "n1".to_string(),
            json!({"status": {"volumesAttached": null}})
        )]
    );
    assert!(w.deletes.is_empty());
    upd(&mut h, NODES, node("n1", true));
    let w = h.sync("n1");
    assert_eq!(
        w.deletes,
        [(VOLUMEATTACHMENTS, attachment_name("h-v", DRIVER, "n1"))]
    );
    assert!(w.patches.is_empty());
}

#[test]
fn keep_terminated_pod_volumes_keeps_them() {
    let mut h = setup();
    let mut n = attached_node(false);
    n["metadata"]["annotations"][KEEP_TERMINATED] = "true".into();
    upd(&mut h, NODES, n);
    h.add(VOLUMEATTACHMENTS, va("v", "n1", true));
    let mut done = pod("p", "n1", "c");
    done["status"]["phase"] = "Failed".into();
    upd(&mut h, PODS, done);
    assert!(h.sync("n1").is_empty());
}

#[test]
fn a_mounted_volume_of_a_node_not_ready_is_force_detached_after_six_minutes() {
    let mut h = setup();
    h.add(VOLUMEATTACHMENTS, va("v", "n1", true));
    let mut n = attached_node(true);
    n["status"]["conditions"][0]["status"] = "Unknown".into();
    upd(&mut h, NODES, n.clone());
    h.delete(PODS, pod("p", "n1", "c"));
    let w = h.sync("n1");
    assert!(w.patches.is_empty() && w.deletes.is_empty());
    assert_eq!(
        w.requeue_after,
        Some(MAX_WAIT_FOR_UNMOUNT + Duration::from_secs(1))
    );
    h.now += MAX_WAIT_FOR_UNMOUNT + Duration::from_secs(1);
    let w = h.sync("n1");
    assert_eq!(w.patches.len(), 1);
    n["status"]["volumesAttached"] = json!([]);
    upd(&mut h, NODES, n);
    assert_eq!(h.sync("n1").deletes.len(), 1);
    let text = scrape(&h);
    assert!(
        text.contains(
            "attach_detach_controller_attachdetach_controller_forced_detaches{reason=\"timeout\"} 1"
        ),
        "{text}"
    );
}

#[test]
fn without_force_detach_on_timeout_only_out_of_service_detaches() {
    let mut adc = AttachDetach::new();
    adc.force_on_timeout = false;
    let mut h = Harness::new(adc).at("2024-01-01T00:00:00Z");
    h.add(NODES, node("n1", true));
    h.add(PERSISTENTVOLUMES, pv("v", "c", &["ReadWriteOnce"]));
    h.add(PERSISTENTVOLUMECLAIMS, pvc("c", "v"));
    h.add(VOLUMEATTACHMENTS, va("v", "n1", true));
    let mut n = attached_node(true);
    n["status"]["conditions"][0]["status"] = "Unknown".into();
    upd(&mut h, NODES, n.clone());
    h.sync("n1");
    // Six minutes later, still mounted on a node not ready: kept.
    h.now += MAX_WAIT_FOR_UNMOUNT + Duration::from_secs(60);
    let w = h.sync("n1");
    assert!(w.patches.is_empty() && w.deletes.is_empty(), "{w:?}");
    // The out-of-service taint still detaches.
    n["spec"] = json!({"taints": [{"key": OUT_OF_SERVICE, "value": "nodeshutdown",
                                   "effect": "NoExecute"}]});
    n["metadata"]["resourceVersion"] = "99".into();
    upd(&mut h, NODES, n);
    let w = h.sync("n1");
    assert!(!w.patches.is_empty() || !w.deletes.is_empty(), "{w:?}");
    let text = scrape(&h);
    assert!(!text.contains("reason=\"timeout\"} 1"), "{text}");
}

#[test]
fn an_out_of_service_node_is_detached_at_once() {
    let mut h = setup();
    h.add(VOLUMEATTACHMENTS, va("v", "n1", true));
    let mut n = node("n1", true);
    n["status"]["volumesInUse"] = json!([unique("v")]);
    n["spec"] = json!({"taints": [{"key": OUT_OF_SERVICE, "value": "nodeshutdown",
                                   "effect": "NoExecute"}]});
    upd(&mut h, NODES, n);
    h.delete(PODS, pod("p", "n1", "c"));
    assert_eq!(h.sync("n1").deletes.len(), 1);
    let text = scrape(&h);
    assert!(
        text.contains(
            "attach_detach_controller_attachdetach_controller_forced_detaches{reason=\"out-of-service\"} 1"
        ),
        "{text}"
    );
}

#[test]
fn a_single_node_volume_attached_elsewhere_is_a_multi_attach_error() {
    let mut h = setup();
    h.add(VOLUMEATTACHMENTS, va("v", "n1", true));
    h.add(NODES, node("n2", true));
    h.add(PODS, pod("q", "n2", "c"));
    let w = h.sync("n2");
    assert!(w.creates.is_empty());
    assert_eq!(
        w.events,
        [(
            EventType::Warning,
            "FailedAttachVolume".to_string(),
            "Waiting for detach for volume \"v\" Volume is already used by pod(s) p".to_string()
        )]
    );
    assert!(h.sync("n2").is_empty(), "reported once");
    // Once it is gone from the first node, it is attached here.
    h.delete(VOLUMEATTACHMENTS, va("v", "n1", true));
    assert!(h.take_queued().contains(&"n2".to_string()));
    assert_eq!(h.sync("n2").creates.len(), 1);
    // A volume several nodes may share is attached at once.
    upd(&mut h, PERSISTENTVOLUMES, pv("v", "c", &["ReadWriteMany"]));
    h.add(VOLUMEATTACHMENTS, va("v", "n1", true));
    assert_eq!(h.sync("n2").creates.len(), 1);
}

#[test]
fn an_attachment_just_created_keeps_a_single_node_volume_off_other_nodes() {
    let mut h = setup();
    let o = h.outcome("n1");
    let create = o
        .actions
        .iter()
        .find(|a| matches!(a, Action::Create { .. }))
        .expect("attachment created");
    let created = va("v", "n1", false);
    h.ctrl.applied(
        "n1",
        create,
        crate::controllers::Applied::Done(Some(&created)),
    );
    // A pod on another node before the watch brings the attachment: nothing attached there.
    h.add(NODES, node("n2", true));
    h.add(PODS, pod("q", "n2", "c"));
    let w = h.sync("n2");
    assert!(w.creates.is_empty(), "{w:?}");
    assert!(
        w.events.is_empty(),
        "not attached yet: no Multi-Attach error yet"
    );
    // Once the watch shows it attached, the Multi-Attach error.
    h.add(VOLUMEATTACHMENTS, va("v", "n1", true));
    assert_eq!(h.sync("n2").events.len(), 1);
}

#[test]
fn a_gone_nodes_attachments_are_deleted_and_others_are_left_alone() {
    let mut h = setup();
    h.add(VOLUMEATTACHMENTS, va("v", "n1", true));
    let mut foreign = va("v", "n1", true);
    foreign["metadata"]["name"] = "made-by-someone".into();
    h.add(VOLUMEATTACHMENTS, foreign);
    h.delete(PODS, pod("p", "n1", "c"));
    upd(&mut h, NODES, node("n1", true));
    assert_eq!(
        h.sync("n1").deletes,
        [(VOLUMEATTACHMENTS, attachment_name("h-v", DRIVER, "n1"))]
    );
    h.delete(NODES, node("n1", true));
    assert_eq!(h.sync("n1").deletes.len(), 1);
}

#[test]
fn terminated_pods_are_upstreams() {
    let mut p = pod("p", "n", "c");
    assert!(!pod_terminated(&p));
    p["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z".into();
    p["status"]["containerStatuses"] = json!([{"state": {"running": {}}}]);
    assert!(!pod_terminated(&p));
    p["status"]["containerStatuses"] = json!([{"state": {"terminated": {"exitCode": 0}}}]);
    assert!(pod_terminated(&p));
}

fn scrape(h: &Harness<AttachDetach>) -> String {
    crate::metrics::encode(&h.ctrl.stats.families())
}

#[test]
fn total_volumes_counts_wanted_and_attached_volumes_per_plugin() {
    let mut h = setup();
    assert!(!scrape(&h).contains("attachdetach_controller"));
    h.sync("n1");
    let plugin = format!("kubernetes.io/csi:{DRIVER}");
    let text = scrape(&h);
    assert!(
        text.contains("# HELP attachdetach_controller_total_volumes [ALPHA] Number of volumes in A/D Controller"),
        "{text}"
    );
    assert!(text.contains(&format!(
        "attachdetach_controller_total_volumes{{plugin_name=\"{plugin}\",state=\"desired_state_of_world\"}} 1"
    )));
    assert!(!text.contains("actual_state_of_world"), "{text}");
    h.add(VOLUMEATTACHMENTS, va("v", "n1", true));
    h.sync("n1");
    assert!(scrape(&h).contains(&format!(
        "attachdetach_controller_total_volumes{{plugin_name=\"{plugin}\",state=\"actual_state_of_world\"}} 1"
    )));
    // The node no longer managed: nothing of it counts; no detach was forced.
    upd(&mut h, NODES, node("n1", false));
    h.sync("n1");
    assert!(!scrape(&h).contains("attachdetach_controller"));
    assert!(!scrape(&h).contains("forced"));
}

#[test]
fn volumes_in_use_count_every_scheduled_pods_attachable_volumes_per_node() {
    let mut h = setup();
    let plugin = format!("kubernetes.io/csi:{DRIVER}");
    let line = |node: &str, plugin: &str, n: u32| {
        format!("storage_count_attachable_volumes_in_use{{node=\"{node}\",volume_plugin=\"{plugin}\"}} {n}")
    };
    let text = scrape(&h);
    assert!(
        text.contains("# HELP storage_count_attachable_volumes_in_use [ALPHA] Measure number of volumes in use"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE storage_count_attachable_volumes_in_use gauge"),
        "{text}"
    );
    // Counted before any sync, from the cache; the ConfigMap volume is not attachable.
    assert!(text.contains(&line("n1", &plugin, 1)), "{text}");
    // A second pod on the same claim counts again; a node that is not managed counts too,
    // and so does a terminated pod; inline CSI, FC and iSCSI volumes count under their plugins.
    h.add(PODS, pod("p2", "n1", "c"));
    let mut done = pod("p3", "n2", "c");
    done["status"]["phase"] = "Succeeded".into();
    done["spec"]["volumes"] = json!([
        {"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
        {"name": "inline", "csi": {"driver": "inline.example.com"}},
        {"name": "f", "fc": {"wwids": ["w"]}},
        {"name": "i", "iscsi": {"targetPortal": "t", "iqn": "q", "lun": 0}},
        {"name": "e", "emptyDir": {}}]);
    h.add(PODS, done);
    // Not counted: unscheduled pods, claims not Bound, volumes bound to another claim's UID.
    h.add(PODS, pod("pending", "", "c"));
    let mut unbound = pvc("u", "v2");
    unbound["status"]["phase"] = "Pending".into();
    h.add(PERSISTENTVOLUMECLAIMS, unbound);
    h.add(PODS, pod("p4", "n1", "u"));
    h.add(PERSISTENTVOLUMES, pv("v3", "other", &["ReadWriteOnce"]));
    h.add(PERSISTENTVOLUMECLAIMS, pvc("w", "v3"));
    h.add(PODS, pod("p5", "n1", "w"));
    h.add(PODS, pod("p6", "n1", "missing"));
    let text = scrape(&h);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("storage_count_attachable_volumes_in_use{"))
        .collect();
    assert_eq!(
        lines,
        [
            line("n1", &plugin, 2).as_str(),
            line("n2", &plugin, 1).as_str(),
            line("n2", "kubernetes.io/csi:inline.example.com", 1).as_str(),
            line("n2", "kubernetes.io/fc", 1).as_str(),
            line("n2", "kubernetes.io/iscsi", 1).as_str(),
        ],
        "{text}"
    );
    // A generic ephemeral volume counts through the claim made for the pod, not another.
    let mut eph = pod("e", "n3", "c");
    eph["spec"]["volumes"] = json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]);
    h.add(PODS, eph);
    let mut claim = pvc("e-scratch", "v4");
    h.add(PERSISTENTVOLUMES, pv("v4", "e-scratch", &["ReadWriteOnce"]));
    h.add(PERSISTENTVOLUMECLAIMS, claim.clone());
    assert!(!scrape(&h).contains("node=\"n3\""));
    claim["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "e", "uid": "u-e", "controller": true}]);
    upd(&mut h, PERSISTENTVOLUMECLAIMS, claim);
    assert!(scrape(&h).contains(&line("n3", &plugin, 1)));
}
