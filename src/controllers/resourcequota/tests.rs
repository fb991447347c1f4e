use super::usage::{pod_matches_scope, Evaluator, ScopeReq};
use super::*;
use crate::api::resources::{CONFIGMAPS, DEPLOYMENTS, SECRETS};
use crate::controllers::testing::cx_with;
use serde_json::json;

fn pod(name: &str, cpu: &str, mem: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "resources": {
            "requests": {"cpu": cpu, "memory": mem},
            "limits": {"cpu": cpu, "memory": mem}}}]},
        "status": {"phase": "Running"}})
}

fn quota(hard: Value) -> Value {
    json!({"metadata": {"name": "q", "namespace": "ns", "resourceVersion": "1"},
        "spec": {"hard": hard}})
}

fn evaluators(extra: &[Kind]) -> Vec<Evaluator> {
    let mut k: BTreeSet<Kind> = extra.iter().copied().collect();
    k.extend([PODS, SERVICES, PERSISTENTVOLUMECLAIMS]);
    k.into_iter().map(Evaluator::for_kind).collect()
}

fn status_of(objects: &[(Kind, Value)], q: &Value, extra: &[Kind]) -> Option<Value> {
    let (cache, _) = cx_with(objects);
    desired_status(
        &cache,
        q,
        &evaluators(extra),
        SystemTime::now(),
        &podmemo::PodMemo::default(),
    )
}

#[test]
fn pods_requests_and_limits_are_summed() {
    let q = quota(
        json!({"pods": "10", "requests.cpu": "2", "requests.memory": "1Gi",
        "limits.cpu": "4", "cpu": "2", "memory": "1Gi", "count/pods": "10"}),
    );
    let objs = [
        (PODS, pod("a", "100m", "64Mi")),
        (PODS, pod("b", "400m", "64Mi")),
    ];
    let s = status_of(&objs, &q, &[]).expect("a status write");
    assert_eq!(s["hard"], q["spec"]["hard"]);
    assert_eq!(
        s["used"],
        json!({"pods": "2", "requests.cpu": "500m", "requests.memory": "128Mi",
            "limits.cpu": "500m", "cpu": "500m", "memory": "128Mi", "count/pods": "2"})
    );
}

#[test]
fn finished_and_expired_pods_only_count_as_objects() {
    let mut done = pod("done", "1", "1Gi");
    done["status"]["phase"] = json!("Succeeded");
    let mut gone = pod("gone", "1", "1Gi");
    gone["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
    gone["metadata"]["deletionGracePeriodSeconds"] = json!(30);
    let q = quota(json!({"pods": "10", "count/pods": "10", "requests.cpu": "10"}));
    let s = status_of(&[(PODS, done), (PODS, gone)], &q, &[]).unwrap();
    assert_eq!(
        s["used"],
        json!({"pods": "0", "count/pods": "2", "requests.cpu": "0"})
    );
}

#[test]
fn init_containers_count_by_their_largest_and_overhead_adds() {
    let p = json!({"metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "100m"}}},
                {"resources": {"requests": {"cpu": "100m"}}}],
            "initContainers": [
                {"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}},
                {"resources": {"requests": {"cpu": "300m"}}}],
            "overhead": {"cpu": "50m"}},
        "status": {"phase": "Pending"}});
    let q = quota(json!({"requests.cpu": "10", "limits.cpu": "10"}));
    let s = status_of(&[(PODS, p)], &q, &[]).unwrap();
    assert_eq!(
        s["used"],
        json!({"requests.cpu": "1050m", "limits.cpu": "1050m"})
    );
}

#[test]
fn hugepages_and_extended_resources() {
    let p = json!({"metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"resources": {"requests": {
            "hugepages-2Mi": "4Mi", "example.com/gpu": "2"}}}]}});
    let q = quota(
        json!({"hugepages-2Mi": "1Gi", "requests.hugepages-2Mi": "1Gi",
        "requests.example.com/gpu": "4"}),
    );
    let s = status_of(&[(PODS, p)], &q, &[]).unwrap();
    assert_eq!(
        s["used"],
        json!({"hugepages-2Mi": "4Mi", "requests.hugepages-2Mi": "4Mi",
            "requests.example.com/gpu": "2"})
    );
}

