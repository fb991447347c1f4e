//! One scale point with every controller on: N nodes kept Ready by their Leases, and D
//! Deployments x R replicas spread over S namespaces (500 nodes, 4,000 x 5 = 20,000 pods over
//! 20 namespaces by default), the bench playing scheduler and kubelet. Each controller manager
//! runs `--controllers=*` and is started once the nodes exist and is synced (a probe namespace
//! has its `default` ServiceAccount) before the workload is written. Measured per manager:
//! RSS once ready, the time and CPU seconds until every Deployment is available, peak RSS,
//! RSS after a settle period with nothing to do, its CPU in that period, RSS growth per pod,
//! the objects and bytes its caches hold (`edgekcm_cache_objects` / `edgekcm_cache_bytes` on
//! /metrics, when it exports them), then the namespaces deleted: time, CPU and peak RSS.
//! A benchmark, not a test: it never fails on a number.
//!
//!     just bench-scale                                    # a running cluster: see below
//!     KCM_E2E_KUBECONFIG=/path/admin.conf KCM_BENCH_SERVER_PIDS=<apiserver>,<etcd> \
//!         target/release/examples/bench_scale --nodes=100 --deployments=400
//!     KCM_E2E_KUBECONFIG=... KCM_BENCH_UPSTREAM="kube-controller-manager --kubeconfig=..." \
//!         target/release/examples/bench_scale --skip-edgekcm
//!
//! The scheduler and kubelet: each Deployment's pod template names its node (`spec.nodeName`,
//! Deployment i on node i mod N, so every node gets the same number of pods); the bench
//! watches pods and writes each new one's status as a kubelet would (Running, Ready, a pod IP,
//! a running container), and renews every node's Lease (`--renew`, 10 s) so that
//! node-lifecycle-controller keeps the nodes Ready. The template's
//! `terminationGracePeriodSeconds: 0` lets the apiserver remove a deleted pod at once (no
//! kubelet has to confirm it).
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`); `KCM_BENCH_SERVER_PIDS`:
//! comma-separated PIDs of the apiserver and etcd, whose CPU seconds are then printed per
//! phase. Run one manager per fresh control plane for comparable numbers (`--skip-edgekcm`
//! with `KCM_BENCH_UPSTREAM` for upstream); with both, upstream runs after edgekcm on the same
//! cluster once the first run's namespaces are gone.
//!
//! Both managers get `--controllers=*`, `--leader-elect=false`, `--kube-api-qps=5000`,
//! `--kube-api-burst=10000`, `--secure-port=<--metrics-port>` and
//! `--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics` (the bench reads
//! /metrics with curl).
//!
//! Flags: `--nodes=N` (500), `--deployments=D` (4000), `--replicas=R` (5), `--namespaces=S`
//! (20), `--settle=SECONDS` (60), `--renew=SECONDS` (10), `--timeout=SECONDS` (3600) per phase,
//! `--metrics-port=PORT` (11540), `--skip-edgekcm`, `--keep-nodes` (leave the nodes and Leases).

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{parallel, server_cpu_seconds, Args, Cluster, Manager, Proc, Res, Table};
use edgekcm::api::client::{Client, DeleteOptions, ListOptions, PatchType};
use edgekcm::api::resources::{DEPLOYMENTS, LEASES, NAMESPACES, NODES, PODS, SERVICEACCOUNTS};
use edgekcm::api::watch::EventType;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

const LEASE_NS: &str = "kube-node-lease";
const NODE_PREFIX: &str = "scale-node-";
const NS_LABEL: &str = "edgekcm-bench=scale";
const IMAGE: &str = "registry.k8s.io/pause:3.9";

struct Opts {
    nodes: usize,
    deployments: usize,
    replicas: usize,
    namespaces: usize,
    settle: Duration,
    renew: Duration,
    timeout: Duration,
    metrics_port: u64,
    skip_edgekcm: bool,
    keep_nodes: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut a = Args::parse();
    let o = Opts {
        nodes: a.count("--nodes", 500)?.max(1),
        deployments: a.count("--deployments", 4000)?.max(1),
        replicas: a.count("--replicas", 5)?.max(1),
        namespaces: a.count("--namespaces", 20)?.max(1),
        settle: a.secs("--settle", 60)?,
        renew: a.secs("--renew", 10)?,
        timeout: a.secs("--timeout", 3600)?,
        metrics_port: a.num("--metrics-port", 11540)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
        keep_nodes: a.flag("--keep-nodes")?,
    };
    a.done()?;
    Ok(o)
}

fn main() {
    benchkit::main(bench)
}

fn bench() -> Res<()> {
    let o = parse_opts()?;
    let c = Cluster::from_env("bench-scale")?;
    println!(
        "workload: {} nodes, {} Deployments x {} replicas ({} pods) in {} namespaces",
        o.nodes,
        o.deployments,
        o.replicas,
        o.deployments * o.replicas,
        o.namespaces
    );
    let extra: Vec<String> = [
        "--controllers=*".to_string(),
        "--leader-elect=false".into(),
        "--kube-api-qps=5000".into(),
        "--kube-api-burst=10000".into(),
        format!("--secure-port={}", o.metrics_port),
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".into(),
    ]
    .into();
    let managers = c.managers(&extra, o.skip_edgekcm)?;
    if managers.is_empty() {
        return Err(
            "no controller manager to run (--skip-edgekcm without KCM_BENCH_UPSTREAM)".into(),
        );
    }
    make_nodes(&c.admin, o.nodes)?;
    let beats = benchkit::LeaseBeats::start(&c.admin, o.nodes, o.renew, 8, node_name);
    let mut table = Table::default();
    let mut result = Ok(());
    for m in &managers {
        if let Err(e) = run(&c, m, &o, &mut table) {
            result = Err(format!("{}: {e}", m.name));
            break;
        }
    }
    drop(beats);
    if !o.keep_nodes {
        c.delete_all(&NODES, None, NODE_PREFIX);
        c.delete_all(&LEASES, Some(LEASE_NS), NODE_PREFIX);
    }
    table.print(&format!(
        "{} pods over {} nodes, every controller on (MB, seconds; CPU in CPU-s)",
        o.deployments * o.replicas,
        o.nodes
    ));
    Ok(result?)
}

// ---- nodes and their heartbeats ----

fn node_name(i: usize) -> String {
    format!("{NODE_PREFIX}{i:04}")
}

fn now() -> String {
    edgekcm::compat::timefmt::rfc3339(SystemTime::now())
}

fn now_micro() -> String {
    edgekcm::compat::timefmt::rfc3339_micro(SystemTime::now())
}

/// N Ready nodes with capacity, addresses and a Lease each, as a kubelet registers them.
fn make_nodes(admin: &Client, n: usize) -> Res<()> {
    let t = Instant::now();
    let lease_ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NS}});
    let _ = admin.create(&NAMESPACES, None, &lease_ns);
    parallel(n, 8, |i| {
        let name = node_name(i);
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64"}}});
        let mut node = match admin.create(&NODES, None, &node) {
            Err(e) if e.is_already_exists() => admin.get(&NODES, None, &name)?,
            r => r?,
        };
        let t = now();
        let res =
            json!({"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"});
        node["status"] = json!({
            "capacity": res, "allocatable": res,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "kubelet is posting ready status", "lastHeartbeatTime": t,
                    "lastTransitionTime": t},
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                    "lastHeartbeatTime": t, "lastTransitionTime": t},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                    "lastHeartbeatTime": t, "lastTransitionTime": t},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                    "lastHeartbeatTime": t, "lastTransitionTime": t}],
            "addresses": [{"type": "InternalIP", "address": format!("10.250.{}.{}", i / 250, i % 250 + 1)},
                {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.37.2", "containerRuntimeVersion": "containerd://2.1.0",
                "operatingSystem": "linux", "architecture": "amd64", "osImage": "bench",
                "kernelVersion": "6.1.0", "kubeProxyVersion": "", "machineID": "", "systemUUID": "",
                "bootID": ""}});
        admin.update_subresource(&NODES, &node, "status")?;
        let l = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": LEASE_NS},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now_micro()}});
        match admin.create(&LEASES, Some(LEASE_NS), &l) {
            Err(e) if !e.is_already_exists() => Err(e.into()),
            _ => Ok(()),
        }
    })?;
    println!(
        "{n} nodes Ready with their Leases in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

// ---- the kubelet: pod status, and what the bench sees of the workload ----

/// What the watches saw: pods by namespace/name (Running or not), Deployments available.
#[derive(Default)]
struct Seen {
    pods: HashMap<String, bool>,
    available: HashMap<String, bool>,
}

/// Pods and Deployments watched across the cluster; each new bound pod is handed to the
/// status writers, which mark it Running and Ready.
struct Kubelet {
    seen: Arc<Mutex<Seen>>,
    /// Pods whose status was written.
    started: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    workers: Vec<std::thread::JoinHandle<()>>,
    queue: Sender<(String, String)>,
}

const POD_FIELDS: &[&str] = &["/spec/nodeName", "/status/phase"];
const DEPLOY_FIELDS: &[&str] = &["/spec/replicas", "/status"];

fn key(o: &Value) -> String {
    format!(
        "{}/{}",
        o["metadata"]["namespace"].as_str().unwrap_or(""),
        o["metadata"]["name"].as_str().unwrap_or("")
    )
}

fn deployment_available(d: &Value) -> bool {
    let want = d["spec"]["replicas"].as_i64().unwrap_or(1);
    let s = &d["status"];
    let gen = d["metadata"]["generation"].as_i64().unwrap_or(0);
    s["observedGeneration"].as_i64().unwrap_or(0) >= gen
        && s["availableReplicas"].as_i64() == Some(want)
        && s["updatedReplicas"].as_i64() == Some(want)
        && s["replicas"].as_i64() == Some(want)
}

impl Kubelet {
    fn start(admin: &Client) -> Kubelet {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let started = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = channel::<(String, String)>();
        let rx = Arc::new(Mutex::new(rx));
        let workers = (0..8)
            .map(|_| {
                let (c, rx, started, stop) =
                    (admin.clone(), rx.clone(), started.clone(), stop.clone());
                std::thread::spawn(move || status_writer(&c, &rx, &started, &stop))
            })
            .collect();
        let (s, q, st) = (seen.clone(), tx.clone(), stop.clone());
        benchkit::floor_watch(admin.clone(), PODS, Some(POD_FIELDS), move |t, o| {
            let k = key(&o);
            let running = o["status"]["phase"] == "Running";
            let mut seen = s.lock().unwrap_or_else(|p| p.into_inner());
            if t == EventType::Deleted {
                seen.pods.remove(&k);
            } else if matches!(t, EventType::Added | EventType::Modified) {
                let was = seen.pods.insert(k, running);
                let bound = o["spec"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty());
                let deleting = !o["metadata"]["deletionTimestamp"].is_null();
                if was.is_none() && bound && !running && !deleting {
                    let ns = o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_string();
                    let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
                    let _ = q.send((ns, name));
                }
            }
            !st.load(Ordering::SeqCst)
        });
        let (s, st) = (seen.clone(), stop.clone());
        benchkit::floor_watch(
            admin.clone(),
            DEPLOYMENTS,
            Some(DEPLOY_FIELDS),
            move |t, o| {
                let mut seen = s.lock().unwrap_or_else(|p| p.into_inner());
                if t == EventType::Deleted {
                    seen.available.remove(&key(&o));
                } else if matches!(t, EventType::Added | EventType::Modified) {
                    seen.available.insert(key(&o), deployment_available(&o));
                }
                !st.load(Ordering::SeqCst)
            },
        );
        Kubelet {
            seen,
            started,
            stop,
            workers,
            queue: tx,
        }
    }

    /// (pods seen, pods Running, Deployments seen, Deployments available)
    fn counts(&self) -> (usize, usize, usize, usize) {
        let s = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let running = s.pods.values().filter(|r| **r).count();
        let avail = s.available.values().filter(|a| **a).count();
        (s.pods.len(), running, s.available.len(), avail)
    }

    /// Pods the watch may have missed: every bound pod not Running, queued again.
    fn sweep(&self, admin: &Client) {
        let opts = ListOptions {
            field_selector: Some("status.phase!=Running,spec.nodeName!=".into()),
            metadata_only: true,
            ..ListOptions::default()
        };
        let Ok(list) = admin.list_all(&PODS, None, &opts) else {
            return;
        };
        println!("  sweep: {} bound pods not Running", list.items.len());
        for p in &list.items {
            if p["metadata"]["deletionTimestamp"].is_null() {
                let ns = p["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
                let _ = self.queue.send((ns, name));
            }
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A kubelet's status write for each queued pod: Running, Ready, an IP, a running container.
fn status_writer(
    c: &Client,
    rx: &Mutex<Receiver<(String, String)>>,
    started: &AtomicUsize,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::SeqCst) {
        let next = rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .recv_timeout(Duration::from_millis(200));
        let Ok((ns, name)) = next else { continue };
        let n = started.fetch_add(1, Ordering::SeqCst);
        let ip = format!("10.{}.{}.{}", 64 + n / 65536, n / 256 % 256, n % 256);
        let t = now();
        let cond = |ty: &str| json!({"type": ty, "status": "True", "lastTransitionTime": t});
        let patch = json!({"status": {
            "phase": "Running", "hostIP": "10.250.0.1", "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": t,
            "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"),
                cond("ContainersReady"), cond("PodScheduled")],
            "containerStatuses": [{"name": "c", "ready": true, "started": true, "restartCount": 0,
                "image": IMAGE, "imageID": format!("{IMAGE}@sha256:{:064x}", 9),
                "containerID": format!("containerd://{n:064x}"),
                "state": {"running": {"startedAt": t}}}]}});
        let _ = c.patch(
            &PODS,
            Some(&ns),
            &name,
            PatchType::Merge,
            &patch,
            Some("status"),
        );
    }
}

// ---- one manager's run ----

/// The numbers read at the end of a phase.
#[derive(Clone, Copy)]
struct Mark {
    at: Instant,
    cpu: f64,
    server: Option<f64>,
}

impl Mark {
    fn now(p: &Proc) -> Mark {
        Mark {
            at: Instant::now(),
            cpu: p.cpu_seconds().unwrap_or(0.0),
            server: server_cpu_seconds(),
        }
    }

    fn secs_since(&self, earlier: &Mark) -> f64 {
        (self.at - earlier.at).as_secs_f64()
    }

    fn cpu_since(&self, earlier: &Mark) -> f64 {
        self.cpu - earlier.cpu
    }

    fn server_since(&self, earlier: &Mark) -> Option<f64> {
        Some(self.server? - earlier.server?)
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn run(c: &Cluster, m: &Manager, o: &Opts, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let row = table.row(&m.name);
    let mut p = Proc::start(m, &c.work)?;
    let start = Mark::now(&p);
    let probe = format!("scale-probe-{:06x}", fastrand::u32(..0xffffff));
    create_namespace(admin, &probe)?;
    p.wait_ready(Duration::from_secs(300), || {
        admin.get(&SERVICEACCOUNTS, Some(&probe), "default").is_ok()
    })?;
    let ready = Mark::now(&p);
    let ready_rss = p.rss_mb();
    table.num(row, "ready RSS", ready_rss);
    table.num(row, "start CPU", Some(ready.cpu_since(&start)));

    let kubelet = Kubelet::start(admin);
    let namespaces = make_namespaces(admin, o)?;
    let t0 = Mark::now(&p);
    create_deployments(admin, o, &namespaces)?;
    println!(
        "created {} Deployments in {:.1} s (load {})",
        o.deployments,
        t0.at.elapsed().as_secs_f64(),
        loadavg()
    );
    wait_available(admin, o, &kubelet, &p)?;
    let conv = Mark::now(&p);
    table.num(row, "converge s", Some(conv.secs_since(&t0)));
    table.num(row, "converge CPU", Some(conv.cpu_since(&t0)));
    table.num(row, "peak RSS", p.peak_rss_mb());
    table.num(row, "apiserver+etcd CPU", conv.server_since(&t0));
    table.set(row, "load", loadavg());
    println!(
        "converged in {:.1} s: {:.1} CPU-s, RSS {} MB, peak {} MB; apiserver+etcd {} CPU-s",
        conv.secs_since(&t0),
        conv.cpu_since(&t0),
        benchkit::num(p.rss_mb()),
        benchkit::num(p.peak_rss_mb()),
        benchkit::num(conv.server_since(&t0))
    );

    // Settle: nothing changes; RSS read every 5 s, the last reading is the settled one.
    let mut rss_lo = f64::MAX;
    let mut rss_hi: f64 = 0.0;
    while conv.at.elapsed() < o.settle {
        std::thread::sleep(Duration::from_secs(5).min(o.settle));
        let r = p.rss_mb().unwrap_or(0.0);
        rss_lo = rss_lo.min(r);
        rss_hi = rss_hi.max(r);
    }
    let settled = Mark::now(&p);
    let settled_rss = p.rss_mb();
    println!(
        "settled {:.0} s: RSS {} MB (range {rss_lo:.1}-{rss_hi:.1}), {:.2} CPU-s",
        o.settle.as_secs_f64(),
        benchkit::num(settled_rss),
        settled.cpu_since(&conv)
    );
    if let Ok(pids) = std::env::var("KCM_BENCH_SERVER_PIDS") {
        for pid in pids.split(',').filter_map(|p| p.trim().parse::<u32>().ok()) {
            let rss = benchkit::num(benchkit::status_mb(pid, "VmRSS:"));
            println!("server process {pid}: RSS {rss} MB");
        }
    }
    table.num(row, "settled RSS", settled_rss);
    table.num(row, "settle CPU", Some(settled.cpu_since(&conv)));
    table.num(row, "settle apiserver+etcd", settled.server_since(&conv));
    let pods = (o.deployments * o.replicas) as f64;
    let growth = settled_rss
        .zip(ready_rss)
        .map(|(s, r)| (s - r) * 1024.0 * 1024.0 / pods);
    table.set(
        row,
        "RSS growth B/pod",
        growth.map_or("-".into(), |g| format!("{g:.0}")),
    );
    if let Some(n) = count_events(admin) {
        println!("Events stored: {n}");
        table.set(row, "Events", n);
    }
    cache_metrics(o, table, row);
    p.reset_peak_rss();

    let del = delete_namespaces(admin, o, &namespaces)?;
    let gone = Mark::now(&p);
    table.num(row, "ns delete s", del);
    table.num(row, "delete CPU", Some(gone.cpu_since(&settled)));
    table.num(row, "delete peak RSS", p.peak_rss_mb());
    table.num(row, "delete apiserver+etcd", gone.server_since(&settled));
    table.num(row, "total CPU", Some(gone.cpu_since(&start)));
    table.num(row, "RSS after deletion", p.rss_mb());
    drop(kubelet);
    let _ = admin.delete(&NAMESPACES, None, &probe, &DeleteOptions::default());
    p.stop();
    Ok(())
}

fn create_namespace(admin: &Client, name: &str) -> Res<()> {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"edgekcm-bench": "scale"}}});
    admin.create(&NAMESPACES, None, &ns)?;
    Ok(())
}

/// The workload's namespaces, each with its `default` ServiceAccount (the manager's
/// serviceaccount controller writes it; pods are refused until then).
fn make_namespaces(admin: &Client, o: &Opts) -> Res<Vec<String>> {
    let tag = fastrand::u32(..0xffffff);
    let names: Vec<String> = (0..o.namespaces)
        .map(|i| format!("scale-{tag:06x}-{i:02}"))
        .collect();
    for n in &names {
        create_namespace(admin, n)?;
    }
    for n in &names {
        let ok = benchkit::wait_until(Duration::from_secs(120), || {
            std::thread::sleep(Duration::from_millis(200));
            admin.get(&SERVICEACCOUNTS, Some(n), "default").is_ok()
        });
        ok.ok_or_else(|| format!("namespace {n} has no default ServiceAccount after 120 s"))?;
    }
    Ok(names)
}

fn deployment(name: &str, replicas: usize, node: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeName": node,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": IMAGE,
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]
                }
            }
        }
    })
}

fn create_deployments(admin: &Client, o: &Opts, namespaces: &[String]) -> Res<()> {
    parallel(o.deployments, 8, |i| {
        let ns = &namespaces[i % namespaces.len()];
        let d = deployment(&format!("web-{i:05}"), o.replicas, &node_name(i % o.nodes));
        admin.create(&DEPLOYMENTS, Some(ns), &d)?;
        Ok(())
    })
}

/// Until every Deployment is available and every pod Running; progress every 10 s, and a
/// sweep for pods the watch missed when nothing moved for 30 s.
fn wait_available(admin: &Client, o: &Opts, k: &Kubelet, p: &Proc) -> Res<()> {
    let want_pods = o.deployments * o.replicas;
    let t0 = Instant::now();
    let (mut last, mut last_change, mut last_print) =
        ((0, 0, 0, 0), Instant::now(), Instant::now());
    loop {
        let now = k.counts();
        let (pods, running, deploys, avail) = now;
        if avail >= o.deployments && running >= want_pods && deploys >= o.deployments {
            return Ok(());
        }
        if now != last {
            (last, last_change) = (now, Instant::now());
        } else if last_change.elapsed() > Duration::from_secs(30) {
            k.sweep(admin);
            last_change = Instant::now();
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            println!(
                "  {:>6.1} s: {pods} pods ({running} Running, {} status writes), {avail}/{deploys} Deployments available; RSS {} MB; load {}",
                t0.elapsed().as_secs_f64(),
                k.started.load(Ordering::SeqCst),
                benchkit::num(p.rss_mb()),
                loadavg()
            );
            last_print = Instant::now();
        }
        if t0.elapsed() > o.timeout {
            return Err(format!(
                "not converged within {} s: {pods} pods ({running} Running), {avail}/{} Deployments available",
                o.timeout.as_secs(),
                o.deployments
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The namespaces deleted; seconds until all are gone (None: timeout).
fn delete_namespaces(admin: &Client, o: &Opts, names: &[String]) -> Res<Option<f64>> {
    let t0 = Instant::now();
    for n in names {
        admin.delete(&NAMESPACES, None, n, &DeleteOptions::default())?;
    }
    let want: HashSet<&str> = names.iter().map(String::as_str).collect();
    let opts = ListOptions {
        label_selector: Some(NS_LABEL.into()),
        metadata_only: true,
        ..ListOptions::default()
    };
    let mut last_print = Instant::now();
    while t0.elapsed() < o.timeout {
        std::thread::sleep(Duration::from_secs(1));
        let Ok(list) = admin.list(&NAMESPACES, None, &opts) else {
            continue;
        };
        let left = list
            .items
            .iter()
            .filter(|n| want.contains(n["metadata"]["name"].as_str().unwrap_or("")))
            .count();
        if left == 0 {
            let s = t0.elapsed().as_secs_f64();
            println!("namespaces deleted in {s:.1} s");
            return Ok(Some(s));
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            println!(
                "  {:>6.1} s: {left} namespaces left; load {}",
                t0.elapsed().as_secs_f64(),
                loadavg()
            );
            last_print = Instant::now();
        }
    }
    println!("namespaces not deleted within {} s", o.timeout.as_secs());
    Ok(None)
}

/// How many Events the cluster holds (a list of one, and the count of the rest): what the
/// manager's event sink wrote, as events it could not write in time are dropped.
fn count_events(admin: &Client) -> Option<u64> {
    let v = admin.get_path("/api/v1/events?limit=1").ok()?;
    let items = v["items"].as_array().map_or(0, Vec::len) as u64;
    Some(items + v["metadata"]["remainingItemCount"].as_u64().unwrap_or(0))
}

// ---- the manager's /metrics ----

/// `edgekcm_cache_objects` / `edgekcm_cache_bytes` for pods (bytes per cached pod) and in all,
/// and `process_resident_memory_bytes`, from the manager's /metrics (curl, the serving
/// certificate not checked); "-" when the manager does not export them.
fn cache_metrics(o: &Opts, table: &mut Table, row: usize) {
    let out = std::process::Command::new("curl")
        .args(["-sk", "--max-time", "20"])
        .arg(format!("https://127.0.0.1:{}/metrics", o.metrics_port))
        .output();
    let text = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => {
            println!("/metrics: not read");
            return;
        }
    };
    let series = |family: &str| -> Vec<(String, f64)> {
        text.lines()
            .filter(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' ']))
            .filter_map(|l| {
                let (name, v) = l.rsplit_once(' ')?;
                Some((name.to_string(), v.parse().ok()?))
            })
            .collect()
    };
    let objects = series("edgekcm_cache_objects");
    let bytes = series("edgekcm_cache_bytes");
    let pick = |s: &[(String, f64)], res: &str| {
        s.iter()
            .find(|(n, _)| n.contains(&format!("resource=\"{res}\"")))
            .map(|(_, v)| *v)
    };
    let total =
        |s: &[(String, f64)]| (!s.is_empty()).then(|| s.iter().map(|(_, v)| v).sum::<f64>());
    if let (Some(n), Some(b)) = (pick(&objects, "pods"), pick(&bytes, "pods")) {
        table.set(row, "cached pods", format!("{n:.0}"));
        table.set(row, "B/cached pod", format!("{:.0}", b / n.max(1.0)));
    }
    if let (Some(n), Some(b)) = (total(&objects), total(&bytes)) {
        table.set(row, "cache MB", format!("{:.1}", b / 1048576.0));
        println!("caches: {n:.0} objects, {:.1} MB", b / 1048576.0);
        let mut rows: Vec<_> = bytes.iter().filter(|(_, v)| *v > 65536.0).collect();
        rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (name, v) in rows {
            println!("  {name} {:.2} MB", v / 1048576.0);
        }
    }
    for fam in [
        "process_resident_memory_bytes",
        "go_memstats_heap_inuse_bytes",
    ] {
        if let Some((_, v)) = series(fam).first() {
            println!("{fam} {:.1} MB", v / 1048576.0);
        }
    }
}
