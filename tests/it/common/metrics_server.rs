//! Metrics for the autoscaler's scenarios: on the sandbox its own metrics APIs; on a real
//! kube-apiserver a small metrics server in this process (HTTPS, self-signed), registered
//! through APIServices for `metrics.k8s.io/v1beta1`, `custom.metrics.k8s.io/v1beta2` and
//! `external.metrics.k8s.io/v1beta1` behind a Service without selector, its Endpoints and an EndpointSlice.
//! The apiserver needs the aggregation layer's flags (`--requestheader-client-ca-file`,
//! `--proxy-client-cert-file`/`--proxy-client-key-file`, `--enable-aggregator-routing=true`)
//! and reaches the server at `KCM_E2E_METRICS_HOST` (a non-loopback address of this host, as
//! Endpoints refuse loopback ones). It serves what the sandbox's metrics APIs serve.

use crate::common::Target;
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{Kind, ENDPOINTS, ENDPOINTSLICES, PODS, SERVICES};
use edgekcm::server::{Handler, Request, Response, RunningServer};
use edgekcm_sandbox::Sandbox;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const APISERVICES: Kind = Kind::new(
    "apiregistration.k8s.io",
    "v1",
    "APIService",
    "apiservices",
    false,
);

const GROUPS: &[(&str, &str)] = &[
    ("metrics.k8s.io", "v1beta1"),
    ("custom.metrics.k8s.io", "v1beta2"),
    ("external.metrics.k8s.io", "v1beta1"),
];
const SVC_NS: &str = "kube-system";
const SVC: &str = "edgekcm-e2e-metrics";

/// A value with its metric labels.
type LabelledValue = (BTreeMap<String, String>, String);

#[derive(Default)]
pub struct Values {
    pods: BTreeMap<(String, String), Value>,
    custom: BTreeMap<(String, String, String, String), String>,
    external: BTreeMap<(String, String), Vec<LabelledValue>>,
}

/// Where a scenario sets metrics.
pub enum Feed<'a> {
    Sandbox(&'a Sandbox),
    Real {
        values: Arc<Mutex<Values>>,
        _server: RunningServer,
        admin: Client,
    },
}

impl Feed<'_> {
    pub fn set_pod_cpu(&self, ns: &str, pod: &str, cpu: &str) {
        match self {
            Feed::Sandbox(sb) => sb.metrics().set_pod_cpu(ns, pod, cpu),
            Feed::Real { values, .. } => {
                values.lock().unwrap().pods.insert(
                    (ns.into(), pod.into()),
                    json!([{"name": "c", "usage": {"cpu": cpu}}]),
                );
            }
        }
    }

    pub fn set_custom(&self, ns: &str, resource: &str, name: &str, metric: &str, v: &str) {
        match self {
            Feed::Sandbox(sb) => sb.metrics().set_custom(ns, resource, name, metric, v),
            Feed::Real { values, .. } => {
                values.lock().unwrap().custom.insert(
                    (ns.into(), resource.into(), name.into(), metric.into()),
                    v.into(),
                );
            }
        }
    }

    pub fn set_external(&self, ns: &str, metric: &str, vals: &[(&[(&str, &str)], &str)]) {
        match self {
            Feed::Sandbox(sb) => sb.metrics().set_external(ns, metric, vals),
            Feed::Real { values, .. } => {
                let v = vals
                    .iter()
                    .map(|(l, q)| {
                        (
                            l.iter()
                                .map(|(k, v)| (k.to_string(), v.to_string()))
                                .collect(),
                            q.to_string(),
                        )
                    })
                    .collect();
                values
                    .lock()
                    .unwrap()
                    .external
                    .insert((ns.into(), metric.into()), v);
            }
        }
    }
}

impl Drop for Feed<'_> {
    fn drop(&mut self) {
        if let Feed::Real { admin, .. } = self {
            for (g, v) in GROUPS {
                let _ = admin.delete(&APISERVICES, None, &format!("{v}.{g}"), &Default::default());
            }
            let _ = admin.delete(&ENDPOINTSLICES, Some(SVC_NS), SVC, &Default::default());
            let _ = admin.delete(&ENDPOINTS, Some(SVC_NS), SVC, &Default::default());
            let _ = admin.delete(&SERVICES, Some(SVC_NS), SVC, &Default::default());
        }
    }
}

