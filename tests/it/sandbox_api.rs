//! The sandbox API server over real HTTP, with a plain ureq client: discovery, CRUD, lists and
//! watches.

use crate::sandbox_http::*;

#[test]
fn health_version_and_discovery() {
    let (_sb, c) = sandbox();
    for p in ["/healthz", "/readyz", "/livez"] {
        let r = c.get(p);
        assert_eq!((r.code, r.body), (200, json!("ok")));
    }
    assert_eq!(c.get("/version").body["gitVersion"], "v1.37.2-sandbox");
    let api = c.get("/api").body;
    assert_eq!(api["kind"], "APIVersions");
    assert_eq!(api["versions"], json!(["v1"]));
    let groups = c.get("/apis").body;
    assert_eq!(groups["kind"], "APIGroupList");
    let apps = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "apps")
        .expect("apps group");
    assert_eq!(
        apps["preferredVersion"],
        json!({"groupVersion": "apps/v1", "version": "v1"})
    );
    let names = |path: &str| -> Vec<String> {
        let l = c.get(path).body;
        assert_eq!(l["kind"], "APIResourceList");
        l["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    let core = names("/api/v1");
    for n in [
        "pods",
        "pods/status",
        "namespaces/finalize",
        "serviceaccounts/token",
    ] {
        assert!(core.contains(&n.to_string()), "{n}");
    }
    assert!(!core.contains(&"configmaps/status".to_string()));
    let a = names("/apis/apps/v1");
    assert!(a.contains(&"deployments/scale".to_string()));
    assert!(a.contains(&"deployments/status".to_string()));
    assert!(names("/apis/certificates.k8s.io/v1")
        .contains(&"certificatesigningrequests/approval".to_string()));
    let dep = c.get("/apis/apps/v1").body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "deployments")
        .cloned()
        .unwrap();
    assert_eq!(dep["singularName"], "deployment");
    assert_eq!(dep["namespaced"], true);
    assert_eq!(dep["kind"], "Deployment");
    assert_eq!(c.get("/apis/nope/v1").code, 404);
    assert_eq!(c.get("/api/v1/widgets").code, 404);
}

#[test]
fn crud_generate_name_and_errors() {
    let (sb, c) = sandbox();
    let r = c.post(CMS, cm("a", json!({})));
    assert_eq!(r.code, 201);
    let m = &r.body["metadata"];
    assert_eq!(m["namespace"], "default");
    assert_eq!(m["generation"], 1);
    assert_eq!(m["uid"].as_str().unwrap().len(), 36);
    let ts = m["creationTimestamp"].as_str().unwrap();
    assert!(
        ts.len() == 20 && ts.ends_with('Z') && &ts[10..11] == "T",
        "{ts}"
    );
    assert!(rv(&r.body) > 0);

    let got = c.get(&format!("{CMS}/a")).body;
    assert_eq!(got, r.body);

    let dup = c.post(CMS, cm("a", json!({})));
    assert_eq!(dup.code, 409);
    assert_eq!(dup.body["reason"], "AlreadyExists");
    assert_eq!(dup.body["message"], "configmaps \"a\" already exists");
    assert_eq!(dup.body["kind"], "Status");
    assert_eq!(
        dup.body["details"],
        json!({"name": "a", "kind": "configmaps"})
    );

    let g = c.post(
        CMS,
        json!({"metadata": {"generateName": "gen-"}, "data": {}}),
    );
    assert_eq!(g.code, 201);
    let name = g.body["metadata"]["name"].as_str().unwrap();
    assert_eq!(name.len(), 9);
    assert!(name[4..]
        .chars()
        .all(|ch| "bcdfghjklmnpqrstvwxz2456789".contains(ch)));

    let bad = c.post(CMS, json!({"metadata": {}}));
    assert_eq!(bad.code, 422);
    assert_eq!(bad.body["reason"], "Invalid");
    let nons = c.post("/api/v1/namespaces/nope/configmaps", cm("x", json!({})));
    assert_eq!(nons.code, 404);
    assert_eq!(nons.body["message"], "namespaces \"nope\" not found");
    let junk = c.call("POST", CMS, "application/json", None);
    assert_eq!(junk.code, 400);
    assert_eq!(junk.body["reason"], "BadRequest");

    let mut upd = got.clone();
    upd["data"]["k"] = json!("v2");
    let u = c.put(&format!("{CMS}/a"), upd);
    assert_eq!(u.code, 200);
    assert_eq!(u.body["data"]["k"], "v2");
    assert!(rv(&u.body) > rv(&got));
    assert_eq!(u.body["metadata"]["uid"], got["metadata"]["uid"]);

    let nf = c.get(&format!("{CMS}/zz"));
    assert_eq!(nf.code, 404);
    assert_eq!(nf.body["message"], "configmaps \"zz\" not found");
    let dnf = c.get("/apis/apps/v1/namespaces/default/deployments/zz");
    assert_eq!(dnf.body["message"], "deployments.apps \"zz\" not found");
    assert_eq!(dnf.body["details"]["group"], "apps");

    let d = c.delete(&format!("{CMS}/a"), None);
    assert_eq!(d.code, 200);
    assert_eq!(d.body["status"], "Success");
    assert_eq!(c.get(&format!("{CMS}/a")).code, 404);
    assert!(sb.get(&CONFIGMAPS, Some("default"), "a").is_none());

    // Direct store access follows the same rules.
    let made = sb.create(&CONFIGMAPS, cm("direct", json!({}))).unwrap();
    assert_eq!(made["metadata"]["namespace"], "default");
    assert!(sb.create(&CONFIGMAPS, cm("direct", json!({}))).is_err());
    assert_eq!(c.get(&format!("{CMS}/direct")).code, 200);
    assert_eq!(sb.list(&NAMESPACES, None).len(), 4);
    sb.delete(&CONFIGMAPS, Some("default"), "direct").unwrap();
    assert!(sb.delete(&CONFIGMAPS, Some("default"), "direct").is_err());
}

