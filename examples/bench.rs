//! The standard workload, timed: N Deployments x R replicas in a fresh namespace, then the
//! namespace deleted. Prints wall seconds, the controller manager's CPU seconds and its peak
//! RSS. A benchmark, not a test: it never fails on a number.
//!
//!     just bench                                   # sandbox API server, 300 x 5
//!     just bench --deployments=50 --replicas=3
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig just bench        # a real kube-apiserver
//!
//! Environment:
//! - `KCM_E2E_KUBECONFIG`: run against this cluster (admin credentials for the bench's own
//!   writes) instead of an in-process sandbox API server.
//! - `KCM_BENCH_EDGEKCM_ARGS` (else `KCM_E2E_KCM_ARGS`): edgekcm's flags against a real cluster
//!   (default `--kubeconfig=$KCM_E2E_KUBECONFIG`); against the sandbox, extra flags added to
//!   the sandbox's kubeconfig. `--leader-elect=false`, `--secure-port=0`,
//!   `--kube-api-qps=5000` and `--kube-api-burst=10000` are added unless given.
//! - `KCM_BENCH_EDGEKCM_BIN`: the edgekcm binary to run (e.g. a static musl release build);
//!   default `target/release/edgekcm`.
//! - `KCM_BENCH_UPSTREAM`: a whole command line of another controller manager (for example
//!   upstream kube-controller-manager with its flags) to run the same workload with, after
//!   edgekcm, for a side-by-side table.
//! - `KCM_BENCH_SERVER_PIDS`: comma-separated PIDs of the API server and etcd when they run on
//!   this machine. The bench then also prints the CPU seconds they, the controller manager and
//!   the bench itself used during converge and during namespace deletion, and the time each
//!   phase would take on the machine's cores if the controller manager used no CPU at all.
//!
//! Flags: `--deployments=N` (300), `--replicas=R` (5), `--timeout=SECONDS` (300) per phase,
//! `--direct` (also time the same writes sent straight to the API server, with no
//! controller manager), `--orphans` (also start each controller manager against a namespace
//! of N ReplicaSets and N x R pods that no ReplicaSet selects, as after a restart of a node
//! whose pods lost their owners, and print its CPU seconds and peak RSS over its first
//! 10 s), `--skip-edgekcm`.

use edgekcm::api::client::{Client, DeleteOptions, ListOptions, WatchOptions};
use edgekcm::api::kubeconfig;
use edgekcm::api::resources::{DEPLOYMENTS, NAMESPACES, PODS, REPLICASETS, SERVICEACCOUNTS};
use edgekcm::api::watch::EventType;
use edgekcm::api::Kind;
use edgekcm_sandbox::{Sandbox, SandboxOptions};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{
    edgekcm_binary, parallel, pid_cpu_seconds, server_cpu_seconds, wait_until, Manager, Proc, Res,
};

struct Opts {
    deployments: usize,
    replicas: i64,
    timeout: Duration,
    direct: bool,
    orphans: bool,
    skip_edgekcm: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut o = Opts {
        deployments: 300,
        replicas: 5,
        timeout: Duration::from_secs(300),
        direct: false,
        orphans: false,
        skip_edgekcm: false,
    };
    for a in std::env::args().skip(1) {
        let (k, v) = a.split_once('=').unwrap_or((a.as_str(), ""));
        let num = |v: &str| -> Res<u64> {
            v.parse::<u64>()
                .map_err(|_| format!("{k}: {v:?} is not a number").into())
        };
        match k {
            "--deployments" => o.deployments = num(v)? as usize,
            "--replicas" => o.replicas = num(v)? as i64,
            "--timeout" => o.timeout = Duration::from_secs(num(v)?),
            "--direct" => o.direct = true,
            "--orphans" => o.orphans = true,
            "--skip-edgekcm" => o.skip_edgekcm = true,
            _ => return Err(format!("unknown argument {a:?} (see the file's header)").into()),
        }
    }
    if o.deployments == 0 || o.replicas <= 0 {
        return Err("--deployments and --replicas must be positive".into());
    }
    Ok(o)
}

