//! The endpoints workload, timed: N Services over N Deployments x R replicas in a fresh
//! namespace, the bench playing kubelet (each new pod gets an IP and `Ready` through
//! `pods/status`; a pod being deleted is deleted, at once or as `--kubelet-stop` says). Prints the seconds until every
//! Service's Endpoints and EndpointSlices list its R ready addresses, then, after a rolling
//! update of every Deployment, the seconds until they list exactly the R pods of the new
//! ReplicaSets, with the EndpointSlice writes seen (creates, updates and deletes in the
//! namespace's slice watch) in each phase (in the rolling update also those whose slice shows
//! a terminating endpoint) and the Endpoints writes seen, and the controller manager's CPU
//! seconds and peak RSS over both. Each controller manager runs
//! `--controllers=endpoint,endpointslice,deployment,replicaset`; the pods run on `node-1`,
//! which the bench creates (ready, zone `zone-a`) when it is missing. A benchmark, not a
//! test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_endpoints
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig KCM_E2E_KCM_ARGS="--kubeconfig=..." \
//!       KCM_BENCH_UPSTREAM="/path/kube-controller-manager --kubeconfig=... ..." \
//!       cargo run --release --example bench_endpoints
//!
//! Environment as every bench (`examples/benchkit/mod.rs`). Flags:
//! `--services=N` (300), `--replicas=R` (5), `--timeout=SECONDS` (300),
//! `--kubelet-stop=SECONDS` (0): how the bench's kubelet ends a pod being deleted. 0 deletes it
//! at once (grace 0), milliseconds after its controller's delete; a positive value plays a
//! real kubelet: it first writes the pod's status as when its containers stopped (`Ready` and
//! `ContainersReady` False), then deletes it with grace 0 that many seconds later. edgekcm runs with
//! `--kube-api-qps=5000 --kube-api-burst=10000`, as in `examples/bench.rs`: give upstream the same. The namespace is not
//! deleted (no namespace controller runs): its objects are deleted by the bench after each
//! controller manager, with that controller manager stopped.

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{parallel, Args, Cluster, Manager, Proc, Res, Table};
use edgekcm::api::client::{Client, DeleteOptions, ListOptions, PatchType, WatchOptions};
use edgekcm::api::resources::{
    Kind, DEPLOYMENTS, ENDPOINTS, ENDPOINTSLICES, NODES, PODS, REPLICASETS, SERVICES,
};
use edgekcm::api::watch::EventType;
use edgekcm::obj::At as _;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const CONTROLLERS: &str = "--controllers=endpoint,endpointslice,deployment,replicaset";
const NODE: &str = "node-1";

struct Opts {
    services: usize,
    replicas: usize,
    timeout: Duration,
    skip_edgekcm: bool,
    /// Seconds between a pod's stopped status and its removal (0: removed at once).
    kubelet_stop: Duration,
    /// endpointslice is among the controllers: its slices are waited for too.
    slices: bool,
}

fn main() {
    benchkit::main(|| {
        let mut a = Args::parse();
        let mut o = Opts {
            services: a.count("--services", 300)?,
            replicas: a.count("--replicas", 5)?,
            timeout: a.secs("--timeout", 300)?,
            skip_edgekcm: a.flag("--skip-edgekcm")?,
            kubelet_stop: a.secs("--kubelet-stop", 0)?,
            slices: true,
        };
        a.done()?;
        let c = Cluster::from_env("bench-ep")?;
        let made_node = ensure_node(&c.admin)?;
        // `KCM_BENCH_CONTROLLERS` replaces the controller set (to see what each costs).
        let controllers = std::env::var("KCM_BENCH_CONTROLLERS")
            .map(|c| format!("--controllers={c}"))
            .unwrap_or_else(|_| CONTROLLERS.to_string());
        o.slices = controllers.contains("endpointslice");
        let extra = [
            controllers.as_str(),
            "--leader-elect=false",
            "--secure-port=0",
            "--kube-api-qps=5000",
            "--kube-api-burst=10000",
        ]
        .map(String::from);
        println!(
            "workload: {} Services over {} Deployments x {} replicas, then a rolling update; \
             kubelet stop {} s",
            o.services,
            o.services,
            o.replicas,
            o.kubelet_stop.as_secs()
        );
        let mut table = Table::default();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            run(&c, &o, &m, &mut table)?;
        }
        table.print(&format!(
            "{} Services x {} ready endpoints (Endpoints and EndpointSlices)",
            o.services, o.replicas
        ));
        // A node left behind would skew the zone shares other users of the cluster see
        // (topology-aware hints).
        if made_node {
            let _ = c
                .admin
                .delete(&NODES, None, NODE, &DeleteOptions::default());
        }
        Ok(())
    })
}

