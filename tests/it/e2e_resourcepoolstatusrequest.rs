//! resourcepoolstatusrequest-controller scenarios, against the sandbox always and a real
//! kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`). A kube-apiserver that does not serve
//! `resource.k8s.io/v1alpha3` ResourcePoolStatusRequests (DRAResourcePoolStatus and that
//! group version off, the default) gets the one line saying the controller stays off; one
//! started with `API_EXTRA_ARGS="--feature-gates=DRAResourcePoolStatus=true,DRAPartitionableDevicesType=true
//! --runtime-config=resource.k8s.io/v1alpha3=true"` runs the whole scenario. There is no DRA
//! driver nor scheduler: the scenario publishes the slices and allocates the claims itself.
//! Each status written is printed (`pool status <request>: ...`, its time left out), so a
//! run with `KCM_E2E_KCM_BINARY` naming upstream's kube-controller-manager can be compared
//! line by line.

use crate::common::*;
use edgekcm::api::client::{Client, PatchType};
use edgekcm::api::resources::{
    DEVICETAINTRULES, NAMESPACES, RESOURCECLAIMS, RESOURCEPOOLSTATUSREQUESTS, RESOURCESLICES,
};
use edgekcm::api::Kind;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

const FLAGS: &[&str] = &[
    "--controllers=resourcepoolstatusrequest-controller",
    "--feature-gates=DRAResourcePoolStatus=true",
];
const LIMIT: Duration = Duration::from_secs(20);

/// Cluster objects of a scenario, deleted at its end.
struct Cluster<'a>(&'a Client, Vec<(Kind, String)>);
impl Drop for Cluster<'_> {
    fn drop(&mut self) {
        for (k, n) in &self.1 {
            let _ = self.0.delete(k, None, n, &Default::default());
        }
    }
}

impl Cluster<'_> {
    fn create(&mut self, kind: Kind, o: Value) -> Value {
        let made = self.0.create(&kind, None, &o).expect("create");
        self.1
            .push((kind, made["metadata"]["name"].as_str().unwrap_or("").into()));
        made
    }
}

fn slice(name: &str, driver: &str, pool: &str, count: i64, spec: Value) -> Value {
    let mut s = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": "node-1",
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": count}}});
    for (k, v) in spec.as_object().into_iter().flatten() {
        s["spec"][k] = v.clone();
    }
    s
}

fn request(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1alpha3", "kind": "ResourcePoolStatusRequest",
        "metadata": {"name": name}, "spec": spec})
}

/// A claim in `ns` allocated as `result` says (driver, pool, device and the rest).
fn allocated(admin: &Client, ns: &str, name: &str, result: Value) {
    let c = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "req-0",
            "exactly": {"deviceClassName": "gpu"}}]}}});
    let mut c = admin.create(&RESOURCECLAIMS, Some(ns), &c).expect("claim");
    let mut r = json!({"request": "req-0"});
    for (k, v) in result.as_object().into_iter().flatten() {
        r[k] = v.clone();
    }
    c["status"] = json!({"allocation": {"devices": {"results": [r]}}});
    admin
        .update_subresource(&RESOURCECLAIMS, &c, "status")
        .expect("allocation");
}

/// A request's status once written, its condition's time checked and left out.
fn answer(admin: &Client, name: &str) -> Value {
    let mut s = eventually(LIMIT, "the request's status", || {
        let r = admin.get(&RESOURCEPOOLSTATUSREQUESTS, None, name).ok()?;
        r.get("status").filter(|s| !s.is_null()).cloned()
    });
    let c = &mut s["conditions"][0];
    let t = c["lastTransitionTime"].as_str().unwrap_or("");
    assert!(
        edgekcm::compat::timefmt::parse_rfc3339(t).is_some(),
        "{t:?}"
    );
    c["lastTransitionTime"] = json!("-");
    eprintln!(
        "pool status {}: {s}",
        name.split('-').next().unwrap_or(name)
    );
    s
}

fn complete(message: &str) -> Value {
    json!([{"type": "Complete", "status": "True", "lastTransitionTime": "-",
        "reason": "CalculationComplete", "message": message}])
}

fn served(t: &Target) -> bool {
    t.admin()
        .get_path("/apis/resource.k8s.io/v1alpha3")
        .is_ok_and(|l| edgekcm::controllers::kit::served::listed(&l, "resourcepoolstatusrequests"))
}

