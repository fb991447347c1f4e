//! The volume binder under load: a controller manager runs
//! `persistentvolume-binder-controller` and the PVC / PV protection controllers; once it has
//! synced (a probe volume is Available), N PersistentVolumes and N claims that fit them are
//! created at once. Prints the wall time until every claim is Bound, the CPU seconds that
//! took, and the peak and final RSS. A benchmark, not a test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_pv
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig KCM_BENCH_UPSTREAM="kube-controller-manager ..." \
//!         cargo run --release --example bench_pv
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`); `KCM_BENCH_UPSTREAM` runs after
//! edgekcm on a fresh copy of the workload.
//!
//! Flags: `--claims=N` (500), `--timeout=SECONDS` (300), `--skip-edgekcm`.

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{parallel, Args, Cluster, Proc, Res, Table};
use edgekcm::api::client::{ListOptions, PatchType};
use edgekcm::api::resources::{
    NAMESPACES, PERSISTENTVOLUMECLAIMS as PVCS, PERSISTENTVOLUMES as PVS,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

struct Opts {
    claims: usize,
    timeout: Duration,
    skip_edgekcm: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut a = Args::parse();
    let o = Opts {
        claims: a.count("--claims", 500)?,
        timeout: a.secs("--timeout", 300)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
    };
    a.done()?;
    Ok(o)
}

fn pv(name: &str, class: &str, gi: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
           "spec": {"capacity": {"storage": format!("{gi}Gi")}, "accessModes": ["ReadWriteOnce"],
                    "storageClassName": class, "persistentVolumeReclaimPolicy": "Retain",
                    "csi": {"driver": "bench.example.com", "volumeHandle": name}}})
}

fn pvc(name: &str, class: &str, gi: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
           "spec": {"resources": {"requests": {"storage": format!("{gi}Gi")}},
                    "accessModes": ["ReadWriteOnce"], "storageClassName": class}})
}

fn phase(v: &Value) -> &str {
    v["status"]["phase"].as_str().unwrap_or("")
}

/// Volumes and claims of the run deleted, finalizers first (none may be left behind).
fn cleanup(c: &Cluster, ns: &str) {
    let unhold = json!({"metadata": {"finalizers": null}});
    let claims: Vec<String> = c
        .admin
        .list(&PVCS, Some(ns), &ListOptions::default())
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .filter_map(|x| x["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    let _ = parallel(claims.len(), 8, |i| {
        let _ = c
            .admin
            .patch(&PVCS, Some(ns), &claims[i], PatchType::Merge, &unhold, None);
        let _ = c
            .admin
            .delete(&PVCS, Some(ns), &claims[i], &Default::default());
        Ok(())
    });
    let vols: Vec<String> = c
        .admin
        .list(&PVS, None, &ListOptions::default())
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .filter_map(|x| x["metadata"]["name"].as_str())
        .filter(|n| n.starts_with(ns))
        .map(str::to_string)
        .collect();
    let _ = parallel(vols.len(), 8, |i| {
        let _ = c
            .admin
            .patch(&PVS, None, &vols[i], PatchType::Merge, &unhold, None);
        let _ = c.admin.delete(&PVS, None, &vols[i], &Default::default());
        Ok(())
    });
    let _ = c.admin.delete(&NAMESPACES, None, ns, &Default::default());
}

/// Run one controller manager on a fresh copy of the workload.
fn run(c: &Cluster, m: &benchkit::Manager, o: &Opts, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let ns = c.namespace("bench-pv")?;
    let class = format!("{ns}-class");
    let probe = format!("{ns}-probe");
    admin.create(&PVS, None, &pv(&probe, "probe", 1))?;

    let mut p = Proc::start(m, &c.work)?;
    p.wait_ready(Duration::from_secs(60), || {
        admin
            .get(&PVS, None, &probe)
            .is_ok_and(|v| phase(&v) == "Available")
    })?;
    p.reset_peak_rss();
    let cpu0 = p.cpu_seconds();
    let started = Instant::now();
    // Sizes 1..=10 Gi, each claim fitting exactly one size of volume.
    parallel(o.claims, 8, |i| {
        let gi = 1 + i % 10;
        let _ = admin.create(&PVS, None, &pv(&format!("{ns}-v{i:05}"), &class, gi));
        let _ = admin.create(&PVCS, Some(&ns), &pvc(&format!("c{i:05}"), &class, gi));
        Ok(())
    })?;
    println!(
        "created the workload in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut converged = None;
    while started.elapsed() < o.timeout && p.alive() {
        std::thread::sleep(Duration::from_millis(250));
        let bound = admin
            .list(&PVCS, Some(&ns), &ListOptions::default())
            .map(|l| l.items.iter().filter(|c| phase(c) == "Bound").count())
            .unwrap_or(0);
        if bound == o.claims {
            converged = Some(started.elapsed().as_secs_f64());
            break;
        }
    }
    let cpu = p.cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let row = table.row(&m.name);
    table.num(row, "all Bound s", converged);
    table.num(row, "CPU s", cpu);
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.num(row, "end RSS MB", p.rss_mb());
    p.stop();
    cleanup(c, &ns);
    println!("{}: log in {}", m.name, p.log.display());
    Ok(())
}

fn main() {
    benchkit::main(|| {
        let o = parse_opts()?;
        let c = Cluster::from_env("bench-pv")?;
        let extra = [
            "--controllers=persistentvolume-binder-controller,\
             persistentvolumeclaim-protection-controller,persistentvolume-protection-controller"
                .to_string(),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        let mut table = Table::default();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            run(&c, &m, &o, &mut table)?;
        }
        table.print(&format!(
            "{} claims bound to {} volumes",
            o.claims, o.claims
        ));
        Ok(())
    })
}
