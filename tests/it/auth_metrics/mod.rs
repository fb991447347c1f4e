//! Delegated authentication/authorization of the secure port and the /metrics exposition.
//!
//! * `sandbox_*` decision tables: TokenReviews and SubjectAccessReviews answered by the
//!   sandbox API server, client certificates from CAs published in the sandbox's
//!   `kube-system/extension-apiserver-authentication` ConfigMap.
//! * [`metrics`]: the exposition, parsed back with a small Prometheus text parser (HELP/TYPE,
//!   names, label syntax, histogram buckets cumulative with `+Inf` = count).
//! * `metrics::secure_port_scenario`: edgekcm itself (`--secure-port`, authn/authz
//!   kubeconfigs), against the sandbox and, with `KCM_E2E_KUBECONFIG`, a real kube-apiserver
//!   (ServiceAccount without rights: 403; bound to ClusterRole `system:monitoring`: 200).

mod metrics;

/// (what, method, path, who, expected status, expected body part)
type Case<'a> = (&'a str, &'a str, &'a str, Who<'a>, u16, Option<String>);

use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    create_namespace, delete_namespace, eventually, service_account_token, unique, Target,
};
use edgekcm::api::client::Client;
use edgekcm::api::resources::CONFIGMAPS;
use edgekcm::auth::{AuthOptions, Delegating, Reviewer};
use edgekcm::server::Request;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Certificates

struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn make_ca(cn: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = p.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(p, key),
    }
}

struct Leaf {
    der: Vec<u8>,
    pem: String,
    key_pem: String,
}

fn leaf(ca: &Ca, cn: &str, orgs: &[&str], expired: bool) -> Leaf {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    for o in orgs {
        p.distinguished_name.push(DnType::OrganizationName, *o);
    }
    p.distinguished_name.push(DnType::CommonName, cn);
    p.is_ca = IsCa::ExplicitNoCa;
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    if expired {
        p.not_before = rcgen::date_time_ymd(2000, 1, 1);
        p.not_after = rcgen::date_time_ymd(2001, 1, 1);
    }
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    Leaf {
        der: cert.der().to_vec(),
        pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

// ---------------------------------------------------------------------------------------------
// Cluster helpers

fn publish_auth_configmap(admin: &Client, data: Value) {
    let name = edgekcm::auth::AUTH_CONFIGMAP_NAME;
    let ns = edgekcm::auth::AUTH_CONFIGMAP_NAMESPACE;
    let cm = json!({"apiVersion":"v1","kind":"ConfigMap",
                    "metadata":{"name":name,"namespace":ns},"data":data});
    match admin.get(&CONFIGMAPS, Some(ns), name) {
        Ok(mut old) => {
            old["data"] = cm["data"].clone();
            admin.update(&CONFIGMAPS, &old).expect("update configmap");
        }
        Err(_) => {
            admin
                .create(&CONFIGMAPS, Some(ns), &cm)
                .expect("create configmap");
        }
    }
}

fn review_posts(t: &Target, plural: &str) -> usize {
    t.sandbox()
        .unwrap()
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.contains(plural))
        .count()
}

struct Who<'a> {
    token: Option<&'a str>,
    cert: Option<&'a Leaf>,
    headers: &'a [(&'a str, &'a str)],
}

const ANON: Who<'static> = Who {
    token: None,
    cert: None,
    headers: &[],
};

fn request(method: &str, path: &str, who: &Who) -> Request {
    let mut r = Request {
        method: method.into(),
        path: path.into(),
        ..Default::default()
    };
    if let Some(t) = who.token {
        r.headers
            .push(("authorization".into(), format!("Bearer {t}")));
    }
    for (k, v) in who.headers {
        r.headers.push((k.to_ascii_lowercase(), v.to_string()));
    }
    if let Some(c) = who.cert {
        r.peer_certs = vec![c.der.clone()];
    }
    r
}

fn status_of(d: &Delegating, method: &str, path: &str, who: &Who) -> (u16, String) {
    match d.check(&request(method, path, who)) {
        None => (200, String::new()),
        Some(r) => (r.status, String::from_utf8_lossy(&r.body).into_owned()),
    }
}

fn reviewer(c: &Client) -> Arc<dyn Reviewer> {
    Arc::new(c.clone())
}

// ---------------------------------------------------------------------------------------------
// Decision tables against the sandbox