/// The metrics of `t`: the sandbox's, or a server registered with the real apiserver (ready
/// when this returns).
pub fn feed(t: &Target) -> Feed<'_> {
    if let Some(sb) = t.sandbox() {
        return Feed::Sandbox(sb);
    }
    let host = std::env::var("KCM_E2E_METRICS_HOST").unwrap_or_else(|_| {
        panic!("the real autoscaler scenarios need KCM_E2E_METRICS_HOST: a non-loopback address of this host")
    });
    let admin = t.admin();
    let values: Arc<Mutex<Values>> = Arc::default();
    let mut s = edgekcm::server::Server::new(
        edgekcm::server::ServeConfig {
            bind_address: host.parse().expect("KCM_E2E_METRICS_HOST is an IP address"),
            port: 0,
            cert_dir: None,
            tls_cert_file: None,
            tls_private_key_file: None,
        },
        edgekcm::server::Health::new(),
    );
    s.set_ephemeral_port(true);
    let (v, a) = (values.clone(), admin.clone());
    let h: Handler = Arc::new(move |req: &Request| answer(&v, &a, req));
    s.route_tree("/apis", h);
    let server = s.start().expect("metrics server starts");
    let port = server.addr().port();
    // Made before the registration, so that a registration that fails is undone too (the
    // APIServices left behind would break discovery for every later scenario).
    let feed = Feed::Real {
        values,
        _server: server,
        admin: admin.clone(),
    };
    register(&admin, &host, port);
    feed
}

fn put_or_create(admin: &Client, kind: &Kind, ns: Option<&str>, name: &str, mut obj: Value) {
    for _ in 0..10 {
        let r = match admin.get(kind, ns, name) {
            Ok(old) => {
                obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                admin.update(kind, &obj).map(|_| ())
            }
            Err(_) => admin.create(kind, ns, &obj).map(|_| ()),
        };
        match r {
            Ok(()) => return,
            Err(e) if e.is_conflict() => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("write {name}: {e}"),
        }
    }
    panic!("write {name}: conflicts");
}

fn register(admin: &Client, host: &str, port: u16) {
    put_or_create(
        admin,
        &SERVICES,
        Some(SVC_NS),
        SVC,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": SVC, "namespace": SVC_NS},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}}),
    );
    put_or_create(
        admin,
        &ENDPOINTS,
        Some(SVC_NS),
        SVC,
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": SVC, "namespace": SVC_NS},
            "subsets": [{"addresses": [{"ip": host}], "ports": [{"name": "https", "port": port}]}]}),
    );
    // kube-apiserver 1.33 and later find an APIService's endpoints through EndpointSlices.
    put_or_create(
        admin,
        &ENDPOINTSLICES,
        Some(SVC_NS),
        SVC,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": SVC, "namespace": SVC_NS, "labels": {
                "kubernetes.io/service-name": SVC,
                "endpointslice.kubernetes.io/managed-by": "edgekcm-e2e"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}),
    );
    for (g, v) in GROUPS {
        let name = format!("{v}.{g}");
        put_or_create(
            admin,
            &APISERVICES,
            None,
            &name,
            json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": name},
                "spec": {"group": g, "version": v, "insecureSkipTLSVerify": true,
                    "groupPriorityMinimum": 100, "versionPriority": 100,
                    "service": {"namespace": SVC_NS, "name": SVC, "port": 443}}}),
        );
    }
    // Served through the apiserver once its availability check passed. (Only the answer is
    // looked at: an apiserver sharing the etcd without aggregator routing would mark the
    // APIService unavailable now and then.)
    for (g, v) in GROUPS {
        crate::common::eventually(
            Duration::from_secs(90),
            &format!("{g}/{v} served through the apiserver"),
            || admin.get_path(&format!("/apis/{g}/{v}")).ok(),
        );
    }
}

fn status(code: u16, reason: &str, msg: &str) -> Response {
    Response::json(
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": msg, "reason": reason, "code": code})
        .to_string(),
    )
}

fn ok(v: Value) -> Response {
    Response::json(200, v.to_string())
}

