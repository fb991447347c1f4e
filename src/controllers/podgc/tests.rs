use super::decide::*;
use super::*;
use serde_json::{json, Value};

fn pod(name: &str, phase: &str, created: &str) -> Obj {
    Arc::new(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "creationTimestamp": created},
        "status": {"phase": phase},
    }))
}

fn with(p: &Obj, f: impl FnOnce(&mut Value)) -> Obj {
    let mut v = (**p).clone();
    f(&mut v);
    Arc::new(v)
}

fn facts(pods: &[Obj]) -> Vec<PodFacts> {
    pods.iter().map(|p| PodFacts::of(p)).collect()
}

fn names<'a>(list: &[&'a PodFacts]) -> Vec<&'a str> {
    list.iter().map(|p| p.name.as_str()).collect()
}

fn known(nodes: &[Obj]) -> Nodes {
    nodes
        .iter()
        .map(|n| (obj::name(n).to_string(), out_of_service(n)))
        .collect()
}

const T0: &str = "2024-01-01T00:00:00Z";
const T1: &str = "2024-01-01T00:00:01Z";
const T2: &str = "2024-01-01T00:00:02Z";

#[test]
fn terminated_pods_beyond_the_threshold_go_evicted_first_then_oldest_then_by_name() {
    let evicted = with(&pod("z-evicted", "Failed", T2), |v| {
        v["status"]["reason"] = json!(EVICTED_REASON)
    });
    let pods = facts(&[
        pod("b-old", "Succeeded", T0),
        pod("a-new", "Failed", T2),
        pod("c-mid", "Succeeded", T1),
        pod("a-mid", "Failed", T1),
        evicted,
        pod("no-phase", "", T2),
        pod("running", "Running", T0),
        pod("pending", "Pending", T0),
        pod("unknown", "Unknown", T0),
    ]);
    // Six terminated (a pod without a phase counts, as upstream); keep 2.
    assert_eq!(
        names(&terminated_beyond(&pods, 2)),
        ["z-evicted", "b-old", "a-mid", "c-mid"]
    );
    assert_eq!(names(&terminated_beyond(&pods, 5)), ["z-evicted"]);
    assert!(terminated_beyond(&pods, 6).is_empty());
    assert!(terminated_beyond(&pods, 0).is_empty(), "<= 0 turns it off");
    assert!(terminated_beyond(&pods, -1).is_empty());
    // A pod without a creation time is the oldest.
    let undated = with(&pod("undated", "Failed", ""), |v| {
        v["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("creationTimestamp");
    });
    let pods = facts(&[pod("a", "Failed", T0), undated]);
    assert_eq!(names(&terminated_beyond(&pods, 1)), ["undated"]);
}

fn node(name: &str, ready: Option<&str>, taints: Value) -> Obj {
    let mut n = json!({"metadata": {"name": name}, "spec": {"taints": taints}});
    if let Some(r) = ready {
        n["status"] = json!({"conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": r},
        ]});
    }
    Arc::new(n)
}

fn on(p: &Obj, node: &str, deleting: bool) -> Obj {
    with(p, |v| {
        v["spec"] = json!({"nodeName": node});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!(T2);
        }
    })
}

#[test]
fn terminating_pods_go_from_not_ready_nodes_with_the_out_of_service_taint() {
    let oos = json!([{"key": OUT_OF_SERVICE_TAINT, "effect": "NoSchedule", "value": "x"}]);
    let nodes = [
        node("ready", Some("True"), oos.clone()),
        node("down", Some("False"), oos.clone()),
        node("unknown", Some("Unknown"), oos.clone()),
        node("no-ready", None, oos),
        node(
            "untainted",
            Some("False"),
            json!([{"key": "other", "effect": "NoExecute"}]),
        ),
    ];
    let by_name = known(&nodes);
    let p = pod("p", "Running", T0);
    let pods = facts(&[
        on(&pod("p1", "Running", T1), "down", true),
        on(&p, "ready", true),
        on(&pod("p0", "Running", T0), "unknown", true),
        on(&p, "no-ready", true),
        on(&p, "untainted", true),
        on(&p, "down", false),
        on(&p, "vanished", true),
        with(&p, |v| v["metadata"]["deletionTimestamp"] = json!(T2)),
    ]);
    let got = terminating_out_of_service(&pods, &by_name);
    assert_eq!(names(&got), ["p", "p0", "p1"]);
    assert_eq!(
        got.iter().map(|p| p.node.as_str()).collect::<Vec<_>>(),
        ["no-ready", "unknown", "down"]
    );
}

