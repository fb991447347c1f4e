//! resourcequota-controller scenarios, against the sandbox always and a real kube-apiserver
//! with `KCM_E2E_KUBECONFIG` (`real_*`). Objects are made before their quota, or deleted
//! while it exists: a real apiserver's quota admission charges creations itself, the
//! controller computes usage and gives it back on deletions.

use crate::common::*;
use edgekcm::api::client::{Client, ListOptions, PatchType};
use edgekcm::api::resources::{
    CONFIGMAPS, PERSISTENTVOLUMECLAIMS, PODS, RESOURCECLAIMS, RESOURCEQUOTAS, SERVICES,
};
use edgekcm::api::Kind;
use serde_json::{json, Value};
use std::time::Duration;

const CONTROLLERS: &str = "--controllers=resourcequota-controller";
const LIMIT: Duration = Duration::from_secs(60);
const CLEANUP: &[Kind] = &[RESOURCEQUOTAS, PODS, SERVICES, PERSISTENTVOLUMECLAIMS];

fn pod(name: &str, requests: Value, deadline: Option<i64>) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
            "resources": {"requests": requests.clone(), "limits": requests}}]}});
    if let Some(d) = deadline {
        p["spec"]["activeDeadlineSeconds"] = json!(d);
    }
    p
}

fn create(admin: &Client, kind: &Kind, ns: &str, o: Value) -> Value {
    admin
        .create(kind, Some(ns), &o)
        .unwrap_or_else(|e| panic!("create {kind} {}: {e}", o["metadata"]["name"]))
}

fn quota(admin: &Client, ns: &str, name: &str, spec: Value) -> Value {
    create(
        admin,
        &RESOURCEQUOTAS,
        ns,
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name},
            "spec": spec}),
    )
}

/// Wait until the quota's status holds `used` (values as the apiserver writes them) for
/// every name given, and hard equal to spec.
fn wait_used(admin: &Client, ns: &str, name: &str, used: &Value) -> Value {
    let what = format!("quota {ns}/{name} with used {used}");
    let end = std::time::Instant::now() + LIMIT;
    loop {
        let q = admin
            .get(&RESOURCEQUOTAS, Some(ns), name)
            .expect("get quota");
        let s = &q["status"];
        let ok = s["hard"] == q["spec"]["hard"]
            && used
                .as_object()
                .unwrap()
                .iter()
                .all(|(k, v)| &s["used"][k] == v);
        if ok {
            return q;
        }
        if std::time::Instant::now() > end {
            panic!("timed out waiting for {what}; last status {s}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn count(admin: &Client, kind: &Kind, ns: &str) -> usize {
    admin
        .list(kind, Some(ns), &ListOptions::default())
        .expect("list")
        .items
        .len()
}

/// A quota made over existing pods, services, claims and config maps reports their usage;
/// deletions give it back.
fn scenario_usage_and_replenishment(t: &Target) {
    let ns = Ns::with_cleanup(t, "rq-usage", CLEANUP);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    create(
        admin,
        &PODS,
        n,
        pod("a", json!({"cpu": "100m", "memory": "64Mi"}), None),
    );
    create(
        admin,
        &PODS,
        n,
        pod("b", json!({"cpu": "400m", "memory": "64Mi"}), None),
    );
    create(
        admin,
        &SERVICES,
        n,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "np"},
            "spec": {"type": "NodePort", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}}),
    );
    create(
        admin,
        &PERSISTENTVOLUMECLAIMS,
        n,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                "resources": {"requests": {"storage": "1Gi"}}}}),
    );
    for i in 0..3 {
        create(
            admin,
            &CONFIGMAPS,
            n,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm{i}")}}),
        );
    }
    let _kcm = start_with(t, "rq-usage", CONTROLLERS);
    quota(
        admin,
        n,
        "q",
        json!({"hard": {"pods": "10", "requests.cpu": "2", "requests.memory": "1Gi",
            "limits.cpu": "2", "count/pods": "10", "services": "5",
            "services.nodeports": "5", "services.loadbalancers": "1",
            "persistentvolumeclaims": "5", "requests.storage": "10Gi",
            "fast.storageclass.storage.k8s.io/requests.storage": "5Gi",
            "configmaps": "10", "count/configmaps": "10", "count/deployments.apps": "5"}}),
    );
    let cms = count(admin, &CONFIGMAPS, n).to_string();
    let q = wait_used(
        admin,
        n,
        "q",
        &json!({"pods": "2", "requests.cpu": "500m", "requests.memory": "128Mi",
            "limits.cpu": "500m", "count/pods": "2", "services": "1",
            "services.nodeports": "2", "services.loadbalancers": "0",
            "persistentvolumeclaims": "1", "requests.storage": "1Gi",
            "fast.storageclass.storage.k8s.io/requests.storage": "1Gi",
            "configmaps": cms, "count/configmaps": cms, "count/deployments.apps": "0"}),
    );
    assert_eq!(
        q["status"]["used"].as_object().unwrap().len(),
        q["spec"]["hard"].as_object().unwrap().len(),
        "{}",
        q["status"]
    );
    // Deletions are given back.
    delete_pod_now(admin, n, "b").expect("delete pod");
    admin
        .delete(&CONFIGMAPS, Some(n), "cm0", &Default::default())
        .expect("delete config map");
    admin
        .delete(&SERVICES, Some(n), "np", &Default::default())
        .expect("delete service");
    let cms = count(admin, &CONFIGMAPS, n).to_string();
    wait_used(
        admin,
        n,
        "q",
        &json!({"pods": "1", "requests.cpu": "100m", "requests.memory": "64Mi",
            "count/pods": "1", "services": "0", "services.nodeports": "0",
            "configmaps": cms, "count/configmaps": cms}),
    );
}