#[test]
fn stale_resource_version_and_uid_preconditions() {
    let (_sb, c) = sandbox();
    let a = c.post(CMS, cm("a", json!({}))).body;
    let mut fresh = a.clone();
    fresh["data"]["k"] = json!("1");
    assert_eq!(c.put(&format!("{CMS}/a"), fresh).code, 200);
    let mut stale = a.clone();
    stale["data"]["k"] = json!("2");
    let r = c.put(&format!("{CMS}/a"), stale.clone());
    assert_eq!(r.code, 409);
    assert_eq!(r.body["reason"], "Conflict");
    assert_eq!(
        r.body["message"],
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; \
         please apply your changes to the latest version and try again"
    );
    // Without a resourceVersion the update is unconditional.
    stale["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    assert_eq!(c.put(&format!("{CMS}/a"), stale).code, 200);
    // A patch naming a stale resourceVersion conflicts; a uid precondition too.
    let p = c.patch(
        &format!("{CMS}/a"),
        "application/merge-patch+json",
        json!({"metadata": {"resourceVersion": a["metadata"]["resourceVersion"]}, "data": {"x": "y"}}),
    );
    assert_eq!(p.code, 409);
    let p = c.patch(
        &format!("{CMS}/a"),
        "application/strategic-merge-patch+json",
        json!({"metadata": {"uid": "not-the-uid"}}),
    );
    assert_eq!(p.code, 409);
    let msg = p.body["message"].as_str().unwrap();
    assert!(
        msg.ends_with(&format!(
            "Precondition failed: UID in precondition: not-the-uid, UID in object meta: {}",
            a["metadata"]["uid"].as_str().unwrap()
        )),
        "{msg}"
    );
    // The name in the body must match the URL.
    let mut other = a.clone();
    other["metadata"]["name"] = json!("b");
    assert_eq!(c.put(&format!("{CMS}/a"), other).code, 400);
    // Delete preconditions.
    let d = c.delete(
        &format!("{CMS}/a"),
        Some(json!({"preconditions": {"uid": "wrong"}})),
    );
    assert_eq!(d.code, 409);
    let d = c.delete(
        &format!("{CMS}/a"),
        Some(json!({"preconditions": {"resourceVersion": "1"}})),
    );
    assert_eq!(d.code, 409);
    assert_eq!(c.get(&format!("{CMS}/a")).code, 200);
}

#[test]
fn list_selectors_pagination_and_expired_continue() {
    let (sb, c) = sandbox();
    for i in 0..5 {
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        c.post(
            CMS,
            cm(&format!("c{i}"), json!({"tier": tier, "n": i.to_string()})),
        );
    }
    c.post(
        "/api/v1/namespaces/kube-system/configmaps",
        cm("sys", json!({"tier": "even"})),
    );
    let l = c.get(CMS).body;
    assert_eq!(l["kind"], "ConfigMapList");
    assert_eq!(l["apiVersion"], "v1");
    assert_eq!(l["items"].as_array().unwrap().len(), 5);
    assert_eq!(rv(&l), sb.resource_version());
    assert!(l["items"][0].get("kind").is_none(), "items carry no kind");
    let all = c.get("/api/v1/configmaps").body;
    assert_eq!(all["items"].as_array().unwrap().len(), 6);

    let count = |q: &str| -> usize {
        let r = c.get(&format!("{CMS}?{q}"));
        assert_eq!(r.code, 200, "{q}: {}", r.body);
        r.body["items"].as_array().unwrap().len()
    };
    assert_eq!(count("labelSelector=tier%3Deven"), 3);
    assert_eq!(count("labelSelector=tier!%3Deven"), 2);
    assert_eq!(count("labelSelector=n+in+(1,2,9)"), 2);
    assert_eq!(count("labelSelector=n+notin+(1,2)"), 3);
    assert_eq!(count("labelSelector=tier"), 5);
    assert_eq!(count("labelSelector=!tier"), 0);
    assert_eq!(count("fieldSelector=metadata.name%3Dc3"), 1);
    assert_eq!(
        count("fieldSelector=metadata.name!%3Dc3,metadata.namespace%3Ddefault"),
        4
    );
    let bad = c.get(&format!("{CMS}?fieldSelector=spec.nodeName%3Dx"));
    assert_eq!(bad.code, 400);
    assert!(bad.body["message"]
        .as_str()
        .unwrap()
        .contains("field label not supported: spec.nodeName"));
    assert_eq!(c.get(&format!("{CMS}?labelSelector=a+in+b")).code, 400);

    // Pages of two; a write between pages does not show up (the list is a snapshot).
    let p1 = c.get(&format!("{CMS}?limit=2")).body;
    assert_eq!(p1["items"].as_array().unwrap().len(), 2);
    assert_eq!(p1["metadata"]["remainingItemCount"], 3);
    let tok = p1["metadata"]["continue"].as_str().unwrap().to_string();
    c.post(CMS, cm("c9", json!({})));
    let p2 = c.get(&format!("{CMS}?limit=2&continue={tok}")).body;
    let tok2 = p2["metadata"]["continue"].as_str().unwrap().to_string();
    let p3 = c.get(&format!("{CMS}?limit=2&continue={tok2}")).body;
    assert!(p3["metadata"].get("continue").is_none());
    let names: Vec<&str> = [&p1, &p2, &p3]
        .iter()
        .flat_map(|p| p["items"].as_array().unwrap())
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c0", "c1", "c2", "c3", "c4"]);
    assert_eq!(rv(&p3), rv(&p1));
    // resourceVersion=0 ignores the limit, like the watch cache.
    assert_eq!(count("limit=2&resourceVersion=0"), 6);

    sb.faults().expire_history();
    let gone = c.get(&format!("{CMS}?limit=2&continue={tok}"));
    assert_eq!(gone.code, 410);
    assert_eq!(gone.body["reason"], "Expired");
    assert_eq!(
        gone.body["message"],
        "The provided continue parameter is too old to display a consistent list result. \
         You can start a new list without the continue parameter."
    );
    assert_eq!(c.get(&format!("{CMS}?continue=%%%")).code, 400);

    // Metadata-only lists.
    let url = format!("{}{CMS}", c.base);
    let mut r = c
        .agent
        .get(&url)
        .header(
            "Accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )
        .call()
        .unwrap();
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(v["kind"], "PartialObjectMetadataList");
    assert_eq!(v["items"][0]["kind"], "PartialObjectMetadata");
    assert!(v["items"][0].get("data").is_none());

    // deletecollection with a selector.
    let r = c.call(
        "DELETE",
        &format!("{CMS}?labelSelector=tier%3Dodd"),
        "",
        None,
    );
    assert_eq!(r.code, 200);
    assert_eq!(count(""), 4);
}

#[test]
fn watch_replays_history_from_a_resource_version() {
    let (_sb, c) = sandbox();
    let a = c.post(CMS, cm("a", json!({}))).body;
    let from = rv(&a);
    let b = c.post(CMS, cm("b", json!({}))).body;
    let mut b2 = b.clone();
    b2["data"]["k"] = json!("changed");
    c.put(&format!("{CMS}/b"), b2);
    c.delete(&format!("{CMS}/a"), None);
    c.post(
        "/api/v1/namespaces/kube-system/configmaps",
        cm("other-ns", json!({})),
    );
    let mut w = c.watch(&format!("{CMS}?watch=true&resourceVersion={from}"));
    let want = [("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "a")];
    let mut last = from;
    for (t, n) in want {
        let e = w.next_event().expect("event");
        assert_eq!(e["type"], t);
        assert_eq!(e["object"]["metadata"]["name"], n);
        assert_eq!(e["object"]["kind"], "ConfigMap");
        let r = rv(&e["object"]);
        assert!(r > last, "resourceVersions increase");
        last = r;
    }
    // Live events follow.
    c.post(CMS, cm("live", json!({})));
    let e = w.next_event().unwrap();
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("live"))
    );
    // The all-namespaces watch sees both namespaces.
    let mut all = c.watch(&format!(
        "/api/v1/configmaps?watch=1&resourceVersion={from}"
    ));
    let mut names = Vec::new();
    for _ in 0..5 {
        names.push(all.next_event().unwrap()["object"]["metadata"]["name"].clone());
    }
    assert!(names.contains(&json!("other-ns")));
}

#[test]
fn watch_from_an_expired_version_gets_a_410_error_event() {
    let (sb, c) = start(SandboxOptions {
        history_window: 3,
        ..SandboxOptions::default()
    });
    let first = c.post(CMS, cm("a", json!({}))).body;
    for i in 0..5 {
        c.post(CMS, cm(&format!("x{i}"), json!({})));
    }
    let mut w = c.watch(&format!("{CMS}?watch=true&resourceVersion={}", rv(&first)));
    let e = w.next().expect("an ERROR event");
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["kind"], "Status");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["reason"], "Expired");
    let msg = e["object"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!("too old resource version: {} (", rv(&first))),
        "{msg}"
    );
    assert!(w.next().is_none(), "the stream ends after the error");

    // expire_history makes everything below the current version too old.
    let now = sb.resource_version();
    sb.faults().expire_history();
    let mut w = c.watch(&format!("{CMS}?watch=true&resourceVersion={}", now - 1));
    assert_eq!(w.next().unwrap()["object"]["code"], 410);
    let mut ok = c.watch(&format!("{CMS}?watch=true&resourceVersion={now}"));
    c.post(CMS, cm("after", json!({})));
    assert_eq!(ok.next_event().unwrap()["type"], "ADDED");
}

