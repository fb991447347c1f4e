//! The sandbox API server over real HTTP, with a plain ureq client: namespaces, deletion,
//! subresources, auth, faults, connections and concurrency.

use crate::sandbox_http::*;

#[test]
fn namespace_terminating_finalize_and_gone() {
    let (sb, c) = sandbox();
    let ns = c
        .post(
            "/api/v1/namespaces",
            json!({"metadata": {"name": "doomed"}}),
        )
        .body;
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "doomed"
    );
    c.post(
        "/api/v1/namespaces/doomed/configmaps",
        cm("keep", json!({})),
    );
    let d = c.delete("/api/v1/namespaces/doomed", None);
    assert_eq!(d.code, 200);
    let got = c.get("/api/v1/namespaces/doomed").body;
    assert_eq!(got["status"]["phase"], "Terminating");
    assert!(got["metadata"]["deletionTimestamp"].is_string());
    let r = c.post("/api/v1/namespaces/doomed/configmaps", cm("new", json!({})));
    assert_eq!(r.code, 403);
    assert_eq!(r.body["reason"], "Forbidden");
    assert_eq!(
        r.body["message"],
        "configmaps \"new\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
    );
    // Content may still be updated and deleted.
    assert_eq!(
        c.delete("/api/v1/namespaces/doomed/configmaps/keep", None)
            .code,
        200
    );
    // Status conditions through /status.
    let mut st = got.clone();
    st["status"]["conditions"] = json!([{"type": "NamespaceContentRemaining", "status": "False"}]);
    let s = c.put("/api/v1/namespaces/doomed/status", st);
    assert_eq!(s.code, 200);
    assert_eq!(
        s.body["status"]["conditions"][0]["type"],
        "NamespaceContentRemaining"
    );
    assert_eq!(s.body["status"]["phase"], "Terminating");
    // A main update cannot change spec.finalizers; finalize can.
    let mut f = s.body.clone();
    f["spec"]["finalizers"] = json!([]);
    let u = c.put("/api/v1/namespaces/doomed", f.clone());
    assert_eq!(u.body["spec"]["finalizers"], json!(["kubernetes"]));
    let fin = c.put("/api/v1/namespaces/doomed/finalize", f);
    assert_eq!(fin.code, 200);
    assert_eq!(c.get("/api/v1/namespaces/doomed").code, 404);
    assert!(sb.get(&NAMESPACES, None, "doomed").is_none());
    // Immortal namespaces.
    assert_eq!(c.delete("/api/v1/namespaces/default", None).code, 403);
    assert_eq!(c.get("/api/v1/namespaces/kube-node-lease").code, 200);
}

#[test]
fn delete_with_finalizers_and_propagation_policies() {
    let (sb, c) = sandbox();
    c.post(DEPLOYS, deployment("fg"));
    let r = c.delete(
        &format!("{DEPLOYS}/fg"),
        Some(json!({"propagationPolicy": "Foreground"})),
    );
    assert_eq!(r.code, 200);
    let d = c.get(&format!("{DEPLOYS}/fg")).body;
    assert_eq!(d["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    assert!(d["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 0);
    // No new finalizers on a deleting object.
    let p = c.patch(
        &format!("{DEPLOYS}/fg"),
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": ["foregroundDeletion", "x"]}}),
    );
    assert_eq!(p.code, 422);
    // Removing the last finalizer removes the object, with a DELETED event.
    let mut w = c.watch(&format!("{DEPLOYS}?watch=true&resourceVersion={}", rv(&d)));
    let p = c.patch(
        &format!("{DEPLOYS}/fg"),
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": null, "resourceVersion": d["metadata"]["resourceVersion"]}}),
    );
    assert_eq!(p.code, 200);
    assert_eq!(c.get(&format!("{DEPLOYS}/fg")).code, 404);
    assert_eq!(w.next_event().unwrap()["type"], "DELETED");

    c.post(DEPLOYS, deployment("orph"));
    c.delete(
        &format!("{DEPLOYS}/orph"),
        Some(json!({"orphanDependents": true})),
    );
    assert_eq!(
        c.get(&format!("{DEPLOYS}/orph")).body["metadata"]["finalizers"],
        json!(["orphan"])
    );
    c.post(DEPLOYS, deployment("q"));
    c.delete(&format!("{DEPLOYS}/q?propagationPolicy=Orphan"), None);
    assert_eq!(
        c.get(&format!("{DEPLOYS}/q")).body["metadata"]["finalizers"],
        json!(["orphan"])
    );
    // Deployments default to Background: gone at once.
    c.post(DEPLOYS, deployment("bg"));
    c.delete(&format!("{DEPLOYS}/bg"), None);
    assert_eq!(c.get(&format!("{DEPLOYS}/bg")).code, 404);
    // batch/v1 Jobs default to Orphan, as upstream.
    let jobs = "/apis/batch/v1/namespaces/default/jobs";
    c.post(jobs, json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}}}));
    c.delete(&format!("{jobs}/j"), None);
    assert_eq!(
        c.get(&format!("{jobs}/j")).body["metadata"]["finalizers"],
        json!(["orphan"])
    );
    // A user finalizer keeps a configmap until it is removed.
    c.post(
        CMS,
        json!({"metadata": {"name": "f", "finalizers": ["example.com/x"]}}),
    );
    c.delete(&format!("{CMS}/f"), None);
    let f = c.get(&format!("{CMS}/f")).body;
    assert!(f["metadata"]["deletionTimestamp"].is_string());
    let p = c.patch(
        &format!("{CMS}/f"),
        "application/strategic-merge-patch+json",
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/x"]}}),
    );
    assert_eq!(p.code, 200);
    assert!(sb.get(&CONFIGMAPS, Some("default"), "f").is_none());
    // Pods go at once (no kubelet).
    c.post(
        "/api/v1/namespaces/default/pods",
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    );
    let r = c.delete("/api/v1/namespaces/default/pods/p", None);
    assert_eq!(r.code, 200);
    assert!(sb.get(&PODS, Some("default"), "p").is_none());
}

