//! disruption-controller scenarios, against the sandbox always and a real kube-apiserver with
//! `KCM_E2E_KUBECONFIG` (`real_*`). The tests play the kubelet (pod readiness) and create the
//! workloads themselves: only the disruption controller runs, so Deployments, ReplicaSets and
//! StatefulSets are read, never acted on.

use crate::common::nodes::get_pod;
use crate::common::*;
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{
    CONFIGMAPS, DEPLOYMENTS, EVENTS, PODDISRUPTIONBUDGETS, PODS, REPLICASETS, STATEFULSETS,
};
use edgekcm::api::Kind;
use serde_json::{json, Value};
use std::time::Duration;

const CONTROLLERS: &str = "--controllers=disruption-controller";
const LIMIT: Duration = Duration::from_secs(30);

fn template(labels: &Value) -> Value {
    json!({"metadata": {"labels": labels},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}})
}

fn create(admin: &Client, kind: Kind, ns: &str, o: Value) -> Value {
    admin
        .create(&kind, Some(ns), &o)
        .unwrap_or_else(|e| panic!("create {}: {e}", kind.plural))
}

fn workload(
    admin: &Client,
    kind: Kind,
    ns: &str,
    name: &str,
    replicas: i64,
    owner: Option<&Value>,
) -> Value {
    let labels = json!({"app": "web", "tier": name});
    let mut o = json!({"apiVersion": kind.api_version(), "kind": kind.kind,
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
            "template": template(&labels)}});
    if kind == STATEFULSETS {
        o["spec"]["serviceName"] = json!(name);
    }
    if let Some(owner) = owner {
        o["metadata"]["ownerReferences"] = json!([controller_ref(owner)]);
    }
    create(admin, kind, ns, o)
}

fn controller_ref(owner: &Value) -> Value {
    json!({"apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"], "controller": true})
}

/// A pod labelled `app: web`, controlled by `owner` (apiVersion, kind, name, uid), Ready or not.
fn pod(admin: &Client, ns: &str, name: &str, owner: Option<Value>, ready: bool) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}});
    if let Some(r) = owner {
        p["metadata"]["ownerReferences"] = json!([r]);
    }
    create(admin, PODS, ns, p);
    set_ready(admin, ns, name, ready)
}

/// Play kubelet: Running, Ready or not.
fn set_ready(admin: &Client, ns: &str, name: &str, ready: bool) -> Value {
    let mut p = admin.get(&PODS, Some(ns), name).expect("get pod");
    p["status"]["phase"] = json!("Running");
    p["status"]["conditions"] = json!([{"type": "Ready", "status": if ready { "True" } else { "False" },
        "lastTransitionTime": "2024-01-01T00:00:00Z"}]);
    admin
        .update_subresource(&PODS, &p, "status")
        .expect("pod status")
}

fn budget(admin: &Client, ns: &str, name: &str, spec: Value) -> Value {
    create(
        admin,
        PODDISRUPTIONBUDGETS,
        ns,
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name}, "spec": spec}),
    )
}

/// The budget's status once `f` accepts it.
fn wait_status(
    admin: &Client,
    ns: &str,
    name: &str,
    what: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    eventually(LIMIT, what, || {
        let b = admin.get(&PODDISRUPTIONBUDGETS, Some(ns), name).ok()?;
        f(&b["status"]).then(|| b["status"].clone())
    })
}

fn counts(s: &Value) -> [i64; 4] {
    [
        "currentHealthy",
        "desiredHealthy",
        "expectedPods",
        "disruptionsAllowed",
    ]
    .map(|f| s[f].as_i64().unwrap_or(-1))
}

fn allowed_condition(s: &Value) -> (String, String) {
    let c = s["conditions"]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["type"] == "DisruptionAllowed"))
        .cloned()
        .unwrap_or_default();
    (
        c["status"].as_str().unwrap_or("").to_string(),
        c["reason"].as_str().unwrap_or("").to_string(),
    )
}

