//! device-taint-eviction-controller scenarios, against the sandbox always and a real
//! kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`). There is no scheduler nor DRA
//! driver: the scenarios publish ResourceSlices, allocate claims (`status.allocation` and
//! `reservedFor`) and bind pods themselves, as those would. Slices and rules are cluster
//! objects: each scenario uses a driver name of its own and deletes them at the end.

use crate::common::*;
use crate::e2e_nodelifecycle::{condition, deleted, events};
use edgekcm::api::client::{Client, PatchType};
use edgekcm::api::resources::{DEVICETAINTRULES, PODS, RESOURCECLAIMS, RESOURCESLICES};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

const ONLY: &str = "--controllers=device-taint-eviction-controller";
const REASON: &str = "DeviceTaintManagerEviction";
const LIMIT: Duration = Duration::from_secs(20);

fn now() -> String {
    edgekcm::compat::timefmt::rfc3339(SystemTime::now())
}

/// A ResourceSlice of `driver`'s pool `node-1` with `devices` (name -> taints).
fn slice_of(driver: &str, devices: &[(&str, Value)]) -> Value {
    let d: Vec<Value> = devices
        .iter()
        .map(|(n, t)| json!({"name": n, "taints": t}))
        .collect();
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("{}-node-1", driver.split('.').next().unwrap_or(driver))},
        "spec": {"driver": driver, "nodeName": "node-1",
            "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
            "devices": d}})
}

fn no_execute(key: &str) -> Value {
    json!([{"key": key, "value": "bad", "effect": "NoExecute", "timeAdded": now()}])
}

/// A claim allocated with `driver`'s `device`, its allocation tolerating `tolerations`,
/// and a bound pod reserved on it.
fn pod_with_device(
    admin: &Client,
    ns: &str,
    name: &str,
    driver: &str,
    device: &str,
    tolerations: Value,
) {
    let c = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "req-0",
            "exactly": {"deviceClassName": "gpu"}}]}}});
    let mut c = admin.create(&RESOURCECLAIMS, Some(ns), &c).expect("claim");
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": "node-1", "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                "resources": {"claims": [{"name": "gpu"}]}}]}});
    let p = admin.create(&PODS, Some(ns), &p).expect("pod");
    let mut result =
        json!({"request": "req-0", "driver": driver, "pool": "node-1", "device": device});
    if !tolerations.is_null() {
        result["tolerations"] = tolerations;
    }
    c["status"] = json!({"allocation": {"devices": {"results": [result]}},
        "reservedFor": [{"resource": "pods", "name": name, "uid": p["metadata"]["uid"]}]});
    admin
        .update_subresource(&RESOURCECLAIMS, &c, "status")
        .expect("allocation");
}

/// The cluster objects of a scenario, deleted at its end.
struct Cluster<'a>(&'a Client, Vec<(edgekcm::api::Kind, String)>);
impl Drop for Cluster<'_> {
    fn drop(&mut self) {
        for (k, n) in &self.1 {
            let _ = self.0.delete(k, None, n, &Default::default());
        }
    }
}

fn tolerate(secs: Option<i64>) -> Value {
    let mut t = json!({"key": "example.com/broken", "operator": "Exists", "effect": "NoExecute"});
    if let Some(s) = secs {
        t["tolerationSeconds"] = json!(s);
    }
    json!([t])
}

fn event_messages(admin: &Client, ns: &str, pod: &str) -> Vec<String> {
    events(admin, ns, REASON, pod)
        .iter()
        .map(|e| {
            assert_eq!(
                e["source"]["component"], "device-taint-eviction-controller",
                "{e}"
            );
            assert_eq!(e["type"], "Normal");
            e["message"].as_str().unwrap_or("").to_string()
        })
        .collect()
}