#[test]
fn watch_initial_list_bookmarks_and_timeout() {
    let (sb, c) = start(SandboxOptions {
        bookmark_interval: Duration::from_millis(100),
        ..SandboxOptions::default()
    });
    c.post(CMS, cm("a", json!({})));
    c.post(CMS, cm("b", json!({})));
    let mut w = c.watch(&format!(
        "{CMS}?watch=true&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=2"
    ));
    let e1 = w.next_event().unwrap();
    let e2 = w.next_event().unwrap();
    assert_eq!(
        (e1["type"].as_str(), e2["type"].as_str()),
        (Some("ADDED"), Some("ADDED"))
    );
    let bm = loop {
        let e = w.next().expect("a bookmark before the timeout");
        if e["type"] == "BOOKMARK" {
            break e;
        }
    };
    assert_eq!(bm["object"]["kind"], "ConfigMap");
    assert_eq!(bm["object"]["apiVersion"], "v1");
    assert_eq!(rv(&bm["object"]), sb.resource_version());
    // timeoutSeconds ends the stream cleanly.
    while w.next().is_some() {}
    // Without allowWatchBookmarks there are none; without resourceVersion the current
    // objects come first.
    let mut w = c.watch(&format!("{CMS}?watch=true&timeoutSeconds=1"));
    let mut types = Vec::new();
    while let Some(e) = w.next() {
        types.push(e["type"].as_str().unwrap().to_string());
    }
    assert_eq!(types, ["ADDED", "ADDED"]);
}

