//! The metrics APIs, as metrics-server and a custom/external metrics adapter serve them
//! through the aggregation layer: `metrics.k8s.io/v1beta1` (PodMetrics of the pods a label
//! selector picks), `custom.metrics.k8s.io/v1beta2` (a metric of the pods a selector picks, of
//! one object, or of a namespace) and `external.metrics.k8s.io/v1beta1` (values whose metric
//! labels a selector picks). Tests decide the values with [`super::Sandbox::metrics`]; pods'
//! labels come from the stored pods, and only pods that exist have metrics. A custom or
//! external metric nobody set answers 404, as an adapter does. Timestamps are the time of
//! the request, with a 30 s window. Metric labels selectors of custom metrics are not looked at.

use super::rest::Reply;
use super::selector::LabelSelector;
use super::{lock, Shared};
use edgekcm::api::resources::PODS;
use edgekcm::obj::At as _;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::SystemTime;

/// The values tests set.
/// A value with its metric labels.
type LabelledValue = (BTreeMap<String, String>, String);

#[derive(Default)]
pub struct MetricsState {
    /// (namespace, pod) -> `containers` of its PodMetrics.
    pods: BTreeMap<(String, String), Value>,
    /// (namespace, resource, object name, metric) -> quantity; pods' metrics under "pods",
    /// a namespace's under "metrics" with its name.
    custom: BTreeMap<(String, String, String, String), String>,
    /// (namespace, metric) -> (metric labels, quantity).
    external: BTreeMap<(String, String), Vec<LabelledValue>>,
}

/// A handle on the sandbox's metrics.
pub struct Metrics<'a>(pub(super) &'a Shared);

impl Metrics<'_> {
    fn with<T>(&self, f: impl FnOnce(&mut MetricsState) -> T) -> T {
        f(&mut lock(&self.0.metrics))
    }

    /// A pod's usage: `containers` as PodMetrics has them,
    /// `[{"name": "c", "usage": {"cpu": "250m", "memory": "64Mi"}}]`.
    pub fn set_pod(&self, ns: &str, pod: &str, containers: Value) {
        self.with(|m| m.pods.insert((ns.into(), pod.into()), containers));
    }

    /// One container `c` using `cpu`.
    pub fn set_pod_cpu(&self, ns: &str, pod: &str, cpu: &str) {
        self.set_pod(ns, pod, json!([{"name": "c", "usage": {"cpu": cpu}}]));
    }

    pub fn remove_pod(&self, ns: &str, pod: &str) {
        self.with(|m| m.pods.remove(&(ns.to_string(), pod.to_string())));
    }

    /// A custom metric of an object: `resource` as the API names it (`pods`,
    /// `deployments.apps`, `services`).
    pub fn set_custom(&self, ns: &str, resource: &str, name: &str, metric: &str, value: &str) {
        self.with(|m| {
            m.custom.insert(
                (ns.into(), resource.into(), name.into(), metric.into()),
                value.into(),
            )
        });
    }

    /// The values of an external metric, each with its metric labels.
    pub fn set_external(&self, ns: &str, metric: &str, values: &[(&[(&str, &str)], &str)]) {
        let v = values
            .iter()
            .map(|(labels, q)| {
                (
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    q.to_string(),
                )
            })
            .collect();
        self.with(|m| m.external.insert((ns.into(), metric.into()), v));
    }
}

fn not_found(what: &str) -> Reply {
    Reply::Json(
        404,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("{what} not found"), "reason": "NotFound", "code": 404}),
    )
}

fn bad_request(msg: String) -> Reply {
    Reply::Json(
        400,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": msg, "reason": "BadRequest", "code": 400}),
    )
}

