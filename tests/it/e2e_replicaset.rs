//! replicaset-controller and replicationcontroller-controller scenarios, against the sandbox
//! always and a real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`). On a real cluster
//! edgekcm needs `--use-service-account-credentials=true` in `KCM_E2E_KCM_ARGS` (the
//! controller-manager identity itself may not create pods). Pods stay Pending there (no
//! scheduler or kubelet); the tests play kubelet by writing Ready through `pods/status`.

use crate::common::*;
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{
    Kind, EVENTS, PODS, REPLICASETS, REPLICATIONCONTROLLERS, RESOURCEQUOTAS,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(30);
const CONTROLLERS: &str = "--controllers=replicaset-controller,replicationcontroller-controller";

fn start(t: &Target, tag: &str) -> Kcm {
    start_with(t, tag, CONTROLLERS)
}

/// A fresh namespace, deleted (with what the test left in it) on drop.
fn new_ns(t: &Target, prefix: &str) -> Ns {
    Ns::with_cleanup(
        t,
        prefix,
        &[REPLICASETS, REPLICATIONCONTROLLERS, PODS, RESOURCEQUOTAS],
    )
}

fn rs_object(kind: &Kind, name: &str, replicas: i64, app: &str) -> Value {
    let template = json!({
        "metadata": {"labels": {"app": app, "tier": "web"}, "annotations": {"note": "from-template"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}
    });
    if kind.kind == "ReplicaSet" {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}},
                "template": template}})
    } else {
        json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"app": app}, "template": template}})
    }
}

fn create(admin: &Client, kind: &Kind, ns: &str, obj: Value) -> Value {
    admin.create(kind, Some(ns), &obj).expect("create")
}

fn list(admin: &Client, kind: &Kind, ns: &str) -> Vec<Value> {
    admin
        .list(kind, Some(ns), &ListOptions::default())
        .expect("list")
        .items
}

fn controller_uid(p: &Value) -> Option<String> {
    edgekcm::obj::controller_ref(p).map(|r| r.uid.to_string())
}

