//! The autoscaler's decisions: syncs against a scripted [`Source`], pods from the cache.

use super::source::Source;
use super::*;
use crate::api::resources::{HPAS, PODS};
use crate::controller::{Action, Applied, EventType};
use crate::controllers::testing::Harness;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::result::Result;
use std::time::{Duration, SystemTime};

const NS: &str = "ns";

/// Scripted answers; records the scale updates.
struct Fake {
    scale: Option<Value>,
    pod_metrics: Result<Vec<Value>, String>,
    pods_metric: Vec<Value>,
    object_metric: Vec<Value>,
    external: Vec<Value>,
    update_error: Option<String>,
    updated: RefCell<Vec<i64>>,
}

impl Default for Fake {
    fn default() -> Self {
        Fake {
            scale: None,
            pod_metrics: Ok(Vec::new()),
            pods_metric: Vec::new(),
            object_metric: Vec::new(),
            external: Vec::new(),
            update_error: None,
            updated: RefCell::new(Vec::new()),
        }
    }
}

impl Source for Fake {
    fn get_scale(
        &self,
        _: &str,
        _: &str,
        kind: &str,
        name: &str,
    ) -> Result<(Value, String), String> {
        self.scale
            .clone()
            .map(|s| (s, format!("/{kind}/{name}/scale")))
            .ok_or_else(|| format!("deployments.apps \"{name}\" not found"))
    }
    fn update_scale(&self, _: &str, scale: &Value) -> Result<Value, String> {
        if let Some(e) = &self.update_error {
            return Err(e.clone());
        }
        self.updated
            .borrow_mut()
            .push(scale["spec"]["replicas"].as_i64().unwrap());
        Ok(scale.clone())
    }
    fn pod_metrics(&self, _: &str, _: &str) -> Result<Vec<Value>, String> {
        self.pod_metrics.clone()
    }
    fn pods_metric(&self, _: &str, _: &str, _: &str, _: &str) -> Result<Vec<Value>, String> {
        Ok(self.pods_metric.clone())
    }
    fn object_metric(
        &self,
        _: &str,
        _: &str,
        _: &str,
        _: &str,
        _: &str,
        _: &str,
    ) -> Result<Vec<Value>, String> {
        Ok(self.object_metric.clone())
    }
    fn external_metric(&self, _: &str, _: &str, _: &str) -> Result<Vec<Value>, String> {
        Ok(self.external.clone())
    }
}

fn scale(spec: i64, status: i64) -> Value {
    json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": "web", "namespace": NS, "resourceVersion": "7"},
        "spec": {"replicas": spec}, "status": {"replicas": status, "selector": "app=web"}})
}

fn hpa(extra: Value) -> Value {
    let mut h = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": NS, "uid": "u1", "resourceVersion": "3"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 50}}}]}});
    if let (Some(m), Some(e)) = (h["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            m.insert(k.clone(), v.clone());
        }
    }
    h
}

const LONG_AGO: &str = "2020-01-01T00:00:00Z";

fn pod(name: &str, ready: bool) -> Value {
    json!({"metadata": {"name": name, "namespace": NS, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
        "status": {"phase": "Running", "startTime": LONG_AGO,
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                "lastTransitionTime": LONG_AGO}]}})
}

fn usage(name: &str, cpu: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": NS}, "timestamp": "2026-01-01T00:00:00Z",
        "window": "30s", "containers": [{"name": "c", "usage": {"cpu": cpu}}]})
}

fn harness(h: Value, pods: &[Value]) -> Harness<Hpa> {
    let mut hs = Harness::new(Hpa::new(Options::default())).at("2026-01-01T00:01:00Z");
    hs.add(HPAS, h);
    for p in pods {
        hs.add(PODS, p.clone());
    }
    hs
}

fn sync(h: &Harness<Hpa>, f: &Fake) -> Outcome {
    let cx = crate::controller::Cx {
        cache: &h.cache,
        now: h.now,
        client: &h.client,
    };
    h.ctrl.sync_with(&cx, "ns/web", f)
}

