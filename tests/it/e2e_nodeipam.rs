//! node-ipam-controller scenarios, against the sandbox always and a real kube-apiserver with
//! `KCM_E2E_KUBECONFIG` (`real_*`; with `--use-service-account-credentials=true`). Nodes are
//! made by the tests; each scenario has a cluster CIDR of its own and expects no node without
//! a pod CIDR before it starts (such a node would take a CIDR first).

use crate::common::nodes::*;
use crate::common::*;
use edgekcm::api::client::{Client, ListOptions, PatchType};
use edgekcm::api::resources::{EVENTS, NODES};
use serde_json::{json, Value};
use std::time::Duration;

const CONTROLLERS: &str = "--controllers=node-ipam-controller";
const LIMIT: Duration = Duration::from_secs(30);

fn start(t: &Target, tag: &str, flags: &[&str]) -> Kcm {
    let mut extra = vec![CONTROLLERS, "--allocate-node-cidrs=true"];
    extra.extend_from_slice(flags);
    Kcm::start(t, tag, &extra)
}

/// No node without CIDRs is there to take CIDRs before the scenario's nodes.
fn assert_no_node_waits(admin: &Client) {
    let waiting: Vec<String> = admin
        .list(&NODES, None, &ListOptions::default())
        .expect("list nodes")
        .items
        .iter()
        .filter(|n| {
            n["spec"]["podCIDRs"]
                .as_array()
                .is_none_or(|a| a.is_empty())
        })
        .map(|n| n["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        waiting.is_empty(),
        "nodes without CIDRs already: {waiting:?}"
    );
}

/// A node, with these CIDRs set by the test (none: for the controller to set).
fn create(nodes: &mut Nodes, name: &str, cidrs: &[&str]) -> Value {
    let mut n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
    if !cidrs.is_empty() {
        n["spec"] = json!({"podCIDR": cidrs[0], "podCIDRs": cidrs});
    }
    let n = nodes.admin.create(&NODES, None, &n).expect("create node");
    nodes.names.push(name.to_string());
    n
}

fn cidrs_of(admin: &Client, name: &str) -> Vec<String> {
    let n = admin.get(&NODES, None, name).expect("get node");
    n["spec"]["podCIDRs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn wait_cidrs(admin: &Client, name: &str) -> Vec<String> {
    eventually(LIMIT, &format!("node {name} with pod CIDRs"), || {
        let c = cidrs_of(admin, name);
        (!c.is_empty()).then_some(c)
    })
}

/// The Events about node `name` with `reason` (in `default`, where a node's Events go).
fn events(admin: &Client, name: &str, reason: &str) -> Vec<Value> {
    admin
        .list(&EVENTS, Some("default"), &ListOptions::default())
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == reason)
        .collect()
}

/// A change a kubelet's status update would bring.
fn touch(admin: &Client, name: &str, v: &str) {
    admin
        .patch(
            &NODES,
            None,
            name,
            PatchType::Merge,
            &json!({"metadata": {"labels": {"e2e-touch": v}}}),
            None,
        )
        .expect("label node");
}

/// The next free CIDR after the last, the service range and an existing node's CIDR
/// skipped; none left: `CIDRNotAvailable`; a deleted node's CIDR goes to the next.
fn scenario_allocation_exhaustion_and_reuse(t: &Target) {
    let admin = t.admin();
    assert_no_node_waits(&admin);
    let mut nodes = Nodes::new(admin.clone());
    let p = unique("ipam");
    let name = |s: &str| format!("{p}-{s}");
    create(&mut nodes, &name("pre"), &["10.250.0.0/24"]);
    let mut kcm = start(
        t,
        "ipam-alloc",
        &[
            "--cluster-cidr=10.250.0.0/22",
            "--service-cluster-ip-range=10.250.1.0/24",
        ],
    );
    create(&mut nodes, &name("a"), &[]);
    assert_eq!(wait_cidrs(&admin, &name("a")), ["10.250.2.0/24"]);
    create(&mut nodes, &name("b"), &[]);
    assert_eq!(wait_cidrs(&admin, &name("b")), ["10.250.3.0/24"]);
    let b = admin.get(&NODES, None, &name("b")).expect("node b");
    assert_eq!(b["spec"]["podCIDR"], "10.250.3.0/24");

    create(&mut nodes, &name("c"), &[]);
    let ev = eventually(LIMIT, "CIDRNotAvailable", || {
        events(&admin, &name("c"), "CIDRNotAvailable").pop()
    });
    let c = admin.get(&NODES, None, &name("c")).expect("node c");
    assert_eq!(ev["type"], "Normal");
    assert_eq!(
        ev["message"],
        format!("Node {} status is now: CIDRNotAvailable", name("c"))
    );
    assert_eq!(ev["source"]["component"], "cidrAllocator");
    assert_eq!(ev["involvedObject"]["kind"], "Node");
    assert_eq!(ev["involvedObject"]["apiVersion"], "v1");
    assert_eq!(ev["involvedObject"]["uid"], c["metadata"]["uid"]);
    assert!(cidrs_of(&admin, &name("c")).is_empty());
    // No condition is written (the range allocator writes none).
    assert!(c["status"]["conditions"]
        .as_array()
        .is_none_or(|a| a.iter().all(|x| x["type"] != "NetworkUnavailable")));

    nodes.delete(&name("a"));
    std::thread::sleep(Duration::from_millis(500));
    // Tried again at the node's next change.
    touch(&admin, &name("c"), "1");
    assert_eq!(wait_cidrs(&admin, &name("c")), ["10.250.2.0/24"]);
    assert!(kcm.exited().is_none(), "{}", kcm.log_text());
}

/// Two cluster CIDRs: one CIDR of each, in the flag's order, `podCIDR` the first.
fn scenario_dual_stack(t: &Target) {
    let admin = t.admin();
    assert_no_node_waits(&admin);
    let mut nodes = Nodes::new(admin.clone());
    let p = unique("ipam-ds");
    let _kcm = start(
        t,
        "ipam-ds",
        &[
            "--cluster-cidr=fd00:251::/48,10.251.0.0/16",
            "--node-cidr-mask-size-ipv4=26",
        ],
    );
    create(&mut nodes, &format!("{p}-a"), &[]);
    create(&mut nodes, &format!("{p}-b"), &[]);
    assert_eq!(
        wait_cidrs(&admin, &format!("{p}-a")),
        ["fd00:251::/64", "10.251.0.0/26"]
    );
    assert_eq!(
        wait_cidrs(&admin, &format!("{p}-b")),
        ["fd00:251:0:1::/64", "10.251.0.64/26"]
    );
    let a = admin.get(&NODES, None, &format!("{p}-a")).expect("node");
    assert_eq!(a["spec"]["podCIDR"], "fd00:251::/64");
}

/// edgekcm stopped and started again: the CIDRs nodes have are taken before any new one is
/// handed out; a CIDR freed while it was down is handed out again.
fn scenario_recovery_across_restart(t: &Target) {
    let admin = t.admin();
    assert_no_node_waits(&admin);
    let mut nodes = Nodes::new(admin.clone());
    let p = unique("ipam-rs");
    let name = |i: u32| format!("{p}-{i}");
    let flags = ["--cluster-cidr=10.252.0.0/16"];
    let mut kcm = start(t, "ipam-rs-1", &flags);
    for i in 0..3 {
        create(&mut nodes, &name(i), &[]);
    }
    for i in 0..3 {
        assert_eq!(wait_cidrs(&admin, &name(i)), [format!("10.252.{i}.0/24")]);
    }
    kcm.kill();
    // While it is down: node 0 goes, nodes 3 and 4 come.
    nodes.delete(&name(0));
    create(&mut nodes, &name(3), &[]);
    create(&mut nodes, &name(4), &[]);
    let mut kcm = start(t, "ipam-rs-2", &flags);
    // In the order of the first list (by name), from the start again: the free 0, then the
    // next free after it, 3.
    assert_eq!(wait_cidrs(&admin, &name(3)), ["10.252.0.0/24"]);
    assert_eq!(wait_cidrs(&admin, &name(4)), ["10.252.3.0/24"]);
    create(&mut nodes, &name(5), &[]);
    assert_eq!(wait_cidrs(&admin, &name(5)), ["10.252.4.0/24"]);
    // Never two nodes with one CIDR.
    let mut all: Vec<String> = (1..6).flat_map(|i| cidrs_of(&admin, &name(i))).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 5, "{all:?}");
    assert!(kcm.exited().is_none(), "{}", kcm.log_text());
}