/// A driver's pools: `pool-a` (four devices, one tainted, one under a rule, one allocated,
/// one looked at with admin access), `pool-b` (partitionable: a counter slice and a device
/// slice), `pool-c` (one shareable device with capacity consumed), `pool-d` (one of its two
/// slices). The partition attribute is returned when the API server kept it.
fn publish_pools(cluster: &mut Cluster<'_>, n: &str, d: &str) -> Option<String> {
    let taint = json!([{"key": "example.com/broken", "effect": "NoSchedule"}]);
    cluster.create(
        RESOURCESLICES,
        slice(
            &format!("{n}-a"),
            d,
            "pool-a",
            1,
            json!({"devices": [
            {"name": "gpu-0"}, {"name": "gpu-1", "taints": taint}, {"name": "gpu-2"},
            {"name": "gpu-3"}]}),
        ),
    );
    cluster.create(
        DEVICETAINTRULES,
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": format!("{n}-rule")},
            "spec": {"deviceSelector": {"driver": d, "pool": "pool-a", "device": "gpu-3"},
                "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"}}}),
    );
    allocated(
        cluster.0,
        n,
        "on-a",
        json!({"driver": d, "pool": "pool-a", "device": "gpu-0"}),
    );
    // Admin access looks at a device without using it (the namespace must allow it).
    let label = json!({"metadata": {"labels": {"resource.kubernetes.io/admin-access": "true"}}});
    cluster
        .0
        .patch(&NAMESPACES, None, n, PatchType::Merge, &label, None)
        .expect("admin access label");
    let admin_access =
        json!({"driver": d, "pool": "pool-a", "device": "gpu-2", "adminAccess": true});
    allocated(cluster.0, n, "admin-a", admin_access);
    let attr = format!("{d}/profile");
    let dev = |name: &str, typ: &str, mem: &str| {
        json!({"name": name, "attributes": {"profile": {"string": typ}},
            "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": mem}}}]})
    };
    cluster.create(
        RESOURCESLICES,
        slice(
            &format!("{n}-b-counters"),
            d,
            "pool-b",
            2,
            json!({
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}]}),
        ),
    );
    let devices = cluster.create(
        RESOURCESLICES,
        slice(
            &format!("{n}-b-devices"),
            d,
            "pool-b",
            2,
            json!({
            "partitionTypeAttribute": attr,
            "devices": [dev("full-0", "Full", "80Gi"), dev("half-0", "Half", "40Gi"),
                dev("half-1", "Half", "40Gi")]}),
        ),
    );
    allocated(
        cluster.0,
        n,
        "on-b",
        json!({"driver": d, "pool": "pool-b", "device": "half-0"}),
    );
    cluster.create(
        RESOURCESLICES,
        slice(
            &format!("{n}-c"),
            d,
            "pool-c",
            1,
            json!({"devices": [
            {"name": "shared-0", "allowMultipleAllocations": true,
                "capacity": {"memory": {"value": "40Gi"}}}]}),
        ),
    );
    let consumed = json!({"driver": d, "pool": "pool-c", "device": "shared-0",
        "shareID": "a1b2c3d4-0000-4000-8000-000000000001", "consumedCapacity": {"memory": "10Gi"}});
    allocated(cluster.0, n, "on-c", consumed);
    cluster.create(
        RESOURCESLICES,
        slice(
            &format!("{n}-d-1"),
            d,
            "pool-d",
            2,
            json!({"devices": [{"name": "x"}]}),
        ),
    );
    // Kept only with DRAPartitionableDevicesType on in kube-apiserver.
    devices["spec"]["partitionTypeAttribute"]
        .as_str()
        .map(str::to_string)
}

/// A request answered two hours ago, as its status says: deleted once the controller starts.
fn answered_long_ago(cluster: &mut Cluster<'_>, name: &str, driver: &str) {
    let mut old = cluster.create(
        RESOURCEPOOLSTATUSREQUESTS,
        request(name, json!({"driver": driver})),
    );
    let hours_ago = SystemTime::now() - Duration::from_secs(2 * 3600);
    old["status"] = json!({"poolCount": 0, "conditions": [{"type": "Complete", "status": "True",
        "lastTransitionTime": edgekcm::compat::timefmt::rfc3339(hours_ago),
        "reason": "CalculationComplete", "message": "Calculated status for 0 pools"}]});
    cluster
        .0
        .update_subresource(&RESOURCEPOOLSTATUSREQUESTS, &old, "status")
        .expect("an old answer");
}

/// A pool's entry with its counts: slices, total, allocated, available, unavailable.
fn pool(d: &str, name: &str, counts: [i64; 5]) -> Value {
    json!({"driver": d, "poolName": name, "generation": 1, "nodeName": "node-1",
        "resourceSliceCount": counts[0], "totalDevices": counts[1],
        "allocatedDevices": counts[2], "availableDevices": counts[3],
        "unavailableDevices": counts[4]})
}

