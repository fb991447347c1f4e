//! serviceaccount-token-controller, bootstrap-signer-controller and token-cleaner-controller
//! scenarios, against the sandbox always and a real kube-apiserver with `KCM_E2E_KUBECONFIG`
//! (`real_*`). The token controller needs `--service-account-private-key-file`: the
//! scenarios add a test key unless `KCM_E2E_KCM_ARGS` names one; against a real apiserver it
//! must name the key whose public half the apiserver trusts (`--service-account-key-file`),
//! and a token is then checked with a TokenReview. On the sandbox the token's signature is
//! checked with the test key.

use crate::common::*;
use base64::Engine as _;
use edgekcm::api::client::Client;
use edgekcm::api::resources::{CONFIGMAPS, NAMESPACES, SECRETS, SERVICEACCOUNTS, TOKENREVIEWS};
use edgekcm::compat::jws;
use edgekcm::controllers::tokens::jwt::Signer;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

const LIMIT: Duration = Duration::from_secs(30);
const TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
const TEST_KEY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/controllers/tokens/testdata/rsa-pkcs1.pem"
);

fn b64(s: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}
fn unb64(v: &Value) -> Vec<u8> {
    v.as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default()
}

/// The key edgekcm signs with: `KCM_E2E_KCM_ARGS`' or the test key.
fn key_file(t: &Target) -> (String, Vec<String>) {
    let named = t.edgekcm_args().iter().find_map(|a| {
        a.strip_prefix("--service-account-private-key-file=")
            .map(str::to_string)
    });
    match named {
        Some(k) => (k, vec![]),
        None if t.is_real() => panic!(
            "a real apiserver checks tokens with its --service-account-key-file: KCM_E2E_KCM_ARGS \
             must name the private half with --service-account-private-key-file"
        ),
        None => (
            TEST_KEY.to_string(),
            vec![format!("--service-account-private-key-file={TEST_KEY}")],
        ),
    }
}

fn start_tokens(t: &Target, tag: &str) -> Kcm {
    let (_, mut extra) = key_file(t);
    if !t
        .edgekcm_args()
        .iter()
        .any(|a| a.starts_with("--controllers"))
    {
        extra.push("--controllers=serviceaccount-token".into());
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    Kcm::start(t, tag, &extra)
}

fn create_sa(admin: &Client, ns: &str, name: &str, secrets: &[&str]) -> Value {
    let refs: Vec<Value> = secrets.iter().map(|s| json!({"name": s})).collect();
    admin
        .create(
            &SERVICEACCOUNTS,
            Some(ns),
            &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": name}, "secrets": refs}),
        )
        .expect("create ServiceAccount")
}

fn create_token_secret(admin: &Client, ns: &str, name: &str, sa: &str, uid: Option<&str>) -> Value {
    let mut ann = json!({"kubernetes.io/service-account.name": sa});
    if let Some(u) = uid {
        ann["kubernetes.io/service-account.uid"] = json!(u);
    }
    admin
        .create(
            &SECRETS,
            Some(ns),
            &json!({"apiVersion": "v1", "kind": "Secret", "type": TOKEN_TYPE,
                "metadata": {"name": name, "annotations": ann}}),
        )
        .expect("create token Secret")
}

fn gone(admin: &Client, kind: &edgekcm::api::Kind, ns: &str, name: &str) -> bool {
    matches!(admin.get(kind, Some(ns), name), Err(e) if e.is_not_found())
}

/// The token authenticates as the ServiceAccount: a TokenReview on a real apiserver, the
/// signature and claims with the key on the sandbox.
fn check_token(t: &Target, token: &str, ns: &str, sa: &Value, secret: &str) {
    let sa_name = sa["metadata"]["name"].as_str().unwrap();
    let user = format!("system:serviceaccount:{ns}:{sa_name}");
    if t.is_real() {
        let review = t
            .admin()
            .create(
                &TOKENREVIEWS,
                None,
                &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {"token": token}}),
            )
            .expect("TokenReview");
        assert_eq!(review["status"]["authenticated"], true, "{review}");
        assert_eq!(
            review["status"]["user"]["username"],
            user.as_str(),
            "{review}"
        );
        assert_eq!(
            review["status"]["user"]["uid"], sa["metadata"]["uid"],
            "{review}"
        );
        return;
    }
    let (key, _) = key_file(t);
    let signer = Signer::from_pem(&std::fs::read(key).unwrap()).unwrap();
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3);
    let dec = |s: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .unwrap()
    };
    ring::signature::UnparsedPublicKey::new(
        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        signer.public_key(),
    )
    .verify(
        format!("{}.{}", parts[0], parts[1]).as_bytes(),
        &dec(parts[2]),
    )
    .expect("signed with the key");
    let claims: Value = serde_json::from_slice(&dec(parts[1])).unwrap();
    assert_eq!(claims["sub"], user.as_str());
    assert_eq!(claims["iss"], "kubernetes/serviceaccount");
    assert_eq!(claims["kubernetes.io/serviceaccount/secret.name"], secret);
    assert_eq!(
        claims["kubernetes.io/serviceaccount/service-account.uid"],
        sa["metadata"]["uid"]
    );
}