#[test]
fn orphans_and_unscheduled_terminating_pods() {
    let nodes = [node("here", Some("True"), json!([]))];
    let by_name = known(&nodes);
    let p = pod("p", "Running", T0);
    let pods = facts(&[
        on(&pod("a", "Running", T0), "gone", false),
        on(&pod("b", "Succeeded", T0), "gone", true),
        on(&pod("c", "Running", T0), "here", false),
        on(&pod("d", "Running", T0), "later", false),
        with(&pod("e", "Pending", T0), |v| {
            v["metadata"]["deletionTimestamp"] = json!(T2)
        }),
        p,
    ]);
    let unknown: Vec<String> = unknown_nodes(&pods, &by_name).into_iter().collect();
    assert_eq!(unknown, ["gone", "later"]);
    let gone: HashSet<String> = ["gone".to_string()].into();
    assert_eq!(names(&orphaned(&pods, &gone)), ["a", "b"]);
    assert_eq!(names(&unscheduled_terminating(&pods)), ["e"]);
}

fn at(s: &str) -> SystemTime {
    crate::compat::timefmt::parse_rfc3339(s).unwrap()
}

fn text(v: &Option<Value>) -> String {
    serde_json::to_string(v.as_ref().expect("a patch")).unwrap()
}

#[test]
fn the_status_patch_is_upstreams_two_way_diff() {
    let now = at("2024-05-06T07:08:09Z");
    let running = pod("p", "Running", T0);
    // Terminal pods are deleted as they are.
    for phase in ["Succeeded", "Failed"] {
        assert_eq!(
            fail_patch(&pod("p", phase, T0), Some(&NODE_GONE), now),
            None
        );
    }
    // No condition: the phase only.
    assert_eq!(
        text(&fail_patch(&running, None, now)),
        r#"{"metadata":{"uid":"uid-p"},"status":{"phase":"Failed"}}"#
    );
    // No conditions before: the new list whole.
    assert_eq!(
        text(&fail_patch(&pod("p", "", T0), Some(&NODE_GONE), now)),
        r#"{"metadata":{"uid":"uid-p"},"status":{"conditions":[{"lastProbeTime":null,"lastTransitionTime":"2024-05-06T07:08:09Z","message":"PodGC: node no longer exists","reason":"DeletionByPodGC","status":"True","type":"DisruptionTarget"}],"phase":"Failed"}}"#
    );
    // Other conditions: the new one appended, with the order of the whole list.
    let scheduled = with(&running, |v| {
        v["status"]["conditions"] = json!([
            {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": T0},
            {"type": "Ready", "status": "False", "lastTransitionTime": T1, "reason": "x"},
        ])
    });
    assert_eq!(
        text(&fail_patch(&scheduled, Some(&NODE_GONE), now)),
        r#"{"metadata":{"uid":"uid-p"},"status":{"$setElementOrder/conditions":[{"type":"PodScheduled"},{"type":"Ready"},{"type":"DisruptionTarget"}],"conditions":[{"lastProbeTime":null,"lastTransitionTime":"2024-05-06T07:08:09Z","message":"PodGC: node no longer exists","reason":"DeletionByPodGC","status":"True","type":"DisruptionTarget"}],"phase":"Failed"}}"#
    );
    // A DisruptionTarget already True: its transition time stays, reason and message change.
    let evicting = with(&running, |v| {
        v["status"]["conditions"] = json!([
            {"type": "DisruptionTarget", "status": "True", "lastProbeTime": null,
             "lastTransitionTime": T1, "reason": "EvictionByEvictionAPI",
             "message": "Eviction API: evicting"},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": T0},
        ])
    });
    assert_eq!(
        text(&fail_patch(&evicting, Some(&NODE_GONE), now)),
        r#"{"metadata":{"uid":"uid-p"},"status":{"$setElementOrder/conditions":[{"type":"DisruptionTarget"},{"type":"PodScheduled"}],"conditions":[{"message":"PodGC: node no longer exists","reason":"DeletionByPodGC","type":"DisruptionTarget"}],"phase":"Failed"}}"#
    );
    // False before: the status and the transition time change too; a field Go does not know
    // is not in the diff.
    let was_false = with(&running, |v| {
        v["status"]["conditions"] = json!([
            {"type": "DisruptionTarget", "status": "False", "lastTransitionTime": T1,
             "reason": "DeletionByPodGC", "message": "PodGC: node no longer exists",
             "extra": 1},
        ])
    });
    assert_eq!(
        text(&fail_patch(&was_false, Some(&NODE_GONE), now)),
        r#"{"metadata":{"uid":"uid-p"},"status":{"$setElementOrder/conditions":[{"type":"DisruptionTarget"}],"conditions":[{"lastTransitionTime":"2024-05-06T07:08:09Z","status":"True","type":"DisruptionTarget"}],"phase":"Failed"}}"#
    );
    // The same condition already there: the phase alone.
    let same = with(&running, |v| {
        v["status"]["conditions"] = json!([
            {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": T1,
             "reason": "DeletionByPodGC", "message": "PodGC: node no longer exists"},
        ])
    });
    assert_eq!(
        text(&fail_patch(&same, Some(&NODE_GONE), now)),
        r#"{"metadata":{"uid":"uid-p"},"status":{"phase":"Failed"}}"#
    );
    // v1.34 and later: the pod's generation in the condition (none for generation 0).
    let generation = with(&pod("p", "", T0), |v| {
        v["metadata"]["generation"] = json!(3)
    });
    assert_eq!(
        text(&fail_patch(&generation, Some(&NODE_GONE), now)),
        r#"{"metadata":{"uid":"uid-p"},"status":{"conditions":[{"lastProbeTime":null,"lastTransitionTime":"2024-05-06T07:08:09Z","message":"PodGC: node no longer exists","observedGeneration":3,"reason":"DeletionByPodGC","status":"True","type":"DisruptionTarget"}],"phase":"Failed"}}"#
    );
    let evicting = with(&evicting, |v| v["metadata"]["generation"] = json!(2));
    assert_eq!(
        text(&fail_patch(&evicting, Some(&NODE_GONE), now)),
        r#"{"metadata":{"uid":"uid-p"},"status":{"$setElementOrder/conditions":[{"type":"DisruptionTarget"},{"type":"PodScheduled"}],"conditions":[{"message":"PodGC: node no longer exists","observedGeneration":2,"reason":"DeletionByPodGC","type":"DisruptionTarget"}],"phase":"Failed"}}"#
    );
}

#[test]
fn counters_appear_with_their_first_series() {
    // Other tests may have counted: look only at this namespace's series.
    let ns = format!("counters-{}", fastrand::u32(..));
    let series = |name: &str| -> Vec<String> {
        metric_families()
            .into_iter()
            .filter(|f| f.name == name)
            .flat_map(|f| f.samples)
            .filter(|s| s.labels.iter().any(|(_, v)| *v == ns))
            .map(|s| format!("{:?} {:?}", s.labels, s.value))
            .collect()
    };
    assert!(series("pod_gc_collector_force_delete_pods_total").is_empty());
    count(&ns, Reason::Orphaned, false);
    count(&ns, Reason::Orphaned, true);
    count(&ns, Reason::OutOfService, false);
    let total = series("pod_gc_collector_force_delete_pods_total");
    assert_eq!(total.len(), 2, "{total:?}");
    assert!(total[0].contains("\"out-of-service\"") && total[0].ends_with("Scalar(1.0)"));
    assert!(total[1].contains("\"orphaned\"") && total[1].ends_with("Scalar(2.0)"));
    let errors = series("pod_gc_collector_force_delete_pod_errors_total");
    assert_eq!(errors.len(), 1);
    assert!(errors[0].contains("\"orphaned\"") && errors[0].ends_with("Scalar(1.0)"));
    let f = metric_families();
    let help = &f[0].help;
    assert!(help.starts_with("[ALPHA] Number of pods that are being forcefully deleted"));
}

#[test]
fn missing_nodes_are_read_live_once_their_quarantine_is_over() {
    use crate::sandbox::{Sandbox, SandboxOptions};
    let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
    sb.create(&NODES, json!({"metadata": {"name": "late"}}))
        .expect("node");
    let cfg = crate::api::kubeconfig::RestConfig {
        server: sb.url(),
        source: "test".into(),
        ..Default::default()
    };
    let client = Client::new(&cfg, 0.0, 1, "test").expect("client");
    let gc = PodGc::new(12500);
    let unknown: std::collections::BTreeSet<String> =
        ["late".to_string(), "gone".to_string()].into();
    let nodes = known(&[node("here", Some("True"), json!([]))]);
    // Quarantined: nothing is read yet.
    sb.clear_requests();
    assert!(gc.inner.gone_nodes(&client, &unknown, &nodes).is_empty());
    assert!(sb.requests().is_empty());
    assert_eq!(gc.inner.missing.stats().retries_total, 2);
    // Due now (as after 40 s): "late" exists after all, "gone" does not.
    for n in &unknown {
        gc.inner.missing.add_after(n.clone(), Duration::ZERO);
    }
    let gone = gc.inner.gone_nodes(&client, &Default::default(), &nodes);
    assert_eq!(gone, ["gone".to_string()].into());
    let gets: Vec<String> = sb.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(gets.len(), 2, "{gets:?}");
    // Due, but in the cache by now: not read.
    gc.inner.missing.add_after("here".into(), Duration::ZERO);
    sb.clear_requests();
    assert!(gc
        .inner
        .gone_nodes(&client, &Default::default(), &nodes)
        .is_empty());
    assert!(sb.requests().is_empty());
}
