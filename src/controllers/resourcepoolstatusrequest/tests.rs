//! The pool status as upstream computes it (its `controller_test.go` cases, in our words),
//! and what the controller queues, writes and deletes.

use super::pools::{compute, Query};
use super::*;
use crate::controllers::testing::Harness;
use serde_json::json;

const D: &str = "test.example.com";
const NOW: &str = "2026-01-01T00:00:00Z";

/// A slice of pool `pool` with `n` plain devices `device-0..`.
fn slice(name: &str, pool: &str, node: Option<&str>, n: usize, gen: i64, count: i64) -> Value {
    let devices: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("device-{i}")}))
        .collect();
    let mut s = json!({"metadata": {"name": name},
        "spec": {"driver": D, "pool": {"name": pool, "generation": gen, "resourceSliceCount": count},
            "devices": devices}});
    if let Some(n) = node {
        s["spec"]["nodeName"] = json!(n);
    }
    s
}

fn claim(name: &str, pool: &str, device: &str, admin: bool) -> Value {
    let mut r = json!({"request": "r", "driver": D, "pool": pool, "device": device});
    if admin {
        r["adminAccess"] = json!(true);
    }
    json!({"metadata": {"name": name, "namespace": "default"},
        "status": {"allocation": {"devices": {"results": [r]}}}})
}

fn run(q: &Query, slices: &[Value], claims: &[Value], rules: &[Value]) -> pools::Computed {
    let (s, c, r): (Vec<&Value>, Vec<&Value>, Vec<&Value>) = (
        slices.iter().collect(),
        claims.iter().collect(),
        rules.iter().collect(),
    );
    compute(q, &s, &c, &r, NOW)
}

fn query(driver: &str) -> Query<'_> {
    Query {
        driver,
        pool: None,
        limit: 100,
        default_partition_attr: None,
    }
}

fn pools_of(c: &pools::Computed) -> Vec<Value> {
    c.status["pools"].as_array().cloned().unwrap_or_default()
}

fn sum(c: &pools::Computed, field: &str) -> i64 {
    pools_of(c).iter().filter_map(|p| p[field].as_i64()).sum()
}

#[test]
fn pools_counts_filters_and_limit() {
    let one = run(
        &query(D),
        &[slice("s1", "pool-1", Some("node-1"), 4, 1, 1)],
        &[],
        &[],
    );
    assert_eq!(
        one.status,
        json!({"poolCount": 1, "pools": [{"driver": D, "poolName": "pool-1", "generation": 1,
            "nodeName": "node-1", "resourceSliceCount": 1, "totalDevices": 4,
            "allocatedDevices": 0, "availableDevices": 4, "unavailableDevices": 0}],
            "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": NOW,
                "reason": "CalculationComplete", "message": "Calculated status for 1 pools"}]})
    );
    assert!(!one.incomplete);
    // Allocations.
    let c = run(
        &query(D),
        &[slice("s1", "pool-1", Some("node-1"), 4, 1, 1)],
        &[
            claim("c1", "pool-1", "device-0", false),
            claim("c2", "pool-1", "device-1", false),
        ],
        &[],
    );
    assert_eq!(
        (sum(&c, "allocatedDevices"), sum(&c, "availableDevices")),
        (2, 2)
    );
    // Several pools, another driver's left out, sorted by name.
    let mut other = slice("o", "pool-0", None, 9, 1, 1);
    other["spec"]["driver"] = json!("other.example.com");
    let slices = [
        slice("b", "pool-b", Some("n2"), 2, 1, 1),
        slice("a", "pool-a", Some("n1"), 3, 1, 1),
        other,
    ];
    let c = run(&query(D), &slices, &[], &[]);
    let names: Vec<String> = pools_of(&c)
        .iter()
        .map(|p| p["poolName"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["pool-a", "pool-b"]);
    assert_eq!(sum(&c, "totalDevices"), 5);
    // One pool by name.
    let q = Query {
        pool: Some("pool-b"),
        ..query(D)
    };
    let c = run(&q, &slices, &[], &[]);
    assert_eq!(
        (c.status["poolCount"].clone(), sum(&c, "totalDevices")),
        (json!(1), 2)
    );
    // Cut to the limit; poolCount says how many matched.
    let q = Query {
        limit: 1,
        ..query(D)
    };
    let c = run(&q, &slices, &[], &[]);
    assert_eq!(pools_of(&c).len(), 1);
    assert_eq!(c.status["poolCount"], 2);
    assert_eq!(
        c.status["conditions"][0]["message"],
        "Calculated status for 1 pools"
    );
    // Nothing matches: no pools list, count 0.
    let c = run(&query("none.example.com"), &slices, &[], &[]);
    assert_eq!(c.status["poolCount"], 0);
    assert!(c.status.get("pools").is_none());
    assert_eq!(
        c.status["conditions"][0]["message"],
        "Calculated status for 0 pools"
    );
}

