//! Unit tests of whole passes: a cache built from a few objects, one reconcile, the actions.

use super::util::*;
use super::*;
use crate::api::Kind;
use crate::controllers::testing::cx_with;
use serde_json::json;
use std::time::{Duration, SystemTime};

const NOW: &str = "2024-05-01T12:00:00Z";

fn now() -> SystemTime {
    crate::compat::timefmt::parse_rfc3339(NOW).expect("time")
}

fn template(image: &str) -> Value {
    json!({"metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": image}]}})
}

fn deployment(replicas: i64, image: &str, strategy: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "uid": "d-1", "generation": 1,
            "resourceVersion": "10"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": template(image),
            "strategy": strategy,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
    })
}

fn rolling(surge: Value, unavailable: Value) -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
}

struct RsSpec<'a> {
    name: &'a str,
    image: &'a str,
    replicas: i64,
    available: i64,
    revision: &'a str,
    created: &'a str,
}

fn rs(s: RsSpec) -> Value {
    let hash = s.name.rsplit('-').next().unwrap_or("h");
    let mut t = template(s.image);
    t["metadata"]["labels"]["pod-template-hash"] = json!(hash);
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": s.name, "namespace": "ns", "uid": format!("u-{}", s.name),
            "creationTimestamp": s.created, "generation": 1, "resourceVersion": "5",
            "labels": {"app": "web", "pod-template-hash": hash},
            "annotations": {REVISION: s.revision},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": "d-1", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"replicas": s.replicas,
            "selector": {"matchLabels": {"app": "web", "pod-template-hash": hash}},
            "template": t},
        "status": {"replicas": s.replicas, "readyReplicas": s.available,
            "availableReplicas": s.available, "observedGeneration": 1},
    })
}

fn run_with(c: &DeploymentController, objects: &[(Kind, Value)]) -> Outcome {
    let (cache, client) = cx_with(objects);
    let cx = Cx {
        cache: &cache,
        now: now(),
        client: &client,
    };
    c.reconcile(&cx, "ns/web").expect("reconcile")
}

fn run(objects: &[(Kind, Value)]) -> Outcome {
    run_with(&DeploymentController::new(), objects)
}

fn creates(o: &Outcome) -> Vec<&Value> {
    o.actions
        .iter()
        .filter_map(|a| match a {
            Action::Create { object, .. } => Some(object),
            _ => None,
        })
        .collect()
}

/// (name, replicas) of every scaling patch.
fn scales(o: &Outcome) -> Vec<(String, i64)> {
    o.actions
        .iter()
        .filter_map(|a| match a {
            Action::Patch { name, patch, .. } => {
                Some((name.clone(), patch.at("/spec/replicas")?.as_i64()?))
            }
            _ => None,
        })
        .collect()
}

fn events(o: &Outcome) -> Vec<String> {
    o.actions
        .iter()
        .filter_map(|a| match a {
            Action::Event(e) => Some(format!("{} {}", e.reason, e.message)),
            _ => None,
        })
        .collect()
}

