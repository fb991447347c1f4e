//! Back after an apiserver restart: the manager runs (every default controller, no leader
//! election) while kube-apiserver is stopped (etcd kept) `--restarts` times, for outages of
//! 1, 2, 5, 10, 20 and 40 s in turn, then started again. From the moment `/readyz` first
//! answers 200 it measures:
//! - lists: until every resource the manager had listed or watched before the outage is
//!   served to it again (a LIST answered 200, or a WATCH answered 200 that stays open a
//!   second), read from the apiserver's audit log, so the same for any manager;
//! - pods: until a ReplicaSet created at that moment has its first pod (a controller acts);
//! - requests: what the manager sent from the stop until then (its own
//!   `rest_client_requests_total`, connection errors included; the readiness probe too).
//!
//! Prints one line per restart and, per manager, min / median / max and the runs over 2 s.
//! A benchmark, not a test: it never fails on a number.
//!
//!     just bench-recovery                          # starts its own kube-apiserver v1.37
//!     KUBE_UPSTREAM=1 just bench-recovery          # and upstream kube-controller-manager after
//!
//! Environment, besides every bench's (`examples/benchkit/mod.rs`; a real cluster only):
//! - `KCM_E2E_APISERVER_STOP` / `KCM_E2E_APISERVER_START`: commands that stop kube-apiserver
//!   (and wait until it is gone) and start it (`tools/k8s/up.sh` writes both);
//! - `KCM_BENCH_AUDIT_LOG`: the apiserver's audit log, written with a policy that records
//!   `list` and `watch` of `system:kube-controller-manager` at `Metadata` (the recipe's).
//!
//! Flags: `--restarts=N` (20), `--metrics-port=PORT` (the managers' secure port, 10610),
//! `--timeout=SECONDS` (60: longest wait for either measure), `--skip-edgekcm`.

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{Args, Cluster, Manager, Proc, Res};
use edgekcm::api::client::{Client, DeleteOptions, ListOptions};
use edgekcm::api::resources::{NAMESPACES, PODS, REPLICASETS};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const OUTAGES: [u64; 6] = [1, 2, 5, 10, 20, 40];
/// The informers' user: both managers list and watch with the controller-manager identity.
const USER: &str = "system:kube-controller-manager";

struct Opts {
    restarts: usize,
    metrics_port: u16,
    timeout: Duration,
    skip_edgekcm: bool,
}

/// One restart's measures, seconds from `/readyz`'s first 200 (None: not within the timeout).
struct Run {
    outage: u64,
    lists: Option<f64>,
    pods: Option<f64>,
    requests: Option<f64>,
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn env(name: &str) -> Res<String> {
    std::env::var(name)
        .ok()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{name} is not set (see examples/bench_recovery.rs)").into())
}

fn sh(cmd: &str) -> Res<()> {
    let st = Command::new("sh").arg("-c").arg(cmd).status()?;
    if !st.success() {
        return Err(format!("{cmd}: {st}").into());
    }
    Ok(())
}

// ---- the audit log ----

/// One request of the manager's informers, from its audit events.
#[derive(Default, Clone)]
struct Req {
    verb: String,
    resource: String,
    code: u16,
    received: f64,
    completed: Option<f64>,
}

fn timestamp(v: &Value) -> Option<f64> {
    let t: jiff::Timestamp = v.as_str()?.parse().ok()?;
    Some(t.as_microsecond() as f64 / 1e6)
}

/// The manager's list and watch requests logged after byte `from` of the audit log.
fn audit_requests(path: &str, from: u64) -> Res<Vec<Req>> {
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let mut by_id: BTreeMap<String, Req> = BTreeMap::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue; // a line being written
        };
        if e["user"]["username"] != USER {
            continue;
        }
        let id = e["auditID"].as_str().unwrap_or_default().to_string();
        let r = by_id.entry(id).or_default();
        r.verb = e["verb"].as_str().unwrap_or_default().to_string();
        let group = e["objectRef"]["apiGroup"].as_str().unwrap_or("");
        r.resource = format!(
            "{group}/{}",
            e["objectRef"]["resource"].as_str().unwrap_or("")
        );
        r.code = e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16;
        r.received = timestamp(&e["requestReceivedTimestamp"]).unwrap_or(0.0);
        if e["stage"] == "ResponseComplete" {
            r.completed = timestamp(&e["stageTimestamp"]);
        }
    }
    Ok(by_id.into_values().collect())
}