#[test]
fn generations_incomplete_pools_and_node_names() {
    // Older generations are ignored.
    let slices = [
        slice("old", "pool-1", Some("node-1"), 8, 1, 1),
        slice("new-1", "pool-1", Some("node-1"), 4, 2, 2),
        slice("new-2", "pool-1", Some("node-1"), 4, 2, 2),
    ];
    let c = run(&query(D), &slices, &[], &[]);
    assert_eq!(sum(&c, "totalDevices"), 8);
    assert_eq!(pools_of(&c)[0]["generation"], 2);
    assert_eq!(pools_of(&c)[0]["resourceSliceCount"], 2);
    // 3 of 5 slices: a validation error, no counts, and the request is not answered yet.
    let slices: Vec<Value> = (1..=3)
        .map(|i| slice(&format!("s{i}"), "pool-1", Some("node-1"), 4, 1, 5))
        .collect();
    let c = run(&query(D), &slices, &[], &[]);
    let p = &pools_of(&c)[0];
    assert_eq!(
        p,
        &json!({"driver": D, "poolName": "pool-1", "generation": 1, "nodeName": "node-1",
            "validationError": "PoolIncomplete: pool test.example.com/pool-1 is incomplete: observed 3/5 slices at generation 1"})
    );
    assert!(c.incomplete);
    // One complete and one incomplete pool.
    let slices = [
        slice("s1", "pool-1", Some("node-1"), 4, 1, 1),
        slice("s2a", "pool-2", Some("node-2"), 4, 1, 3),
        slice("s2b", "pool-2", Some("node-2"), 4, 1, 3),
    ];
    let c = run(&query(D), &slices, &[], &[]);
    assert_eq!(sum(&c, "totalDevices"), 4);
    assert_eq!(
        c.status["conditions"][0]["message"],
        "Calculated status for 2 pools (1 incomplete)"
    );
    // An incomplete pool cut off by the limit does not hold the answer back.
    let q = Query {
        limit: 1,
        ..query(D)
    };
    assert!(!run(&q, &slices, &[], &[]).incomplete);
    // Node names: one node kept, mixed or none left out.
    let node = |a: Option<&str>, b: Option<&str>| {
        let c = run(
            &query(D),
            &[slice("1", "p", a, 4, 1, 2), slice("2", "p", b, 4, 1, 2)],
            &[],
            &[],
        );
        assert_eq!(sum(&c, "totalDevices"), 8);
        pools_of(&c)[0].get("nodeName").cloned()
    };
    assert_eq!(node(Some("node-1"), Some("node-1")), Some(json!("node-1")));
    assert_eq!(node(Some("node-1"), Some("node-2")), None);
    assert_eq!(node(None, None), None);
    assert_eq!(node(Some("node-1"), None), None);
}

fn counts(c: &pools::Computed) -> [i64; 4] {
    let p = &pools_of(c)[0];
    [
        "totalDevices",
        "allocatedDevices",
        "availableDevices",
        "unavailableDevices",
    ]
    .map(|f| p[f].as_i64().unwrap())
}

fn tainted(effect: &str) -> Value {
    let mut s = slice("s", "pool-1", Some("node-1"), 5, 1, 1);
    for i in 0..2 {
        s["spec"]["devices"][i]["taints"] = json!([{"key": "k", "effect": effect}]);
    }
    s
}