/// A token Secret of an existing ServiceAccount gets `token`, `ca.crt`, `namespace` and the
/// UID annotation; the token authenticates as the account. A wrong `ca.crt` is put right
/// with the token kept.
fn fills_token_secrets(t: &Target) {
    let ns = Ns::with_cleanup(t, "tokens-fill", &[SECRETS]);
    let admin = &ns.admin;
    let sa = create_sa(admin, &ns.name, "builder", &[]);
    create_token_secret(admin, &ns.name, "builder-token", "builder", None);
    let _kcm = start_tokens(t, "tokens-fill");
    let s = eventually(LIMIT, "the token filled in", || {
        let s = admin.get(&SECRETS, Some(&ns.name), "builder-token").ok()?;
        (!unb64(&s["data"]["token"]).is_empty()).then_some(s)
    });
    assert_eq!(unb64(&s["data"]["namespace"]), ns.name.as_bytes());
    assert_eq!(
        s["metadata"]["annotations"]["kubernetes.io/service-account.uid"],
        sa["metadata"]["uid"]
    );
    let ca = unb64(&s["data"]["ca.crt"]);
    if t.is_real() {
        assert!(String::from_utf8_lossy(&ca).contains("BEGIN CERTIFICATE"));
    }
    let token = String::from_utf8(unb64(&s["data"]["token"])).unwrap();
    check_token(t, &token, &ns.name, &sa, "builder-token");

    // Someone breaks ca.crt (where a CA is known): put back, the token kept.
    if !ca.is_empty() {
        // (A patch: the apiserver labels a token it authenticated with its last use.)
        admin
            .patch(
                &SECRETS,
                Some(&ns.name),
                "builder-token",
                edgekcm::api::client::PatchType::Merge,
                &json!({"data": {"ca.crt": b64(b"tampered")}}),
                None,
            )
            .expect("tamper");
        let fixed = eventually(LIMIT, "ca.crt restored", || {
            let s = admin.get(&SECRETS, Some(&ns.name), "builder-token").ok()?;
            (unb64(&s["data"]["ca.crt"]) == ca).then_some(s)
        });
        assert_eq!(fixed["data"]["token"], s["data"]["token"]);
    }
}

/// Token Secrets naming no existing ServiceAccount, or another UID of it, are deleted; a
/// deleted token Secret leaves its ServiceAccount's `secrets`; a deleted ServiceAccount takes
/// its token Secrets with it.
fn cleans_up_after_deletions(t: &Target) {
    let ns = Ns::with_cleanup(t, "tokens-gone", &[SECRETS]);
    let admin = &ns.admin;
    let sa = create_sa(admin, &ns.name, "app", &["app-a", "app-b", "unrelated"]);
    let uid = sa["metadata"]["uid"].as_str().unwrap().to_string();
    create_token_secret(admin, &ns.name, "app-a", "app", Some(&uid));
    create_token_secret(admin, &ns.name, "app-b", "app", None);
    create_token_secret(admin, &ns.name, "orphan", "nobody", None);
    create_token_secret(
        admin,
        &ns.name,
        "stale-uid",
        "app",
        Some("00000000-dead-beef-0000-000000000000"),
    );
    let _kcm = start_tokens(t, "tokens-gone");
    for name in ["orphan", "stale-uid"] {
        eventually(LIMIT, &format!("{name} deleted"), || {
            gone(admin, &SECRETS, &ns.name, name).then_some(())
        });
    }
    eventually(LIMIT, "app-a filled", || {
        let s = admin.get(&SECRETS, Some(&ns.name), "app-a").ok()?;
        (!unb64(&s["data"]["token"]).is_empty()).then_some(())
    });
    admin
        .delete(&SECRETS, Some(&ns.name), "app-a", &Default::default())
        .expect("delete app-a");
    eventually(LIMIT, "app-a out of the ServiceAccount's secrets", || {
        let sa = admin.get(&SERVICEACCOUNTS, Some(&ns.name), "app").ok()?;
        let names: Vec<&str> = sa["secrets"]
            .as_array()?
            .iter()
            .filter_map(|s| s["name"].as_str())
            .collect();
        (names == ["app-b", "unrelated"]).then_some(())
    });
    admin
        .delete(&SERVICEACCOUNTS, Some(&ns.name), "app", &Default::default())
        .expect("delete ServiceAccount");
    eventually(LIMIT, "app-b deleted with its ServiceAccount", || {
        gone(admin, &SECRETS, &ns.name, "app-b").then_some(())
    });
}