/// Requests under `/apis/<group>/<version>/` of the three metrics groups; None for others.
pub fn handle(shared: &Shared, req: &super::http::Request, segs: &[&str]) -> Option<Reply> {
    if !matches!(
        segs,
        [
            "apis",
            "metrics.k8s.io" | "custom.metrics.k8s.io" | "external.metrics.k8s.io",
            _,
            ..
        ]
    ) {
        return None;
    }
    let now = edgekcm::compat::timefmt::rfc3339(SystemTime::now());
    let selector = match LabelSelector::parse(req.param("labelSelector").unwrap_or("")) {
        Ok(s) => s,
        Err(e) => return Some(bad_request(e)),
    };
    let reply = match segs {
        ["apis", "metrics.k8s.io", "v1beta1"] => Reply::Json(
            200,
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "metrics.k8s.io/v1beta1",
                "resources": [{"name": "pods", "singularName": "", "namespaced": true,
                    "kind": "PodMetrics", "verbs": ["get", "list"]}]}),
        ),
        ["apis", "metrics.k8s.io", "v1beta1", "namespaces", ns, "pods", rest @ ..] => {
            let pods = labelled_pods(shared, ns);
            let m = lock(&shared.metrics);
            let item = |name: &str| {
                let containers = m.pods.get(&(ns.to_string(), name.to_string()))?;
                Some(
                    json!({"metadata": {"name": name, "namespace": ns, "creationTimestamp": now},
                    "timestamp": now, "window": "30s", "containers": containers}),
                )
            };
            match rest {
                [] => {
                    let items: Vec<Value> = pods
                        .iter()
                        .filter(|p| selector.matches(p))
                        .filter_map(|p| item(edgekcm::obj::name(p)))
                        .collect();
                    Reply::Json(
                        200,
                        json!({"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1",
                            "metadata": {}, "items": items}),
                    )
                }
                [name] => match item(name) {
                    Some(i) => Reply::Json(200, i),
                    None => not_found(&format!("podmetrics.metrics.k8s.io \"{ns}/{name}\"")),
                },
                _ => return None,
            }
        }
        ["apis", "custom.metrics.k8s.io", "v1beta2", "namespaces", ns, resource, name, metric] => {
            let pods = labelled_pods(shared, ns);
            let m = lock(&shared.metrics);
            let value = |res: &str, obj: &str| {
                m.custom
                    .get(&(
                        ns.to_string(),
                        res.to_string(),
                        obj.to_string(),
                        metric.to_string(),
                    ))
                    .cloned()
            };
            let item = |kind: &str, obj: &str, v: String| {
                json!({"describedObject": {"kind": kind, "namespace": ns, "name": obj, "apiVersion": "/v1"},
                    "metric": {"name": metric}, "timestamp": now, "windowSeconds": 30, "value": v})
            };
            let items: Vec<Value> = match (*resource, *name) {
                ("pods", "*") => pods
                    .iter()
                    .filter(|p| selector.matches(p))
                    .filter_map(|p| {
                        let n = edgekcm::obj::name(p);
                        value("pods", n).map(|v| item("Pod", n, v))
                    })
                    .collect(),
                (res, obj) => value(res, obj)
                    .map(|v| item(res, obj, v))
                    .into_iter()
                    .collect(),
            };
            if items.is_empty() {
                not_found(&format!(
                    "the server could not find the metric {metric} for {resource}"
                ))
            } else {
                Reply::Json(
                    200,
                    json!({"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2",
                        "metadata": {}, "items": items}),
                )
            }
        }
        ["apis", "custom.metrics.k8s.io", "v1beta2", "namespaces", ns, "metrics", metric] => {
            let m = lock(&shared.metrics);
            match m.custom.get(&(
                ns.to_string(),
                "metrics".into(),
                ns.to_string(),
                metric.to_string(),
            )) {
                Some(v) => Reply::Json(
                    200,
                    json!({"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2",
                        "metadata": {}, "items": [{"describedObject": {"kind": "Namespace", "name": ns, "apiVersion": "/v1"},
                        "metric": {"name": metric}, "timestamp": now, "windowSeconds": 30, "value": v}]}),
                ),
                None => not_found(&format!(
                    "the server could not find the metric {metric} for namespaces"
                )),
            }
        }
        ["apis", "external.metrics.k8s.io", "v1beta1", "namespaces", ns, metric] => {
            let m = lock(&shared.metrics);
            let Some(values) = m.external.get(&(ns.to_string(), metric.to_string())) else {
                return Some(not_found(&format!(
                    "the server could not find the metric {metric}"
                )));
            };
            let items: Vec<Value> = values
                .iter()
                .filter(|(labels, _)| selector.matches(&json!({"metadata": {"labels": labels}})))
                .map(|(labels, v)| {
                    json!({"metricName": metric, "metricLabels": labels, "timestamp": now, "value": v})
                })
                .collect();
            Reply::Json(
                200,
                json!({"kind": "ExternalMetricValueList", "apiVersion": "external.metrics.k8s.io/v1beta1",
                    "metadata": {}, "items": items}),
            )
        }
        _ => return None,
    };
    Some(reply)
}

/// The pods of a namespace, for their labels.
fn labelled_pods(shared: &Shared, ns: &str) -> Vec<Value> {
    let st = shared.lock_state();
    st.iter_kind(&PODS, Some(ns))
        .filter(|p| p.at("/metadata/name").is_some())
        .map(|p| json!({"metadata": {"name": edgekcm::obj::name(p), "labels": p.at("/metadata/labels").cloned().unwrap_or(json!({}))}}))
        .collect()
}