/// The node the pods run on, ready, with a zone and CPU (the endpointslice controller leaves
/// out pods of nodes it does not know). True when the bench made it.
fn ensure_node(admin: &Client) -> Res<bool> {
    if admin.get(&NODES, None, NODE).is_ok() {
        return Ok(false);
    }
    let n = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "labels": {"topology.kubernetes.io/zone": "zone-a"}}});
    let mut n = admin.create(&NODES, None, &n)?;
    let now = edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now());
    n["status"] = json!({"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10000"},
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "10000"},
        "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": now,
            "lastTransitionTime": now, "reason": "KubeletReady", "message": "bench"}]});
    admin.update_subresource(&NODES, &n, "status")?;
    Ok(true)
}

/// What the watches saw: per Service, the pods its Endpoints list as ready, and per slice
/// its endpoints (pod, ready); the pods created since the rolling update began.
#[derive(Default)]
struct Seen {
    endpoints: HashMap<String, Vec<String>>,
    slices: HashMap<String, HashMap<String, Vec<(String, bool)>>>,
    new_pods: HashSet<String>,
    rolling: bool,
}

impl Seen {
    /// Services whose Endpoints and slices both list exactly `r` ready pods, all of them new
    /// when `only_new`, and whose slices list nothing else.
    fn complete(&self, r: usize, only_new: bool, with_slices: bool) -> usize {
        self.endpoints
            .iter()
            .filter(|(svc, eps)| {
                if !svc.starts_with("web-") || eps.len() != r {
                    return false;
                }
                if !with_slices {
                    return !only_new || eps.iter().all(|p| self.new_pods.contains(p));
                }
                let Some(slices) = self.slices.get(*svc) else {
                    return false;
                };
                let all: Vec<&(String, bool)> = slices.values().flatten().collect();
                let mut ready: Vec<&String> =
                    all.iter().filter(|(_, ok)| *ok).map(|(p, _)| p).collect();
                let mut eps: Vec<&String> = eps.iter().collect();
                ready.sort();
                eps.sort();
                ready == eps
                    && (!only_new
                        || (all.len() == r && eps.iter().all(|p| self.new_pods.contains(*p))))
            })
            .count()
    }
}

/// What the bench's kubelet does with a pod.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Act {
    /// Run it: an IP and `Ready`.
    Start,
    /// Its containers stopped (`--kubelet-stop`): not ready, removed later.
    Stop,
    /// Remove it (grace 0).
    Delete,
}