/// Active pods controlled by `uid`.
fn owned(admin: &Client, ns: &str, uid: &str) -> Vec<Value> {
    list(admin, &PODS, ns)
        .into_iter()
        .filter(|p| controller_uid(p).as_deref() == Some(uid))
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

fn wait_owned(admin: &Client, ns: &str, uid: &str, n: usize) -> Vec<Value> {
    eventually(LIMIT, &format!("{n} pods owned by {uid}"), || {
        let pods = owned(admin, ns, uid);
        (pods.len() == n).then_some(pods)
    })
}

fn get(admin: &Client, kind: &Kind, ns: &str, name: &str) -> Value {
    admin.get(kind, Some(ns), name).expect("get")
}

/// Wait until the owner's status satisfies `f` (and is observed at its generation).
fn wait_status(
    admin: &Client,
    kind: &Kind,
    ns: &str,
    name: &str,
    what: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    eventually(LIMIT, what, || {
        let o = get(admin, kind, ns, name);
        let st = &o["status"];
        (st["observedGeneration"] == o["metadata"]["generation"] && f(st)).then_some(o)
    })
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn scale(admin: &Client, kind: &Kind, ns: &str, name: &str, replicas: i64) {
    eventually(LIMIT, "scale", || {
        let mut o = get(admin, kind, ns, name);
        o["spec"]["replicas"] = json!(replicas);
        admin.update(kind, &o).ok()
    });
}

/// Play kubelet: the pod runs and is Ready since `since`.
fn set_ready(admin: &Client, ns: &str, name: &str, since: &str) {
    eventually(LIMIT, "pod status update", || {
        let mut p = get(admin, &PODS, ns, name);
        p["status"]["phase"] = json!("Running");
        p["status"]["conditions"] = json!([
            {"type": "Ready", "status": "True", "lastTransitionTime": since},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": since},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": since},
        ]);
        admin.update_subresource(&PODS, &p, "status").ok()
    });
}

fn events_about(admin: &Client, ns: &str, name: &str) -> Vec<Value> {
    list(admin, &EVENTS, ns)
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .collect()
}

fn messages(events: &[Value], reason: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["reason"] == reason)
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

fn names(pods: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = pods
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    v.sort();
    v
}

fn scenario_create_scale(t: &Target) {
    let _kcm = start(t, "rs-scale");
    let ns = new_ns(t, "e2e-rs");
    let admin = &ns.admin;
    let n = ns.name.as_str();
    let rs = create(
        admin,
        &REPLICASETS,
        n,
        rs_object(&REPLICASETS, "web", 3, "web"),
    );
    let uid = rs["metadata"]["uid"].as_str().expect("uid").to_string();

    let pods = wait_owned(admin, n, &uid, 3);
    for p in &pods {
        let m = &p["metadata"];
        assert_eq!(m["generateName"], "web-");
        assert!(m["name"].as_str().is_some_and(|s| s.starts_with("web-")));
        assert_eq!(m["labels"], json!({"app": "web", "tier": "web"}));
        assert_eq!(m["annotations"]["note"], "from-template");
        let r = &m["ownerReferences"][0];
        assert_eq!(r["apiVersion"], "apps/v1");
        assert_eq!(r["kind"], "ReplicaSet");
        assert_eq!(r["name"], "web");
        assert_eq!(r["blockOwnerDeletion"], true);
        assert_eq!(p["spec"]["containers"][0]["name"], "c");
    }
    wait_status(admin, &REPLICASETS, n, "web", "status.replicas 3", |s| {
        int(&s["replicas"]) == 3 && int(&s["fullyLabeledReplicas"]) == 3
    });
    let created = eventually(LIMIT, "three SuccessfulCreate events", || {
        let ev = events_about(admin, n, "web");
        let m = messages(&ev, "SuccessfulCreate");
        (m.len() == 3).then_some(ev)
    });
    let mut want: Vec<String> = names(&pods)
        .iter()
        .map(|p| format!("Created pod: {p}"))
        .collect();
    want.sort();
    let mut got = messages(&created, "SuccessfulCreate");
    got.sort();
    assert_eq!(got, want);
    for e in created.iter().filter(|e| e["reason"] == "SuccessfulCreate") {
        assert_eq!(e["source"]["component"], "replicaset-controller");
        assert_eq!(e["type"], "Normal");
        assert_eq!(e["involvedObject"]["kind"], "ReplicaSet");
    }

    // Scale up; two pods become ready, one of them available after minReadySeconds.
    scale(admin, &REPLICASETS, n, "web", 5);
    let pods = wait_owned(admin, n, &uid, 5);
    let keep = names(&pods)[..2].to_vec();
    set_ready(admin, n, &keep[0], "2024-01-01T00:00:00Z");
    set_ready(admin, n, &keep[1], "2024-01-01T00:00:00Z");
    wait_status(admin, &REPLICASETS, n, "web", "2 ready, 2 available", |s| {
        int(&s["replicas"]) == 5
            && int(&s["readyReplicas"]) == 2
            && int(&s["availableReplicas"]) == 2
    });

    // Scale down: the pods that are not ready go first.
    scale(admin, &REPLICASETS, n, "web", 2);
    let left = wait_owned(admin, n, &uid, 2);
    assert_eq!(names(&left), keep, "the ready pods stay");
    wait_status(admin, &REPLICASETS, n, "web", "status.replicas 2", |s| {
        int(&s["replicas"]) == 2 && int(&s["readyReplicas"]) == 2
    });
    let deleted = eventually(LIMIT, "three SuccessfulDelete events", || {
        let m = messages(&events_about(admin, n, "web"), "SuccessfulDelete");
        (m.len() == 3).then_some(m)
    });
    assert!(deleted.iter().all(|m| m.starts_with("Deleted pod: web-")));
    assert!(deleted
        .iter()
        .all(|m| !keep.iter().any(|k| m.ends_with(k.as_str()))));

    // minReadySeconds: a pod ready just now is not available until it has passed.
    let mut o = get(admin, &REPLICASETS, n, "web");
    o["spec"]["minReadySeconds"] = json!(3);
    o["spec"]["replicas"] = json!(3);
    admin.update(&REPLICASETS, &o).expect("update");
    let pods = wait_owned(admin, n, &uid, 3);
    let fresh = names(&pods)
        .into_iter()
        .find(|p| !keep.contains(p))
        .expect("a new pod");
    let now = edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now());
    set_ready(admin, n, &fresh, &now);
    wait_status(admin, &REPLICASETS, n, "web", "3 ready, 2 available", |s| {
        int(&s["readyReplicas"]) == 3 && int(&s["availableReplicas"]) == 2
    });
    wait_status(
        admin,
        &REPLICASETS,
        n,
        "web",
        "3 available after minReadySeconds",
        |s| int(&s["availableReplicas"]) == 3,
    );
}