#[test]
fn watch_with_selectors_follows_objects_in_and_out() {
    let (_sb, c) = sandbox();
    let mut w = c.watch(&format!("{CMS}?watch=true&labelSelector=app%3Dweb"));
    let mut byname = c.watch(&format!(
        "{CMS}?watch=true&fieldSelector=metadata.name%3Dtarget"
    ));
    c.post(CMS, cm("other", json!({"app": "db"})));
    let t = c.post(CMS, cm("target", json!({"app": "web"}))).body;
    let e = w.next_event().unwrap();
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("target"))
    );
    let e = byname.next_event().unwrap();
    assert_eq!(e["object"]["metadata"]["name"], "target");
    // Relabel out of the selector: DELETED; back in: ADDED.
    c.patch(
        &format!("{CMS}/target"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"app": "db"}}}),
    );
    let e = w.next_event().unwrap();
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["labels"]["app"], "db");
    c.patch(
        &format!("{CMS}/target"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"app": "web"}}}),
    );
    assert_eq!(w.next_event().unwrap()["type"], "ADDED");
    c.delete(&format!("{CMS}/target"), None);
    let e = w.next_event().unwrap();
    assert_eq!(e["type"], "DELETED");
    assert!(rv(&e["object"]) > rv(&t));
    let types: Vec<String> = (0..3)
        .map(|_| {
            byname.next_event().unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(types, ["MODIFIED", "MODIFIED", "DELETED"]);
}
