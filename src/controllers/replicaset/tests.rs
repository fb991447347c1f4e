//! The replica controllers' decisions, on a cache built from objects.

use super::*;
use crate::api::client::DeleteOptions;
use crate::controllers::kit::pod::*;
use crate::controllers::kit::ranking::*;
use crate::controllers::kit::selector;
use crate::controllers::testing::cx_with;
use std::sync::Arc;
use std::time::SystemTime;

pub(super) fn t(s: &str) -> SystemTime {
    crate::compat::timefmt::parse_rfc3339(s).expect("time")
}

pub(super) const NOW: &str = "2024-06-01T12:00:00Z";

pub(super) fn rs(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "resourceVersion": "5", "generation": 2},
        "spec": {"replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name, "tier": "fe"},
                "annotations": {"a": "b"}, "finalizers": ["x/y"]},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
        "status": {"replicas": 0}
    })
}

pub(super) fn pod(name: &str, owner: Option<&Value>, labels: Value) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("p-{name}"),
            "resourceVersion": "7", "labels": labels,
            "creationTimestamp": "2024-06-01T11:00:00Z"},
        "spec": {}, "status": {"phase": "Pending"}
    });
    if let Some(o) = owner {
        p["metadata"]["ownerReferences"] =
            json!([refmanager::controller_owner_ref(&REPLICASETS, o)]);
    }
    p
}

fn ready(mut p: Value, since: &str) -> Value {
    p["status"]["phase"] = json!("Running");
    p["status"]["conditions"] =
        json!([{"type": "Ready", "status": "True", "lastTransitionTime": since}]);
    p
}

#[test]
fn prefix_rule() {
    assert_eq!(pod_prefix("web"), "web-");
    assert_eq!(pod_prefix("a.b"), "a.b-");
    assert_eq!(pod_prefix("x"), "x-");
    // Not a valid name prefix: the bare name.
    assert_eq!(pod_prefix("Web"), "Web");
    let long = "a".repeat(253);
    assert_eq!(pod_prefix(&long), format!("{long}-"));
    let longer = "a".repeat(254);
    assert_eq!(pod_prefix(&longer), longer);
}

#[test]
fn pod_from_template_copies_template() {
    let o = rs("web", 3);
    let p = pod_from_template(&REPLICASETS, &o).expect("pod");
    assert_eq!(p["metadata"]["generateName"], "web-");
    assert_eq!(p["metadata"]["labels"], json!({"app": "web", "tier": "fe"}));
    assert_eq!(p["metadata"]["annotations"], json!({"a": "b"}));
    assert_eq!(p["metadata"]["finalizers"], json!(["x/y"]));
    assert_eq!(p["spec"]["containers"][0]["image"], "nginx");
    let r = &p["metadata"]["ownerReferences"][0];
    assert_eq!(r["kind"], "ReplicaSet");
    assert_eq!(r["uid"], "uid-web");
    assert_eq!(r["controller"], true);
    assert_eq!(r["blockOwnerDeletion"], true);
    assert!(p["metadata"].get("name").is_none());
    let mut nolabels = o.clone();
    nolabels["spec"]["template"]["metadata"]["labels"] = json!({});
    assert_eq!(
        pod_from_template(&REPLICASETS, &nolabels).unwrap_err(),
        "unable to create pods, no labels"
    );
}

#[test]
fn rc_selector_is_a_label_map() {
    let rc = json!({"spec": {"selector": {"app": "x"}}});
    let sel = Flavor::ReplicationController
        .selector(&rc)
        .expect("selector");
    assert_eq!(sel, json!({"matchLabels": {"app": "x"}}));
    assert!(Flavor::ReplicationController
        .selector(&json!({"spec": {}}))
        .is_none());
    assert!(selector::is_valid(&sel));
    assert!(!selector::is_valid(
        &json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})
    ));
    assert!(!selector::is_valid(
        &json!({"matchExpressions": [{"key": "a", "operator": "Foo"}]})
    ));
}