/// The kubelet's status write of a pod, tried again while it fails (a pod gone is left).
fn patch_status(admin: &Client, ns: &str, pod: &str, patch: &Value) {
    for _ in 0..20 {
        match admin.patch(
            &PODS,
            Some(ns),
            pod,
            PatchType::Merge,
            patch,
            Some("status"),
        ) {
            Ok(_) => break,
            Err(e) if e.is_not_found() => break,
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn pod_names(list: Option<&Vec<Value>>, path: &str) -> Vec<String> {
    list.map(|a| {
        a.iter()
            .filter_map(|x| x.at(path).and_then(Value::as_str).map(str::to_string))
            .collect()
    })
    .unwrap_or_default()
}

/// One controller manager on a fresh namespace: a row of `table`.
fn run(c: &Cluster, o: &Opts, m: &Manager, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let ns = c.namespace("bench-ep")?;
    let mut p = Proc::start(m, &c.work)?;

    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut threads) = start_kubelet(admin, &ns, o, &stop);
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let writes = Writes::default();
    threads.push(watch_pods(admin, &ns, o, &stop, &seen, tx));
    threads.push(watch_endpoints(admin, &ns, &stop, &seen, &writes));
    threads.push(watch_slices(admin, &ns, &stop, &seen, &writes));
    wait_probe(admin, &ns, o, &mut p, &seen)?;
    p.reset_peak_rss();
    let cpu0 = p.cpu_seconds();
    let writes0 = writes.slices.load(Ordering::SeqCst);
    let ep_writes0 = writes.endpoints.load(Ordering::SeqCst);
    let t0 = Instant::now();
    create_apps(admin, &ns, o)?;
    println!("created in {:.2} s", t0.elapsed().as_secs_f64());
    let converged = wait_complete(o, &seen, t0, false);
    let writes1 = writes.slices.load(Ordering::SeqCst);
    let terminating1 = writes.terminating.load(Ordering::SeqCst);
    let ep_writes1 = writes.endpoints.load(Ordering::SeqCst);
    // The rolling update: a new template for every Deployment.
    seen.lock().unwrap().rolling = true;
    let t1 = Instant::now();
    roll_out(admin, &ns, o)?;
    let rolled = wait_complete(o, &seen, t1, true);
    let writes2 = writes.slices.load(Ordering::SeqCst);
    let cpu = p.cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let row = table.row(&m.name);
    let secs = |v: Option<f64>| v.map_or("timeout".to_string(), |s| format!("{s:.2}"));
    table.set(row, "converge s", secs(converged));
    table.set(row, "rollout s", secs(rolled));
    table.num(row, "CPU s", cpu);
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.set(row, "slice writes converge", writes1 - writes0);
    table.set(row, "slice writes rollout", writes2 - writes1);
    let terminating2 = writes.terminating.load(Ordering::SeqCst);
    table.set(row, "of them terminating", terminating2 - terminating1);
    let ep_writes2 = writes.endpoints.load(Ordering::SeqCst);
    table.set(row, "Endpoints writes converge", ep_writes1 - ep_writes0);
    table.set(row, "Endpoints writes rollout", ep_writes2 - ep_writes1);
    p.stop();
    stop.store(true, Ordering::SeqCst);
    empty_namespace(c, &ns);
    Ok(())
}

/// The writes the watches counted.
#[derive(Default)]
struct Writes {
    /// EndpointSlice creates, updates and deletes.
    slices: Arc<AtomicUsize>,
    /// Writes whose slice shows a terminating endpoint: a pod deleted by its ReplicaSet seen
    /// before the bench (its kubelet) removed it.
    terminating: Arc<AtomicUsize>,
    /// Endpoints creates, updates and deletes.
    endpoints: Arc<AtomicUsize>,
}

/// Kubelet: every new pod runs and is ready with the next IP; a pod being deleted goes, at
/// once or after its containers stopped (`--kubelet-stop`). Returns where to send the pods
/// and the kubelet's threads.
fn start_kubelet(
    admin: &Client,
    ns: &str,
    o: &Opts,
    stop: &Arc<AtomicBool>,
) -> (mpsc::Sender<(String, Act)>, Vec<JoinHandle<()>>) {
    let next_ip = Arc::new(AtomicUsize::new(1));
    let (tx, rx) = mpsc::channel::<(String, Act)>();
    let rx = Arc::new(Mutex::new(rx));
    // Pods whose containers stopped, removed in this order once their time has come (one
    // delay for all, so the order of their deadlines is the order they came in).
    let (later_tx, later_rx) = mpsc::channel::<(Instant, String)>();
    let mut threads = Vec::new();
    {
        let (tx, stop) = (tx.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while let Ok((at, pod)) = later_rx.recv() {
                while Instant::now() < at {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    std::thread::sleep((at - Instant::now()).min(Duration::from_millis(200)));
                }
                let _ = tx.send((pod, Act::Delete));
            }
        }));
    }
    for _ in 0..8 {
        let (admin, ns, rx, next_ip) = (admin.clone(), ns.to_string(), rx.clone(), next_ip.clone());
        let (later, delay) = (later_tx.clone(), o.kubelet_stop);
        threads.push(std::thread::spawn(move || loop {
            let Ok((pod, act)) = rx.lock().unwrap_or_else(|p| p.into_inner()).recv() else {
                return;
            };
            kubelet_act(&admin, &ns, pod, act, &next_ip, &later, delay);
        }));
    }
    (tx, threads)
}