fn events_with(admin: &Client, ns: &str, reason: &str) -> Vec<Value> {
    admin
        .list(&EVENTS, Some(ns), &ListOptions::default())
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

/// An integer minAvailable counts the selected pods; readiness moves currentHealthy and the
/// condition; an unselected pod does not count.
fn scenario_min_available_counts_ready_pods(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-pdb-min", &[PODS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "pdb-min", CONTROLLERS);
    for name in ["a", "b", "c"] {
        pod(admin, n, name, None, true);
    }
    let other = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "other", "labels": {"app": "db"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}});
    create(admin, PODS, n, other);
    set_ready(admin, n, "other", true);
    budget(
        admin,
        n,
        "web",
        json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}),
    );
    let s = wait_status(admin, n, "web", "1 disruption allowed", |s| {
        counts(s) == [3, 2, 3, 1]
    });
    assert_eq!(
        allowed_condition(&s),
        ("True".into(), "SufficientPods".into())
    );
    assert_eq!(s["observedGeneration"], 1);
    assert!(s.get("disruptedPods").is_none());

    set_ready(admin, n, "b", false);
    let s = wait_status(admin, n, "web", "no disruption allowed", |s| {
        counts(s) == [2, 2, 3, 0]
    });
    assert_eq!(
        allowed_condition(&s),
        ("False".into(), "InsufficientPods".into())
    );

    // A new generation is observed.
    let mut b = admin
        .get(&PODDISRUPTIONBUDGETS, Some(n), "web")
        .expect("pdb");
    b["spec"]["minAvailable"] = json!(1);
    admin.update(&PODDISRUPTIONBUDGETS, &b).expect("update pdb");
    let s = wait_status(admin, n, "web", "generation 2", |s| {
        s["observedGeneration"] == 2
    });
    assert_eq!(counts(&s), [2, 1, 3, 1]);
}

/// Percentages need the controllers' scale: a Deployment through its ReplicaSet, a
/// StatefulSet, and a Deployment controlling pods directly (read through its `scale`
/// subresource, as for any other kind).
fn scenario_percentages_use_the_controllers_scale(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-pdb-scale", &[PODS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let d = workload(admin, DEPLOYMENTS, n, "d", 4, None);
    let rs = workload(admin, REPLICASETS, n, "d-1", 4, Some(&d));
    let ss = workload(admin, STATEFULSETS, n, "s", 2, None);
    let direct = workload(admin, DEPLOYMENTS, n, "direct", 3, None);
    pod(admin, n, "d-1-a", Some(controller_ref(&rs)), true);
    pod(admin, n, "d-1-b", Some(controller_ref(&rs)), true);
    pod(admin, n, "s-0", Some(controller_ref(&ss)), true);
    pod(admin, n, "direct-a", Some(controller_ref(&direct)), true);
    let _kcm = start_with(t, "pdb-scale", CONTROLLERS);
    budget(
        admin,
        n,
        "min",
        json!({"minAvailable": "30%", "selector": {"matchLabels": {"app": "web"}}}),
    );
    budget(
        admin,
        n,
        "max",
        json!({"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "web"}}}),
    );
    // 4 + 2 + 3 expected; 30 % of 9 rounds up to 3.
    let s = wait_status(admin, n, "min", "min counted", |s| counts(s)[2] == 9);
    assert_eq!(counts(&s), [4, 3, 9, 1]);
    // 50 % of 9 rounds up to 5 unavailable: 4 must stay healthy.
    let s = wait_status(admin, n, "max", "max counted", |s| counts(s)[2] == 9);
    assert_eq!(counts(&s), [4, 4, 9, 0]);
    assert_eq!(
        allowed_condition(&s),
        ("False".into(), "InsufficientPods".into())
    );
    assert!(events_with(admin, n, "UnmanagedPods").is_empty());
}

/// A pod whose controller has no `scale` subresource: the count fails, the budget allows
/// nothing (`SyncFailed`) and says why in an Event. Pods without a controller are reported.
fn scenario_unknown_scale_fails_safe(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-pdb-fail", &[PODS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let cm = create(
        admin,
        CONFIGMAPS,
        n,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}),
    );
    let r = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": cm["metadata"]["uid"], "controller": true});
    pod(admin, n, "owned", Some(r), true);
    let _kcm = start_with(t, "pdb-fail", CONTROLLERS);
    budget(
        admin,
        n,
        "web",
        json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
    );
    let s = wait_status(admin, n, "web", "SyncFailed", |s| {
        allowed_condition(s).1 == "SyncFailed"
    });
    assert_eq!(s["disruptionsAllowed"], 0);
    assert_eq!(allowed_condition(&s).0, "False");
    let ev = eventually(LIMIT, "CalculateExpectedPodCountFailed", || {
        events_with(admin, n, "CalculateExpectedPodCountFailed").pop()
    });
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["involvedObject"]["kind"], "PodDisruptionBudget");
    assert_eq!(ev["source"]["component"], "controllermanager");
    assert_eq!(
        ev["message"],
        "Failed to calculate the number of expected pods: configmaps does not implement the scale subresource"
    );

    // Unmanaged pods instead: counted, with a Warning.
    budget(
        admin,
        n,
        "lonely",
        json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "lonely"}}}),
    );
    let p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "lonely", "labels": {"app": "lonely"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}});
    create(admin, PODS, n, p);
    let ev = eventually(LIMIT, "UnmanagedPods", || {
        events_with(admin, n, "UnmanagedPods").pop()
    });
    assert_eq!(ev["type"], "Warning");
    let s = wait_status(admin, n, "lonely", "lonely counted", |s| {
        !s["conditions"].is_null()
    });
    assert_eq!(counts(&s), [0, 0, 0, 0]);
    // No pod at all: a Normal NoPods.
    budget(
        admin,
        n,
        "empty",
        json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "none"}}}),
    );
    let ev = eventually(LIMIT, "NoPods", || events_with(admin, n, "NoPods").pop());
    assert_eq!(ev["type"], "Normal");
    assert_eq!(ev["message"], "No matching pods found");
}