/// What the front proxy says of carol: in `system:masters`, and without groups.
const PROXY_USER: &[(&str, &str)] = &[
    ("X-Remote-User", "carol"),
    ("X-Remote-Group", "system:masters"),
];
const PROXY_USER_NO_GROUP: &[(&str, &str)] = &[("X-Remote-User", "carol")];

fn who<'a>(
    token: Option<&'a str>,
    cert: Option<&'a Leaf>,
    headers: &'a [(&'a str, &'a str)],
) -> Who<'a> {
    Who {
        token,
        cert,
        headers,
    }
}

fn forbidden(user: &str, verb: &str, path: &str) -> String {
    format!("forbidden: User \\\"{user}\\\" cannot {verb} path \\\"{path}\\\"")
}

/// The client certificates of the decision table.
struct Certs {
    alice: Leaf,
    bob: Leaf,
    old: Leaf,
    stranger: Leaf,
    proxy: Leaf,
    rogue_proxy: Leaf,
}

/// The delegating chain, the client and front-proxy CAs published in the sandbox's ConfigMap,
/// and certificates of those two and of a CA nobody published.
fn decision_chain(admin: &Client) -> (Arc<Delegating>, Certs) {
    let client_ca = make_ca("client-ca");
    let proxy_ca = make_ca("front-proxy-ca");
    let other_ca = make_ca("somebody-else");
    publish_auth_configmap(
        admin,
        json!({
            "client-ca-file": client_ca.pem,
            "requestheader-client-ca-file": proxy_ca.pem,
            "requestheader-allowed-names": "[\"front-proxy-client\"]",
            "requestheader-username-headers": "[\"X-Remote-User\"]",
            "requestheader-group-headers": "[\"X-Remote-Group\"]",
            "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
        }),
    );
    let d = Delegating::new(AuthOptions {
        authentication: Some(reviewer(admin)),
        authorization: Some(reviewer(admin)),
        ..AuthOptions::default()
    })
    .expect("delegating chain");

    let certs = Certs {
        alice: leaf(&client_ca, "alice", &["system:masters"], false),
        bob: leaf(&client_ca, "bob", &["devs"], false),
        old: leaf(&client_ca, "alice", &["system:masters"], true),
        stranger: leaf(&other_ca, "alice", &["system:masters"], false),
        proxy: leaf(&proxy_ca, "front-proxy-client", &[], false),
        rogue_proxy: leaf(&proxy_ca, "rogue-proxy", &[], false),
    };
    (d, certs)
}

/// Anonymous requests and bearer tokens: `stale` minted before the sandbox expired its tokens,
/// `mon` allowed /metrics, `noperm` denied it.
fn token_cases<'a>(ns: &str, stale: &'a str, mon: &'a str, noperm: &'a str) -> Vec<Case<'a>> {
    let sa = |n: &str| format!("system:serviceaccount:{ns}:{n}");
    vec![
        ("anonymous healthz", "GET", "/healthz", ANON, 200, None),
        ("anonymous readyz", "GET", "/readyz", ANON, 200, None),
        (
            "anonymous metrics",
            "GET",
            "/metrics",
            ANON,
            403,
            Some(forbidden("system:anonymous", "get", "/metrics")),
        ),
        (
            "bad token on an always-allowed path",
            "GET",
            "/healthz",
            who(Some("garbage"), None, &[]),
            401,
            Some("\"message\": \"Unauthorized\"".into()),
        ),
        (
            "expired token",
            "GET",
            "/metrics",
            who(Some(stale), None, &[]),
            401,
            None,
        ),
        (
            "admin token (system:masters)",
            "GET",
            "/anything",
            who(Some("sandbox-admin"), None, &[]),
            200,
            None,
        ),
        (
            "ServiceAccount allowed",
            "GET",
            "/metrics",
            who(Some(mon), None, &[]),
            200,
            None,
        ),
        (
            "ServiceAccount denied",
            "GET",
            "/metrics",
            who(Some(noperm), None, &[]),
            403,
            Some(format!(
                "{}: denied by the sandbox's deny rules",
                forbidden(&sa("noperm"), "get", "/metrics")
            )),
        ),
    ]
}

