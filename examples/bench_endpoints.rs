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
//! Environment as for `examples/bench.rs` (`KCM_E2E_KUBECONFIG`, `KCM_BENCH_EDGEKCM_ARGS` or
//! `KCM_E2E_KCM_ARGS`, `KCM_BENCH_EDGEKCM_BIN`, `KCM_BENCH_UPSTREAM`). Flags:
//! `--services=N` (300), `--replicas=R` (5), `--timeout=SECONDS` (300). edgekcm runs with
//! `--kube-api-qps=5000 --kube-api-burst=10000`, as in `examples/bench.rs`: give upstream the same. The namespace is not
//! deleted (no namespace controller runs): its objects are deleted by the bench after each
//! controller manager, with that controller manager stopped.

use edgekcm::api::client::{Client, DeleteOptions, ListOptions, PatchType, WatchOptions};
use edgekcm::api::kubeconfig;
use edgekcm::api::resources::{
    Kind, DEPLOYMENTS, ENDPOINTS, NAMESPACES, PODS, REPLICASETS, SERVICEACCOUNTS, SERVICES,
};
use edgekcm::api::watch::EventType;
use edgekcm::sandbox::{Sandbox, SandboxOptions};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const CONTROLLERS: &str = "--controllers=endpoint,deployment,replicaset";

fn main() {
    if let Err(e) = bench() {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

struct Opts {
    services: usize,
    replicas: usize,
    timeout: Duration,
}

fn opts() -> Res<Opts> {
    let mut o = Opts {
        services: 300,
        replicas: 5,
        timeout: Duration::from_secs(300),
    };
    for a in std::env::args().skip(1) {
        let (k, v) = a.split_once('=').unwrap_or((a.as_str(), ""));
        let n: u64 = v.parse().map_err(|_| format!("{a}: not a number"))?;
        match k {
            "--services" => o.services = n as usize,
            "--replicas" => o.replicas = n as usize,
            "--timeout" => o.timeout = Duration::from_secs(n),
            _ => return Err(format!("unknown argument {a:?}").into()),
        }
    }
    Ok(o)
}

fn bench() -> Res<()> {
    let o = opts()?;
    let work = std::env::temp_dir().join(format!("edgekcm-bench-ep-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let real = std::env::var("KCM_E2E_KUBECONFIG")
        .ok()
        .filter(|s| !s.is_empty());
    let mut _sandbox = None;
    let kc = match &real {
        Some(p) => PathBuf::from(p),
        None => {
            let sb = Sandbox::start(SandboxOptions::default())?;
            let kc = work.join("kubeconfig");
            sb.write_kubeconfig(&kc)?;
            _sandbox = Some(sb);
            kc
        }
    };
    let admin = Client::new(&kubeconfig::load(Some(&kc), None)?, 0.0, 1, "edgekcm-bench")?;
    let mut managers: Vec<(String, Vec<String>)> = Vec::new();
    let mut args: Vec<String> = ["KCM_BENCH_EDGEKCM_ARGS", "KCM_E2E_KCM_ARGS"]
        .iter()
        .find_map(|k| {
            std::env::var(k)
                .ok()
                .filter(|s| real.is_some() && !s.trim().is_empty())
        })
        .map(|a| a.split_whitespace().map(str::to_string).collect())
        .unwrap_or_else(|| vec![format!("--kubeconfig={}", kc.display())]);
    args.extend(
        [
            CONTROLLERS,
            "--leader-elect=false",
            "--secure-port=0",
            "--kube-api-qps=5000",
            "--kube-api-burst=10000",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let bin = std::env::var("KCM_BENCH_EDGEKCM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let exe = std::env::current_exe().unwrap_or_default();
            exe.parent()
                .and_then(Path::parent)
                .unwrap_or(Path::new("."))
                .join("edgekcm")
        });
    let mut cmd = vec![bin.display().to_string()];
    cmd.extend(args);
    managers.push(("edgekcm".into(), cmd));
    if let Ok(up) = std::env::var("KCM_BENCH_UPSTREAM") {
        let cmd: Vec<String> = up.split_whitespace().map(str::to_string).collect();
        if !cmd.is_empty() {
            managers.push(("upstream".into(), cmd));
        }
    }
    println!(
        "workload: {} Services over {} Deployments x {} replicas",
        o.services, o.services, o.replicas
    );
    let mut rows = Vec::new();
    for (name, cmd) in &managers {
        rows.push((name.clone(), run(&admin, &o, name, cmd, &work)?));
    }
    println!(
        "\n{:<12} {:>11} {:>8} {:>12}",
        "manager", "converge s", "CPU s", "peak RSS MB"
    );
    for (name, (secs, cpu, rss)) in rows {
        let secs = secs.map_or("timeout".to_string(), |s| format!("{s:.2}"));
        println!(
            "{name:<12} {secs:>11} {cpu:>8.2} {:>12.1}",
            rss as f64 / 1024.0
        );
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// (seconds until converged, CPU seconds, peak RSS kB) of one controller manager.
fn run(
    admin: &Client,
    o: &Opts,
    name: &str,
    cmd: &[String],
    work: &Path,
) -> Res<(Option<f64>, f64, u64)> {
    println!("\n== {name}: {}", cmd.join(" "));
    let ns = format!("bench-ep-{:06x}", fastrand::u32(..0xffffff));
    admin.create(
        &NAMESPACES,
        None,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )?;
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    let _ = admin.create(&SERVICEACCOUNTS, Some(&ns), &sa);
    let log = std::fs::File::create(work.join(format!("{name}.log")))?;
    let mut child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let pid = child.id().to_string();

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
    let t = Instant::now();
    while ready.lock().unwrap().get("probe") != Some(&1) {
        if t.elapsed() > Duration::from_secs(120) || child.try_wait()?.is_some() {
            return Err(format!("{name} did not serve the probe Service within 120 s").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("ready after {:.1} s", t.elapsed().as_secs_f64());
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
    let cpu0 = cpu_seconds(&pid);
    let t0 = Instant::now();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= o.services {
                    return;
                }
                if let Err(e) = create_app(admin, &ns, &format!("web-{i}"), o.replicas) {
                    eprintln!("create web-{i}: {e}");
                }
            });
        }
    });
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
    let cpu = cpu_seconds(&pid) - cpu0;
    let rss = peak_rss_kb(&pid);
    println!("converged: {converged:?} s, {cpu:.2} CPU s, peak RSS {rss} kB");
    let _ = Command::new("kill").arg(&pid).status();
    let _ = child.wait();
    stop.store(true, Ordering::SeqCst);
    // Empty the namespace for the next controller manager.
    let opts = DeleteOptions {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    for kind in [DEPLOYMENTS, REPLICASETS, PODS, SERVICES, ENDPOINTS] {
        if let Ok(list) = admin.list(&kind, Some(&ns), &ListOptions::default()) {
            let names: Vec<String> = list
                .items
                .iter()
                .filter_map(|x| x["metadata"]["name"].as_str().map(str::to_string))
                .collect();
            let next = AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..8 {
                    s.spawn(|| {
                        while let Some(n) = names.get(next.fetch_add(1, Ordering::SeqCst)) {
                            let _ = admin.delete(&kind, Some(&ns), n, &opts);
                        }
                    });
                }
            });
        }
    }
    Ok((converged, cpu, rss))
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

fn cpu_seconds(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let rest = stat.rfind(')').map_or("", |i| &stat[i + 2..]);
    let f: Vec<u64> = rest
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // utime and stime (fields 14 and 15; the parse skips the state letter).
    (f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0)) as f64 / 100.0
}

fn peak_rss_kb(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}
