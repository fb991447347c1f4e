//! The job-controller under load: J Jobs of C completions each (parallelism P), the bench
//! playing kubelet by marking every pod Succeeded as it appears. Each controller manager runs
//! `--controllers=job` and is started and synced (a probe Job has its pod) before the Jobs are
//! made. Prints the wall time until every Job is Complete, the CPU seconds of the manager over
//! that time, and its peak RSS. A benchmark, not a test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_jobs
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig KCM_BENCH_UPSTREAM="kube-controller-manager ..." \
//!         cargo run --release --example bench_jobs -- --jobs=300
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`); `KCM_BENCH_UPSTREAM` runs after
//! edgekcm on a fresh namespace. Each manager's log is kept as `/tmp/bench-jobs-<manager>.log`.
//!
//! Flags: `--jobs=J` (300), `--completions=C` (3), `--parallelism=P` (3), `--timeout=SECONDS`
//! (600), `--skip-edgekcm`, `--floor`: also run a bare client (see `floor`) on the same
//! workload, after the managers.

#[path = "benchkit/mod.rs"]
mod benchkit;
#[path = "jobs_floor/mod.rs"]
mod floor;

use benchkit::{parallel, Args, Cluster, Proc, Res, Table};
use edgekcm::api::client::{Client, DeleteOptions, ListOptions};
use edgekcm::api::resources::{JOBS, NAMESPACES, PODS};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

struct Opts {
    jobs: usize,
    completions: usize,
    parallelism: usize,
    timeout: Duration,
    skip_edgekcm: bool,
    floor: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut a = Args::parse();
    let o = Opts {
        jobs: a.count("--jobs", 300)?,
        completions: a.count("--completions", 3)?,
        parallelism: a.count("--parallelism", 3)?,
        timeout: a.secs("--timeout", 600)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
        floor: a.flag("--floor")?,
    };
    a.done()?;
    Ok(o)
}

fn job(name: &str, completions: usize, parallelism: usize) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"completions": completions, "parallelism": parallelism,
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}}})
}

fn complete(j: &Value) -> bool {
    j["status"]["conditions"].as_array().is_some_and(|l| {
        l.iter()
            .any(|c| c["type"] == "Complete" && c["status"] == "True")
    })
}

/// Play kubelet once: every pod of `ns` not yet finished is marked Succeeded.
fn kubelet_pass(admin: &Client, ns: &str, done: &Mutex<HashSet<String>>) {
    let Ok(list) = admin.list(&PODS, Some(ns), &ListOptions::default()) else {
        return;
    };
    let todo: Vec<Value> = {
        let d = done.lock().unwrap_or_else(|p| p.into_inner());
        list.items
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
            .filter(|p| !d.contains(p["metadata"]["uid"].as_str().unwrap_or("")))
            .collect()
    };
    let _ = parallel(todo.len(), 8, |i| {
        let mut p = todo[i].clone();
        let now = edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now());
        p["status"]["phase"] = json!("Succeeded");
        p["status"]["containerStatuses"] = json!([{"name": "c", "image": "registry.k8s.io/pause:3.9",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}}]);
        if admin.update_subresource(&PODS, &p, "status").is_ok() {
            done.lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(p["metadata"]["uid"].as_str().unwrap_or("").to_string());
        }
        Ok(())
    });
}

fn run(c: &Cluster, m: &benchkit::Manager, o: &Opts, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let ns = c.namespace("bench-jobs")?;
    let mut p = Proc::start(m, &c.work)?;
    admin.create(&JOBS, Some(&ns), &job("probe", 1, 1))?;
    p.wait_ready(Duration::from_secs(120), || {
        admin
            .list(&PODS, Some(&ns), &ListOptions::default())
            .is_ok_and(|l| !l.items.is_empty())
    })?;
    let cpu0 = p.cpu_seconds();
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    let done = Mutex::new(HashSet::new());
    let mut finished = None;
    std::thread::scope(|s| -> Res<()> {
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                kubelet_pass(admin, &ns, &done);
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let made = parallel(o.jobs, 8, |i| {
            admin.create(
                &JOBS,
                Some(&ns),
                &job(&format!("j-{i:04}"), o.completions, o.parallelism),
            )?;
            Ok(())
        });
        if let Err(e) = made {
            stop.store(true, Ordering::SeqCst);
            return Err(e);
        }
        println!(
            "{}: {} jobs made in {:.1} s",
            m.name,
            o.jobs,
            started.elapsed().as_secs_f64()
        );
        while started.elapsed() < o.timeout && p.alive() {
            std::thread::sleep(Duration::from_millis(250));
            let n = admin
                .list(&JOBS, Some(&ns), &ListOptions::default())
                .map(|l| l.items.iter().filter(|j| complete(j)).count())
                .unwrap_or(0);
            if n > o.jobs {
                finished = Some(started.elapsed().as_secs_f64());
                break;
            }
        }
        stop.store(true, Ordering::SeqCst);
        Ok(())
    })?;
    let cpu = p.cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let row = table.row(&m.name);
    table.num(row, "all Complete s", finished);
    table.num(row, "CPU s", cpu);
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.num(row, "end RSS MB", p.rss_mb());
    p.stop();
    // Background propagation: without a garbage collector running, the default (orphan) would
    // leave every Job behind with the `orphan` finalizer, in the next run's caches.
    if let Ok(l) = admin.list(&JOBS, Some(&ns), &ListOptions::default()) {
        let bg = DeleteOptions {
            propagation_policy: Some("Background"),
            ..DeleteOptions::default()
        };
        let _ = parallel(l.items.len(), 8, |i| {
            let name = l.items[i]["metadata"]["name"].as_str().unwrap_or("");
            let _ = admin.delete(&JOBS, Some(&ns), name, &bg);
            Ok(())
        });
    }
    c.delete_all(&PODS, Some(&ns), "");
    let _ = admin.delete(&NAMESPACES, None, &ns, &Default::default());
    println!("{}: log in {}", m.name, p.log.display());
    let _ = std::fs::copy(&p.log, format!("/tmp/bench-jobs-{}.log", m.name));
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(floor::CHILD_FLAG) {
        return benchkit::main(|| floor::child(args.get(2).map(String::as_str).unwrap_or("")));
    }
    benchkit::main(|| {
        let o = parse_opts()?;
        let c = Cluster::from_env("bench-jobs")?;
        let extra = [
            "--controllers=job".to_string(),
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
            "{} Jobs x {} completions (parallelism {})",
            o.jobs, o.completions, o.parallelism
        ));
        Ok(())
    })
}
