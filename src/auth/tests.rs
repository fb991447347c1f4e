//! Delegated authentication and authorization, decided on requests built in the test.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A reviewer answering from tables: token -> user, (user, path) -> status.
#[derive(Default)]
struct Fake {
    tokens: HashMap<String, Value>,
    rules: Vec<(String, String, Value)>,
    fail: bool,
    calls: AtomicUsize,
    configmap: Option<Value>,
}

impl Reviewer for Fake {
    fn create_review(&self, kind: &Kind, body: &Value) -> Result<Value> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            return Err(Error::Transport("connection refused".into()));
        }
        if kind.plural == "tokenreviews" {
            let t = body["spec"]["token"].as_str().unwrap_or("");
            let status = match self.tokens.get(t) {
                Some(u) => json!({"authenticated": true, "user": u}),
                None => json!({"authenticated": false}),
            };
            return Ok(json!({ "status": status }));
        }
        let user = body["spec"]["user"].as_str().unwrap_or("");
        let path = body["spec"]["nonResourceAttributes"]["path"]
            .as_str()
            .unwrap_or("");
        let verb = body["spec"]["nonResourceAttributes"]["verb"]
            .as_str()
            .unwrap_or("");
        let status = self
            .rules
            .iter()
            .find(|(u, p, _)| u == user && p == path && verb == "get")
            .map(|(_, _, s)| s.clone())
            .unwrap_or(json!({"allowed": false}));
        Ok(json!({ "status": status }))
    }
    fn get_configmap(&self, _ns: &str, _name: &str) -> Result<Option<Value>> {
        if self.fail {
            return Err(Error::api(403, "Forbidden", "no"));
        }
        Ok(self.configmap.clone())
    }
}

fn dynr(f: &Arc<Fake>) -> Arc<dyn Reviewer> {
    f.clone()
}

fn fake() -> Arc<Fake> {
    let mut f = Fake::default();
    f.tokens.insert(
        "mon".into(),
        json!({"username": "system:serviceaccount:ns:mon", "uid": "u1",
               "groups": ["system:serviceaccounts", "system:authenticated"]}),
    );
    f.tokens.insert(
        "plain".into(),
        json!({"username": "plain", "groups": ["devs"], "extra": {"scope": ["a"]}}),
    );
    f.tokens.insert(
        "admin".into(),
        json!({"username": "root", "groups": ["system:masters"]}),
    );
    f.rules.push((
        "system:serviceaccount:ns:mon".into(),
        "/metrics".into(),
        json!({"allowed": true}),
    ));
    f.rules.push((
        "plain".into(),
        "/metrics".into(),
        json!({"allowed": false, "reason": "no RBAC policy matched"}),
    ));
    f.rules.push((
        "plain".into(),
        "/both".into(),
        json!({"allowed": true, "denied": true}),
    ));
    Arc::new(f)
}

fn chain(f: Arc<Fake>) -> Arc<Delegating> {
    Delegating::new(AuthOptions {
        authentication: Some(dynr(&f)),
        authorization: Some(dynr(&f)),
        skip_lookup: true,
        ..AuthOptions::default()
    })
    .unwrap()
}

fn req(method: &str, path: &str, token: Option<&str>) -> Request {
    let mut r = Request {
        method: method.into(),
        path: path.into(),
        ..Default::default()
    };
    if let Some(t) = token {
        r.headers
            .push(("authorization".into(), format!("Bearer {t}")));
    }
    r
}

fn body(r: &Response) -> String {
    String::from_utf8(r.body.clone()).unwrap()
}

#[test]
fn decision_table() {
    let d = chain(fake());
    // (method, path, token, expected status or None for "passes")
    let cases: &[(&str, &str, Option<&str>, Option<u16>)] = &[
        ("GET", "/healthz", None, None),
        ("GET", "/readyz", None, None),
        ("GET", "/livez", None, None),
        ("GET", "/healthz/ping", None, Some(403)),
        ("GET", "/metrics", None, Some(403)),
        ("GET", "/healthz", Some("garbage"), Some(401)),
        ("GET", "/metrics", Some("garbage"), Some(401)),
        ("GET", "/metrics", Some("mon"), None),
        ("POST", "/metrics", Some("mon"), Some(403)),
        ("GET", "/metrics", Some("plain"), Some(403)),
        ("GET", "/both", Some("plain"), Some(500)),
        ("GET", "/anything", Some("admin"), None),
        ("DELETE", "/metrics", Some("admin"), None),
    ];
    for (m, p, t, want) in cases {
        let got = d.check(&req(m, p, *t)).map(|r| r.status);
        assert_eq!(got, *want, "{m} {p} token={t:?}");
    }
}

