//! node-ipam-controller under load: a controller manager runs `nodeipam` with
//! `--allocate-node-cidrs --cluster-cidr=10.244.0.0/16`; once it has given a probe node its
//! CIDR (started and synced), N nodes are created at once. Prints the wall time from the first
//! create until every node has `spec.podCIDRs`, the CPU seconds of that (and of the whole
//! run), the peak and final RSS, and whether the CIDRs are distinct and the same set as the
//! other manager's. A benchmark, not a test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_node_ipam
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig KCM_BENCH_UPSTREAM="kube-controller-manager ..." \
//!         cargo run --release --example bench_node_ipam -- --nodes=200
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`); `KCM_BENCH_UPSTREAM` runs after
//! edgekcm on a fresh copy of the workload.
//!
//! Flags: `--nodes=N` (200), `--idle=SECONDS` (10), `--timeout=SECONDS` (120),
//! `--skip-edgekcm`. No other node without a pod CIDR should be in the cluster.

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{parallel, Args, Cluster, Proc, Res, Table};
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::NODES;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const PREFIX: &str = "bench-ipam-";

struct Opts {
    nodes: usize,
    idle: Duration,
    timeout: Duration,
    skip_edgekcm: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut a = Args::parse();
    let o = Opts {
        nodes: a.count("--nodes", 200)?,
        idle: a.secs("--idle", 10)?,
        timeout: a.secs("--timeout", 120)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
    };
    a.done()?;
    Ok(o)
}

fn create_node(admin: &Client, name: &str) -> Res<()> {
    let n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
    admin.create(&NODES, None, &n)?;
    Ok(())
}

/// The first pod CIDR of every bench node that has one.
fn cidrs(admin: &Client) -> Vec<(String, String)> {
    admin
        .list(&NODES, None, &ListOptions::default())
        .map(|l| {
            l.items
                .iter()
                .filter_map(|n| {
                    let name = n["metadata"]["name"].as_str()?;
                    let c = n["spec"]["podCIDRs"][0].as_str()?;
                    name.starts_with(PREFIX)
                        .then(|| (name.to_string(), c.to_string()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Run one controller manager: probe, then the burst. Returns the CIDRs it gave the burst.
fn run(c: &Cluster, m: &benchkit::Manager, o: &Opts, table: &mut Table) -> Res<BTreeSet<String>> {
    let admin = &c.admin;
    let mut p = Proc::start(m, &c.work)?;
    let probe = format!("{PREFIX}probe");
    create_node(admin, &probe)?;
    let ready = p.wait_ready(o.timeout, || cidrs(admin).iter().any(|(n, _)| *n == probe));
    let row = table.row(&m.name);
    if let Err(e) = ready {
        println!("{}: {e}", m.name);
        p.stop();
        c.delete_all(&NODES, None, PREFIX);
        return Ok(BTreeSet::new());
    }
    let cpu0 = p.cpu_seconds();
    let started = Instant::now();
    parallel(o.nodes, 16, |i| {
        create_node(admin, &format!("{PREFIX}{i:04}"))
    })?;
    let created = started.elapsed().as_secs_f64();
    let mut done = None;
    let mut got = Vec::new();
    while started.elapsed() < o.timeout && p.alive() {
        got = cidrs(admin);
        if got.len() > o.nodes {
            done = Some(started.elapsed().as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let cpu1 = p.cpu_seconds();
    std::thread::sleep(o.idle);
    let burst: BTreeSet<String> = got
        .iter()
        .filter(|(n, _)| *n != probe)
        .map(|(_, c)| c.clone())
        .collect();
    table.num(row, "creates s", Some(created));
    table.num(row, "all CIDRs s", done);
    table.num(row, "burst CPU s", cpu1.zip(cpu0).map(|(a, b)| a - b));
    table.num(row, "total CPU s", p.cpu_seconds());
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.num(row, "end RSS MB", p.rss_mb());
    table.set(row, "distinct CIDRs", burst.len());
    let mut listing: Vec<String> = got.iter().map(|(n, c)| format!("{n} {c}")).collect();
    listing.sort();
    std::fs::write(
        std::env::temp_dir().join(format!("bench-node-ipam-{}.txt", m.name)),
        listing.join("\n"),
    )?;
    p.stop();
    let _ = std::fs::copy(
        &p.log,
        std::env::temp_dir().join(format!("bench-node-ipam-{}.log", m.name)),
    );
    c.delete_all(&NODES, None, PREFIX);
    // Wait for the deletions, so the next manager starts on an empty range.
    benchkit::wait_until(Duration::from_secs(60), || cidrs(admin).is_empty());
    println!("{}: log in {}", m.name, p.log.display());
    Ok(burst)
}

fn main() {
    benchkit::main(|| {
        let o = parse_opts()?;
        let c = Cluster::from_env("bench-node-ipam")?;
        let extra = [
            "--controllers=nodeipam".to_string(),
            "--allocate-node-cidrs=true".to_string(),
            "--cluster-cidr=10.244.0.0/16".to_string(),
            "--service-cluster-ip-range=10.0.0.0/16".to_string(),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        let mut table = Table::default();
        let mut sets = Vec::new();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            sets.push(run(&c, &m, &o, &mut table)?);
        }
        table.print(&format!(
            "{} new nodes at once, --cluster-cidr=10.244.0.0/16, idle {} s",
            o.nodes,
            o.idle.as_secs()
        ));
        if sets.len() == 2 {
            let only: Vec<_> = sets[0].symmetric_difference(&sets[1]).take(6).collect();
            println!(
                "same CIDR set from both managers: {}",
                if only.is_empty() {
                    "yes".to_string()
                } else {
                    format!("no, e.g. {only:?}")
                }
            );
        }
        Ok(())
    })
}