/// When the resource was served to the manager by this request: a LIST answered 200, or a
/// WATCH answered 200 that stayed open a second (one refused with 410 in its stream ends at
/// once). None when it was not (yet).
fn served_at(r: &Req, now: f64) -> Option<f64> {
    if r.code != 200 {
        return None;
    }
    let open = match r.completed {
        Some(c) => c - r.received,
        None => now - r.received,
    };
    (r.verb == "list" || (r.verb == "watch" && open >= 1.0)).then_some(r.received)
}

fn audit_len(path: &str) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

// ---- the manager's metrics ----

/// The sum of the manager's `rest_client_requests_total`.
fn requests_sent(port: u16) -> Option<f64> {
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "5"])
        .arg(format!("https://127.0.0.1:{port}/metrics"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let sum = text
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    (sum > 0.0).then_some(sum)
}

// ---- the workload ----

fn replicaset(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}})
}

fn has_pod(admin: &Client, ns: &str, name: &str) -> bool {
    let opts = ListOptions {
        label_selector: Some(format!("app={name}")),
        ..ListOptions::default()
    };
    admin
        .list(&PODS, Some(ns), &opts)
        .is_ok_and(|l| !l.items.is_empty())
}

/// Create a ReplicaSet and wait for its first pod: seconds from `t0`.
fn first_pod(admin: &Client, ns: &str, name: &str, t0: Instant, timeout: Duration) -> Option<f64> {
    let deadline = t0 + timeout;
    while admin
        .create(&REPLICASETS, Some(ns), &replicaset(name))
        .is_err()
    {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    while Instant::now() < deadline {
        if has_pod(admin, ns, name) {
            return Some(t0.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn delete_replicaset(admin: &Client, ns: &str, name: &str) {
    let bg = DeleteOptions {
        propagation_policy: Some("Background"),
        ..DeleteOptions::default()
    };
    let _ = admin.delete(&REPLICASETS, Some(ns), name, &bg);
}

// ---- one manager ----

/// The resources served to the manager (per `served_at`) in the audit log after `from`.
fn served_resources(audit: &str, from: u64) -> Res<BTreeSet<String>> {
    let now = now_unix();
    Ok(audit_requests(audit, from)?
        .iter()
        .filter(|r| served_at(r, now).is_some())
        .map(|r| r.resource.clone())
        .collect())
}

/// Wait until every resource of `want` was served again after `since` (unix seconds): the
/// latest first serving after `t0` (0 when before it), or None after `timeout`.
fn lists_back(
    audit: &str,
    from: u64,
    want: &BTreeSet<String>,
    since: f64,
    t0: f64,
    timeout: Duration,
) -> Res<Option<f64>> {
    let started = Instant::now();
    loop {
        let now = now_unix();
        let mut first: BTreeMap<&str, f64> = BTreeMap::new();
        let reqs = audit_requests(audit, from)?;
        for r in &reqs {
            if let Some(at) = served_at(r, now).filter(|at| *at >= since) {
                let e = first.entry(r.resource.as_str()).or_insert(at);
                *e = e.min(at);
            }
        }
        let missing: Vec<&String> = want
            .iter()
            .filter(|w| !first.contains_key(w.as_str()))
            .collect();
        if missing.is_empty() {
            let last = first.values().copied().fold(t0, f64::max);
            return Ok(Some(last - t0));
        }
        if started.elapsed() > timeout {
            println!("  not served again: {missing:?}");
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run_manager(c: &Cluster, m: &Manager, o: &Opts, audit: &str) -> Res<Vec<Run>> {
    let (stop, start) = (
        env("KCM_E2E_APISERVER_STOP")?,
        env("KCM_E2E_APISERVER_START")?,
    );
    let admin = &c.admin;
    let ns = c.namespace(&format!("bench-recovery-{}", m.name))?;
    let from = audit_len(audit);
    let mut p = Proc::start(m, &c.work)?;
    p.wait_ready(o.timeout * 2, || {
        has_pod(admin, &ns, "warm") || {
            let _ = admin.create(&REPLICASETS, Some(&ns), &replicaset("warm"));
            false
        }
    })?;
    // Every informer started (the garbage collector's and quota's follow discovery).
    std::thread::sleep(Duration::from_secs(20));
    let mut runs = Vec::new();
    for i in 0..o.restarts {
        let outage = OUTAGES[i % OUTAGES.len()];
        let want = served_resources(audit, from)?;
        let before = requests_sent(o.metrics_port);
        let mark = audit_len(audit);
        let stopped = now_unix();
        sh(&stop)?;
        std::thread::sleep(Duration::from_secs(outage));
        let mut starting = Command::new("sh").arg("-c").arg(&start).spawn()?;
        let up = Instant::now();
        while admin.get_raw("/readyz").is_err() {
            if up.elapsed() > Duration::from_secs(120) {
                return Err("kube-apiserver not ready after 120 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let (t0, t0_unix) = (Instant::now(), now_unix());
        let after = requests_sent(o.metrics_port);
        let name = format!("rs-{i}");
        let pods = first_pod(admin, &ns, &name, t0, o.timeout);
        let lists = lists_back(audit, mark, &want, stopped, t0_unix, o.timeout)?;
        let _ = starting.wait();
        let requests = before.zip(after).map(|(b, a)| a - b);
        println!(
            "{} restart {:>2}: outage {outage:>2} s, lists back {} s, first pod {} s, {} requests during the outage ({} resources)",
            m.name,
            i + 1,
            benchkit::num(lists),
            benchkit::num(pods),
            requests.map_or("-".into(), |r| format!("{r:.0}")),
            want.len(),
        );
        runs.push(Run {
            outage,
            lists,
            pods,
            requests,
        });
        delete_replicaset(admin, &ns, &name);
        if !p.alive() {
            return Err(format!("{} exited; see {}", m.name, p.log.display()).into());
        }
        std::thread::sleep(Duration::from_secs(3));
    }
    p.stop();
    delete_replicaset(admin, &ns, "warm");
    let _ = admin.delete(&NAMESPACES, None, &ns, &DeleteOptions::default());
    Ok(runs)
}

// ---- results ----

/// min / median / max and the count over 2 s ("timeout" counts as over).
fn summary(v: &[Option<f64>]) -> String {
    let mut xs: Vec<f64> = v.iter().flatten().copied().collect();
    xs.sort_by(f64::total_cmp);
    let missed = v.len() - xs.len();
    let over = xs.iter().filter(|x| **x > 2.0).count() + missed;
    if xs.is_empty() {
        return format!("none within the timeout ({missed} runs)");
    }
    let med = xs[xs.len() / 2];
    let mut s = format!(
        "{:.2} / {med:.2} / {:.2} s, {over} of {} over 2 s",
        xs[0],
        xs[xs.len() - 1],
        v.len()
    );
    if missed > 0 {
        s += &format!(" ({missed} not within the timeout)");
    }
    s
}

fn print_summary(name: &str, runs: &[Run]) {
    let lists: Vec<Option<f64>> = runs.iter().map(|r| r.lists).collect();
    let pods: Vec<Option<f64>> = runs.iter().map(|r| r.pods).collect();
    let reqs: Vec<f64> = runs.iter().filter_map(|r| r.requests).collect();
    let secs: u64 = runs
        .iter()
        .filter(|r| r.requests.is_some())
        .map(|r| r.outage)
        .sum();
    println!("\n{name}, {} restarts", runs.len());
    println!(
        "  every reflector served again (min / median / max): {}",
        summary(&lists)
    );
    println!(
        "  first pod of a new ReplicaSet (min / median / max):  {}",
        summary(&pods)
    );
    if !reqs.is_empty() {
        let total: f64 = reqs.iter().sum();
        let max = reqs.iter().copied().fold(0.0, f64::max);
        println!(
            "  requests during the outages: {total:.0} in all ({:.1} per second of outage), at most {max:.0} in one",
            total / secs.max(1) as f64
        );
    }
}

fn main() {
    benchkit::main(|| {
        let mut a = Args::parse();
        let o = Opts {
            restarts: a.count("--restarts", 20)?,
            metrics_port: a.num("--metrics-port", 10610)? as u16,
            timeout: a.secs("--timeout", 60)?,
            skip_edgekcm: a.flag("--skip-edgekcm")?,
        };
        a.done()?;
        let c = Cluster::from_env("bench-recovery")?;
        if !c.real {
            return Err(
                "this bench restarts a real kube-apiserver: set KCM_E2E_KUBECONFIG and \
                        KCM_E2E_APISERVER_STOP/START (just bench-recovery does)"
                    .into(),
            );
        }
        let audit = env("KCM_BENCH_AUDIT_LOG")?;
        let extra = [
            "--leader-elect=false".to_string(),
            format!("--secure-port={}", o.metrics_port),
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".to_string(),
        ];
        let mut all = Vec::new();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            let runs = run_manager(&c, &m, &o, &audit)?;
            print_summary(&m.name, &runs);
            all.push((m.name.clone(), runs));
        }
        println!("\n== summary");
        for (name, runs) in &all {
            print_summary(name, runs);
        }
        Ok(())
    })
}