/// A NoExecute taint on a device in its ResourceSlice: the pod whose claim's allocation does
/// not tolerate it is deleted at once, with `DisruptionTarget` and "Marking for deletion";
/// one tolerating it for ten minutes waits, and its deletion is cancelled (with its Event)
/// when the taint goes; one tolerating it for ever stays.
fn scenario_slice_taint(t: &Target) {
    if !t.at_least(
        37,
        "device taints (DRADeviceTaints and resource.k8s.io/v1 DeviceTaintRules, v1.37)",
    ) {
        return;
    }
    let ns = Ns::with_cleanup(t, "e2e-dte-slice", &[PODS, RESOURCECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let driver = format!("{n}.example.com");
    let slice = slice_of(&driver, &[("gpu-0", json!([]))]);
    let name = slice["metadata"]["name"].as_str().unwrap_or("").to_string();
    admin.create(&RESOURCESLICES, None, &slice).expect("slice");
    let _cluster = Cluster(admin, vec![(RESOURCESLICES, name.clone())]);
    pod_with_device(admin, n, "intolerant", &driver, "gpu-0", Value::Null);
    pod_with_device(admin, n, "for600", &driver, "gpu-0", tolerate(Some(600)));
    pod_with_device(admin, n, "forever", &driver, "gpu-0", tolerate(None));
    let _kcm = Kcm::start(t, "dte-slice", &[ONLY]);
    std::thread::sleep(Duration::from_secs(3));
    assert!(deleted(admin, n, "intolerant").is_none(), "no taint yet");
    let taint = json!({"spec": {"devices": [{"name": "gpu-0", "taints": no_execute("example.com/broken")}]}});
    admin
        .patch(&RESOURCESLICES, None, &name, PatchType::Merge, &taint, None)
        .expect("taint");
    let gone = eventually(LIMIT, "intolerant deleted", || {
        deleted(admin, n, "intolerant")
    });
    if let Some(p) = gone {
        let c = condition(&p, "DisruptionTarget").expect("DisruptionTarget");
        assert_eq!(c["reason"], "DeletionByDeviceTaintManager");
        assert_eq!(
            c["message"],
            "Device Taint manager: deleting due to NoExecute taint"
        );
        assert_eq!(c["status"], "True");
        assert!(c.get("observedGeneration").is_none(), "{c}");
    }
    let ev = eventually(LIMIT, "marked", || {
        let e = event_messages(admin, n, "intolerant");
        (!e.is_empty()).then_some(e)
    });
    assert_eq!(ev, vec!["Marking for deletion"]);
    std::thread::sleep(Duration::from_secs(2));
    assert!(deleted(admin, n, "for600").is_none());
    assert!(deleted(admin, n, "forever").is_none());
    let untaint = json!({"spec": {"devices": [{"name": "gpu-0"}]}});
    admin
        .patch(
            &RESOURCESLICES,
            None,
            &name,
            PatchType::Merge,
            &untaint,
            None,
        )
        .expect("untaint");
    let ev = eventually(LIMIT, "cancelled", || {
        let e = event_messages(admin, n, "for600");
        (!e.is_empty()).then_some(e)
    });
    assert_eq!(ev, vec!["Cancelling deletion"]);
    assert!(deleted(admin, n, "for600").is_none());
    assert!(event_messages(admin, n, "forever").is_empty());
}

fn rule_condition(admin: &Client, name: &str) -> Option<Value> {
    let r = admin.get(&DEVICETAINTRULES, None, name).ok()?;
    condition(&r, "EvictionInProgress").cloned()
}

/// DeviceTaintRules: a NoExecute rule selecting one device evicts the pod using it and
/// reports `EvictionInProgress` until it is `Completed`; a None rule evicts nothing and says
/// what it would do.
fn scenario_rule(t: &Target) {
    if !t.at_least(
        37,
        "device taints (DRADeviceTaints and resource.k8s.io/v1 DeviceTaintRules, v1.37)",
    ) {
        return;
    }
    let ns = Ns::with_cleanup(t, "e2e-dte-rule", &[PODS, RESOURCECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let driver = format!("{n}.example.com");
    let slice = slice_of(&driver, &[("gpu-0", json!([])), ("gpu-1", json!([]))]);
    let slice_name = slice["metadata"]["name"].as_str().unwrap_or("").to_string();
    admin.create(&RESOURCESLICES, None, &slice).expect("slice");
    pod_with_device(admin, n, "on-gpu-0", &driver, "gpu-0", Value::Null);
    pod_with_device(admin, n, "on-gpu-1", &driver, "gpu-1", Value::Null);
    let rule = |name: &str, device: &str, effect: &str| {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": name},
            "spec": {"deviceSelector": {"driver": driver, "device": device},
                "taint": {"key": "example.com/maintenance", "effect": effect, "timeAdded": now()}}})
    };
    let (evict, dry) = (format!("{n}-evict"), format!("{n}-dry"));
    let _cluster = Cluster(
        admin,
        vec![
            (RESOURCESLICES, slice_name),
            (DEVICETAINTRULES, evict.clone()),
            (DEVICETAINTRULES, dry.clone()),
        ],
    );
    let _kcm = Kcm::start(t, "dte-rule", &[ONLY]);
    std::thread::sleep(Duration::from_secs(3));
    admin
        .create(&DEVICETAINTRULES, None, &rule(&dry, "gpu-1", "None"))
        .expect("None rule");
    let c = eventually(LIMIT, "the None rule's condition", || {
        rule_condition(admin, &dry)
    });
    assert_eq!(c["status"], "False");
    assert_eq!(c["reason"], "NoEffect");
    assert_eq!(c["message"], "1 published device selected. 1 allocated device selected. 1 pod would be evicted in 1 namespace if the effect was NoExecute. This information will not be updated again. Recreate the DeviceTaintRule to trigger an update.");
    assert_eq!(c["observedGeneration"], 1);
    admin
        .create(&DEVICETAINTRULES, None, &rule(&evict, "gpu-0", "NoExecute"))
        .expect("NoExecute rule");
    let gone = eventually(LIMIT, "on-gpu-0 deleted", || deleted(admin, n, "on-gpu-0"));
    if let Some(p) = gone {
        let c = condition(&p, "DisruptionTarget").expect("DisruptionTarget");
        assert_eq!(c["reason"], "DeletionByDeviceTaintManager");
    }
    assert_eq!(
        event_messages(admin, n, "on-gpu-0"),
        vec!["Marking for deletion"]
    );
    // Ten seconds after the eviction, the rule's status says it is done.
    let c = eventually(Duration::from_secs(30), "Completed", || {
        rule_condition(admin, &evict).filter(|c| c["reason"] == "Completed")
    });
    assert_eq!(c["status"], "False");
    assert_eq!(c["message"], "1 pod evicted since starting the controller.");
    assert_eq!(c["observedGeneration"], 1);
    assert!(deleted(admin, n, "on-gpu-1").is_none());
    assert!(event_messages(admin, n, "on-gpu-1").is_empty());
    if t.is_real() {
        let r = admin
            .get_raw(&format!(
                "/apis/resource.k8s.io/v1/devicetaintrules/{evict}"
            ))
            .expect("rule");
        assert!(
            r.contains(r#""manager":"device-taint-eviction-controller","operation":"Apply""#),
            "{r}"
        );
    }
}

scenarios! {
    device_taint_slice => scenario_slice_taint,
    device_taint_rule => scenario_rule,
}