fn deletes(o: &Outcome) -> Vec<String> {
    o.actions
        .iter()
        .filter_map(|a| match a {
            Action::Delete { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

fn status_update(o: &Outcome) -> Option<&Value> {
    o.actions.iter().find_map(|a| match a {
        Action::UpdateSubresource {
            object,
            subresource: "status",
            ..
        } => Some(object),
        _ => None,
    })
}

fn condition<'a>(d: &'a Value, t: &str) -> Option<&'a Value> {
    d.at("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

fn hash_of(image: &str) -> String {
    compute_hash(&template(image), None)
}

/// What the API server answers to the creation in `out`, told to the controller as done.
fn created(c: &DeploymentController, out: &Outcome) -> Value {
    let a = out
        .actions
        .iter()
        .find(|a| matches!(a, Action::Create { .. }))
        .expect("a create");
    let Action::Create { object, .. } = a else {
        unreachable!()
    };
    let mut rs = object.clone();
    rs["metadata"]["uid"] = json!(format!("u-{}", obj::name(object)));
    rs["metadata"]["creationTimestamp"] = json!(NOW);
    rs["metadata"]["generation"] = json!(1);
    rs["metadata"]["resourceVersion"] = json!("20");
    c.applied("ns/web", a, Applied::Done(Some(&rs)));
    rs
}

#[test]
fn new_deployment_creates_its_replica_set() {
    let c = DeploymentController::new();
    let d = deployment(3, "nginx:1", rolling(json!("25%"), json!("25%")));
    let out = run_with(&c, &[(DEPLOYMENTS, d.clone())]);
    // The pass ends with the creation.
    assert_eq!(out.actions.len(), 1, "{:?}", out.actions);
    let cr = creates(&out);
    let h = hash_of("nginx:1");
    let rs = cr[0];
    assert_eq!(rs["metadata"]["name"], format!("web-{h}"));
    assert_eq!(rs["metadata"]["labels"]["pod-template-hash"], h.as_str());
    assert_eq!(
        rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"],
        h.as_str()
    );
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        h.as_str()
    );
    assert_eq!(rs["spec"]["selector"]["matchLabels"]["app"], "web");
    assert_eq!(rs["spec"]["replicas"], 3);
    assert_eq!(rs["metadata"]["annotations"][REVISION], "1");
    assert_eq!(rs["metadata"]["annotations"][DESIRED_REPLICAS], "3");
    assert_eq!(rs["metadata"]["annotations"][MAX_REPLICAS], "4");
    let owner = &rs["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["uid"].as_str()),
        (Some("Deployment"), Some("d-1"))
    );
    assert_eq!(owner["controller"], true);

    // It was created: the next pass records what upstream records right after creating.
    let made = created(&c, &out);
    let out = run_with(&c, &[(DEPLOYMENTS, d.clone()), (REPLICASETS, made.clone())]);
    assert_eq!(
        events(&out),
        [format!(
            "ScalingReplicaSet Scaled up replica set web-{h} from 0 to 3"
        )]
    );
    let st = status_update(&out).expect("status update");
    assert_eq!(st["metadata"]["annotations"][REVISION], "1");
    assert_eq!(st["status"]["observedGeneration"], 1);
    let p = condition(st, "Progressing").expect("progressing");
    assert_eq!(p["reason"], "NewReplicaSetCreated");
    assert_eq!(p["message"], format!("Created new replica set \"web-{h}\""));
    assert_eq!(p["lastUpdateTime"], NOW);
    let a = condition(st, "Available").expect("available");
    assert_eq!(
        (a["status"].as_str(), a["reason"].as_str()),
        (Some("False"), Some("MinimumReplicasUnavailable"))
    );
    assert_eq!(st["status"]["unavailableReplicas"], 3);
    assert!(matches!(
        out.actions.last(),
        Some(Action::UpdateSubresource { .. })
    ));
    // Once only.
    let out = run_with(&c, &[(DEPLOYMENTS, d), (REPLICASETS, made)]);
    assert!(events(&out).is_empty());
    let p = condition(status_update(&out).expect("status"), "Progressing").cloned();
    assert_eq!(p.expect("p")["reason"], "FoundNewReplicaSet");
}

#[test]
fn existing_replica_set_with_another_hash_is_the_new_one() {
    // A ReplicaSet made by another controller manager: same template, another hash value.
    let out = run(&[
        (
            DEPLOYMENTS,
            deployment(2, "nginx:1", rolling(json!(1), json!(0))),
        ),
        (
            REPLICASETS,
            rs(RsSpec {
                name: "web-5d8f7c6b9",
                image: "nginx:1",
                replicas: 2,
                available: 2,
                revision: "3",
                created: "2024-01-01T00:00:00Z",
            }),
        ),
    ]);
    assert!(creates(&out).is_empty(), "{:?}", out.actions);
    assert!(scales(&out).iter().all(|(_, r)| *r == 2));
    let d = status_update(&out).expect("status");
    assert_eq!(d["metadata"]["annotations"][REVISION], "3");
    let p = condition(d, "Progressing").expect("progressing");
    // Found, then complete in the same pass.
    assert_eq!(p["reason"], "NewReplicaSetAvailable");
    assert_eq!(
        p["message"],
        "ReplicaSet \"web-5d8f7c6b9\" has successfully progressed."
    );
    assert_eq!(d["status"]["availableReplicas"], 2);
    assert_eq!(d["status"]["updatedReplicas"], 2);
}

#[test]
fn steady_state_writes_nothing() {
    let h = hash_of("nginx:1");
    let name = format!("web-{h}");
    let mut d = deployment(2, "nginx:1", rolling(json!(1), json!(0)));
    let mut r = rs(RsSpec {
        name: &name,
        image: "nginx:1",
        replicas: 2,
        available: 2,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    r["metadata"]["annotations"][DESIRED_REPLICAS] = json!("2");
    r["metadata"]["annotations"][MAX_REPLICAS] = json!("3");
    let first = run(&[(DEPLOYMENTS, d.clone()), (REPLICASETS, r.clone())]);
    let st = status_update(&first).expect("status").clone();
    d["metadata"]["annotations"] = st["metadata"]["annotations"].clone();
    d["status"] = st["status"].clone();
    let again = run(&[(DEPLOYMENTS, d), (REPLICASETS, r)]);
    assert!(again.actions.is_empty(), "{:?}", again.actions);
    assert_eq!(again.requeue_after, None);
}

#[test]
fn rolling_update_surge_one_unavailable_zero() {
    let mut d = deployment(3, "nginx:2", rolling(json!(1), json!(0)));
    d["metadata"]["generation"] = json!(2);
    let old = rs(RsSpec {
        name: "web-old",
        image: "nginx:1",
        replicas: 3,
        available: 3,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    // Step 1: a new ReplicaSet of 1 (3 + surge 1), nothing scaled down yet.
    let out = run(&[(DEPLOYMENTS, d.clone()), (REPLICASETS, old.clone())]);
    let c = creates(&out);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["spec"]["replicas"], 1);
    assert_eq!(c[0]["metadata"]["annotations"][REVISION], "2");
    assert!(scales(&out).is_empty(), "{:?}", out.actions);

    // Step 2: the new pod is not available yet: nothing to do.
    let new_name = format!("web-{}", hash_of("nginx:2"));
    let new = |replicas, available| {
        rs(RsSpec {
            name: &new_name,
            image: "nginx:2",
            replicas,
            available,
            revision: "2",
            created: "2024-01-02T00:00:00Z",
        })
    };
    let out = run(&[
        (DEPLOYMENTS, d.clone()),
        (REPLICASETS, old.clone()),
        (REPLICASETS, new(1, 0)),
    ]);
    assert!(scales(&out).is_empty(), "{:?}", out.actions);
    let st = status_update(&out).expect("status");
    assert_eq!(st["metadata"]["annotations"][REVISION], "2");

    // Step 3: it became available: the old one goes to 2.
    let out = run(&[
        (DEPLOYMENTS, d.clone()),
        (REPLICASETS, old.clone()),
        (REPLICASETS, new(1, 1)),
    ]);
    assert_eq!(scales(&out), [("web-old".to_string(), 2)]);
    assert_eq!(
        events(&out),
        ["ScalingReplicaSet Scaled down replica set web-old from 3 to 2"]
    );

    // Step 4: old scaled to 2, but its third pod not deleted yet: the new one waits, so
    // that there are never more than replicas + maxSurge pods.
    let mut old2 = old.clone();
    old2["spec"]["replicas"] = json!(2);
    let out = run(&[
        (DEPLOYMENTS, d.clone()),
        (REPLICASETS, old2.clone()),
        (REPLICASETS, new(1, 1)),
    ]);
    assert!(scales(&out).is_empty(), "{:?}", out.actions);

    // Step 5: old at 2 pods: the new one may grow to 2.
    old2["status"] =
        json!({"replicas": 2, "availableReplicas": 2, "readyReplicas": 2, "observedGeneration": 1});
    let out = run(&[
        (DEPLOYMENTS, d.clone()),
        (REPLICASETS, old2),
        (REPLICASETS, new(1, 1)),
    ]);
    assert_eq!(scales(&out), [(new_name.clone(), 2)]);
    assert_eq!(
        events(&out),
        [format!(
            "ScalingReplicaSet Scaled up replica set {new_name} from 1 to 2"
        )]
    );
}

#[test]
fn a_new_replica_set_starts_within_the_pods_old_ones_still_have() {
    let mut d = deployment(3, "nginx:2", rolling(json!(1), json!(0)));
    d["metadata"]["generation"] = json!(2);
    // Scaled down to 2 a moment ago; its third pod is still there.
    let mut old = rs(RsSpec {
        name: "web-old",
        image: "nginx:1",
        replicas: 2,
        available: 3,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    old["status"]["replicas"] = json!(3);
    let out = run(&[(DEPLOYMENTS, d.clone()), (REPLICASETS, old.clone())]);
    let c = creates(&out);
    assert_eq!(c.len(), 1);
    assert_eq!(
        c[0]["spec"]["replicas"], 1,
        "3 pods + 1 surge: room for one"
    );
    old["status"]["replicas"] = json!(2);
    let out = run(&[(DEPLOYMENTS, d), (REPLICASETS, old)]);
    assert_eq!(creates(&out)[0]["spec"]["replicas"], 2);
}

#[test]
fn rolling_update_scales_down_unhealthy_old_replicas_first() {
    let d = deployment(4, "nginx:2", rolling(json!(1), json!(1)));
    // Two old ReplicaSets, the older one with 2 unavailable replicas.
    let a = rs(RsSpec {
        name: "web-a",
        image: "nginx:0",
        replicas: 2,
        available: 0,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    let b = rs(RsSpec {
        name: "web-b",
        image: "nginx:1",
        replicas: 3,
        available: 3,
        revision: "2",
        created: "2024-01-02T00:00:00Z",
    });
    let new_name = format!("web-{}", hash_of("nginx:2"));
    let n = rs(RsSpec {
        name: &new_name,
        image: "nginx:2",
        replicas: 0,
        available: 0,
        revision: "3",
        created: "2024-01-03T00:00:00Z",
    });
    let out = run(&[
        (DEPLOYMENTS, d),
        (REPLICASETS, a),
        (REPLICASETS, b),
        (REPLICASETS, n),
    ]);
    // All 5 pods, min available 3, new has 0 unavailable: 2 may go, the unhealthy ones.
    assert_eq!(scales(&out), [("web-a".to_string(), 0)]);
}

#[test]
fn proportional_scaling_during_a_rollout() {
    // Deployment scaled 10 -> 15 while rolling (surge 3): old 8 + new 5 were sized for 10 (max 13).
    let d = deployment(15, "nginx:2", rolling(json!(3), json!(2)));
    let mut old = rs(RsSpec {
        name: "web-old",
        image: "nginx:1",
        replicas: 8,
        available: 8,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    let new_name = format!("web-{}", hash_of("nginx:2"));
    let mut new = rs(RsSpec {
        name: &new_name,
        image: "nginx:2",
        replicas: 5,
        available: 0,
        revision: "2",
        created: "2024-01-02T00:00:00Z",
    });
    for r in [&mut old, &mut new] {
        r["metadata"]["annotations"][DESIRED_REPLICAS] = json!("10");
        r["metadata"]["annotations"][MAX_REPLICAS] = json!("13");
    }
    let out = run(&[(DEPLOYMENTS, d), (REPLICASETS, old), (REPLICASETS, new)]);
    let mut s = scales(&out);
    s.sort();
    // 18 allowed, 13 there: +5 split 8:5 -> +3 / +2 (8*18/13 = 11.08, 5*18/13 = 6.92).
    let mut want = vec![("web-old".to_string(), 11), (new_name.clone(), 7)];
    want.sort();
    assert_eq!(s, want);
    // The annotations follow the new size.
    for a in &out.actions {
        if let Action::Patch { patch, .. } = a {
            assert_eq!(patch["metadata"]["annotations"][DESIRED_REPLICAS], "15");
            assert_eq!(patch["metadata"]["annotations"][MAX_REPLICAS], "18");
        }
    }
    assert!(events(&out)
        .contains(&"ScalingReplicaSet Scaled up replica set web-old from 8 to 11".to_string()));
    // No new ReplicaSet, no rollout step in a scaling pass.
    assert!(creates(&out).is_empty());
}

/// Three ReplicaSets of 1 sized for 3 (surge 0), the Deployment scaled to `replicas`.
fn three_of_one(replicas: i64) -> Outcome {
    let d = deployment(replicas, "nginx:3", rolling(json!(0), json!(1)));
    let mut all = vec![(DEPLOYMENTS, d)];
    for (i, img) in ["nginx:1", "nginx:2", "nginx:3"].iter().enumerate() {
        let name = if i == 2 {
            format!("web-{}", hash_of(img))
        } else {
            format!("web-r{i}")
        };
        let mut r = rs(RsSpec {
            name: &name,
            image: img,
            replicas: 1,
            available: 1,
            revision: &(i + 1).to_string(),
            created: &format!("2024-01-0{}T00:00:00Z", i + 1),
        });
        r["metadata"]["annotations"][DESIRED_REPLICAS] = json!("3");
        r["metadata"]["annotations"][MAX_REPLICAS] = json!("3");
        all.push((REPLICASETS, r));
    }
    run(&all)
}

#[test]
fn proportional_leftover_goes_to_the_largest() {
    // Up to 4: every share rounds to 0 (1 * 4/3); the leftover goes to the first of the
    // equally large ones, the newest when scaling up.
    let out = three_of_one(4);
    let newest = format!("web-{}", hash_of("nginx:3"));
    let up: Vec<(String, i64)> = scales(&out).into_iter().filter(|(_, r)| *r != 1).collect();
    assert_eq!(up, [(newest.clone(), 2)]);
    assert_eq!(
        events(&out),
        [format!(
            "ScalingReplicaSet Scaled up replica set {newest} from 1 to 2"
        )]
    );
    // The others get the new annotations only.
    assert_eq!(scales(&out).len(), 3);
    // Down to 2: the oldest gives up its replica.
    let out = three_of_one(2);
    let down: Vec<(String, i64)> = scales(&out).into_iter().filter(|(_, r)| *r != 1).collect();
    assert_eq!(down, [("web-r0".to_string(), 0)]);
    assert_eq!(
        events(&out),
        ["ScalingReplicaSet Scaled down replica set web-r0 from 1 to 0"]
    );
}

#[test]
fn paused_deployment_does_not_roll_but_scales() {
    let mut d = deployment(5, "nginx:2", rolling(json!(1), json!(0)));
    d["spec"]["paused"] = json!(true);
    let mut old = rs(RsSpec {
        name: "web-old",
        image: "nginx:1",
        replicas: 3,
        available: 3,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    old["metadata"]["annotations"][DESIRED_REPLICAS] = json!("3");
    let out = run(&[(DEPLOYMENTS, d), (REPLICASETS, old)]);
    assert!(creates(&out).is_empty());
    assert_eq!(scales(&out), [("web-old".to_string(), 5)]);
    let st = status_update(&out).expect("status");
    let p = condition(st, "Progressing").expect("progressing");
    assert_eq!(
        (p["status"].as_str(), p["reason"].as_str()),
        (Some("Unknown"), Some("DeploymentPaused"))
    );
    assert_eq!(p["message"], "Deployment is paused");
}

#[test]
fn resumed_deployment_records_it() {
    let mut d = deployment(1, "nginx:1", rolling(json!(1), json!(0)));
    d["status"] = json!({"conditions": [{"type": "Progressing", "status": "Unknown",
        "reason": "DeploymentPaused", "message": "Deployment is paused",
        "lastUpdateTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"}]});
    let out = run(&[(DEPLOYMENTS, d)]);
    let st = status_update(&out).expect("status");
    let p = condition(st, "Progressing").expect("progressing");
    assert_eq!(
        (p["reason"].as_str(), p["message"].as_str()),
        (Some("DeploymentResumed"), Some("Deployment is resumed"))
    );
    // Unknown -> Unknown: the transition time stays.
    assert_eq!(p["lastTransitionTime"], "2024-01-01T00:00:00Z");
    assert_eq!(p["lastUpdateTime"], NOW);
    assert_eq!(creates(&out).len(), 1);
}

#[test]
fn recreate_scales_old_down_then_waits_for_pods() {
    let d = deployment(2, "nginx:2", json!({"type": "Recreate"}));
    let old = rs(RsSpec {
        name: "web-old",
        image: "nginx:1",
        replicas: 2,
        available: 2,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    let out = run(&[(DEPLOYMENTS, d.clone()), (REPLICASETS, old.clone())]);
    assert_eq!(scales(&out), [("web-old".to_string(), 0)]);
    assert!(creates(&out).is_empty());

    // Scaled to 0 but a pod is still there (terminating): wait.
    let mut old0 = old.clone();
    old0["spec"]["replicas"] = json!(0);
    old0["status"] = json!({"replicas": 0, "observedGeneration": 1});
    let pod = json!({"metadata": {"name": "web-old-x", "namespace": "ns", "uid": "p1",
        "labels": {"app": "web"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-old",
            "uid": "u-web-old", "controller": true}]},
        "status": {"phase": "Running"}});
    let out = run(&[
        (DEPLOYMENTS, d.clone()),
        (REPLICASETS, old0.clone()),
        (PODS, pod.clone()),
    ]);
    assert!(creates(&out).is_empty());
    assert!(scales(&out).is_empty());

    // A finished pod does not count.
    let mut done = pod.clone();
    done["status"]["phase"] = json!("Succeeded");
    let out = run(&[
        (DEPLOYMENTS, d.clone()),
        (REPLICASETS, old0.clone()),
        (PODS, done),
    ]);
    let c = creates(&out);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["spec"]["replicas"], 2);
    assert_eq!(c[0]["metadata"]["annotations"][MAX_REPLICAS], "2");
}

#[test]
fn recreate_pod_deletion_wakes_the_deployment_when_none_remain() {
    let d = deployment(2, "nginx:2", json!({"type": "Recreate"}));
    let old = rs(RsSpec {
        name: "web-old",
        image: "nginx:1",
        replicas: 0,
        available: 0,
        revision: "1",
        created: "2024-01-01T00:00:00Z",
    });
    let pod = |n: &str| {
        json!({"metadata": {"name": n, "namespace": "ns", "uid": n,
        "labels": {"app": "web"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-old",
            "uid": "u-web-old", "controller": true}]}})
    };
    let (cache, _) = cx_with(&[(DEPLOYMENTS, d), (REPLICASETS, old), (PODS, pod("p2"))]);
    let c = DeploymentController::new();
    let gone = Delta {
        kind: DeltaKind::Deleted,
        old: Some(std::sync::Arc::new(pod("p1"))),
        new: None,
    };
    let w = Watch::full(PODS);
    assert!(c.keys_for(&w, &gone, &cache).is_empty());
    cache.store(PODS).observe_delete("ns/p2");
    assert_eq!(c.keys_for(&w, &gone, &cache), ["ns/web"]);
}

#[test]
fn history_cleanup_deletes_oldest_scaled_down_revisions() {
    let mut d = deployment(1, "nginx:9", rolling(json!(1), json!(0)));
    d["spec"]["revisionHistoryLimit"] = json!(2);
    let new_name = format!("web-{}", hash_of("nginx:9"));
    let mut objs = vec![];
    for (i, n) in ["a", "b", "c", "d"].iter().enumerate() {
        let mut r = rs(RsSpec {
            name: &format!("web-{n}"),
            image: &format!("nginx:{i}"),
            replicas: 0,
            available: 0,
            revision: &(i + 1).to_string(),
            created: "2024-01-01T00:00:00Z",
        });
        r["status"] = json!({"replicas": 0, "observedGeneration": 1});
        objs.push((REPLICASETS, r));
    }
    // web-a still reports a pod: kept (and not replaced by the next one).
    objs[0].1["status"]["replicas"] = json!(1);
    let mut n = rs(RsSpec {
        name: &new_name,
        image: "nginx:9",
        replicas: 1,
        available: 1,
        revision: "5",
        created: "2024-01-02T00:00:00Z",
    });
    n["metadata"]["annotations"][DESIRED_REPLICAS] = json!("1");
    n["metadata"]["annotations"][MAX_REPLICAS] = json!("2");
    objs.push((REPLICASETS, n));
    d["status"] = json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 1});
    // Not complete yet (web-a's pod): no cleanup.
    let mut all = vec![(DEPLOYMENTS, d.clone())];
    all.extend(objs.clone());
    assert!(deletes(&run(&all)).is_empty());
    // Complete: 4 old, limit 2 -> the two lowest revisions go, but web-a is skipped.
    d["status"] = json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1});
    let mut all = vec![(DEPLOYMENTS, d)];
    all.extend(objs);
    assert_eq!(deletes(&run(&all)), ["web-b"]);
}

mod conditions;
