//! The garbage collector's debug graph (`/debug/controllers/garbage-collector-controller/graph`)
//! and its metric, served by edgekcm's secure port: a ConfigMap owning another ConfigMap shows
//! as two vertices and an edge from the dependent to its owner, `?uid=` selects what is
//! connected, the path is authenticated and authorized like every other one, and a foreground
//! deletion shows in the owner's label. Against the sandbox always and against a real
//! kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`).

use crate::common::*;
use edgekcm::api::client::{Client, DeleteOptions};
use edgekcm::api::resources::{CLUSTERROLEBINDINGS, CLUSTERROLES, CONFIGMAPS};
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const GRAPH: &str = "/debug/controllers/garbage-collector-controller/graph";
const EMPTY: &str = "strict digraph full {\n}\n";

struct Answer {
    status: u16,
    content_type: String,
    nosniff: bool,
    body: String,
}

fn get(agent: &ureq::Agent, url: &str, token: Option<&str>) -> Option<Answer> {
    let mut rb = agent.get(url);
    if let Some(t) = token {
        rb = rb.header("Authorization", &format!("Bearer {t}"));
    }
    let mut r = rb.call().ok()?;
    let h = |n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let content_type = h("content-type");
    let nosniff = h("x-content-type-options") == "nosniff";
    Some(Answer {
        status: r.status().as_u16(),
        content_type,
        nosniff,
        body: r.body_mut().read_to_string().unwrap_or_default(),
    })
}

fn configmap(
    c: &Client,
    ns: &str,
    name: &str,
    owner: Option<&Value>,
    finalizers: &[&str],
) -> Value {
    let mut m = json!({"name": name});
    if let Some(o) = owner {
        m["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "name": o["metadata"]["name"], "uid": o["metadata"]["uid"],
            "blockOwnerDeletion": true}]);
    }
    if !finalizers.is_empty() {
        m["finalizers"] = json!(finalizers);
    }
    c.create(
        &CONFIGMAPS,
        Some(ns),
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": m, "data": {"k": "v"}}),
    )
    .expect("create configmap")
}

fn uid(o: &Value) -> &str {
    o["metadata"]["uid"].as_str().unwrap_or("")
}

/// The attribute block of the vertex with this UID, if drawn.
fn vertex<'a>(dot: &'a str, uid: &str) -> Option<&'a str> {
    let start = dot.find(&format!("  \"{uid}\" [\n"))?;
    let len = dot[start..].find("  ];\n")?;
    Some(&dot[start..start + len])
}

fn edge(from: &str, to: &str) -> String {
    format!("  \"{from}\" -> \"{to}\";\n")
}

/// Deletes the ClusterRole and ClusterRoleBinding of a real-cluster run, even after a failure.
struct Rbac {
    admin: Client,
    name: Option<String>,
}

impl Drop for Rbac {
    fn drop(&mut self) {
        if let Some(n) = &self.name {
            let _ = self
                .admin
                .delete(&CLUSTERROLEBINDINGS, None, n, &Default::default());
            let _ = self
                .admin
                .delete(&CLUSTERROLES, None, n, &Default::default());
        }
    }
}

/// What the scenario's ServiceAccounts may do: on the sandbox, which has no RBAC, what RBAC
/// would deny is denied; on a real cluster `debugger` gets a ClusterRole for the graph.
fn grant_debugger(t: &Target, admin: &Client, ns: &str, role: &str) {
    match t.sandbox() {
        Some(sb) => {
            sb.deny_access(&format!("system:serviceaccount:{ns}:noperm"), GRAPH);
            sb.deny_access("system:anonymous", GRAPH);
        }
        None => {
            admin
                .create(
                    &CLUSTERROLES,
                    None,
                    &json!({"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",
                        "metadata":{"name":role},
                        "rules":[{"nonResourceURLs":["/debug/controllers/*","/metrics"],
                                  "verbs":["get"]}]}),
                )
                .expect("create ClusterRole");
            admin
                .create(
                    &CLUSTERROLEBINDINGS,
                    None,
                    &json!({"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",
                        "metadata":{"name":role},
                        "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":role},
                        "subjects":[{"kind":"ServiceAccount","name":"debugger","namespace":ns}]}),
                )
                .expect("create ClusterRoleBinding");
        }
    }
}

/// Two owner/dependent pairs of ConfigMaps, not connected to each other.
struct Pairs {
    owner: Value,
    child: Value,
    other: Value,
    other_child: Value,
}

