//! Upstream's replica calculator: from the pods a target's selector picks and their metrics,
//! the replica count a metric proposes. Pods being deleted or failed are ignored; pending
//! ones, and for CPU those still starting (`--horizontal-pod-autoscaler-cpu-initialization-period`,
//! `--horizontal-pod-autoscaler-initial-readiness-delay`), are unready; pods without a
//! metric are missing. Unready and missing pods count against the direction of the change,
//! so they never make it larger.

use crate::controllers::kit::pod::{ready_condition, time_field};
use crate::obj::At as _;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

/// One pod's metric value (milli-units) and when and over what window it was taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PodMetric {
    pub value: i64,
    pub timestamp: Option<SystemTime>,
    pub window: Duration,
}

pub type PodMetrics = BTreeMap<String, PodMetric>;

/// How far a usage ratio may be from 1 before the replicas change, below and above
/// (upstream's `Tolerances`; both `--horizontal-pod-autoscaler-tolerance` unless the HPA's
/// `behavior` sets its own, v1.33 on).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerances {
    pub down: f64,
    pub up: f64,
}

impl Tolerances {
    pub fn both(t: f64) -> Self {
        Tolerances { down: t, up: t }
    }

    /// Upstream's `isWithin`: the change would be too small.
    pub fn within(&self, ratio: f64) -> bool {
        1.0 - self.down <= ratio && ratio <= 1.0 + self.up
    }
}

/// The calculator's settings (the controller's flags, and an HPA's own tolerances).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calc {
    pub tolerance: Tolerances,
    pub cpu_initialization_period: Duration,
    pub initial_readiness_delay: Duration,
}

struct Groups {
    ready: usize,
    unready: BTreeSet<String>,
    missing: BTreeSet<String>,
    ignored: BTreeSet<String>,
}

fn phase(p: &Value) -> &str {
    p.at("/status/phase").and_then(Value::as_str).unwrap_or("")
}

fn group_pods(
    c: &Calc,
    pods: &[&Value],
    metrics: &PodMetrics,
    cpu: bool,
    now: SystemTime,
) -> Groups {
    let mut g = Groups {
        ready: 0,
        unready: BTreeSet::new(),
        missing: BTreeSet::new(),
        ignored: BTreeSet::new(),
    };
    for p in pods {
        let name = crate::obj::name(p).to_string();
        if crate::obj::is_deleting(p) || phase(p) == "Failed" {
            g.ignored.insert(name);
            continue;
        }
        if phase(p) == "Pending" {
            g.unready.insert(name);
            continue;
        }
        let Some(metric) = metrics.get(&name) else {
            g.missing.insert(name);
            continue;
        };
        if cpu {
            let cond = ready_condition(p);
            let start = time_field(p.at("/status/startTime"));
            let unready = match (cond, start) {
                (Some(cond), Some(start)) => {
                    let status_false = cond.get("status").and_then(Value::as_str) == Some("False");
                    let transition = time_field(cond.get("lastTransitionTime"))
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    if start + c.cpu_initialization_period > now {
                        status_false
                            || metric.timestamp.unwrap_or(SystemTime::UNIX_EPOCH)
                                < transition + metric.window
                    } else {
                        status_false && start + c.initial_readiness_delay > transition
                    }
                }
                _ => true,
            };
            if unready {
                g.unready.insert(name);
                continue;
            }
        }
        g.ready += 1;
    }
    g
}

/// Each pod's request of `resource` (upstream's `calculateRequests`): the pod-level request
/// when the pod sets one and no container is named (PodLevelResources, beta and on from
/// v1.34), else the sum over its containers and restartable init containers (sidecars,
/// v1.29 on), or the named container's.
fn pod_requests(
    pods: &[&Value],
    container: &str,
    resource: &str,
) -> Result<BTreeMap<String, i64>, String> {
    let pod_level = crate::config::gates::enabled("PodLevelResources");
    let mut out = BTreeMap::new();
    for p in pods {
        let request = if pod_level && container.is_empty() && pod_level_requests_set(p) {
            pod_level_request(p, resource)?
        } else {
            container_requests(p, container, resource)?
        };
        out.insert(crate::obj::name(p).to_string(), request);
    }
    Ok(out)
}

/// A resource requests can be set for at the pod level (`IsSupportedPodLevelResource`).
fn pod_level_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory") || name.starts_with("hugepages-")
}

fn pod_level_requests_set(p: &Value) -> bool {
    p.at("/spec/resources/requests")
        .and_then(Value::as_object)
        .is_some_and(|r| r.keys().any(|k| pod_level_resource(k)))
}

/// The containers requests are summed over: the regular ones, then the restartable init
/// containers.
fn request_containers(p: &Value) -> Vec<&Value> {
    let list = |path: &str| p.at(path).and_then(Value::as_array).into_iter().flatten();
    list("/spec/containers")
        .chain(list("/spec/initContainers").filter(|c| c["restartPolicy"] == "Always"))
        .collect()
}

