//! The pod garbage collector and the ttl-controller under load: N nodes and P terminated pods
//! bound to them; a controller manager runs `podgc,ttl` with `--terminated-pod-gc-threshold=T`.
//! Prints the wall time until the pods are down to T and every node carries its TTL
//! annotation, the CPU seconds that took, the CPU seconds of the idle passes after, and the
//! peak and final RSS. A benchmark, not a test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_nodes
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig cargo run --release --example bench_nodes -- --nodes=200
//!
//! Environment: `KCM_E2E_KUBECONFIG` (a real cluster, admin credentials for the bench's own
//! writes; else an in-process sandbox API server), `KCM_BENCH_EDGEKCM_ARGS` (else
//! `KCM_E2E_KCM_ARGS`; default `--kubeconfig=<the bench's>`), `KCM_BENCH_EDGEKCM_BIN` (default
//! `target/release/edgekcm`), `KCM_BENCH_UPSTREAM` (another controller manager's whole command
//! line, run after edgekcm on a fresh copy of the workload; real clusters only).
//!
//! Flags: `--nodes=N` (200), `--pods=P` (2000), `--threshold=T` (1000), `--idle=SECONDS` (60:
//! three passes), `--timeout=SECONDS` (300), `--skip-edgekcm`. The nodes should be the
//! cluster's only ones, and the pods its only terminated ones (the threshold and the TTL count
//! the whole cluster).

use edgekcm::api::client::{Client, DeleteOptions, ListOptions};
use edgekcm::api::kubeconfig;
use edgekcm::api::resources::{NAMESPACES, NODES, PODS, SERVICEACCOUNTS};
use edgekcm::sandbox::{Sandbox, SandboxOptions};
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const TTL: &str = "node.alpha.kubernetes.io/ttl";

struct Opts {
    nodes: usize,
    pods: usize,
    threshold: usize,
    idle: Duration,
    timeout: Duration,
    skip_edgekcm: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut o = Opts {
        nodes: 200,
        pods: 2000,
        threshold: 1000,
        idle: Duration::from_secs(60),
        timeout: Duration::from_secs(300),
        skip_edgekcm: false,
    };
    for a in std::env::args().skip(1) {
        let (k, v) = a.split_once('=').unwrap_or((a.as_str(), ""));
        let num = || -> Res<u64> {
            v.parse::<u64>()
                .map_err(|_| format!("{k}: {v:?} is not a number").into())
        };
        match k {
            "--nodes" => o.nodes = num()? as usize,
            "--pods" => o.pods = num()? as usize,
            "--threshold" => o.threshold = num()? as usize,
            "--idle" => o.idle = Duration::from_secs(num()?),
            "--timeout" => o.timeout = Duration::from_secs(num()?),
            "--skip-edgekcm" => o.skip_edgekcm = true,
            _ => return Err(format!("unknown argument {a:?} (see the file's header)").into()),
        }
    }
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

/// Run `f(i)` for `0..n` on 8 threads.
fn parallel(n: usize, f: impl Fn(usize) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    break;
                }
                f(i);
            });
        }
    });
}

fn node_name(i: usize) -> String {
    format!("bench-node-{i:04}")
}

/// Nodes (Ready) and terminated pods bound to them, round robin, in namespace `ns`.
fn setup(admin: &Client, ns: &str, o: &Opts) -> Res<()> {
    let t = Instant::now();
    admin.create(
        &NAMESPACES,
        None,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )?;
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    let _ = admin.create(&SERVICEACCOUNTS, Some(ns), &sa);
    parallel(o.nodes, |i| {
        let n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name(i)}});
        let Ok(mut n) = admin.create(&NODES, None, &n) else {
            return;
        };
        n["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
            "lastHeartbeatTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"}]);
        let _ = admin.update_subresource(&NODES, &n, "status");
    });
    parallel(o.pods, |i| {
        let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p-{i:05}")},
            "spec": {"nodeName": node_name(i % o.nodes.max(1)),
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}});
        let Ok(mut p) = admin.create(&PODS, Some(ns), &p) else {
            return;
        };
        p["status"]["phase"] = json!(if i % 3 == 0 { "Failed" } else { "Succeeded" });
        let _ = admin.update_subresource(&PODS, &p, "status");
    });
    println!(
        "set up {} nodes and {} terminated pods in {:.1} s",
        o.nodes,
        o.pods,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Every pod of `ns` deleted at once, the namespace and the bench's nodes.
fn teardown(admin: &Client, ns: &str, o: &Opts) {
    let now = DeleteOptions {
        grace_period_seconds: Some(0),
        ..DeleteOptions::default()
    };
    let names: Vec<String> = admin
        .list(&PODS, Some(ns), &ListOptions::default())
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    parallel(names.len(), |i| {
        let _ = admin.delete(&PODS, Some(ns), &names[i], &now);
    });
    parallel(o.nodes, |i| {
        let _ = admin.delete(&NODES, None, &node_name(i), &DeleteOptions::default());
    });
    let _ = admin.delete(&NAMESPACES, None, ns, &DeleteOptions::default());
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / clock_ticks())
}