#[test]
fn device_counts_shared_devices_admin_access_and_taints() {
    let plain = [slice("s", "pool-1", Some("node-1"), 4, 1, 1)];
    let shared: Vec<Value> = (1..=3)
        .map(|i| claim(&format!("c{i}"), "pool-1", "device-0", false))
        .collect();
    assert_eq!(counts(&run(&query(D), &plain, &shared, &[])), [4, 1, 3, 0]);
    let admin = [
        claim("c1", "pool-1", "device-0", false),
        claim("a1", "pool-1", "device-1", true),
    ];
    assert_eq!(counts(&run(&query(D), &plain, &admin, &[])), [4, 1, 3, 0]);
    for e in ["NoSchedule", "NoExecute"] {
        assert_eq!(
            counts(&run(&query(D), &[tainted(e)], &[], &[])),
            [5, 0, 3, 2]
        );
    }
    assert_eq!(
        counts(&run(&query(D), &[tainted("None")], &[], &[])),
        [5, 0, 5, 0]
    );
    let rule = json!({"metadata": {"name": "r"}, "spec": {
        "deviceSelector": {"driver": D, "pool": "pool-1", "device": "device-0"},
        "taint": {"key": "k", "effect": "NoSchedule"}}});
    assert_eq!(
        counts(&run(&query(D), &plain, &[], std::slice::from_ref(&rule))),
        [4, 0, 3, 1]
    );
    // A rule selecting another device, or with a None effect, or no selector: nothing.
    let mut other = rule.clone();
    other["spec"]["deviceSelector"]["device"] = json!("device-9");
    let mut none = rule.clone();
    none["spec"]["taint"]["effect"] = json!("None");
    let mut bare = rule;
    bare["spec"]
        .as_object_mut()
        .unwrap()
        .remove("deviceSelector");
    assert_eq!(
        counts(&run(&query(D), &plain, &[], &[other, none, bare])),
        [4, 0, 4, 0]
    );
    // An allocated device that is also tainted is taken off twice, never below zero.
    let c = run(
        &query(D),
        &[tainted("NoExecute")],
        &[claim("c", "pool-1", "device-0", false)],
        &[],
    );
    assert_eq!(counts(&c), [5, 1, 2, 2]);
}

/// Upstream's end-to-end partition cases: a counter slice and a device slice, the
/// attribute declared by the slices or given by the request.
#[test]
fn partition_summary_from_slices() {
    let driver = "gpu.example.com";
    let make = |declare: bool, mixed: bool| {
        let count = if mixed { 3 } else { 2 };
        let pool = json!({"name": "pool-0", "generation": 1, "resourceSliceCount": count});
        let dev = |n: &str, attr: &str, typ: &str, mem: &str| {
            json!({"name": n, "attributes": {attr: {"string": typ}},
                "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": mem}}}]})
        };
        let mut counters = json!({"metadata": {"name": "counters"}, "spec": {"driver": driver,
            "nodeName": "node-0", "pool": pool,
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}]}});
        let mut devices = json!({"metadata": {"name": "devices"}, "spec": {"driver": driver,
            "nodeName": "node-0", "pool": pool, "devices": [
                dev("full-0", "gpu.example.com/profile", "Full", "80Gi"),
                dev("half-0", "profile", "Half", "40Gi"),
                dev("half-1", "profile", "Half", "40Gi")]}});
        if declare {
            counters["spec"]["partitionTypeAttribute"] = json!("gpu.example.com/profile");
            devices["spec"]["partitionTypeAttribute"] = json!("gpu.example.com/profile");
        }
        let mut all = vec![counters, devices];
        if mixed {
            all.push(json!({"metadata": {"name": "class"}, "spec": {"driver": driver,
                "nodeName": "node-0", "pool": pool, "partitionTypeAttribute": "gpu.example.com/class",
                "devices": [dev("a-0", "gpu.example.com/class", "A", "10Gi")]}}));
        }
        all
    };
    let entries = |attr: Option<&str>, slices: &[Value]| {
        let q = Query {
            default_partition_attr: attr,
            ..query(driver)
        };
        let c = run(&q, slices, &[], &[]);
        let p = &pools_of(&c)[0];
        assert!(p.get("validationError").is_none(), "{p}");
        p["partitionSummary"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                format!(
                    "{} {} {}/{}",
                    e["attribute"].as_str().unwrap(),
                    e["type"].as_str().unwrap(),
                    e["total"],
                    e["allocatable"]
                )
            })
            .collect::<Vec<_>>()
    };
    let want = [
        "gpu.example.com/profile Full 1/1",
        "gpu.example.com/profile Half 2/2",
    ];
    assert_eq!(entries(None, &make(true, false)), want);
    assert_eq!(
        entries(Some("gpu.example.com/other"), &make(true, false)),
        want
    );
    assert_eq!(
        entries(Some("gpu.example.com/profile"), &make(false, false)),
        want
    );
    assert_eq!(
        entries(None, &make(true, true)),
        [
            "gpu.example.com/class A 1/1",
            "gpu.example.com/profile Full 1/1",
            "gpu.example.com/profile Half 2/2"
        ]
    );
}

