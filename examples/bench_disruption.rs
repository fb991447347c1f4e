//! The disruption-controller under load: D Deployments of R replicas, each with a
//! PodDisruptionBudget `maxUnavailable: 20%` (so every budget needs its Deployment's scale,
//! found through the pods' ReplicaSet). The bench plays the deployment and replica-set
//! controllers and the kubelet: it makes each Deployment, its ReplicaSet and its Ready pods
//! itself, so only `--controllers=disruption` runs. Each manager is started and synced (a
//! probe budget has its status) before the budgets and workloads are made. Prints the wall
//! time until every budget's status is right (expected R, healthy R, disruptions allowed as
//! 20 % of R rounded up), the CPU seconds of the manager over that time, and its peak RSS. A
//! benchmark, not a test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_disruption
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig KCM_BENCH_UPSTREAM="kube-controller-manager ..." \
//!         cargo run --release --example bench_disruption -- --deployments=100
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`); `KCM_BENCH_UPSTREAM` runs after
//! edgekcm on a fresh namespace. Each manager's log is kept as
//! `/tmp/bench-disruption-<manager>.log`.
//!
//! Flags: `--deployments=D` (100), `--replicas=R` (5), `--timeout=SECONDS` (300),
//! `--skip-edgekcm`.

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{parallel, Args, Cluster, Proc, Res, Table};
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{DEPLOYMENTS, NAMESPACES, PODDISRUPTIONBUDGETS, PODS, REPLICASETS};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

struct Opts {
    deployments: usize,
    replicas: usize,
    timeout: Duration,
    skip_edgekcm: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut a = Args::parse();
    let o = Opts {
        deployments: a.count("--deployments", 100)?,
        replicas: a.count("--replicas", 5)?,
        timeout: a.secs("--timeout", 300)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
    };
    a.done()?;
    Ok(o)
}

fn labels(name: &str) -> Value {
    json!({"app": name})
}

fn pod_spec() -> Value {
    json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]})
}

fn owner_ref(o: &Value) -> Value {
    json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
        "uid": o["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true})
}

fn budget(name: &str, selector: Value) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": {"maxUnavailable": "20%", "selector": selector}})
}

/// One Deployment with its ReplicaSet and `replicas` Ready pods, as the controllers and the
/// kubelet would leave them.
fn workload(admin: &Client, ns: &str, name: &str, replicas: usize) -> Res<()> {
    let l = labels(name);
    let tpl = json!({"metadata": {"labels": l}, "spec": pod_spec()});
    let d = admin.create(
        &DEPLOYMENTS,
        Some(ns),
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": l}, "template": tpl}}),
    )?;
    let rs = admin.create(
        &REPLICASETS,
        Some(ns),
        &json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": format!("{name}-1"), "ownerReferences": [owner_ref(&d)]},
            "spec": {"replicas": replicas, "selector": {"matchLabels": l}, "template": tpl}}),
    )?;
    for i in 0..replicas {
        let mut p = admin.create(
            &PODS,
            Some(ns),
            &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-1-{i}"), "labels": l,
                    "ownerReferences": [owner_ref(&rs)]},
                "spec": pod_spec()}),
        )?;
        p["status"]["phase"] = json!("Running");
        p["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
            "lastTransitionTime": edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now())}]);
        admin.update_subresource(&PODS, &p, "status")?;
    }
    Ok(())
}

/// Budgets whose status is what the workload calls for.
fn right(admin: &Client, ns: &str, replicas: i64) -> usize {
    let unavailable = (replicas * 20 + 99) / 100;
    let want = [replicas, replicas - unavailable, replicas, unavailable];
    admin
        .list(&PODDISRUPTIONBUDGETS, Some(ns), &ListOptions::default())
        .map(|l| {
            l.items
                .iter()
                .filter(|b| {
                    let s = &b["status"];
                    [
                        "expectedPods",
                        "desiredHealthy",
                        "currentHealthy",
                        "disruptionsAllowed",
                    ]
                    .map(|f| s[f].as_i64().unwrap_or(-1))
                        == want
                })
                .count()
        })
        .unwrap_or(0)
}

fn run(c: &Cluster, m: &benchkit::Manager, o: &Opts, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let ns = c.namespace("bench-pdb")?;
    let mut p = Proc::start(m, &c.work)?;
    admin.create(
        &PODDISRUPTIONBUDGETS,
        Some(&ns),
        &budget("probe", json!({"matchLabels": {"app": "none"}})),
    )?;
    p.wait_ready(Duration::from_secs(120), || {
        admin
            .get(&PODDISRUPTIONBUDGETS, Some(&ns), "probe")
            .is_ok_and(|b| b["status"]["observedGeneration"] == 1)
    })?;
    admin.delete(
        &PODDISRUPTIONBUDGETS,
        Some(&ns),
        "probe",
        &Default::default(),
    )?;
    let cpu0 = p.cpu_seconds();
    let started = Instant::now();
    parallel(o.deployments, 8, |i| {
        let name = format!("d-{i:04}");
        admin.create(
            &PODDISRUPTIONBUDGETS,
            Some(&ns),
            &budget(&name, json!({"matchLabels": labels(&name)})),
        )?;
        Ok(())
    })?;
    parallel(o.deployments, 8, |i| {
        workload(admin, &ns, &format!("d-{i:04}"), o.replicas)
    })?;
    println!(
        "{}: {} budgets and workloads made in {:.1} s",
        m.name,
        o.deployments,
        started.elapsed().as_secs_f64()
    );
    let mut finished = None;
    while started.elapsed() < o.timeout && p.alive() {
        if right(admin, &ns, o.replicas as i64) == o.deployments {
            finished = Some(started.elapsed().as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let cpu = p.cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let row = table.row(&m.name);
    table.num(row, "all right s", finished);
    table.num(row, "CPU s", cpu);
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.num(row, "end RSS MB", p.rss_mb());
    p.stop();
    c.delete_all(&PODS, Some(&ns), "");
    let _ = admin.delete(&NAMESPACES, None, &ns, &Default::default());
    println!("{}: log in {}", m.name, p.log.display());
    let _ = std::fs::copy(&p.log, format!("/tmp/bench-disruption-{}.log", m.name));
    Ok(())
}

fn main() {
    benchkit::main(|| {
        let o = parse_opts()?;
        let c = Cluster::from_env("bench-disruption")?;
        let extra = [
            "--controllers=disruption".to_string(),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        let mut table = Table::default();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            run(&c, &m, &o, &mut table)?;
        }
        table.print(&format!(
            "{} Deployments x {} pods, one PodDisruptionBudget each (maxUnavailable 20%)",
            o.deployments, o.replicas
        ));
        Ok(())
    })
}