/// Client certificates, of users and of the front proxy.
fn certificate_cases(c: &Certs) -> Vec<Case<'_>> {
    vec![
        (
            "client certificate in system:masters",
            "DELETE",
            "/metrics",
            who(None, Some(&c.alice), &[]),
            200,
            None,
        ),
        (
            "client certificate denied by review",
            "GET",
            "/metrics",
            who(None, Some(&c.bob), &[]),
            403,
            Some(forbidden("bob", "get", "/metrics")),
        ),
        (
            "client certificate; proxy headers ignored",
            "GET",
            "/metrics",
            who(None, Some(&c.bob), PROXY_USER),
            403,
            Some(forbidden("bob", "get", "/metrics")),
        ),
        (
            "expired client certificate",
            "GET",
            "/healthz",
            who(None, Some(&c.old), &[]),
            401,
            None,
        ),
        (
            "client certificate of an unknown CA",
            "GET",
            "/healthz",
            who(None, Some(&c.stranger), &[]),
            401,
            None,
        ),
        (
            "front proxy with a masters group",
            "GET",
            "/metrics",
            who(None, Some(&c.proxy), PROXY_USER),
            200,
            None,
        ),
        (
            "front proxy without a user header",
            "GET",
            "/metrics",
            who(None, Some(&c.proxy), &[]),
            401,
            None,
        ),
        (
            "front proxy with a name not allowed",
            "GET",
            "/metrics",
            who(None, Some(&c.rogue_proxy), PROXY_USER),
            401,
            None,
        ),
        (
            "front proxy user without groups, reviewed",
            "GET",
            "/healthz/ping",
            who(None, Some(&c.proxy), PROXY_USER_NO_GROUP),
            200,
            None,
        ),
    ]
}

#[test]
fn sandbox_authn_authz_decision_table() {
    let t = crate::common::sandbox();
    let sb = t.sandbox().unwrap();
    let admin = t.admin();
    let ns = unique("authz");
    create_namespace(&admin, &ns);
    // Tokens minted before expire_tokens() are no longer valid.
    let stale = service_account_token(&admin, &ns, "stale");
    sb.faults().expire_tokens();
    let mon = service_account_token(&admin, &ns, "mon");
    let noperm = service_account_token(&admin, &ns, "noperm");
    // The sandbox has no RBAC: deny what RBAC would deny here.
    sb.deny_access(&format!("system:serviceaccount:{ns}:noperm"), "/metrics");
    sb.deny_access("system:anonymous", "/metrics");
    sb.deny_access("bob", "/metrics");
    let (d, certs) = decision_chain(&admin);

    let mut cases = token_cases(&ns, &stale, &mon, &noperm);
    cases.extend(certificate_cases(&certs));
    for (what, method, path, w, want, body) in &cases {
        let (got, text) = status_of(&d, method, path, w);
        assert_eq!(got, *want, "{what}: {text}");
        if let Some(b) = body {
            assert!(text.contains(b.as_str()), "{what}: {text}");
        }
    }

    // Extra and groups reach the review: carol is denied only when her request says so.
    sb.deny_access("carol", "/private");
    let (code, text) = status_of(
        &d,
        "GET",
        "/private",
        &who(None, Some(&certs.proxy), PROXY_USER_NO_GROUP),
    );
    assert_eq!(code, 403, "{text}");
    assert!(text.contains(&forbidden("carol", "get", "/private")));

    delete_namespace(&admin, &ns);
}

#[test]
fn sandbox_reviews_are_cached_and_expire() {
    let t = crate::common::sandbox();
    let sb = t.sandbox().unwrap();
    let admin = t.admin();
    let ns = unique("cache");
    create_namespace(&admin, &ns);
    let mon = service_account_token(&admin, &ns, "mon");
    let d = Delegating::new(AuthOptions {
        authentication: Some(reviewer(&admin)),
        authorization: Some(reviewer(&admin)),
        skip_lookup: true,
        authorized_ttl: Duration::from_millis(200),
        ..AuthOptions::default()
    })
    .unwrap();
    let w = Who {
        token: Some(&mon),
        cert: None,
        headers: &[],
    };
    sb.clear_requests();
    for _ in 0..5 {
        assert_eq!(status_of(&d, "GET", "/metrics", &w).0, 200);
        assert_eq!(
            status_of(
                &d,
                "GET",
                "/metrics",
                &Who {
                    token: Some("nope"),
                    ..ANON
                }
            )
            .0,
            401
        );
    }
    assert_eq!(review_posts(&t, "tokenreviews"), 2);
    assert_eq!(review_posts(&t, "subjectaccessreviews"), 1);
    // A different verb is a different review.
    assert_eq!(status_of(&d, "HEAD", "/metrics", &w).0, 200);
    assert_eq!(review_posts(&t, "subjectaccessreviews"), 2);
    // After the authorized TTL the review is asked again (the token answer is still cached).
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(status_of(&d, "GET", "/metrics", &w).0, 200);
    assert_eq!(review_posts(&t, "subjectaccessreviews"), 3);
    assert_eq!(review_posts(&t, "tokenreviews"), 2);
    delete_namespace(&admin, &ns);
}

