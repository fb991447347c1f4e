//! The resourcequota-controller under load: N namespaces with a ResourceQuota each, D
//! Deployments of R replicas spread over them (pods with CPU and memory requests and limits),
//! then every Deployment deleted (the bench playing kubelet: terminating pods are deleted at
//! once). Each controller manager runs the same controllers (`resourcequota`, `deployment`,
//! `replicaset`, `garbagecollector`) and is started and synced (every quota has its usage)
//! before the Deployments are made. Prints the seconds until every quota's usage is right
//! after the creations and after the deletions, the CPU seconds of the manager over both, and
//! its peak RSS. A benchmark, not a test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_quota
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig KCM_BENCH_UPSTREAM="kube-controller-manager ..." \
//!         cargo run --release --example bench_quota
//!
//! On a real apiserver creations are charged by its quota admission and the controller gives
//! usage back on deletions; the sandbox has no quota admission, so there creations show only
//! at the controller's full recalculation (`--sync-period`, 10 s on the sandbox by default).
//!
//! Flags: `--namespaces=N` (20), `--deployments=D` (300), `--replicas=R` (5),
//! `--sync-period=SECONDS` (300 on a real apiserver, 10 on the sandbox),
//! `--timeout=SECONDS` (600), `--skip-edgekcm`, `--floor`: also run a bare client (see
//! `quota_floor`) on the same workload, after the managers.

#[path = "benchkit/mod.rs"]
mod benchkit;
#[path = "quota_floor/mod.rs"]
mod floor;

use benchkit::{parallel, Args, Cluster, Proc, Res, Table};
use edgekcm::api::client::{Client, DeleteOptions, ListOptions};
use edgekcm::api::resources::{DEPLOYMENTS, NAMESPACES, PODS, REPLICASETS, RESOURCEQUOTAS};
use edgekcm::compat::quantity::Quantity;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

struct Opts {
    namespaces: usize,
    deployments: usize,
    replicas: usize,
    sync_period: Option<u64>,
    timeout: Duration,
    skip_edgekcm: bool,
    floor: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut a = Args::parse();
    let o = Opts {
        namespaces: a.count("--namespaces", 20)?.max(1),
        deployments: a.count("--deployments", 300)?,
        replicas: a.count("--replicas", 5)?,
        sync_period: Some(a.num("--sync-period", 0)?).filter(|s| *s > 0),
        timeout: a.secs("--timeout", 600)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
        floor: a.flag("--floor")?,
    };
    a.done()?;
    Ok(o)
}

const CPU: &str = "10m";
const MEMORY: &str = "16Mi";

fn deployment(name: &str, replicas: usize) -> Value {
    let res = json!({"cpu": CPU, "memory": MEMORY});
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": res.clone(), "limits": res}}]}}}})
}

fn quota() -> Value {
    json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "quota"},
        "spec": {"hard": {"pods": "1000", "count/pods": "1000", "requests.cpu": "100",
            "requests.memory": "100Gi", "limits.cpu": "100", "limits.memory": "100Gi",
            "count/deployments.apps": "1000", "count/replicasets.apps": "1000"}}})
}

/// The usage every quota of `ns` should show with `deps` Deployments of `replicas` each.
fn expected(deps: usize, replicas: usize) -> Vec<(&'static str, Quantity)> {
    let pods = (deps * replicas) as i64;
    let times = |q: &str| {
        let one = Quantity::parse(q).expect("a quantity");
        let mut t = Quantity::ZERO;
        for _ in 0..pods {
            t.add(&one);
        }
        t
    };
    vec![
        ("pods", Quantity::from_int(pods)),
        ("count/pods", Quantity::from_int(pods)),
        ("requests.cpu", times(CPU)),
        ("requests.memory", times(MEMORY)),
        ("limits.cpu", times(CPU)),
        ("limits.memory", times(MEMORY)),
        ("count/deployments.apps", Quantity::from_int(deps as i64)),
        ("count/replicasets.apps", Quantity::from_int(deps as i64)),
    ]
}

