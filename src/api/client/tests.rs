//! Tests of the resolver, the shared connectors, query strings, delete options and the user
//! agent.

use super::connect::{resolved_cache, Resolver, SharedConnector};
use super::query::Query;
use super::*;

#[test]
fn addresses_resolve_without_lookup_and_names_are_reused() {
    use ureq::unversioned::resolver::Resolver as _;
    let cfg = ureq::config::Config::default();
    let resolve = |u: &str| {
        let uri: ureq::http::Uri = u.parse().unwrap();
        let t = ureq::unversioned::transport::NextTimeout {
            after: ureq::unversioned::transport::time::Duration::from_secs(5),
            reason: ureq::Timeout::Resolve,
            ..Default::default()
        };
        Resolver.resolve(&uri, &cfg, t).map(|a| a.to_vec())
    };
    assert_eq!(
        resolve("https://127.0.0.1:6443/api").unwrap(),
        vec!["127.0.0.1:6443".parse().unwrap()]
    );
    assert_eq!(
        resolve("https://[::1]/api").unwrap(),
        vec!["[::1]:443".parse().unwrap()]
    );
    let first = resolve("http://localhost:8080/").unwrap();
    assert!(!first.is_empty());
    assert!(resolved_cache()
        .lock()
        .unwrap()
        .contains_key("http://localhost:8080"));
    assert_eq!(resolve("http://localhost:8080/").unwrap(), first);
}

#[test]
fn agents_with_the_same_tls_settings_share_one_connector() {
    let cfg = |ca: &str, key: Option<&str>| RestConfig {
        server: "https://127.0.0.1:1".into(),
        ca_pem: Some(ca.as_bytes().to_vec()),
        client_cert_pem: key.map(|_| b"cert".to_vec()),
        client_key_pem: key.map(|k| k.as_bytes().to_vec()),
        ..RestConfig::default()
    };
    let same = |a: &SharedConnector, b: &SharedConnector| Arc::ptr_eq(&a.0, &b.0);
    let a = SharedConnector::for_identity(&cfg("ca-1", Some("key-1")));
    let tokens = SharedConnector::for_identity(&cfg("ca-1", None));
    assert!(same(
        &a,
        &SharedConnector::for_identity(&cfg("ca-1", Some("key-1")))
    ));
    assert!(same(
        &tokens,
        &SharedConnector::for_identity(&cfg("ca-1", None))
    ));
    // Another client key, another CA or no certificate: never the same TLS configuration.
    assert!(!same(&a, &tokens));
    assert!(!same(
        &a,
        &SharedConnector::for_identity(&cfg("ca-1", Some("key-2")))
    ));
    assert!(!same(
        &a,
        &SharedConnector::for_identity(&cfg("ca-2", Some("key-1")))
    ));
    let mut insecure = cfg("ca-1", Some("key-1"));
    insecure.insecure_skip_tls_verify = true;
    assert!(!same(&a, &SharedConnector::for_identity(&insecure)));
    // Once nobody holds it, a connector is not kept.
    let weak = Arc::downgrade(&a.0);
    drop(a);
    assert!(weak.upgrade().is_none());
}

#[test]
fn query_encoding() {
    let mut q = Query::default();
    q.push("labelSelector", "app in (a,b),x!=y");
    q.opt("limit", Some("500"));
    q.opt("continue", None);
    assert_eq!(
        q.finish(),
        "?labelSelector=app%20in%20%28a%2Cb%29%2Cx%21%3Dy&limit=500"
    );
}

#[test]
fn delete_options_body() {
    assert_eq!(DeleteOptions::default().body(), None);
    let b = DeleteOptions {
        propagation_policy: Some("Foreground"),
        precondition_uid: Some("u".into()),
        ..Default::default()
    }
    .body()
    .unwrap_or_default();
    let v: Value = serde_json::from_str(&b).unwrap_or(Value::Null);
    assert_eq!(v["propagationPolicy"], "Foreground");
    assert_eq!(v["preconditions"]["uid"], "u");
}

#[test]
fn user_agent_shape() {
    let ua = user_agent_base();
    assert!(ua.starts_with("edgekcm/v"));
    assert!(ua.contains("(linux/"));
}

