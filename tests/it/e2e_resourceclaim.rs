//! resourceclaim-controller scenarios, against the sandbox always and a real kube-apiserver
//! with `KCM_E2E_KUBECONFIG` (`real_*`, edgekcm with `--use-service-account-credentials`,
//! writing as `resource-claim-controller`). There is no scheduler: the scenarios bind pods
//! (`spec.nodeName` at creation), allocate claims (`status.allocation` and the
//! delete-protection finalizer) and finish pods (`status.phase`) themselves.

use crate::common::*;
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{EVENTS, PODS, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES};
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(20);
const ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";
const FINALIZER: &str = "resource.kubernetes.io/delete-protection";

fn template(admin: &Client, ns: &str, name: &str) {
    let t = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"metadata": {"labels": {"team": "ml"}},
            "spec": {"devices": {"requests": [{"name": "req-0",
                "exactly": {"deviceClassName": "gold"}}]}}}});
    admin
        .create(&RESOURCECLAIMTEMPLATES, Some(ns), &t)
        .expect("create template");
}

fn user_claim(admin: &Client, ns: &str, name: &str) -> Value {
    let c = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "req-0",
            "exactly": {"deviceClassName": "gold"}}]}}});
    admin
        .create(&RESOURCECLAIMS, Some(ns), &c)
        .expect("create claim")
}

/// A pod using `entries` (its `spec.resourceClaims`), bound to `node` unless empty.
fn pod(admin: &Client, ns: &str, name: &str, node: &str, entries: Value) -> Value {
    let claims: Vec<Value> = entries
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| json!({"name": e["name"]}))
        .collect();
    let mut spec = json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
        "resources": {"claims": claims}}], "resourceClaims": entries});
    if !node.is_empty() {
        spec["nodeName"] = json!(node);
    }
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec});
    admin.create(&PODS, Some(ns), &p).expect("create pod")
}