#[test]
fn status_subresource_and_generation_rules() {
    let (_sb, c) = sandbox();
    let d = c.post(DEPLOYS, {
        let mut d = deployment("web");
        d["status"] = json!({"replicas": 9});
        d
    });
    assert_eq!(d.code, 201);
    let d = d.body;
    assert!(d.get("status").is_none(), "create drops status");
    assert_eq!(d["metadata"]["generation"], 1);
    // Defaults.
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(
        d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        "25%"
    );
    assert_eq!(d["spec"]["template"]["spec"]["dnsPolicy"], "ClusterFirst");

    // Labels only: no generation bump.
    let mut u = d.clone();
    u["metadata"]["labels"] = json!({"x": "y"});
    let u = c.put(&format!("{DEPLOYS}/web"), u).body;
    assert_eq!(u["metadata"]["generation"], 1);
    assert_eq!(u["metadata"]["labels"]["x"], "y");
    // Spec change (and a status change that is ignored): bump.
    let mut u2 = u.clone();
    u2["spec"]["replicas"] = json!(3);
    u2["status"] = json!({"replicas": 7});
    let u2 = c.put(&format!("{DEPLOYS}/web"), u2).body;
    assert_eq!(u2["metadata"]["generation"], 2);
    assert!(u2.get("status").is_none());
    // Status write: status changes, spec change ignored, generation kept.
    let mut s = u2.clone();
    s["status"] = json!({"replicas": 3, "observedGeneration": 2});
    s["spec"]["replicas"] = json!(100);
    let s = c.put(&format!("{DEPLOYS}/web/status"), s);
    assert_eq!(s.code, 200);
    assert_eq!(s.body["status"]["replicas"], 3);
    assert_eq!(s.body["spec"]["replicas"], 3);
    assert_eq!(s.body["metadata"]["generation"], 2);
    let gs = c.get(&format!("{DEPLOYS}/web/status")).body;
    assert_eq!(gs["status"]["observedGeneration"], 2);
    // Status patch.
    let p = c.patch(
        &format!("{DEPLOYS}/web/status"),
        "application/merge-patch+json",
        json!({"status": {"readyReplicas": 3}, "spec": {"replicas": 50}}),
    );
    assert_eq!(p.body["status"]["readyReplicas"], 3);
    assert_eq!(p.body["spec"]["replicas"], 3);
    // A no-op write does not change the resourceVersion.
    let same = c.put(&format!("{DEPLOYS}/web"), p.body.clone()).body;
    assert_eq!(
        same["metadata"]["resourceVersion"],
        p.body["metadata"]["resourceVersion"]
    );
    // Configmaps have no status subresource.
    c.post(CMS, cm("a", json!({})));
    assert_eq!(c.get(&format!("{CMS}/a/status")).code, 404);
}

