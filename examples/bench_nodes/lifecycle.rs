//! The node lifecycle workload of `bench_nodes --lifecycle`: N nodes whose Leases the bench
//! renews (the kubelets' heartbeats) with P pods each; once the manager is ready and has
//! watched them for a while, D of them stop renewing. Measured from that moment: when all D
//! are Ready=Unknown (detection), carry the `node.kubernetes.io/unreachable` NoExecute taint,
//! and when all their pods are deleted (the pods tolerate the taint for 0 s: a real apiserver
//! would otherwise give them 300 s); then that the other nodes and their pods were left
//! alone. The manager runs `--controllers=node-lifecycle-controller,taint-eviction-controller`
//! (the evictions are the second one's since 1.29) with the grace period, monitor period and
//! eviction rate of the flags.

use super::benchkit::{parallel, Args, Cluster, Manager, Proc, Res, Table};
use edgekcm::api::client::{Client, DeleteOptions, ListOptions};
use edgekcm::api::resources::{LEASES, NAMESPACES, NODES, PODS};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

const LEASE_NS: &str = "kube-node-lease";
const PREFIX: &str = "bench-nlc-";

pub struct Opts {
    nodes: usize,
    pods: usize,
    dark: usize,
    renew: Duration,
    grace: u64,
    period: u64,
    rate: String,
    steady: Duration,
    timeout: Duration,
    skip_edgekcm: bool,
}

pub fn parse(mut a: Args) -> Res<Opts> {
    let grace = a.num("--grace", 20)?;
    let o = Opts {
        nodes: a.count("--nodes", 200)?,
        pods: a.count("--pods-per-node", 5)?,
        dark: a.count("--dark", 20)?,
        renew: a.secs("--renew", 5)?,
        grace,
        period: a.num("--period", 5)?,
        rate: format!("{}", a.num("--rate", 2)?),
        steady: a.secs("--steady", grace + 10)?,
        timeout: a.secs("--timeout", 300)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
    };
    a.done()?;
    Ok(o)
}

fn node_name(i: usize) -> String {
    format!("{PREFIX}{i:04}")
}

fn now_micro() -> String {
    edgekcm::compat::timefmt::rfc3339_micro(SystemTime::now())
}