fn names(v: &[Obj]) -> Vec<String> {
    v.iter().map(|p| obj::name(p).to_string()).collect()
}

pub(super) fn arcs(v: Vec<Value>) -> Vec<Obj> {
    v.into_iter().map(Arc::new).collect()
}

#[test]
fn ranking_rules_in_order() {
    let now = t(NOW);
    let l = json!({"app": "web"});
    let base = |n: &str| pod(n, None, l.clone());
    let on = |mut p: Value, node: &str| {
        p["spec"]["nodeName"] = json!(node);
        p
    };
    // 1. unassigned before assigned
    let pods = arcs(vec![on(base("assigned"), "n1"), base("unassigned")]);
    assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["unassigned"]);
    // 2. Pending < Unknown < Running
    let mut running = base("running");
    running["status"]["phase"] = json!("Running");
    let mut unknown = base("unknown");
    unknown["status"]["phase"] = json!("Unknown");
    let pods = arcs(vec![running.clone(), unknown, base("pending")]);
    assert_eq!(
        names(&pods_to_delete(&pods, &[], 2, now)),
        ["pending", "unknown"]
    );
    // 3. not ready before ready
    let pods = arcs(vec![ready(base("r"), "2024-06-01T11:00:00Z"), running]);
    assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["running"]);
    // 4. lower deletion cost first (beats readiness time)
    let mut cheap = ready(base("cheap"), "2024-06-01T09:00:00Z");
    cheap["metadata"]["annotations"] = json!({POD_DELETION_COST: "-5"});
    let mut invalid = ready(base("invalid"), "2024-06-01T11:59:00Z");
    invalid["metadata"]["annotations"] = json!({POD_DELETION_COST: "+7"});
    let pods = arcs(vec![invalid, cheap]);
    assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["cheap"]);
    // 5. more related pods on the same node first
    let a = on(base("a"), "n1");
    let b = on(base("b"), "n2");
    let related = arcs(vec![a.clone(), b.clone(), on(base("c"), "n2")]);
    let pods = arcs(vec![a, b]);
    assert_eq!(names(&pods_to_delete(&pods, &related, 1, now)), ["b"]);
    // 6. ready for a shorter time first, on a log scale: 1 min vs 2 h
    let pods = arcs(vec![
        ready(base("old"), "2024-06-01T10:00:00Z"),
        ready(base("new"), "2024-06-01T11:59:00Z"),
    ]);
    assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["new"]);
    // 7. more restarts first
    let mut crashy = base("crashy");
    crashy["status"]["containerStatuses"] = json!([{"restartCount": 1}, {"restartCount": 4}]);
    let pods = arcs(vec![base("calm"), crashy]);
    assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["crashy"]);
    // ... and on a tie, more sidecar restarts first (v1.31+); a plain init container's
    // restarts do not count.
    let with_init = |name: &str, policy: Option<&str>, restarts: i64| {
        let mut p = base(name);
        p["spec"]["initContainers"] = json!([{"name": "side", "image": "i"}]);
        if let Some(rp) = policy {
            p["spec"]["initContainers"][0]["restartPolicy"] = json!(rp);
        }
        p["status"]["initContainerStatuses"] = json!([{"name": "side", "restartCount": restarts}]);
        p
    };
    let pods = arcs(vec![
        with_init("calm-sidecar", Some("Always"), 0),
        with_init("init", None, 9),
        with_init("crashy-sidecar", Some("Always"), 3),
    ]);
    assert_eq!(
        names(&pods_to_delete(&pods, &[], 1, now)),
        ["crashy-sidecar"]
    );
    let pods = arcs(vec![base("calm"), with_init("init", None, 9)]);
    assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["calm"]);
    // 8. newer first; within one log bucket the UID decides
    let mut young = base("young");
    young["metadata"]["creationTimestamp"] = json!("2024-06-01T11:59:50Z");
    let pods = arcs(vec![base("elder"), young]);
    assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["young"]);
    let mut x = base("x");
    x["metadata"]["creationTimestamp"] = json!("2024-06-01T11:00:01Z");
    x["metadata"]["uid"] = json!("b");
    let mut y = base("y");
    y["metadata"]["uid"] = json!("a");
    let pods = arcs(vec![x, y]);
    assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["y"]);
    // all requested: everything, in the given order
    let pods = arcs(vec![base("p1"), base("p2")]);
    assert_eq!(names(&pods_to_delete(&pods, &[], 5, now)), ["p1", "p2"]);
}

