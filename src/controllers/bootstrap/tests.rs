use super::cleaner::TokenCleaner;
use super::signer::{BootstrapSigner, CLUSTER_INFO_WATCH};
use super::*;
use crate::api::resources::CONFIGMAPS;
use crate::compat::jws;
use crate::controller::Controller;
use crate::controllers::testing::Harness;
use serde_json::json;

fn b(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn token(id: &str, secret: &str, extra: &[(&str, &str)]) -> Value {
    let mut data = json!({"token-id": b(id), "token-secret": b(secret)});
    for (k, v) in extra {
        data[*k] = json!(b(v));
    }
    json!({"metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system",
        "uid": format!("u-{id}"), "resourceVersion": "3"},
        "type": TOKEN_SECRET_TYPE, "data": data})
}

const SIGNING: (&str, &str) = ("usage-bootstrap-signing", "true");
const KUBECONFIG: &str =
    "apiVersion: v1\nclusters:\n- cluster:\n    server: https://10.0.0.1:6443\n";

fn cluster_info(extra: &[(&str, &str)]) -> Value {
    let mut data = json!({"kubeconfig": KUBECONFIG});
    for (k, v) in extra {
        data[*k] = json!(v);
    }
    json!({"metadata": {"name": "cluster-info", "namespace": "kube-public", "resourceVersion": "9"},
        "data": data})
}

fn at(s: &str) -> std::time::SystemTime {
    crate::compat::timefmt::parse_rfc3339(s).unwrap()
}

#[test]
fn names_and_expiry_as_cluster_bootstrap_reads_them() {
    assert_eq!(parse_name("bootstrap-token-abc123"), Some("abc123"));
    for bad in [
        "bootstrap-token-ABC123",
        "bootstrap-token-abc12",
        "bootstrap-token-abc1234",
        "x-abc123",
    ] {
        assert_eq!(parse_name(bad), None, "{bad}");
    }
    let now = at("2030-01-01T00:00:00Z");
    let exp = |e: &str| expiration(&token("abcdef", "s", &[("expiration", e)]), now);
    assert_eq!(
        expiration(&token("abcdef", "s", &[]), now),
        Expiration::Never
    );
    assert_eq!(
        exp("2030-01-01T00:00:30Z"),
        Expiration::In(Duration::from_secs(30))
    );
    assert_eq!(
        exp("2030-01-01T01:00:30+01:00"),
        Expiration::In(Duration::from_secs(30))
    );
    assert_eq!(exp("2030-01-01T00:00:00Z"), Expiration::Expired);
    assert_eq!(exp("2029-12-31T23:59:59Z"), Expiration::Expired);
    // Unparsable: treated as expired.
    assert_eq!(exp("tomorrow"), Expiration::Expired);
}

#[test]
fn which_tokens_may_sign() {
    let now = at("2030-01-01T00:00:00Z");
    let ok = token("abcdef", "0123456789abcdef", &[SIGNING]);
    assert_eq!(
        signing_token(&ok, now),
        Some(("abcdef".into(), "0123456789abcdef".into()))
    );
    // Not allowed to sign, expired, id not the name's, no secret.
    assert_eq!(signing_token(&token("abcdef", "s", &[]), now), None);
    assert_eq!(
        signing_token(
            &token("abcdef", "s", &[("usage-bootstrap-signing", "yes")]),
            now
        ),
        None
    );
    let expired = token(
        "abcdef",
        "s",
        &[SIGNING, ("expiration", "2029-01-01T00:00:00Z")],
    );
    assert_eq!(signing_token(&expired, now), None);
    let mut other_id = ok.clone();
    other_id["data"]["token-id"] = json!(b("zzzzzz"));
    assert_eq!(signing_token(&other_id, now), None);
    let mut no_secret = ok.clone();
    no_secret["data"]["token-secret"] = json!("");
    assert_eq!(signing_token(&no_secret, now), None);
}