fn main() {
    if let Err(e) = bench() {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

/// One controller manager's results.
#[derive(Default)]
struct Row {
    name: String,
    create_s: f64,
    converge_s: Option<f64>,
    converge_cpu_s: Option<f64>,
    /// CPU seconds of the `KCM_BENCH_SERVER_PIDS` processes and of the bench during converge.
    server_cpu_s: Option<f64>,
    bench_cpu_s: Option<f64>,
    /// The same during namespace deletion.
    server_delete_cpu_s: Option<f64>,
    bench_delete_cpu_s: Option<f64>,
    delete_s: Option<f64>,
    delete_cpu_s: Option<f64>,
    peak_rss_kb: Option<u64>,
    /// No controller manager ran (the direct-writes row): nothing to time after the writes.
    no_process: bool,
}

fn bench() -> Res<()> {
    let opts = parse_opts()?;
    let work = std::env::temp_dir().join(format!("edgekcm-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;

    // The target: a real cluster, or a sandbox API server in this process.
    let real = std::env::var("KCM_E2E_KUBECONFIG")
        .ok()
        .filter(|s| !s.is_empty());
    let mut _sandbox = None;
    let (kc, target) = match &real {
        Some(p) => (PathBuf::from(p), format!("kube-apiserver ({p})")),
        None => {
            let sb = Sandbox::start(SandboxOptions::default())?;
            let kc = work.join("kubeconfig");
            sb.write_kubeconfig(&kc)?;
            let t = format!("sandbox API server ({})", sb.url());
            _sandbox = Some(sb);
            (kc, t)
        }
    };
    let cfg = kubeconfig::load(Some(&kc), None)?;
    let admin = Client::new(&cfg, 0.0, 1, "edgekcm-bench")?;
    println!(
        "API server: {}",
        benchkit::server_version(&admin, real.as_deref())
    );
    println!(
        "workload: {} Deployments x {} replicas against {target}",
        opts.deployments, opts.replicas
    );

    let mut rows = Vec::new();
    // Namespaces left terminating for the next controller manager to empty before it is timed.
    let mut leftover = Vec::new();
    if opts.direct {
        let (row, ns) = direct_writes(&admin, &opts)?;
        rows.push(row);
        leftover.push(ns);
    }
    // The controller managers to run: (name, command line).
    let mut managers: Vec<(String, Vec<String>)> = Vec::new();
    if !opts.skip_edgekcm {
        let mut args: Vec<String> = match (&real, edgekcm_args_env()) {
            (Some(_), Some(a)) => a.split_whitespace().map(str::to_string).collect(),
            _ => vec![format!("--kubeconfig={}", kc.display())],
        };
        // Against the sandbox, extra flags (e.g. `--controllers=...`) ride along.
        if let (None, Ok(extra)) = (&real, std::env::var("KCM_BENCH_EDGEKCM_ARGS")) {
            args.extend(extra.split_whitespace().map(str::to_string));
        }
        for (flag, default) in [
            ("--leader-elect", "--leader-elect=false"),
            ("--secure-port", "--secure-port=0"),
            ("--kube-api-qps", "--kube-api-qps=5000"),
            ("--kube-api-burst", "--kube-api-burst=10000"),
        ] {
            if !args.iter().any(|a| a.starts_with(flag)) {
                args.push(default.to_string());
            }
        }
        let mut cmd = vec![edgekcm_binary()?.display().to_string()];
        cmd.extend(args);
        managers.push(("edgekcm".into(), cmd));
    }
    if let Ok(up) = std::env::var("KCM_BENCH_UPSTREAM") {
        let cmd: Vec<String> = up.split_whitespace().map(str::to_string).collect();
        if !cmd.is_empty() {
            let name = Path::new(&cmd[0])
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "upstream".into());
            managers.push((name, cmd));
        }
    }
    if opts.orphans {
        leftover.push(orphan_startup(&admin, &opts, &managers, &work)?);
    }
    for (name, cmd) in &managers {
        rows.push(run_workload(&admin, &opts, name, cmd, &work, &leftover)?);
    }
    print_table(&rows);
    print_server_table(&rows);
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

fn edgekcm_args_env() -> Option<String> {
    ["KCM_BENCH_EDGEKCM_ARGS", "KCM_E2E_KCM_ARGS"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|s| !s.trim().is_empty()))
}

/// Where the machine's CPU went during converge and during namespace deletion, when the API
/// server's PIDs were given. On a machine whose cores are all busy, a phase cannot be shorter
/// than the API server's, etcd's and the bench's own CPU seconds spread over every core: the
/// last column.
fn print_server_table(rows: &[Row]) {
    if rows.iter().all(|r| r.server_cpu_s.is_none()) {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    // Per phase: wall seconds, the manager's, the servers' and the bench's CPU seconds.
    type Pick = fn(&Row) -> [Option<f64>; 4];
    let phases: [(&str, &str, Pick); 2] = [
        ("converge", "converge", |r| {
            [
                r.converge_s,
                r.converge_cpu_s,
                r.server_cpu_s,
                r.bench_cpu_s,
            ]
        }),
        ("namespace deletion", "ns delete", |r| {
            [
                r.delete_s,
                r.delete_cpu_s,
                r.server_delete_cpu_s,
                r.bench_delete_cpu_s,
            ]
        }),
    ];
    for (phase, short, pick) in phases {
        println!();
        println!(
            "CPU seconds during {phase} ({cores} cores; API server and etcd: KCM_BENCH_SERVER_PIDS)"
        );
        println!(
            "{:<26} {:>11} {:>11} {:>16} {:>9} {:>11} {:>22}",
            "controller manager",
            format!("{short} s"),
            "manager s",
            "apiserver+etcd s",
            "bench s",
            "busy cores",
            format!("{short} at 0 CPU s")
        );
        for r in rows {
            let [Some(wall), manager, Some(server), Some(bench)] = pick(r) else {
                continue;
            };
            let manager = manager.unwrap_or(0.0);
            println!(
                "{:<26} {:>11.2} {:>11.2} {:>16.2} {:>9.2} {:>11.2} {:>22.2}",
                r.name,
                wall,
                manager,
                server,
                bench,
                (manager + server + bench) / wall,
                (server + bench) / cores
            );
        }
    }
}

fn print_table(rows: &[Row]) {
    let cell = |r: &Row, v: Option<f64>| match v {
        Some(v) => format!("{v:.2}"),
        None if r.no_process => "-".to_string(),
        None => "timeout".to_string(),
    };
    println!();
    println!(
        "{:<26} {:>9} {:>11} {:>13} {:>11} {:>13} {:>12}",
        "controller manager",
        "create s",
        "converge s",
        "converge CPU s",
        "ns delete s",
        "delete CPU s",
        "peak RSS MB"
    );
    for r in rows {
        println!(
            "{:<26} {:>9.2} {:>11} {:>13} {:>11} {:>13} {:>12}",
            r.name,
            r.create_s,
            cell(r, r.converge_s),
            cell(r, r.converge_cpu_s),
            cell(r, r.delete_s),
            cell(r, r.delete_cpu_s),
            r.peak_rss_kb
                .map_or("-".into(), |kb| format!("{:.1}", kb as f64 / 1024.0)),
        );
    }
}

// ---- CPU of the API server and etcd ----

/// CPU seconds between two readings (None when either is missing).
fn cpu_delta(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    Some(after? - before?)
}

// ---- what the bench watches ----

/// Pods and Deployment status in one namespace, kept current by two watches.
#[derive(Default)]
struct Seen {
    pods: HashSet<String>,
    deploy_replicas: HashMap<String, i64>,
}

fn track(client: Client, kind: Kind, ns: String, seen: Arc<Mutex<Seen>>, stop: Arc<AtomicBool>) {
    let apply = |seen: &Mutex<Seen>, t: &EventType, o: &Value| {
        let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
        let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
        let gone = matches!(t, EventType::Deleted);
        if kind == PODS {
            if gone {
                s.pods.remove(&name);
            } else {
                s.pods.insert(name);
            }
        } else if gone {
            s.deploy_replicas.remove(&name);
        } else {
            let r = o["status"]["replicas"].as_i64().unwrap_or(0);
            s.deploy_replicas.insert(name, r);
        }
    };
    while !stop.load(Ordering::SeqCst) {
        let list = match client.list_all(&kind, Some(&ns), &ListOptions::default()) {
            Ok(l) => l,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        for o in &list.items {
            apply(&seen, &EventType::Added, o);
        }
        let wo = WatchOptions {
            resource_version: list.resource_version.clone(),
            timeout_seconds: 60,
            ..Default::default()
        };
        let Ok(stream) = client.watch(&kind, Some(&ns), &wo) else {
            continue;
        };
        for ev in stream.events {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            match ev {
                Ok(ev) => apply(&seen, &ev.kind, &ev.object),
                Err(_) => break,
            }
        }
    }
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}
            }
        }
    })
}

