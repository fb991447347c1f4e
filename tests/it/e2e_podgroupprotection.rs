//! podgroup-protection-controller scenarios, against the sandbox always and a real
//! kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`). A kube-apiserver that does not serve
//! `scheduling.k8s.io/v1beta1` PodGroups (its GenericWorkload gate and that group version
//! off, the default) gets the one line saying the controller stays off; one started with
//! `API_EXTRA_ARGS="--feature-gates=GenericWorkload=true
//! --runtime-config=scheduling.k8s.io/v1beta1=true"` runs the whole scenario.

use crate::common::*;
use edgekcm::api::client::Client;
use edgekcm::api::resources::{PODGROUPS, PODS};
use serde_json::{json, Value};
use std::time::Duration;

const FINALIZER: &str = "scheduling.k8s.io/podgroup-protection";
const FLAGS: &[&str] = &[
    "--controllers=podgroup-protection-controller",
    "--feature-gates=GenericWorkload=true",
];

fn get_group(admin: &Client, ns: &str, name: &str) -> Option<Value> {
    admin.get(&PODGROUPS, Some(ns), name).ok()
}

fn pod_in(admin: &Client, ns: &str, name: &str, group: &str) {
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}});
    admin.create(&PODS, Some(ns), &p).expect("create pod");
}

fn set_phase(admin: &Client, ns: &str, name: &str, phase: &str) {
    let mut p = admin.get(&PODS, Some(ns), name).expect("get pod");
    p["status"]["phase"] = json!(phase);
    admin.update_status(&PODS, &p).expect("pod status");
}

/// The group stays while a running pod names it, and goes once that pod failed (a
/// succeeded pod naming it never held it).
fn scenario_group_kept_while_used(t: &Target) {
    if !t.at_least(
        37,
        "GenericWorkload and scheduling.k8s.io/v1beta1 PodGroups (v1.37)",
    ) {
        return;
    }
    let admin = t.admin();
    let served = admin
        .get_path("/apis/scheduling.k8s.io/v1beta1")
        .is_ok_and(|l| edgekcm::controllers::kit::served::listed(&l, "podgroups"));
    if !served {
        let mut kcm = Kcm::start(t, "pgp-off", FLAGS);
        kcm.wait_for_line(
            "the line saying it stays off",
            "does not serve scheduling.k8s.io/v1beta1 podgroups",
        );
        return;
    }
    let ns = Ns::with_cleanup(t, "e2e-pgp", &[PODS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = Kcm::start(t, "pgp", FLAGS);
    // kube-apiserver adds the finalizer itself; the sandbox is given it.
    let g = json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "gang", "finalizers": [FINALIZER]},
        "spec": {"schedulingPolicy": {"basic": {}}}});
    admin
        .create(&PODGROUPS, Some(n), &g)
        .expect("create PodGroup");
    pod_in(admin, n, "runs", "gang");
    pod_in(admin, n, "done", "gang");
    set_phase(admin, n, "done", "Succeeded");
    admin
        .delete(&PODGROUPS, Some(n), "gang", &Default::default())
        .expect("delete PodGroup");
    std::thread::sleep(Duration::from_secs(3));
    let g = get_group(admin, n, "gang").expect("kept while a running pod names it");
    assert!(g["metadata"]["deletionTimestamp"].is_string(), "{g}");
    assert!(
        g["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == FINALIZER)),
        "{g}"
    );
    set_phase(admin, n, "runs", "Failed");
    eventually(Duration::from_secs(15), "PodGroup gone", || {
        get_group(admin, n, "gang").is_none().then_some(())
    });
}

crate::scenarios! {
    podgroup_kept_while_used => scenario_group_kept_while_used,
}
