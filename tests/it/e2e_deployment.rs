//! deployment-controller scenarios (with the replicaset-controller making the pods), against
//! the sandbox always and a real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`). On a
//! real cluster edgekcm needs `--use-service-account-credentials=true` in `KCM_E2E_KCM_ARGS`
//! (the controller-manager identity itself may not write ReplicaSets or pods). Pods stay
//! Pending there (no scheduler or kubelet); the tests play kubelet by writing Ready through
//! `pods/status`.

use crate::common::*;
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{Kind, DEPLOYMENTS, EVENTS, PODS, REPLICASETS, RESOURCEQUOTAS};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const CONTROLLERS: &str = "--controllers=deployment-controller,replicaset-controller";
const REVISION: &str = "deployment.kubernetes.io/revision";

fn start(t: &Target, tag: &str) -> Kcm {
    start_with(t, tag, CONTROLLERS)
}

/// A fresh namespace, deleted (with what the test left in it) on drop.
fn new_ns(t: &Target, prefix: &str) -> Ns {
    Ns::with_cleanup(t, prefix, &[DEPLOYMENTS, REPLICASETS, PODS])
}

fn template(image: &str) -> Value {
    json!({"metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": image}]}})
}

fn deployment(name: &str, replicas: i64, image: &str, strategy: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": template(image), "strategy": strategy}})
}

fn rolling(surge: Value, unavailable: Value) -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
}

fn list(admin: &Client, kind: &Kind, ns: &str) -> Vec<Value> {
    admin
        .list(kind, Some(ns), &ListOptions::default())
        .expect("list")
        .items
}

fn get(admin: &Client, kind: &Kind, ns: &str, name: &str) -> Value {
    admin.get(kind, Some(ns), name).expect("get")
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn name_of(v: &Value) -> String {
    v["metadata"]["name"].as_str().unwrap_or("").to_string()
}

fn controller_uid(o: &Value) -> Option<String> {
    edgekcm::obj::controller_ref(o).map(|r| r.uid.to_string())
}

/// ReplicaSets controlled by the Deployment `uid`, oldest revision first.
fn replica_sets(admin: &Client, ns: &str, uid: &str) -> Vec<Value> {
    let mut v: Vec<Value> = list(admin, &REPLICASETS, ns)
        .into_iter()
        .filter(|r| controller_uid(r).as_deref() == Some(uid))
        .collect();
    v.sort_by_key(|r| {
        r["metadata"]["annotations"][REVISION]
            .as_str()
            .and_then(|s| s.parse::<i64>().ok())
            .unwrap_or(0)
    });
    v
}

fn condition<'a>(o: &'a Value, t: &str) -> Option<&'a Value> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

/// Wait until the Deployment's status (observed at its generation) satisfies `f`.
fn wait_deployment(
    admin: &Client,
    ns: &str,
    name: &str,
    what: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    eventually(LIMIT, what, || {
        let d = get(admin, &DEPLOYMENTS, ns, name);
        (d["status"]["observedGeneration"] == d["metadata"]["generation"] && f(&d)).then_some(d)
    })
}

/// Complete at `replicas`: all updated, ready, available, Progressing NewReplicaSetAvailable.
fn complete(d: &Value, replicas: i64) -> bool {
    let s = &d["status"];
    int(&s["replicas"]) == replicas
        && int(&s["updatedReplicas"]) == replicas
        && int(&s["readyReplicas"]) == replicas
        && int(&s["availableReplicas"]) == replicas
        && int(&s["unavailableReplicas"]) == 0
        && condition(d, "Available").is_some_and(|c| c["status"] == "True")
        && condition(d, "Progressing").is_some_and(|c| c["reason"] == "NewReplicaSetAvailable")
}

fn update_deployment(admin: &Client, ns: &str, name: &str, f: impl Fn(&mut Value)) {
    eventually(LIMIT, "deployment update", || {
        let mut d = get(admin, &DEPLOYMENTS, ns, name);
        f(&mut d);
        admin.update(&DEPLOYMENTS, &d).ok()
    });
}