fn create_namespace(admin: &Client, prefix: &str) -> Res<String> {
    let ns = format!("{prefix}-{:06x}", fastrand::u32(..0xffffff));
    admin.create(
        &NAMESPACES,
        None,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )?;
    Ok(ns)
}

/// Delete `ns` and time until it is gone.
fn delete_namespace(admin: &Client, ns: &str, timeout: Duration) -> Option<f64> {
    let t0 = Instant::now();
    if admin
        .delete(&NAMESPACES, None, ns, &DeleteOptions::default())
        .is_err()
    {
        return None;
    }
    wait_until(timeout, || namespace_gone(admin, ns)).map(|_| t0.elapsed().as_secs_f64())
}

fn namespace_gone(admin: &Client, ns: &str) -> bool {
    matches!(admin.get(&NAMESPACES, None, ns), Err(e) if e.is_not_found())
}

fn run_workload(
    admin: &Client,
    opts: &Opts,
    name: &str,
    cmd: &[String],
    work: &Path,
    leftover: &[String],
) -> Res<Row> {
    let m = Manager {
        name: name.to_string(),
        cmd: cmd.to_vec(),
    };
    let mut p = Proc::start(&m, work)?;
    let probe = wait_ready(admin, name, &mut p)?;
    empty_leftover(admin, opts, name, leftover, &p)?;
    let c = converge(admin, opts, &p)?;
    let d = delete_workload(admin, opts, &p, &c);
    let peak = p.peak_rss_mb().map(|mb| (mb * 1024.0) as u64);
    let _ = delete_namespace(admin, &probe, Duration::from_secs(30));
    p.stop();
    drop(c.trackers);

    Ok(Row {
        name: name.to_string(),
        create_s: c.create_s,
        converge_s: c.converged,
        converge_cpu_s: c.converged.map(|_| c.cpu1 - c.cpu0),
        server_cpu_s: c.server_cpu_s,
        bench_cpu_s: c.bench_cpu_s,
        server_delete_cpu_s: d.server_delete_cpu_s,
        bench_delete_cpu_s: d.bench_delete_cpu_s,
        delete_s: d.deleted,
        delete_cpu_s: d.deleted.map(|_| d.cpu2 - c.cpu1),
        peak_rss_kb: peak,
        no_process: false,
    })
}

