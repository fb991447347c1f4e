//! Edge autonomy (edgekcm's own, `--node-autonomy-duration` with the node annotation
//! `node.edgekcm.io/autonomy: "true"`), against the sandbox always and a real kube-apiserver
//! with `KCM_E2E_KUBECONFIG` (`real_*`): an annotated node whose lease stops keeps its pods
//! ready and untainted for the window, then gets upstream's treatment; without the flag the
//! annotation changes nothing.

use crate::common::nodes::get_pod;
use crate::common::*;
use crate::e2e_nodelifecycle::{
    condition, deleted, node, running_pod, taint_keys, unreachable_for, TwoNodes,
};
use edgekcm::api::client::PatchType;
use edgekcm::api::resources::NODES;
use serde_json::json;
use std::time::{Duration, Instant};

const UNREACHABLE_NO_EXECUTE: &str = "node.kubernetes.io/unreachable:NoExecute";

/// Two nodes, the second annotated; a pod on it evicted at once by an unreachable taint.
/// Returns the setup and the manager, started with `extra` flags.
fn setup(t: &Target, tag: &str, extra: &[&str]) -> (TwoNodes, Kcm) {
    let two = TwoNodes::new(t, "e2e-auto", ["base", "auto"]);
    let admin = &two.ns.admin;
    let patch = json!({"metadata": {"annotations": {"node.edgekcm.io/autonomy": "true"}}});
    admin
        .patch(&NODES, None, &two.names[1], PatchType::Merge, &patch, None)
        .expect("annotate");
    running_pod(
        admin,
        &two.ns.name,
        "app",
        &two.names[1],
        unreachable_for(Some(0)),
    );
    let mut f = vec![
        "--controllers=node-lifecycle-controller,taint-eviction-controller",
        "--node-monitor-period=1s",
        "--node-monitor-grace-period=4s",
        "--node-eviction-rate=10",
    ];
    f.extend_from_slice(extra);
    let kcm = Kcm::start(t, tag, &f);
    std::thread::sleep(Duration::from_secs(6));
    (two, kcm)
}

fn unknown(two: &TwoNodes, name: &str) -> bool {
    condition(&node(&two.ns.admin, name), "Ready").is_some_and(|c| c["status"] == "Unknown")
}

/// In the window: Unknown, but no unreachable taint and the pod still there and ready; after
/// it, tainted and the pod evicted.
fn scenario_autonomous_node_keeps_its_pods(t: &Target) {
    let (two, _kcm) = setup(t, "auto-on", &["--node-autonomy-duration=15s"]);
    let (admin, ns, auto) = (&two.ns.admin, two.ns.name.as_str(), two.names[1].clone());
    two.beats.stop(&auto);
    let stopped = Instant::now();
    eventually(Duration::from_secs(20), "Ready Unknown", || {
        unknown(&two, &auto).then_some(())
    });
    // Until 4 s grace + 15 s window from the last renewal, less a margin for the passes.
    while stopped.elapsed() < Duration::from_secs(16) {
        let keys = taint_keys(&node(admin, &auto));
        assert!(
            !keys
                .iter()
                .any(|k| k.starts_with("node.kubernetes.io/unreachable")),
            "tainted in the window: {keys:?}"
        );
        let pod = get_pod(admin, ns, "app").expect("pod left alone");
        assert!(
            pod["metadata"]["deletionTimestamp"].is_null(),
            "not evicted"
        );
        assert_eq!(
            condition(&pod, "Ready").expect("Ready")["status"],
            "True",
            "pod left ready"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eventually(
        Duration::from_secs(20),
        "unreachable taint after the window",
        || {
            taint_keys(&node(admin, &auto))
                .iter()
                .any(|k| k == UNREACHABLE_NO_EXECUTE)
                .then_some(())
        },
    );
    eventually(
        Duration::from_secs(20),
        "pod evicted after the window",
        || deleted(admin, ns, "app").map(|_| ()),
    );
    assert!(taint_keys(&node(admin, &two.names[0])).is_empty());
}

/// The annotation without the flag: upstream's behaviour, tainted and evicted at once.
fn scenario_annotation_alone_changes_nothing(t: &Target) {
    let (two, _kcm) = setup(t, "auto-off", &[]);
    let (admin, ns, auto) = (&two.ns.admin, two.ns.name.as_str(), two.names[1].clone());
    two.beats.stop(&auto);
    let stopped = Instant::now();
    eventually(Duration::from_secs(20), "unreachable taint", || {
        taint_keys(&node(admin, &auto))
            .iter()
            .any(|k| k == UNREACHABLE_NO_EXECUTE)
            .then_some(())
    });
    eventually(Duration::from_secs(20), "pod evicted", || {
        deleted(admin, ns, "app").map(|_| ())
    });
    assert!(stopped.elapsed() < Duration::from_secs(15), "no window");
}

scenarios! {
    autonomous_node_keeps_its_pods => scenario_autonomous_node_keeps_its_pods,
    annotation_alone_changes_nothing => scenario_annotation_alone_changes_nothing,
}