#[test]
fn sandbox_client_ca_follows_the_configmap() {
    let t = crate::common::sandbox();
    let admin = t.admin();
    let ca1 = make_ca("ca-one");
    let ca2 = make_ca("ca-two");
    publish_auth_configmap(&admin, json!({"client-ca-file": ca1.pem}));
    let d = Delegating::new(AuthOptions {
        authentication: Some(reviewer(&admin)),
        configmap_refresh: Duration::from_millis(100),
        ..AuthOptions::default()
    })
    .unwrap();
    let one = leaf(&ca1, "admin-one", &["system:masters"], false);
    let two = leaf(&ca2, "admin-two", &["system:masters"], false);
    let by = |l: &Leaf| {
        status_of(
            &d,
            "GET",
            "/metrics",
            &Who {
                cert: Some(l),
                ..ANON
            },
        )
        .0
    };
    assert_eq!(by(&one), 200);
    assert_eq!(by(&two), 401);
    publish_auth_configmap(&admin, json!({"client-ca-file": ca2.pem}));
    eventually(Duration::from_secs(10), "the new client CA", || {
        (by(&two) == 200).then_some(())
    });
    assert_eq!(by(&one), 401);
    // Without the key nobody authenticates by certificate; the request is anonymous and,
    // lacking an authorizer, forbidden.
    publish_auth_configmap(&admin, json!({}));
    eventually(Duration::from_secs(10), "no client CA", || {
        (by(&two) == 403).then_some(())
    });
}

#[test]
fn sandbox_client_ca_file_and_lookup_switches() {
    let t = crate::common::sandbox();
    let admin = t.admin();
    let dir = crate::common::TempDir::new("clientca");
    let ca = make_ca("file-ca");
    let file = dir.0.join("ca.crt");
    std::fs::write(&file, &ca.pem).unwrap();
    let d = Delegating::new(AuthOptions {
        client_ca_file: Some(file.clone()),
        skip_lookup: true,
        ..AuthOptions::default()
    })
    .unwrap();
    let admin_cert = leaf(&ca, "root", &["system:masters"], false);
    let w = Who {
        cert: Some(&admin_cert),
        ..ANON
    };
    assert_eq!(status_of(&d, "GET", "/metrics", &w).0, 200);
    // The file is re-read when it changes.
    let ca2 = make_ca("file-ca-2");
    std::fs::write(&file, format!("{}\n{}", ca2.pem, "")).unwrap();
    // Same second, different size: still noticed.
    assert_eq!(status_of(&d, "GET", "/metrics", &w).0, 401);

    // A missing or unreadable file is fatal at start.
    std::fs::write(&file, "garbage").unwrap();
    let err = Delegating::new(AuthOptions {
        client_ca_file: Some(file),
        skip_lookup: true,
        ..AuthOptions::default()
    })
    .err()
    .unwrap();
    assert!(
        err.to_string()
            .contains("unable to load client CA provider"),
        "{err}"
    );

    // No configmap at all (NotFound) is fine; authentication-skip-lookup never asks.
    let sb = t.sandbox().unwrap();
    sb.clear_requests();
    let _ = Delegating::new(AuthOptions {
        authentication: Some(reviewer(&admin)),
        skip_lookup: true,
        ..AuthOptions::default()
    })
    .unwrap();
    assert_eq!(
        sb.requests()
            .iter()
            .filter(|r| r.path.contains("extension-apiserver-authentication"))
            .count(),
        0
    );
    let _ = Delegating::new(AuthOptions {
        authentication: Some(reviewer(&admin)),
        ..AuthOptions::default()
    })
    .unwrap();
    assert_eq!(
        sb.requests()
            .iter()
            .filter(|r| r.path.contains("extension-apiserver-authentication"))
            .count(),
        1
    );
}