/// Ready when the serviceaccount controller has served a probe namespace: returns it.
fn wait_ready(admin: &Client, name: &str, p: &mut Proc) -> Res<String> {
    let probe = create_namespace(admin, "bench-probe")?;
    let ready = wait_until(Duration::from_secs(120), || {
        admin.get(&SERVICEACCOUNTS, Some(&probe), "default").is_ok()
    });
    if ready.is_none() || !p.alive() {
        let log = std::fs::read_to_string(&p.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        return Err(format!(
            "{name} did not become ready (no ServiceAccount in a new namespace within 120 s); log tail:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
        .into());
    }
    println!(
        "ready; idle RSS so far peak {} kB",
        p.peak_rss_mb().map(|mb| (mb * 1024.0) as u64).unwrap_or(0)
    );
    Ok(probe)
}

/// Namespaces earlier phases left terminating are emptied first, outside the timing.
fn empty_leftover(
    admin: &Client,
    opts: &Opts,
    name: &str,
    leftover: &[String],
    p: &Proc,
) -> Res<()> {
    for ns in leftover {
        let t = Instant::now();
        match wait_until(opts.timeout, || namespace_gone(admin, ns)) {
            Some(_) => println!(
                "namespace {ns} (left by an earlier phase) gone after {:.1} s",
                t.elapsed().as_secs_f64()
            ),
            None => {
                return Err(format!(
                    "{name} did not delete namespace {ns} within {:?}",
                    opts.timeout
                )
                .into())
            }
        }
    }
    if !leftover.is_empty() {
        // Peak RSS counts from here: emptying the leftover namespace is not the workload.
        p.reset_peak_rss();
    }
    Ok(())
}

/// What converge measured, and what namespace deletion goes on from.
struct Converge {
    ns: String,
    trackers: Vec<JoinHandle<()>>,
    create_s: f64,
    converged: Option<f64>,
    /// The controller manager's CPU seconds before the writes and at the end of converge.
    cpu0: f64,
    cpu1: f64,
    /// The servers' and the bench's CPU seconds at the end of converge.
    server1: Option<f64>,
    bench1: Option<f64>,
    server_cpu_s: Option<f64>,
    bench_cpu_s: Option<f64>,
}

/// The Deployments written to a fresh namespace, and the time until every one has its pods.
fn converge(admin: &Client, opts: &Opts, p: &Proc) -> Res<Converge> {
    let ns = create_namespace(admin, "bench")?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let trackers: Vec<_> = [PODS, DEPLOYMENTS]
        .into_iter()
        .map(|k| {
            let (c, ns, seen, stop) = (admin.clone(), ns.clone(), seen.clone(), stop.clone());
            std::thread::spawn(move || track(c, k, ns, seen, stop))
        })
        .collect();

    let cpu0 = p.cpu_seconds().unwrap_or(0.0);
    let (server0, bench0) = (server_cpu_seconds(), pid_cpu_seconds("self"));
    let t0 = Instant::now();
    parallel(opts.deployments, 8, |i| {
        admin.create(
            &DEPLOYMENTS,
            Some(&ns),
            &deployment(&format!("web-{i}"), opts.replicas),
        )?;
        Ok(())
    })?;
    let create_s = t0.elapsed().as_secs_f64();
    println!(
        "created {} Deployments in {create_s:.2} s",
        opts.deployments
    );

    let converged = wait_converged(opts, &seen, t0);
    let cpu1 = p.cpu_seconds().unwrap_or(cpu0);
    // The end of converge is the start of deletion.
    let (server1, bench1) = (server_cpu_seconds(), pid_cpu_seconds("self"));
    let delta = |a, b| cpu_delta(a, b).filter(|_| converged.is_some());
    let server_cpu_s = delta(server0, server1);
    let bench_cpu_s = delta(bench0, bench1);
    stop.store(true, Ordering::SeqCst);
    match converged {
        Some(s) => println!("converged in {s:.2} s"),
        None => {
            let s = seen.lock().unwrap();
            println!(
                "did not converge within {:?}: {} pods",
                opts.timeout,
                s.pods.len()
            );
        }
    }
    Ok(Converge {
        ns,
        trackers,
        create_s,
        converged,
        cpu0,
        cpu1,
        server1,
        bench1,
        server_cpu_s,
        bench_cpu_s,
    })
}

/// Seconds from `t0` until every Deployment has its replicas and every pod is seen (None: the
/// timeout passed first), with progress every 5 s.
fn wait_converged(opts: &Opts, seen: &Mutex<Seen>, t0: Instant) -> Option<f64> {
    let want_pods = opts.deployments * opts.replicas as usize;
    let mut last_print = Instant::now();
    wait_until(opts.timeout, || {
        let s = seen.lock().unwrap();
        let ready = s
            .deploy_replicas
            .values()
            .filter(|r| **r == opts.replicas)
            .count();
        if last_print.elapsed() > Duration::from_secs(5) {
            println!(
                "  {:>5.1} s: {} pods, {ready}/{} Deployments at {} replicas",
                t0.elapsed().as_secs_f64(),
                s.pods.len(),
                opts.deployments,
                opts.replicas
            );
            last_print = Instant::now();
        }
        s.pods.len() >= want_pods && ready == opts.deployments
    })
    .map(|_| t0.elapsed().as_secs_f64())
}

/// What namespace deletion measured.
struct Deletion {
    deleted: Option<f64>,
    /// The controller manager's CPU seconds once the namespace is gone.
    cpu2: f64,
    server_delete_cpu_s: Option<f64>,
    bench_delete_cpu_s: Option<f64>,
}

/// The workload's namespace deleted, timed until it is gone.
fn delete_workload(admin: &Client, opts: &Opts, p: &Proc, c: &Converge) -> Deletion {
    let deleted = delete_namespace(admin, &c.ns, opts.timeout);
    let cpu2 = p.cpu_seconds().unwrap_or(c.cpu1);
    let deleted_delta = |a, b| cpu_delta(a, b).filter(|_| deleted.is_some());
    let server_delete_cpu_s = deleted_delta(c.server1, server_cpu_seconds());
    let bench_delete_cpu_s = deleted_delta(c.bench1, pid_cpu_seconds("self"));
    match deleted {
        Some(s) => println!("namespace deleted in {s:.2} s"),
        None => println!("namespace not deleted within {:?}", opts.timeout),
    }
    Deletion {
        deleted,
        cpu2,
        server_delete_cpu_s,
        bench_delete_cpu_s,
    }
}

/// The same objects a controller manager would write, sent by the bench itself: the floor
/// set by the API server.
/// How long each controller manager runs against the orphans.
const ORPHAN_WINDOW: Duration = Duration::from_secs(10);

/// `--orphans`: a namespace of `deployments` ReplicaSets (0 replicas) and `deployments x
/// replicas` pods without owner that none of them selects, written straight to the API
/// server; then each controller manager in turn is started against it and stopped after
/// `ORPHAN_WINDOW`. Prints their CPU seconds and peak RSS, and returns the namespace (left
/// terminating, for the next controller manager to empty before it is timed).
fn orphan_startup(
    admin: &Client,
    opts: &Opts,
    managers: &[(String, Vec<String>)],
    work: &Path,
) -> Res<String> {
    let pods = opts.deployments * opts.replicas as usize;
    println!(
        "\n== start against {} orphan pods and {} ReplicaSets selecting none of them",
        pods, opts.deployments
    );
    let ns = create_namespace(admin, "bench-orphans")?;
    create_default_service_account(admin, &ns)?;
    parallel(opts.deployments, 16, |i| {
        let name = format!("rs-{i}");
        let spec = deployment(&name, 0)["spec"].clone();
        let rs = json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": spec,
        });
        admin.create(&REPLICASETS, Some(&ns), &rs)?;
        Ok(())
    })?;
    parallel(pods, 16, |i| {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("orphan-{i}"),
                "labels": {"app": format!("orphan-{}", i % opts.deployments)}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}
        });
        admin.create(&PODS, Some(&ns), &pod)?;
        Ok(())
    })?;
    println!(
        "\n{:<24} {:>16} {:>12}",
        "controller manager",
        format!("CPU s in {} s", ORPHAN_WINDOW.as_secs()),
        "peak RSS MB"
    );
    for (name, cmd) in managers {
        let m = Manager {
            name: format!("{name}-orphans"),
            cmd: cmd.clone(),
        };
        let mut p = Proc::start(&m, work)?;
        std::thread::sleep(ORPHAN_WINDOW);
        let cpu = p.cpu_seconds();
        let rss = p.peak_rss_mb().map(|mb| (mb * 1024.0) as u64);
        p.stop();
        let show = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
        println!(
            "{name:<24} {:>16} {:>12}",
            show(cpu),
            show(rss.map(|kb| kb as f64 / 1024.0))
        );
    }
    let _ = admin.delete(&NAMESPACES, None, &ns, &DeleteOptions::default());
    Ok(ns)
}