fn setup(admin: &Client, ns: &str, o: &Opts) -> Res<()> {
    let t = Instant::now();
    let lease_ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NS}});
    let _ = admin.create(&NAMESPACES, None, &lease_ns);
    parallel(o.nodes, 8, |i| {
        let name = node_name(i);
        let n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
        let mut n = admin.create(&NODES, None, &n)?;
        let now = edgekcm::compat::timefmt::rfc3339(SystemTime::now());
        n["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastHeartbeatTime": now, "lastTransitionTime": now}]);
        admin.update_subresource(&NODES, &n, "status")?;
        let l = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": LEASE_NS},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now_micro()}});
        admin.create(&LEASES, Some(LEASE_NS), &l)?;
        Ok(())
    })?;
    let tol = json!([
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}]);
    parallel(o.nodes * o.pods, 8, |i| {
        let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p-{i:05}")},
            "spec": {"nodeName": node_name(i % o.nodes), "tolerations": tol,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}});
        let mut p = admin.create(&PODS, Some(ns), &p)?;
        p["status"]["phase"] = json!("Running");
        p["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
            "lastTransitionTime": "2024-01-01T00:00:00Z"}]);
        admin.update_subresource(&PODS, &p, "status")?;
        Ok(())
    })?;
    println!(
        "set up {} nodes with leases and {} pods in {:.1} s",
        o.nodes,
        o.nodes * o.pods,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn ready_status(n: &Value) -> &str {
    n["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
}

fn has_unreachable_no_execute(n: &Value) -> bool {
    n["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["key"] == "node.kubernetes.io/unreachable" && t["effect"] == "NoExecute")
}

fn run(c: &Cluster, m: &Manager, o: &Opts, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let ns = c.namespace("bench-nlc")?;
    setup(admin, &ns, o)?;
    let beats = super::benchkit::LeaseBeats::start(admin, o.nodes, o.renew, 4, node_name);
    let mut p = Proc::start(m, &c.work)?;
    // Ready once an unschedulable probe node has its NoSchedule taint.
    let probe = format!("{PREFIX}probe");
    let pn = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": probe},
        "spec": {"unschedulable": true}});
    admin.create(&NODES, None, &pn)?;
    p.wait_ready(Duration::from_secs(120), || {
        admin
            .get(&NODES, None, &probe)
            .map(|n| {
                n["spec"]["taints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|t| t["key"] == "node.kubernetes.io/unschedulable")
            })
            .unwrap_or(false)
    })?;
    admin.delete(&NODES, None, &probe, &DeleteOptions::default())?;
    std::thread::sleep(o.steady);
    let steady_cpu = p.cpu_seconds();

    let dark: HashSet<String> = (0..o.dark).map(node_name).collect();
    beats.dark_below.store(o.dark, Ordering::SeqCst);
    let t0 = Instant::now();
    let (mut detected, mut tainted, mut evicted) = (None, None, None);
    let pods_of_dark = o.dark * o.pods;
    while t0.elapsed() < o.timeout && evicted.is_none() && p.alive() {
        std::thread::sleep(Duration::from_millis(250));
        let at = t0.elapsed().as_secs_f64();
        if let Ok(l) = admin.list(&NODES, None, &ListOptions::default()) {
            let dn: Vec<&Value> = l
                .items
                .iter()
                .filter(|n| dark.contains(n["metadata"]["name"].as_str().unwrap_or("")))
                .collect();
            if detected.is_none()
                && dn.iter().filter(|n| ready_status(n) == "Unknown").count() == o.dark
            {
                detected = Some(at);
            }
            if tainted.is_none()
                && dn.iter().filter(|n| has_unreachable_no_execute(n)).count() == o.dark
            {
                tainted = Some(at);
            }
        }
        if tainted.is_some() {
            if let Ok(l) = admin.list(&PODS, Some(&ns), &ListOptions::default()) {
                let live = l
                    .items
                    .iter()
                    .filter(|p| dark.contains(p["spec"]["nodeName"].as_str().unwrap_or("")))
                    .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                    .count();
                if live == 0 {
                    evicted = Some(at);
                }
            }
        }
    }
    std::thread::sleep(Duration::from_secs(5));
    // The others: Ready, untainted, their pods ready and not deleted.
    let nodes = admin.list(&NODES, None, &ListOptions::default())?;
    let bad_nodes = nodes
        .items
        .iter()
        .filter(|n| {
            let name = n["metadata"]["name"].as_str().unwrap_or("");
            name.starts_with(PREFIX) && !dark.contains(name)
        })
        .filter(|n| {
            ready_status(n) != "True"
                || n["spec"]["taints"]
                    .as_array()
                    .is_some_and(|t| !t.is_empty())
        })
        .count();
    let pods = admin.list(&PODS, Some(&ns), &ListOptions::default())?;
    let others: Vec<&Value> = pods
        .items
        .iter()
        .filter(|p| !dark.contains(p["spec"]["nodeName"].as_str().unwrap_or("")))
        .collect();
    let bad_pods = others
        .iter()
        .filter(|p| !p["metadata"]["deletionTimestamp"].is_null() || ready_status(p) != "True")
        .count();
    let row = table.row(&m.name);
    table.num(row, "steady CPU s", steady_cpu);
    table.num(row, "detect s", detected);
    table.num(row, "taint s", tainted);
    table.num(row, "evict s", evicted);
    table.set(row, "dark pods", pods_of_dark);
    table.set(
        row,
        "others touched",
        format!("{bad_nodes} nodes, {bad_pods}/{} pods", others.len()),
    );
    table.num(row, "CPU s", p.cpu_seconds());
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.num(row, "end RSS MB", p.rss_mb());
    p.stop();
    drop(beats);
    c.delete_all(&PODS, Some(&ns), "");
    c.delete_all(&NODES, None, PREFIX);
    c.delete_all(&LEASES, Some(LEASE_NS), PREFIX);
    let _ = admin.delete(&NAMESPACES, None, &ns, &Default::default());
    println!("{}: log in {}", m.name, p.log.display());
    Ok(())
}

pub fn main(a: Args) -> Res<()> {
    let o = parse(a)?;
    let c = Cluster::from_env("bench-nlc")?;
    let extra = [
        "--controllers=node-lifecycle-controller,taint-eviction-controller".to_string(),
        format!("--node-monitor-grace-period={}s", o.grace),
        format!("--node-monitor-period={}s", o.period),
        format!("--node-eviction-rate={}", o.rate),
        "--leader-elect=false".to_string(),
        "--secure-port=0".to_string(),
    ];
    let mut table = Table::default();
    for m in c.managers(&extra, o.skip_edgekcm)? {
        run(&c, &m, &o, &mut table)?;
    }
    table.print(&format!(
        "{} nodes x {} pods, {} stop renewing their leases (every {} s); grace {} s, monitor period {} s, eviction rate {}/s; times from the stop",
        o.nodes,
        o.pods,
        o.dark,
        o.renew.as_secs(),
        o.grace,
        o.period,
        o.rate
    ));
    Ok(())
}
