//! horizontal-pod-autoscaler-controller scenarios, against the sandbox always and a real
//! kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`, which also needs
//! `KCM_E2E_METRICS_HOST` and the apiserver's aggregation-layer flags: see
//! `common/metrics_server.rs`). The target is a ReplicaSet whose pods the test makes and
//! marks running and ready itself (no replicaset controller runs), so the only writer of its
//! `spec.replicas` is the autoscaler. Syncs every second (`--horizontal-pod-autoscaler-sync-period=1s`).

use crate::common::metrics_server::feed;
use crate::common::*;
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{EVENTS, HPAS, PODS, REPLICASETS};
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn start(t: &Target, tag: &str) -> Kcm {
    let named = t
        .edgekcm_args()
        .iter()
        .any(|a| a.starts_with("--controllers"));
    let mut extra = vec!["--horizontal-pod-autoscaler-sync-period=1s"];
    if !named {
        extra.push("--controllers=horizontal-pod-autoscaler-controller");
    }
    Kcm::start(t, tag, &extra)
}

fn replicaset(admin: &Client, ns: &str, name: &str, replicas: i64) {
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}}});
    admin
        .create(&REPLICASETS, Some(ns), &rs)
        .expect("create replicaset");
}

/// A pod of `app` requesting 100m CPU, running and ready for long.
fn ready_pod(admin: &Client, ns: &str, app: &str, name: &str) {
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns,
            "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
            "resources": {"requests": {"cpu": "100m"}}}]}});
    let mut p = admin.create(&PODS, Some(ns), &p).expect("create pod");
    let long_ago = "2020-01-01T00:00:00Z";
    p["status"] = json!({"phase": "Running", "startTime": long_ago,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": long_ago}]});
    admin
        .update_subresource(&PODS, &p, "status")
        .expect("pod status");
}

fn hpa(admin: &Client, ns: &str, name: &str, target: &str, spec: Value) {
    let mut s = json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": target},
        "minReplicas": 1, "maxReplicas": 4});
    for (k, v) in spec.as_object().expect("spec") {
        s[k] = v.clone();
    }
    let h = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": ns}, "spec": s});
    admin.create(&HPAS, Some(ns), &h).expect("create hpa");
}

fn cpu(target: i64) -> Value {
    json!([{"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": target}}}])
}

fn replicas(admin: &Client, ns: &str, name: &str) -> i64 {
    admin.get(&REPLICASETS, Some(ns), name).expect("rs")["spec"]["replicas"]
        .as_i64()
        .unwrap_or(-1)
}

fn wait_replicas(admin: &Client, ns: &str, name: &str, want: i64) {
    eventually(LIMIT, &format!("{name} at {want} replicas"), || {
        (replicas(admin, ns, name) == want).then_some(())
    });
}

fn condition(h: &Value, t: &str) -> (String, String) {
    h["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == t))
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .unwrap_or_default()
}

/// The HPA once `f` holds for it.
fn wait_hpa(admin: &Client, ns: &str, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    eventually(LIMIT, what, || {
        let h = admin.get(&HPAS, Some(ns), name).ok()?;
        f(&h).then_some(h)
    })
}

/// An Event of the HPA with this reason and message.
fn wait_event(admin: &Client, ns: &str, hpa: &str, reason: &str, message: &str) -> Value {
    eventually(LIMIT, &format!("{reason} event {message:?}"), || {
        admin
            .list(&EVENTS, Some(ns), &ListOptions::default())
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e["involvedObject"]["name"] == hpa
                    && e["involvedObject"]["kind"] == "HorizontalPodAutoscaler"
                    && e["reason"] == reason
                    && e["message"] == message
            })
    })
}

/// With `KCM_E2E_HPA_DUMP=<file>`: the HPAs' status and Events of `ns`, times and names
/// blanked, for a side-by-side comparison of two controller managers.
fn dump(admin: &Client, ns: &str) {
    let Ok(path) = std::env::var("KCM_E2E_HPA_DUMP") else {
        return;
    };
    let mut out = String::new();
    for h in admin
        .list(&HPAS, Some(ns), &ListOptions::default())
        .expect("hpas")
        .items
    {
        let mut st = h["status"].clone();
        st["lastScaleTime"] = json!("T");
        for c in st["conditions"].as_array_mut().into_iter().flatten() {
            c["lastTransitionTime"] = json!("T");
        }
        out.push_str(&format!("hpa {} {st}\n", h["metadata"]["name"]));
    }
    let mut evs: Vec<String> = admin
        .list(&EVENTS, Some(ns), &ListOptions::default())
        .expect("events")
        .items
        .iter()
        .map(|e| {
            format!(
                "event {} {} {} {} {} {}",
                e["involvedObject"]["name"],
                e["type"],
                e["reason"],
                e["message"],
                e["source"],
                e["count"]
            )
        })
        .collect();
    evs.sort();
    out.push_str(&evs.join("\n"));
    std::fs::write(path, out).expect("dump");
}