#[test]
fn log_scale_buckets() {
    let now = t(NOW);
    // 60 s and 61 s old share a bucket; 1 s and 100 s do not.
    assert_eq!(
        log_rank_diff(t("2024-06-01T11:59:00Z"), t("2024-06-01T11:58:59Z"), now),
        0
    );
    assert!(log_rank_diff(t("2024-06-01T11:59:59Z"), t("2024-06-01T11:58:20Z"), now) < 0);
    assert_eq!(log_rank_diff(now, now, now), 0);
}

#[test]
fn status_counts_and_failure_condition() {
    let now = t(NOW);
    let mut o = rs("web", 3);
    o["spec"]["minReadySeconds"] = json!(30);
    let sel = json!({"app": "web", "tier": "fe"});
    let pods = arcs(vec![
        ready(pod("a", Some(&o), sel.clone()), "2024-06-01T11:00:00Z"),
        ready(pod("b", Some(&o), sel.clone()), "2024-06-01T11:59:50Z"),
        pod("c", Some(&o), json!({"app": "web"})),
    ]);
    let st = calculate_status(&o, &pods, None, None, now);
    assert_eq!(st["replicas"], 3);
    assert_eq!(st["fullyLabeledReplicas"], 2);
    assert_eq!(st["readyReplicas"], 2);
    assert_eq!(st["availableReplicas"], 1);
    let upd = status_update(&o, st.clone()).expect("changed");
    assert_eq!(upd["status"]["observedGeneration"], 2);
    assert!(status_update(&upd, st).is_none(), "no change, no write");

    let st = calculate_status(&o, &pods[..1], None, Some("quota exceeded"), now);
    let c = &st["conditions"][0];
    assert_eq!(c["type"], "ReplicaFailure");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "FailedCreate");
    assert_eq!(c["message"], "quota exceeded");
    // healthy again: the condition goes
    let mut failed = o.clone();
    failed["status"] = st;
    let st = calculate_status(&failed, &pods, None, None, now);
    assert!(st.get("conditions").is_none());
    // too many pods failing to go: FailedDelete
    let mut one = o.clone();
    one["spec"]["replicas"] = json!(1);
    let st = calculate_status(&one, &pods, None, Some("unable to delete pods: x"), now);
    assert_eq!(st["conditions"][0]["reason"], "FailedDelete");
    // zero counts are omitted, replicas is always there
    let st = calculate_status(&o, &[], None, None, now);
    assert_eq!(st, json!({"replicas": 0}));
}

#[test]
fn availability() {
    let now = t(NOW);
    let p = ready(pod("a", None, json!({})), "2024-06-01T11:59:30Z");
    assert!(is_pod_available(&p, 0, now));
    assert!(is_pod_available(&p, 29, now));
    assert!(!is_pod_available(&p, 30, now));
    assert!(!is_pod_available(&pod("b", None, json!({})), 0, now));
    let mut gone = p.clone();
    gone["metadata"]["deletionTimestamp"] = json!(NOW);
    assert!(!is_pod_active(&gone));
    let mut done = p;
    done["status"]["phase"] = json!("Succeeded");
    assert!(!is_pod_active(&done));
}

fn cx<'a>(cache: &'a Cache, client: &'a crate::api::client::Client) -> Cx<'a> {
    Cx {
        cache,
        now: t(NOW),
        client,
    }
}