fn ensure_namespace(admin: &Client, name: &str) {
    let _ = admin.create(
        &NAMESPACES,
        None,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    );
}

const KUBECONFIG: &str = "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: AAAA\n    server: https://10.0.0.1:6443\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {}\nusers: null\n";

/// A bootstrap token Secret (`stringData`, as kubeadm writes it); deleted on drop.
struct BootstrapToken {
    admin: Client,
    id: String,
    secret: String,
}
impl BootstrapToken {
    fn new(admin: &Client, extra: Value) -> BootstrapToken {
        let id: String = (0..6)
            .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
            .collect();
        let secret: String = (0..16)
            .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
            .collect();
        let mut data = json!({"token-id": id, "token-secret": secret});
        for (k, v) in extra.as_object().into_iter().flatten() {
            data[k] = v.clone();
        }
        admin
            .create(
                &SECRETS,
                Some("kube-system"),
                &json!({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
                    "metadata": {"name": format!("bootstrap-token-{id}")}, "stringData": data}),
            )
            .expect("create bootstrap token");
        BootstrapToken {
            admin: admin.clone(),
            id,
            secret,
        }
    }
    fn name(&self) -> String {
        format!("bootstrap-token-{}", self.id)
    }
}
impl Drop for BootstrapToken {
    fn drop(&mut self) {
        let _ = self.admin.delete(
            &SECRETS,
            Some("kube-system"),
            &self.name(),
            &Default::default(),
        );
    }
}

fn cluster_info(admin: &Client) -> Value {
    admin
        .get(&CONFIGMAPS, Some("kube-public"), "cluster-info")
        .expect("cluster-info")
}

/// `cluster-info` carries a valid detached JWS for every token allowed to sign, and loses it
/// when the token goes; tokens not allowed to sign add nothing.
fn signs_cluster_info(t: &Target) {
    let admin = t.admin();
    ensure_namespace(&admin, "kube-public");
    ensure_namespace(&admin, "kube-system");
    let _ = admin.delete(
        &CONFIGMAPS,
        Some("kube-public"),
        "cluster-info",
        &Default::default(),
    );
    admin
        .create(
            &CONFIGMAPS,
            Some("kube-public"),
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info"},
                "data": {"kubeconfig": KUBECONFIG, "jws-kubeconfig-old000": "stale"}}),
        )
        .expect("create cluster-info");
    let signing = BootstrapToken::new(&admin, json!({"usage-bootstrap-signing": "true"}));
    let auth_only = BootstrapToken::new(&admin, json!({"usage-bootstrap-authentication": "true"}));
    let _kcm = start_with(t, "bootstrap-sign", "--controllers=bootstrapsigner");
    let key = format!("jws-kubeconfig-{}", signing.id);
    let cm = eventually(LIMIT, "cluster-info signed", || {
        let cm = cluster_info(&admin);
        cm["data"][&key].is_string().then_some(cm)
    });
    let sig = cm["data"][&key].as_str().unwrap();
    assert!(jws::detached_is_valid(
        sig,
        KUBECONFIG,
        &signing.id,
        &signing.secret
    ));
    // The stale entry went; the token that may not sign has none.
    assert!(cm["data"].get("jws-kubeconfig-old000").is_none(), "{cm}");
    let auth_key = format!("jws-kubeconfig-{}", auth_only.id);
    assert!(cm["data"].get(&auth_key).is_none(), "{cm}");
    assert_eq!(cm["data"]["kubeconfig"], KUBECONFIG);
    // The token goes: so does its signature.
    drop(signing);
    eventually(LIMIT, "the signature removed", || {
        let cm = cluster_info(&admin);
        (!cm["data"]
            .as_object()?
            .keys()
            .any(|k| k.starts_with("jws-")))
        .then_some(())
    });
}

