//! The attach/detach controller under load: N nodes managed by the controller (annotation
//! `volumes.kubernetes.io/controller-managed-attach-detach`), P claims bound to CSI volumes,
//! a controller manager running `persistentvolume-attach-detach-controller`,
//! `persistentvolume-expander-controller` and `ephemeral-volume-controller`. Once it has
//! attached a probe pod's volume (started and synced), P pods using the claims are created
//! at once, spread over the nodes; the bench plays the external attacher (sets
//! `status.attached` on each new VolumeAttachment). Prints the wall time from the first pod
//! create until every VolumeAttachment exists and every node's `status.volumesAttached` lists
//! its volumes, then, after the pods are deleted, until every attachment is gone and no node
//! reports any; CPU seconds of each phase, peak and final RSS. A benchmark, not a test: it
//! never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_volumes
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig KCM_BENCH_UPSTREAM="kube-controller-manager ..." \
//!         cargo run --release --example bench_volumes -- --pods=200 --nodes=20
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`); `KCM_BENCH_UPSTREAM` runs after
//! edgekcm on a fresh copy of the workload.
//!
//! Flags: `--pods=P` (200), `--nodes=N` (20), `--idle=SECONDS` (5), `--timeout=SECONDS` (180),
//! `--skip-edgekcm`.

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{parallel, Args, Cluster, Proc, Res, Table};
use edgekcm::api::client::{Client, DeleteOptions, ListOptions};
use edgekcm::api::resources::{
    NAMESPACES, NODES, PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, PODS, VOLUMEATTACHMENTS,
};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const PREFIX: &str = "bench-vol-";
const DRIVER: &str = "bench.csi.example.com";

struct Opts {
    pods: usize,
    nodes: usize,
    idle: Duration,
    timeout: Duration,
    skip_edgekcm: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut a = Args::parse();
    let o = Opts {
        pods: a.count("--pods", 200)?,
        nodes: a.count("--nodes", 20)?.max(1),
        idle: a.secs("--idle", 5)?,
        timeout: a.secs("--timeout", 180)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
    };
    a.done()?;
    Ok(o)
}

fn node_name(i: usize) -> String {
    format!("{PREFIX}node-{i:03}")
}

fn create_node(admin: &Client, name: &str) -> Res<()> {
    let n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
        "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}}});
    let mut n = admin.create(&NODES, None, &n)?;
    n["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "Bench",
        "lastHeartbeatTime": "2024-01-01T00:00:00Z",
        "lastTransitionTime": "2024-01-01T00:00:00Z"}]);
    admin.update_subresource(&NODES, &n, "status")?;
    Ok(())
}

/// Claim `c-<i>` bound to CSI volume `<prefix><ns>-<i>`.
fn bound_claim(admin: &Client, ns: &str, i: usize) -> Res<()> {
    let claim = format!("c-{i}");
    let pv = format!("{PREFIX}{ns}-{i}");
    let c = admin.create(
        &PERSISTENTVOLUMECLAIMS,
        Some(ns),
        &json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv,
                     "resources": {"requests": {"storage": "1Gi"}}}}),
    )?;
    admin.create(
        &PERSISTENTVOLUMES,
        None,
        &json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
            "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                     "storageClassName": "",
                     "csi": {"driver": DRIVER, "volumeHandle": format!("h-{ns}-{i}")},
                     "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                  "namespace": ns, "name": claim,
                                  "uid": c["metadata"]["uid"]}}}),
    )?;
    let mut c = admin.get(&PERSISTENTVOLUMECLAIMS, Some(ns), &claim)?;
    c["status"] = json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                         "capacity": {"storage": "1Gi"}});
    admin.update_status(&PERSISTENTVOLUMECLAIMS, &c)?;
    Ok(())
}

fn create_pod(admin: &Client, ns: &str, i: usize, node: &str) -> Res<()> {
    admin.create(
        &PODS,
        Some(ns),
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p-{i}")},
            "spec": {"nodeName": node,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}],
                     "volumes": [{"name": "data",
                                  "persistentVolumeClaim": {"claimName": format!("c-{i}")}}]}}),
    )?;
    Ok(())
}

fn attachments(admin: &Client) -> Vec<Value> {
    admin
        .list(&VOLUMEATTACHMENTS, None, &ListOptions::default())
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|v| {
            v["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| n.starts_with(PREFIX))
        })
        .collect()
}

/// The number of volumes each bench node reports attached.
fn reported(admin: &Client) -> Vec<usize> {
    admin
        .list(&NODES, None, &ListOptions::default())
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .filter(|n| {
            n["metadata"]["name"]
                .as_str()
                .is_some_and(|x| x.starts_with(PREFIX))
        })
        .map(|n| {
            n["status"]["volumesAttached"]
                .as_array()
                .map_or(0, Vec::len)
        })
        .collect()
}

/// The external attacher: every VolumeAttachment of a bench node not yet attached is.
fn attacher(admin: &Client, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let todo: Vec<Value> = attachments(admin)
            .into_iter()
            .filter(|v| {
                v["status"]["attached"] != true && v["metadata"]["deletionTimestamp"].is_null()
            })
            .collect();
        let _ = parallel(todo.len(), 8, |i| {
            let mut v = todo[i].clone();
            v["status"] = json!({"attached": true});
            let _ = admin.update_status(&VOLUMEATTACHMENTS, &v);
            Ok(())
        });
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run(c: &Cluster, m: &benchkit::Manager, o: &Opts, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let ns = c.namespace("bench-volumes")?;
    parallel(o.nodes, 8, |i| create_node(admin, &node_name(i)))?;
    // Claim 0 is the probe's.
    parallel(o.pods + 1, 16, |i| bound_claim(admin, &ns, i))?;
    let stop = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        s.spawn(|| attacher(admin, &stop));
        let r = phases(c, m, o, table, &ns);
        stop.store(true, Ordering::Relaxed);
        r
    });
    // Clean up for the next manager.
    c.delete_all(&PODS, Some(&ns), "");
    c.delete_all(&VOLUMEATTACHMENTS, None, "csi-");
    c.delete_all(&PERSISTENTVOLUMES, None, PREFIX);
    c.delete_all(&NODES, None, PREFIX);
    let _ = admin.delete(&NAMESPACES, None, &ns, &DeleteOptions::default());
    benchkit::wait_until(Duration::from_secs(60), || attachments(admin).is_empty());
    result
}

fn phases(c: &Cluster, m: &benchkit::Manager, o: &Opts, table: &mut Table, ns: &str) -> Res<()> {
    let admin = &c.admin;
    let mut p = Proc::start(m, &c.work)?;
    create_pod(admin, ns, 0, &node_name(0))?;
    let row = table.row(&m.name);
    let ready = p.wait_ready(o.timeout, || reported(admin).iter().sum::<usize>() == 1);
    if let Err(e) = ready {
        println!("{}: {e}", m.name);
        p.stop();
        return Ok(());
    }
    let cpu0 = p.cpu_seconds();
    let started = Instant::now();
    parallel(o.pods, 16, |i| {
        create_pod(admin, ns, i + 1, &node_name((i + 1) % o.nodes))
    })?;
    let want = o.pods + 1;
    let mut attached = None;
    while started.elapsed() < o.timeout && p.alive() {
        let vas = attachments(admin);
        if vas.len() == want
            && vas.iter().all(|v| v["status"]["attached"] == true)
            && reported(admin).iter().sum::<usize>() == want
        {
            attached = Some(started.elapsed().as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let cpu1 = p.cpu_seconds();
    // Detach: every pod gone (the node reports nothing in use).
    let started = Instant::now();
    c.delete_all(&PODS, Some(ns), "");
    let mut detached = None;
    while started.elapsed() < o.timeout && p.alive() {
        if attachments(admin).is_empty() && reported(admin).iter().all(|n| *n == 0) {
            detached = Some(started.elapsed().as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let cpu2 = p.cpu_seconds();
    std::thread::sleep(o.idle);
    table.num(row, "attach s", attached);
    table.num(row, "attach CPU s", cpu1.zip(cpu0).map(|(a, b)| a - b));
    table.num(row, "detach s", detached);
    table.num(row, "detach CPU s", cpu2.zip(cpu1).map(|(a, b)| a - b));
    table.num(row, "total CPU s", p.cpu_seconds());
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.num(row, "end RSS MB", p.rss_mb());
    p.stop();
    println!("{}: log in {}", m.name, p.log.display());
    Ok(())
}

fn main() {
    benchkit::main(|| {
        let o = parse_opts()?;
        let c = Cluster::from_env("bench-volumes")?;
        let extra = [
            "--controllers=persistentvolume-attach-detach-controller,\
             persistentvolume-expander-controller,ephemeral-volume-controller"
                .to_string(),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        let mut table = Table::default();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            run(&c, &m, &o, &mut table)?;
        }
        table.print(&format!(
            "{} pods with CSI claims on {} managed nodes, the bench as external attacher",
            o.pods, o.nodes
        ));
        Ok(())
    })
}
