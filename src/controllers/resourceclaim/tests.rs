use super::decide::{self, generate_name, FINALIZER, POD_CLAIM_ANNOTATION};
use super::{ResourceClaimController, FIELD_MANAGER};
use crate::api::resources::{PODS, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES};
use crate::controllers::testing::{Harness, Writes};
use crate::controllers::{Controller, Cx, EventType};
use serde_json::{json, Value};

fn pod(name: &str, uid: &str, entries: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1"},
        "spec": {"resourceClaims": entries}, "status": {"phase": "Pending"}})
}

fn template(name: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ns", "uid": "t1"},
        "spec": {"metadata": {"labels": {"app": "x"}, "annotations": {"a": "b"}},
            "spec": {"devices": {"requests": [{"name": "req-0",
                "exactly": {"deviceClassName": "gold"}}]}}}})
}

fn claim(name: &str, owner: Option<(&str, &str)>, reserved: &[(&str, &str)]) -> Value {
    let mut c = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("c-{name}"),
            "resourceVersion": "5"},
        "spec": {"devices": {"requests": [{"name": "req-0",
            "exactly": {"deviceClassName": "gold"}}]}},
        "status": {}});
    if let Some((pod, uid)) = owner {
        c["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid, "controller": true}]);
        c["metadata"]["annotations"] = json!({POD_CLAIM_ANNOTATION: "gpu"});
    }
    if !reserved.is_empty() {
        c["status"]["reservedFor"] = reserved
            .iter()
            .map(|(n, u)| json!({"resource": "pods", "name": n, "uid": u}))
            .collect();
    }
    c
}

fn allocate(c: &mut Value) {
    c["metadata"]["finalizers"] = json!([FINALIZER]);
    c["status"]["allocation"] = json!({"devices": {"results": [{"request": "req-0",
        "driver": "driver.example.com", "pool": "p", "device": "d0"}]}});
}

/// `v` as a later version (the cache keeps a version it has already seen).
fn newer(mut v: Value, rv: &str) -> Value {
    v["metadata"]["resourceVersion"] = json!(rv);
    v
}

fn harness() -> Harness<ResourceClaimController> {
    Harness::new(ResourceClaimController::new(true, true))
}

fn after(h: &Harness<ResourceClaimController>, key: &str) -> Writes {
    let cx = Cx {
        cache: &h.cache,
        now: h.now,
        client: &h.client,
    };
    Writes::of(&h.ctrl.status_after_writes(&cx, key).expect("after"))
}