fn status_of(o: &Outcome) -> Value {
    o.actions
        .iter()
        .find_map(|a| match a {
            Action::Reported { action, .. } => match &**action {
                Action::UpdateSubresource { object, .. } => Some(object["status"].clone()),
                _ => None,
            },
            _ => None,
        })
        .expect("a status update")
}

fn events(o: &Outcome) -> Vec<(EventType, String, String)> {
    o.actions
        .iter()
        .filter_map(|a| match a {
            Action::Event(e) => Some((e.event_type, e.reason.clone(), e.message.clone())),
            _ => None,
        })
        .collect()
}

fn cond(st: &Value, t: &str) -> (String, String) {
    let c = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == t)
        .unwrap_or_else(|| panic!("no {t} in {st}"));
    (
        c["status"].as_str().unwrap().to_string(),
        c["reason"].as_str().unwrap().to_string(),
    )
}

#[test]
fn hpa_changes_queue_after_a_period_and_pods_queue_nothing() {
    let mut h = Harness::new(Hpa::new(Options::default()));
    h.add(HPAS, hpa(json!({})));
    assert_eq!(h.take_queued(), ["ns/web"]);
    assert_eq!(h.ctrl.key_delay(&HPA_WATCH), Duration::from_secs(15));
    h.add(PODS, pod("p1", true));
    assert!(h.take_queued().is_empty());
    let row = crate::controllers::testing::row("horizontal-pod-autoscaler-controller");
    assert_eq!(row.queue, "horizontalpodautoscaler");
    assert_eq!(row.event_component, "horizontal-pod-autoscaler");
}

#[test]
fn cpu_over_target_scales_up_limited_by_max() {
    let h = harness(
        hpa(json!({"maxReplicas": 4})),
        &[pod("p1", true), pod("p2", true)],
    );
    let f = Fake {
        scale: Some(scale(2, 2)),
        pod_metrics: Ok(vec![usage("p1", "200m"), usage("p2", "200m")]),
        ..Fake::default()
    };
    let o = sync(&h, &f);
    assert_eq!(*f.updated.borrow(), [4]);
    assert_eq!(o.requeue_after, Some(Duration::from_secs(15)));
    let st = status_of(&o);
    assert_eq!(st["currentReplicas"], 2);
    assert_eq!(st["desiredReplicas"], 4);
    assert!(st["lastScaleTime"].is_string());
    assert_eq!(
        st["currentMetrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": 200, "averageValue": "200m"}}}])
    );
    assert_eq!(
        cond(&st, "AbleToScale"),
        ("True".into(), "SucceededRescale".into())
    );
    assert_eq!(
        cond(&st, "ScalingActive"),
        ("True".into(), "ValidMetricFound".into())
    );
    assert_eq!(
        cond(&st, "ScalingLimited"),
        ("True".into(), "TooManyReplicas".into())
    );
    assert_eq!(
        events(&o),
        [(
            EventType::Normal,
            "SuccessfulRescale".into(),
            "New size: 4; reason: cpu resource utilization (percentage of request) above target"
                .into()
        )]
    );
}

#[test]
fn without_behavior_scale_up_is_at_most_double() {
    let h = harness(
        hpa(json!({})),
        &[pod("p1", true), pod("p2", true), pod("p3", true)],
    );
    let f = Fake {
        scale: Some(scale(3, 3)),
        pod_metrics: Ok(vec![
            usage("p1", "500m"),
            usage("p2", "500m"),
            usage("p3", "500m"),
        ]),
        ..Fake::default()
    };
    let o = sync(&h, &f);
    assert_eq!(*f.updated.borrow(), [6]);
    assert_eq!(
        cond(&status_of(&o), "ScalingLimited"),
        ("True".into(), "ScaleUpLimit".into())
    );
}