/// `resourcehelpers.PodRequests` for one resource: the pod-level request, else the
/// containers' (their sum, or the largest plain init container's when that is more), plus
/// the pod's overhead.
fn pod_level_request(p: &Value, resource: &str) -> Result<i64, String> {
    let req = |c: &Value| -> Option<i64> {
        c.at("/resources/requests")
            .and_then(|r| r.get(resource))
            .map(super::spec::milli)
    };
    let pod = p
        .at("/spec/resources/requests")
        .and_then(|r| r.get(resource))
        .filter(|_| pod_level_resource(resource));
    let mut value = match pod {
        Some(q) => Some(super::spec::milli(q)),
        None => {
            let found: Vec<i64> = request_containers(p).into_iter().filter_map(req).collect();
            let init_max = p
                .at("/spec/initContainers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|c| c["restartPolicy"] != "Always")
                .filter_map(req)
                .max();
            match (found.is_empty(), init_max) {
                (true, None) => None,
                _ => Some(found.iter().sum::<i64>().max(init_max.unwrap_or(0))),
            }
        }
    };
    if let (Some(v), Some(o)) = (
        value.as_mut(),
        p.at("/spec/overhead").and_then(|o| o.get(resource)),
    ) {
        *v += super::spec::milli(o);
    }
    value.ok_or_else(|| {
        format!(
            "missing pod-level request for {resource} in Pod {}",
            crate::obj::name(p)
        )
    })
}

/// `calculatePodRequestsFromContainers`.
fn container_requests(p: &Value, container: &str, resource: &str) -> Result<i64, String> {
    let mut sum = 0i64;
    for ct in request_containers(p) {
        let cname = ct.get("name").and_then(Value::as_str).unwrap_or("");
        if container.is_empty() || container == cname {
            match ct.at("/resources/requests").and_then(|r| r.get(resource)) {
                Some(q) => sum += super::spec::milli(q),
                None => {
                    return Err(format!(
                        "missing request for {resource} in container {cname} of Pod {}",
                        crate::obj::name(p)
                    ))
                }
            }
        }
        if container == cname {
            return Ok(sum);
        }
    }
    if !container.is_empty() {
        return Err(format!(
            "container {container} not found in Pod {}",
            crate::obj::name(p)
        ));
    }
    Ok(sum)
}

/// `GetResourceUtilizationRatio`: (ratio, utilization %, average value).
fn utilization_ratio(
    metrics: &PodMetrics,
    requests: &BTreeMap<String, i64>,
    target: i32,
) -> Result<(f64, i32, i64), String> {
    let (mut total, mut req, mut n) = (0i64, 0i64, 0i64);
    for (name, m) in metrics {
        if let Some(r) = requests.get(name) {
            total += m.value;
            req += r;
            n += 1;
        }
    }
    if req == 0 {
        return Err("no metrics returned matched known pods".into());
    }
    let util = ((total * 100) / req) as i32;
    Ok((util as f64 / target as f64, util, total / n))
}

fn usage_ratio(metrics: &PodMetrics, target: i64) -> (f64, i64) {
    let total: i64 = metrics.values().map(|m| m.value).sum();
    let usage = total / metrics.len().max(1) as i64;
    (usage as f64 / target as f64, usage)
}

fn ceil(x: f64) -> i32 {
    x.ceil() as i32
}

/// Resource utilization (`GetResourceReplicas`): (replicas, utilization %, average value).
#[allow(clippy::too_many_arguments)]
pub fn resource_replicas(
    c: &Calc,
    current: i32,
    target_utilization: i32,
    resource: &str,
    container: &str,
    pods: &[&Value],
    mut metrics: PodMetrics,
    now: SystemTime,
) -> Result<(i32, i32, i64), String> {
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let g = group_pods(c, pods, &metrics, resource == "cpu", now);
    for n in g.ignored.iter().chain(&g.unready) {
        metrics.remove(n);
    }
    if metrics.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let requests = pod_requests(pods, container, resource)?;
    let (ratio, util, raw) = utilization_ratio(&metrics, &requests, target_utilization)?;
    let up_with_unready = !g.unready.is_empty() && ratio > 1.0;
    if !up_with_unready && g.missing.is_empty() {
        if c.tolerance.within(ratio) {
            return Ok((current, util, raw));
        }
        return Ok((ceil(ratio * g.ready as f64), util, raw));
    }
    if !g.missing.is_empty() {
        let fallback = i64::from(target_utilization.max(100));
        for n in &g.missing {
            let value = if ratio < 1.0 {
                requests.get(n).copied().unwrap_or(0) * fallback / 100
            } else {
                0
            };
            if ratio != 1.0 {
                metrics.insert(n.clone(), zero(value));
            }
        }
    }
    if up_with_unready {
        for n in &g.unready {
            metrics.insert(n.clone(), zero(0));
        }
    }
    let (new_ratio, _, _) = utilization_ratio(&metrics, &requests, target_utilization)?;
    Ok((
        settle(c, current, ratio, new_ratio, metrics.len()),
        util,
        raw,
    ))
}

fn zero(value: i64) -> PodMetric {
    PodMetric {
        value,
        timestamp: None,
        window: Duration::ZERO,
    }
}

/// The end of both calculators once unready and missing pods are counted in.
fn settle(c: &Calc, current: i32, ratio: f64, new_ratio: f64, n: usize) -> i32 {
    if c.tolerance.within(new_ratio)
        || (ratio < 1.0 && new_ratio > 1.0)
        || (ratio > 1.0 && new_ratio < 1.0)
    {
        return current;
    }
    let new = ceil(new_ratio * n as f64);
    if (new_ratio < 1.0 && new > current) || (new_ratio > 1.0 && new < current) {
        return current;
    }
    new
}

/// A per-pod average value (`calcPlainMetricReplicas`: Resource AverageValue and Pods
/// metrics): (replicas, average usage).
pub fn plain_replicas(
    c: &Calc,
    current: i32,
    target: i64,
    resource: &str,
    pods: &[&Value],
    mut metrics: PodMetrics,
    now: SystemTime,
) -> Result<(i32, i64), String> {
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let g = group_pods(c, pods, &metrics, resource == "cpu", now);
    for n in g.ignored.iter().chain(&g.unready) {
        metrics.remove(n);
    }
    if metrics.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let (ratio, usage) = usage_ratio(&metrics, target);
    let up_with_unready = !g.unready.is_empty() && ratio > 1.0;
    if !up_with_unready && g.missing.is_empty() {
        if c.tolerance.within(ratio) {
            return Ok((current, usage));
        }
        return Ok((ceil(ratio * g.ready as f64), usage));
    }
    if ratio != 1.0 {
        for n in &g.missing {
            metrics.insert(n.clone(), zero(if ratio < 1.0 { target } else { 0 }));
        }
    }
    if up_with_unready {
        for n in &g.unready {
            metrics.insert(n.clone(), zero(0));
        }
    }
    let (new_ratio, _) = usage_ratio(&metrics, target);
    Ok((settle(c, current, ratio, new_ratio, metrics.len()), usage))
}

/// Running and ready pods (`getReadyPodsCount`).
pub fn ready_count(pods: &[&Value]) -> Result<i64, String> {
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    Ok(pods
        .iter()
        .filter(|p| phase(p) == "Running" && crate::controllers::kit::pod::is_pod_ready(p))
        .count() as i64)
}

/// An object's or an external metric's total against a target value
/// (`getUsageRatioReplicaCount`).
pub fn usage_ratio_replicas(
    c: &Calc,
    current: i32,
    ratio: f64,
    pods: &[&Value],
) -> Result<i32, String> {
    if current == 0 {
        return Ok(ceil(ratio));
    }
    if c.tolerance.within(ratio) {
        return Ok(current);
    }
    let ready = ready_count(pods).map_err(|e| format!("unable to calculate ready pods: {e}"))?;
    Ok(ceil(ratio * ready as f64))
}

/// A total against a per-pod average target (`GetObjectPerPodMetricReplicas`,
/// `GetExternalPerPodMetricReplicas`): (replicas, usage per pod).
pub fn per_pod_replicas(c: &Calc, status_replicas: i32, target: i64, usage: i64) -> (i32, i64) {
    let mut replicas = status_replicas;
    let ratio = usage as f64 / (target as f64 * status_replicas as f64);
    if !c.tolerance.within(ratio) {
        replicas = ceil(usage as f64 / target as f64);
    }
    let per_pod = (usage as f64 / status_replicas as f64).ceil();
    // Go converts +Inf and NaN (no replicas) to the minimum int64.
    let per_pod = if per_pod.is_finite() {
        per_pod as i64
    } else {
        i64::MIN
    };
    (replicas, per_pod)
}

#[cfg(test)]
mod request_tests {
    use super::pod_requests;
    use serde_json::json;

    #[test]
    fn requests_count_sidecars_and_pod_level_values() {
        let p = json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}],
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
                {"name": "setup", "resources": {"requests": {"cpu": "900m"}}}]}});
        let r = |p: &serde_json::Value, c: &str| pod_requests(&[p], c, "cpu").map(|m| m["p"]);
        // The sidecar counts; the plain init container does not.
        assert_eq!(r(&p, ""), Ok(150));
        assert_eq!(r(&p, "side"), Ok(50));
        assert_eq!(
            r(&p, "nope"),
            Err("container nope not found in Pod p".into())
        );
        // Pod-level requests win when no container is named; overhead is added.
        let mut q = p.clone();
        q["spec"]["resources"] = json!({"requests": {"cpu": "400m"}});
        q["spec"]["overhead"] = json!({"cpu": "10m"});
        assert_eq!(r(&q, ""), Ok(410));
        assert_eq!(r(&q, "a"), Ok(100));
        // Pod-level memory only: CPU comes from the containers (here the init container's
        // 900m is more than their 150m).
        q["spec"]["resources"] = json!({"requests": {"memory": "1Gi"}});
        assert_eq!(r(&q, ""), Ok(910));
    }
}