#[test]
fn a_template_entry_gets_a_generated_claim_then_the_pod_status_names_it() {
    let mut h = harness();
    h.add(RESOURCECLAIMTEMPLATES, template("tmpl"));
    let p = pod(
        "web",
        "p1",
        json!([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]),
    );
    h.add(PODS, p);
    assert_eq!(h.take_queued(), ["pod:ns/web"]);
    let w = h.sync("pod:ns/web");
    assert_eq!(w.creates.len(), 1);
    let c = &w.creates[0].1;
    assert_eq!(c["metadata"]["generateName"], "web-gpu-");
    assert_eq!(
        c["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "p1", "controller": true}])
    );
    assert_eq!(
        c["metadata"]["annotations"],
        json!({"a": "b", POD_CLAIM_ANNOTATION: "gpu"})
    );
    assert_eq!(c["metadata"]["labels"], json!({"app": "x"}));
    assert_eq!(c["spec"]["devices"]["requests"][0]["name"], "req-0");
    assert!(w.events.is_empty(), "{:?}", w.events);
    // The server named it; the watch (or the write's answer) brings it.
    h.add(
        RESOURCECLAIMS,
        claim("web-gpu-x7k2p", Some(("web", "p1")), &[]),
    );
    let w = after(&h, "pod:ns/web");
    assert_eq!(w.applies.len(), 1);
    let (kind, key, manager, object, _) = &w.applies[0];
    assert_eq!(
        (*kind, key.as_str(), *manager),
        (PODS, "ns/web", FIELD_MANAGER)
    );
    assert_eq!(
        object["status"],
        json!({"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "web-gpu-x7k2p"}]})
    );
    // Recorded: nothing more to do.
    let mut p = pod(
        "web",
        "p1",
        json!([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]),
    );
    p["status"]["resourceClaimStatuses"] =
        json!([{"name": "gpu", "resourceClaimName": "web-gpu-x7k2p"}]);
    h.take_queued();
    h.update(PODS, newer(p, "2"));
    assert!(h.take_queued().is_empty());
    assert!(h.sync("pod:ns/web").is_empty());
}

#[test]
fn a_missing_template_is_a_warning_and_a_retry() {
    let mut h = harness();
    h.add(
        PODS,
        pod(
            "web",
            "p1",
            json!([{"name": "gpu", "resourceClaimTemplateName": "nope"}]),
        ),
    );
    let o = h.outcome("pod:ns/web");
    assert!(o.retry_quietly.is_some());
    let w = Writes::of(&o);
    assert_eq!(
        w.events,
        [(
            EventType::Warning,
            "FailedResourceClaimCreation".to_string(),
            "PodResourceClaim gpu: resource claim template \"nope\": resourceclaimtemplate.resource.k8s.io \"nope\" not found".to_string()
        )]
    );
    assert!(w.creates.is_empty());
    // The template arriving queues the pod again.
    h.take_queued();
    h.add(RESOURCECLAIMTEMPLATES, template("nope"));
    assert_eq!(h.take_queued(), ["pod:ns/web"]);
}

#[test]
fn admin_access_needs_its_gate() {
    let mut h = Harness::new(ResourceClaimController::new(false, true));
    let mut t = template("tmpl");
    t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = json!(true);
    h.add(RESOURCECLAIMTEMPLATES, t);
    h.add(
        PODS,
        pod(
            "web",
            "p1",
            json!([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]),
        ),
    );
    let w = h.sync("pod:ns/web");
    assert_eq!(
        w.events[0].2,
        "PodResourceClaim gpu: admin access is requested, but the feature is disabled"
    );
}

#[test]
fn an_orphaned_generated_claim_is_recorded_not_made_again() {
    let mut h = harness();
    h.add(RESOURCECLAIMTEMPLATES, template("tmpl"));
    h.add(
        RESOURCECLAIMS,
        claim("web-gpu-abcde", Some(("web", "p1")), &[]),
    );
    h.add(RESOURCECLAIMS, claim("mine", None, &[]));
    let mut p = pod(
        "web",
        "p1",
        json!([{"name": "gpu", "resourceClaimTemplateName": "tmpl"},
        {"name": "shared", "resourceClaimName": "mine"}]),
    );
    p["status"]["resourceClaimStatuses"] = json!([{"name": "other", "resourceClaimName": "z"}]);
    h.add(PODS, p);
    let w = h.sync("pod:ns/web");
    assert!(w.creates.is_empty());
    assert_eq!(
        w.applies[0].3["status"]["resourceClaimStatuses"],
        json!([{"name": "gpu", "resourceClaimName": "web-gpu-abcde"},
            {"name": "other", "resourceClaimName": "z"}])
    );
}

#[test]
fn a_scheduled_pod_reserves_its_allocated_claim() {
    let mut h = harness();
    let mut c = claim("mine", None, &[("other", "o1")]);
    allocate(&mut c);
    h.add(RESOURCECLAIMS, c);
    let mut p = pod(
        "web",
        "p1",
        json!([{"name": "shared", "resourceClaimName": "mine"}]),
    );
    h.add(PODS, p.clone());
    // Not scheduled: the scheduler's business.
    assert!(!h.take_queued().contains(&"pod:ns/web".to_string()));
    p["spec"]["nodeName"] = json!("node-1");
    h.update(PODS, newer(p, "2"));
    assert_eq!(h.take_queued(), ["pod:ns/web"]);
    let w = h.sync("pod:ns/web");
    assert_eq!(w.updates.len(), 1);
    assert_eq!(w.updates[0].1, Some("status"));
    assert_eq!(
        w.updates[0].2["status"]["reservedFor"],
        json!([{"resource": "pods", "name": "other", "uid": "o1"},
            {"resource": "pods", "name": "web", "uid": "p1"}])
    );
}

#[test]
fn a_finished_pod_releases_and_its_generated_claim_goes() {
    let mut h = harness();
    let mut c = claim("web-gpu-abcde", Some(("web", "p1")), &[("web", "p1")]);
    allocate(&mut c);
    h.add(RESOURCECLAIMS, c);
    let mut p = pod(
        "web",
        "p1",
        json!([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]),
    );
    p["spec"]["nodeName"] = json!("node-1");
    p["status"]["resourceClaimStatuses"] =
        json!([{"name": "gpu", "resourceClaimName": "web-gpu-abcde"}]);
    h.add(PODS, p.clone());
    h.take_queued();
    p["status"]["phase"] = json!("Succeeded");
    h.update(PODS, newer(p, "2"));
    assert_eq!(h.take_queued(), ["claim:ns/web-gpu-abcde"]);
    let w = h.sync("claim:ns/web-gpu-abcde");
    assert_eq!(w.updates.len(), 1);
    let (_, sub, next) = &w.updates[0];
    assert_eq!(*sub, Some("status"));
    assert_eq!(next["status"], json!({}), "no consumers, deallocated");
    // The status write's answer is in the cache when the rest is decided.
    let mut answered = next.clone();
    answered["metadata"]["resourceVersion"] = json!("6");
    h.update(RESOURCECLAIMS, answered);
    let w = after(&h, "claim:ns/web-gpu-abcde");
    assert_eq!(w.updates.len(), 1);
    assert_eq!(w.updates[0].1, None);
    assert_eq!(w.updates[0].2["metadata"]["finalizers"], json!([]));
    assert_eq!(
        w.deletes,
        [(RESOURCECLAIMS, "ns/web-gpu-abcde".to_string())]
    );
}

#[test]
fn a_deleted_pod_leaves_a_user_claim_allocated_without_the_finalizer() {
    let mut h = harness();
    let mut c = claim("mine", None, &[("web", "p1"), ("db", "p2")]);
    c["status"]["allocation"] = json!({"devices": {"results": []}});
    h.add(RESOURCECLAIMS, c);
    let mut p = pod(
        "web",
        "p1",
        json!([{"name": "shared", "resourceClaimName": "mine"}]),
    );
    p["spec"]["nodeName"] = json!("node-1");
    h.add(PODS, p.clone());
    let mut db = pod(
        "db",
        "p2",
        json!([{"name": "shared", "resourceClaimName": "mine"}]),
    );
    db["spec"]["nodeName"] = json!("node-1");
    h.add(PODS, db);
    h.take_queued();
    h.delete(PODS, p);
    assert_eq!(h.take_queued(), ["claim:ns/mine"]);
    let w = h.sync("claim:ns/mine");
    assert_eq!(
        w.updates[0].2["status"],
        json!({"reservedFor": [{"resource": "pods", "name": "db", "uid": "p2"}],
            "allocation": {"devices": {"results": []}}})
    );
    h.update(RESOURCECLAIMS, newer(w.updates[0].2.clone(), "6"));
    assert!(after(&h, "claim:ns/mine").is_empty(), "a pod still uses it");
}

#[test]
fn a_claim_being_deleted_is_deallocated_and_let_go() {
    let mut h = harness();
    let mut c = claim("mine", None, &[]);
    allocate(&mut c);
    c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    h.add(RESOURCECLAIMS, c);
    assert_eq!(h.take_queued(), ["claim:ns/mine"]);
    let w = h.sync("claim:ns/mine");
    assert_eq!(w.updates[0].1, Some("status"));
    assert!(w.updates[0].2["status"]["allocation"].is_null());
    h.update(RESOURCECLAIMS, newer(w.updates[0].2.clone(), "6"));
    let w = after(&h, "claim:ns/mine");
    assert_eq!(w.updates[0].2["metadata"]["finalizers"], json!([]));
    assert!(w.deletes.is_empty(), "not generated");
}

#[test]
fn generated_names_are_cut_in_proportion() {
    assert_eq!(generate_name("web", "gpu"), "web-gpu-");
    let pod = "p".repeat(50);
    let entry = "e".repeat(20);
    let n = generate_name(&pod, &entry);
    // 72 characters with the hyphens: each cut to len * 57 / 72.
    assert_eq!(n, format!("{}-{}", "p".repeat(39), "e".repeat(15)));
}

#[test]
fn names_of_entries() {
    let mut p = pod("web", "p1", json!([]));
    let e = json!({"name": "gpu", "resourceClaimTemplateName": "t"});
    assert!(matches!(
        decide::claim_name(&p, &e),
        Err(decide::NameError::NotCreated(_))
    ));
    p["status"]["resourceClaimStatuses"] = json!([{"name": "gpu"}]);
    assert_eq!(decide::claim_name(&p, &e), Ok((None, true)));
    let bad = json!({"name": "x"});
    assert_eq!(
        decide::claim_name(&p, &bad).unwrap_err().to_string(),
        "pod \"ns/web\", spec.resourceClaim \"x\": none of the supported fields are set"
    );
}

#[test]
fn a_claim_created_here_and_deleted_since_is_not_made_again() {
    use crate::controllers::{Action, Applied};
    let mut h = harness();
    h.add(RESOURCECLAIMTEMPLATES, template("tmpl"));
    let mut p = pod(
        "web",
        "p1",
        json!([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]),
    );
    p["status"]["phase"] = json!("Succeeded");
    p["status"]["resourceClaimStatuses"] =
        json!([{"name": "gpu", "resourceClaimName": "web-gpu-abcde"}]);
    // The controller made the claim; it has been deleted since (its pod is done).
    let made = claim("web-gpu-abcde", Some(("web", "p1")), &[]);
    let create = Action::Create {
        kind: RESOURCECLAIMS,
        namespace: "ns".into(),
        object: made.clone(),
    };
    h.ctrl
        .applied("pod:ns/web", &create, Applied::Done(Some(&made)));
    h.add(PODS, p);
    // Done: its claim's reservation is looked at; and the claim is missing.
    assert_eq!(h.take_queued(), ["claim:ns/web-gpu-abcde", "pod:ns/web"]);
    // No GET (the test client has no server) and no new claim, as upstream's mutation cache.
    assert!(h.sync("pod:ns/web").is_empty());
}