/// Changing the hard limits updates `status.hard` and reports the new names' usage.
fn scenario_hard_change(t: &Target) {
    let ns = Ns::with_cleanup(t, "rq-hard", CLEANUP);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    create(
        admin,
        &PODS,
        n,
        pod("a", json!({"cpu": "250m", "memory": "1Gi"}), None),
    );
    let _kcm = start_with(t, "rq-hard", CONTROLLERS);
    quota(admin, n, "q", json!({"hard": {"pods": "3"}}));
    wait_used(admin, n, "q", &json!({"pods": "1"}));
    admin
        .patch(
            &RESOURCEQUOTAS,
            Some(n),
            "q",
            PatchType::Merge,
            &json!({"spec": {"hard": {"pods": "4", "limits.memory": "4Gi"}}}),
            None,
        )
        .expect("patch quota");
    let q = wait_used(admin, n, "q", &json!({"pods": "1", "limits.memory": "1Gi"}));
    assert_eq!(q["status"]["hard"]["pods"], "4");
}

/// Scoped quotas count only the pods in their scope.
fn scenario_scopes(t: &Target) {
    let ns = Ns::with_cleanup(t, "rq-scopes", CLEANUP);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    create(admin, &PODS, n, pod("be", json!({}), None));
    create(admin, &PODS, n, pod("be-term", json!({}), Some(600)));
    create(admin, &PODS, n, pod("burst", json!({"cpu": "100m"}), None));
    let _kcm = start_with(t, "rq-scopes", CONTROLLERS);
    quota(
        admin,
        n,
        "best",
        json!({"hard": {"pods": "10"}, "scopes": ["BestEffort"]}),
    );
    quota(
        admin,
        n,
        "not-best",
        json!({"hard": {"pods": "10", "requests.cpu": "1"}, "scopes": ["NotBestEffort"]}),
    );
    quota(
        admin,
        n,
        "term",
        json!({"hard": {"pods": "10"}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "Terminating", "operator": "Exists"}]}}),
    );
    quota(
        admin,
        n,
        "not-term",
        json!({"hard": {"pods": "10"}, "scopes": ["NotTerminating"]}),
    );
    wait_used(admin, n, "best", &json!({"pods": "2"}));
    wait_used(
        admin,
        n,
        "not-best",
        &json!({"pods": "1", "requests.cpu": "100m"}),
    );
    wait_used(admin, n, "term", &json!({"pods": "1"}));
    wait_used(admin, n, "not-term", &json!({"pods": "2"}));
    delete_pod_now(admin, n, "be").expect("delete pod");
    wait_used(admin, n, "best", &json!({"pods": "1"}));
    wait_used(admin, n, "not-term", &json!({"pods": "1"}));
}