#[test]
fn bearer_parsing() {
    let with = |h: &str| {
        let mut r = req("GET", "/", None);
        r.headers.push(("authorization".into(), h.into()));
        bearer_token(&r).map(str::to_string)
    };
    assert_eq!(with("Bearer abc"), Some("abc".into()));
    assert_eq!(with("bearer abc"), Some("abc".into()));
    assert_eq!(with("  Bearer abc  "), Some("abc".into()));
    assert_eq!(with("Bearer abc def"), Some("abc".into()));
    assert_eq!(with("Bearer "), None);
    assert_eq!(with("Bearer  abc"), None);
    assert_eq!(with("Basic Zm9vOmJhcg=="), None);
    assert_eq!(with(""), None);
    assert_eq!(bearer_token(&req("GET", "/", None)), None);
}

#[test]
fn users_and_groups() {
    let d = chain(fake());
    let u = d.authenticate(&req("GET", "/", None)).unwrap();
    assert_eq!(u, UserInfo::anonymous());
    let u = d.authenticate(&req("GET", "/", Some("plain"))).unwrap();
    assert_eq!(u.groups, vec!["devs", AUTHENTICATED_GROUP]);
    assert_eq!(u.extra["scope"], vec!["a"]);
    let u = d.authenticate(&req("GET", "/", Some("mon"))).unwrap();
    assert_eq!(u.uid, "u1");
    assert_eq!(
        u.groups
            .iter()
            .filter(|g| *g == AUTHENTICATED_GROUP)
            .count(),
        1
    );
    // An empty bearer token is no credential at all: anonymous.
    let mut r = req("GET", "/metrics", None);
    r.headers.push(("authorization".into(), "Bearer ".into()));
    assert_eq!(d.authenticate(&r).unwrap().name, ANONYMOUS_USER);
}

#[test]
fn reviews_are_cached() {
    let f = fake();
    let d = chain(f.clone());
    for _ in 0..3 {
        assert!(d.check(&req("GET", "/metrics", Some("mon"))).is_none());
        assert_eq!(
            d.check(&req("GET", "/metrics", Some("garbage")))
                .unwrap()
                .status,
            401
        );
    }
    // One TokenReview per token, one SubjectAccessReview for mon.
    assert_eq!(f.calls.load(Ordering::SeqCst), 3);

    // TTL zero: nothing is cached.
    let f = fake();
    let d = Delegating::new(AuthOptions {
        authentication: Some(dynr(&f)),
        authorization: Some(dynr(&f)),
        skip_lookup: true,
        token_cache_ttl: Duration::ZERO,
        authorized_ttl: Duration::ZERO,
        ..AuthOptions::default()
    })
    .unwrap();
    for _ in 0..2 {
        assert!(d.check(&req("GET", "/metrics", Some("mon"))).is_none());
    }
    assert_eq!(f.calls.load(Ordering::SeqCst), 4);
}

#[test]
fn failures_of_the_reviewers() {
    let f = Arc::new(Fake {
        fail: true,
        ..Fake::default()
    });
    let d = chain(f.clone());
    // TokenReview unreachable: 401, not cached.
    for _ in 0..2 {
        assert_eq!(
            d.check(&req("GET", "/healthz", Some("x"))).unwrap().status,
            401
        );
    }
    assert_eq!(f.calls.load(Ordering::SeqCst), 2);
    // SubjectAccessReview unreachable: 500 with Go's text.
    let mut r = req("GET", "/metrics", None);
    r.query = "a=<b>".into();
    let resp = d.check(&r).unwrap();
    assert_eq!(resp.status, 500);
    assert_eq!(
        body(&resp),
        "Internal Server Error: \"/metrics?a=&lt;b&gt;\": transport error: connection refused\n"
    );
    // Anonymous requests to always-allowed paths never ask.
    assert!(d.check(&req("GET", "/healthz", None)).is_none());
}

#[test]
fn without_kubeconfigs_only_always_allowed_pass() {
    let d = Delegating::new(AuthOptions::default()).unwrap();
    assert!(d.check(&req("GET", "/healthz", None)).is_none());
    assert_eq!(d.check(&req("GET", "/metrics", None)).unwrap().status, 403);
    // A token cannot be checked: it is ignored and the request is anonymous.
    let r = d.check(&req("GET", "/metrics", Some("anything"))).unwrap();
    assert!(body(&r).contains("User \\\"system:anonymous\\\""));
}