/// A `DisruptionTarget=True` condition older than two minutes on a pod nobody deletes is set
/// False; the kubelet's is left alone.
fn scenario_stale_disruption_target_reset(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-pdb-stale", &[PODS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let long_ago =
        edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now() - Duration::from_secs(180));
    for (name, reason) in [
        ("evicted", "EvictionByEvictionAPI"),
        ("kubelet", "TerminationByKubelet"),
    ] {
        pod(admin, n, name, None, true);
        let mut p = admin.get(&PODS, Some(n), name).expect("pod");
        p["status"]["conditions"]
            .as_array_mut()
            .expect("conditions")
            .push(json!({
            "type": "DisruptionTarget", "status": "True", "reason": reason,
            "message": "Eviction API: evicting", "lastTransitionTime": long_ago}));
        admin
            .update_subresource(&PODS, &p, "status")
            .expect("pod status");
    }
    let _kcm = start_with(t, "pdb-stale", CONTROLLERS);
    let c = eventually(LIMIT, "DisruptionTarget reset", || {
        let p = get_pod(admin, n, "evicted")?;
        let c = p["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "DisruptionTarget")?
            .clone();
        (c["status"] == "False").then_some(c)
    });
    assert!(c.get("reason").is_none(), "{c}");
    assert!(c.get("message").is_none(), "{c}");
    assert_ne!(c["lastTransitionTime"], long_ago.as_str());
    let p = get_pod(admin, n, "evicted").expect("pod");
    // The pod's generation on the condition (PodObservedGenerationTracking, GA in 1.35); the
    // sandbox keeps no pod generation.
    if let Some(g) = p["metadata"]["generation"].as_i64() {
        assert_eq!(c["observedGeneration"], g, "{c}");
    }
    assert_eq!(p["status"]["conditions"][0]["type"], "Ready");
    std::thread::sleep(Duration::from_secs(2));
    let k = get_pod(admin, n, "kubelet").expect("pod");
    assert_eq!(k["status"]["conditions"][1]["status"], "True");
}

/// Through an apiserver restart: the status follows the pods' changes made after it, with
/// nothing left behind.
fn scenario_apiserver_restart(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-pdb-restart", &[PODS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    for name in ["a", "b"] {
        pod(admin, n, name, None, true);
    }
    budget(
        admin,
        n,
        "web",
        json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
    );
    let mut kcm = start_with(t, "pdb-restart", CONTROLLERS);
    wait_status(admin, n, "web", "1 disruption allowed", |s| {
        counts(s) == [2, 1, 2, 1]
    });
    match t.sandbox() {
        Some(sb) => {
            sb.stop_listening();
            std::thread::sleep(Duration::from_secs(3));
            sb.try_resume_listening().expect("listen again");
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
    set_ready(admin, n, "a", false);
    eventually(Duration::from_secs(60), "no disruption allowed", || {
        let b = admin.get(&PODDISRUPTIONBUDGETS, Some(n), "web").ok()?;
        (counts(&b["status"]) == [1, 1, 2, 0]).then_some(())
    });
    pod(admin, n, "c", None, true);
    wait_status(admin, n, "web", "a third pod", |s| {
        counts(s) == [2, 1, 3, 1]
    });
    assert!(kcm.exited().is_none(), "edgekcm kept running");
}

scenarios! {
    apiserver_restart => scenario_apiserver_restart,
    min_available_counts_ready_pods => scenario_min_available_counts_ready_pods,
    percentages_use_the_controllers_scale => scenario_percentages_use_the_controllers_scale,
    unknown_scale_fails_safe => scenario_unknown_scale_fails_safe,
    stale_disruption_target_reset => scenario_stale_disruption_target_reset,
}