#[test]
fn signer_adds_replaces_and_removes_signatures() {
    let mut h = Harness::new(BootstrapSigner).at("2030-01-01T00:00:00Z");
    h.add(
        CONFIGMAPS,
        cluster_info(&[("jws-kubeconfig-gone00", "stale"), ("other", "kept")]),
    );
    assert_eq!(h.take_queued(), ["kube-public/cluster-info"]);
    h.add(
        SECRETS,
        token(
            "abcdef",
            "0123456789abcdef",
            &[SIGNING, ("expiration", "2030-01-01T00:10:00Z")],
        ),
    );
    h.add(SECRETS, token("nosign", "0123456789abcdef", &[]));
    assert_eq!(h.take_queued(), ["kube-public/cluster-info"]);
    let w = h.sync("kube-public/cluster-info");
    assert_eq!(w.updates.len(), 1);
    let data = &w.updates[0].2["data"];
    let sig = data["jws-kubeconfig-abcdef"].as_str().unwrap();
    assert!(jws::detached_is_valid(
        sig,
        KUBECONFIG,
        "abcdef",
        "0123456789abcdef"
    ));
    assert!(data.get("jws-kubeconfig-gone00").is_none());
    assert!(data.get("jws-kubeconfig-nosign").is_none());
    assert_eq!(data["other"], "kept");
    assert_eq!(data["kubeconfig"], KUBECONFIG);
    assert_eq!(w.updates[0].2["metadata"]["resourceVersion"], "9");
    // Looked at again when the token expires.
    assert_eq!(w.requeue_after, Some(Duration::from_secs(600)));

    // Signed already: nothing to write.
    let mut signed = cluster_info(&[("jws-kubeconfig-abcdef", sig), ("other", "kept")]);
    signed["metadata"]["resourceVersion"] = json!("10");
    h.update(CONFIGMAPS, signed);
    assert!(h.sync("kube-public/cluster-info").is_empty());
    // Expired: its signature goes.
    let later = Harness::new(BootstrapSigner).at("2030-01-01T00:10:00Z");
    let mut h2 = later;
    h2.add(CONFIGMAPS, cluster_info(&[("jws-kubeconfig-abcdef", sig)]));
    h2.add(
        SECRETS,
        token(
            "abcdef",
            "0123456789abcdef",
            &[SIGNING, ("expiration", "2030-01-01T00:10:00Z")],
        ),
    );
    let w = h2.sync("kube-public/cluster-info");
    assert_eq!(w.updates.len(), 1);
    assert!(w.updates[0].2["data"]
        .get("jws-kubeconfig-abcdef")
        .is_none());
    // Deleted token: queued, its signature goes.
    h.delete(SECRETS, token("abcdef", "0123456789abcdef", &[SIGNING]));
    assert_eq!(h.take_queued(), ["kube-public/cluster-info"]);
    let w = h.sync("kube-public/cluster-info");
    assert!(w.updates[0].2["data"]
        .get("jws-kubeconfig-abcdef")
        .is_none());
}

#[test]
fn signer_leaves_other_configmaps_and_namespaces_alone() {
    let mut h = Harness::new(BootstrapSigner);
    let mut elsewhere = cluster_info(&[]);
    elsewhere["metadata"]["namespace"] = json!("default");
    h.add(CONFIGMAPS, elsewhere);
    let mut t = token("abcdef", "s", &[SIGNING]);
    t["metadata"]["namespace"] = json!("default");
    h.add(SECRETS, t);
    assert!(h.take_queued().is_empty());
    // No cluster-info, or one without a kubeconfig: nothing.
    assert!(h.sync("kube-public/cluster-info").is_empty());
    h.add(CONFIGMAPS, json!({"metadata": {"name": "cluster-info", "namespace": "kube-public"}, "data": {"x": "y"}}));
    assert!(h.sync("kube-public/cluster-info").is_empty());
    assert_eq!(BootstrapSigner.watches()[0], CLUSTER_INFO_WATCH);
    // Upstream's queue names, one worker each.
    let (signer, cleaner) = (
        crate::controllers::testing::row("bootstrapsigner"),
        crate::controllers::testing::row("tokencleaner"),
    );
    assert_eq!(signer.queue, "bootstrap_signer_queue");
    assert_eq!(cleaner.queue, "token_cleaner");
    assert_eq!((signer.workers, cleaner.workers), (1, 1));
}