/// What the bench's kubelet does with one pod.
fn kubelet_act(
    admin: &Client,
    ns: &str,
    pod: String,
    act: Act,
    next_ip: &AtomicUsize,
    later: &mpsc::Sender<(Instant, String)>,
    delay: Duration,
) {
    if act == Act::Stop {
        // The containers stopped: the status a kubelet writes then.
        let now = edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now());
        let not_ready = |t: &str| {
            json!({"type": t, "status": "False", "lastTransitionTime": now,
                "reason": "ContainersNotReady",
                "message": "containers with unready status: [c]"})
        };
        let patch = json!({"status": {"conditions":
            [not_ready("Ready"), not_ready("ContainersReady")]}});
        patch_status(admin, ns, &pod, &patch);
        let _ = later.send((Instant::now() + delay, pod));
        return;
    }
    if act == Act::Delete {
        let now = DeleteOptions {
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        for _ in 0..50 {
            match admin.delete(&PODS, Some(ns), &pod, &now) {
                Err(e) if !e.is_not_found() => std::thread::sleep(Duration::from_millis(100)),
                _ => break,
            }
        }
        return;
    }
    let n = next_ip.fetch_add(1, Ordering::SeqCst);
    let ip = format!("10.{}.{}.{}", 64 + n / 65536, (n / 256) % 256, n % 256);
    let now = edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now());
    let patch = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
    patch_status(admin, ns, &pod, &patch);
}

/// The pod watch: hands each new pod, and each pod being deleted, to the kubelet (`tx`), and
/// notes the pods created since the rolling update began.
fn watch_pods(
    admin: &Client,
    ns: &str,
    o: &Opts,
    stop: &Arc<AtomicBool>,
    seen: &Arc<Mutex<Seen>>,
    tx: mpsc::Sender<(String, Act)>,
) -> JoinHandle<()> {
    let (a, n, s, sn) = (admin.clone(), ns.to_string(), stop.clone(), seen.clone());
    let stop_first = !o.kubelet_stop.is_zero();
    std::thread::spawn(move || {
        // Pods asked to run or to go: once each (a re-list brings them all again).
        let mut started: HashSet<String> = HashSet::new();
        let mut deleted: HashSet<String> = HashSet::new();
        watch(&a, PODS, &n, &s, |t, o| {
            if o.is_null() {
                return;
            }
            let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
            if matches!(t, Some(EventType::Deleted)) {
                return;
            }
            if o["metadata"]["deletionTimestamp"].is_string() {
                if deleted.insert(name.clone()) {
                    let _ = tx.send((name, if stop_first { Act::Stop } else { Act::Delete }));
                }
            } else if started.insert(name.clone()) {
                let mut seen = sn.lock().unwrap_or_else(|p| p.into_inner());
                if seen.rolling {
                    seen.new_pods.insert(name.clone());
                }
                drop(seen);
                let _ = tx.send((name, Act::Start));
            }
        })
    })
}

/// The Endpoints watch: per Service, the pods listed ready; counts the Endpoints writes.
fn watch_endpoints(
    admin: &Client,
    ns: &str,
    stop: &Arc<AtomicBool>,
    seen: &Arc<Mutex<Seen>>,
    writes: &Writes,
) -> JoinHandle<()> {
    let (a, n, s, sn, w) = (
        admin.clone(),
        ns.to_string(),
        stop.clone(),
        seen.clone(),
        writes.endpoints.clone(),
    );
    std::thread::spawn(move || {
        watch(&a, ENDPOINTS, &n, &s, |t, o| {
            if o.is_null() {
                return;
            }
            if t.is_some() {
                w.fetch_add(1, Ordering::SeqCst);
            }
            let ready: Vec<String> = o["subsets"]
                .as_array()
                .map(|subs| {
                    subs.iter()
                        .flat_map(|x| pod_names(x["addresses"].as_array(), "/targetRef/name"))
                        .collect()
                })
                .unwrap_or_default();
            let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
            sn.lock()
                .unwrap_or_else(|p| p.into_inner())
                .endpoints
                .insert(name, ready);
        })
    })
}