/// Expired bootstrap tokens are deleted, at once or when they expire; others stay.
fn cleans_expired_tokens(t: &Target) {
    let admin = t.admin();
    ensure_namespace(&admin, "kube-system");
    let rfc = |d: i64| {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        edgekcm::compat::timefmt::rfc3339(
            SystemTime::UNIX_EPOCH + Duration::from_secs((now + d) as u64),
        )
    };
    let expired = BootstrapToken::new(&admin, json!({"expiration": rfc(-60)}));
    let soon = BootstrapToken::new(&admin, json!({"expiration": rfc(4)}));
    let later = BootstrapToken::new(&admin, json!({"expiration": rfc(3600)}));
    let never = BootstrapToken::new(&admin, json!({}));
    let _kcm = start_with(t, "token-clean", "--controllers=tokencleaner");
    let is_gone = |b: &BootstrapToken| gone(&admin, &SECRETS, "kube-system", &b.name());
    eventually(LIMIT, "the expired token deleted", || {
        is_gone(&expired).then_some(())
    });
    eventually(LIMIT, "the token deleted when it expires", || {
        is_gone(&soon).then_some(())
    });
    assert!(!is_gone(&later) && !is_gone(&never));
}

/// The apiserver is away for 10 s: a token that expired meanwhile is deleted once it is back,
/// a token Secret made right after is filled, signatures follow.
fn survives_an_apiserver_outage(t: &Target) {
    let admin = t.admin();
    ensure_namespace(&admin, "kube-system");
    let ns = Ns::with_cleanup(t, "tokens-outage", &[SECRETS]);
    create_sa(&ns.admin, &ns.name, "app", &[]);
    let soon = BootstrapToken::new(
        &admin,
        json!({"expiration": edgekcm::compat::timefmt::rfc3339(SystemTime::now() + Duration::from_secs(5))}),
    );
    let (_, mut extra) = key_file(t);
    extra.push("--controllers=serviceaccount-token,tokencleaner".into());
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut kcm = Kcm::start(t, "tokens-outage", &extra);
    // Synced: a Secret made now is filled.
    create_token_secret(&admin, &ns.name, "before", "app", None);
    eventually(LIMIT, "the first token filled", || {
        let s = admin.get(&SECRETS, Some(&ns.name), "before").ok()?;
        (!unb64(&s["data"]["token"]).is_empty()).then_some(())
    });
    let sh = |var: &str| {
        let c = std::env::var(var).unwrap_or_else(|_| panic!("the outage needs {var}"));
        let ok = std::process::Command::new("sh").arg("-c").arg(&c).status();
        assert!(matches!(ok, Ok(s) if s.success()), "command failed: {c}");
    };
    match t.sandbox() {
        Some(sb) => sb.stop_listening(),
        None => sh("KCM_E2E_APISERVER_STOP"),
    }
    std::thread::sleep(Duration::from_secs(10));
    match t.sandbox() {
        Some(sb) => sb.try_resume_listening().expect("listen again"),
        None => sh("KCM_E2E_APISERVER_START"),
    }
    eventually(Duration::from_secs(60), "the apiserver back", || {
        admin.get(&NAMESPACES, None, "kube-system").ok()
    });
    create_token_secret(&admin, &ns.name, "after", "app", None);
    eventually(
        LIMIT,
        "the token that expired during the outage deleted",
        || gone(&admin, &SECRETS, "kube-system", &soon.name()).then_some(()),
    );
    eventually(LIMIT, "a token filled after the outage", || {
        let s = admin.get(&SECRETS, Some(&ns.name), "after").ok()?;
        (!unb64(&s["data"]["token"]).is_empty()).then_some(())
    });
    assert!(kcm.exited().is_none(), "edgekcm kept running");
}

scenarios! {
    survives_an_apiserver_outage => survives_an_apiserver_outage,
    fills_token_secrets => fills_token_secrets,
    cleans_up_after_deletions => cleans_up_after_deletions,
    signs_cluster_info => signs_cluster_info,
    cleans_expired_tokens => cleans_expired_tokens,
}
