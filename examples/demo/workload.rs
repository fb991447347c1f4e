//! The demo's workload in namespace `demo`, and when it has settled.

use edgekcm::api::resources::{
    Kind, CRONJOBS, DAEMONSETS, DEPLOYMENTS, ENDPOINTS, JOBS, SERVICES, STATEFULSETS,
};
use edgekcm::sandbox::Sandbox;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

pub const NS: &str = "demo";

/// A pod template of one container labelled `app`. Pods get one second to stop, so the
/// namespace controller, which waits out the longest grace period, finishes soon.
fn template(app: &str, image: &str, restart: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}},
        "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": app, "image": image}]}})
}

fn meta(kind: &Kind, name: &str) -> Value {
    json!({"apiVersion": kind.api_version(), "kind": kind.kind,
        "metadata": {"name": name, "namespace": NS}})
}

fn with_spec(kind: &'static Kind, name: &str, spec: Value) -> (&'static Kind, Value) {
    let mut o = meta(kind, name);
    o["spec"] = spec;
    (kind, o)
}

/// A cron schedule that matched once, a minute ago (UTC), and not again for a year, with a
/// last start before that: the CronJob finds one missed start and fires at once, as one that
/// had been running for a while would.
fn once_a_minute_ago(now: SystemTime) -> (String, String) {
    let ago = |s| edgekcm::timefmt::rfc3339(now - Duration::from_secs(s));
    let t = ago(60);
    let num = |r: std::ops::Range<usize>| t[r].parse::<u32>().unwrap_or(0);
    let schedule = format!(
        "{} {} {} {} *",
        num(14..16),
        num(11..13),
        num(8..10),
        num(5..7)
    );
    (schedule, ago(120))
}

/// The objects the demo creates, in order: a Deployment behind a Service, a StatefulSet with
/// its headless Service, a DaemonSet (one pod per node), a Job removed a second after it
/// finished, and a CronJob that fires once.
pub fn objects(now: SystemTime) -> Vec<(&'static Kind, Value)> {
    let selector = |app: &str| json!({"matchLabels": {"app": app}});
    let (schedule, last) = once_a_minute_ago(now);
    let mut cron = with_spec(
        &CRONJOBS,
        "report",
        json!({"schedule": schedule, "timeZone": "Etc/UTC",
            "jobTemplate": {"spec": {"template": template("report", "busybox:1.36", "Never")}}}),
    );
    cron.1["status"] = json!({"lastScheduleTime": last});
    vec![
        with_spec(
            &SERVICES,
            "web",
            json!({"selector": {"app": "web"}, "ports": [{"port": 80}]}),
        ),
        with_spec(
            &DEPLOYMENTS,
            "web",
            json!({"replicas": 2, "selector": selector("web"),
                "template": template("web", "nginx:1.25", "Always")}),
        ),
        with_spec(
            &SERVICES,
            "db",
            json!({"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432}]}),
        ),
        with_spec(
            &STATEFULSETS,
            "db",
            json!({"replicas": 2, "serviceName": "db", "selector": selector("db"),
                "template": template("db", "postgres:16", "Always")}),
        ),
        with_spec(
            &DAEMONSETS,
            "agent",
            json!({"selector": selector("agent"),
                "template": template("agent", "fluent-bit:3.0", "Always")}),
        ),
        with_spec(
            &JOBS,
            "pi",
            json!({"ttlSecondsAfterFinished": 1,
                "template": template("pi", "perl:5.34", "Never")}),
        ),
        cron,
    ]
}

fn at(sb: &Sandbox, kind: &Kind, name: &str, path: &str) -> Option<Value> {
    sb.get(kind, Some(NS), name)?.pointer(path).cloned()
}

/// What has not settled yet (empty: everything has): the Deployment's and the StatefulSet's
/// pods ready, a daemon pod ready on each of `nodes` nodes, the Service's endpoints, the Job
/// finished and removed, the CronJob's Job succeeded.
pub fn pending(sb: &Sandbox, nodes: usize) -> Vec<&'static str> {
    let n = |v: Option<Value>| v.and_then(|v| v.as_u64()).unwrap_or(0);
    let mut left = Vec::new();
    if n(at(sb, &DEPLOYMENTS, "web", "/status/availableReplicas")) < 2 {
        left.push("Deployment web available");
    }
    let addresses = at(sb, &ENDPOINTS, "web", "/subsets/0/addresses");
    if addresses.as_ref().and_then(Value::as_array).map(Vec::len) != Some(2) {
        left.push("Service web's 2 endpoints");
    }
    if n(at(sb, &STATEFULSETS, "db", "/status/readyReplicas")) < 2 {
        left.push("StatefulSet db ready");
    }
    if n(at(sb, &DAEMONSETS, "agent", "/status/numberReady")) < nodes as u64 {
        left.push("DaemonSet agent ready on every node");
    }
    if sb.get(&JOBS, Some(NS), "pi").is_some() {
        left.push("Job pi finished and removed");
    }
    if at(sb, &CRONJOBS, "report", "/status/lastSuccessfulTime").is_none() {
        left.push("CronJob report's Job succeeded");
    }
    left
}
