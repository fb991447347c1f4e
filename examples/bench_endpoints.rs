//! The endpoints workload, timed: N Services over N Deployments x R replicas in a fresh
//! namespace, the bench playing kubelet (each new pod gets an IP and `Ready` through
//! `pods/status`). Prints the seconds until every Service's Endpoints list its R ready
//! addresses, and the controller manager's CPU seconds and peak RSS over that time. Each
//! controller manager runs `--controllers=endpoint,deployment,replicaset`. A benchmark, not a
//! test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_endpoints
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig KCM_E2E_KCM_ARGS="--kubeconfig=..." \
//!       KCM_BENCH_UPSTREAM="/path/kube-controller-manager --kubeconfig=... --controllers=endpoint,deployment,replicaset ..." \
//!       cargo run --release --example bench_endpoints
//!
//! Environment as every bench (`examples/benchkit/mod.rs`). Flags:
//! `--services=N` (300), `--replicas=R` (5), `--timeout=SECONDS` (300). edgekcm runs with
//! `--kube-api-qps=5000 --kube-api-burst=10000`, as in `examples/bench.rs`: give upstream the same. The namespace is not
//! deleted (no namespace controller runs): its objects are deleted by the bench after each
//! controller manager, with that controller manager stopped.

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{parallel, Args, Cluster, Manager, Proc, Res, Table};
use edgekcm::api::client::{Client, ListOptions, PatchType, WatchOptions};
use edgekcm::api::resources::{Kind, DEPLOYMENTS, ENDPOINTS, PODS, REPLICASETS, SERVICES};
use edgekcm::api::watch::EventType;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

const CONTROLLERS: &str = "--controllers=endpoint,deployment,replicaset";

struct Opts {
    services: usize,
    replicas: usize,
    timeout: Duration,
    skip_edgekcm: bool,
}

fn main() {
    benchkit::main(|| {
        let mut a = Args::parse();
        let o = Opts {
            services: a.count("--services", 300)?,
            replicas: a.count("--replicas", 5)?,
            timeout: a.secs("--timeout", 300)?,
            skip_edgekcm: a.flag("--skip-edgekcm")?,
        };
        a.done()?;
        let c = Cluster::from_env("bench-ep")?;
        let extra = [
            CONTROLLERS,
            "--leader-elect=false",
            "--secure-port=0",
            "--kube-api-qps=5000",
            "--kube-api-burst=10000",
        ]
        .map(String::from);
        println!(
            "workload: {} Services over {} Deployments x {} replicas",
            o.services, o.services, o.replicas
        );
        let mut table = Table::default();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            run(&c, &o, &m, &mut table)?;
        }
        table.print(&format!(
            "{} Services x {} ready endpoints",
            o.services, o.replicas
        ));
        Ok(())
    })
}