fn unanswered(admin: &Client, name: &str) {
    let r = admin
        .get(&RESOURCEPOOLSTATUSREQUESTS, None, name)
        .expect("pending request");
    assert!(r.get("status").is_none_or(Value::is_null), "{r}");
}

/// The pools of one driver: counts with a tainted device, a rule, an allocation and an
/// admin-access one; a partitionable pool; a shareable one with capacity consumed; an incomplete one (cut off by the limit in one
/// request, holding back the answer of another until its second slice comes and the
/// request is touched); an answer for a driver without pools; an answered request past its
/// hour deleted at the start.
fn scenario_pool_status(t: &Target) {
    if !t.at_least(37, "ResourcePoolStatusRequests (v1.37)") {
        return;
    }
    if !served(t) {
        let mut kcm = Kcm::start(t, "rpsr-off", FLAGS);
        kcm.wait_for_line(
            "the line saying it stays off",
            "does not serve resource.k8s.io/v1alpha3 resourcepoolstatusrequests",
        );
        return;
    }
    let ns = Ns::with_cleanup(t, "e2e-rpsr", &[RESOURCECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let d = format!("{n}.example.com");
    let mut cluster = Cluster(admin, Vec::new());
    let attr = publish_pools(&mut cluster, n, &d);
    answered_long_ago(&mut cluster, &format!("old-{n}"), &d);
    let (r1, r2, r3) = (
        format!("first-{n}"),
        format!("pending-{n}"),
        format!("none-{n}"),
    );
    cluster.create(
        RESOURCEPOOLSTATUSREQUESTS,
        request(&r1, json!({"driver": d, "limit": 3})),
    );
    cluster.create(
        RESOURCEPOOLSTATUSREQUESTS,
        request(&r2, json!({"driver": d, "poolName": "pool-d"})),
    );
    cluster.create(
        RESOURCEPOOLSTATUSREQUESTS,
        request(&r3, json!({"driver": "nothing.example.com"})),
    );
    let _kcm = Kcm::start(t, "rpsr", FLAGS);

    let s = answer(admin, &r1);
    let pool = |name: &str, counts: [i64; 5]| pool(&d, name, counts);
    let mut b = pool("pool-b", [2, 3, 1, 2, 0]);
    if let Some(attr) = &attr {
        b["partitionSummary"] = json!([
            {"attribute": attr, "type": "Full", "total": 1, "allocatable": 0},
            {"attribute": attr, "type": "Half", "total": 2, "allocatable": 1}]);
    }
    let mut c = pool("pool-c", [1, 1, 1, 0, 0]);
    c["shareableSummary"] = json!({"fullyAvailableDevices": 0, "partiallyAvailableDevices": 1,
        "capacity": [{"name": "memory", "total": "40Gi", "consumed": "10Gi", "available": "30Gi"}]});
    let want = json!({"poolCount": 4, "pools": [pool("pool-a", [1, 4, 1, 1, 2]), b, c],
        "conditions": complete("Calculated status for 3 pools")});
    assert_eq!(s, want);

    let s = answer(admin, &r3);
    assert_eq!(
        s,
        json!({"poolCount": 0, "conditions": complete("Calculated status for 0 pools")})
    );
    eventually(LIMIT, "the old answer deleted", || {
        admin
            .get(&RESOURCEPOOLSTATUSREQUESTS, None, &format!("old-{n}"))
            .is_err()
            .then_some(())
    });

    // Incomplete: retried a few times, then left without an answer; a slice alone does not
    // bring it back, a change of the request does.
    std::thread::sleep(Duration::from_secs(3));
    unanswered(admin, &r2);
    cluster.create(
        RESOURCESLICES,
        slice(
            &format!("{n}-d-2"),
            &d,
            "pool-d",
            2,
            json!({"devices": [{"name": "y"}]}),
        ),
    );
    std::thread::sleep(Duration::from_secs(2));
    unanswered(admin, &r2);
    let touch = json!({"metadata": {"labels": {"touched": "yes"}}});
    admin
        .patch(
            &RESOURCEPOOLSTATUSREQUESTS,
            None,
            &r2,
            PatchType::Merge,
            &touch,
            None,
        )
        .expect("touch");
    let s = answer(admin, &r2);
    assert_eq!(
        s,
        json!({"poolCount": 1, "pools": [pool("pool-d", [2, 2, 0, 2, 0])],
            "conditions": complete("Calculated status for 1 pools")})
    );
}

crate::scenarios! {
    resourcepoolstatusrequest_pool_status => scenario_pool_status,
}