#[test]
fn a_limiter_token_taken_ahead_is_not_waited_for_again() {
    use crate::api::resources::CONFIGMAPS;
    use crate::sandbox::{Sandbox, SandboxOptions};
    let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
    let cfg = RestConfig {
        server: sb.url(),
        source: "test".into(),
        ..Default::default()
    };
    // Two requests a second, no burst.
    let c = Client::new(&cfg, 2.0, 1, "limiter-test").expect("client");
    futures_lite::future::block_on(c.pass_limiter());
    let t = Instant::now();
    let passed = ListOptions {
        limiter_passed: true,
        ..Default::default()
    };
    c.list_all(&CONFIGMAPS, None, &passed).expect("list");
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    let t = Instant::now();
    c.list_all(&CONFIGMAPS, None, &ListOptions::default())
        .expect("list");
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn a_shaped_list_is_handed_on_a_few_objects_at_a_time_over_its_pages() {
    use crate::api::resources::CONFIGMAPS;
    use crate::sandbox::{Sandbox, SandboxOptions};
    let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
    let cfg = RestConfig {
        server: sb.url(),
        source: "test".into(),
        ..Default::default()
    };
    let c = Client::new(&cfg, 1000.0, 1000, "pages-test").expect("client");
    for i in 0..150 {
        let cm = serde_json::json!({"metadata": {"name": format!("cm-{i:03}"), "namespace": "default"},
            "data": {"k": "v"}});
        c.create(&CONFIGMAPS, Some("default"), &cm).expect("create");
    }
    let opts = ListOptions {
        limit: Some(100),
        shape: Some(crate::api::trim::Shape {
            fields: Some(std::sync::Arc::from(&[][..])),
        }),
        ..Default::default()
    };
    let mut calls: Vec<(usize, bool)> = Vec::new();
    let mut names = Vec::new();
    let rv = c
        .list_pages(&CONFIGMAPS, Some("default"), &opts, |items, afresh| {
            calls.push((items.len(), afresh));
            names.extend(items.iter().map(|o| crate::obj::name(o).to_string()));
            // Shaped: metadata only.
            assert!(items.iter().all(|o| o.get("data").is_none()));
        })
        .expect("list");
    assert!(!rv.is_empty());
    assert_eq!(calls[0], (0, true), "{calls:?}");
    assert!(
        calls[1..].iter().all(|(n, afresh)| !afresh && *n <= 64),
        "{calls:?}"
    );
    assert!(
        calls.len() >= 4,
        "two pages of 100 and 50 in chunks: {calls:?}"
    );
    assert_eq!(names.len(), 150);
    names.dedup();
    assert_eq!(names.len(), 150);
    // list_all over the same pages still gives everything.
    let all = c
        .list_all(&CONFIGMAPS, Some("default"), &opts)
        .expect("list");
    assert_eq!(all.items.len(), 150);
}

#[test]
fn a_waiting_request_goes_before_a_waiting_event_and_events_drain_when_idle() {
    use crate::api::resources::CONFIGMAPS;
    use crate::sandbox::{Sandbox, SandboxOptions};
    use serde_json::json;
    let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
    let cfg = RestConfig {
        server: sb.url(),
        source: "test".into(),
        ..Default::default()
    };
    // One request a second, no burst: the first request empties the bucket.
    let c = Client::new(&cfg, 1.0, 1, "limiter-test").expect("client");
    let cm =
        |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    c.create(&CONFIGMAPS, Some("default"), &cm("first"))
        .expect("first");
    // An Event-like write starts waiting; a worker's request comes just after it.
    let ev = {
        let c = c.clone();
        std::thread::spawn(move || {
            c.create_unanswered(&CONFIGMAPS, Some("default"), &cm("event"))
                .map(|()| Instant::now())
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    c.create(&CONFIGMAPS, Some("default"), &cm("worker"))
        .expect("worker");
    let worker_done = Instant::now();
    let event_done = ev.join().expect("thread").expect("event");
    assert!(
        event_done > worker_done,
        "the event went first: {:?} before the worker",
        worker_done - event_done
    );
    // Nobody else asks: the waiting ones all go, one per token.
    let c = Client::new(&cfg, 50.0, 1, "limiter-test").expect("client");
    for i in 0..5 {
        c.create_unanswered(&CONFIGMAPS, Some("default"), &cm(&format!("idle-{i}")))
            .expect("idle event");
    }
    let names: Vec<String> = c
        .list_all(&CONFIGMAPS, Some("default"), &ListOptions::default())
        .expect("list")
        .items
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    for n in ["first", "worker", "event", "idle-0", "idle-4"] {
        assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
    }
}