#[test]
fn cleaner_deletes_at_expiry_and_waits_until_then() {
    let mut h = Harness::new(TokenCleaner).at("2030-01-01T00:00:00Z");
    h.add(
        SECRETS,
        token("abcdef", "s", &[("expiration", "2030-01-01T00:05:00Z")]),
    );
    h.add(SECRETS, token("never0", "s", &[]));
    h.add(
        SECRETS,
        token("old000", "s", &[("expiration", "2029-01-01T00:00:00Z")]),
    );
    h.add(SECRETS, token("bad000", "s", &[("expiration", "soon")]));
    assert_eq!(
        h.take_queued(),
        [
            "kube-system/bootstrap-token-abcdef",
            "kube-system/bootstrap-token-bad000",
            "kube-system/bootstrap-token-never0",
            "kube-system/bootstrap-token-old000"
        ]
    );
    let w = h.sync("kube-system/bootstrap-token-abcdef");
    assert!(w.deletes.is_empty());
    assert_eq!(w.requeue_after, Some(Duration::from_secs(300)));
    assert!(h.sync("kube-system/bootstrap-token-never0").is_empty());
    assert_eq!(
        h.sync("kube-system/bootstrap-token-never0").requeue_after,
        None
    );
    for gone in ["old000", "bad000"] {
        let out = h.outcome(&format!("kube-system/bootstrap-token-{gone}"));
        let [Action::Delete { name, options, .. }] = out.actions.as_slice() else {
            panic!("{:?}", out.actions);
        };
        assert_eq!(name, &format!("bootstrap-token-{gone}"));
        assert_eq!(
            options.precondition_uid.as_deref(),
            Some(format!("u-{gone}").as_str())
        );
    }
    // At its expiry the first goes too.
    let h = {
        let mut h2 = Harness::new(TokenCleaner).at("2030-01-01T00:05:00Z");
        h2.add(
            SECRETS,
            token("abcdef", "s", &[("expiration", "2030-01-01T00:05:00Z")]),
        );
        h2
    };
    assert_eq!(
        h.sync("kube-system/bootstrap-token-abcdef").deletes.len(),
        1
    );
    // Deletions and other namespaces queue nothing.
    let mut h = Harness::new(TokenCleaner);
    h.delete(SECRETS, token("abcdef", "s", &[]));
    let mut t = token("abcdef", "s", &[("expiration", "2000-01-01T00:00:00Z")]);
    t["metadata"]["namespace"] = json!("default");
    h.add(SECRETS, t);
    assert!(h.take_queued().is_empty());
}

#[test]
fn cleaner_ignores_gone_and_changed() {
    let c = TokenCleaner;
    let a = Action::Event(crate::controller::EventSpec {
        involved: crate::controller::ObjectRef::of(&SECRETS, &json!({})),
        event_type: crate::controller::EventType::Normal,
        reason: String::new(),
        message: String::new(),
    });
    use crate::controller::OnError;
    assert_eq!(
        c.on_error(&a, &crate::Error::api(404, "NotFound", "")),
        OnError::Ignore
    );
    assert_eq!(
        c.on_error(&a, &crate::Error::api(409, "Conflict", "")),
        OnError::Ignore
    );
    assert_eq!(
        c.on_error(&a, &crate::Error::api(500, "InternalError", "")),
        OnError::Retry
    );
}

use crate::controller::Action;