#[test]
fn patch_content_types_and_scale() {
    let (_sb, c) = sandbox();
    c.post(CMS, cm("a", json!({"l": "1"})));
    let p = c.patch(
        &format!("{CMS}/a"),
        "application/json-patch+json",
        json!([{"op": "add", "path": "/data/n", "value": "2"},
               {"op": "remove", "path": "/metadata/labels/l"}]),
    );
    assert_eq!(p.code, 200);
    assert_eq!(p.body["data"], json!({"k": "v", "n": "2"}));
    let bad = c.patch(
        &format!("{CMS}/a"),
        "application/json-patch+json",
        json!([{"op": "test", "path": "/data/k", "value": "nope"}]),
    );
    assert_eq!(bad.code, 422);
    assert_eq!(
        c.patch(&format!("{CMS}/a"), "text/plain", json!({})).code,
        415
    );
    assert_eq!(
        c.patch(
            &format!("{CMS}/zz"),
            "application/merge-patch+json",
            json!({})
        )
        .code,
        404
    );
    // Apply creates a missing object.
    let a = c.patch(
        &format!("{CMS}/applied?fieldManager=test&force=true"),
        "application/apply-patch+yaml",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "b"}}),
    );
    assert_eq!(a.code, 201);
    // Strategic merge: adoption by ownerReferences.
    let pods = "/api/v1/namespaces/default/pods";
    let pod = c.post(pods, json!({"metadata": {"name": "p", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}})).body;
    assert_eq!(pod["status"]["phase"], "Pending");
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let p = c.patch(
        &format!("{pods}/p"),
        "application/strategic-merge-patch+json",
        json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": true, "blockOwnerDeletion": true}], "uid": uid}}),
    );
    assert_eq!(p.code, 200);
    assert_eq!(p.body["metadata"]["ownerReferences"][0]["uid"], "rs-uid");
    let p = c.patch(
        &format!("{pods}/p"),
        "application/strategic-merge-patch+json",
        json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "rs-uid"}], "uid": uid}}),
    );
    assert!(p.body["metadata"]["ownerReferences"]
        .as_array()
        .is_none_or(|a| a.is_empty()));
    // Scale subresource.
    c.post(DEPLOYS, deployment("web"));
    let s = c.get(&format!("{DEPLOYS}/web/scale")).body;
    assert_eq!(s["kind"], "Scale");
    assert_eq!(s["apiVersion"], "autoscaling/v1");
    assert_eq!(s["spec"]["replicas"], 1);
    assert_eq!(s["status"]["selector"], "app=web");
    let mut s2 = s.clone();
    s2["spec"]["replicas"] = json!(4);
    let r = c.put(&format!("{DEPLOYS}/web/scale"), s2);
    assert_eq!(r.code, 200);
    assert_eq!(c.get(&format!("{DEPLOYS}/web")).body["spec"]["replicas"], 4);
    let r = c.put(&format!("{DEPLOYS}/web/scale"), s);
    assert_eq!(r.code, 409, "stale scale write");
    let r = c.patch(
        &format!("{DEPLOYS}/web/scale"),
        "application/merge-patch+json",
        json!({"spec": {"replicas": 2}}),
    );
    assert_eq!(r.body["spec"]["replicas"], 2);
    assert_eq!(
        c.get(&format!("{DEPLOYS}/web")).body["metadata"]["generation"],
        3
    );
}

