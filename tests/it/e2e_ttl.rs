//! ttl-controller scenarios, against the sandbox always and a real kube-apiserver with
//! `KCM_E2E_KUBECONFIG` (`real_*`; with `--use-service-account-credentials=true`). Nodes are
//! made by the tests; the TTL follows the number of nodes in the whole cluster, so a scenario
//! counts the nodes already there and adds what it needs.

use crate::common::nodes::*;
use crate::common::*;
use edgekcm::api::client::{Client, ListOptions, PatchType};
use edgekcm::api::resources::NODES;
use serde_json::{json, Value};
use std::time::Duration;

const CONTROLLERS: &str = "--controllers=ttl-controller";
const TTL: &str = "node.alpha.kubernetes.io/ttl";
const LIMIT: Duration = Duration::from_secs(30);

fn nodes_now(admin: &Client) -> Vec<Value> {
    admin
        .list(&NODES, None, &ListOptions::default())
        .expect("list nodes")
        .items
}

fn ttl_of(admin: &Client, name: &str) -> Option<String> {
    let n = admin.get(&NODES, None, name).expect("get node");
    n["metadata"]["annotations"][TTL]
        .as_str()
        .map(str::to_string)
}

fn wait_ttl(admin: &Client, name: &str, want: &str) -> Value {
    eventually(LIMIT, &format!("node {name} with ttl {want}"), || {
        let n = admin.get(&NODES, None, name).expect("get node");
        (n["metadata"]["annotations"][TTL] == want).then_some(n)
    })
}

/// A change that is not the annotation, as a kubelet's status update would bring.
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

/// A small cluster: every node gets 0, whatever it had; a node at 0 already is not written.
fn scenario_small_cluster_gets_zero(t: &Target) {
    let admin = t.admin();
    let before = nodes_now(&admin).len();
    assert!(
        before + 4 <= 90,
        "{before} nodes already: not a small cluster"
    );
    let mut nodes = Nodes::new(admin.clone());
    let names: Vec<String> = ["none", "fifteen", "word", "zero"]
        .iter()
        .map(|s| unique(&format!("ttl-{s}")))
        .collect();
    nodes.create(&names[0], None, json!([]), json!({"keep": "me"}));
    nodes.create(&names[1], None, json!([]), json!({TTL: "15"}));
    nodes.create(&names[2], None, json!([]), json!({TTL: "fifteen"}));
    let zero = nodes.create(&names[3], None, json!([]), json!({TTL: "0"}));
    let _kcm = start_with(t, "ttl-small", CONTROLLERS);
    for n in &names[..3] {
        wait_ttl(&admin, n, "0");
    }
    let n0 = admin.get(&NODES, None, &names[0]).expect("node");
    assert_eq!(n0["metadata"]["annotations"]["keep"], "me");
    // Already right: not patched.
    std::thread::sleep(Duration::from_secs(1));
    let z = admin.get(&NODES, None, &names[3]).expect("node");
    assert_eq!(
        z["metadata"]["resourceVersion"],
        zero["metadata"]["resourceVersion"]
    );
    // A node that loses its annotation gets it back.
    admin
        .patch(
            &NODES,
            None,
            &names[3],
            PatchType::Merge,
            &json!({"metadata": {"annotations": {TTL: null}}}),
            None,
        )
        .expect("remove annotation");
    wait_ttl(&admin, &names[3], "0");
}

/// Past 100 nodes the TTL is 15 s: the node that crosses gets it at once, the others when they
/// next change; back under 90 nodes it is 0 again.
fn scenario_steps_with_cluster_size(t: &Target) {
    let admin = t.admin();
    let before = nodes_now(&admin).len();
    assert!(before <= 87, "{before} nodes already");
    let mut nodes = Nodes::new(admin.clone());
    let prefix = unique("ttl-size");
    let name = |i: usize| format!("{prefix}-{i:03}");
    for i in 0..100 - before {
        nodes.create(&name(i), None, json!([]), json!({}));
    }
    let _kcm = start_with(t, "ttl-size", CONTROLLERS);
    for i in 0..100 - before {
        wait_ttl(&admin, &name(i), "0");
    }
    // Node 101.
    let last = 100 - before;
    nodes.create(&name(last), None, json!([]), json!({}));
    wait_ttl(&admin, &name(last), "15");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        ttl_of(&admin, &name(0)).as_deref(),
        Some("0"),
        "not yet changed"
    );
    touch(&admin, &name(0), "a");
    wait_ttl(&admin, &name(0), "15");
    // 101 -> 90 nodes: still 15 (hysteresis); 89: 0.
    for i in 1..12 {
        nodes.delete(&name(i));
    }
    assert_eq!(nodes_now(&admin).len(), 90);
    touch(&admin, &name(0), "b");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(ttl_of(&admin, &name(0)).as_deref(), Some("15"));
    nodes.delete(&name(12));
    touch(&admin, &name(0), "c");
    wait_ttl(&admin, &name(0), "0");
}

scenarios! {
    small_cluster_gets_zero => scenario_small_cluster_gets_zero,
    steps_with_cluster_size => scenario_steps_with_cluster_size,
}