/// A real apiserver admits pods only once the namespace has its default ServiceAccount; with
/// no controller manager running, the bench writes it.
fn create_default_service_account(admin: &Client, ns: &str) -> Res<()> {
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    match admin.create(&SERVICEACCOUNTS, Some(ns), &sa) {
        Err(e) if !e.is_already_exists() => Err(e.into()),
        _ => Ok(()),
    }
}

fn direct_writes(admin: &Client, opts: &Opts) -> Res<(Row, String)> {
    println!("\n== direct writes (no controller manager)");
    let ns = create_namespace(admin, "bench-direct")?;
    create_default_service_account(admin, &ns)?;
    let (server0, bench0) = (server_cpu_seconds(), pid_cpu_seconds("self"));
    let t0 = Instant::now();
    parallel(opts.deployments, 16, |i| {
        let name = format!("web-{i}");
        admin.create(&DEPLOYMENTS, Some(&ns), &deployment(&name, opts.replicas))?;
        let rs = json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": format!("{name}-rs")},
            "spec": deployment(&name, opts.replicas)["spec"].clone(),
        });
        admin.create(&REPLICASETS, Some(&ns), &rs)?;
        for r in 0..opts.replicas {
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-rs-{r}"), "labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}
            });
            admin.create(&PODS, Some(&ns), &pod)?;
        }
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let server_cpu_s = cpu_delta(server0, server_cpu_seconds());
    let bench_cpu_s = cpu_delta(bench0, pid_cpu_seconds("self"));
    println!(
        "wrote {} objects in {secs:.2} s",
        opts.deployments * (2 + opts.replicas as usize)
    );
    // No namespace controller is running: the next controller manager empties the
    // namespace before its own timing starts.
    let _ = admin.delete(&NAMESPACES, None, &ns, &DeleteOptions::default());
    let row = Row {
        name: "direct writes".into(),
        create_s: secs,
        converge_s: Some(secs),
        server_cpu_s,
        bench_cpu_s,
        no_process: true,
        ..Row::default()
    };
    Ok((row, ns))
}