#[test]
fn token_request_token_review_and_require_auth() {
    let (sb, anon) = start(SandboxOptions {
        require_auth: true,
        ..SandboxOptions::default()
    });
    let r = anon.get("/api/v1/namespaces");
    assert_eq!(r.code, 401);
    assert_eq!(r.body["reason"], "Unauthorized");
    assert_eq!(anon.get("/healthz").code, 200);
    assert_eq!(anon.with_token("wrong").get("/api/v1/namespaces").code, 401);
    let admin = anon.with_token("sandbox-admin");
    assert_eq!(admin.get("/api/v1/namespaces").code, 200);
    let sas = "/api/v1/namespaces/kube-system/serviceaccounts";
    assert_eq!(
        admin.post(sas, json!({"metadata": {"name": "ctrl"}})).code,
        201
    );
    let tr = admin.post(
        &format!("{sas}/ctrl/token"),
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}),
    );
    assert_eq!(tr.code, 201);
    assert_eq!(tr.body["kind"], "TokenRequest");
    assert!(tr.body["status"]["expirationTimestamp"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    let token = tr.body["status"]["token"].as_str().unwrap().to_string();
    let sa = anon.with_token(&token);
    assert_eq!(sa.get("/api/v1/namespaces/default/configmaps").code, 200);
    let rec = sb.requests();
    let last = rec.last().unwrap();
    assert_eq!(
        last.user.as_deref(),
        Some("system:serviceaccount:kube-system:ctrl")
    );
    assert_eq!(last.token.as_deref(), Some(token.as_str()));
    assert_eq!(last.user_agent.as_deref(), Some("sandbox-test/1"));
    assert_eq!(last.status, 200);
    assert!(rec.iter().any(|r| r.user.as_deref() == Some("admin")
        && r.method == "POST"
        && r.content_type.as_deref() == Some("application/json")));
    sb.clear_requests();
    assert!(sb.requests().is_empty());
    // Too short, and unknown service account.
    let short = admin.post(
        &format!("{sas}/ctrl/token"),
        json!({"spec": {"expirationSeconds": 60}}),
    );
    assert_eq!(short.code, 422);
    assert_eq!(
        admin
            .post(&format!("{sas}/nope/token"), json!({"spec": {}}))
            .code,
        404
    );
    // TokenReview and SubjectAccessReview.
    let rv = admin.post(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}),
    );
    assert_eq!(rv.code, 201);
    assert_eq!(rv.body["status"]["authenticated"], true);
    assert_eq!(
        rv.body["status"]["user"]["username"],
        "system:serviceaccount:kube-system:ctrl"
    );
    let bad = admin.post(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        json!({"spec": {"token": "x"}}),
    );
    assert_eq!(bad.body["status"]["authenticated"], false);
    sb.deny_access("bob", "/secrets");
    let sar = |user: &str, resource: &str| {
        admin.post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            json!({"spec": {"user": user, "resourceAttributes": {"namespace": "default", "verb": "get", "resource": resource}}}),
        ).body["status"]["allowed"].clone()
    };
    assert_eq!(sar("bob", "secrets"), json!(false));
    assert_eq!(sar("bob", "pods"), json!(true));
    assert_eq!(sar("alice", "secrets"), json!(true));
    sb.clear_requests();
    sb.faults().expire_tokens();
    let r = sa.get("/api/v1/namespaces/default/configmaps");
    assert_eq!(r.code, 401, "an expired token is refused");
    assert_eq!(sb.requests()[0].user, None);
}

#[test]
fn fault_fail_next_answers_429_500_503() {
    let (sb, c) = sandbox();
    let f = sb.faults();
    f.fail_next(1, 429, None);
    let r = c.get(CMS);
    assert_eq!(r.code, 429);
    assert_eq!(r.retry_after.as_deref(), Some("1"));
    assert_eq!(r.body["reason"], "TooManyRequests");
    assert_eq!(c.get(CMS).code, 200);
    f.fail_next(2, 500, Some("/configmaps"));
    assert_eq!(c.get("/api/v1/namespaces").code, 200);
    assert_eq!(c.get(CMS).code, 500);
    assert_eq!(
        c.post(CMS, cm("a", json!({}))).body["reason"],
        "InternalError"
    );
    assert_eq!(c.post(CMS, cm("a", json!({}))).code, 201);
    f.fail_next(1, 503, Some("watch=true"));
    assert_eq!(c.get(&format!("{CMS}?watch=true")).code, 503);
    assert!(sb.requests().iter().any(|r| r.status == 503));
}

#[test]
fn fault_drop_watches_and_outage() {
    let (sb, c) = sandbox();
    let mut w = c.watch(&format!("{CMS}?watch=true"));
    c.post(CMS, cm("a", json!({})));
    assert_eq!(w.next_event().unwrap()["type"], "ADDED");
    sb.faults().drop_watches();
    assert!(w.next_event().is_none(), "the stream ends");
    // A new watch works.
    let mut w = c.watch(&format!(
        "{CMS}?watch=true&resourceVersion={}",
        sb.resource_version()
    ));
    sb.stop_listening();
    assert!(w.next_event().is_none(), "the outage ends open watches");
    assert!(
        c.try_call("GET", CMS, "", None).is_err(),
        "connection refused"
    );
    assert!(TcpStream::connect(("127.0.0.1", sb.port())).is_err());
    sb.resume_listening();
    assert!(poll(|| c
        .try_call("GET", CMS, "", None)
        .is_ok_and(|r| r.code == 200)));
    assert_eq!(
        c.get(&format!("{CMS}/a")).code,
        200,
        "state survives the outage"
    );
}

