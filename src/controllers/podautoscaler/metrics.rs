//! Upstream's `computeReplicasForMetrics`: the target's selector checked, then one proposal
//! per metric of `spec.metrics` (Resource, ContainerResource, Pods, Object, External) with its
//! `currentMetrics` entry, the largest proposal taken. Error texts, Event reasons and
//! condition messages are upstream's, wrapping included.

use super::calc::{self, PodMetric, PodMetrics};
use super::spec::{self, milli, milli_quantity};
use super::sync::Run;
use crate::api::labels::{label_selector_string, LabelSelector};
use crate::obj::{At as _, Obj};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

/// What the metrics propose: -1 replicas when nothing can be done.
pub struct Proposal {
    pub replicas: i32,
    pub metric: String,
    pub statuses: Option<Vec<Value>>,
    pub error: Option<String>,
}

fn failed(error: String) -> Proposal {
    Proposal {
        replicas: -1,
        metric: String::new(),
        statuses: None,
        error: Some(error),
    }
}

pub fn compute(run: &mut Run, scale: &Value, spec_replicas: i32) -> Proposal {
    let input = run.input;
    let hpa = input.hpa;
    let sel_text = scale
        .at("/status/selector")
        .and_then(Value::as_str)
        .unwrap_or("");
    if sel_text.is_empty() {
        run.event(true, "SelectorRequired", "selector is required".into());
        run.set(
            "ScalingActive",
            "False",
            "InvalidSelector",
            "the HPA target's scale is missing a selector",
        );
        return failed("selector is required".into());
    }
    let selector = match LabelSelector::parse(sel_text) {
        Ok(s) => s,
        Err(e) => {
            let msg = format!(
                "couldn't convert selector into a corresponding internal selector object: {e}"
            );
            run.event(true, "InvalidSelector", msg.clone());
            run.set("ScalingActive", "False", "InvalidSelector", &msg);
            return failed(msg);
        }
    };
    let pods = (input.pods)(&selector);
    let selecting = (input.selecting)(&selector, &pods);
    if selecting.len() > 1 {
        let msg = format!(
            "pods by selector {sel_text} are controlled by multiple HPAs: [{}]",
            selecting.join(" ")
        );
        run.event(true, "AmbiguousSelector", msg.clone());
        run.set("ScalingActive", "False", "AmbiguousSelector", &msg);
        return failed(msg);
    }
    let status_replicas = scale
        .at("/status/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0) as i32;
    let specs = spec::metrics(hpa);
    let mut statuses = Vec::with_capacity(specs.len());
    let (mut replicas, mut metric) = (0, String::new());
    let mut invalid = 0;
    let mut first: Option<(&'static str, String)> = None;
    let mut first_error = String::new();
    for m in &specs {
        let cx = MetricCx {
            run,
            pods: &pods,
            sel_text,
            spec_replicas,
            status_replicas,
        };
        let started = std::time::Instant::now();
        let result = cx.one(m);
        let current = hpa
            .at("/status/currentReplicas")
            .and_then(Value::as_i64)
            .unwrap_or(0) as i32;
        let (action, error) = match &result {
            Ok((r, _, _)) => (super::monitor::action(*r, current), "none"),
            Err(("InvalidMetricSourceType", _, _)) => ("none", "spec"),
            Err(_) => ("none", "internal"),
        };
        super::monitor::observe_metric(action, error, started.elapsed(), s(m, "/type"));
        match result {
            Ok((r, name, st)) => {
                statuses.push(st);
                if replicas == 0 || r > replicas {
                    replicas = r;
                    metric = name;
                }
            }
            Err((reason, outer, inner)) => {
                statuses.push(json!({"type": ""}));
                run.event(true, reason, inner.clone());
                if invalid == 0 {
                    first = Some((
                        reason,
                        format!("the HPA was unable to compute the replica count: {inner}"),
                    ));
                    first_error = outer;
                }
                invalid += 1;
            }
        }
    }
    let error = (invalid > 0).then(|| {
        format!(
            "invalid metrics ({invalid} invalid out of {}), first error is: {first_error}",
            specs.len()
        )
    });
    if invalid >= specs.len() || (invalid > 0 && replicas < spec_replicas) {
        if let Some((reason, msg)) = first {
            run.set("ScalingActive", "False", reason, &msg);
        }
        return Proposal {
            replicas: -1,
            metric: String::new(),
            statuses: Some(statuses),
            error,
        };
    }
    run.set(
        "ScalingActive",
        "True",
        "ValidMetricFound",
        &format!("the HPA was able to successfully calculate a replica count from {metric}"),
    );
    Proposal {
        replicas,
        metric,
        statuses: Some(statuses),
        error,
    }
}

/// What one metric's computation reads.
struct MetricCx<'r, 'a> {
    run: &'r Run<'a>,
    pods: &'r [Obj],
    sel_text: &'r str,
    spec_replicas: i32,
    status_replicas: i32,
}

/// A metric's failure: (reason, error as returned, error as the Event and condition show it).
type Failure = (&'static str, String, String);

fn s<'v>(v: &'v Value, p: &str) -> &'v str {
    v.at(p).and_then(Value::as_str).unwrap_or("")
}

/// The query-string form of a metric's `selector` (None: it does not parse).
fn metric_selector(sel: Option<&Value>) -> Result<String, String> {
    match sel.filter(|s| !s.is_null()) {
        None => Ok(String::new()),
        Some(s) if crate::controllers::kit::selector::is_valid(s) => Ok(label_selector_string(s)),
        Some(_) => Err("invalid label selector".into()),
    }
}

fn identifier(m: &Value) -> Value {
    let mut id = json!({"name": m.get("name").cloned().unwrap_or(json!(""))});
    if let Some(sel) = m.get("selector").filter(|s| !s.is_null()) {
        id["selector"] = sel.clone();
    }
    id
}

impl MetricCx<'_, '_> {
    fn pod_refs(&self) -> Vec<&Value> {
        self.pods.iter().map(|p| &**p).collect()
    }

    fn now(&self) -> SystemTime {
        self.run.input.now
    }

    fn ns(&self) -> &str {
        crate::obj::namespace(self.run.input.hpa)
    }

    fn one(&self, m: &Value) -> Result<(i32, String, Value), Failure> {
        match s(m, "/type") {
            "Resource" => {
                let r = m.get("resource").cloned().unwrap_or_default();
                let res = s(&r, "/name");
                self.resource(&r, "").map_err(|e| {
                    (
                        "FailedGetResourceMetric",
                        format!("failed to get {res} resource metric value: {e}"),
                        e,
                    )
                })
            }
            "ContainerResource" => {
                let r = m.get("containerResource").cloned().unwrap_or_default();
                let container = s(&r, "/container");
                self.resource(&r, container).map_err(|e| {
                    (
                        "FailedGetContainerResourceMetric",
                        format!("failed to get {container} container metric value: {e}"),
                        e,
                    )
                })
            }
            "Pods" => self
                .pods_metric(m.get("pods").unwrap_or(&Value::Null))
                .map_err(|e| {
                    (
                        "FailedGetPodsMetric",
                        format!("failed to get pods metric value: {e}"),
                        e,
                    )
                }),
            "Object" => self
                .object(m.get("object").unwrap_or(&Value::Null))
                .map_err(|(e, inner)| {
                    (
                        "FailedGetObjectMetric",
                        format!("failed to get object metric value: {e}"),
                        inner,
                    )
                }),
            "External" => {
                let x = m.get("external").cloned().unwrap_or_default();
                let name = s(&x, "/metric/name");
                self.external(&x).map_err(|(e, inner)| {
                    (
                        "FailedGetExternalMetric",
                        format!("failed to get {name} external metric value: {e}"),
                        inner,
                    )
                })
            }
            t => {
                let e = format!("unknown metric source type {t:?}");
                Err(("InvalidMetricSourceType", e.clone(), e))
            }
        }
    }

    /// `GetResourceMetric`: the pods' usage of `res` (in `container` only, when given).
    fn resource_metrics(&self, res: &str, container: &str) -> Result<PodMetrics, String> {
        let items = self
            .run
            .input
            .source
            .pod_metrics(self.ns(), self.sel_text)
            .map_err(|e| format!("unable to fetch metrics from resource metrics API: {e}"))?;
        if items.is_empty() {
            return Err("no metrics returned from resource metrics API".into());
        }
        let mut out = PodMetrics::new();
        for it in &items {
            let name = s(it, "/metadata/name");
            let pm = |value| PodMetric {
                value,
                timestamp: crate::compat::timefmt::parse_rfc3339(s(it, "/timestamp")),
                window: crate::compat::parse::parse_go_duration(s(it, "/window"))
                    .unwrap_or(Duration::ZERO),
            };
            let cs = it
                .get("containers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if !container.is_empty() {
                let Some(c) = cs.iter().find(|c| s(c, "/name") == container) else {
                    return Err(format!(
                        "failed to get container metrics: container {container} not present in metrics for pod {}/{name}",
                        s(it, "/metadata/namespace")
                    ));
                };
                if let Some(q) = c.at("/usage").and_then(|u| u.get(res)) {
                    out.insert(name.to_string(), pm(milli(q)));
                }
                continue;
            }
            let mut sum = 0;
            let mut missing = cs.is_empty();
            for c in &cs {
                match c.at("/usage").and_then(|u| u.get(res)) {
                    Some(q) => sum += milli(q),
                    None => {
                        missing = true;
                        break;
                    }
                }
            }
            if !missing {
                out.insert(name.to_string(), pm(sum));
            }
        }
        Ok(out)
    }

    fn resource(&self, r: &Value, container: &str) -> Result<(i32, String, Value), String> {
        let res = s(r, "/name");
        let calc = &self.run.input.calc;
        let pods = self.pod_refs();
        let wrap = |e: String| format!("unable to get metrics for resource {res}: {e}");
        let kind = if container.is_empty() {
            "resource"
        } else {
            "containerResource"
        };
        let mut st =
            json!({"type": if container.is_empty() {"Resource"} else {"ContainerResource"}});
        let mut body = json!({"name": res});
        if !container.is_empty() {
            body["container"] = json!(container);
        }
        if let Some(avg) = r.at("/target/averageValue").filter(|v| !v.is_null()) {
            let metrics = self
                .resource_metrics(res, container)
                .map_err(wrap)
                .map_err(|e| format!("failed to get {res} usage: {e}"))?;
            let (replicas, usage) = calc::plain_replicas(
                calc,
                self.spec_replicas,
                milli(avg),
                res,
                &pods,
                metrics,
                self.now(),
            )
            .map_err(|e| format!("failed to get {res} usage: {e}"))?;
            body["current"] = json!({"averageValue": milli_quantity(usage)});
            st[kind] = body;
            return Ok((replicas, format!("{res} resource"), st));
        }
        let Some(target) = r.at("/target/averageUtilization").and_then(Value::as_i64) else {
            return Err("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set".into());
        };
        let util_err = |e: String| format!("failed to get {res} utilization: {e}");
        let metrics = self
            .resource_metrics(res, container)
            .map_err(wrap)
            .map_err(util_err)?;
        let (replicas, util, raw) = calc::resource_replicas(
            calc,
            self.spec_replicas,
            target as i32,
            res,
            container,
            &pods,
            metrics,
            self.now(),
        )
        .map_err(util_err)?;
        body["current"] = json!({"averageUtilization": util, "averageValue": milli_quantity(raw)});
        st[kind] = body;
        let name = if container.is_empty() {
            format!("{res} resource utilization (percentage of request)")
        } else {
            format!("{res} container resource utilization (percentage of request)")
        };
        Ok((replicas, name, st))
    }

    fn pods_metric(&self, p: &Value) -> Result<(i32, String, Value), String> {
        let metric = p.at("/metric").cloned().unwrap_or_default();
        let name = s(&metric, "/name");
        let msel = metric_selector(metric.get("selector"))?;
        let target = milli(p.at("/target/averageValue").unwrap_or(&Value::Null));
        let items = self
            .run
            .input
            .source
            .pods_metric(self.ns(), name, self.sel_text, &msel)
            .map_err(|e| format!("unable to fetch metrics from custom metrics API: {e}"))
            .and_then(|items| {
                if items.is_empty() {
                    Err("no metrics returned from custom metrics API".to_string())
                } else {
                    Ok(items)
                }
            })
            .map_err(|e| format!("unable to get metric {name}: {e}"))?;
        let mut metrics = PodMetrics::new();
        for it in &items {
            let window = it
                .get("windowSeconds")
                .and_then(Value::as_u64)
                .map_or(Duration::from_secs(60), Duration::from_secs);
            metrics.insert(
                s(it, "/describedObject/name").to_string(),
                PodMetric {
                    value: milli(it.get("value").unwrap_or(&Value::Null)),
                    timestamp: crate::compat::timefmt::parse_rfc3339(s(it, "/timestamp")),
                    window,
                },
            );
        }
        let (replicas, usage) = calc::plain_replicas(
            &self.run.input.calc,
            self.spec_replicas,
            target,
            "",
            &self.pod_refs(),
            metrics,
            self.now(),
        )?;
        let st = json!({"type": "Pods", "pods": {"metric": identifier(&metric),
            "current": {"averageValue": milli_quantity(usage)}}});
        Ok((replicas, format!("pods metric {name}"), st))
    }

    /// (error as returned, error as the Event shows it).
    fn object(&self, o: &Value) -> Result<(i32, String, Value), (String, String)> {
        let same = |e: String| (e.clone(), e);
        let metric = o.at("/metric").cloned().unwrap_or_default();
        let name = s(&metric, "/name");
        let described = o.get("describedObject").cloned().unwrap_or(json!({}));
        let (kind, obj_name) = (s(&described, "/kind"), s(&described, "/name"));
        let msel = metric_selector(metric.get("selector")).map_err(same)?;
        let ns = self.ns();
        let fetch = || -> Result<(i64, Option<SystemTime>), String> {
            let items = self
                .run
                .input
                .source
                .object_metric(
                    ns,
                    s(&described, "/apiVersion"),
                    kind,
                    obj_name,
                    name,
                    &msel,
                )
                .map_err(|e| format!("unable to fetch metrics from custom metrics API: {e}"))?;
            if items.len() != 1 {
                return Err(format!(
                    "unable to fetch metrics from custom metrics API: the custom metrics API server returned {} results when we asked for exactly one",
                    items.len()
                ));
            }
            Ok((
                milli(items[0].get("value").unwrap_or(&Value::Null)),
                crate::compat::timefmt::parse_rfc3339(s(&items[0], "/timestamp")),
            ))
        };
        // Upstream's format string has one verb fewer than it meant: the error lands after
        // the object's name.
        let wrap =
            |e: String| format!("unable to get metric {name}: {kind} on {ns} {obj_name}/{e}");
        let calc = &self.run.input.calc;
        let target = o.at("/target");
        let t = target.map(|t| s(t, "/type")).unwrap_or("");
        if let (Some(v), "Value") = (
            target.and_then(|t| t.get("value")).filter(|v| !v.is_null()),
            t,
        ) {
            let (usage, _) = fetch().map_err(wrap).map_err(same)?;
            let ratio = usage as f64 / milli(v) as f64;
            let replicas =
                calc::usage_ratio_replicas(calc, self.spec_replicas, ratio, &self.pod_refs())
                    .map_err(same)?;
            let st = json!({"type": "Object", "object": {"describedObject": described,
                "metric": identifier(&metric), "current": {"value": milli_quantity(usage)}}});
            return Ok((replicas, format!("{kind} metric {name}"), st));
        }
        if let (Some(v), "AverageValue") = (
            target
                .and_then(|t| t.get("averageValue"))
                .filter(|v| !v.is_null()),
            t,
        ) {
            let (usage, _) = fetch()
                .map_err(wrap)
                .map_err(|e| (format!("failed to get {name} object metric: {e}"), e))?;
            let (replicas, per_pod) =
                calc::per_pod_replicas(calc, self.status_replicas, milli(v), usage);
            let st = json!({"type": "Object", "object": {"describedObject": {"kind": "", "name": ""},
                "metric": identifier(&metric), "current": {"averageValue": milli_quantity(per_pod)}}});
            let label = format!(
                "external metric {name}({})",
                spec::selector_debug(metric.get("selector"))
            );
            return Ok((replicas, label, st));
        }
        Err(same(
            "invalid object metric source: neither a value target nor an average value target was set"
                .into(),
        ))
    }

    fn external(&self, x: &Value) -> Result<(i32, String, Value), (String, String)> {
        let metric = x.at("/metric").cloned().unwrap_or_default();
        let name = s(&metric, "/name");
        let ns = self.ns();
        let debug = spec::selector_debug(metric.get("selector"));
        let fetch = || -> Result<i64, String> {
            let msel = metric_selector(metric.get("selector"))?;
            let items = self
                .run
                .input
                .source
                .external_metric(ns, name, &msel)
                .map_err(|e| format!("unable to fetch metrics from external metrics API: {e}"))
                .and_then(|items| {
                    if items.is_empty() {
                        Err("no metrics returned from external metrics API".to_string())
                    } else {
                        Ok(items)
                    }
                })
                .map_err(|e| format!("unable to get external metric {ns}/{name}/{debug}: {e}"))?;
            Ok(items
                .iter()
                .map(|i| milli(i.get("value").unwrap_or(&Value::Null)))
                .sum())
        };
        let calc = &self.run.input.calc;
        let label = format!("external metric {name}({debug})");
        if let Some(v) = x.at("/target/averageValue").filter(|v| !v.is_null()) {
            let usage =
                fetch().map_err(|e| (format!("failed to get {name} external metric: {e}"), e))?;
            let (replicas, per_pod) =
                calc::per_pod_replicas(calc, self.status_replicas, milli(v), usage);
            let st = json!({"type": "External", "external": {"metric": identifier(&metric),
                "current": {"averageValue": milli_quantity(per_pod)}}});
            return Ok((replicas, label, st));
        }
        if let Some(v) = x.at("/target/value").filter(|v| !v.is_null()) {
            let wrap = |e: String| (format!("failed to get external metric {name}: {e}"), e);
            let usage = fetch().map_err(wrap)?;
            let ratio = usage as f64 / milli(v) as f64;
            let replicas =
                calc::usage_ratio_replicas(calc, self.spec_replicas, ratio, &self.pod_refs())
                    .map_err(wrap)?;
            let st = json!({"type": "External", "external": {"metric": identifier(&metric),
                "current": {"value": milli_quantity(usage)}}});
            return Ok((replicas, label, st));
        }
        let e = "invalid external metric source: neither a value target nor an average value target was set".to_string();
        Err((e.clone(), e))
    }
}
