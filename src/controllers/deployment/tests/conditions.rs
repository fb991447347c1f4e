//! Conditions, collisions, adoption and failures of whole passes.

use super::*;

#[test]
fn progress_deadline_exceeded_and_requeue() {
    let mut d = deployment(2, "nginx:1", rolling(json!(1), json!(0)));
    d["spec"]["progressDeadlineSeconds"] = json!(30);
    let h = hash_of("nginx:1");
    let name = format!("web-{h}");
    let mut r = rs(RsSpec {
        name: &name,
        image: "nginx:1",
        replicas: 2,
        available: 0,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    r["metadata"]["annotations"][DESIRED_REPLICAS] = json!("2");
    r["metadata"]["annotations"][MAX_REPLICAS] = json!("3");
    r["status"] = json!({"replicas": 2, "observedGeneration": 1});
    let status = |lut: &str| {
        json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
        "unavailableReplicas": 2,
        "conditions": [
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
             "message": "Deployment does not have minimum availability.",
             "lastUpdateTime": lut, "lastTransitionTime": lut},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated",
             "message": format!("Created new replica set \"{name}\""),
             "lastUpdateTime": lut, "lastTransitionTime": lut}]})
    };
    d["metadata"]["annotations"] = json!({REVISION: "1"});
    // 20 s ago: nothing to write; look again when the deadline passes (+1 s).
    d["status"] = status("2024-05-01T11:59:40Z");
    let out = run(&[(DEPLOYMENTS, d.clone()), (REPLICASETS, r.clone())]);
    assert!(out.actions.is_empty(), "{:?}", out.actions);
    assert_eq!(out.requeue_after, Some(Duration::from_secs(11)));
    // 31 s ago: timed out.
    d["status"] = status("2024-05-01T11:59:29Z");
    let out = run(&[(DEPLOYMENTS, d), (REPLICASETS, r)]);
    let st = status_update(&out).expect("status");
    let p = condition(st, "Progressing").expect("progressing");
    assert_eq!(
        (p["status"].as_str(), p["reason"].as_str()),
        (Some("False"), Some("ProgressDeadlineExceeded"))
    );
    assert_eq!(
        p["message"],
        format!("ReplicaSet \"{name}\" has timed out progressing.")
    );
    assert_eq!(p["lastTransitionTime"], NOW);
}

#[test]
fn progress_updates_keep_the_transition_time() {
    let mut d = deployment(2, "nginx:1", rolling(json!(1), json!(0)));
    let name = format!("web-{}", hash_of("nginx:1"));
    let mut r = rs(RsSpec {
        name: &name,
        image: "nginx:1",
        replicas: 2,
        available: 1,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    r["metadata"]["annotations"][DESIRED_REPLICAS] = json!("2");
    r["metadata"]["annotations"][MAX_REPLICAS] = json!("3");
    d["metadata"]["annotations"] = json!({REVISION: "1"});
    d["status"] = json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
        "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated",
            "lastUpdateTime": "2024-05-01T11:00:00Z", "lastTransitionTime": "2024-05-01T10:00:00Z"}]});
    let out = run(&[(DEPLOYMENTS, d), (REPLICASETS, r)]);
    let st = status_update(&out).expect("status");
    let p = condition(st, "Progressing").expect("progressing");
    assert_eq!(p["reason"], "ReplicaSetUpdated");
    assert_eq!(
        p["message"],
        format!("ReplicaSet \"{name}\" is progressing.")
    );
    assert_eq!(p["lastTransitionTime"], "2024-05-01T10:00:00Z");
    assert_eq!(p["lastUpdateTime"], NOW);
    assert_eq!(st["status"]["availableReplicas"], 1);
    assert_eq!(st["status"]["readyReplicas"], 1);
    assert_eq!(st["status"]["unavailableReplicas"], 1);
    // maxUnavailable 0: one available of two is below the minimum.
    assert_eq!(condition(st, "Available").expect("a")["status"], "False");
}