fn pods_of(admin: &Client, ns: &str, selector: &str) -> Vec<String> {
    let opts = ListOptions {
        label_selector: Some(selector.to_string()).filter(|s| !s.is_empty()),
        ..Default::default()
    };
    admin
        .list(&PODS, Some(ns), &opts)
        .map(|l| {
            l.items
                .iter()
                .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn answer(values: &Mutex<Values>, admin: &Client, req: &Request) -> Response {
    let segs: Vec<&str> = req.path.split('/').filter(|s| !s.is_empty()).collect();
    let now = edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now());
    let selector = req.query_values("labelSelector").pop().unwrap_or_default();
    let resources = |gv: &str, name: &str, kind: &str| {
        ok(
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": [{"name": name, "singularName": "", "namespaced": true, "kind": kind, "verbs": ["get", "list"]}]}),
        )
    };
    match segs.as_slice() {
        ["apis"] => ok(
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": GROUPS.iter().map(|(g, v)|
            json!({"name": g, "versions": [{"groupVersion": format!("{g}/{v}"), "version": v}],
                "preferredVersion": {"groupVersion": format!("{g}/{v}"), "version": v}})).collect::<Vec<_>>()}),
        ),
        ["apis", "metrics.k8s.io", "v1beta1"] => {
            resources("metrics.k8s.io/v1beta1", "pods", "PodMetrics")
        }
        ["apis", "custom.metrics.k8s.io", "v1beta2"] => {
            resources("custom.metrics.k8s.io/v1beta2", "pods/*", "MetricValueList")
        }
        ["apis", "external.metrics.k8s.io", "v1beta1"] => resources(
            "external.metrics.k8s.io/v1beta1",
            "*",
            "ExternalMetricValueList",
        ),
        ["apis", "metrics.k8s.io", "v1beta1", "namespaces", ns, "pods"] => {
            let pods = pods_of(admin, ns, &selector);
            let v = values.lock().unwrap();
            let items: Vec<Value> = pods
                .iter()
                .filter_map(|p| {
                    let c = v.pods.get(&(ns.to_string(), p.clone()))?;
                    Some(
                        json!({"metadata": {"name": p, "namespace": ns, "creationTimestamp": now},
                        "timestamp": now, "window": "30s", "containers": c}),
                    )
                })
                .collect();
            ok(
                json!({"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {}, "items": items}),
            )
        }
        ["apis", "custom.metrics.k8s.io", "v1beta2", "namespaces", ns, resource, name, metric] => {
            let v = values.lock().unwrap();
            let get = |res: &str, obj: &str| {
                v.custom
                    .get(&(
                        ns.to_string(),
                        res.to_string(),
                        obj.to_string(),
                        metric.to_string(),
                    ))
                    .cloned()
            };
            let item = |kind: &str, obj: &str, q: String| {
                json!({"describedObject": {"kind": kind, "namespace": ns, "name": obj, "apiVersion": "/v1"},
                    "metric": {"name": metric}, "timestamp": now, "windowSeconds": 30, "value": q})
            };
            let items: Vec<Value> = if *resource == "pods" && matches!(*name, "*" | "%2A" | "%2a") {
                pods_of(admin, ns, &selector)
                    .iter()
                    .filter_map(|p| get("pods", p).map(|q| item("Pod", p, q)))
                    .collect()
            } else {
                get(resource, name)
                    .map(|q| item(resource, name, q))
                    .into_iter()
                    .collect()
            };
            if items.is_empty() {
                return status(
                    404,
                    "NotFound",
                    &format!("the server could not find the metric {metric} for {resource}"),
                );
            }
            ok(
                json!({"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {}, "items": items}),
            )
        }
        ["apis", "external.metrics.k8s.io", "v1beta1", "namespaces", ns, metric] => {
            let v = values.lock().unwrap();
            let Some(vals) = v.external.get(&(ns.to_string(), metric.to_string())) else {
                return status(
                    404,
                    "NotFound",
                    &format!("the server could not find the metric {metric}"),
                );
            };
            let sel = edgekcm::api::labels::LabelSelector::parse(&selector).unwrap_or_default();
            let items: Vec<Value> = vals
                .iter()
                .filter(|(l, _)| sel.matches(&json!({"metadata": {"labels": l}})))
                .map(|(l, q)| json!({"metricName": metric, "metricLabels": l, "timestamp": now, "value": q}))
                .collect();
            ok(
                json!({"kind": "ExternalMetricValueList", "apiVersion": "external.metrics.k8s.io/v1beta1", "metadata": {}, "items": items}),
            )
        }
        _ => status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    }
}