#[test]
fn within_tolerance_nothing_is_written_but_status() {
    let h = harness(hpa(json!({})), &[pod("p1", true), pod("p2", true)]);
    let f = Fake {
        scale: Some(scale(2, 2)),
        pod_metrics: Ok(vec![usage("p1", "52m"), usage("p2", "52m")]),
        ..Fake::default()
    };
    let o = sync(&h, &f);
    assert!(f.updated.borrow().is_empty());
    let st = status_of(&o);
    assert_eq!(st["desiredReplicas"], 2);
    assert!(st.get("lastScaleTime").is_none());
    assert_eq!(
        cond(&st, "AbleToScale"),
        ("True".into(), "ReadyForNewScale".into())
    );
    assert_eq!(
        cond(&st, "ScalingLimited"),
        ("False".into(), "DesiredWithinRange".into())
    );
    assert!(events(&o).is_empty());
    // The same status again: no write at all.
    let mut h2 = harness(hpa(json!({})), &[pod("p1", true), pod("p2", true)]);
    let mut with_status = hpa(json!({}));
    with_status["status"] = st;
    with_status["metadata"]["resourceVersion"] = json!("4");
    h2.update(HPAS, with_status);
    let again = sync(&h2, &f);
    assert!(again.actions.is_empty(), "{:?}", again.actions);
}

#[test]
fn scale_down_waits_for_the_stabilization_window() {
    let mut h = harness(
        hpa(json!({})),
        &[
            pod("p1", true),
            pod("p2", true),
            pod("p3", true),
            pod("p4", true),
        ],
    );
    let low = Fake {
        scale: Some(scale(4, 4)),
        pod_metrics: Ok(["p1", "p2", "p3", "p4"]
            .iter()
            .map(|p| usage(p, "10m"))
            .collect()),
        ..Fake::default()
    };
    // The first sync records 4 as a recommendation: 1 now is held back.
    let o = sync(&h, &low);
    assert!(low.updated.borrow().is_empty());
    assert_eq!(
        cond(&status_of(&o), "AbleToScale"),
        ("True".into(), "ScaleDownStabilized".into())
    );
    // Five minutes and a bit later the old recommendation is out of the window.
    h.now += Duration::from_secs(301);
    sync(&h, &low);
    assert_eq!(*low.updated.borrow(), [1]);
}