#[test]
fn replica_failure_is_copied_from_the_replica_set() {
    let d = deployment(1, "nginx:1", rolling(json!(1), json!(0)));
    let name = format!("web-{}", hash_of("nginx:1"));
    let mut r = rs(RsSpec {
        name: &name,
        image: "nginx:1",
        replicas: 1,
        available: 0,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    r["status"]["conditions"] = json!([{"type": "ReplicaFailure", "status": "True",
        "reason": "FailedCreate", "message": "pods \"x\" is forbidden: quota",
        "lastTransitionTime": "2024-05-01T11:00:00Z"}]);
    let out = run(&[(DEPLOYMENTS, d), (REPLICASETS, r)]);
    let st = status_update(&out).expect("status");
    let f = condition(st, "ReplicaFailure").expect("failure");
    assert_eq!(f["reason"], "FailedCreate");
    assert_eq!(f["lastUpdateTime"], "2024-05-01T11:00:00Z");
}

#[test]
fn hash_collision_bumps_collision_count() {
    let d = deployment(1, "nginx:1", rolling(json!(1), json!(0)));
    let h = hash_of("nginx:1");
    // Someone else's ReplicaSet already has the name (another template, not ours).
    let mut other = rs(RsSpec {
        name: &format!("web-{h}"),
        image: "busybox",
        replicas: 1,
        available: 1,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    other["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
    let out = run(&[(DEPLOYMENTS, d), (REPLICASETS, other)]);
    assert!(creates(&out).is_empty());
    let st = status_update(&out).expect("status");
    assert_eq!(st["status"]["collisionCount"], 1);
    // With the count, another name.
    assert_ne!(compute_hash(&template("nginx:1"), Some(1)), h);
}

#[test]
fn empty_selector_warns_and_does_nothing_else() {
    let mut d = deployment(1, "nginx:1", rolling(json!(1), json!(0)));
    d["spec"]["selector"] = json!({});
    d["metadata"]["generation"] = json!(3);
    let out = run(&[(DEPLOYMENTS, d)]);
    assert_eq!(
        events(&out),
        ["SelectingAll This deployment is selecting all pods. A non-empty selector is required."]
    );
    assert!(creates(&out).is_empty());
    assert_eq!(
        status_update(&out).expect("status")["status"]["observedGeneration"],
        3
    );
}

#[test]
fn replica_sets_that_stop_matching_are_released() {
    let d = deployment(1, "nginx:1", rolling(json!(1), json!(0)));
    let mut r = rs(RsSpec {
        name: "web-x",
        image: "nginx:0",
        replicas: 0,
        available: 0,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    r["metadata"]["labels"]["app"] = json!("other");
    let out = run(&[(DEPLOYMENTS, d), (REPLICASETS, r)]);
    let released = out.actions.iter().any(|a| {
        matches!(a, Action::Patch { name, patch, .. }
        if name == "web-x" && patch["metadata"]["ownerReferences"][0]["$patch"] == "delete"
            && patch["metadata"]["uid"] == "u-web-x")
    });
    assert!(released, "{:?}", out.actions);
}

#[test]
fn orphans_are_adopted_only_after_a_live_check() {
    let d = deployment(1, "nginx:1", rolling(json!(1), json!(0)));
    let mut r = rs(RsSpec {
        name: "web-x",
        image: "nginx:1",
        replicas: 1,
        available: 1,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    r["metadata"]
        .as_object_mut()
        .expect("meta")
        .remove("ownerReferences");
    // The test client reaches no server: the recheck fails and nothing is adopted.
    let (cache, client) = cx_with(&[(DEPLOYMENTS, d), (REPLICASETS, r)]);
    let cx = Cx {
        cache: &cache,
        now: now(),
        client: &client,
    };
    assert!(DeploymentController::new()
        .reconcile(&cx, "ns/web")
        .is_err());
}

#[test]
fn replica_set_events_map_to_deployments() {
    let d = deployment(1, "nginx:1", rolling(json!(1), json!(0)));
    let (cache, _) = cx_with(&[(DEPLOYMENTS, d.clone())]);
    let c = DeploymentController::new();
    // The Deployment's own watch event, as the manager delivers it, feeds the selector index.
    let added = Delta {
        kind: DeltaKind::Added,
        old: None,
        new: Some(std::sync::Arc::new(d)),
    };
    assert_eq!(
        c.keys_for(&Watch::full(DEPLOYMENTS), &added, &cache),
        ["ns/web"]
    );
    let w = Watch::full(REPLICASETS);
    let owned = rs(RsSpec {
        name: "web-x",
        image: "nginx:1",
        replicas: 1,
        available: 1,
        revision: "1",
        created: "t",
    });
    let add = |v: Value| Delta {
        kind: DeltaKind::Added,
        old: None,
        new: Some(std::sync::Arc::new(v)),
    };
    assert_eq!(c.keys_for(&w, &add(owned.clone()), &cache), ["ns/web"]);
    // A stale UID resolves to nothing.
    let mut stale = owned.clone();
    stale["metadata"]["ownerReferences"][0]["uid"] = json!("old-uid");
    assert!(c.keys_for(&w, &add(stale), &cache).is_empty());
    // An orphan: the Deployments selecting it.
    let mut orphan = owned.clone();
    orphan["metadata"]
        .as_object_mut()
        .expect("m")
        .remove("ownerReferences");
    assert_eq!(c.keys_for(&w, &add(orphan.clone()), &cache), ["ns/web"]);
    let mut unlabelled = orphan.clone();
    unlabelled["metadata"]["labels"] = json!({"app": "db"});
    assert!(c.keys_for(&w, &add(unlabelled.clone()), &cache).is_empty());
    // Released by us: the old owner hears of it.
    let upd = Delta {
        kind: DeltaKind::Updated,
        old: Some(std::sync::Arc::new(owned)),
        new: Some(std::sync::Arc::new(unlabelled)),
    };
    assert_eq!(c.keys_for(&w, &upd, &cache), ["ns/web"]);
}

#[test]
fn failed_creation_is_reported_on_the_next_pass() {
    let c = DeploymentController::new();
    let d = deployment(1, "nginx:1", rolling(json!(1), json!(0)));
    let out = run_with(&c, &[(DEPLOYMENTS, d.clone())]);
    let create = out
        .actions
        .iter()
        .find(|a| matches!(a, Action::Create { .. }))
        .expect("create")
        .clone();
    let err = Error::api(
        403,
        "Forbidden",
        "replicasets.apps \"web-x\" is forbidden: exceeded quota",
    );
    assert_eq!(c.on_error(&create, &err), OnError::Retry);
    c.applied("ns/web", &create, Applied::Failed(&err));
    let out = run_with(&c, &[(DEPLOYMENTS, d.clone())]);
    assert!(creates(&out).is_empty());
    let name = create_name(&create);
    let msg = format!("Failed to create new replica set \"{name}\": replicasets.apps \"web-x\" is forbidden: exceeded quota");
    assert_eq!(events(&out), [format!("ReplicaSetCreateError {msg}")]);
    let st = status_update(&out).expect("status");
    let p = condition(st, "Progressing").expect("progressing");
    assert_eq!(
        (
            p["status"].as_str(),
            p["reason"].as_str(),
            p["message"].as_str()
        ),
        (
            Some("False"),
            Some("ReplicaSetCreateError"),
            Some(msg.as_str())
        )
    );
    assert!(out.requeue_after.is_some());
    // Reported once; the next pass tries again.
    let out = run_with(&c, &[(DEPLOYMENTS, d.clone())]);
    assert_eq!(creates(&out).len(), 1);
    // AlreadyExists is retried without a report.
    let exists = Error::api(409, "AlreadyExists", "exists");
    assert_eq!(c.on_error(&create, &exists), OnError::Retry);
    c.applied("ns/web", &create, Applied::Failed(&exists));
    let out = run_with(&c, &[(DEPLOYMENTS, d)]);
    assert_eq!(creates(&out).len(), 1);
}

fn create_name(a: &Action) -> String {
    match a {
        Action::Create { object, .. } => obj::name(object).to_string(),
        _ => String::new(),
    }
}

#[test]
fn deleting_deployment_only_syncs_status() {
    let mut d = deployment(3, "nginx:2", rolling(json!(1), json!(0)));
    d["metadata"]["deletionTimestamp"] = json!("2024-05-01T11:00:00Z");
    let old = rs(RsSpec {
        name: "web-old",
        image: "nginx:1",
        replicas: 3,
        available: 3,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    let out = run(&[(DEPLOYMENTS, d), (REPLICASETS, old)]);
    assert!(creates(&out).is_empty());
    assert!(scales(&out).is_empty());
    let st = status_update(&out).expect("status");
    assert_eq!(st["status"]["replicas"], 3);
    assert_eq!(st["status"]["updatedReplicas"], json!(null));
}

#[test]
fn malformed_deployments_are_skipped() {
    let bad = json!({"metadata": {"name": "web", "namespace": "ns", "uid": "d-1"}, "spec": "nope"});
    assert!(run(&[(DEPLOYMENTS, bad)]).actions.is_empty());
    let mut d = deployment(1, "nginx:1", rolling(json!(1), json!(0)));
    d["spec"]["selector"] = json!({"matchExpressions": [{"key": "a", "operator": "Bogus"}]});
    assert!(run(&[(DEPLOYMENTS, d)]).actions.is_empty());
    let mut d = deployment(1, "nginx:1", json!({"type": "Canary"}));
    d["spec"]["strategy"] = json!({"type": "Canary"});
    let out = run(&[(DEPLOYMENTS, d)]);
    assert!(creates(&out).is_empty());
}