fn make_pairs(admin: &Client, ns: &str, cleanup: &mut Cleanup) -> Pairs {
    let owner = configmap(admin, ns, "owner", None, &[]);
    // Held by a finalizer of the test, so a foreground deletion of the owner waits for it.
    let child = configmap(admin, ns, "child", Some(&owner), &["example.com/hold"]);
    cleanup
        .held
        .push((CONFIGMAPS, ns.to_string(), "child".into()));
    cleanup
        .held
        .push((CONFIGMAPS, ns.to_string(), "owner".into()));
    // Another pair, not connected to the first.
    let other = configmap(admin, ns, "other-owner", None, &[]);
    let other_child = configmap(admin, ns, "other-child", Some(&other), &[]);
    Pairs {
        owner,
        child,
        other,
        other_child,
    }
}

/// edgekcm with its secure port and the collector; the port's base URL.
fn start_edgekcm(t: &Target) -> (Kcm, String) {
    let port = free_port();
    let kc = kubeconfig_arg(t);
    let extra = [
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".to_string(),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
    ];
    let mut args: Vec<&str> = extra.iter().map(String::as_str).collect();
    let named = t
        .edgekcm_args()
        .iter()
        .any(|a| a.starts_with("--controllers"));
    if !named {
        args.push("--controllers=garbage-collector-controller");
    }
    let kcm = Kcm::start(t, "gcdebug", &args);
    (kcm, format!("https://127.0.0.1:{port}"))
}

/// The owner's subgraph (`q` selects it) and what other selections and paths answer.
fn check_subgraphs(a: &ureq::Agent, base: &str, ns: &str, q: &str, debugger: &str, p: &Pairs) {
    let graph_of = |q: &str| format!("{base}{GRAPH}{q}");
    let Pairs {
        owner,
        child,
        other,
        other_child,
    } = p;
    // Both objects and the edge from the dependent to its owner, once the monitors synced
    // (RBAC for the new binding is eventually consistent on a real cluster too).
    let r = eventually(LIMIT, "the owner's subgraph", || {
        let r = get(a, &graph_of(q), Some(debugger))?;
        (r.status == 200 && r.body.contains(&edge(uid(child), uid(owner)))).then_some(r)
    });
    assert_eq!(r.content_type, "text/vnd.graphviz");
    assert!(r.nosniff);
    assert!(r
        .body
        .starts_with("strict digraph full {\n  // Node definitions.\n"));
    assert!(r.body.ends_with("}\n"));
    let o = vertex(&r.body, uid(owner)).expect("owner vertex");
    assert!(
        o.contains(&format!(
            "    label=\"uid={}\\nnamespace={ns}\\nConfigMap.v1/owner\\n\"\n",
            uid(owner)
        )),
        "{o}"
    );
    for attr in [
        "group=\"\"",
        "version=\"v1\"",
        "kind=\"ConfigMap\"",
        "name=\"owner\"",
        "missing=\"false\"",
        "beingDeleted=\"false\"",
        "deletingDependents=\"false\"",
        "virtual=\"false\"",
    ] {
        assert!(o.contains(&format!("    {attr}\n")), "{attr} in {o}");
    }
    assert!(o.contains(&format!("    namespace=\"{ns}\"\n")));
    let c = vertex(&r.body, uid(child)).expect("child vertex");
    assert!(c.contains("    name=\"child\"\n"), "{c}");
    // Exactly the two vertices and the one edge: the other pair is not connected.
    assert_eq!(r.body.matches(" [\n").count(), 2, "{}", r.body);
    assert_eq!(r.body.matches(" -> ").count(), 1, "{}", r.body);
    assert!(!r.body.contains(uid(other)));
    // Selected from the dependent: the same subgraph. Two UIDs: both pairs.
    let r = get(
        a,
        &graph_of(&format!("?uid={}", uid(child))),
        Some(debugger),
    )
    .expect("get");
    assert!(r.body.contains(&edge(uid(child), uid(owner))));
    assert_eq!(r.body.matches(" [\n").count(), 2, "{}", r.body);
    let r = get(
        a,
        &graph_of(&format!("?uid={}&uid={}", uid(child), uid(other))),
        Some(debugger),
    )
    .expect("get");
    assert!(r.body.contains(&edge(uid(other_child), uid(other))));
    assert_eq!(r.body.matches(" -> ").count(), 2, "{}", r.body);
    // The whole graph has both pairs; unknown UIDs select nothing.
    let r = get(a, &graph_of(""), Some(debugger)).expect("get");
    assert!(r.body.contains(&edge(uid(child), uid(owner))));
    assert!(r.body.contains(&edge(uid(other_child), uid(other))));
    let r = get(a, &graph_of("?uid=no-such-uid"), Some(debugger)).expect("get");
    assert_eq!((r.status, r.body.as_str()), (200, EMPTY));
    // Everything else under the handler's mount point: Go's http.Error with no message.
    let mount = GRAPH.trim_end_matches("/graph");
    for path in [
        mount.to_string(),
        format!("{mount}/"),
        format!("{GRAPH}/"),
        format!("{mount}/nodes"),
    ] {
        let r = get(a, &format!("{base}{path}"), Some(debugger)).expect("get");
        assert_eq!((r.status, r.body.as_str()), (404, "\n"), "{path}");
        assert_eq!(r.content_type, "text/plain; charset=utf-8", "{path}");
        assert!(r.nosniff, "{path}");
    }
}

