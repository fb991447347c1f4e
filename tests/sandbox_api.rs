//! The sandbox API server over real HTTP, with a plain ureq client.

use edgekcm::api::resources::{CONFIGMAPS, DEPLOYMENTS, NAMESPACES, PODS};
use edgekcm::sandbox::{Sandbox, SandboxOptions};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

struct Resp {
    code: u16,
    body: Value,
    retry_after: Option<String>,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_connect(Some(Duration::from_secs(5)))
        .timeout_per_read(Some(Duration::from_secs(10)))
        .user_agent("sandbox-test/1")
        .build()
        .new_agent()
}

fn start(opts: SandboxOptions) -> (Sandbox, Client) {
    let sb = Sandbox::start(opts).expect("start sandbox");
    let c = Client {
        agent: agent(),
        base: sb.url(),
        token: None,
    };
    (sb, c)
}

fn sandbox() -> (Sandbox, Client) {
    start(SandboxOptions::default())
}

impl Client {
    fn with_token(&self, t: &str) -> Client {
        Client {
            agent: agent(),
            base: self.base.clone(),
            token: Some(t.to_string()),
        }
    }

    fn try_call(
        &self,
        method: &str,
        path: &str,
        ctype: &str,
        body: Option<&Value>,
    ) -> Result<Resp, ureq::Error> {
        let url = format!("{}{}", self.base, path);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        macro_rules! with_auth {
            ($b:expr) => {{
                let b = $b;
                match &auth {
                    Some(a) => b.header("Authorization", a),
                    None => b,
                }
            }};
        }
        let text = body.map(|b| b.to_string()).unwrap_or_default();
        let r = match (method, body) {
            ("GET", _) => with_auth!(self.agent.get(&url)).call(),
            ("DELETE", None) => with_auth!(self.agent.delete(&url)).call(),
            ("DELETE", Some(_)) => with_auth!(self.agent.delete(&url))
                .force_send_body()
                .content_type(ctype)
                .send(&text),
            ("POST", _) => with_auth!(self.agent.post(&url))
                .content_type(ctype)
                .send(&text),
            ("PUT", _) => with_auth!(self.agent.put(&url))
                .content_type(ctype)
                .send(&text),
            ("PATCH", _) => with_auth!(self.agent.patch(&url))
                .content_type(ctype)
                .send(&text),
            _ => panic!("method {method}"),
        }?;
        let code = r.status().as_u16();
        let retry_after = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut r = r;
        let s = r.body_mut().read_to_string()?;
        let body = serde_json::from_str(&s).unwrap_or(Value::String(s));
        Ok(Resp {
            code,
            body,
            retry_after,
        })
    }

    fn call(&self, method: &str, path: &str, ctype: &str, body: Option<&Value>) -> Resp {
        self.try_call(method, path, ctype, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    fn get(&self, path: &str) -> Resp {
        self.call("GET", path, "", None)
    }
    fn post(&self, path: &str, body: Value) -> Resp {
        self.call("POST", path, "application/json", Some(&body))
    }
    fn put(&self, path: &str, body: Value) -> Resp {
        self.call("PUT", path, "application/json", Some(&body))
    }
    fn patch(&self, path: &str, ctype: &str, body: Value) -> Resp {
        self.call("PATCH", path, ctype, Some(&body))
    }
    fn delete(&self, path: &str, opts: Option<Value>) -> Resp {
        self.call("DELETE", path, "application/json", opts.as_ref())
    }

    fn watch(&self, path: &str) -> Watch {
        let url = format!("{}{}", self.base, path);
        let mut b = self.agent.get(&url);
        if let Some(t) = &self.token {
            b = b.header("Authorization", &format!("Bearer {t}"));
        }
        let r = b.call().expect("watch");
        assert_eq!(r.status().as_u16(), 200, "watch {path}");
        let reader: Box<dyn Read + Send> = Box::new(r.into_body().into_reader());
        Watch {
            lines: BufReader::new(reader),
        }
    }
}

struct Watch {
    lines: BufReader<Box<dyn Read + Send>>,
}

impl Watch {
    /// The next event, or None at the end of the stream.
    fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.lines.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).expect("event is JSON")),
        }
    }

    /// The next event that is not a BOOKMARK.
    fn next_event(&mut self) -> Option<Value> {
        loop {
            let e = self.next()?;
            if e["type"] != "BOOKMARK" {
                return Some(e);
            }
        }
    }
}

fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}}})
}

fn rv(o: &Value) -> u64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("resourceVersion")
}

fn poll<F: FnMut() -> bool>(mut f: F) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn health_version_and_discovery() {
    let (_sb, c) = sandbox();
    for p in ["/healthz", "/readyz", "/livez"] {
        let r = c.get(p);
        assert_eq!((r.code, r.body), (200, json!("ok")));
    }
    assert_eq!(c.get("/version").body["gitVersion"], "v1.28.0-sandbox");
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