#[test]
fn shareable_summary_from_claims() {
    let mut s = slice("shareable", "pool-0", Some("node-0"), 1, 1, 1);
    s["spec"]["devices"][0]["allowMultipleAllocations"] = json!(true);
    s["spec"]["devices"][0]["capacity"] =
        json!({"memory": {"value": "40Gi"}, "cores": {"value": "8"}});
    let mut c = claim("c0", "pool-0", "device-0", false);
    c["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] =
        json!({"memory": "10Gi", "cores": "2"});
    let out = run(&query(D), &[s], &[c], &[]);
    assert_eq!(
        pools_of(&out)[0]["shareableSummary"],
        json!({"fullyAvailableDevices": 0, "partiallyAvailableDevices": 1, "capacity": [
            {"name": "cores", "total": "8", "consumed": "2", "available": "6"},
            {"name": "memory", "total": "40Gi", "consumed": "10Gi", "available": "30Gi"}]})
    );
}

#[test]
fn a_view_error_is_written_with_the_counts() {
    let mut s = slice("s", "pool-0", Some("node-0"), 1, 1, 1);
    s["spec"]["partitionTypeAttribute"] = json!("test.example.com/profile");
    s["spec"]["devices"][0]["consumesCounters"] =
        json!([{"counterSet": "gpu-0", "counters": {"memory": {"value": "1Gi"}}}]);
    let c = run(&query(D), &[s], &[], &[]);
    let p = &pools_of(&c)[0];
    assert!(!c.incomplete);
    assert_eq!(p["totalDevices"], 1);
    assert!(p["validationError"]
        .as_str()
        .unwrap()
        .starts_with("PartitionTypeMissing:"));
    assert_eq!(
        c.status["conditions"][0]["message"],
        "Calculated status for 1 pools (1 incomplete)"
    );
}

fn ago(secs: u64) -> String {
    crate::compat::timefmt::rfc3339(SystemTime::now() - Duration::from_secs(secs))
}

fn request(name: &str, created: &str, status: Option<Value>) -> Value {
    let mut r = json!({"apiVersion": "resource.k8s.io/v1alpha3", "kind": "ResourcePoolStatusRequest",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "5",
            "creationTimestamp": created},
        "spec": {"driver": D, "limit": 100}});
    if let Some(s) = status {
        r["status"] = s;
    }
    r
}

fn answered(at: &str) -> Value {
    json!({"poolCount": 0, "conditions": [{"type": "Complete", "status": "True",
        "lastTransitionTime": at, "reason": "CalculationComplete", "message": "m"}]})
}

#[test]
fn time_to_live() {
    let now = SystemTime::now();
    assert!(!expired(
        &request("r", &ago(60), Some(answered(&ago(60)))),
        now
    ));
    assert!(expired(
        &request("r", &ago(7200), Some(answered(&ago(3700)))),
        now
    ));
    assert!(!expired(
        &request("r", &ago(7200), Some(answered(&ago(3500)))),
        now
    ));
    let mut failed = answered(&ago(3700));
    failed["conditions"][0]["type"] = json!("Failed");
    assert!(expired(&request("r", &ago(3700), Some(failed)), now));
    // A status without either condition: its creation counts.
    assert!(expired(
        &request("r", &ago(3700), Some(json!({"poolCount": 0}))),
        now
    ));
    assert!(!expired(
        &request("r", &ago(3500), Some(json!({"poolCount": 0}))),
        now
    ));
    // Pending: a day.
    assert!(!expired(&request("r", &ago(23 * 3600), None), now));
    assert!(expired(&request("r", &ago(25 * 3600), None), now));
    // No time: never.
    assert!(!expired(&request("r", "", None), now));
}

