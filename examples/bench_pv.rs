//! The volume binder under load: a controller manager runs
//! `persistentvolume-binder-controller` and the PVC / PV protection controllers; once it has
//! synced (a probe volume is Available), N PersistentVolumes and N claims that fit them are
//! created at once, each size of volume (1 to 10 Gi) in its own StorageClass with its claims,
//! so that every claim has a volume whatever order the binds happen in (with one class a
//! small claim may take a bigger volume and leave a bigger claim without one). Prints the
//! wall time until every claim is Bound, the CPU seconds that took, the peak and final RSS,
//! and, on a real apiserver, the writes it counted (`apiserver_request_total` of PUT and
//! PATCH on volumes and claims, and the Event writes) over the run. A benchmark, not a test:
//! it never fails on a number.
//!
//! Each bind is five writes for both managers (the new volume's phase Available, its
//! `claimRef`, its phase Bound, the claim's `volumeName`, the claim's status): at the default
//! `--kube-api-qps` of 20, 500 binds take about 125 s. `--qps=N` passes `--kube-api-qps=N`
//! and `--kube-api-burst=N` to both managers.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_pv
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig KCM_BENCH_UPSTREAM="kube-controller-manager ..." \
//!         cargo run --release --example bench_pv
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`); `KCM_BENCH_UPSTREAM` runs after
//! edgekcm on a fresh copy of the workload.
//!
//! Flags: `--claims=N` (500), `--timeout=SECONDS` (300), `--qps=N` (the managers' default),
//! `--skip-edgekcm`, `--floor`: also run a bare client (see `pv_floor`) on the same workload,
//! after the managers.

#[path = "benchkit/mod.rs"]
mod benchkit;
#[path = "pv_floor/mod.rs"]
mod floor;

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
    qps: Option<u64>,
    skip_edgekcm: bool,
    floor: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut a = Args::parse();
    let o = Opts {
        claims: a.count("--claims", 500)?,
        timeout: a.secs("--timeout", 300)?,
        qps: match a.num("--qps", 0)? {
            0 => None,
            n => Some(n),
        },
        skip_edgekcm: a.flag("--skip-edgekcm")?,
        floor: a.flag("--floor")?,
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

/// The apiserver's count of the requests a manager writes with: PUT and PATCH of volumes
/// and claims (the bench itself only creates them while a manager runs), and Event writes.
/// None on the sandbox (no `/metrics`).
fn writes(c: &Cluster) -> Option<f64> {
    let text = c.admin.get_raw("/metrics").ok()?;
    let mut n = 0.0;
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let has = |k: &str, v: &str| line.contains(&format!("{k}=\"{v}\""));
        let write = has("verb", "PUT") || has("verb", "PATCH");
        let counted = (write
            && (has("resource", "persistentvolumes") || has("resource", "persistentvolumeclaims")))
            || ((write || has("verb", "POST")) && has("resource", "events"));
        if counted {
            n += line.rsplit(' ').next()?.parse::<f64>().ok()?;
        }
    }
    Some(n)
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
    let writes0 = writes(c);
    let started = Instant::now();
    // Sizes 1..=10 Gi, each size in its own class.
    parallel(o.claims, 8, |i| {
        let gi = 1 + i % 10;
        let class = format!("{ns}-c{gi}");
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
    let writes = writes(c).zip(writes0).map(|(a, b)| a - b);
    let row = table.row(&m.name);
    table.num(row, "all Bound s", converged);
    table.num(row, "CPU s", cpu);
    table.set(
        row,
        "writes",
        writes.map_or("-".to_string(), |w| format!("{w:.0}")),
    );
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.num(row, "end RSS MB", p.rss_mb());
    p.stop();
    cleanup(c, &ns);
    println!("{}: log in {}", m.name, p.log.display());
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(floor::CHILD_FLAG) {
        return benchkit::main(|| floor::child(args.get(2).map(String::as_str).unwrap_or("")));
    }
    benchkit::main(|| {
        let o = parse_opts()?;
        let c = Cluster::from_env("bench-pv")?;
        let mut extra = vec![
            "--controllers=persistentvolume-binder-controller,\
             persistentvolumeclaim-protection-controller,persistentvolume-protection-controller"
                .to_string(),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        if let Some(q) = o.qps {
            extra.push(format!("--kube-api-qps={q}"));
            extra.push(format!("--kube-api-burst={q}"));
        }
        let mut table = Table::default();
        let mut managers = c.managers(&extra, o.skip_edgekcm)?;
        if o.floor {
            managers.push(floor::manager(&c)?);
        }
        for m in managers {
            run(&c, &m, &o, &mut table)?;
        }
        table.print(&format!(
            "{} claims bound to {} volumes",
            o.claims, o.claims
        ));
        Ok(())
    })
}