#[test]
fn always_allow_paths_syntax() {
    let p = PathAllow::new(&["/healthz".into(), "/debug/*".into(), "/".into()]).unwrap();
    assert!(p.allows("/healthz"));
    assert!(!p.allows("/healthz/ping"));
    assert!(p.allows("/debug/pprof/heap"));
    assert!(p.allows("/"));
    assert!(!p.allows("/metrics"));
    let err = PathAllow::new(&["/a*b".into()]).err().unwrap();
    assert_eq!(err.to_string(), "only trailing * allowed in \"a*b\"");
}

#[test]
fn answer_bodies_match_upstream() {
    let r = unauthorized();
    assert_eq!(
        body(&r),
        "{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {},\n  \
         \"status\": \"Failure\",\n  \"message\": \"Unauthorized\",\n  \"reason\": \
         \"Unauthorized\",\n  \"code\": 401\n}"
    );
    assert_eq!(r.body.len(), 157);
    assert_eq!(r.content_type, "application/json");
    assert_eq!(r.header("x-content-type-options"), None);
    let r = forbidden("system:anonymous", "get", "/metrics", "");
    assert_eq!(r.body.len(), 224);
    assert!(body(&r).contains(
        "\"message\": \"forbidden: User \\\"system:anonymous\\\" cannot get path \\\"/metrics\\\"\""
    ));
    assert!(body(&r).contains("\"details\": {},\n  \"code\": 403\n}"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let r = forbidden("a<b", "head", "/x", "no RBAC policy matched");
    assert!(body(&r).contains(
        "forbidden: User \\\"a&lt;b\\\" cannot head path \\\"/x\\\": no RBAC policy matched"
    ));
}

#[test]
fn forbidden_reason_from_the_review() {
    let d = chain(fake());
    let r = d.check(&req("GET", "/metrics", Some("plain"))).unwrap();
    assert!(body(&r).contains(
        "forbidden: User \\\"plain\\\" cannot get path \\\"/metrics\\\": no RBAC policy matched"
    ));
}

#[test]
fn lookup_failure_is_fatal_unless_tolerated() {
    let f = Arc::new(Fake {
        fail: true,
        ..Fake::default()
    });
    let opts = || AuthOptions {
        authentication: Some(dynr(&f)),
        ..AuthOptions::default()
    };
    let err = Delegating::new(opts()).err().unwrap();
    assert!(err
        .to_string()
        .contains("unable to load configmap based request-header-client-ca-file"));
    let d = Delegating::new(AuthOptions {
        tolerate_lookup_failure: true,
        ..opts()
    })
    .unwrap();
    assert!(d.request_header.is_none());
    assert!(d.x509.is_some());
    // NotFound is fine.
    let ok = Arc::new(Fake::default());
    let d = Delegating::new(AuthOptions {
        authentication: Some(dynr(&ok)),
        ..AuthOptions::default()
    })
    .unwrap();
    assert!(d.request_header.is_some());
}

#[test]
fn requestheader_settings_from_configmap() {
    let mut data = BTreeMap::new();
    data.insert(
        "requestheader-username-headers".to_string(),
        "[\"X-Remote-User\"]".to_string(),
    );
    data.insert(
        "requestheader-allowed-names".to_string(),
        "[\"front-proxy-client\"]".to_string(),
    );
    let s = RequestHeaderSettings::from_configmap(&data).unwrap();
    assert_eq!(s.username_headers, vec!["X-Remote-User"]);
    assert_eq!(s.allowed_names, vec!["front-proxy-client"]);
    assert!(s.group_headers.is_empty());
    data.insert("requestheader-group-headers".into(), "not json".into());
    assert!(RequestHeaderSettings::from_configmap(&data).is_err());
}

#[test]
fn path_unescaping() {
    assert_eq!(path_unescape("/a%2Fb").as_deref(), Some("/a/b"));
    assert_eq!(path_unescape("a+b").as_deref(), Some("a+b"));
    assert_eq!(path_unescape("%zz"), None);
    assert_eq!(path_unescape("%4"), None);
}

#[test]
fn subject_parsing() {
    use rcgen::{CertificateParams, DnType, KeyPair};
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    p.distinguished_name
        .push(DnType::CommonName, "kubernetes-admin");
    let cert = p.self_signed(&key).unwrap();
    let (cn, orgs) = subject_cn_and_orgs(cert.der()).unwrap();
    assert_eq!(cn, "kubernetes-admin");
    assert_eq!(orgs, vec!["system:masters"]);
    assert!(subject_cn_and_orgs(b"\x30\x03\x02\x01").is_none());
    assert!(subject_cn_and_orgs(&[]).is_none());
}