fn is_ready(p: &Value) -> bool {
    p["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn set_ready(admin: &Client, p: &Value) -> bool {
    let mut p = p.clone();
    let since = "2024-01-01T00:00:00Z";
    p["status"]["phase"] = json!("Running");
    p["status"]["conditions"] = json!([
        {"type": "Ready", "status": "True", "lastTransitionTime": since},
        {"type": "ContainersReady", "status": "True", "lastTransitionTime": since},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": since},
    ]);
    admin.update_subresource(&PODS, &p, "status").is_ok()
}

/// The test's kubelet: every pod of the namespace becomes Ready soon after it appears. It
/// records the most pods (not being deleted) it ever saw at once.
struct Kubelet {
    stop: Arc<AtomicBool>,
    max_pods: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Kubelet {
    fn start(admin: &Client, ns: &str) -> Kubelet {
        let (stop, max_pods) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (s, m, admin, ns) = (
            stop.clone(),
            max_pods.clone(),
            admin.clone(),
            ns.to_string(),
        );
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if let Ok(l) = admin.list(&PODS, Some(&ns), &ListOptions::default()) {
                    let live: Vec<&Value> = l
                        .items
                        .iter()
                        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                        .collect();
                    m.fetch_max(live.len(), Ordering::SeqCst);
                    for p in live.into_iter().filter(|p| !is_ready(p)) {
                        set_ready(&admin, p);
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Kubelet {
            stop,
            max_pods,
            thread: Some(thread),
        }
    }

    fn max_pods(&self) -> usize {
        self.max_pods.load(Ordering::SeqCst)
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// ScalingReplicaSet messages about Deployment `name`, checking the Events' source.
fn scaling_events(admin: &Client, ns: &str, name: &str) -> Vec<String> {
    list(admin, &EVENTS, ns)
        .into_iter()
        .filter(|e| {
            e["involvedObject"]["name"] == name
                && e["involvedObject"]["kind"] == "Deployment"
                && e["reason"] == "ScalingReplicaSet"
        })
        .map(|e| {
            assert_eq!(e["source"]["component"], "deployment-controller");
            assert_eq!(e["type"], "Normal");
            e["message"].as_str().unwrap_or("").to_string()
        })
        .collect()
}

fn wait_event(admin: &Client, ns: &str, name: &str, message: &str) {
    eventually(LIMIT, &format!("event {message:?}"), || {
        scaling_events(admin, ns, name)
            .iter()
            .any(|m| m == message)
            .then_some(())
    });
}

fn scenario_create_scale(t: &Target) {
    let _kcm = start(t, "deploy-scale");
    let ns = new_ns(t, "e2e-deploy");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kubelet = Kubelet::start(admin, n);
    let d = admin
        .create(
            &DEPLOYMENTS,
            Some(n),
            &deployment("web", 3, "registry.k8s.io/pause:3.9", json!({})),
        )
        .expect("create deployment");
    let uid = d["metadata"]["uid"].as_str().expect("uid").to_string();

    let d = wait_deployment(admin, n, "web", "3 replicas complete", |d| complete(d, 3));
    assert_eq!(d["metadata"]["annotations"][REVISION], "1");
    let rss = replica_sets(admin, n, &uid);
    assert_eq!(rss.len(), 1);
    let rs = &rss[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .expect("hash label")
        .to_string();
    assert_eq!(name_of(rs), format!("web-{hash}"));
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash.as_str()
    );
    assert_eq!(
        rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"],
        hash.as_str()
    );
    assert_eq!(rs["metadata"]["annotations"][REVISION], "1");
    assert_eq!(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"],
        "3"
    );
    assert_eq!(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/max-replicas"],
        "4"
    );
    let owner = &rs["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["name"].as_str()),
        (Some("Deployment"), Some("web"))
    );
    assert_eq!(owner["blockOwnerDeletion"], true);
    let p = condition(&d, "Progressing").expect("progressing");
    assert_eq!(
        p["message"],
        format!("ReplicaSet \"web-{hash}\" has successfully progressed.")
    );
    let rs_name = format!("web-{hash}");
    wait_event(
        admin,
        n,
        "web",
        &format!("Scaled up replica set {rs_name} from 0 to 3"),
    );

    update_deployment(admin, n, "web", |d| d["spec"]["replicas"] = json!(5));
    wait_deployment(admin, n, "web", "5 replicas complete", |d| complete(d, 5));
    wait_event(
        admin,
        n,
        "web",
        &format!("Scaled up replica set {rs_name} from 3 to 5"),
    );
    update_deployment(admin, n, "web", |d| d["spec"]["replicas"] = json!(2));
    wait_deployment(admin, n, "web", "2 replicas complete", |d| complete(d, 2));
    wait_event(
        admin,
        n,
        "web",
        &format!("Scaled down replica set {rs_name} from 5 to 2"),
    );
    assert_eq!(
        replica_sets(admin, n, &uid).len(),
        1,
        "scaling never makes a new ReplicaSet"
    );
    let rs = get(admin, &REPLICASETS, n, &rs_name);
    assert_eq!(rs["spec"]["replicas"], 2);
    assert_eq!(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"],
        "2"
    );
}

fn scenario_rolling_update(t: &Target) {
    let _kcm = start(t, "deploy-rolling");
    let ns = new_ns(t, "e2e-deploy-roll");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let kubelet = Kubelet::start(admin, n);
    let mut d = deployment(
        "web",
        3,
        "registry.k8s.io/pause:3.8",
        rolling(json!(1), json!(0)),
    );
    d["spec"]["revisionHistoryLimit"] = json!(1);
    let d = admin.create(&DEPLOYMENTS, Some(n), &d).expect("create");
    let uid = d["metadata"]["uid"].as_str().expect("uid").to_string();
    wait_deployment(admin, n, "web", "A complete", |d| complete(d, 3));
    let a = name_of(&replica_sets(admin, n, &uid)[0]);

    // A -> B.
    update_deployment(admin, n, "web", |d| {
        d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("registry.k8s.io/pause:3.9")
    });
    let d = wait_deployment(admin, n, "web", "B complete", |d| {
        complete(d, 3) && d["metadata"]["annotations"][REVISION] == "2"
    });
    assert_eq!(int(&d["status"]["replicas"]), 3);
    let rss = replica_sets(admin, n, &uid);
    assert_eq!(rss.len(), 2);
    assert_eq!(name_of(&rss[0]), a);
    assert_eq!(
        rss[0]["spec"]["replicas"], 0,
        "the old ReplicaSet is scaled to 0"
    );
    let b = name_of(&rss[1]);
    assert_eq!(rss[1]["metadata"]["annotations"][REVISION], "2");
    // Surge 1, unavailable 0: one pod at a time.
    wait_event(
        admin,
        n,
        "web",
        &format!("Scaled up replica set {b} from 0 to 1"),
    );
    wait_event(
        admin,
        n,
        "web",
        &format!("Scaled down replica set {a} from 3 to 2"),
    );
    wait_event(
        admin,
        n,
        "web",
        &format!("Scaled up replica set {b} from 1 to 2"),
    );
    wait_event(
        admin,
        n,
        "web",
        &format!("Scaled down replica set {a} from 1 to 0"),
    );

    // B -> C: with revisionHistoryLimit 1, A is pruned once C is complete.
    update_deployment(admin, n, "web", |d| {
        d["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("registry.k8s.io/pause:3.10")
    });
    wait_deployment(admin, n, "web", "C complete", |d| {
        complete(d, 3) && d["metadata"]["annotations"][REVISION] == "3"
    });
    let rss = eventually(LIMIT, "A pruned", || {
        let rss = replica_sets(admin, n, &uid);
        (rss.len() == 2).then_some(rss)
    });
    assert_eq!(name_of(&rss[0]), b);
    assert_eq!(rss[0]["spec"]["replicas"], 0);
    assert_eq!(rss[1]["metadata"]["annotations"][REVISION], "3");
    assert!(admin.get(&REPLICASETS, Some(n), &a).is_err(), "A deleted");
    let most = kubelet.max_pods();
    assert!(
        most <= 4,
        "at most replicas + maxSurge pods at once, saw {most}"
    );
}

fn scenario_recreate(t: &Target) {
    let _kcm = start(t, "deploy-recreate");
    let ns = new_ns(t, "e2e-deploy-recreate");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kubelet = Kubelet::start(admin, n);
    let d = deployment(
        "web",
        2,
        "registry.k8s.io/pause:3.8",
        json!({"type": "Recreate"}),
    );
    let d = admin.create(&DEPLOYMENTS, Some(n), &d).expect("create");
    let uid = d["metadata"]["uid"].as_str().expect("uid").to_string();
    wait_deployment(admin, n, "web", "first version complete", |d| {
        complete(d, 2)
    });
    let old = replica_sets(admin, n, &uid)[0].clone();
    let old_uid = old["metadata"]["uid"].as_str().expect("uid").to_string();

    update_deployment(admin, n, "web", |d| {
        d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("registry.k8s.io/pause:3.9")
    });
    // Old and new pods never run side by side.
    let mut mixed = false;
    eventually(LIMIT, "second version complete", || {
        let pods = list(admin, &PODS, n);
        let owners: Vec<Option<String>> = pods
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .map(controller_uid)
            .collect();
        let olds = owners
            .iter()
            .filter(|o| o.as_deref() == Some(&old_uid))
            .count();
        mixed |= olds > 0 && olds < owners.len();
        let d = get(admin, &DEPLOYMENTS, n, "web");
        (d["metadata"]["annotations"][REVISION] == "2" && complete(&d, 2)).then_some(())
    });
    assert!(!mixed, "old and new pods existed together");
    let rss = replica_sets(admin, n, &uid);
    assert_eq!(rss.len(), 2);
    assert_eq!(rss[0]["spec"]["replicas"], 0);
    let new = name_of(&rss[1]);
    wait_event(
        admin,
        n,
        "web",
        &format!("Scaled down replica set {} from 2 to 0", name_of(&old)),
    );
    wait_event(
        admin,
        n,
        "web",
        &format!("Scaled up replica set {new} from 0 to 2"),
    );
}

fn scenario_paused(t: &Target) {
    let _kcm = start(t, "deploy-paused");
    let ns = new_ns(t, "e2e-deploy-paused");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kubelet = Kubelet::start(admin, n);
    let d = deployment(
        "web",
        2,
        "registry.k8s.io/pause:3.8",
        rolling(json!(1), json!(0)),
    );
    let d = admin.create(&DEPLOYMENTS, Some(n), &d).expect("create");
    let uid = d["metadata"]["uid"].as_str().expect("uid").to_string();
    wait_deployment(admin, n, "web", "complete", |d| complete(d, 2));
    let first = name_of(&replica_sets(admin, n, &uid)[0]);

    // Paused: a template change rolls nothing out.
    update_deployment(admin, n, "web", |d| {
        d["spec"]["paused"] = json!(true);
        d["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("registry.k8s.io/pause:3.9");
    });
    let d = wait_deployment(admin, n, "web", "DeploymentPaused", |d| {
        condition(d, "Progressing").is_some_and(|c| c["reason"] == "DeploymentPaused")
    });
    let p = condition(&d, "Progressing").expect("p");
    assert_eq!(
        (p["status"].as_str(), p["message"].as_str()),
        (Some("Unknown"), Some("Deployment is paused"))
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        replica_sets(admin, n, &uid).len(),
        1,
        "no rollout while paused"
    );
    // Scaling still applies.
    update_deployment(admin, n, "web", |d| d["spec"]["replicas"] = json!(3));
    eventually(LIMIT, "scaled while paused", || {
        let rs = get(admin, &REPLICASETS, n, &first);
        (rs["spec"]["replicas"] == 3).then_some(())
    });
    wait_event(
        admin,
        n,
        "web",
        &format!("Scaled up replica set {first} from 2 to 3"),
    );
    assert_eq!(replica_sets(admin, n, &uid).len(), 1);

    // Resumed: the rollout happens.
    update_deployment(admin, n, "web", |d| d["spec"]["paused"] = json!(false));
    wait_deployment(admin, n, "web", "resumed rollout complete", |d| {
        complete(d, 3) && d["metadata"]["annotations"][REVISION] == "2"
    });
    let rss = replica_sets(admin, n, &uid);
    assert_eq!(rss.len(), 2);
    assert_eq!(rss[0]["spec"]["replicas"], 0);
}

fn scenario_progress_deadline(t: &Target) {
    let _kcm = start(t, "deploy-deadline");
    let ns = new_ns(t, "e2e-deploy-deadline");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    // No kubelet: the pods never become ready.
    let mut d = deployment("web", 2, "registry.k8s.io/pause:3.9", json!({}));
    d["spec"]["progressDeadlineSeconds"] = json!(3);
    admin.create(&DEPLOYMENTS, Some(n), &d).expect("create");
    let d = wait_deployment(admin, n, "web", "ProgressDeadlineExceeded", |d| {
        condition(d, "Progressing").is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded")
    });
    let p = condition(&d, "Progressing").expect("p");
    assert_eq!(p["status"], "False");
    let rs = &replica_sets(admin, n, d["metadata"]["uid"].as_str().expect("uid"))[0];
    assert_eq!(
        p["message"],
        format!("ReplicaSet \"{}\" has timed out progressing.", name_of(rs))
    );
    let a = condition(&d, "Available").expect("available");
    assert_eq!(
        (a["status"].as_str(), a["reason"].as_str()),
        (Some("False"), Some("MinimumReplicasUnavailable"))
    );
    assert_eq!(int(&d["status"]["unavailableReplicas"]), 2);
}

/// A ReplicaSet made before (by another controller manager, with its own hash value) is
/// adopted and kept as the new one: switching managers rolls nothing out.
fn scenario_adopt_existing(t: &Target) {
    let ns = new_ns(t, "e2e-deploy-adopt");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let d = admin
        .create(
            &DEPLOYMENTS,
            Some(n),
            &deployment("web", 2, "registry.k8s.io/pause:3.9", json!({})),
        )
        .expect("create");
    let uid = d["metadata"]["uid"].as_str().expect("uid").to_string();
    let mut tpl = d["spec"]["template"].clone();
    tpl["metadata"]["labels"]["pod-template-hash"] = json!("5d4f7b9c8");
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-5d4f7b9c8",
            "labels": {"app": "web", "pod-template-hash": "5d4f7b9c8"},
            "annotations": {REVISION: "4"}},
        "spec": {"replicas": 2,
            "selector": {"matchLabels": {"app": "web", "pod-template-hash": "5d4f7b9c8"}},
            "template": tpl}});
    let rs = admin.create(&REPLICASETS, Some(n), &rs).expect("create rs");
    let _kcm = start(t, "deploy-adopt");
    let _kubelet = Kubelet::start(admin, n);
    let d = wait_deployment(
        admin,
        n,
        "web",
        "complete with the adopted ReplicaSet",
        |d| complete(d, 2),
    );
    assert_eq!(d["metadata"]["annotations"][REVISION], "4");
    let rss = replica_sets(admin, n, &uid);
    assert_eq!(rss.len(), 1, "no new ReplicaSet");
    assert_eq!(rss[0]["metadata"]["uid"], rs["metadata"]["uid"]);
    assert_eq!(
        rss[0]["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
        true
    );
    assert!(scaling_events(admin, n, "web").is_empty());
}

/// A new ReplicaSet that cannot be created: Progressing False ReplicaSetCreateError and a
/// Warning Event. On the sandbox the creation is refused a few times, then the rollout goes
/// on; on a real cluster the Deployment's name is so long that its ReplicaSet's name is
/// invalid (a lasting error, as upstream meets it).
fn scenario_create_error(t: &Target) {
    let ns = new_ns(t, "e2e-deploy-rserr");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let name = match t.sandbox() {
        Some(sb) => {
            // Refused several times (the reports back off in between, about a second).
            sb.faults()
                .fail_next(8, 403, Some(&format!("/namespaces/{n}/replicasets")));
            "web".to_string()
        }
        None => {
            // A quota of no ReplicaSets (its status written here: the resourcequota
            // controller is not running): admission refuses every creation until it goes.
            // (Before v1.34 an over-long name did it; names are now cut to fit.)
            let q = json!({"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": "no-rs"},
                "spec": {"hard": {"count/replicasets.apps": "0"}}});
            let mut q = admin
                .create(&RESOURCEQUOTAS, Some(n), &q)
                .expect("create quota");
            q["status"] = json!({"hard": {"count/replicasets.apps": "0"},
                "used": {"count/replicasets.apps": "0"}});
            admin
                .update_subresource(&RESOURCEQUOTAS, &q, "status")
                .expect("quota status");
            "web".to_string()
        }
    };
    let _kcm = start(t, "deploy-rserr");
    let _kubelet = Kubelet::start(admin, n);
    admin
        .create(
            &DEPLOYMENTS,
            Some(n),
            &deployment(&name, 1, "registry.k8s.io/pause:3.9", json!({})),
        )
        .expect("create");
    // (No pass gets as far as observing the generation while the creation fails.)
    let d = eventually(LIMIT, "ReplicaSetCreateError", || {
        let d = get(admin, &DEPLOYMENTS, n, &name);
        condition(&d, "Progressing")
            .is_some_and(|c| c["reason"] == "ReplicaSetCreateError")
            .then_some(d)
    });
    let p = condition(&d, "Progressing").expect("p");
    assert_eq!(p["status"], "False");
    let msg = p["message"].as_str().unwrap_or("").to_string();
    assert!(
        msg.starts_with(&format!("Failed to create new replica set \"{name}-")),
        "{msg}"
    );
    let warn = eventually(LIMIT, "a ReplicaSetCreateError event", || {
        list(admin, &EVENTS, n)
            .into_iter()
            .find(|e| e["reason"] == "ReplicaSetCreateError")
    });
    assert_eq!(warn["type"], "Warning");
    assert_eq!(warn["message"], msg.as_str());
    assert_eq!(warn["source"]["component"], "deployment-controller");
    assert_eq!(warn["involvedObject"]["name"], name.as_str());
    if t.is_real() {
        assert!(msg.contains("forbidden"), "{msg}");
        admin
            .delete(&RESOURCEQUOTAS, Some(n), "no-rs", &Default::default())
            .expect("delete quota");
    }
    wait_deployment(admin, n, &name, "complete after all", |d| complete(d, 1));
}

/// The benchmark's shape: many Deployments at once (`DEPLOY_BENCH_N`, default 300) of 5
/// replicas in one namespace. Prints how long until every pod exists and every Deployment
/// reports its 5 replicas; never fails on the numbers. `cargo test --release --test
/// e2e_deployment -- --ignored --nocapture`.
fn scenario_many(t: &Target) {
    let n_deploy: usize = std::env::var("DEPLOY_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut kcm = start(t, "deploy-many");
    let ns = new_ns(t, "e2e-deploy-many");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let t0 = std::time::Instant::now();
    for i in 0..n_deploy {
        let mut d = deployment(&format!("d{i}"), 5, "registry.k8s.io/pause:3.9", json!({}));
        d["spec"]["selector"]["matchLabels"]["app"] = json!(format!("d{i}"));
        d["spec"]["template"]["metadata"]["labels"]["app"] = json!(format!("d{i}"));
        admin.create(&DEPLOYMENTS, Some(n), &d).expect("create");
    }
    let created = t0.elapsed();
    // Poll slowly: listing thousands of pods is itself work for the API server.
    let wait = |what: &str, f: &dyn Fn() -> bool| {
        let end = std::time::Instant::now() + Duration::from_secs(600);
        while !f() {
            assert!(
                std::time::Instant::now() < end,
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        t0.elapsed()
    };
    let rss = wait("all ReplicaSets", &|| {
        list(admin, &REPLICASETS, n).len() == n_deploy
    });
    let pods = wait("all pods", &|| list(admin, &PODS, n).len() == n_deploy * 5);
    wait("all deployments report 5 replicas", &|| {
        list(admin, &DEPLOYMENTS, n).iter().all(|d| {
            int(&d["status"]["replicas"]) == 5 && int(&d["status"]["updatedReplicas"]) == 5
        })
    });
    let status = t0.elapsed();
    let log = kcm.log_text();
    let count = |s: &str| log.lines().filter(|l| l.contains(s)).count();
    eprintln!(
        "{n_deploy} deployments x 5: created in {created:?}, all ReplicaSets at {rss:?}, all pods at {pods:?}, all status at {status:?}; \
         deployment-controller writes: {} ReplicaSet creates, {} status updates, {} patches",
        count("deployment-controller: created replicasets"),
        count("deployment-controller: updated deployments.apps"),
        count("deployment-controller: patched"),
    );
    kcm.kill();
}

#[test]
#[ignore]
fn sandbox_deployment_many() {
    scenario_many(&sandbox());
}

// Each scenario runs on the sandbox (`sandbox_scenarios::<name>`) and, with `just e2e`,
// on a real kube-apiserver (`real_scenarios::<name>`).
/// The test's finalizer on the template's pods: deleted pods stay terminating until released.
const HOLD: &str = "e2e.edgekcm.io/hold";

/// v1.33+ (beta and on from v1.35, DeploymentReplicaSetTerminatingReplicas): the Deployment
/// sums its ReplicaSets' `terminatingReplicas` (0 written, not omitted). And v1.34+: a
/// Deployment name too long for `<name>-<hash>` is cut so the ReplicaSet name fits 253.
fn scenario_terminating_and_long_name(t: &Target) {
    let _kcm = start(t, "deploy-terminating");
    let ns = new_ns(t, "e2e-deploy-term");
    let admin = &ns.admin;
    let n = ns.name.as_str();
    let _gone = crate::common::nodes::PodsGone {
        admin: admin.clone(),
        ns: n.to_string(),
    };
    let mut d = deployment(
        "held",
        2,
        "registry.k8s.io/pause:3.9",
        rolling(json!(1), json!(0)),
    );
    d["spec"]["template"]["metadata"]["finalizers"] = json!([HOLD]);
    let d = admin.create(&DEPLOYMENTS, Some(n), &d).expect("create");
    let uid = d["metadata"]["uid"].as_str().expect("uid").to_string();
    // Counted since v1.35 (DeploymentReplicaSetTerminatingReplicas on); before, never written.
    let counts = t.at_least(35, "status.terminatingReplicas");
    let term = |v: &Value, n: i64| if counts { *v == json!(n) } else { v.is_null() };
    wait_deployment(admin, n, "held", "2 replicas, 0 terminating", |d| {
        int(&d["status"]["replicas"]) == 2 && term(&d["status"]["terminatingReplicas"], 0)
    });
    update_deployment(admin, n, "held", |d| d["spec"]["replicas"] = json!(1));
    let d = wait_deployment(admin, n, "held", "1 replica, 1 terminating", |d| {
        int(&d["status"]["replicas"]) == 1 && term(&d["status"]["terminatingReplicas"], 1)
    });
    let rs = &replica_sets(admin, n, &uid)[0];
    assert!(
        term(&rs["status"]["terminatingReplicas"], 1),
        "{}",
        rs["status"]
    );
    assert_eq!(int(&d["status"]["updatedReplicas"]), 1);
    for p in list(admin, &PODS, n) {
        if !p["metadata"]["deletionTimestamp"].is_null() {
            crate::common::nodes::release(admin, n, &name_of(&p));
        }
    }
    wait_deployment(admin, n, "held", "0 terminating again", |d| {
        int(&d["status"]["replicas"]) == 1 && term(&d["status"]["terminatingReplicas"], 0)
    });

    let long = "l".repeat(250);
    let mut d = deployment(
        &long,
        1,
        "registry.k8s.io/pause:3.9",
        rolling(json!(1), json!(0)),
    );
    d["spec"]["selector"]["matchLabels"]["app"] = json!("long");
    d["spec"]["template"]["metadata"]["labels"]["app"] = json!("long");
    let d = admin
        .create(&DEPLOYMENTS, Some(n), &d)
        .expect("create long");
    let luid = d["metadata"]["uid"].as_str().expect("uid").to_string();
    let rs = eventually(LIMIT, "the long-named Deployment's ReplicaSet", || {
        replica_sets(admin, n, &luid).into_iter().next()
    });
    let name = name_of(&rs);
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .expect("hash")
        .to_string();
    assert_eq!(name.len(), 253, "{name}");
    assert_eq!(
        name,
        format!("{}-{hash}", &long[..252 - hash.len()]),
        "the Deployment's name is cut, the hash kept"
    );
}

scenarios! {
    deployment_create_scale => scenario_create_scale,
    deployment_rolling_update => scenario_rolling_update,
    deployment_recreate => scenario_recreate,
    deployment_paused => scenario_paused,
    deployment_progress_deadline => scenario_progress_deadline,
    deployment_adopt_existing => scenario_adopt_existing,
    deployment_create_error => scenario_create_error,
    deployment_terminating_and_long_name => scenario_terminating_and_long_name,
}