/// Feed the controller the deltas a store change produces, as the informer would.
fn feed(c: &ReplicaSetController, cache: &Cache, kind: Kind, dk: DeltaKind, v: Value) {
    if let Some(d) = cache.store(kind).apply(dk, v) {
        c.keys_for(&Watch::full(kind), &d, cache);
    }
}

fn creates(out: &Outcome) -> usize {
    out.actions
        .iter()
        .map(|a| match a {
            Action::SlowStart(l) => l.len(),
            _ => 0,
        })
        .sum()
}

fn deletes(out: &Outcome) -> Vec<String> {
    let mut v = vec![];
    for a in &out.actions {
        if let Action::Parallel(l) = a {
            for d in l {
                if let Action::Reported { action, .. } = d {
                    if let Action::Delete { name, .. } = &**action {
                        v.push(name.clone());
                    }
                }
            }
        }
    }
    v
}

#[test]
fn creates_missing_pods_with_events_and_status() {
    let o = rs("web", 3);
    let (cache, client) = cx_with(&[(REPLICASETS, o.clone())]);
    let c = ReplicaSetController::new(Flavor::ReplicaSet);
    let out = c
        .reconcile(&cx(&cache, &client), "ns/web")
        .expect("reconcile");
    assert_eq!(creates(&out), 3);
    let Action::SlowStart(l) = &out.actions[0] else {
        panic!("{:?}", out.actions)
    };
    let Action::Reported { action, report } = &l[0] else {
        panic!()
    };
    assert_eq!(report.success_reason, "SuccessfulCreate");
    assert_eq!(report.success_prefix, "Created pod: ");
    assert_eq!(report.failure_prefix, "Error creating: ");
    assert_eq!(report.about.kind, "ReplicaSet");
    assert!(matches!(&**action, Action::Create { kind, .. } if *kind == PODS));
    // The status waits for the creates, then counts the pods they left in the cache.
    assert!(out.status_after_writes);
    assert!(!out
        .actions
        .iter()
        .any(|a| matches!(a, Action::UpdateSubresource { .. })));
    for name in ["web-a", "web-b"] {
        cache.observe_write(PODS, &pod(name, Some(&o), json!({"app": "web"})));
    }
    let rep = c
        .status_after_writes(&cx(&cache, &client), "ns/web")
        .expect("status");
    let [Action::UpdateSubresource { object, .. }] = &rep.actions[..] else {
        panic!("{:?}", rep.actions)
    };
    assert_eq!(object["status"]["replicas"], 2);
    assert_eq!(object["status"]["observedGeneration"], 2);
    assert!(!rep.status_after_writes);
    assert_eq!(creates(&rep), 0, "a report never creates");
}

#[test]
fn without_writes_the_status_comes_with_the_decision() {
    let o = rs("web", 1);
    let p = pod("web-a", Some(&o), json!({"app": "web"}));
    let (cache, client) = cx_with(&[(REPLICASETS, o), (PODS, p)]);
    let c = ReplicaSetController::new(Flavor::ReplicaSet);
    let out = c
        .reconcile(&cx(&cache, &client), "ns/web")
        .expect("reconcile");
    assert!(!out.status_after_writes);
    let [Action::UpdateSubresource { object, .. }] = &out.actions[..] else {
        panic!("{:?}", out.actions)
    };
    // observedGeneration moves to 2 with nothing to create
    assert_eq!(object["status"]["observedGeneration"], 2);
    assert_eq!(object["status"]["replicas"], 1);
}

#[test]
fn burst_limit() {
    let o = rs("big", 2000);
    let (cache, client) = cx_with(&[(REPLICASETS, o)]);
    let c = ReplicaSetController::new(Flavor::ReplicaSet);
    let out = c
        .reconcile(&cx(&cache, &client), "ns/big")
        .expect("reconcile");
    assert_eq!(creates(&out), BURST_REPLICAS);
}