fn scenario_adopt_release(t: &Target) {
    let _kcm = start(t, "rs-adopt");
    let ns = new_ns(t, "e2e-rs-adopt");
    let admin = &ns.admin;
    let n = ns.name.as_str();
    let orphan = create(
        admin,
        &PODS,
        n,
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "stray", "labels": {"app": "api", "tier": "web"}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}),
    );
    let rs = create(
        admin,
        &REPLICASETS,
        n,
        rs_object(&REPLICASETS, "api", 2, "api"),
    );
    let uid = rs["metadata"]["uid"].as_str().expect("uid").to_string();
    // If the ReplicaSet's event outruns the pod's, a first sync may create two pods before the
    // orphan is seen; it is adopted on the next sync and an extra new pod goes (newest
    // first), as upstream. Either way the orphan ends up owned, with one other pod.
    eventually(LIMIT, "the orphan adopted, 2 pods owned", || {
        let pods = owned(admin, n, &uid);
        (pods.len() == 2 && names(&pods).contains(&"stray".to_string())).then_some(pods)
    });
    let stray = get(admin, &PODS, n, "stray");
    assert_eq!(stray["metadata"]["uid"], orphan["metadata"]["uid"]);
    assert_eq!(
        stray["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
        true
    );
    // One pod was created, not two.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(list(admin, &PODS, n).len(), 2);

    // Relabel an owned pod: it is released and replaced.
    eventually(LIMIT, "relabel", || {
        let mut p = get(admin, &PODS, n, "stray");
        p["metadata"]["labels"]["app"] = json!("debug");
        admin.update(&PODS, &p).ok()
    });
    eventually(LIMIT, "the relabelled pod released", || {
        let p = get(admin, &PODS, n, "stray");
        controller_uid(&p).is_none().then_some(())
    });
    let pods = wait_owned(admin, n, &uid, 2);
    assert!(!names(&pods).contains(&"stray".to_string()));
    assert_eq!(list(admin, &PODS, n).len(), 3);
}

fn scenario_rc(t: &Target) {
    let _kcm = start(t, "rc");
    let ns = new_ns(t, "e2e-rc");
    let admin = &ns.admin;
    let n = ns.name.as_str();
    let rc = create(
        admin,
        &REPLICATIONCONTROLLERS,
        n,
        rs_object(&REPLICATIONCONTROLLERS, "legacy", 2, "legacy"),
    );
    let uid = rc["metadata"]["uid"].as_str().expect("uid").to_string();
    let pods = wait_owned(admin, n, &uid, 2);
    for p in &pods {
        let r = &p["metadata"]["ownerReferences"][0];
        assert_eq!(r["apiVersion"], "v1");
        assert_eq!(r["kind"], "ReplicationController");
        assert_eq!(p["metadata"]["generateName"], "legacy-");
    }
    wait_status(
        admin,
        &REPLICATIONCONTROLLERS,
        n,
        "legacy",
        "rc status.replicas 2",
        |s| int(&s["replicas"]) == 2 && int(&s["fullyLabeledReplicas"]) == 2,
    );
    let ev = eventually(LIMIT, "SuccessfulCreate events", || {
        let ev = events_about(admin, n, "legacy");
        (messages(&ev, "SuccessfulCreate").len() == 2).then_some(ev)
    });
    for e in ev.iter().filter(|e| e["reason"] == "SuccessfulCreate") {
        assert_eq!(e["source"]["component"], "replication-controller");
        assert_eq!(e["involvedObject"]["kind"], "ReplicationController");
    }
    // An orphan matching the RC's selector is adopted; one pod too many is deleted.
    create(
        admin,
        &PODS,
        n,
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "extra", "labels": {"app": "legacy"}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}),
    );
    eventually(LIMIT, "one SuccessfulDelete", || {
        (messages(&events_about(admin, n, "legacy"), "SuccessfulDelete").len() == 1).then_some(())
    });
    wait_owned(admin, n, &uid, 2);
    scale(admin, &REPLICATIONCONTROLLERS, n, "legacy", 0);
    wait_owned(admin, n, &uid, 0);
    wait_status(
        admin,
        &REPLICATIONCONTROLLERS,
        n,
        "legacy",
        "rc status.replicas 0",
        |s| int(&s["replicas"]) == 0,
    );
}