#[test]
fn fault_pause_holds_answers_and_watch_delivery() {
    let (sb, c) = sandbox();
    let mut w = c.watch(&format!("{CMS}?watch=true"));
    sb.create(&CONFIGMAPS, cm("first", json!({}))).unwrap();
    assert_eq!(
        w.next_event().unwrap()["object"]["metadata"]["name"],
        "first"
    );
    let started = Instant::now();
    sb.faults().pause(Duration::from_millis(500));
    sb.create(&CONFIGMAPS, cm("during", json!({}))).unwrap();
    let r = c.get(&format!("{CMS}/during"));
    assert_eq!(r.code, 200);
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "answered only after the pause"
    );
    let e = w.next_event().unwrap();
    assert_eq!(e["object"]["metadata"]["name"], "during");
    assert!(started.elapsed() >= Duration::from_millis(500));
}

#[test]
fn keep_alive_and_connection_close_on_one_socket() {
    let (sb, _c) = sandbox();
    let mut s = TcpStream::connect(("127.0.0.1", sb.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = r#"{"metadata":{"name":"ka"}}"#;
    let reqs = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\
         POST {CMS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}\
         GET {CMS}/ka HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(reqs.as_bytes()).unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let statuses: Vec<&str> = all
        .split("HTTP/1.1 ")
        .skip(1)
        .map(|r| r.lines().next().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["200 OK", "201 Created", "200 OK"]);
    assert_eq!(all.matches("Content-Length:").count(), 3);
    assert!(all.contains("Connection: close"));
    // A malformed request gets a 400 and the connection closes.
    let mut s = TcpStream::connect(("127.0.0.1", sb.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nContent-Length: nope\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
}

#[test]
fn defaults_and_generated_fields() {
    let (_sb, c) = sandbox();
    let pod = c.post("/api/v1/namespaces/default/pods", json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})).body;
    let s = &pod["spec"];
    assert_eq!(s["restartPolicy"], "Always");
    assert_eq!(s["terminationGracePeriodSeconds"], 30);
    assert_eq!(s["schedulerName"], "default-scheduler");
    assert_eq!(pod["status"]["phase"], "Pending");
    let job = c.post("/apis/batch/v1/namespaces/default/jobs", json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"}}}})).body;
    let uid = job["metadata"]["uid"].as_str().unwrap();
    assert_eq!(job["spec"]["completions"], 1);
    assert_eq!(job["spec"]["parallelism"], 1);
    assert_eq!(job["spec"]["backoffLimit"], 6);
    assert_eq!(job["spec"]["completionMode"], "NonIndexed");
    assert_eq!(job["spec"]["suspend"], false);
    assert_eq!(
        job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        uid
    );
    assert_eq!(
        job["spec"]["template"]["metadata"]["labels"]["job-name"],
        "j"
    );
    let svc = c.post("/api/v1/namespaces/default/services", json!({"metadata": {"name": "s"}, "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}})).body;
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(svc["spec"]["sessionAffinity"], "None");
    assert!(svc["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .starts_with("10.96."));
    let sec = c
        .post(
            "/api/v1/namespaces/default/secrets",
            json!({"metadata": {"name": "s"}}),
        )
        .body;
    assert_eq!(sec["type"], "Opaque");
    let rs = c.post("/apis/apps/v1/namespaces/default/replicasets", json!({"metadata": {"name": "r"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}})).body;
    assert_eq!(rs["spec"]["replicas"], 1);
    let rc = c.post("/api/v1/namespaces/default/replicationcontrollers", json!({"metadata": {"name": "r"}, "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}})).body;
    assert_eq!(rc["spec"]["replicas"], 1);
    assert_eq!(rc["spec"]["selector"], json!({"a": "b"}));
}

#[test]
fn custom_resource_definitions_are_served() {
    let (_sb, c) = sandbox();
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true}]}});
    assert_eq!(
        c.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd
        )
        .code,
        201
    );
    let groups = c.get("/apis").body;
    assert!(groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["name"] == "example.com"));
    let res = c.get("/apis/example.com/v1").body;
    assert_eq!(res["resources"][0]["name"], "widgets");
    let w = "/apis/example.com/v1/namespaces/default/widgets";
    let made = c.post(w, json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 1}}));
    assert_eq!(made.code, 201);
    let l = c.get(w).body;
    assert_eq!(l["kind"], "WidgetList");
    assert_eq!(
        l["items"][0]["kind"], "Widget",
        "custom resources keep kind in lists"
    );
    assert_eq!(
        c.patch(
            &format!("{w}/w1"),
            "application/strategic-merge-patch+json",
            json!({})
        )
        .code,
        415
    );
    assert_eq!(
        c.delete(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
            None
        )
        .code,
        200
    );
    assert_eq!(c.get(w).code, 404);
    let _ = DEPLOYMENTS;
}

#[test]
fn csr_approval_and_events_in_a_terminating_namespace() {
    let (_sb, c) = sandbox();
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let csr = c.post(
        csrs,
        json!({"metadata": {"name": "node-csr"},
               "spec": {"request": "UkVR", "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                        "usages": ["client auth"]}}),
    );
    assert_eq!(csr.code, 201);
    let mut a = csr.body.clone();
    a["status"] = json!({"conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved"}],
                         "certificate": "ignored-here"});
    a["spec"]["usages"] = json!(["server auth"]);
    let r = c.put(&format!("{csrs}/node-csr/approval"), a);
    assert_eq!(r.code, 200);
    assert_eq!(r.body["status"]["conditions"][0]["type"], "Approved");
    assert!(r.body["status"].get("certificate").is_none());
    assert_eq!(r.body["spec"]["usages"], json!(["client auth"]));
    let mut s = r.body.clone();
    s["status"]["certificate"] = json!("Q0VSVA==");
    let s = c.put(&format!("{csrs}/node-csr/status"), s);
    assert_eq!(s.body["status"]["certificate"], "Q0VSVA==");
    let l = c.get(&format!(
        "{csrs}?fieldSelector=spec.signerName%3Dkubernetes.io/kube-apiserver-client-kubelet"
    ));
    assert_eq!(l.body["items"].as_array().unwrap().len(), 1);

    // Upstream v1.28's namespace lifecycle admission has no exception for Events.
    c.post("/api/v1/namespaces", json!({"metadata": {"name": "t"}}));
    c.delete("/api/v1/namespaces/t", None);
    let ev = c.post(
        "/api/v1/namespaces/t/events",
        json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "t"},
               "reason": "X", "message": "m", "type": "Normal"}),
    );
    assert_eq!(ev.code, 403);
    let ns = c.get("/api/v1/namespaces/t").body;
    assert!(ns["metadata"].get("deletionGracePeriodSeconds").is_none());
}