#[test]
fn own_creations_gate_the_next_decision_until_the_watch_passes_them() {
    let o = rs("web", 2);
    let (cache, client) = cx_with(&[(REPLICASETS, o.clone())]);
    let pods = cache.store(PODS);
    pods.set_resource_version("10");
    let c = ReplicaSetController::new(Flavor::ReplicaSet);
    let out = c
        .reconcile(&cx(&cache, &client), "ns/web")
        .expect("reconcile");
    assert_eq!(creates(&out), 2);
    // The manager creates two pods (rv 11, 12) and writes them into the cache.
    let l = json!({"app": "web", "tier": "fe"});
    let mut made = vec![];
    for (n, rv) in [("web-a", "11"), ("web-b", "12")] {
        let mut p = pod(n, Some(&o), l.clone());
        p["metadata"]["resourceVersion"] = json!(rv);
        cache.observe_write(PODS, &p);
        let create = Action::Create {
            kind: PODS,
            namespace: "ns".into(),
            object: json!({}),
        };
        c.applied("ns/web", &create, Applied::Done(Some(&p)));
        made.push(p);
    }
    // Seen: nothing more to do.
    let out = c
        .reconcile(&cx(&cache, &client), "ns/web")
        .expect("reconcile");
    assert_eq!(creates(&out), 0);
    // A re-list from a snapshot older than our writes does not hide them (the store keeps
    // what it holds at a newer version): no new pod.
    pods.replace(vec![made[0].clone()], "11");
    assert!(pods.get("ns/web-b").is_some());
    let out = c
        .reconcile(&cx(&cache, &client), "ns/web")
        .expect("reconcile");
    assert_eq!(creates(&out), 0, "must not replace its own pod");
    // The watch delivers it: fine again.
    feed(&c, &cache, PODS, DeltaKind::Added, made[1].clone());
    let out = c
        .reconcile(&cx(&cache, &client), "ns/web")
        .expect("reconcile");
    assert_eq!(creates(&out), 0);
    // Once the watch has gone past them, a pod that disappears is replaced.
    feed(&c, &cache, PODS, DeltaKind::Deleted, made[1].clone());
    pods.set_resource_version("20");
    let out = c
        .reconcile(&cx(&cache, &client), "ns/web")
        .expect("reconcile");
    assert_eq!(creates(&out), 1);
}

/// Upstream's related pods: the active pods any ReplicaSet of the same Deployment selects,
/// counted per node, found through the placement index the pod watch keeps.
#[test]
fn scale_down_ranks_by_the_siblings_pods_on_each_node() {
    let owned = |name: &str, replicas: i64| {
        let mut r = rs(name, replicas);
        r["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
            "kind": "Deployment", "name": "d", "uid": "uid-d", "controller": true}]);
        r
    };
    let old = owned("old", 2);
    let new = owned("new", 2);
    let lone = rs("lone", 1);
    let (cache, client) = cx_with(&[
        (REPLICASETS, old.clone()),
        (REPLICASETS, new.clone()),
        (REPLICASETS, lone.clone()),
    ]);
    let c = ReplicaSetController::new(Flavor::ReplicaSet);
    let on = |mut p: Value, node: &str| {
        p["spec"]["nodeName"] = json!(node);
        ready(p, "2024-06-01T11:00:00Z")
    };
    let mine = json!({"app": "old"});
    let theirs = json!({"app": "new"});
    let add = |p: Value| feed(&c, &cache, PODS, DeltaKind::Added, p);
    add(on(pod("a", Some(&old), mine.clone()), "n1"));
    add(on(pod("b", Some(&old), mine.clone()), "n2"));
    add(on(pod("c", Some(&old), mine.clone()), "n3"));
    // Two pods of the sibling on n3: c is the one doubled up.
    add(on(pod("x", Some(&new), theirs.clone()), "n3"));
    add(on(pod("y", Some(&new), theirs.clone()), "n3"));
    // Not counted: pods no sibling selects, and inactive ones.
    for i in 0..3 {
        add(on(
            pod(&format!("l{i}"), Some(&lone), json!({"app": "lone"})),
            "n1",
        ));
        let mut gone = on(pod(&format!("f{i}"), Some(&new), theirs.clone()), "n2");
        gone["status"]["phase"] = json!("Failed");
        add(gone);
    }
    let out = c
        .reconcile(&cx(&cache, &client), "ns/old")
        .expect("reconcile");
    assert_eq!(deletes(&out), ["c"]);
    // Once the sibling's pods are gone, the first of the equals goes.
    for p in ["x", "y"] {
        let gone = pod(p, Some(&new), theirs.clone());
        feed(&c, &cache, PODS, DeltaKind::Deleted, gone);
    }
    assert!(!c.track().placed["ns"].contains_key("x"));
    let out = c
        .reconcile(&cx(&cache, &client), "ns/old")
        .expect("reconcile");
    assert_eq!(deletes(&out), ["a"]);
    // A ReplicationController keeps no placement index (its rank has no related pods).
    let rc = ReplicaSetController::new(Flavor::ReplicationController);
    feed(
        &rc,
        &cache,
        PODS,
        DeltaKind::Added,
        pod("z", Some(&old), mine),
    );
    assert!(rc.track().placed.is_empty());
}