/// How many of `namespaces` have a quota whose usage is `want(ns index)`.
fn right(
    admin: &Client,
    namespaces: &[String],
    want: &dyn Fn(usize) -> Vec<(&'static str, Quantity)>,
) -> usize {
    namespaces
        .iter()
        .enumerate()
        .filter(|(i, ns)| {
            let Ok(q) = admin.get(&RESOURCEQUOTAS, Some(ns), "quota") else {
                return false;
            };
            let used = &q["status"]["used"];
            want(*i).iter().all(|(k, v)| {
                used[*k]
                    .as_str()
                    .and_then(Quantity::parse)
                    .is_some_and(|u| u == *v)
            })
        })
        .count()
}

/// Play kubelet once: terminating pods of `namespaces` are deleted at once.
fn kubelet_pass(admin: &Client, namespaces: &[String]) {
    let now = DeleteOptions {
        grace_period_seconds: Some(0),
        ..DeleteOptions::default()
    };
    for ns in namespaces {
        let opts = ListOptions {
            metadata_only: true,
            ..ListOptions::default()
        };
        let Ok(l) = admin.list(&PODS, Some(ns), &opts) else {
            continue;
        };
        let gone: Vec<String> = l
            .items
            .iter()
            .filter(|p| !p["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
            .collect();
        let _ = parallel(gone.len(), 8, |i| {
            let _ = admin.delete(&PODS, Some(ns), &gone[i], &now);
            Ok(())
        });
    }
}

fn wait_right(
    p: &mut Proc,
    admin: &Client,
    namespaces: &[String],
    o: &Opts,
    want: &dyn Fn(usize) -> Vec<(&'static str, Quantity)>,
) -> Option<f64> {
    let t0 = Instant::now();
    while t0.elapsed() < o.timeout && p.alive() {
        if right(admin, namespaces, want) == namespaces.len() {
            return Some(t0.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

fn run(c: &Cluster, m: &benchkit::Manager, o: &Opts, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let mut namespaces = Vec::new();
    for _ in 0..o.namespaces {
        let ns = c.namespace("bench-quota")?;
        admin.create(&RESOURCEQUOTAS, Some(&ns), &quota())?;
        namespaces.push(ns);
    }
    let n = o.namespaces;
    let per_ns = |i: usize| o.deployments / n + usize::from(i < o.deployments % n);
    let mut p = Proc::start(m, &c.work)?;
    p.wait_ready(Duration::from_secs(120), || {
        right(admin, &namespaces, &|_| expected(0, 0)) == n
    })?;
    let cpu0 = p.cpu_seconds();
    let stop = AtomicBool::new(false);
    let (mut up, mut down) = (None, None);
    std::thread::scope(|s| -> Res<()> {
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                kubelet_pass(admin, &namespaces);
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        let t0 = Instant::now();
        let made = parallel(o.deployments, 8, |i| {
            let ns = &namespaces[i % n];
            admin.create(
                &DEPLOYMENTS,
                Some(ns),
                &deployment(&format!("d-{i:04}"), o.replicas),
            )?;
            Ok(())
        });
        if let Err(e) = made {
            stop.store(true, Ordering::SeqCst);
            return Err(e);
        }
        println!(
            "{}: {} deployments made in {:.1} s",
            m.name,
            o.deployments,
            t0.elapsed().as_secs_f64()
        );
        up = wait_right(&mut p, admin, &namespaces, o, &|i| {
            expected(per_ns(i), o.replicas)
        })
        .map(|_| t0.elapsed().as_secs_f64());
        println!("{}: every quota right after {:?} s", m.name, up);
        let t1 = Instant::now();
        let bg = DeleteOptions {
            propagation_policy: Some("Background"),
            ..DeleteOptions::default()
        };
        let _ = parallel(o.deployments, 8, |i| {
            let _ = admin.delete(
                &DEPLOYMENTS,
                Some(&namespaces[i % n]),
                &format!("d-{i:04}"),
                &bg,
            );
            Ok(())
        });
        down = wait_right(&mut p, admin, &namespaces, o, &|_| expected(0, 0))
            .map(|_| t1.elapsed().as_secs_f64());
        println!("{}: every quota back to zero after {:?} s", m.name, down);
        stop.store(true, Ordering::SeqCst);
        Ok(())
    })?;
    let cpu = p.cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let row = table.row(&m.name);
    table.num(row, "usage right s", up);
    table.num(row, "back to 0 s", down);
    table.num(row, "CPU s", cpu);
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.num(row, "end RSS MB", p.rss_mb());
    p.stop();
    for ns in &namespaces {
        c.delete_all(&DEPLOYMENTS, Some(ns), "");
        c.delete_all(&REPLICASETS, Some(ns), "");
        c.delete_all(&PODS, Some(ns), "");
        c.delete_all(&RESOURCEQUOTAS, Some(ns), "");
        let _ = admin.delete(&NAMESPACES, None, ns, &Default::default());
    }
    println!("{}: log in {}", m.name, p.log.display());
    let _ = std::fs::copy(&p.log, format!("/tmp/bench-quota-{}.log", m.name));
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(floor::CHILD_FLAG) {
        return benchkit::main(|| floor::child(args.get(2).map(String::as_str).unwrap_or("")));
    }
    benchkit::main(|| {
        let o = parse_opts()?;
        let c = Cluster::from_env("bench-quota")?;
        let period = o.sync_period.unwrap_or(if c.real { 300 } else { 10 });
        let extra = [
            "--controllers=resourcequota,deployment,replicaset,garbagecollector".to_string(),
            format!("--resource-quota-sync-period={period}s"),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        let mut table = Table::default();
        let mut managers = c.managers(&extra, o.skip_edgekcm)?;
        if o.floor {
            managers.push(floor::manager(&c)?);
        }
        for m in managers {
            run(&c, &m, &o, &mut table)?;
        }
        table.print(&format!(
            "{} namespaces with a quota, {} Deployments x {} replicas",
            o.namespaces, o.deployments, o.replicas
        ));
        Ok(())
    })
}