#[test]
fn concurrent_writers_never_leave_gaps_in_a_watch() {
    let (sb, c) = start(SandboxOptions {
        bookmark_interval: Duration::from_millis(5),
        ..SandboxOptions::default()
    });
    let from = sb.resource_version();
    let mut w = c.watch(&format!(
        "{CMS}?watch=true&resourceVersion={from}&allowWatchBookmarks=true"
    ));
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let base = sb.url();
            std::thread::spawn(move || {
                let c = Client {
                    agent: agent(),
                    base,
                    token: None,
                };
                for i in 0..30 {
                    let r = c.post(CMS, cm(&format!("w{t}-{i}"), json!({})));
                    assert_eq!(r.code, 201);
                }
            })
        })
        .collect();
    for h in writers {
        h.join().unwrap();
    }
    let mut last_event = from;
    let mut last_bookmark = 0;
    let mut seen = 0;
    while seen < 120 {
        let e = w.next().expect("event");
        let r = rv(&e["object"]);
        if e["type"] == "BOOKMARK" {
            assert!(
                r >= last_event,
                "a bookmark never goes behind delivered events"
            );
            last_bookmark = r;
            continue;
        }
        assert_eq!(e["type"], "ADDED");
        assert_eq!(
            r,
            last_event + 1,
            "no gaps: every configmap write is seen in order"
        );
        assert!(
            r > last_bookmark,
            "nothing older than a bookmark arrives after it"
        );
        last_event = r;
        seen += 1;
    }
}