#[test]
fn deleted_pods_stay_deleted_despite_late_events() {
    let o = rs("web", 1);
    let (cache, client) = cx_with(&[(REPLICASETS, o.clone())]);
    let c = ReplicaSetController::new(Flavor::ReplicaSet);
    let l = json!({"app": "web", "tier": "fe"});
    let p1 = pod("web-1", Some(&o), l.clone());
    let mut p2 = pod("web-2", Some(&o), l.clone());
    p2["metadata"]["creationTimestamp"] = json!("2024-06-01T11:59:00Z");
    feed(&c, &cache, PODS, DeltaKind::Added, p1.clone());
    feed(&c, &cache, PODS, DeltaKind::Added, p2.clone());
    let out = c
        .reconcile(&cx(&cache, &client), "ns/web")
        .expect("reconcile");
    assert_eq!(deletes(&out), ["web-2"], "the newer pod goes first");
    // The manager deletes it and forgets it in the cache.
    cache.observe_delete(PODS, "ns", "web-2");
    let del = Action::Delete {
        kind: PODS,
        namespace: "ns".into(),
        name: "web-2".into(),
        options: DeleteOptions::default(),
    };
    c.applied("ns/web", &del, Applied::Done(None));
    // A late, older update: the store keeps it out, and it would not count either way.
    let mut late = p2.clone();
    late["metadata"]["resourceVersion"] = json!("6");
    feed(&c, &cache, PODS, DeltaKind::Updated, late);
    assert!(cache.store(PODS).get("ns/web-2").is_none());
    let out = c
        .reconcile(&cx(&cache, &client), "ns/web")
        .expect("reconcile");
    assert!(
        deletes(&out).is_empty(),
        "no second victim: {:?}",
        out.actions
    );
    assert_eq!(creates(&out), 0);
    // The real deletion arrives.
    let uid = obj::uid(&p2).to_string();
    feed(&c, &cache, PODS, DeltaKind::Deleted, p2);
    assert!(!c.track().inflight.hides("ns/web-2", &uid));
}

#[test]
fn adoption_and_release_decisions() {
    let o = rs("web", 2);
    let (cache, client) = cx_with(&[(REPLICASETS, o.clone())]);
    let c = ReplicaSetController::new(Flavor::ReplicaSet);
    // owned, but relabelled: released; owned by us and matching: kept
    feed(
        &c,
        &cache,
        PODS,
        DeltaKind::Added,
        pod("moved", Some(&o), json!({"app": "other"})),
    );
    feed(
        &c,
        &cache,
        PODS,
        DeltaKind::Added,
        pod("mine", Some(&o), json!({"app": "web"})),
    );
    let out = c
        .reconcile(&cx(&cache, &client), "ns/web")
        .expect("reconcile");
    let patch = out
        .actions
        .iter()
        .find_map(|a| match a {
            Action::Patch { name, patch, .. } if name == "moved" => Some(patch.clone()),
            _ => None,
        })
        .expect("release patch");
    assert_eq!(patch["metadata"]["uid"], "p-moved");
    assert_eq!(patch["metadata"]["ownerReferences"][0]["$patch"], "delete");
    assert_eq!(creates(&out), 1, "the released pod does not count");
    feed(
        &c,
        &cache,
        PODS,
        DeltaKind::Added,
        pod("orphan", None, json!({"app": "web"})),
    );
    assert!(c.track().orphans["ns"].contains_key("orphan"));
    feed(
        &c,
        &cache,
        PODS,
        DeltaKind::Deleted,
        pod("orphan", None, json!({"app": "web"})),
    );
    assert!(!c.track().orphans.contains_key("ns"));
}