/// Pod creation is refused for a while: FailedCreate Events and the ReplicaFailure
/// condition, which goes once pods can be created again.
fn scenario_replica_failure(t: &Target) {
    let ns = new_ns(t, "e2e-rs-fail");
    let admin = &ns.admin;
    let n = ns.name.as_str();
    match t.sandbox() {
        // Enough failures for a few rate-limited retries (about a second).
        Some(sb) => sb
            .faults()
            .fail_next(8, 500, Some(&format!("/namespaces/{n}/pods"))),
        // A quota that is used up (its usage written by hand: no quota controller runs).
        None => {
            let mut q = create(
                admin,
                &RESOURCEQUOTAS,
                n,
                json!({"apiVersion": "v1", "kind": "ResourceQuota",
                    "metadata": {"name": "block"}, "spec": {"hard": {"pods": "0"}}}),
            );
            q["status"] = json!({"hard": {"pods": "0"}, "used": {"pods": "0"}});
            admin
                .update_subresource(&RESOURCEQUOTAS, &q, "status")
                .expect("quota status");
        }
    }
    let _kcm = start(t, "rs-fail");
    let rs = create(admin, &REPLICASETS, n, rs_object(&REPLICASETS, "q", 3, "q"));
    let uid = rs["metadata"]["uid"].as_str().expect("uid").to_string();
    let failed = wait_status(
        admin,
        &REPLICASETS,
        n,
        "q",
        "ReplicaFailure condition",
        |s| {
            s["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "ReplicaFailure"))
        },
    );
    let cond = &failed["status"]["conditions"][0];
    assert_eq!(cond["status"], "True");
    assert_eq!(cond["reason"], "FailedCreate");
    let msg = cond["message"].as_str().unwrap_or("").to_string();
    let warn = eventually(LIMIT, "a FailedCreate event", || {
        let ev = events_about(admin, n, "q");
        ev.into_iter().find(|e| e["reason"] == "FailedCreate")
    });
    assert_eq!(warn["type"], "Warning");
    assert_eq!(warn["message"], format!("Error creating: {msg}"));
    if t.is_real() {
        admin
            .delete(&RESOURCEQUOTAS, Some(n), "block", &Default::default())
            .expect("delete quota");
    }
    wait_owned(admin, n, &uid, 3);
    wait_status(admin, &REPLICASETS, n, "q", "the condition removed", |s| {
        int(&s["replicas"]) == 3 && s["conditions"].is_null()
    });
}

/// However watches lag, drop or pause, the controller never creates more pods than asked.
fn scenario_no_overcreation(t: &Target) {
    let _kcm = start(t, "rs-over");
    let ns = new_ns(t, "e2e-rs-over");
    let admin = &ns.admin;
    let n = ns.name.as_str();
    let rs = create(
        admin,
        &REPLICASETS,
        n,
        rs_object(&REPLICASETS, "many", 30, "many"),
    );
    let uid = rs["metadata"]["uid"].as_str().expect("uid").to_string();
    if let Some(sb) = t.sandbox() {
        let f = sb.faults();
        // Watches end, fail and pause while pods are being created and observed.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(2) {
            f.drop_watches();
            f.fail_next(2, 500, Some("watch=true"));
            std::thread::sleep(Duration::from_millis(150));
            f.pause(Duration::from_millis(200));
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    wait_owned(admin, n, &uid, 30);
    // Scale down and up again with the watch interrupted.
    scale(admin, &REPLICASETS, n, "many", 10);
    if let Some(sb) = t.sandbox() {
        sb.faults().drop_watches();
        sb.faults().pause(Duration::from_millis(300));
    }
    wait_owned(admin, n, &uid, 10);
    scale(admin, &REPLICASETS, n, "many", 20);
    wait_owned(admin, n, &uid, 20);
    // It stays there.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(owned(admin, n, &uid).len(), 20);
    assert_eq!(list(admin, &PODS, n).len(), 20);
    // (Events cannot tell: past 25 per object the recorder's spam filter drops them, as
    // client-go's does.)
    if let Some(sb) = t.sandbox() {
        let posts = sb
            .requests()
            .iter()
            .filter(|r| {
                r.method == "POST" && r.path.starts_with(&format!("/api/v1/namespaces/{n}/pods"))
            })
            .count();
        assert_eq!(posts, 40, "pod creations sent");
    }
}

/// The test's finalizer on the template's pods: deleted pods stay terminating until released.
const HOLD: &str = "e2e.edgekcm.io/hold";

fn terminating(admin: &Client, ns: &str, uid: &str) -> Vec<String> {
    let pods: Vec<Value> = list(admin, &PODS, ns)
        .into_iter()
        .filter(|p| controller_uid(p).as_deref() == Some(uid))
        .filter(|p| !p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    names(&pods)
}

/// v1.33+ (beta and on from v1.35, DeploymentReplicaSetTerminatingReplicas): a ReplicaSet
/// reports its pods being deleted in `status.terminatingReplicas` (0 written, not omitted);
/// they do not count in `replicas` and are replaced at once. A ReplicationController reports
/// nothing of the kind (its API has no such field).
fn scenario_terminating_replicas(t: &Target) {
    let _kcm = start(t, "rs-terminating");
    let ns = new_ns(t, "e2e-rs-term");
    let admin = &ns.admin;
    let n = ns.name.as_str();
    let _gone = crate::common::nodes::PodsGone {
        admin: admin.clone(),
        ns: n.to_string(),
    };
    let mut o = rs_object(&REPLICASETS, "held", 3, "held");
    o["spec"]["template"]["metadata"]["finalizers"] = json!([HOLD]);
    let rs = create(admin, &REPLICASETS, n, o);
    let uid = rs["metadata"]["uid"].as_str().expect("uid").to_string();
    wait_owned(admin, n, &uid, 3);
    // Counted since v1.35 (the gate on); an older API server never keeps the field.
    let counts = t.at_least(35, "status.terminatingReplicas");
    let term = |v: &Value, n: i64| if counts { *v == json!(n) } else { v.is_null() };
    wait_status(
        admin,
        &REPLICASETS,
        n,
        "held",
        "3 replicas, 0 terminating",
        |s| int(&s["replicas"]) == 3 && term(&s["terminatingReplicas"], 0),
    );

    // Scale down by one: the deleted pod is held by the finalizer.
    scale(admin, &REPLICASETS, n, "held", 2);
    wait_status(
        admin,
        &REPLICASETS,
        n,
        "held",
        "2 replicas, 1 terminating",
        |s| int(&s["replicas"]) == 2 && term(&s["terminatingReplicas"], 1),
    );
    // A pod deleted by someone else: replaced at once, and terminating too.
    let victim = names(&owned(admin, n, &uid))[0].clone();
    crate::common::nodes::delete_pod(admin, n, &victim);
    wait_owned(admin, n, &uid, 2);
    wait_status(
        admin,
        &REPLICASETS,
        n,
        "held",
        "2 replicas, 2 terminating",
        |s| int(&s["replicas"]) == 2 && term(&s["terminatingReplicas"], 2),
    );
    assert_eq!(terminating(admin, n, &uid).len(), 2);
    // Released: gone, and the count back to 0.
    for p in terminating(admin, n, &uid) {
        crate::common::nodes::release(admin, n, &p);
    }
    wait_status(admin, &REPLICASETS, n, "held", "0 terminating again", |s| {
        int(&s["replicas"]) == 2 && term(&s["terminatingReplicas"], 0)
    });

    // The ReplicationController: same pods, no terminatingReplicas.
    let mut o = rs_object(&REPLICATIONCONTROLLERS, "held-rc", 2, "held-rc");
    o["spec"]["template"]["metadata"]["finalizers"] = json!([HOLD]);
    let rc = create(admin, &REPLICATIONCONTROLLERS, n, o);
    let rc_uid = rc["metadata"]["uid"].as_str().expect("uid").to_string();
    wait_owned(admin, n, &rc_uid, 2);
    scale(admin, &REPLICATIONCONTROLLERS, n, "held-rc", 1);
    let st = wait_status(
        admin,
        &REPLICATIONCONTROLLERS,
        n,
        "held-rc",
        "rc: 1 replica",
        |s| int(&s["replicas"]) == 1,
    );
    assert_eq!(terminating(admin, n, &rc_uid).len(), 1);
    assert!(
        st["status"].get("terminatingReplicas").is_none(),
        "{}",
        st["status"]
    );
}

/// Emulating v1.34 (DeploymentReplicaSetTerminatingReplicas alpha, off): no
/// `terminatingReplicas`, as upstream v1.34.
fn scenario_terminating_replicas_v134(t: &Target) {
    let _kcm = Kcm::start(
        t,
        "rs-terminating-134",
        &[CONTROLLERS, "--emulated-version=1.34"],
    );
    let ns = new_ns(t, "e2e-rs-term134");
    let admin = &ns.admin;
    let n = ns.name.as_str();
    let _gone = crate::common::nodes::PodsGone {
        admin: admin.clone(),
        ns: n.to_string(),
    };
    let mut o = rs_object(&REPLICASETS, "held", 2, "held");
    o["spec"]["template"]["metadata"]["finalizers"] = json!([HOLD]);
    let rs = create(admin, &REPLICASETS, n, o);
    let uid = rs["metadata"]["uid"].as_str().expect("uid").to_string();
    wait_owned(admin, n, &uid, 2);
    scale(admin, &REPLICASETS, n, "held", 1);
    let st = wait_status(admin, &REPLICASETS, n, "held", "1 replica", |s| {
        int(&s["replicas"]) == 1
    });
    assert_eq!(terminating(admin, n, &uid).len(), 1);
    assert!(
        st["status"].get("terminatingReplicas").is_none(),
        "{}",
        st["status"]
    );
}

#[test]
#[ignore]
fn bench_sandbox_300_replicasets() {
    let t = sandbox();
    let mut kcm = Kcm::start(
        &t,
        "bench",
        &[CONTROLLERS, "--kube-api-qps=1000", "--kube-api-burst=2000"],
    );
    let ns = new_ns(&t, "bench");
    let admin = &ns.admin;
    let n = ns.name.as_str();
    let t0 = Instant::now();
    for i in 0..300 {
        create(
            admin,
            &REPLICASETS,
            n,
            rs_object(&REPLICASETS, &format!("rs-{i}"), 5, &format!("app-{i}")),
        );
    }
    let created = t0.elapsed();
    eventually(Duration::from_secs(600), "1500 pods", || {
        (list(admin, &PODS, n).len() >= 1500).then_some(())
    });
    let pods = t0.elapsed();
    eventually(Duration::from_secs(600), "300 statuses", || {
        list(admin, &REPLICASETS, n)
            .iter()
            .all(|r| int(&r["status"]["replicas"]) == 5)
            .then_some(())
    });
    let statuses = t0.elapsed();
    let pid = kcm.child.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let cpu = (ticks(11) + ticks(12)) / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or("")
        .to_string();
    eprintln!(
        "300 RS created in {created:?}; 1500 pods after {pods:?}; statuses after {statuses:?}; \
         edgekcm cpu {cpu:.2}s; {rss}"
    );
    let posts = t
        .sandbox()
        .map(|sb| {
            sb.requests()
                .iter()
                .filter(|r| r.method == "POST" && r.path.contains("/pods"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(posts, 1500);
    kcm.kill();
}

// Each scenario runs on the sandbox (`sandbox_scenarios::<name>`) and, with `just e2e`,
// on a real kube-apiserver (`real_scenarios::<name>`).
scenarios! {
    replicaset_create_scale => scenario_create_scale,
    replicaset_adopt_release => scenario_adopt_release,
    replicationcontroller => scenario_rc,
    replicaset_failure_condition => scenario_replica_failure,
    replicaset_no_overcreation => scenario_no_overcreation,
    replicaset_terminating_replicas => scenario_terminating_replicas,
    replicaset_terminating_replicas_v134 => scenario_terminating_replicas_v134,
}