#[test]
fn queues_pending_and_expired_requests_only() {
    let mut h = Harness::new(PoolStatusController::new(true));
    h.add(
        RESOURCESLICES,
        slice("s1", "pool-1", Some("node-1"), 4, 1, 1),
    );
    h.add(RESOURCEPOOLSTATUSREQUESTS, request("new", &ago(5), None));
    h.add(
        RESOURCEPOOLSTATUSREQUESTS,
        request("done", &ago(5), Some(answered(&ago(5)))),
    );
    h.add(
        RESOURCEPOOLSTATUSREQUESTS,
        request("old", &ago(7200), Some(answered(&ago(3700)))),
    );
    assert_eq!(h.take_queued(), ["new", "old"]);
    // The answer: one status write, nothing else.
    let w = h.sync("new");
    assert_eq!(w.updates.len(), 1);
    let (kind, sub, obj) = &w.updates[0];
    assert_eq!((*kind, *sub), (RESOURCEPOOLSTATUSREQUESTS, Some("status")));
    assert_eq!(obj["status"]["poolCount"], 1);
    assert_eq!(obj["status"]["pools"][0]["totalDevices"], 4);
    assert_eq!(obj["metadata"]["resourceVersion"], "5");
    // Answered: left alone; expired: deleted with its UID as precondition.
    assert!(h.sync("done").updates.is_empty() && h.sync("done").deletes.is_empty());
    let o = h.outcome("old");
    match &o.actions[..] {
        [Action::Delete { name, options, .. }] => {
            assert_eq!(name, "old");
            assert_eq!(options.precondition_uid.as_deref(), Some("uid-old"));
        }
        a => panic!("{a:?}"),
    }
    // Gone: nothing.
    assert!(h.outcome("missing").actions.is_empty());
    // A resync (the same object twice) queues only what expired.
    let store = h.cache.store_for(&REQUEST_WATCH);
    for (name, want) in [("new", false), ("old", true)] {
        let o = store.get(name).unwrap();
        let d = Delta {
            kind: DeltaKind::Updated,
            old: Some(o.clone()),
            new: Some(o),
        };
        let keys = h.ctrl.keys_for(&REQUEST_WATCH, &d, &h.cache);
        assert_eq!(!keys.is_empty(), want, "{name}");
    }
}

#[test]
fn an_incomplete_pool_fails_the_sync_and_writes_nothing() {
    let mut h = Harness::new(PoolStatusController::new(false));
    h.add(
        RESOURCESLICES,
        slice("s1", "pool-1", Some("node-1"), 4, 1, 2),
    );
    h.add(RESOURCEPOOLSTATUSREQUESTS, request("r", &ago(5), None));
    let cx = Cx {
        cache: &h.cache,
        now: h.now,
        client: &h.client,
    };
    let e = h.ctrl.reconcile(&cx, "r").unwrap_err();
    assert_eq!(e.to_string(), "incomplete pools detected, requeueing");
    // Once the second slice is there, the answer goes out.
    h.add(
        RESOURCESLICES,
        slice("s2", "pool-1", Some("node-1"), 4, 1, 2),
    );
    assert_eq!(
        h.sync("r").updates[0].2["status"]["pools"][0]["totalDevices"],
        8
    );
}

#[test]
fn rules_are_read_only_with_their_gate() {
    let rule = json!({"metadata": {"name": "r"}, "spec": {
        "deviceSelector": {"driver": D, "device": "device-0"},
        "taint": {"key": "k", "effect": "NoExecute"}}});
    for (gate, want) in [(true, 1), (false, 0)] {
        let mut h = Harness::new(PoolStatusController::new(gate));
        assert_eq!(h.ctrl.watches().len(), if gate { 4 } else { 3 });
        h.add(RESOURCESLICES, slice("s1", "pool-1", None, 4, 1, 1));
        h.add(DEVICETAINTRULES, rule.clone());
        h.add(RESOURCEPOOLSTATUSREQUESTS, request("r", &ago(5), None));
        let w = h.sync("r");
        assert_eq!(
            w.updates[0].2["status"]["pools"][0]["unavailableDevices"],
            want
        );
    }
}