/// One controller manager on a fresh namespace: a row of `table`.
fn run(c: &Cluster, o: &Opts, m: &Manager, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let ns = c.namespace("bench-ep")?;
    let mut p = Proc::start(m, &c.work)?;

    // Kubelet: every new pod runs and is ready with the next IP.
    let stop = Arc::new(AtomicBool::new(false));
    let next_ip = Arc::new(AtomicUsize::new(1));
    let (tx, rx) = mpsc::channel::<String>();
    let rx = Arc::new(Mutex::new(rx));
    let mut threads = Vec::new();
    for _ in 0..8 {
        let (admin, ns, rx, next_ip) = (admin.clone(), ns.clone(), rx.clone(), next_ip.clone());
        threads.push(std::thread::spawn(move || loop {
            let Ok(pod) = rx.lock().unwrap_or_else(|p| p.into_inner()).recv() else {
                return;
            };
            let n = next_ip.fetch_add(1, Ordering::SeqCst);
            let ip = format!("10.{}.{}.{}", 64 + n / 65536, (n / 256) % 256, n % 256);
            let now = edgekcm::timefmt::rfc3339(std::time::SystemTime::now());
            let patch = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
            for _ in 0..20 {
                match admin.patch(
                    &PODS,
                    Some(&ns),
                    &pod,
                    PatchType::Merge,
                    &patch,
                    Some("status"),
                ) {
                    Ok(_) => break,
                    Err(e) if e.is_not_found() => break,
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        }));
    }
    let ready: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    {
        let (a, n, s) = (admin.clone(), ns.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            watch(&a, PODS, &n, &s, |t, o| {
                if matches!(t, EventType::Added) {
                    let _ = tx.send(o["metadata"]["name"].as_str().unwrap_or("").to_string());
                }
            })
        }));
        let (a, n, s, r) = (admin.clone(), ns.clone(), stop.clone(), ready.clone());
        threads.push(std::thread::spawn(move || {
            watch(&a, ENDPOINTS, &n, &s, |_, o| {
                let count = o["subsets"].as_array().map_or(0, |subs| {
                    subs.iter()
                        .map(|x| x["addresses"].as_array().map_or(0, Vec::len))
                        .sum()
                });
                let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
                r.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name, count);
            })
        }));
    }
    // Ready once a probe Service has its Endpoints.
    create_app(admin, &ns, "probe", 1)?;
    p.wait_ready(Duration::from_secs(120), || {
        ready.lock().unwrap().get("probe") == Some(&1)
    })?;
    p.reset_peak_rss();
    let cpu0 = p.cpu_seconds();
    let t0 = Instant::now();
    parallel(o.services, 8, |i| {
        if let Err(e) = create_app(admin, &ns, &format!("web-{i}"), o.replicas) {
            eprintln!("create web-{i}: {e}");
        }
        Ok(())
    })?;
    println!("created in {:.2} s", t0.elapsed().as_secs_f64());
    let mut last = Instant::now();
    let converged = loop {
        let done = ready
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, v)| k.starts_with("web-") && **v == o.replicas)
            .count();
        if done == o.services {
            break Some(t0.elapsed().as_secs_f64());
        }
        if t0.elapsed() > o.timeout {
            break None;
        }
        if last.elapsed() > Duration::from_secs(5) {
            println!(
                "  {:>5.1} s: {done}/{} Services complete",
                t0.elapsed().as_secs_f64(),
                o.services
            );
            last = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let cpu = p.cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let row = table.row(&m.name);
    table.set(
        row,
        "converge s",
        converged.map_or("timeout".to_string(), |s| format!("{s:.2}")),
    );
    table.num(row, "CPU s", cpu);
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    p.stop();
    stop.store(true, Ordering::SeqCst);
    // Empty the namespace for the next controller manager.
    for kind in [DEPLOYMENTS, REPLICASETS, PODS, SERVICES, ENDPOINTS] {
        c.delete_all(&kind, Some(&ns), "");
    }
    Ok(())
}

fn create_app(admin: &Client, ns: &str, name: &str, replicas: usize) -> Res<()> {
    admin.create(
        &SERVICES,
        Some(ns),
        &json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name}, "spec": {"selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
    )?;
    admin.create(
        &DEPLOYMENTS,
        Some(ns),
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name}, "spec": {"replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"nodeName": "node-1",
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                    "ports": [{"name": "http", "containerPort": 8080}]}]}}}}),
    )?;
    Ok(())
}

/// List then watch `kind` in `ns` until `stop`, handing every object to `f`.
fn watch(
    admin: &Client,
    kind: Kind,
    ns: &str,
    stop: &AtomicBool,
    mut f: impl FnMut(&EventType, &Value),
) {
    while !stop.load(Ordering::SeqCst) {
        let Ok(list) = admin.list_all(&kind, Some(ns), &ListOptions::default()) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        for x in &list.items {
            f(&EventType::Added, x);
        }
        let wo = WatchOptions {
            resource_version: list.resource_version,
            timeout_seconds: 30,
            ..Default::default()
        };
        let Ok(stream) = admin.watch(&kind, Some(ns), &wo) else {
            continue;
        };
        for ev in stream.events {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            match ev {
                Ok(ev) => f(&ev.kind, &ev.object),
                Err(_) => break,
            }
        }
    }
}
