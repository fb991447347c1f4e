//! persistentvolume-attach-detach-controller scenarios, against the sandbox always and a
//! real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`). There is no kubelet and no
//! external attacher: the tests write what they would (a VolumeAttachment's
//! `status.attached`, a node's `status.volumesInUse`).

use crate::common::nodes::*;
use crate::common::*;
use edgekcm::api::client::{Client, ListOptions, PatchType};
use edgekcm::api::resources::{
    EVENTS, NODES, PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, PODS, VOLUMEATTACHMENTS,
};
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);
const DRIVER: &str = "csi.e2e.example.com";
const MANAGED: &str = "volumes.kubernetes.io/controller-managed-attach-detach";
const CONTROLLERS: &str = "--controllers=persistentvolume-attach-detach-controller";

/// PersistentVolumes made by a test, deleted (finalizers dropped) on drop.
pub(crate) struct Pvs {
    pub(crate) admin: Client,
    pub(crate) names: Vec<String>,
}

impl Drop for Pvs {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = self
                .admin
                .delete(&PERSISTENTVOLUMES, None, n, &Default::default());
            let _ = self.admin.patch(
                &PERSISTENTVOLUMES,
                None,
                n,
                PatchType::Merge,
                &json!({"metadata": {"finalizers": null}}),
                None,
            );
        }
    }
}

/// The VolumeAttachment name of the CSI attacher (sha256 of handle, driver and node).
fn attachment_name(handle: &str, node: &str) -> String {
    let d = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{handle}{DRIVER}{node}").as_bytes(),
    );
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("csi-{hex}")
}

/// A claim `name` bound to a new CSI volume `pv` (handle `h-<pv>`), as the binder leaves them.
fn bound_claim(admin: &Client, ns: &str, name: &str, pv: &str, pvs: &mut Pvs, modes: &[&str]) {
    let c = admin
        .create(
            &PERSISTENTVOLUMECLAIMS,
            Some(ns),
            &json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": name},
                "spec": {"accessModes": modes, "storageClassName": "", "volumeName": pv,
                         "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .expect("claim");
    admin
        .create(
            &PERSISTENTVOLUMES,
            None,
            &json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
                "spec": {"accessModes": modes, "capacity": {"storage": "1Gi"},
                         "storageClassName": "",
                         "csi": {"driver": DRIVER, "volumeHandle": format!("h-{pv}")},
                         "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                      "namespace": ns, "name": name,
                                      "uid": c["metadata"]["uid"]}}}),
        )
        .expect("volume");
    pvs.names.push(pv.to_string());
    let mut c = admin
        .get(&PERSISTENTVOLUMECLAIMS, Some(ns), name)
        .expect("claim");
    c["status"] = json!({"phase": "Bound", "accessModes": modes,
                         "capacity": {"storage": "1Gi"}});
    admin
        .update_status(&PERSISTENTVOLUMECLAIMS, &c)
        .expect("claim status");
}

fn pod_using(admin: &Client, ns: &str, name: &str, node: &str, claim: &str) -> Value {
    admin
        .create(
            &PODS,
            Some(ns),
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"nodeName": node,
                         "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}],
                         "volumes": [{"name": "data",
                                      "persistentVolumeClaim": {"claimName": claim}}]}}),
        )
        .expect("pod")
}

fn wait_attachment(admin: &Client, name: &str) -> Value {
    eventually(LIMIT, &format!("VolumeAttachment {name}"), || {
        admin.get(&VOLUMEATTACHMENTS, None, name).ok()
    })
}

/// Act as the external attacher: the attachment is attached.
fn attach(admin: &Client, name: &str) {
    let mut va = admin
        .get(&VOLUMEATTACHMENTS, None, name)
        .expect("attachment");
    va["status"] = json!({"attached": true});
    admin
        .update_status(&VOLUMEATTACHMENTS, &va)
        .expect("attachment status");
}

fn reported(admin: &Client, node: &str) -> Value {
    let n = admin.get(&NODES, None, node).expect("node");
    n["status"]["volumesAttached"].clone()
}

fn set_in_use(admin: &Client, node: &str, in_use: Value) {
    admin
        .patch(
            &NODES,
            None,
            node,
            PatchType::Merge,
            &json!({"status": {"volumesInUse": in_use}}),
            Some("status"),
        )
        .expect("volumesInUse");
}

