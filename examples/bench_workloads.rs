//! Stateful and per-node workloads: S StatefulSets of R replicas (each with a claim template)
//! and D DaemonSets on N nodes, the bench playing scheduler and kubelet: it binds each pending
//! pod to a node (a DaemonSet pod to the node its `matchFields metadata.name` affinity names,
//! the others round robin), marks it Running and Ready, and keeps the nodes' Ready heartbeats
//! going. Each controller manager runs `--controllers=statefulset[,daemonset]` and is started
//! and synced (a probe StatefulSet has its pod) before the workload is made. Prints the wall
//! time until every StatefulSet (and DaemonSet) reports all its pods ready, the manager's CPU
//! seconds over that time, and its peak RSS. A benchmark, not a test: it never fails on a
//! number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_workloads
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig KCM_BENCH_UPSTREAM="kube-controller-manager ..." \
//!         cargo run --release --example bench_workloads -- --daemonsets=0
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`); `KCM_BENCH_UPSTREAM` runs after
//! edgekcm on a fresh namespace. Each manager's log is kept as
//! `/tmp/bench-workloads-<manager>.log`.
//!
//! Flags: `--statefulsets=S` (100), `--replicas=R` (3), `--daemonsets=D` (20), `--nodes=N`
//! (20), `--timeout=SECONDS` (600), `--skip-edgekcm`.

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{parallel, Args, Cluster, Proc, Res, Table};
use edgekcm::api::client::{Client, DeleteOptions, ListOptions, PatchType};
use edgekcm::api::resources::{
    CONTROLLERREVISIONS, DAEMONSETS, NAMESPACES, NODES, PERSISTENTVOLUMECLAIMS, PODS, STATEFULSETS,
};
use edgekcm::obj::At as _;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

struct Opts {
    statefulsets: usize,
    replicas: usize,
    daemonsets: usize,
    nodes: usize,
    timeout: Duration,
    skip_edgekcm: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut a = Args::parse();
    let o = Opts {
        statefulsets: a.count("--statefulsets", 100)?,
        replicas: a.count("--replicas", 3)?,
        daemonsets: a.count("--daemonsets", 20)?,
        nodes: a.count("--nodes", 20)?.max(1),
        timeout: a.secs("--timeout", 600)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
    };
    a.done()?;
    Ok(o)
}

const IMAGE: &str = "registry.k8s.io/pause:3.9";

fn node_name(i: usize) -> String {
    format!("bench-wl-node-{i:03}")
}

fn statefulset(name: &str, replicas: usize) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
        "spec": {"replicas": replicas, "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": IMAGE,
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}]}})
}

fn daemonset(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": IMAGE}]}}}})
}

fn now() -> String {
    edgekcm::compat::timefmt::rfc3339(SystemTime::now())
}

/// Nodes that exist and are Ready; their heartbeat is renewed by [`heartbeat`].
fn make_nodes(admin: &Client, n: usize) -> Res<()> {
    parallel(n, 8, |i| {
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node_name(i), "labels": {"kubernetes.io/hostname": node_name(i)}}});
        let _ = admin.create(&NODES, None, &node);
        // The API server taints a new node not-ready (NoSchedule), which DaemonSet pods do not
        // tolerate; the node lifecycle controller would lift it once the node is Ready.
        admin.patch(
            &NODES,
            None,
            &node_name(i),
            PatchType::Merge,
            &json!({"spec": {"taints": []}}),
            None,
        )?;
        heartbeat_one(admin, i)
    })
}

fn heartbeat_one(admin: &Client, i: usize) -> Res<()> {
    let mut node = admin.get(&NODES, None, &node_name(i))?;
    let t = now();
    node["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "message": "bench", "lastHeartbeatTime": t,
        "lastTransitionTime": "2024-01-01T00:00:00Z"}]);
    node["status"]["allocatable"] = json!({"cpu": "64", "memory": "256Gi", "pods": "1000"});
    node["status"]["capacity"] = json!({"cpu": "64", "memory": "256Gi", "pods": "1000"});
    admin.update_subresource(&NODES, &node, "status")?;
    Ok(())
}

fn heartbeat(admin: &Client, n: usize) {
    let _ = parallel(n, 4, |i| {
        let _ = heartbeat_one(admin, i);
        Ok(())
    });
}

/// The node a DaemonSet pod's `matchFields metadata.name` affinity names.
fn affinity_node(p: &Value) -> Option<&str> {
    p.at("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")?
        .as_array()?
        .iter()
        .flat_map(|t| t["matchFields"].as_array().into_iter().flatten())
        .find(|f| f["key"] == "metadata.name")
        .and_then(|f| f["values"][0].as_str())
}

/// Play scheduler and kubelet once: every pending pod of `ns` is bound to a node, then marked
/// Running and Ready.
fn kubelet_pass(
    admin: &Client,
    ns: &str,
    nodes: usize,
    done: &Mutex<HashSet<String>>,
    rr: &AtomicUsize,
) {
    let Ok(list) = admin.list(&PODS, Some(ns), &ListOptions::default()) else {
        return;
    };
    let todo: Vec<Value> = {
        let d = done.lock().unwrap_or_else(|p| p.into_inner());
        list.items
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter(|p| !d.contains(p["metadata"]["uid"].as_str().unwrap_or("")))
            .collect()
    };
    let _ = parallel(todo.len(), 8, |i| {
        let mut p = todo[i].clone();
        let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
        if p["spec"]["nodeName"].as_str().unwrap_or("").is_empty() {
            let node = affinity_node(&p)
                .map(str::to_string)
                .unwrap_or_else(|| node_name(rr.fetch_add(1, Ordering::Relaxed) % nodes));
            let binding = json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name}, "target": {"kind": "Node", "name": node}});
            if admin
                .create_subresource(&PODS, Some(ns), &name, "binding", &binding)
                .is_err()
            {
                // The sandbox has no binding subresource: set the node directly.
                p["spec"]["nodeName"] = json!(node);
                p = match admin.update(&PODS, &p) {
                    Ok(p) => p,
                    Err(_) => return Ok(()),
                };
            } else if let Ok(fresh) = admin.get(&PODS, Some(ns), &name) {
                p = fresh;
            }
        }
        let t = now();
        p["status"]["phase"] = json!("Running");
        p["status"]["podIP"] = json!("10.1.0.1");
        p["status"]["conditions"] = json!([
            {"type": "Ready", "status": "True", "lastTransitionTime": t},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": t},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
        ]);
        if admin.update_subresource(&PODS, &p, "status").is_ok() {
            done.lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(p["metadata"]["uid"].as_str().unwrap_or("").to_string());
        }
        Ok(())
    });
}

fn all_ready(admin: &Client, ns: &str, o: &Opts) -> bool {
    let sets = admin
        .list(&STATEFULSETS, Some(ns), &ListOptions::default())
        .map(|l| {
            l.items
                .iter()
                .filter(|s| s["metadata"]["name"] != "probe")
                .filter(|s| s["status"]["readyReplicas"].as_u64() == Some(o.replicas as u64))
                .count()
        })
        .unwrap_or(0);
    if sets < o.statefulsets {
        return false;
    }
    if o.daemonsets == 0 {
        return true;
    }
    let ds = admin
        .list(&DAEMONSETS, Some(ns), &ListOptions::default())
        .map(|l| {
            l.items
                .iter()
                .filter(|d| {
                    let st = &d["status"];
                    st["desiredNumberScheduled"].as_u64() == Some(o.nodes as u64)
                        && st["numberReady"].as_u64() == Some(o.nodes as u64)
                })
                .count()
        })
        .unwrap_or(0);
    ds >= o.daemonsets
}

fn run(c: &Cluster, m: &benchkit::Manager, o: &Opts, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let ns = c.namespace("bench-wl")?;
    let mut p = Proc::start(m, &c.work)?;
    admin.create(&STATEFULSETS, Some(&ns), &statefulset("probe", 1))?;
    p.wait_ready(Duration::from_secs(120), || {
        admin
            .list(&PODS, Some(&ns), &ListOptions::default())
            .is_ok_and(|l| !l.items.is_empty())
    })?;
    let cpu0 = p.cpu_seconds();
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    let done = Mutex::new(HashSet::new());
    let rr = AtomicUsize::new(0);
    let mut finished = None;
    std::thread::scope(|s| -> Res<()> {
        s.spawn(|| {
            let mut beat = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                kubelet_pass(admin, &ns, o.nodes, &done, &rr);
                if beat.elapsed() > Duration::from_secs(10) {
                    heartbeat(admin, o.nodes);
                    beat = Instant::now();
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let made = parallel(o.statefulsets + o.daemonsets, 8, |i| {
            if i < o.statefulsets {
                admin.create(
                    &STATEFULSETS,
                    Some(&ns),
                    &statefulset(&format!("ss-{i:03}"), o.replicas),
                )?;
            } else {
                let j = i - o.statefulsets;
                admin.create(&DAEMONSETS, Some(&ns), &daemonset(&format!("ds-{j:03}")))?;
            }
            Ok(())
        });
        if let Err(e) = made {
            stop.store(true, Ordering::SeqCst);
            return Err(e);
        }
        println!(
            "{}: {} StatefulSets and {} DaemonSets made in {:.1} s",
            m.name,
            o.statefulsets,
            o.daemonsets,
            started.elapsed().as_secs_f64()
        );
        while started.elapsed() < o.timeout && p.alive() {
            std::thread::sleep(Duration::from_millis(250));
            if all_ready(admin, &ns, o) {
                finished = Some(started.elapsed().as_secs_f64());
                break;
            }
        }
        stop.store(true, Ordering::SeqCst);
        Ok(())
    })?;
    let cpu = p.cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let row = table.row(&m.name);
    table.num(row, "all ready s", finished);
    table.num(row, "CPU s", cpu);
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.num(row, "end RSS MB", p.rss_mb());
    p.stop();
    // No garbage collector runs: the owners go with background propagation, their children
    // are deleted here.
    let bg = DeleteOptions {
        propagation_policy: Some("Background"),
        ..DeleteOptions::default()
    };
    for kind in [STATEFULSETS, DAEMONSETS] {
        if let Ok(l) = admin.list(&kind, Some(&ns), &ListOptions::default()) {
            let _ = parallel(l.items.len(), 8, |i| {
                let name = l.items[i]["metadata"]["name"].as_str().unwrap_or("");
                let _ = admin.delete(&kind, Some(&ns), name, &bg);
                Ok(())
            });
        }
    }
    for kind in [PODS, PERSISTENTVOLUMECLAIMS, CONTROLLERREVISIONS] {
        c.delete_all(&kind, Some(&ns), "");
    }
    let _ = admin.delete(&NAMESPACES, None, &ns, &Default::default());
    println!("{}: log in {}", m.name, p.log.display());
    let _ = std::fs::copy(&p.log, format!("/tmp/bench-workloads-{}.log", m.name));
    Ok(())
}

fn main() {
    benchkit::main(|| {
        let o = parse_opts()?;
        let c = Cluster::from_env("bench-workloads")?;
        make_nodes(&c.admin, o.nodes)?;
        let controllers = if o.daemonsets > 0 {
            "--controllers=statefulset,daemonset"
        } else {
            "--controllers=statefulset"
        };
        let extra = [
            controllers.to_string(),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        let mut table = Table::default();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            run(&c, &m, &o, &mut table)?;
        }
        c.delete_all(&NODES, None, "bench-wl-node-");
        table.print(&format!(
            "{} StatefulSets x {} and {} DaemonSets on {} nodes",
            o.statefulsets, o.replicas, o.daemonsets, o.nodes
        ));
        Ok(())
    })
}