#[test]
fn adoption_rereads_the_owner() {
    use crate::sandbox::{Sandbox, SandboxOptions};
    let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
    let client = crate::api::client::Client::new(
        &crate::api::kubeconfig::RestConfig {
            server: sb.url(),
            source: "test".into(),
            ..Default::default()
        },
        0.0,
        1,
        "test",
    )
    .expect("client");
    let mut o = rs("web", 1);
    o["metadata"]["namespace"] = json!("default");
    o["metadata"].as_object_mut().map(|m| m.remove("uid"));
    let live = sb.create(&REPLICASETS, o).expect("create rs");
    let cache = Cache::new(client.clone());
    cache
        .store(REPLICASETS)
        .apply(DeltaKind::Added, live.clone());
    let c = ReplicaSetController::new(Flavor::ReplicaSet);
    let mut orphan = pod("orphan", None, json!({"app": "web"}));
    orphan["metadata"]["namespace"] = json!("default");
    feed(&c, &cache, PODS, DeltaKind::Added, orphan);
    let out = c
        .reconcile(&cx(&cache, &client), "default/web")
        .expect("reconcile");
    let patch = out
        .actions
        .iter()
        .find_map(|a| match a {
            Action::Patch { name, patch, .. } if name == "orphan" => Some(patch.clone()),
            _ => None,
        })
        .expect("adopt patch");
    assert_eq!(patch["metadata"]["uid"], "p-orphan");
    assert_eq!(
        patch["metadata"]["ownerReferences"][0]["uid"],
        live["metadata"]["uid"]
    );
    assert_eq!(creates(&out), 0, "the adopted pod counts");
    // The owner was replaced meanwhile (same name, another UID): no adoption.
    sb.delete(&REPLICASETS, Some("default"), "web")
        .expect("delete");
    let mut again = rs("web", 1);
    again["metadata"]["namespace"] = json!("default");
    again["metadata"].as_object_mut().map(|m| m.remove("uid"));
    sb.create(&REPLICASETS, again).expect("recreate");
    let err = c
        .reconcile(&cx(&cache, &client), "default/web")
        .expect_err("stale owner");
    assert!(
        err.to_string().contains("can't adopt Pod default/orphan"),
        "{err}"
    );
}