#[test]
fn scopes_select_pods_and_nothing_else() {
    let be = json!({"metadata": {"name": "be", "namespace": "ns"},
        "spec": {"containers": [{"name": "c"}], "activeDeadlineSeconds": 10}});
    let mut q = quota(json!({"pods": "5", "count/services": "5"}));
    q["spec"]["scopes"] = json!(["BestEffort", "Terminating"]);
    let objs = [
        (PODS, be),
        (PODS, pod("nbe", "1", "1Gi")),
        (
            SERVICES,
            json!({"metadata": {"name": "s", "namespace": "ns"}}),
        ),
    ];
    let s = status_of(&objs, &q, &[]).unwrap();
    assert_eq!(s["used"], json!({"pods": "1", "count/services": "0"}));
    q["spec"]["scopes"] = json!(["NotBestEffort"]);
    let s = status_of(&objs, &q, &[]).unwrap();
    assert_eq!(s["used"]["pods"], "1");
}

#[test]
fn priority_class_selectors() {
    let mut p = pod("p", "1", "1Gi");
    p["spec"]["priorityClassName"] = json!("high");
    let none = pod("n", "1", "1Gi");
    let req = |op: &str, vals: &[&str]| ScopeReq {
        scope: "PriorityClass".into(),
        operator: op.into(),
        values: vals.iter().map(|s| s.to_string()).collect(),
    };
    assert!(pod_matches_scope(&req("In", &["high"]), &p));
    assert!(!pod_matches_scope(&req("In", &["low"]), &p));
    assert!(pod_matches_scope(&req("NotIn", &["low"]), &p));
    assert!(pod_matches_scope(&req("NotIn", &["high"]), &none));
    assert!(pod_matches_scope(&req("Exists", &[]), &p));
    assert!(!pod_matches_scope(&req("Exists", &[]), &none));
    assert!(pod_matches_scope(&req("DoesNotExist", &[]), &none));
    let mut q = quota(json!({"pods": "5"}));
    q["spec"]["scopeSelector"] = json!({"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]});
    let s = status_of(&[(PODS, p), (PODS, none)], &q, &[]).unwrap();
    assert_eq!(s["used"], json!({"pods": "1"}));
}

#[test]
fn cross_namespace_affinity_scope() {
    let mut p = pod("p", "1", "1Gi");
    let plain = p.clone();
    p["spec"]["affinity"] = json!({"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"namespaceSelector": {}, "topologyKey": "k"}}]}});
    let s = ScopeReq {
        scope: "CrossNamespacePodAffinity".into(),
        operator: "Exists".into(),
        values: vec![],
    };
    assert!(pod_matches_scope(&s, &p));
    assert!(!pod_matches_scope(&s, &plain));
}

#[test]
fn services_node_ports_and_load_balancers() {
    let objs = [
        (
            SERVICES,
            json!({"metadata": {"name": "a", "namespace": "ns"},
            "spec": {"type": "NodePort", "ports": [{"port": 1}, {"port": 2}]}}),
        ),
        (
            SERVICES,
            json!({"metadata": {"name": "b", "namespace": "ns"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 1}]}}),
        ),
        (
            SERVICES,
            json!({"metadata": {"name": "c", "namespace": "ns"},
            "spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
                "ports": [{"port": 1}, {"port": 2, "nodePort": 30000}]}}),
        ),
        (
            SERVICES,
            json!({"metadata": {"name": "d", "namespace": "ns"},
            "spec": {"type": "ClusterIP", "ports": [{"port": 1}]}}),
        ),
    ];
    let q = quota(json!({"services": "10", "services.nodeports": "10",
        "services.loadbalancers": "10", "count/services": "10"}));
    let s = status_of(&objs, &q, &[]).unwrap();
    assert_eq!(
        s["used"],
        json!({"services": "4", "services.nodeports": "4", "services.loadbalancers": "2",
            "count/services": "4"})
    );
}

#[test]
fn claims_storage_by_class() {
    let objs = [
        (
            PERSISTENTVOLUMECLAIMS,
            json!({"metadata": {"name": "a", "namespace": "ns"},
            "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}}}),
        ),
        (
            PERSISTENTVOLUMECLAIMS,
            json!({"metadata": {"name": "b", "namespace": "ns",
            "annotations": {"volume.beta.kubernetes.io/storage-class": "slow"}},
            "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "1500m"}}}}),
        ),
    ];
    let q = quota(
        json!({"persistentvolumeclaims": "5", "requests.storage": "10Gi",
        "fast.storageclass.storage.k8s.io/requests.storage": "5Gi",
        "fast.storageclass.storage.k8s.io/persistentvolumeclaims": "5",
        "slow.storageclass.storage.k8s.io/requests.storage": "5Gi",
        "count/persistentvolumeclaims": "5"}),
    );
    let s = status_of(&objs, &q, &[]).unwrap();
    assert_eq!(
        s["used"],
        json!({"persistentvolumeclaims": "2", "requests.storage": "1073741826",
            "fast.storageclass.storage.k8s.io/requests.storage": "1Gi",
            "fast.storageclass.storage.k8s.io/persistentvolumeclaims": "1",
            "slow.storageclass.storage.k8s.io/requests.storage": "2",
            "count/persistentvolumeclaims": "2"})
    );
}

#[test]
fn object_counts_and_legacy_names() {
    let objs = [
        (
            CONFIGMAPS,
            json!({"metadata": {"name": "a", "namespace": "ns"}}),
        ),
        (
            CONFIGMAPS,
            json!({"metadata": {"name": "b", "namespace": "ns"}}),
        ),
        (
            CONFIGMAPS,
            json!({"metadata": {"name": "c", "namespace": "other"}}),
        ),
        (
            DEPLOYMENTS,
            json!({"metadata": {"name": "d", "namespace": "ns"}}),
        ),
    ];
    let q = quota(json!({"configmaps": "5", "count/configmaps": "5",
        "count/deployments.apps": "5", "secrets": "5", "count/widgets.example.com": "1"}));
    let s = status_of(&objs, &q, &[CONFIGMAPS, DEPLOYMENTS, SECRETS]).unwrap();
    // Nothing measures widgets: no usage is reported for it.
    assert_eq!(
        s["used"],
        json!({"configmaps": "2", "count/configmaps": "2", "count/deployments.apps": "1",
            "secrets": "0"})
    );
}

#[test]
fn no_write_when_status_is_right() {
    let mut q = quota(json!({"pods": "10", "requests.cpu": "1"}));
    q["status"] = json!({"hard": {"pods": "10", "requests.cpu": "1000m"},
        "used": {"pods": "1", "requests.cpu": "0.1"}});
    assert_eq!(status_of(&[(PODS, pod("a", "100m", "1Mi"))], &q, &[]), None);
    // The hard limits changed: written.
    q["spec"]["hard"]["pods"] = json!("20");
    let s = status_of(&[(PODS, pod("a", "100m", "1Mi"))], &q, &[]).unwrap();
    assert_eq!(s["hard"]["pods"], "20");
    assert_eq!(s["used"], json!({"pods": "1", "requests.cpu": "100m"}));
}

#[test]
fn unmeasured_usage_is_kept_and_dropped_names_go() {
    let mut q = quota(json!({"pods": "10", "example.com/thing": "3"}));
    q["status"] = json!({"hard": {"pods": "10", "example.com/thing": "3", "secrets": "1"},
        "used": {"pods": "0", "example.com/thing": "2", "secrets": "1"}});
    let s = status_of(&[(PODS, pod("a", "1", "1Mi"))], &q, &[]).unwrap();
    assert_eq!(s["hard"], json!({"pods": "10", "example.com/thing": "3"}));
    assert_eq!(s["used"], json!({"pods": "1", "example.com/thing": "2"}));
}

#[test]
fn quota_handlers_choose_the_queue() {
    let c = ResourceQuotaController::new(1, DEFAULT_SYNC_PERIOD);
    let i = &c.inner;
    // No status yet: the priority queue.
    i.add_quota(&quota(json!({"pods": "1"})));
    assert_eq!(i.priority.len(), 1);
    assert_eq!(i.primary.len(), 0);
    let mut q = quota(json!({"pods": "1"}));
    q["metadata"]["name"] = json!("q2");
    q["status"] = json!({"hard": {"pods": "1"}, "used": {"pods": "0"}});
    i.add_quota(&q);
    assert_eq!(i.primary.len(), 1);
    // Usage missing for a measured name: priority.
    q["metadata"]["name"] = json!("q3");
    q["status"]["used"] = json!({});
    i.add_quota(&q);
    assert_eq!(i.priority.len(), 2);
}

#[test]
fn ignored_resources() {
    use crate::api::resources::{EVENTS, NODES};
    assert!(ignored(&EVENTS));
    assert!(ignored(&NODES));
    assert!(!ignored(&CONFIGMAPS));
    assert!(!ignored(&PODS));
}

#[test]
fn equal_lists_compare_values() {
    assert!(lists_equal(&json!({"cpu": "1"}), &json!({"cpu": "1000m"})));
    assert!(!lists_equal(&json!({"cpu": "1"}), &json!({"cpu": "2"})));
    assert!(!lists_equal(
        &json!({"cpu": "1"}),
        &json!({"cpu": "1", "pods": "1"})
    ));
    assert!(lists_equal(&json!(null), &json!({})));
}

#[test]
fn the_pod_memo_sums_as_a_full_evaluation_and_follows_changes() {
    use crate::cache::DeltaKind;
    use usage::Scopes;
    let with_rv = |mut p: Value, rv: &str| {
        p["metadata"]["resourceVersion"] = rv.into();
        p
    };
    let a = with_rv(pod("a", "100m", "64Mi"), "1");
    let b = with_rv(pod("b", "250m", "1Gi"), "2");
    let mut past = with_rv(pod("c", "1", "1Gi"), "3");
    past["metadata"]["deletionTimestamp"] = "2020-01-01T00:00:00Z".into();
    past["metadata"]["deletionGracePeriodSeconds"] = 30.into();
    let mut other = with_rv(pod("d", "2", "2Gi"), "4");
    other["metadata"]["namespace"] = "other".into();
    let (cache, _) = cx_with(&[
        (PODS, a.clone()),
        (PODS, b.clone()),
        (PODS, past),
        (PODS, other),
    ]);
    let names: Vec<String> = ["pods", "count/pods", "requests.cpu", "limits.memory", "cpu"]
        .map(String::from)
        .to_vec();
    let memo = podmemo::PodMemo::default();
    let scopes = Scopes::default();
    let show = |r: usage::ResourceList| -> Vec<(String, String)> {
        r.into_iter().map(|(k, q)| (k, q.to_string())).collect()
    };
    let both = |now| {
        let full = Evaluator::Pods.usage_stats(&cache, "ns", &scopes, &names, now, None);
        let fast = Evaluator::Pods.usage_stats(&cache, "ns", &scopes, &names, now, Some(&memo));
        let full: Vec<(String, String)> = show(full)
            .into_iter()
            .filter(|(k, _)| names.contains(k))
            .collect();
        assert_eq!(full, show(fast));
        full
    };
    let now = SystemTime::now();
    let first = both(now);
    assert!(
        first.contains(&("requests.cpu".into(), "350m".into())),
        "{first:?}"
    );
    assert!(
        first.contains(&("count/pods".into(), "3".into())),
        "{first:?}"
    );
    assert!(first.contains(&("pods".into(), "2".into())), "{first:?}");
    assert_eq!(memo.kept(), 3, "only the namespace synced is kept");
    // b finishes (a new version), a goes: the memo follows the cache.
    let mut done = with_rv(b, "5");
    done["status"]["phase"] = "Succeeded".into();
    cache.store(PODS).apply(DeltaKind::Updated, done);
    cache.store(PODS).apply(DeltaKind::Deleted, a);
    let second = both(now);
    assert!(second.contains(&("pods".into(), "0".into())), "{second:?}");
    assert!(
        second.contains(&("count/pods".into(), "2".into())),
        "{second:?}"
    );
    assert_eq!(memo.kept(), 2);
}

#[test]
fn pod_level_resources_replace_the_containers_sums() {
    let q = quota(json!({"requests.cpu": "9", "limits.cpu": "9", "requests.memory": "9Gi"}));
    let mut p = pod("a", "100m", "64Mi");
    p["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "d", "resources": {"requests": {"cpu": "200m"}}}));
    p["spec"]["resources"] = json!({"requests": {"cpu": "1"}, "limits": {"cpu": "2"}});
    let s = status_of(&[(PODS, p)], &q, &[]).unwrap();
    // cpu from the pod level; memory, which it does not set, from the containers.
    assert_eq!(
        s["used"],
        json!({"requests.cpu": "1", "limits.cpu": "2", "requests.memory": "64Mi"})
    );
}

#[test]
fn resized_pods_count_the_largest_of_spec_allocation_and_actual() {
    let q = quota(json!({"requests.cpu": "9", "limits.cpu": "9"}));
    let mut p = pod("a", "500m", "64Mi");
    p["status"]["containerStatuses"] = json!([{"name": "c",
        "allocatedResources": {"cpu": "1"},
        "resources": {"requests": {"cpu": "750m"}, "limits": {"cpu": "2"}}}]);
    let s = status_of(&[(PODS, p.clone())], &q, &[]).unwrap();
    assert_eq!(s["used"], json!({"requests.cpu": "1", "limits.cpu": "2"}));
    // A resize up to 4 the node cannot take: the spec no longer counts.
    p["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "4"}, "limits": {"cpu": "4"}});
    p["status"]["conditions"] = json!([{"type": "PodResizePending", "status": "True",
        "reason": "Infeasible"}]);
    let s = status_of(&[(PODS, p.clone())], &q, &[]).unwrap();
    assert_eq!(s["used"], json!({"requests.cpu": "1", "limits.cpu": "2"}));
    // Deferred: the spec counts.
    p["status"]["conditions"][0]["reason"] = json!("Deferred");
    let s = status_of(&[(PODS, p)], &q, &[]).unwrap();
    assert_eq!(s["used"], json!({"requests.cpu": "4", "limits.cpu": "4"}));
}

#[test]
fn best_effort_reads_the_status_class_and_pod_level_resources() {
    let be = ScopeReq {
        scope: "BestEffort".into(),
        operator: "Exists".into(),
        values: vec![],
    };
    let mut p = json!({"metadata": {"name": "a", "namespace": "ns"},
        "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}});
    assert!(pod_matches_scope(&be, &p));
    p["spec"]["resources"] = json!({"requests": {"memory": "1Gi"}});
    assert!(!pod_matches_scope(&be, &p));
    p["status"]["qosClass"] = json!("BestEffort");
    assert!(pod_matches_scope(&be, &p));
}

fn claim(name: &str, spec_vac: Option<&str>, target: Option<&str>) -> Value {
    let mut c = json!({"metadata": {"name": name, "namespace": "ns"},
        "spec": {"resources": {"requests": {"storage": "1Gi"}}}, "status": {}});
    if let Some(v) = spec_vac {
        c["spec"]["volumeAttributesClassName"] = json!(v);
        c["status"]["currentVolumeAttributesClassName"] = json!(v);
    }
    if let Some(t) = target {
        c["status"]["modifyVolumeStatus"] =
            json!({"targetVolumeAttributesClassName": t, "status": "InProgress"});
    }
    c
}

#[test]
fn claims_match_volume_attributes_class_scopes() {
    let objs = [
        (PERSISTENTVOLUMECLAIMS, claim("gold", Some("gold"), None)),
        (
            PERSISTENTVOLUMECLAIMS,
            claim("moving", Some("silver"), Some("gold")),
        ),
        (
            PERSISTENTVOLUMECLAIMS,
            claim("silver", Some("silver"), None),
        ),
        (PERSISTENTVOLUMECLAIMS, claim("none", None, None)),
    ];
    let scoped = |op: &str, values: Value| {
        let mut q = quota(json!({"persistentvolumeclaims": "9", "requests.storage": "9Gi"}));
        q["spec"]["scopeSelector"] = json!({"matchExpressions": [
            {"scopeName": "VolumeAttributesClass", "operator": op, "values": values}]});
        let s = status_of(&objs, &q, &[]).unwrap();
        s["used"]["persistentvolumeclaims"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // The target of a modification counts as well as the class asked for.
    assert_eq!(scoped("In", json!(["gold"])), "2");
    assert_eq!(scoped("NotIn", json!(["gold"])), "3");
    assert_eq!(scoped("Exists", json!([])), "3");
    assert_eq!(scoped("DoesNotExist", json!([])), "1");
}

#[test]
fn a_claims_larger_allocation_counts() {
    let mut c = claim("a", None, None);
    c["status"]["allocatedResources"] = json!({"storage": "3Gi"});
    let mut smaller = claim("b", None, None);
    smaller["status"]["allocatedResources"] = json!({"storage": "500Mi"});
    let q = quota(json!({"requests.storage": "9Gi"}));
    let s = status_of(
        &[
            (PERSISTENTVOLUMECLAIMS, c),
            (PERSISTENTVOLUMECLAIMS, smaller),
        ],
        &q,
        &[],
    )
    .unwrap();
    assert_eq!(s["used"], json!({"requests.storage": "4Gi"}));
}

fn device_claim(name: &str, requests: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns"},
        "spec": {"devices": {"requests": requests}}})
}

#[test]
fn dra_claims_count_and_ask_for_devices_per_class() {
    use crate::api::resources::RESOURCECLAIMS;
    let objs = [
        (
            RESOURCECLAIMS,
            device_claim(
                "a",
                json!([{"name": "r0", "exactly": {"deviceClassName": "gold",
                    "allocationMode": "ExactCount", "count": 2}},
                    {"name": "r1", "exactly": {"deviceClassName": "gold"}}]),
            ),
        ),
        (
            RESOURCECLAIMS,
            device_claim(
                "b",
                json!([{"name": "r0", "firstAvailable": [
                    {"name": "s0", "deviceClassName": "gold", "count": 1},
                    {"name": "s1", "deviceClassName": "gold", "count": 4},
                    {"name": "s2", "deviceClassName": "silver", "allocationMode": "All"}]}]),
            ),
        ),
    ];
    let q = quota(json!({"count/resourceclaims.resource.k8s.io": "10",
        "gold.deviceclass.resource.k8s.io/devices": "100",
        "silver.deviceclass.resource.k8s.io/devices": "100",
        "bronze.deviceclass.resource.k8s.io/devices": "100"}));
    let s = status_of(&objs, &q, &[RESOURCECLAIMS]).unwrap();
    assert_eq!(
        s["used"],
        json!({"count/resourceclaims.resource.k8s.io": "2",
            "gold.deviceclass.resource.k8s.io/devices": "7",
            "silver.deviceclass.resource.k8s.io/devices": "32",
            "bronze.deviceclass.resource.k8s.io/devices": "0"})
    );
}

#[test]
fn dra_extended_resources_charge_what_the_pod_is_not_charged_for() {
    use crate::api::resources::{DEVICECLASSES, RESOURCECLAIMS};
    use crate::cache::{Delta, DeltaKind};
    let class = |name: &str, ext: Option<&str>, created: &str| {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}, "spec": {}});
        if let Some(e) = ext {
            c["spec"]["extendedResourceName"] = json!(e);
        }
        Delta {
            kind: DeltaKind::Added,
            old: None,
            new: Some(std::sync::Arc::new(c)),
        }
    };
    {
        let mut c = super::dra::classes().write().unwrap();
        c.apply(&class(
            "xgpu",
            Some("example.com/xgpu"),
            "2026-01-02T00:00:00Z",
        ));
        c.apply(&class(
            "xgpu-old",
            Some("example.com/xgpu"),
            "2026-01-01T00:00:00Z",
        ));
        c.apply(&class("plain", None, "2026-01-01T00:00:00Z"));
        assert_eq!(c.class_for("example.com/xgpu"), Some("xgpu-old"));
        assert_eq!(
            c.class_for("deviceclass.resource.kubernetes.io/xgpu"),
            Some("xgpu")
        );
        assert_eq!(c.extended_resource("plain"), None);
    }
    let _ = DEVICECLASSES;
    // The pod asks for 1 through its container; the scheduler's claim asks for 3.
    let mut p = pod("p", "100m", "64Mi");
    p["metadata"]["uid"] = json!("pu");
    p["spec"]["containers"][0]["resources"]["requests"]["example.com/xgpu"] = json!("1");
    p["spec"]["containers"][0]["resources"]["limits"]["example.com/xgpu"] = json!("1");
    let claim = json!({"metadata": {"name": "p-xgpu-abcde", "namespace": "ns",
        "creationTimestamp": "2026-01-03T00:00:00Z",
        "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pu",
            "controller": true}]},
        "spec": {"devices": {"requests": [{"name": "container-0-request-0",
            "exactly": {"deviceClassName": "xgpu", "count": 3}}]}}});
    let q = quota(json!({"requests.example.com/xgpu": "10",
        "requests.deviceclass.resource.kubernetes.io/xgpu": "10",
        "requests.deviceclass.resource.kubernetes.io/plain": "10",
        "xgpu.deviceclass.resource.k8s.io/devices": "10"}));
    let s = status_of(&[(PODS, p), (RESOURCECLAIMS, claim)], &q, &[RESOURCECLAIMS]).unwrap();
    assert_eq!(
        s["used"],
        json!({"requests.example.com/xgpu": "3",
            "requests.deviceclass.resource.kubernetes.io/xgpu": "3",
            "requests.deviceclass.resource.kubernetes.io/plain": "0",
            "xgpu.deviceclass.resource.k8s.io/devices": "3"})
    );
}