/// The EndpointSlice watch: per Service, each slice's endpoints; counts the slice writes and
/// those showing a terminating endpoint.
fn watch_slices(
    admin: &Client,
    ns: &str,
    stop: &Arc<AtomicBool>,
    seen: &Arc<Mutex<Seen>>,
    writes: &Writes,
) -> JoinHandle<()> {
    let (a, n, s, sn, w, tw) = (
        admin.clone(),
        ns.to_string(),
        stop.clone(),
        seen.clone(),
        writes.slices.clone(),
        writes.terminating.clone(),
    );
    std::thread::spawn(move || {
        watch(&a, ENDPOINTSLICES, &n, &s, |t, o| {
            if o.is_null() {
                sn.lock().unwrap_or_else(|p| p.into_inner()).slices.clear();
                return;
            }
            let svc = o["metadata"]["labels"]["kubernetes.io/service-name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
            let mut seen = sn.lock().unwrap_or_else(|p| p.into_inner());
            let slices = seen.slices.entry(svc).or_default();
            if matches!(t, Some(EventType::Deleted)) {
                slices.remove(&name);
            } else {
                let eps = o["endpoints"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|e| {
                                let pod = e["targetRef"]["name"].as_str().unwrap_or("");
                                (pod.to_string(), e["conditions"]["ready"] == true)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                slices.insert(name, eps);
            }
            // A listed slice is not a write; every event is (a re-list after a dropped
            // watch may miss some).
            if t.is_some() {
                w.fetch_add(1, Ordering::SeqCst);
                let terminating = o["endpoints"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|e| e["conditions"]["terminating"] == true));
                if terminating && !matches!(t, Some(EventType::Deleted)) {
                    tw.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    })
}

/// Ready once a probe Service has its Endpoints and slice.
fn wait_probe(admin: &Client, ns: &str, o: &Opts, p: &mut Proc, seen: &Mutex<Seen>) -> Res<()> {
    create_app(admin, ns, "probe", 1)?;
    p.wait_ready(Duration::from_secs(120), || {
        let seen = seen.lock().unwrap();
        seen.endpoints.get("probe").map(Vec::len) == Some(1)
            && (!o.slices
                || seen
                    .slices
                    .get("probe")
                    .is_some_and(|s| s.values().flatten().filter(|e| e.1).count() == 1))
    })?;
    Ok(())
}

/// The workload: `o.services` Services, each over a Deployment of `o.replicas`.
fn create_apps(admin: &Client, ns: &str, o: &Opts) -> Res<()> {
    parallel(o.services, 8, |i| {
        if let Err(e) = create_app(admin, ns, &format!("web-{i}"), o.replicas) {
            eprintln!("create web-{i}: {e}");
        }
        Ok(())
    })
}

/// The rolling update: a new template for every Deployment.
fn roll_out(admin: &Client, ns: &str, o: &Opts) -> Res<()> {
    parallel(o.services, 8, |i| {
        let patch =
            json!({"spec": {"template": {"metadata": {"annotations": {"bench/rev": "2"}}}}});
        if let Err(e) = admin.patch(
            &DEPLOYMENTS,
            Some(ns),
            &format!("web-{i}"),
            PatchType::Merge,
            &patch,
            None,
        ) {
            eprintln!("update web-{i}: {e}");
        }
        Ok(())
    })
}

/// Empty the namespace for the next controller manager.
fn empty_namespace(c: &Cluster, ns: &str) {
    for kind in [
        DEPLOYMENTS,
        REPLICASETS,
        PODS,
        SERVICES,
        ENDPOINTS,
        ENDPOINTSLICES,
    ] {
        c.delete_all(&kind, Some(ns), "");
    }
}

/// Seconds from `t0` until every Service is complete (None: the timeout passed first).
fn wait_complete(o: &Opts, seen: &Mutex<Seen>, t0: Instant, only_new: bool) -> Option<f64> {
    let mut last = Instant::now();
    loop {
        let done = seen
            .lock()
            .unwrap()
            .complete(o.replicas, only_new, o.slices);
        if done == o.services {
            return Some(t0.elapsed().as_secs_f64());
        }
        if t0.elapsed() > o.timeout {
            return None;
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
    }
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
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"nodeName": NODE,
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
    mut f: impl FnMut(Option<&EventType>, &Value),
) {
    while !stop.load(Ordering::SeqCst) {
        let Ok(list) = admin.list_all(&kind, Some(ns), &ListOptions::default()) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        // A (re-)list starts: `null` first, so a handler can drop what it kept.
        f(None, &Value::Null);
        for x in &list.items {
            f(None, x);
        }
        let wo = WatchOptions {
            resource_version: list.resource_version,
            timeout_seconds: 300,
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
                Ok(ev) => f(Some(&ev.kind), &ev.object),
                Err(_) => break,
            }
        }
    }
}