#[test]
fn pod_events_map_to_owner_keys() {
    let o = rs("web", 1);
    let other = rs("db", 1);
    let (cache, _) = cx_with(&[(REPLICASETS, o.clone()), (REPLICASETS, other.clone())]);
    let c = ReplicaSetController::new(Flavor::ReplicaSet);
    let w = Watch::full(PODS);
    let d = |kind, old: Option<Value>, new: Option<Value>| Delta {
        kind,
        old: old.map(Arc::new),
        new: new.map(Arc::new),
    };
    // The owners' watch events, as the manager delivers them, feed the selector index.
    for owner in [&o, &other] {
        let added = d(DeltaKind::Added, None, Some(owner.clone()));
        let keys = c.keys_for(&Watch::full(REPLICASETS), &added, &cache);
        assert_eq!(keys, [obj::key(owner)]);
    }
    let owned = pod("a", Some(&o), json!({"app": "web"}));
    assert_eq!(
        c.keys_for(&w, &d(DeltaKind::Added, None, Some(owned.clone())), &cache),
        ["ns/web"]
    );
    assert_eq!(
        c.keys_for(
            &w,
            &d(DeltaKind::Deleted, Some(owned.clone()), None),
            &cache
        ),
        ["ns/web"]
    );
    // an orphan: every owner whose selector matches
    let orphan = pod("b", None, json!({"app": "db"}));
    assert_eq!(
        c.keys_for(&w, &d(DeltaKind::Added, None, Some(orphan.clone())), &cache),
        ["ns/db"]
    );
    // relabelled orphan: owners matching the new labels
    let mut moved = orphan.clone();
    moved["metadata"]["labels"] = json!({"app": "web"});
    assert_eq!(
        c.keys_for(
            &w,
            &d(DeltaKind::Updated, Some(orphan), Some(moved)),
            &cache
        ),
        ["ns/web"]
    );
    // a pod whose owner is unknown (other kind or other uid): nothing
    let mut stranger = owned.clone();
    stranger["metadata"]["ownerReferences"][0]["uid"] = json!("nope");
    assert!(c
        .keys_for(&w, &d(DeltaKind::Added, None, Some(stranger)), &cache)
        .is_empty());
    // released from web: web looks again
    let mut released = owned.clone();
    released["metadata"]["ownerReferences"] = json!([]);
    released["metadata"]["labels"] = json!({"app": "none"});
    assert_eq!(
        c.keys_for(
            &w,
            &d(DeltaKind::Updated, Some(owned), Some(released)),
            &cache
        ),
        ["ns/web"]
    );
}

#[test]
fn replication_controller_flavor() {
    let rc = json!({
        "apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "old", "namespace": "ns", "uid": "rc-1", "generation": 1},
        "spec": {"replicas": 2, "selector": {"app": "old"},
            "template": {"metadata": {"labels": {"app": "old"}}, "spec": {}}}
    });
    let (cache, client) = cx_with(&[(REPLICATIONCONTROLLERS, rc)]);
    let c = ReplicaSetController::new(Flavor::ReplicationController);
    let row = crate::controllers::testing::row("replicationcontroller");
    assert_eq!(row.name, "replicationcontroller-controller");
    assert_eq!(row.event_component, "replication-controller");
    let out = c
        .reconcile(&cx(&cache, &client), "ns/old")
        .expect("reconcile");
    assert_eq!(creates(&out), 2);
    let Action::SlowStart(l) = &out.actions[0] else {
        panic!()
    };
    let Action::Reported { action, report } = &l[0] else {
        panic!()
    };
    assert_eq!(report.about.kind, "ReplicationController");
    let Action::Create { object, .. } = &**action else {
        panic!()
    };
    assert_eq!(
        object["metadata"]["ownerReferences"][0]["kind"],
        "ReplicationController"
    );
    assert_eq!(object["metadata"]["ownerReferences"][0]["apiVersion"], "v1");
}

#[test]
fn failed_attempt_shows_in_status_right_after() {
    let o = rs("web", 1);
    let (cache, client) = cx_with(&[(REPLICASETS, o)]);
    let c = ReplicaSetController::new(Flavor::ReplicaSet);
    let out = c
        .reconcile(&cx(&cache, &client), "ns/web")
        .expect("reconcile");
    assert_eq!(creates(&out), 1);
    let create = Action::Create {
        kind: PODS,
        namespace: "ns".into(),
        object: json!({}),
    };
    let err = Error::api(
        403,
        "Forbidden",
        "pods \"web-x\" is forbidden: exceeded quota",
    );
    c.applied("ns/web", &create, Applied::Failed(&err));
    let out = c
        .status_after_writes(&cx(&cache, &client), "ns/web")
        .expect("status");
    let Some(Action::UpdateSubresource { object, .. }) = out.actions.last() else {
        panic!("{:?}", out.actions)
    };
    let cond = &object["status"]["conditions"][0];
    assert_eq!(cond["reason"], "FailedCreate");
    assert_eq!(
        cond["message"],
        "pods \"web-x\" is forbidden: exceeded quota"
    );
}