/// CPU over target: scaled up to maxReplicas. Under target with a scale-down policy of one
/// pod a minute and no stabilization window: one pod down, then held by the policy.
fn scenario_cpu_scale_up_and_limited_down(t: &Target) {
    let ns = Ns::with_cleanup(t, "hpa-cpu", &[HPAS, REPLICASETS, PODS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let metrics = feed(t);
    replicaset(admin, n, "web", 2);
    for p in ["web-a", "web-b"] {
        ready_pod(admin, n, "web", p);
        metrics.set_pod_cpu(n, p, "200m");
    }
    hpa(admin, n, "web", "web", json!({"metrics": cpu(50)}));
    replicaset(admin, n, "calm", 4);
    for p in ["calm-a", "calm-b", "calm-c", "calm-d"] {
        ready_pod(admin, n, "calm", p);
        metrics.set_pod_cpu(n, p, "10m");
    }
    hpa(
        admin,
        n,
        "calm",
        "calm",
        json!({"metrics": cpu(50), "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}}),
    );
    let _kcm = start(t, "hpa-cpu");
    wait_replicas(admin, n, "web", 4);
    wait_event(
        admin,
        n,
        "web",
        "SuccessfulRescale",
        "New size: 4; reason: cpu resource utilization (percentage of request) above target",
    );
    let h = wait_hpa(admin, n, "web", "status after the scale-up", |h| {
        h["status"]["currentReplicas"] == 4
            && condition(h, "ScalingActive") == ("True".into(), "ValidMetricFound".into())
            && condition(h, "ScalingLimited") == ("True".into(), "TooManyReplicas".into())
    });
    assert_eq!(h["status"]["desiredReplicas"], 4);
    assert!(h["status"]["lastScaleTime"].is_string());
    assert_eq!(
        h["status"]["currentMetrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": 200, "averageValue": "200m"}}}])
    );
    assert_eq!(condition(&h, "AbleToScale").0, "True");

    wait_replicas(admin, n, "calm", 3);
    wait_event(
        admin,
        n,
        "calm",
        "SuccessfulRescale",
        "New size: 3; reason: All metrics below target",
    );
    let h = wait_hpa(admin, n, "calm", "ScaleDownLimit", |h| {
        condition(h, "ScalingLimited") == ("True".into(), "ScaleDownLimit".into())
    });
    assert_eq!(h["status"]["currentReplicas"], 3);
    // The policy allows one pod a minute: still 3 a few syncs later.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(replicas(admin, n, "calm"), 3);
    dump(admin, n);
}