#[test]
fn behavior_policies_limit_the_rate() {
    let b = json!({"behavior": {"scaleDown": {"stabilizationWindowSeconds": 0,
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}});
    let mut h = harness(
        hpa(b),
        &[
            pod("p1", true),
            pod("p2", true),
            pod("p3", true),
            pod("p4", true),
        ],
    );
    let mut f = Fake {
        scale: Some(scale(4, 4)),
        pod_metrics: Ok(["p1", "p2", "p3", "p4"]
            .iter()
            .map(|p| usage(p, "10m"))
            .collect()),
        ..Fake::default()
    };
    let o = sync(&h, &f);
    assert_eq!(*f.updated.borrow(), [3]);
    assert_eq!(
        cond(&status_of(&o), "ScalingLimited"),
        ("True".into(), "ScaleDownLimit".into())
    );
    // Within the policy's period: no further step.
    f.scale = Some(scale(3, 3));
    h.now += Duration::from_secs(30);
    sync(&h, &f);
    assert_eq!(*f.updated.borrow(), [3]);
    h.now += Duration::from_secs(31);
    sync(&h, &f);
    assert_eq!(*f.updated.borrow(), [3, 2]);
}

#[test]
fn missing_metrics_fail_with_upstreams_reasons() {
    let h = harness(hpa(json!({})), &[pod("p1", true)]);
    let f = Fake {
        scale: Some(scale(2, 2)),
        pod_metrics: Err(
            "the server could not find the requested resource (get pods.metrics.k8s.io)".into(),
        ),
        ..Fake::default()
    };
    let o = sync(&h, &f);
    let st = status_of(&o);
    assert_eq!(
        cond(&st, "ScalingActive"),
        ("False".into(), "FailedGetResourceMetric".into())
    );
    assert_eq!(st["currentReplicas"], 2);
    let ev = events(&o);
    assert_eq!(ev[0].1, "FailedGetResourceMetric");
    assert_eq!(ev[0].2, "failed to get cpu utilization: unable to get metrics for resource cpu: unable to fetch metrics from resource metrics API: the server could not find the requested resource (get pods.metrics.k8s.io)");
    assert_eq!(ev[1].1, "FailedComputeMetricsReplicas");
    assert!(ev[1].2.starts_with("invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: failed to get cpu utilization:"));
}

#[test]
fn a_missing_target_is_failed_get_scale() {
    let h = harness(hpa(json!({})), &[]);
    let o = sync(&h, &Fake::default());
    let st = status_of(&o);
    assert_eq!(
        cond(&st, "AbleToScale"),
        ("False".into(), "FailedGetScale".into())
    );
    assert_eq!(events(&o)[0].1, "FailedGetScale");
    assert_eq!(events(&o)[0].2, "deployments.apps \"web\" not found");
}

#[test]
fn zero_replicas_disable_scaling_and_bounds_apply_first() {
    let h = harness(hpa(json!({})), &[]);
    let o = sync(
        &h,
        &Fake {
            scale: Some(scale(0, 0)),
            ..Fake::default()
        },
    );
    assert_eq!(
        cond(&status_of(&o), "ScalingActive"),
        ("False".into(), "ScalingDisabled".into())
    );
    let f = Fake {
        scale: Some(scale(12, 12)),
        ..Fake::default()
    };
    let o = sync(&h, &f);
    assert_eq!(*f.updated.borrow(), [10]);
    assert_eq!(
        events(&o)[0].2,
        "New size: 10; reason: Current number of replicas above Spec.MaxReplicas"
    );
}

#[test]
fn a_failed_update_is_failed_rescale() {
    let h = harness(
        hpa(json!({"maxReplicas": 4})),
        &[pod("p1", true), pod("p2", true)],
    );
    let f = Fake {
        scale: Some(scale(2, 2)),
        pod_metrics: Ok(vec![usage("p1", "200m"), usage("p2", "200m")]),
        update_error: Some("conflict".into()),
        ..Fake::default()
    };
    let o = sync(&h, &f);
    assert_eq!(
        cond(&status_of(&o), "AbleToScale"),
        ("False".into(), "FailedUpdateScale".into())
    );
    assert_eq!(events(&o).last().unwrap().1, "FailedRescale");
}

#[test]
fn unready_pods_do_not_push_a_scale_up_further() {
    // p2 is not ready: with usage over target it counts as 0.
    let h = harness(hpa(json!({})), &[pod("p1", true), pod("p2", false)]);
    let f = Fake {
        scale: Some(scale(2, 2)),
        pod_metrics: Ok(vec![usage("p1", "100m"), usage("p2", "100m")]),
        ..Fake::default()
    };
    sync(&h, &f);
    // p1 alone proposes 4; with p2 counted at 0 the ratio is 1: no change.
    assert!(f.updated.borrow().is_empty());
}

#[test]
fn external_and_pods_metrics() {
    let m = json!({"metrics": [
        {"type": "External", "external": {"metric": {"name": "queue", "selector": {"matchLabels": {"q": "a"}}},
            "target": {"type": "AverageValue", "averageValue": "10"}}},
        {"type": "Pods", "pods": {"metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "1"}}}]});
    let h = harness(hpa(m), &[pod("p1", true), pod("p2", true)]);
    let f = Fake {
        scale: Some(scale(2, 2)),
        external: vec![json!({"value": "55"})],
        pods_metric: vec![
            json!({"describedObject": {"name": "p1"}, "value": "1", "timestamp": "2026-01-01T00:00:00Z"}),
            json!({"describedObject": {"name": "p2"}, "value": "1", "timestamp": "2026-01-01T00:00:00Z"}),
        ],
        ..Fake::default()
    };
    let o = sync(&h, &f);
    assert_eq!(*f.updated.borrow(), [4]);
    let st = status_of(&o);
    assert_eq!(
        st["currentMetrics"][0]["external"]["current"]["averageValue"],
        "27500m"
    );
    assert_eq!(
        st["currentMetrics"][1]["pods"]["current"]["averageValue"],
        "1"
    );
    assert!(events(&o)[0].2.contains("reason: external metric queue(&LabelSelector{MatchLabels:map[string]string{q: a,},MatchExpressions:[]LabelSelectorRequirement{},}) above target"));
}

#[test]
fn two_hpas_on_the_same_pods_are_ambiguous() {
    let mut h = harness(hpa(json!({})), &[pod("p1", true)]);
    let mut other = hpa(json!({}));
    other["metadata"]["name"] = json!("other");
    h.add(HPAS, other);
    h.ctrl
        .selecting("ns/other", &LabelSelector::parse("app=web").unwrap(), &[]);
    let f = Fake {
        scale: Some(scale(1, 1)),
        pod_metrics: Ok(vec![usage("p1", "200m")]),
        ..Fake::default()
    };
    let o = sync(&h, &f);
    assert_eq!(
        cond(&status_of(&o), "ScalingActive"),
        ("False".into(), "AmbiguousSelector".into())
    );
    assert_eq!(
        events(&o)[0].2,
        "pods by selector app=web are controlled by multiple HPAs: [ns/other ns/web]"
    );
    let _ = SystemTime::now();
}

#[test]
fn options_from_flags() {
    let mut given = std::collections::BTreeMap::new();
    given.insert("horizontal-pod-autoscaler-sync-period", "30s".to_string());
    given.insert("horizontal-pod-autoscaler-tolerance", "0.2".to_string());
    let o = Options::from_given(&given);
    assert_eq!(o.sync_period, Duration::from_secs(30));
    assert_eq!(o.calc.tolerance, calc::Tolerances::both(0.2));
    assert_eq!(o.downscale_stabilization, Duration::from_secs(300));
}

#[test]
fn tolerances_per_direction_from_behavior() {
    let t = calc::Tolerances {
        down: 0.5,
        up: 0.05,
    };
    assert!(t.within(0.5) && t.within(1.05) && !t.within(1.06) && !t.within(0.49));
    let h = hpa(json!({"behavior": {"scaleUp": {"tolerance": "50m"},
        "scaleDown": {"tolerance": "0.5"}}}));
    let c = spec::with_tolerances(&h, Options::default().calc);
    assert_eq!(
        c.tolerance,
        calc::Tolerances {
            down: 0.5,
            up: 0.05
        }
    );
    // Unset: the flag's.
    let c = spec::with_tolerances(&hpa(json!({})), Options::default().calc);
    assert_eq!(c.tolerance, calc::Tolerances::both(0.1));
}

#[test]
fn a_configured_tolerance_holds_a_change_the_default_would_make() {
    let run = |extra: Value, cpu: &str| {
        let h = harness(hpa(extra), &[pod("p1", true), pod("p2", true)]);
        let f = Fake {
            scale: Some(scale(2, 2)),
            pod_metrics: Ok(vec![usage("p1", cpu), usage("p2", cpu)]),
            ..Fake::default()
        };
        sync(&h, &f);
        let u = f.updated.borrow().clone();
        u
    };
    let b = json!({"behavior": {"scaleUp": {"tolerance": "0.5"},
        "scaleDown": {"stabilizationWindowSeconds": 0, "tolerance": "0.5"}}});
    // 70 % against 50 %: ratio 1.4.
    assert_eq!(run(json!({}), "70m"), [3]);
    assert!(run(b.clone(), "70m").is_empty());
    // 20 % against 50 %: ratio 0.4, one pod.
    let mut down = json!({"behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}});
    assert_eq!(run(down.clone(), "20m"), [1]);
    down["behavior"]["scaleDown"]["tolerance"] = json!("0.7");
    assert!(run(down.clone(), "20m").is_empty());
    // The scale-up tolerance does not hold a scale-down.
    down["behavior"]["scaleDown"]["tolerance"] = json!("0.1");
    down["behavior"]["scaleUp"] = json!({"tolerance": "0.9"});
    assert_eq!(run(down, "20m"), [1]);
}

/// minReplicas 0 with an External metric against a total Value of 10, no scale-down window.
fn to_zero_hpa(status: Value) -> Value {
    let mut h = hpa(json!({"minReplicas": 0, "metrics": [{"type": "External",
            "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "10"}}}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}));
    h["metadata"]["generation"] = json!(2);
    h["status"] = status;
    h
}

#[test]
fn scale_to_zero_and_back_with_an_external_metric() {
    let h = harness(to_zero_hpa(json!({})), &[pod("p1", true), pod("p2", true)]);
    let f = Fake {
        scale: Some(scale(2, 2)),
        external: vec![json!({"value": "0"})],
        ..Fake::default()
    };
    let o = sync(&h, &f);
    assert_eq!(*f.updated.borrow(), [0]);
    let st = status_of(&o);
    assert_eq!(
        cond(&st, "ScaledToZero"),
        ("True".into(), "ScaledToZero".into())
    );
    assert_eq!(st["observedGeneration"], 2);
    // At zero with the condition: the metric brings it back (25 against 10: 3).
    let h = harness(to_zero_hpa(st.clone()), &[]);
    let f = Fake {
        scale: Some(scale(0, 0)),
        external: vec![json!({"value": "25"})],
        ..Fake::default()
    };
    let o = sync(&h, &f);
    assert_eq!(*f.updated.borrow(), [3]);
    assert_eq!(
        cond(&status_of(&o), "ScaledToZero"),
        ("False".into(), "NotScaledToZero".into())
    );
    // At zero without it (scaled to zero by hand): disabled, as before.
    let h = harness(to_zero_hpa(json!({})), &[]);
    let f = Fake {
        scale: Some(scale(0, 0)),
        external: vec![json!({"value": "25"})],
        ..Fake::default()
    };
    let o = sync(&h, &f);
    assert!(f.updated.borrow().is_empty());
    assert_eq!(
        cond(&status_of(&o), "ScalingActive"),
        ("False".into(), "ScalingDisabled".into())
    );
}

#[test]
fn a_raised_min_brings_a_zeroed_target_up_to_it() {
    let mut st = json!({"conditions": [{"type": "ScaledToZero", "status": "True",
        "reason": "ScaledToZero", "message": "m", "lastTransitionTime": LONG_AGO}]});
    st["desiredReplicas"] = json!(0);
    let mut h0 = to_zero_hpa(st);
    h0["spec"]["minReplicas"] = json!(2);
    let h = harness(h0, &[]);
    let f = Fake {
        scale: Some(scale(0, 0)),
        external: vec![json!({"value": "0"})],
        ..Fake::default()
    };
    let o = sync(&h, &f);
    assert_eq!(*f.updated.borrow(), [2]);
    assert_eq!(
        events(&o)[0].2,
        "New size: 2; reason: Current number of replicas below Spec.MinReplicas"
    );
}

#[test]
fn new_hpas_and_spec_changes_sync_at_once() {
    use crate::cache::{Delta, DeltaKind};
    use std::sync::Arc;
    let at = |g: i64| Some(Arc::new(json!({"metadata": {"generation": g}})));
    let d = |kind, old, new| Delta { kind, old, new };
    assert!(super::at_once(&d(DeltaKind::Added, None, at(1)), true));
    assert!(super::at_once(&d(DeltaKind::Updated, at(1), at(2)), true));
    // A status write (same generation) waits for the period; so does every update with
    // HPAGeneration off.
    assert!(!super::at_once(&d(DeltaKind::Updated, at(2), at(2)), true));
    assert!(!super::at_once(&d(DeltaKind::Updated, at(1), at(2)), false));
}

#[test]
fn monitor_metrics_count_reconciliations_and_computations() {
    let value = |family: &str, label: (&str, &str)| -> f64 {
        monitor::families()
            .into_iter()
            .filter(|f| f.name == format!("horizontal_pod_autoscaler_controller_{family}"))
            .flat_map(|f| f.samples)
            .filter(|x| x.labels.iter().any(|(k, v)| k == label.0 && v == label.1))
            .map(|x| match x.value {
                crate::metrics::SampleValue::Scalar(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    let mut h = hpa(json!({}));
    h["metadata"]["name"] = json!("monitored");
    let before = value("reconciliations_total", ("action", "scale_up"));
    let hs = harness(h, &[pod("p1", true), pod("p2", true)]);
    let f = Fake {
        scale: Some(scale(2, 2)),
        pod_metrics: Ok(vec![usage("p1", "100m"), usage("p2", "100m")]),
        ..Fake::default()
    };
    let cx = crate::controller::Cx {
        cache: &hs.cache,
        now: hs.now,
        client: &hs.client,
    };
    let began = std::time::Instant::now();
    let out = hs.ctrl.sync_with(&cx, "ns/monitored", &f);
    assert_eq!(*f.updated.borrow(), [4]);
    // Observed once the sync's status write is done; a failed one is an internal error.
    assert_eq!(
        value("reconciliations_total", ("action", "scale_up")),
        before
    );
    let internal = value("reconciliations_total", ("error", "internal"));
    let status = out
        .actions
        .iter()
        .find_map(|a| match a {
            Action::Reported { action, .. } => Some(&**action),
            _ => None,
        })
        .expect("a status write");
    let refused = crate::Error::api(409, "Conflict", "stale");
    hs.ctrl
        .applied("ns/monitored", status, Applied::Failed(&refused));
    hs.ctrl
        .synced("ns/monitored", began, crate::controller::SyncEnd::Done);
    assert_eq!(
        value("reconciliations_total", ("action", "scale_up")),
        before + 1.0
    );
    assert_eq!(
        value("reconciliations_total", ("error", "internal")),
        internal + 1.0
    );
    assert!(value("metric_computation_total", ("metric_type", "Resource")) >= 1.0);
    assert_eq!(value("desired_replicas", ("hpa_name", "monitored")), 4.0);
    // The HPA was counted when the harness added it (other tests add theirs too).
    let num = monitor::families()
        .into_iter()
        .find(|f| f.name == "horizontal_pod_autoscaler_controller_num_horizontal_pod_autoscalers")
        .expect("the gauge");
    assert!(num.help.starts_with("[ALPHA] "));
    assert!(matches!(
        num.samples[0].value,
        crate::metrics::SampleValue::Scalar(v) if v >= 1.0
    ));
}

#[test]
fn a_cache_behind_the_last_status_written_skips_the_sync() {
    let mut h = harness(hpa(json!({})), &[pod("p1", true)]);
    let f = Fake {
        scale: Some(scale(1, 1)),
        pod_metrics: Ok(vec![usage("p1", "200m")]),
        ..Fake::default()
    };
    let o = sync(&h, &f);
    let update = o
        .actions
        .iter()
        .find_map(|a| match a {
            Action::Reported { action, .. } => Some((**action).clone()),
            _ => None,
        })
        .expect("a status write");
    let mut answer = hpa(json!({}));
    answer["metadata"]["resourceVersion"] = json!("9");
    h.ctrl
        .applied("ns/web", &update, Applied::Done(Some(&answer)));
    // The cache still shows resourceVersion 3: nothing done, synced again a period later.
    let o = sync(&h, &f);
    assert!(o.actions.is_empty(), "{:?}", o.actions);
    assert_eq!(o.requeue_after, Some(Duration::from_secs(15)));
    let text = crate::metrics::encode(&[monitor::SKIPS.family()]);
    assert!(
        text.contains("horizontal_pod_autoscaler_controller_stale_sync_skips_total{group=\"autoscaling\",resource=\"horizontalpodautoscalers\"}"),
        "{text}"
    );
    // Once the cache shows the write, syncs go on.
    h.update(HPAS, answer);
    assert!(!sync(&h, &f).actions.is_empty());
}