/// A `/proc/<pid>/status` size in MB (`VmHWM`, `VmRSS`).
fn status_mb(pid: u32, field: &str) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
}

struct Row {
    name: String,
    converge_s: Option<f64>,
    converge_cpu_s: Option<f64>,
    idle_cpu_s: Option<f64>,
    peak_rss_mb: Option<f64>,
    end_rss_mb: Option<f64>,
}

/// Run one controller manager on a fresh copy of the workload.
fn run(admin: &Client, name: &str, cmd: &[String], o: &Opts) -> Res<Row> {
    let ns = format!("bench-podgc-{:06x}", fastrand::u32(..0xffffff));
    setup(admin, &ns, o)?;
    let log = std::env::temp_dir().join(format!("bench-nodes-{name}.log"));
    let f = std::fs::File::create(&log)?;
    let started = Instant::now();
    let mut child: Child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(f.try_clone()?)
        .stderr(f)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", cmd[0]))?;
    let pid = child.id();
    let want = expected_ttl(o.nodes);
    let mut converged = None;
    while started.elapsed() < o.timeout {
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
    let converge_cpu = cpu_seconds(pid);
    std::thread::sleep(o.idle);
    let idle_cpu = cpu_seconds(pid).zip(converge_cpu).map(|(a, b)| a - b);
    let row = Row {
        name: name.to_string(),
        converge_s: converged,
        converge_cpu_s: converge_cpu,
        idle_cpu_s: idle_cpu,
        peak_rss_mb: status_mb(pid, "VmHWM:"),
        end_rss_mb: status_mb(pid, "VmRSS:"),
    };
    let _ = Command::new("kill").arg(pid.to_string()).status();
    let _ = child.wait();
    teardown(admin, &ns, o);
    println!("{name}: log in {}", log.display());
    Ok(row)
}

fn main() -> Res<()> {
    let o = parse_opts()?;
    let real = std::env::var("KCM_E2E_KUBECONFIG")
        .ok()
        .filter(|s| !s.is_empty());
    let dir = std::env::temp_dir().join(format!("bench-nodes-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (_sb, kubeconfig) = match &real {
        Some(k) => (None, std::path::PathBuf::from(k)),
        None => {
            let sb = Sandbox::start(SandboxOptions::default())?;
            let k = dir.join("kubeconfig");
            sb.write_kubeconfig(&k)?;
            (Some(sb), k)
        }
    };
    let admin = Client::new(&kubeconfig::load(Some(&kubeconfig), None)?, 0.0, 1, "bench")?;
    let common = [
        "--controllers=podgc,ttl".to_string(),
        format!("--terminated-pod-gc-threshold={}", o.threshold),
        "--leader-elect=false".to_string(),
        "--secure-port=0".to_string(),
    ];
    let mut rows = Vec::new();
    if !o.skip_edgekcm {
        let bin = std::env::var("KCM_BENCH_EDGEKCM_BIN")
            .unwrap_or_else(|_| "target/release/edgekcm".to_string());
        let args = std::env::var("KCM_BENCH_EDGEKCM_ARGS")
            .or_else(|_| std::env::var("KCM_E2E_KCM_ARGS"))
            .ok()
            .filter(|a| !a.trim().is_empty() && real.is_some())
            .unwrap_or_else(|| format!("--kubeconfig={}", kubeconfig.display()));
        let mut cmd = vec![bin];
        cmd.extend(args.split_whitespace().map(str::to_string));
        cmd.extend(common.iter().cloned());
        rows.push(run(&admin, "edgekcm", &cmd, &o)?);
    }
    if let Ok(up) = std::env::var("KCM_BENCH_UPSTREAM") {
        if real.is_some() && !up.trim().is_empty() {
            let mut cmd: Vec<String> = up.split_whitespace().map(str::to_string).collect();
            cmd.extend(common.iter().cloned());
            rows.push(run(&admin, "upstream", &cmd, &o)?);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    println!(
        "\n{} nodes, {} terminated pods, threshold {}, idle {} s",
        o.nodes,
        o.pods,
        o.threshold,
        o.idle.as_secs()
    );
    println!(
        "{:<12} {:>11} {:>15} {:>11} {:>12} {:>11}",
        "manager", "converge s", "converge CPU s", "idle CPU s", "peak RSS MB", "end RSS MB"
    );
    for r in rows {
        println!(
            "{:<12} {:>11} {:>15} {:>11} {:>12} {:>11}",
            r.name,
            f(r.converge_s),
            f(r.converge_cpu_s),
            f(r.idle_cpu_s),
            f(r.peak_rss_mb),
            f(r.end_rss_mb)
        );
    }
    Ok(())
}