/// Authentication and authorization as for every path, and the collector's counter.
fn check_access_and_metric(a: &ureq::Agent, base: &str, q: &str, debugger: &str, noperm: &str) {
    let graph_of = |q: &str| format!("{base}{GRAPH}{q}");
    // Authentication and authorization as for every path.
    let r = get(a, &graph_of(q), None).expect("get");
    assert_eq!(r.status, 403, "anonymous: {}", r.body);
    assert!(r.body.contains(&format!(
        "User \\\"system:anonymous\\\" cannot get path \\\"{GRAPH}\\\""
    )));
    let r = get(a, &graph_of(q), Some("not-a-token")).expect("get");
    assert_eq!(r.status, 401, "bad token: {}", r.body);
    let r = get(a, &graph_of(q), Some(noperm)).expect("get");
    assert_eq!(r.status, 403, "without rights: {}", r.body);

    // The collector's counter is on /metrics.
    let r = get(a, &format!("{base}/metrics"), Some(debugger)).expect("get");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r
        .body
        .contains("# TYPE garbagecollector_controller_resources_sync_error_total counter\n"));
    assert!(r
        .body
        .lines()
        .any(|l| l.starts_with("garbagecollector_controller_resources_sync_error_total ")));
}

/// A foreground deletion: the owner waits for its blocking dependent.
fn check_foreground_deletion(
    admin: &Client,
    ns: &str,
    a: &ureq::Agent,
    base: &str,
    q: &str,
    debugger: &str,
    owner: &Value,
) {
    let graph_of = |q: &str| format!("{base}{GRAPH}{q}");
    admin
        .delete(
            &CONFIGMAPS,
            Some(ns),
            "owner",
            &DeleteOptions {
                propagation_policy: Some("Foreground"),
                ..Default::default()
            },
        )
        .expect("delete owner");
    eventually(LIMIT, "the owner deleting its dependents", || {
        let r = get(a, &graph_of(q), Some(debugger))?;
        let o = vertex(&r.body, uid(owner))?;
        (o.contains("\\nbeingDeleted,deletingDependents\\n\"\n")
            && o.contains("    deletingDependents=\"true\"\n"))
        .then_some(())
    });
}

fn scenario_graph(t: &Target) {
    let admin = t.admin();
    let mut cleanup = Cleanup::new(admin.clone());
    let ns = unique("e2e-gcdebug");
    create_namespace(&admin, &ns);
    cleanup.namespaces.push(ns.clone());
    let role = format!("{ns}-gc-debugger");
    let debugger = service_account_token(&admin, &ns, "debugger");
    let noperm = service_account_token(&admin, &ns, "noperm");
    let _rbac = Rbac {
        admin: admin.clone(),
        name: t.is_real().then(|| role.clone()),
    };
    grant_debugger(t, &admin, &ns, &role);
    let pairs = make_pairs(&admin, &ns, &mut cleanup);

    let (mut kcm, base) = start_edgekcm(t);
    let a = insecure_https_agent(None);

    eventually(Duration::from_secs(30), "/healthz answers", || {
        assert!(
            kcm.exited().is_none(),
            "edgekcm exited:\n{}",
            kcm.log_text()
        );
        let r = get(&a, &format!("{base}/healthz"), None)?;
        (r.status == 200).then_some(())
    });

    let q = format!("?uid={}", uid(&pairs.owner));
    check_subgraphs(&a, &base, &ns, &q, &debugger, &pairs);
    check_access_and_metric(&a, &base, &q, &debugger, &noperm);
    check_foreground_deletion(&admin, &ns, &a, &base, &q, &debugger, &pairs.owner);
    assert!(
        kcm.exited().is_none(),
        "edgekcm exited:\n{}",
        kcm.log_text()
    );
    kcm.kill();
    // The cleanup releases the held objects and deletes the namespace, then the RBAC goes.
    drop(cleanup);
}

// Each scenario runs on the sandbox (`sandbox_scenarios::<name>`) and, with `just e2e`,
// on a real kube-apiserver (`real_scenarios::<name>`).
scenarios! {
    gc_debug_graph => scenario_graph,
}