/// A configuration upstream refuses stops the process with upstream's message.
fn scenario_invalid_configuration_refused(t: &Target) {
    for (flags, text) in [
        (
            vec!["--cluster-cidr=10.253.0.0/16", "--node-cidr-mask-size=8"],
            "mask size of cluster CIDR must be less than or equal to --node-cidr-mask-size",
        ),
        (
            vec!["--cluster-cidr=10.253.0.0/16,10.254.0.0/16"],
            "not configured as dual stack",
        ),
        (
            vec![
                "--cluster-cidr=10.253.0.0/16,fd00::/48",
                "--node-cidr-mask-size=24",
            ],
            "usage of --node-cidr-mask-size is not allowed with dual-stack clusters",
        ),
    ] {
        let mut kcm = start(t, "ipam-bad", &flags);
        let status = eventually(LIMIT, "edgekcm to exit", || kcm.exited());
        assert!(!status.success());
        assert!(kcm.log_text().contains(text), "{}", kcm.log_text());
    }
}

/// The watch broken and its history gone (sandbox: a 410 re-list, and node patches failing
/// twice; real: kube-apiserver restarted with `KCM_E2E_APISERVER_RESTART` when set): nothing
/// is lost, and no CIDR is handed out twice.
fn scenario_survives_relist_and_failures(t: &Target) {
    let admin = t.admin();
    assert_no_node_waits(&admin);
    let mut nodes = Nodes::new(admin.clone());
    let p = unique("ipam-rl");
    let name = |i: u32| format!("{p}-{i}");
    let mut kcm = start(t, "ipam-rl", &["--cluster-cidr=10.249.0.0/16"]);
    create(&mut nodes, &name(0), &[]);
    create(&mut nodes, &name(1), &[]);
    assert_eq!(wait_cidrs(&admin, &name(0)), ["10.249.0.0/24"]);
    assert_eq!(wait_cidrs(&admin, &name(1)), ["10.249.1.0/24"]);
    if let Some(sb) = t.sandbox() {
        sb.faults().expire_history();
        sb.faults().drop_watches();
    } else if let Ok(cmd) = std::env::var("KCM_E2E_APISERVER_RESTART") {
        let ok = std::process::Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .status();
        assert!(matches!(ok, Ok(s) if s.success()), "{cmd} failed");
        eventually(Duration::from_secs(60), "apiserver back", || {
            admin.get_raw("/readyz").ok()
        });
    }
    nodes.delete(&name(0));
    if let Some(sb) = t.sandbox() {
        // The next patches of nodes (creates go to /nodes) fail.
        sb.faults().fail_next(2, 500, Some("/nodes/"));
    }
    for i in 2..5 {
        create(&mut nodes, &name(i), &[]);
    }
    let mut all: Vec<String> = (1..5).flat_map(|i| wait_cidrs(&admin, &name(i))).collect();
    assert_eq!(all[0], "10.249.1.0/24");
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(kcm.exited().is_none(), "{}", kcm.log_text());
}

scenarios! {
    allocation_exhaustion_and_reuse => scenario_allocation_exhaustion_and_reuse,
    dual_stack => scenario_dual_stack,
    recovery_across_restart => scenario_recovery_across_restart,
    invalid_configuration_refused => scenario_invalid_configuration_refused,
    survives_relist_and_failures => scenario_survives_relist_and_failures,
}
