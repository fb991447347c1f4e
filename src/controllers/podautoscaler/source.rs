//! What the autoscaler reads and writes live, never from the cache: the target's `scale`
//! subresource (any kind that has one, custom resources through discovery) and the three
//! metrics APIs (`metrics.k8s.io/v1beta1`, `custom.metrics.k8s.io/v1beta2`,
//! `external.metrics.k8s.io/v1beta1`). [`Source`] is what a sync uses, so unit tests give it
//! answers without a server.

use crate::api::client::{percent_encode, Client};
use crate::Error;
use serde_json::Value;

/// The live reads and the one write of a sync. Errors are the texts upstream's clients give.
pub trait Source {
    /// GET the target's Scale: the Scale and its path (for the update).
    fn get_scale(
        &self,
        ns: &str,
        api_version: &str,
        kind: &str,
        name: &str,
    ) -> Result<(Value, String), String>;
    /// PUT the Scale back.
    fn update_scale(&self, path: &str, scale: &Value) -> Result<Value, String>;
    /// `PodMetrics` items of the pods `selector` picks.
    fn pod_metrics(&self, ns: &str, selector: &str) -> Result<Vec<Value>, String>;
    /// `MetricValue` items of a custom metric of the pods `selector` picks.
    fn pods_metric(
        &self,
        ns: &str,
        metric: &str,
        selector: &str,
        metric_selector: &str,
    ) -> Result<Vec<Value>, String>;
    /// `MetricValue` items of a custom metric of one object.
    fn object_metric(
        &self,
        ns: &str,
        api_version: &str,
        kind: &str,
        name: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Vec<Value>, String>;
    /// `ExternalMetricValue` items.
    fn external_metric(
        &self,
        ns: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Vec<Value>, String>;
}

/// The text of an error as client-go prints it: the server's message for an API error.
pub fn go_error(e: &Error) -> String {
    match e {
        Error::Api { message, .. } if !message.is_empty() => message.clone(),
        e => e.to_string(),
    }
}

/// The resources of kinds every cluster has, by (group, kind); others are found by discovery.
const BUILTIN: &[(&str, &str, &str, &str)] = &[
    ("apps", "Deployment", "v1", "deployments"),
    ("apps", "ReplicaSet", "v1", "replicasets"),
    ("apps", "StatefulSet", "v1", "statefulsets"),
    ("", "ReplicationController", "v1", "replicationcontrollers"),
    ("", "Pod", "v1", "pods"),
    ("", "Service", "v1", "services"),
    ("", "Namespace", "v1", "namespaces"),
    ("apps", "DaemonSet", "v1", "daemonsets"),
    ("batch", "Job", "v1", "jobs"),
    ("networking.k8s.io", "Ingress", "v1", "ingresses"),
];

fn group_version(api_version: &str) -> Result<(String, String), String> {
    crate::api::discovery::parse_group_version(api_version)
}

fn group_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// The live source: the controller's own client.
pub struct Rest<'a> {
    pub client: &'a Client,
}

impl Rest<'_> {
    /// (group, version, plural) of a kind, as upstream's REST mapper finds it.
    fn resource(&self, api_version: &str, kind: &str) -> Result<(String, String, String), String> {
        let (group, version) = group_version(api_version)?;
        if let Some((g, _, v, r)) = BUILTIN
            .iter()
            .find(|(g, k, _, _)| *g == group && *k == kind)
        {
            return Ok((g.to_string(), v.to_string(), r.to_string()));
        }
        let no_match = || format!("no matches for kind {kind:?} in group {group:?}");
        let list = self
            .client
            .get_path(&group_path(&group, &version))
            .map_err(|e| match e {
                Error::Api { code: 404, .. } => no_match(),
                e => go_error(&e),
            })?;
        list.get("resources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|r| {
                r.get("kind").and_then(Value::as_str) == Some(kind)
                    && r.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| !n.contains('/'))
            })
            .and_then(|r| r.get("name").and_then(Value::as_str))
            .map(|n| (group.clone(), version.clone(), n.to_string()))
            .ok_or_else(no_match)
    }

    fn items(&self, path: &str) -> Result<Vec<Value>, Error> {
        let v = self.client.get_path(path)?;
        Ok(match v.get("items") {
            Some(Value::Array(a)) => a.clone(),
            _ => Vec::new(),
        })
    }
}

fn query(pairs: &[(&str, &str)]) -> String {
    let q: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect();
    if q.is_empty() {
        String::new()
    } else {
        format!("?{}", q.join("&"))
    }
}

impl Source for Rest<'_> {
    fn get_scale(
        &self,
        ns: &str,
        api_version: &str,
        kind: &str,
        name: &str,
    ) -> Result<(Value, String), String> {
        let (group, version, plural) = self.resource(api_version, kind)?;
        let path = format!(
            "{}/namespaces/{ns}/{plural}/{name}/scale",
            group_path(&group, &version)
        );
        let scale = self.client.get_path(&path).map_err(|e| go_error(&e))?;
        Ok((scale, path))
    }

    fn update_scale(&self, path: &str, scale: &Value) -> Result<Value, String> {
        self.client.put_path(path, scale).map_err(|e| go_error(&e))
    }

    fn pod_metrics(&self, ns: &str, selector: &str) -> Result<Vec<Value>, String> {
        let path = format!(
            "/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods{}",
            query(&[("labelSelector", selector)])
        );
        self.items(&path).map_err(|e| go_error(&e))
    }

    fn pods_metric(
        &self,
        ns: &str,
        metric: &str,
        selector: &str,
        metric_selector: &str,
    ) -> Result<Vec<Value>, String> {
        let path = format!(
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/pods/*/{}{}",
            percent_encode(metric),
            query(&[
                ("labelSelector", selector),
                ("metricLabelSelector", metric_selector)
            ])
        );
        self.items(&path).map_err(|e| go_error(&e))
    }

    fn object_metric(
        &self,
        ns: &str,
        api_version: &str,
        kind: &str,
        name: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Vec<Value>, String> {
        let q = query(&[("metricLabelSelector", metric_selector)]);
        let metric = percent_encode(metric);
        let (group, _) = group_version(api_version)?;
        let path = if kind == "Namespace" && group.is_empty() {
            format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/metrics/{metric}{q}")
        } else {
            let (g, _, plural) = self
                .resource(api_version, kind)
                .map_err(|e| format!("unable to map kind {kind}.{group} to resource: {e}"))?;
            let resource = if g.is_empty() {
                plural
            } else {
                format!("{plural}.{g}")
            };
            format!(
                "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/{resource}/{}/{metric}{q}",
                percent_encode(name)
            )
        };
        self.items(&path).map_err(|e| go_error(&e))
    }

    fn external_metric(
        &self,
        ns: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Vec<Value>, String> {
        let path = format!(
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{}{}",
            percent_encode(metric),
            query(&[("labelSelector", metric_selector)])
        );
        self.items(&path).map_err(|e| go_error(&e))
    }
}