/// A quota whose status is right is not written again.
fn scenario_no_needless_writes(t: &Target) {
    let ns = Ns::with_cleanup(t, "rq-quiet", CLEANUP);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    create(admin, &PODS, n, pod("a", json!({"cpu": "1"}), None));
    let _kcm = start_with(t, "rq-quiet", CONTROLLERS);
    quota(
        admin,
        n,
        "q",
        json!({"hard": {"pods": "5", "requests.cpu": "4"}}),
    );
    let q = wait_used(admin, n, "q", &json!({"pods": "1", "requests.cpu": "1"}));
    std::thread::sleep(Duration::from_secs(2));
    let again = admin.get(&RESOURCEQUOTAS, Some(n), "q").expect("get quota");
    assert_eq!(
        again["metadata"]["resourceVersion"], q["metadata"]["resourceVersion"],
        "written again: {}",
        again["status"]
    );
}

/// A deletion while the apiserver is away is given back once it is back.
fn scenario_apiserver_restart(t: &Target) {
    let ns = Ns::with_cleanup(t, "rq-restart", CLEANUP);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    for i in 0..3 {
        create(
            admin,
            &PODS,
            n,
            pod(&format!("p{i}"), json!({"cpu": "100m"}), None),
        );
    }
    let _kcm = start_with(t, "rq-restart", CONTROLLERS);
    quota(
        admin,
        n,
        "q",
        json!({"hard": {"pods": "5", "requests.cpu": "4"}}),
    );
    wait_used(admin, n, "q", &json!({"pods": "3", "requests.cpu": "300m"}));
    match t.sandbox() {
        Some(sb) => {
            sb.stop_listening();
            std::thread::sleep(Duration::from_millis(300));
            sb.faults().expire_history();
            sb.resume_listening();
            delete_pod_now(admin, n, "p0").expect("delete pod");
        }
        None => {
            let restart = std::env::var("KCM_E2E_APISERVER_RESTART")
                .expect("the restart scenario needs KCM_E2E_APISERVER_RESTART");
            delete_pod_now(admin, n, "p0").expect("delete pod");
            let st = std::process::Command::new("sh")
                .args(["-c", &restart])
                .status()
                .expect("restart command");
            assert!(st.success(), "restart command failed: {st}");
        }
    }
    let admin = t.admin();
    wait_used(
        &admin,
        n,
        "q",
        &json!({"pods": "2", "requests.cpu": "200m"}),
    );
    delete_pod_now(&admin, n, "p1").expect("delete pod");
    wait_used(
        &admin,
        n,
        "q",
        &json!({"pods": "1", "requests.cpu": "100m"}),
    );
}

/// What v1.29-v1.37 added to the evaluators: pod-level `spec.resources` (beta in v1.34)
/// replace the containers' sums and make a pod not BestEffort; claims match the
/// `VolumeAttributesClass` scope (GA in v1.34) by the class they ask for.
fn scenario_v137_evaluators(t: &Target) {
    let ns = Ns::with_cleanup(t, "rq-v137", CLEANUP);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut p = pod("pod-level", json!({"cpu": "100m"}), None);
    p["spec"]["resources"] = json!({"requests": {"cpu": "1", "memory": "64Mi"},
        "limits": {"cpu": "2", "memory": "64Mi"}});
    create(admin, &PODS, n, p);
    let claim = |name: &str, vac: Option<&str>| {
        let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}});
        if let Some(v) = vac {
            c["spec"]["volumeAttributesClassName"] = json!(v);
        }
        create(admin, &PERSISTENTVOLUMECLAIMS, n, c);
    };
    claim("gold", Some("gold"));
    claim("silver", Some("silver"));
    claim("plain", None);
    let _kcm = start_with(t, "rq-v137", CONTROLLERS);
    quota(
        admin,
        n,
        "compute",
        json!({"hard": {"pods": "10", "requests.cpu": "4", "limits.cpu": "4",
            "requests.memory": "1Gi"}, "scopes": ["NotBestEffort"]}),
    );
    quota(
        admin,
        n,
        "gold",
        json!({"hard": {"persistentvolumeclaims": "10", "requests.storage": "10Gi"},
            "scopeSelector": {"matchExpressions": [{"scopeName": "VolumeAttributesClass",
                "operator": "In", "values": ["gold"]}]}}),
    );
    quota(
        admin,
        n,
        "no-class",
        json!({"hard": {"persistentvolumeclaims": "10"},
            "scopeSelector": {"matchExpressions": [{"scopeName": "VolumeAttributesClass",
                "operator": "DoesNotExist"}]}}),
    );
    wait_used(
        admin,
        n,
        "compute",
        &json!({"pods": "1", "requests.cpu": "1", "limits.cpu": "2", "requests.memory": "64Mi"}),
    );
    wait_used(
        admin,
        n,
        "gold",
        &json!({"persistentvolumeclaims": "1", "requests.storage": "1Gi"}),
    );
    wait_used(
        admin,
        n,
        "no-class",
        &json!({"persistentvolumeclaims": "1"}),
    );
}

