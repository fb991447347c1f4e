//! Two workloads. `--lifecycle`: node-lifecycle-controller with lease heartbeats, some of
//! which stop (`examples/bench_nodes/lifecycle.rs`, whose header lists its flags). Otherwise:
//! the pod garbage collector and the ttl-controller under load: N nodes and P terminated pods
//! bound to them; a controller manager runs `podgc,ttl` with `--terminated-pod-gc-threshold=T`.
//! Prints the wall time until the pods are down to T and every node carries its TTL
//! annotation, the CPU seconds that took, the CPU seconds of the idle passes after, and the
//! peak and final RSS. A benchmark, not a test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_nodes
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig cargo run --release --example bench_nodes -- --nodes=200
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`); `KCM_BENCH_UPSTREAM` runs after
//! edgekcm on a fresh copy of the workload.
//!
//! Flags: `--nodes=N` (200), `--pods=P` (2000), `--threshold=T` (1000), `--idle=SECONDS` (60:
//! three passes), `--timeout=SECONDS` (300), `--skip-edgekcm`. The nodes should be the
//! cluster's only ones, and the pods its only terminated ones (the threshold and the TTL count
//! the whole cluster).

#[path = "benchkit/mod.rs"]
mod benchkit;
#[path = "bench_nodes/lifecycle.rs"]
mod lifecycle;

use benchkit::{parallel, Args, Cluster, Proc, Res, Table};
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{NAMESPACES, NODES, PODS};
use serde_json::json;
use std::time::{Duration, Instant};

const TTL: &str = "node.alpha.kubernetes.io/ttl";

struct Opts {
    nodes: usize,
    pods: usize,
    threshold: usize,
    idle: Duration,
    timeout: Duration,
    skip_edgekcm: bool,
}

fn parse_opts(mut a: Args) -> Res<Opts> {
    let o = Opts {
        nodes: a.count("--nodes", 200)?,
        pods: a.count("--pods", 2000)?,
        threshold: a.count("--threshold", 1000)?,
        idle: a.secs("--idle", 60)?,
        timeout: a.secs("--timeout", 300)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
    };
    a.done()?;
    Ok(o)
}

/// The TTL upstream's boundaries give a cluster of `n` nodes grown one by one.
fn expected_ttl(n: usize) -> &'static str {
    match n {
        0..=100 => "0",
        101..=500 => "15",
        501..=1000 => "30",
        1001..=2000 => "60",
        _ => "300",
    }
}

fn node_name(i: usize) -> String {
    format!("bench-node-{i:04}")
}

/// Nodes (Ready) and terminated pods bound to them, round robin, in namespace `ns`.
fn setup(admin: &Client, ns: &str, o: &Opts) -> Res<()> {
    let t = Instant::now();
    parallel(o.nodes, 8, |i| {
        let n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name(i)}});
        let Ok(mut n) = admin.create(&NODES, None, &n) else {
            return Ok(());
        };
        n["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
            "lastHeartbeatTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"}]);
        let _ = admin.update_subresource(&NODES, &n, "status");
        Ok(())
    })?;
    parallel(o.pods, 8, |i| {
        let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p-{i:05}")},
            "spec": {"nodeName": node_name(i % o.nodes.max(1)),
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}});
        let Ok(mut p) = admin.create(&PODS, Some(ns), &p) else {
            return Ok(());
        };
        p["status"]["phase"] = json!(if i % 3 == 0 { "Failed" } else { "Succeeded" });
        let _ = admin.update_subresource(&PODS, &p, "status");
        Ok(())
    })?;
    println!(
        "set up {} nodes and {} terminated pods in {:.1} s",
        o.nodes,
        o.pods,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Run one controller manager on a fresh copy of the workload.
fn run(c: &Cluster, m: &benchkit::Manager, o: &Opts, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let ns = c.namespace("bench-podgc")?;
    setup(admin, &ns, o)?;
    let started = Instant::now();
    let mut p = Proc::start(m, &c.work)?;
    let want = expected_ttl(o.nodes);
    let mut converged = None;
    while started.elapsed() < o.timeout && p.alive() {
        std::thread::sleep(Duration::from_millis(500));
        let pods = admin
            .list(
                &PODS,
                Some(&ns),
                &ListOptions {
                    metadata_only: true,
                    ..ListOptions::default()
                },
            )
            .map(|l| l.items.len())
            .unwrap_or(usize::MAX);
        let annotated = admin
            .list(&NODES, None, &ListOptions::default())
            .map(|l| {
                l.items
                    .iter()
                    .filter(|n| n["metadata"]["annotations"][TTL] == want)
                    .count()
            })
            .unwrap_or(0);
        if pods <= o.threshold && annotated >= o.nodes {
            converged = Some(started.elapsed().as_secs_f64());
            break;
        }
    }
    let converge_cpu = p.cpu_seconds();
    std::thread::sleep(o.idle);
    let row = table.row(&m.name);
    table.num(row, "converge s", converged);
    table.num(row, "converge CPU s", converge_cpu);
    table.num(
        row,
        "idle CPU s",
        p.cpu_seconds().zip(converge_cpu).map(|(a, b)| a - b),
    );
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.num(row, "end RSS MB", p.rss_mb());
    p.stop();
    c.delete_all(&PODS, Some(&ns), "");
    c.delete_all(&NODES, None, "bench-node-");
    let _ = admin.delete(&NAMESPACES, None, &ns, &Default::default());
    println!("{}: log in {}", m.name, p.log.display());
    Ok(())
}

fn main() {
    benchkit::main(|| {
        let mut a = Args::parse();
        if a.flag("--lifecycle")? {
            return lifecycle::main(a);
        }
        let o = parse_opts(a)?;
        let c = Cluster::from_env("bench-nodes")?;
        let extra = [
            "--controllers=podgc,ttl".to_string(),
            format!("--terminated-pod-gc-threshold={}", o.threshold),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        let mut table = Table::default();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            run(&c, &m, &o, &mut table)?;
        }
        table.print(&format!(
            "{} nodes, {} terminated pods, threshold {}, idle {} s",
            o.nodes,
            o.pods,
            o.threshold,
            o.idle.as_secs()
        ));
        Ok(())
    })
}