/// (type, reason, message, source) of the Events about pod `name`, sorted.
pub(crate) fn events_about(
    admin: &Client,
    ns: &str,
    name: &str,
) -> Vec<(String, String, String, String)> {
    let mut out: Vec<_> = admin
        .list(&EVENTS, Some(ns), &ListOptions::default())
        .expect("list events")
        .items
        .iter()
        .filter(|e| e["involvedObject"]["name"] == name && e["involvedObject"]["kind"] == "Pod")
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            (
                s(&e["type"]),
                s(&e["reason"]),
                s(&e["message"]),
                s(&e["source"]["component"]),
            )
        })
        .collect();
    out.sort();
    out
}

/// Attach on a managed node, report, keep while mounted, detach after unmount; nothing on an
/// unmanaged node.
fn scenario_attach_report_detach(t: &Target) {
    let ns = Ns::with_cleanup(t, "ad", &[PODS, PERSISTENTVOLUMECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut nodes = Nodes::new(admin.clone());
    let mut pvs = Pvs {
        admin: admin.clone(),
        names: Vec::new(),
    };
    let managed = unique("ad-managed");
    let plain = unique("ad-plain");
    nodes.create(&managed, Some(true), json!([]), json!({MANAGED: "true"}));
    nodes.create(&plain, Some(true), json!([]), json!({}));
    let pv = unique("ad-pv");
    let pv2 = unique("ad-pv2");
    bound_claim(admin, n, "c1", &pv, &mut pvs, &["ReadWriteOnce"]);
    bound_claim(admin, n, "c2", &pv2, &mut pvs, &["ReadWriteOnce"]);
    pod_using(admin, n, "p", &managed, "c1");
    pod_using(admin, n, "q", &plain, "c2");
    let _kcm = start_with(t, "attach", CONTROLLERS);

    let name = attachment_name(&format!("h-{pv}"), &managed);
    let va = wait_attachment(admin, &name);
    assert_eq!(
        va["spec"],
        json!({"attacher": DRIVER, "nodeName": managed,
               "source": {"persistentVolumeName": pv}})
    );
    let unique_name = format!("kubernetes.io/csi/{DRIVER}^h-{pv}");
    attach(admin, &name);
    eventually(LIMIT, "volumesAttached", || {
        (reported(admin, &managed) == json!([{"name": unique_name, "devicePath": ""}]))
            .then_some(())
    });
    let e = eventually(LIMIT, "SuccessfulAttachVolume", || {
        events_about(admin, n, "p")
            .into_iter()
            .find(|e| e.1 == "SuccessfulAttachVolume")
    });
    assert_eq!(
        e,
        (
            "Normal".to_string(),
            "SuccessfulAttachVolume".to_string(),
            format!("AttachVolume.Attach succeeded for volume \"{pv}\" "),
            "attachdetach-controller".to_string()
        )
    );
    let name2 = attachment_name(&format!("h-{pv2}"), &plain);
    assert!(admin.get(&VOLUMEATTACHMENTS, None, &name2).is_err());

    // Mounted, the pod gone: kept until the node unmounts it.
    set_in_use(admin, &managed, json!([unique_name]));
    delete_pod_now(admin, n, "p").expect("delete pod");
    std::thread::sleep(Duration::from_secs(2));
    assert!(admin.get(&VOLUMEATTACHMENTS, None, &name).is_ok());
    assert_eq!(reported(admin, &managed)[0]["name"], unique_name.as_str());
    set_in_use(admin, &managed, Value::Null);
    eventually(LIMIT, "detached", || {
        admin
            .get(&VOLUMEATTACHMENTS, None, &name)
            .err()
            .filter(|e| e.is_not_found())
    });
    assert!(reported(admin, &managed).is_null());
    assert!(admin.get(&VOLUMEATTACHMENTS, None, &name2).is_err());
}

/// A single-node volume attached to one node: a pod on another node gets a Multi-Attach
/// error and waits; once detached from the first node it is attached to the second.
fn scenario_multi_attach(t: &Target) {
    let ns = Ns::with_cleanup(t, "admulti", &[PODS, PERSISTENTVOLUMECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut nodes = Nodes::new(admin.clone());
    let mut pvs = Pvs {
        admin: admin.clone(),
        names: Vec::new(),
    };
    let a = unique("ad-a");
    let b = unique("ad-b");
    for node in [&a, &b] {
        nodes.create(node, Some(true), json!([]), json!({MANAGED: "true"}));
    }
    let pv = unique("ad-rwo");
    bound_claim(admin, n, "c", &pv, &mut pvs, &["ReadWriteOnce"]);
    pod_using(admin, n, "first", &a, "c");
    let _kcm = start_with(t, "multi", CONTROLLERS);
    let on_a = attachment_name(&format!("h-{pv}"), &a);
    wait_attachment(admin, &on_a);
    attach(admin, &on_a);
    pod_using(admin, n, "second", &b, "c");
    let e = eventually(LIMIT, "Multi-Attach error", || {
        events_about(admin, n, "second")
            .into_iter()
            .find(|e| e.1 == "FailedAttachVolume")
    });
    assert_eq!(e.0, "Warning");
    assert_eq!(
        e.2,
        format!("Waiting for detach for volume \"{pv}\" Volume is already used by pod(s) first")
    );
    let on_b = attachment_name(&format!("h-{pv}"), &b);
    assert!(admin.get(&VOLUMEATTACHMENTS, None, &on_b).is_err());
    delete_pod_now(admin, n, "first").expect("delete first");
    wait_attachment(admin, &on_b);
    assert!(admin.get(&VOLUMEATTACHMENTS, None, &on_a).is_err());
}

fn restart_apiserver(t: &Target, admin: &Client) {
    match t.sandbox() {
        Some(sb) => {
            sb.stop_listening();
            std::thread::sleep(Duration::from_secs(3));
            sb.try_resume_listening().expect("listen again");
            // And the watches' history is gone: a 410 and a re-list.
            sb.faults().expire_history();
            sb.faults().drop_watches();
        }
        None => {
            let cmd = std::env::var("KCM_E2E_APISERVER_RESTART")
                .expect("the restart scenario needs KCM_E2E_APISERVER_RESTART");
            let ok = std::process::Command::new("sh")
                .arg("-c")
                .arg(&cmd)
                .status();
            assert!(matches!(ok.map(|s| s.success()), Ok(true)), "{cmd}");
            eventually(Duration::from_secs(60), "apiserver back", || {
                admin.get_raw("/readyz").ok()
            });
        }
    }
}

/// Across an apiserver restart (and a 410 on the sandbox) what is attached stays reported,
/// and changes after it are served: a pod gone is detached, a new one attached.
fn scenario_apiserver_restart(t: &Target) {
    let ns = Ns::with_cleanup(t, "adrestart", &[PODS, PERSISTENTVOLUMECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut nodes = Nodes::new(admin.clone());
    let mut pvs = Pvs {
        admin: admin.clone(),
        names: Vec::new(),
    };
    let node = unique("ad-restart");
    nodes.create(&node, Some(true), json!([]), json!({MANAGED: "true"}));
    let (pv1, pv2) = (unique("ad-r1"), unique("ad-r2"));
    bound_claim(admin, n, "c1", &pv1, &mut pvs, &["ReadWriteOnce"]);
    bound_claim(admin, n, "c2", &pv2, &mut pvs, &["ReadWriteOnce"]);
    pod_using(admin, n, "p1", &node, "c1");
    let mut kcm = start_with(t, "ad-restart", CONTROLLERS);
    let va1 = attachment_name(&format!("h-{pv1}"), &node);
    wait_attachment(admin, &va1);
    attach(admin, &va1);
    let u1 = format!("kubernetes.io/csi/{DRIVER}^h-{pv1}");
    eventually(LIMIT, "reported", || {
        (reported(admin, &node)[0]["name"] == u1.as_str()).then_some(())
    });
    restart_apiserver(t, admin);
    pod_using(admin, n, "p2", &node, "c2");
    let va2 = attachment_name(&format!("h-{pv2}"), &node);
    wait_attachment(admin, &va2);
    attach(admin, &va2);
    delete_pod_now(admin, n, "p1").expect("delete p1");
    eventually(LIMIT, "p1's volume detached", || {
        admin
            .get(&VOLUMEATTACHMENTS, None, &va1)
            .err()
            .filter(|e| e.is_not_found())
    });
    let u2 = format!("kubernetes.io/csi/{DRIVER}^h-{pv2}");
    eventually(LIMIT, "only p2's volume reported", || {
        (reported(admin, &node) == json!([{"name": u2, "devicePath": ""}])).then_some(())
    });
    assert!(kcm.exited().is_none(), "edgekcm kept running");
}

scenarios! {
    apiserver_restart => scenario_apiserver_restart,
    attach_report_detach => scenario_attach_report_detach,
    multi_attach => scenario_multi_attach,
}