/// A missing target and missing metrics: upstream's Events and conditions, nothing scaled.
fn scenario_failures_are_reported(t: &Target) {
    let ns = Ns::with_cleanup(t, "hpa-fail", &[HPAS, REPLICASETS, PODS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _metrics = feed(t);
    hpa(admin, n, "ghost", "nope", json!({"metrics": cpu(50)}));
    replicaset(admin, n, "quiet", 2);
    ready_pod(admin, n, "quiet", "quiet-a");
    hpa(admin, n, "quiet", "quiet", json!({"metrics": cpu(50)}));
    let _kcm = start(t, "hpa-fail");
    // The Event carries the API server's own answer, whose wording is the server's: 1.28 says
    // `replicasets/scale.apps "nope" not found`, 1.37 `replicasets.apps "nope" not found`.
    let missing = admin
        .get_path(&format!(
            "/apis/apps/v1/namespaces/{n}/replicasets/nope/scale"
        ))
        .expect_err("no scale for a missing ReplicaSet");
    assert_eq!(missing.code(), Some(404), "{missing}");
    assert!(
        missing.message().ends_with("\"nope\" not found"),
        "{missing}"
    );
    wait_event(admin, n, "ghost", "FailedGetScale", &missing.message());
    let h = wait_hpa(admin, n, "ghost", "AbleToScale False", |h| {
        condition(h, "AbleToScale") == ("False".into(), "FailedGetScale".into())
    });
    assert!(h["status"]["currentReplicas"].is_null() || h["status"]["currentReplicas"] == 0);
    let msg = "failed to get cpu utilization: unable to get metrics for resource cpu: no metrics returned from resource metrics API";
    wait_event(admin, n, "quiet", "FailedGetResourceMetric", msg);
    let h = wait_hpa(admin, n, "quiet", "ScalingActive False", |h| {
        condition(h, "ScalingActive").1 == "FailedGetResourceMetric"
    });
    assert_eq!(h["status"]["currentReplicas"], 2);
    assert_eq!(
        condition(&h, "AbleToScale"),
        ("True".into(), "SucceededGetScale".into())
    );
    wait_event(
        admin,
        n,
        "quiet",
        "FailedComputeMetricsReplicas",
        &format!("invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: {msg}"),
    );
    assert_eq!(replicas(admin, n, "quiet"), 2);
}

/// An external metric with a Value target and a custom Pods metric: the larger proposal wins.
fn scenario_external_and_pods_metrics(t: &Target) {
    let ns = Ns::with_cleanup(t, "hpa-ext", &[HPAS, REPLICASETS, PODS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let metrics = feed(t);
    replicaset(admin, n, "worker", 1);
    ready_pod(admin, n, "worker", "worker-a");
    metrics.set_external(
        n,
        "queue-depth",
        &[(&[("queue", "jobs")], "30"), (&[("queue", "other")], "500")],
    );
    metrics.set_custom(n, "pods", "worker-a", "rps", "1");
    hpa(
        admin,
        n,
        "worker",
        "worker",
        json!({"maxReplicas": 10, "metrics": [
            {"type": "External", "external": {"metric": {"name": "queue-depth",
                "selector": {"matchLabels": {"queue": "jobs"}}},
                "target": {"type": "Value", "value": "10"}}},
            {"type": "Pods", "pods": {"metric": {"name": "rps"},
                "target": {"type": "AverageValue", "averageValue": "1"}}}]}),
    );
    let _kcm = start(t, "hpa-ext");
    // 30 against 10 with one ready pod: 3 (the Pods metric is on target: 1).
    wait_replicas(admin, n, "worker", 3);
    let h = wait_hpa(admin, n, "worker", "two current metrics", |h| {
        h["status"]["currentMetrics"]
            .as_array()
            .is_some_and(|m| m.len() == 2)
    });
    let m = &h["status"]["currentMetrics"];
    assert_eq!(m[0]["type"], "External");
    assert_eq!(m[0]["external"]["current"]["value"], "30");
    assert_eq!(m[1]["pods"]["current"]["averageValue"], "1", "{m}");
    wait_event(
        admin,
        n,
        "worker",
        "SuccessfulRescale",
        "New size: 3; reason: external metric queue-depth(&LabelSelector{MatchLabels:map[string]string{queue: jobs,},MatchExpressions:[]LabelSelectorRequirement{},}) above target",
    );
}

/// v1.37: scale to zero with an External metric (HPAScaleToZero) and back once the queue
/// fills, with the `ScaledToZero` condition and `observedGeneration` (HPAGeneration); and a
/// per-direction tolerance (HPAConfigurableTolerance) holding a scale-up until the spec
/// lowers it, which is synced at once.
fn scenario_scale_to_zero_and_tolerance(t: &Target) {
    if !t.at_least(37, "scale to zero (HPAScaleToZero, on since v1.37)") {
        return;
    }
    let ns = Ns::with_cleanup(t, "hpa-zero", &[HPAS, REPLICASETS, PODS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let metrics = feed(t);
    replicaset(admin, n, "worker", 2);
    for p in ["worker-a", "worker-b"] {
        ready_pod(admin, n, "worker", p);
    }
    metrics.set_external(n, "queue-depth", &[(&[("queue", "jobs")], "0")]);
    hpa(
        admin,
        n,
        "worker",
        "worker",
        json!({"minReplicas": 0, "maxReplicas": 5, "metrics": [{"type": "External",
            "external": {"metric": {"name": "queue-depth"},
                "target": {"type": "Value", "value": "10"}}}],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}),
    );
    replicaset(admin, n, "api", 2);
    for p in ["api-a", "api-b"] {
        ready_pod(admin, n, "api", p);
        metrics.set_pod_cpu(n, p, "70m");
    }
    hpa(
        admin,
        n,
        "api",
        "api",
        json!({"metrics": cpu(50), "behavior": {"scaleUp": {"tolerance": "0.5"}}}),
    );
    let _kcm = start(t, "hpa-zero");
    wait_replicas(admin, n, "worker", 0);
    let h = wait_hpa(admin, n, "worker", "ScaledToZero", |h| {
        condition(h, "ScaledToZero") == ("True".into(), "ScaledToZero".into())
    });
    assert_eq!(
        h["status"]["observedGeneration"],
        h["metadata"]["generation"]
    );
    wait_event(
        admin,
        n,
        "worker",
        "SuccessfulRescale",
        "New size: 0; reason: All metrics below target",
    );
    // The queue fills: 25 against 10 from zero pods is 3.
    metrics.set_external(n, "queue-depth", &[(&[("queue", "jobs")], "25")]);
    wait_replicas(admin, n, "worker", 3);
    wait_hpa(admin, n, "worker", "NotScaledToZero", |h| {
        condition(h, "ScaledToZero") == ("False".into(), "NotScaledToZero".into())
    });

    // 70 % against 50 % is within a scale-up tolerance of 0.5.
    let h = wait_hpa(admin, n, "api", "a metric read", |h| {
        h["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"] == 70
    });
    assert_eq!(h["status"]["desiredReplicas"], 2);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(replicas(admin, n, "api"), 2);
    eventually(LIMIT, "lower the tolerance", || {
        let mut h = admin.get(&HPAS, Some(n), "api").ok()?;
        h["spec"]["behavior"]["scaleUp"]["tolerance"] = json!("0.1");
        admin.update(&HPAS, &h).ok()
    });
    wait_replicas(admin, n, "api", 3);
    dump(admin, n);
}

scenarios! {
    cpu_scale_up_and_limited_down => scenario_cpu_scale_up_and_limited_down,
    failures_are_reported => scenario_failures_are_reported,
    external_and_pods_metrics => scenario_external_and_pods_metrics,
    scale_to_zero_and_tolerance => scenario_scale_to_zero_and_tolerance,
}