/// Play the scheduler: the claim allocated, with the finalizer the scheduler adds.
fn allocate(admin: &Client, ns: &str, name: &str) {
    let mut c = admin.get(&RESOURCECLAIMS, Some(ns), name).expect("claim");
    c["metadata"]["finalizers"] = json!([FINALIZER]);
    let mut c = admin.update(&RESOURCECLAIMS, &c).expect("finalizer");
    c["status"]["allocation"] = json!({"devices": {"results": [{"request": "req-0",
        "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}]}});
    admin
        .update_subresource(&RESOURCECLAIMS, &c, "status")
        .expect("allocation");
}

fn get_claim(admin: &Client, ns: &str, name: &str) -> Option<Value> {
    admin.get(&RESOURCECLAIMS, Some(ns), name).ok()
}

fn reserved_uids(c: &Value) -> Vec<String> {
    c["status"]["reservedFor"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str().map(str::to_string))
        .collect()
}

/// Play the kubelet: the pod's phase.
fn finish(admin: &Client, ns: &str, name: &str) {
    let mut p = admin.get(&PODS, Some(ns), name).expect("pod");
    p["status"]["phase"] = json!("Succeeded");
    admin
        .update_subresource(&PODS, &p, "status")
        .expect("pod phase");
}

fn warnings(admin: &Client, ns: &str, pod: &str) -> Vec<(String, String)> {
    admin
        .list(&EVENTS, Some(ns), &ListOptions::default())
        .expect("list events")
        .items
        .iter()
        .filter(|e| e["involvedObject"]["name"] == pod && e["type"] == "Warning")
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").to_string(),
                e["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// A pod's template entry gets a generated claim, recorded in the pod's status; bound and
/// allocated, the claim is reserved for the pod; the pod done, the claim is released,
/// deallocated, let go and deleted.
fn scenario_claim_from_template_lifecycle(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-rc", &[PODS, RESOURCECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = Kcm::start(t, "rc", &["--controllers=resourceclaim-controller"]);
    template(admin, n, "gpu-tmpl");
    let p = pod(
        admin,
        n,
        "trainer",
        "node-1",
        json!([{"name": "gpu", "resourceClaimTemplateName": "gpu-tmpl"}]),
    );
    let uid = p["metadata"]["uid"].as_str().unwrap_or("").to_string();
    let claim_name = eventually(LIMIT, "claim recorded in the pod status", || {
        let p = admin.get(&PODS, Some(n), "trainer").ok()?;
        let s = p["status"]["resourceClaimStatuses"].as_array()?.clone();
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0]["name"], "gpu");
        s[0]["resourceClaimName"].as_str().map(str::to_string)
    });
    assert!(claim_name.starts_with("trainer-gpu-"), "{claim_name}");
    assert_eq!(claim_name.len(), "trainer-gpu-".len() + 5);
    let c = get_claim(admin, n, &claim_name).expect("generated claim");
    assert_eq!(c["metadata"]["annotations"][ANNOTATION], "gpu");
    assert_eq!(c["metadata"]["labels"], json!({"team": "ml"}));
    let owner = &c["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            owner["kind"].as_str(),
            owner["name"].as_str(),
            owner["uid"].as_str()
        ),
        (Some("Pod"), Some("trainer"), Some(uid.as_str()))
    );
    assert_eq!(owner["controller"], true);
    assert_eq!(c["spec"]["devices"]["requests"][0]["name"], "req-0");
    if t.is_real() {
        // The client drops managedFields from what it decodes; read the text.
        let p = admin
            .get_raw(&format!("/api/v1/namespaces/{n}/pods/trainer"))
            .expect("pod");
        assert!(
            p.contains(r#""manager":"ResourceClaimController","operation":"Apply""#),
            "{p}"
        );
    }
    allocate(admin, n, &claim_name);
    eventually(LIMIT, "claim reserved for the pod", || {
        let c = get_claim(admin, n, &claim_name)?;
        (reserved_uids(&c) == [uid.clone()]).then_some(())
    });
    finish(admin, n, "trainer");
    eventually(LIMIT, "generated claim deleted", || {
        get_claim(admin, n, &claim_name).is_none().then_some(())
    });
    assert!(warnings(admin, n, "trainer").is_empty());
}

/// A missing template is a Warning on the pod; the template arriving, the claim is made.
fn scenario_missing_template_then_made(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-rc-missing", &[PODS, RESOURCECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = Kcm::start(t, "rc-missing", &["--controllers=resourceclaim-controller"]);
    pod(
        admin,
        n,
        "waiter",
        "",
        json!([{"name": "gpu", "resourceClaimTemplateName": "later"}]),
    );
    let w = eventually(LIMIT, "FailedResourceClaimCreation", || {
        warnings(admin, n, "waiter")
            .into_iter()
            .find(|w| w.0 == "FailedResourceClaimCreation")
    });
    assert_eq!(
        w.1,
        "PodResourceClaim gpu: resource claim template \"later\": resourceclaimtemplate.resource.k8s.io \"later\" not found"
    );
    template(admin, n, "later");
    eventually(LIMIT, "claim made once the template exists", || {
        let p = admin.get(&PODS, Some(n), "waiter").ok()?;
        p["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
            .as_str()
            .map(str::to_string)
    });
}

/// A user's claim shared by two bound pods is reserved for both; one deleted, its
/// reservation goes and the claim stays allocated; the other done too, the claim is
/// deallocated and let go but kept (the user made it).
fn scenario_shared_claim_released(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-rc-shared", &[PODS, RESOURCECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = Kcm::start(t, "rc-shared", &["--controllers=resourceclaim-controller"]);
    user_claim(admin, n, "shared");
    allocate(admin, n, "shared");
    let entries = json!([{"name": "gpu", "resourceClaimName": "shared"}]);
    let a = pod(admin, n, "a", "node-1", entries.clone());
    let b = pod(admin, n, "b", "node-1", entries);
    let uid = |p: &Value| p["metadata"]["uid"].as_str().unwrap_or("").to_string();
    eventually(LIMIT, "reserved for both pods", || {
        let mut r = reserved_uids(&get_claim(admin, n, "shared")?);
        r.sort();
        let mut want = vec![uid(&a), uid(&b)];
        want.sort();
        (r == want).then_some(())
    });
    delete_pod_now(admin, n, "a").expect("delete a");
    eventually(LIMIT, "a's reservation gone", || {
        let c = get_claim(admin, n, "shared")?;
        (reserved_uids(&c) == [uid(&b)]).then_some(())
    });
    let c = get_claim(admin, n, "shared").expect("claim");
    assert!(
        c["status"]["allocation"].is_object(),
        "still allocated: {c}"
    );
    finish(admin, n, "b");
    let c = eventually(LIMIT, "deallocated and let go", || {
        let c = get_claim(admin, n, "shared")?;
        (c["status"]["allocation"].is_null() && c["metadata"]["finalizers"].is_null()).then_some(c)
    });
    assert!(c["status"]["reservedFor"].is_null(), "{c}");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        get_claim(admin, n, "shared").is_some(),
        "a user's claim stays"
    );
}

scenarios! {
    claim_from_template_lifecycle => scenario_claim_from_template_lifecycle,
    missing_template_then_made => scenario_missing_template_then_made,
    shared_claim_released => scenario_shared_claim_released,
}