/// Upstream's "should create a ResourceQuota and capture the life of a ResourceClaim", and
/// a prioritized list: DRA's claims are counted, with the devices they ask for per class.
fn scenario_resource_claims(t: &Target) {
    let ns = Ns::with_cleanup(t, "rq-dra", &[RESOURCEQUOTAS, RESOURCECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    // A real apiserver's quota admission charges a creation; the sandbox has none, so there
    // a short resync period finds it.
    let resync: &[&str] = if t.is_real() {
        &[CONTROLLERS]
    } else {
        &[CONTROLLERS, "--resource-quota-sync-period=1s"]
    };
    let _kcm = Kcm::start(t, "rq-dra", resync);
    let (count, gold, silver) = (
        "count/resourceclaims.resource.k8s.io",
        "gold.deviceclass.resource.k8s.io/devices",
        "silver.deviceclass.resource.k8s.io/devices",
    );
    quota(
        admin,
        n,
        "test-quota",
        json!({"hard": {"resourcequotas": "1", count: "1", gold: "1"}}),
    );
    wait_used(
        admin,
        n,
        "test-quota",
        &json!({"resourcequotas": "1", count: "0", gold: "0"}),
    );
    let claim = |name: &str, requests: Value| {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name}, "spec": {"devices": {"requests": requests}}})
    };
    create(
        admin,
        &RESOURCECLAIMS,
        n,
        claim(
            "test-claim",
            json!([{"name": "req-0", "exactly": {"deviceClassName": "gold"}}]),
        ),
    );
    wait_used(admin, n, "test-quota", &json!({count: "1", gold: "1"}));
    admin
        .delete(&RESOURCECLAIMS, Some(n), "test-claim", &Default::default())
        .expect("delete claim");
    wait_used(admin, n, "test-quota", &json!({count: "0", gold: "0"}));
    // A prioritized list counts the largest subrequest of each class. (Quota admission may
    // still hold the deleted quota for a moment: the create is tried until it is let in.)
    admin
        .delete(&RESOURCEQUOTAS, Some(n), "test-quota", &Default::default())
        .expect("delete quota");
    let choice = claim(
        "choice",
        json!([{"name": "req-0", "firstAvailable": [
            {"name": "one", "deviceClassName": "gold", "count": 1},
            {"name": "three", "deviceClassName": "gold", "count": 3},
            {"name": "all", "deviceClassName": "silver", "allocationMode": "All"}]}]),
    );
    eventually(LIMIT, "claim admitted", || {
        admin.create(&RESOURCECLAIMS, Some(n), &choice).ok()
    });
    quota(
        admin,
        n,
        "wide",
        json!({"hard": {count: "5", gold: "50", silver: "50"}}),
    );
    wait_used(
        admin,
        n,
        "wide",
        &json!({count: "1", gold: "3", silver: "32"}),
    );
}

scenarios! {
    resource_claims => scenario_resource_claims,
    v137_evaluators => scenario_v137_evaluators,
    usage_and_replenishment => scenario_usage_and_replenishment,
    hard_change => scenario_hard_change,
    scopes => scenario_scopes,
    no_needless_writes => scenario_no_needless_writes,
    apiserver_restart => scenario_apiserver_restart,
}
