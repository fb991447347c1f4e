//! The daemonset-controller under load: D DaemonSets on N nodes, the bench playing kubelet
//! (every daemon pod Running and Ready as it appears) and node heartbeats (each node's Ready
//! condition rewritten every 10 s). Each controller manager runs `--controllers=daemonset` and
//! is started and synced (a probe DaemonSet has its pod) before the workload. Measured: the
//! time until every DaemonSet has a ready pod on every node, then until a template change of
//! every DaemonSet is rolled out (maxUnavailable 1), the CPU seconds of the manager over both
//! and its peak RSS. A benchmark, not a test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_daemonsets
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig KCM_BENCH_UPSTREAM="kube-controller-manager ..." \
//!         cargo run --release --example bench_daemonsets
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`). Each manager's log is kept as
//! `/tmp/bench-daemonsets-<manager>.log`.
//!
//! Flags: `--daemonsets=D` (20), `--nodes=N` (20), `--timeout=SECONDS` (600),
//! `--skip-edgekcm`.

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{parallel, Args, Cluster, Proc, Res, Table};
use edgekcm::api::client::{Client, ListOptions, PatchType};
use edgekcm::api::resources::{CONTROLLERREVISIONS, DAEMONSETS, NAMESPACES, NODES, PODS};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

struct Opts {
    daemonsets: usize,
    nodes: usize,
    timeout: Duration,
    skip_edgekcm: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut a = Args::parse();
    let o = Opts {
        daemonsets: a.count("--daemonsets", 20)?,
        nodes: a.count("--nodes", 20)?,
        timeout: a.secs("--timeout", 600)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
    };
    a.done()?;
    Ok(o)
}

fn daemonset(name: &str, pool: &str, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"nodeSelector": {"pool": pool},
                    "containers": [{"name": "c", "image": image}]}}}})
}

fn node_status(admin: &Client, name: &str) {
    let now = edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now());
    let _ = admin.patch(
        &NODES,
        None,
        name,
        PatchType::Merge,
        &json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastHeartbeatTime": now, "lastTransitionTime": "2024-01-01T00:00:00Z"}]}}),
        Some("status"),
    );
}

/// Play kubelet once: every daemon pod of `ns` not yet Running is made Running and Ready.
fn kubelet_pass(admin: &Client, ns: &str) {
    let Ok(list) = admin.list(&PODS, Some(ns), &ListOptions::default()) else {
        return;
    };
    let todo: Vec<Value> = list
        .items
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| p["status"]["phase"] != "Running")
        .collect();
    let _ = parallel(todo.len(), 8, |i| {
        let mut p = todo[i].clone();
        let now = edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now());
        p["status"]["phase"] = json!("Running");
        p["status"]["conditions"] =
            json!([{"type": "Ready", "status": "True", "lastTransitionTime": now}]);
        let _ = admin.update_subresource(&PODS, &p, "status");
        Ok(())
    });
}

/// DaemonSets whose status shows `want` ready pods, all of the current template.
fn settled(admin: &Client, ns: &str, want: i64) -> usize {
    admin
        .list(&DAEMONSETS, Some(ns), &ListOptions::default())
        .map(|l| {
            l.items
                .iter()
                .filter(|d| {
                    let st = &d["status"];
                    st["observedGeneration"] == d["metadata"]["generation"]
                        && st["desiredNumberScheduled"] == want
                        && st["numberAvailable"] == want
                        && st["updatedNumberScheduled"] == want
                })
                .count()
        })
        .unwrap_or(0)
}

fn run(c: &Cluster, m: &benchkit::Manager, o: &Opts, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let ns = c.namespace("bench-ds")?;
    let pool = ns.clone();
    let nodes: Vec<String> = (0..o.nodes).map(|i| format!("{ns}-n{i:03}")).collect();
    parallel(nodes.len(), 8, |i| {
        let n = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": nodes[i], "labels": {"pool": pool}}});
        admin.create(&NODES, None, &n)?;
        // As the node lifecycle controller would once the node is Ready.
        admin.patch(
            &NODES,
            None,
            &nodes[i],
            PatchType::Merge,
            &json!({"spec": {"taints": []}}),
            None,
        )?;
        node_status(admin, &nodes[i]);
        Ok(())
    })?;
    let mut p = Proc::start(m, &c.work)?;
    admin.create(
        &DAEMONSETS,
        Some(&ns),
        &daemonset("probe", &pool, "registry.k8s.io/pause:3.9"),
    )?;
    p.wait_ready(Duration::from_secs(120), || {
        admin
            .list(&PODS, Some(&ns), &ListOptions::default())
            .is_ok_and(|l| !l.items.is_empty())
    })?;
    let cpu0 = p.cpu_seconds();
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    let want = o.nodes as i64;
    let (mut up, mut rolled) = (None, None);
    std::thread::scope(|s| -> Res<()> {
        s.spawn(|| {
            let mut beat = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                kubelet_pass(admin, &ns);
                if beat.elapsed() > Duration::from_secs(10) {
                    beat = Instant::now();
                    for n in &nodes {
                        node_status(admin, n);
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let made = parallel(o.daemonsets, 8, |i| {
            let d = daemonset(&format!("ds-{i:03}"), &pool, "registry.k8s.io/pause:3.9");
            admin.create(&DAEMONSETS, Some(&ns), &d)?;
            Ok(())
        });
        if let Err(e) = made {
            stop.store(true, Ordering::SeqCst);
            return Err(e);
        }
        let all = o.daemonsets + 1; // and the probe
        while started.elapsed() < o.timeout && p.alive() {
            std::thread::sleep(Duration::from_millis(250));
            if settled(admin, &ns, want) >= all {
                up = Some(started.elapsed().as_secs_f64());
                break;
            }
        }
        let roll = Instant::now();
        let _ = parallel(o.daemonsets, 8, |i| {
            let patch = json!({"spec": {"template": {"spec": {"containers":
                [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}});
            admin.patch(
                &DAEMONSETS,
                Some(&ns),
                &format!("ds-{i:03}"),
                PatchType::Strategic,
                &patch,
                None,
            )?;
            Ok(())
        });
        while up.is_some() && started.elapsed() < o.timeout && p.alive() {
            std::thread::sleep(Duration::from_millis(250));
            if settled(admin, &ns, want) >= all {
                rolled = Some(roll.elapsed().as_secs_f64());
                break;
            }
        }
        stop.store(true, Ordering::SeqCst);
        Ok(())
    })?;
    let cpu = p.cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let row = table.row(&m.name);
    table.num(row, "all ready s", up);
    table.num(row, "rolled out s", rolled);
    table.num(row, "CPU s", cpu);
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.num(row, "end RSS MB", p.rss_mb());
    p.stop();
    c.delete_all(&DAEMONSETS, Some(&ns), "");
    c.delete_all(&CONTROLLERREVISIONS, Some(&ns), "");
    c.delete_all(&PODS, Some(&ns), "");
    c.delete_all(&NODES, None, &ns);
    let _ = admin.delete(&NAMESPACES, None, &ns, &Default::default());
    println!("{}: log in {}", m.name, p.log.display());
    let _ = std::fs::copy(&p.log, format!("/tmp/bench-daemonsets-{}.log", m.name));
    Ok(())
}

fn main() {
    benchkit::main(|| {
        let o = parse_opts()?;
        let c = Cluster::from_env("bench-daemonsets")?;
        let extra = [
            "--controllers=daemonset".to_string(),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        let mut table = Table::default();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            run(&c, &m, &o, &mut table)?;
        }
        table.print(&format!(
            "{} DaemonSets on {} nodes, then a rolling update of each",
            o.daemonsets, o.nodes
        ));
        Ok(())
    })
}
