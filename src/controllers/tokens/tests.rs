use super::jwt::{LegacyClaims, Signer};
use super::*;
use crate::controllers::testing::Harness;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::signature::{self, UnparsedPublicKey};

const RSA_PKCS1: &str = include_str!("testdata/rsa-pkcs1.pem");
const RSA_PKCS8: &str = include_str!("testdata/rsa-pkcs8.pem");
const EC_P256_SEC1: &str = include_str!("testdata/ec-p256-sec1.pem");
const EC_P384_PKCS8: &str = include_str!("testdata/ec-p384-pkcs8.pem");
const EC_P521_SEC1: &str = include_str!("testdata/ec-p521-sec1.pem");

fn claims() -> LegacyClaims<'static> {
    LegacyClaims {
        namespace: "ns",
        service_account_name: "builder",
        service_account_uid: "u-1",
        secret_name: "builder-token",
    }
}

/// Split a compact JWS, check its signature with ring, return (header, payload).
fn verify(token: &str, signer: &Signer) -> (String, String) {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "{token}");
    let dec = |s: &str| URL_SAFE_NO_PAD.decode(s).expect("base64url");
    let input = format!("{}.{}", parts[0], parts[1]);
    let alg: &dyn signature::VerificationAlgorithm = match signer.alg() {
        "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
        "ES256" => &signature::ECDSA_P256_SHA256_FIXED,
        "ES384" => &signature::ECDSA_P384_SHA384_FIXED,
        a => panic!("{a}"),
    };
    UnparsedPublicKey::new(alg, signer.public_key())
        .verify(input.as_bytes(), &dec(parts[2]))
        .expect("signature verifies");
    // A changed payload does not.
    let forged = format!("{}.{}", parts[0], URL_SAFE_NO_PAD.encode(b"{}"));
    assert!(UnparsedPublicKey::new(alg, signer.public_key())
        .verify(forged.as_bytes(), &dec(parts[2]))
        .is_err());
    (
        String::from_utf8(dec(parts[0])).unwrap(),
        String::from_utf8(dec(parts[1])).unwrap(),
    )
}

#[test]
fn every_key_type_signs_verifiable_tokens_with_upstreams_header_and_kid() {
    // kid: base64url SHA-256 of the DER SubjectPublicKeyInfo, as `openssl pkey -pubout
    // -outform DER | openssl dgst -sha256` gives it for these keys.
    for (pem, alg, kid) in [
        (
            RSA_PKCS1,
            "RS256",
            "seZN7fOUv123J2M8tG3s0LA31CprqY-WZaYOUzPofrA",
        ),
        (
            RSA_PKCS8,
            "RS256",
            "28vUvaasYtsVAWt8yAkwgSPm4YReOrlkhIRIkZHbkUo",
        ),
        (
            EC_P256_SEC1,
            "ES256",
            "AcVhEo-fDl6VUlC4kaDZTrbWaXYVLq4dTO19jxZ9WDs",
        ),
        (
            EC_P384_PKCS8,
            "ES384",
            "rEh9U5JDprVKDQ8xXDQponvKZuQOKKdM5VnQqc2ufbE",
        ),
    ] {
        let s = Signer::from_pem(pem.as_bytes()).expect(alg);
        assert_eq!(s.alg(), alg);
        assert_eq!(s.kid(), kid, "{alg}");
        let token = s.legacy_token(&claims()).expect("signs");
        let (header, payload) = verify(&token, &s);
        assert_eq!(header, format!(r#"{{"alg":"{alg}","kid":"{kid}"}}"#));
        assert_eq!(
            payload,
            concat!(
                r#"{"iss":"kubernetes/serviceaccount","#,
                r#""kubernetes.io/serviceaccount/namespace":"ns","#,
                r#""kubernetes.io/serviceaccount/secret.name":"builder-token","#,
                r#""kubernetes.io/serviceaccount/service-account.name":"builder","#,
                r#""kubernetes.io/serviceaccount/service-account.uid":"u-1","#,
                r#""sub":"system:serviceaccount:ns:builder"}"#
            )
        );
        let v: Value = serde_json::from_str(&payload).unwrap();
        for absent in ["exp", "iat", "nbf", "aud", "jti"] {
            assert!(v.get(absent).is_none(), "{absent}");
        }
    }
}

#[test]
fn unusable_keys_are_refused_with_a_reason() {
    let e = Signer::from_pem(EC_P521_SEC1.as_bytes()).unwrap_err();
    assert!(e.contains("P-521"), "{e}");
    let e = Signer::from_pem(b"not a key").unwrap_err();
    assert_eq!(e, "data does not contain a valid RSA or ECDSA private key");
    // The first block that reads wins, as client-go's ParsePrivateKeyPEM.
    let both = format!(
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n{EC_P256_SEC1}{RSA_PKCS1}"
    );
    assert_eq!(Signer::from_pem(both.as_bytes()).unwrap().alg(), "ES256");
}

fn controller(root_ca: &[u8]) -> TokensController {
    TokensController {
        signer: Arc::new(Signer::from_pem(RSA_PKCS1.as_bytes()).unwrap()),
        root_ca: root_ca.to_vec(),
    }
}

fn sa(ns: &str, name: &str, uid: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": uid},
        "secrets": [{"name": "other"}, {"name": "t"}]})
}

fn token_secret(name: &str, sa_name: &str, sa_uid: Option<&str>, data: Value) -> Value {
    let mut ann = json!({ NAME_ANNOTATION: sa_name });
    if let Some(u) = sa_uid {
        ann[UID_ANNOTATION] = json!(u);
    }
    json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("s-{name}"),
        "resourceVersion": "5", "annotations": ann},
        "type": TOKEN_TYPE, "data": data})
}

#[test]
fn what_a_secret_lacks() {
    let ca = b"CA";
    let full = json!({"data": {"token": STANDARD.encode("t"), "namespace": STANDARD.encode("ns"),
        "ca.crt": STANDARD.encode(ca)}});
    assert_eq!(update_needed(&full, ca), (false, false, false));
    assert_eq!(update_needed(&full, b"other"), (true, false, false));
    // No root CA known: ca.crt is not looked at.
    assert_eq!(update_needed(&json!({}), b""), (false, true, true));
    assert_eq!(
        update_needed(&json!({"data": {"token": ""}}), ca),
        (true, true, true)
    );
}

#[test]
fn keys_carry_what_a_deletion_needs() {
    let mut h = Harness::new(controller(b""));
    h.add(SERVICEACCOUNTS, sa("ns", "builder", "u-1"));
    assert!(h.take_queued().is_empty());
    let s = token_secret("t", "builder", Some("u-1"), json!({}));
    h.add(SECRETS, s.clone());
    assert_eq!(h.take_queued(), ["secret:ns/t"]);
    h.delete(SECRETS, s);
    assert_eq!(h.take_queued(), ["secret-gone:ns/t:builder:u-1"]);
    h.delete(SERVICEACCOUNTS, sa("ns", "builder", "u-1"));
    assert_eq!(h.take_queued(), ["sa-gone:ns/builder:u-1"]);
    // Not a token Secret, or no ServiceAccount named: nothing.
    let mut opaque = token_secret("o", "builder", None, json!({}));
    opaque["type"] = json!("Opaque");
    h.add(SECRETS, opaque);
    h.add(SECRETS, token_secret("n", "", None, json!({})));
    assert!(h.take_queued().is_empty());
    assert!(h.sync("garbage").is_empty());
    assert!(h.sync("secret:nons").is_empty());
}

#[test]
fn complete_secret_of_existing_account_needs_nothing() {
    let ca = b"-----BEGIN CERTIFICATE-----\n";
    let mut h = Harness::new(controller(ca));
    h.add(SERVICEACCOUNTS, sa("ns", "builder", "u-1"));
    h.add(
        SECRETS,
        token_secret(
            "t",
            "builder",
            Some("u-1"),
            json!({"token": STANDARD.encode("x"), "namespace": STANDARD.encode("ns"),
                "ca.crt": STANDARD.encode(ca)}),
        ),
    );
    // No request is made (the harness' client would fail it).
    assert!(h.sync("secret:ns/t").is_empty());
}

#[test]
fn account_deleted_removes_its_tokens_only() {
    let mut h = Harness::new(controller(b""));
    h.add(SERVICEACCOUNTS, sa("ns", "other", "u-9"));
    h.add(
        SECRETS,
        token_secret("a", "builder", Some("u-1"), json!({})),
    );
    h.add(SECRETS, token_secret("b", "builder", None, json!({})));
    h.add(
        SECRETS,
        token_secret("c", "builder", Some("u-2"), json!({})),
    );
    h.add(SECRETS, token_secret("d", "other", Some("u-9"), json!({})));
    let out = h.outcome("sa-gone:ns/builder:u-1");
    let deletes: Vec<(String, Option<String>)> = out
        .actions
        .iter()
        .map(|a| match a {
            Action::Delete { name, options, .. } => {
                (name.clone(), options.precondition_uid.clone())
            }
            a => panic!("{a:?}"),
        })
        .collect();
    assert_eq!(
        deletes,
        [
            ("a".to_string(), Some("s-a".to_string())),
            ("b".to_string(), Some("s-b".to_string()))
        ]
    );
    // It is back with the same UID: nothing; with a new UID: the old one's tokens go.
    h.add(SERVICEACCOUNTS, sa("ns", "builder", "u-1"));
    assert!(h.sync("sa-gone:ns/builder:u-1").is_empty());
    h.update(SERVICEACCOUNTS, sa("ns", "builder", "u-3"));
    assert_eq!(h.sync("sa-gone:ns/builder:u-1").deletes.len(), 2);
}

#[test]
fn secret_of_an_account_with_another_uid_is_deleted_after_a_live_look() {
    // The cached account has another UID, and the live GET fails (no server): an error,
    // retried, nothing deleted on a guess.
    let mut h = Harness::new(controller(b""));
    h.add(SERVICEACCOUNTS, sa("ns", "builder", "u-2"));
    h.add(
        SECRETS,
        token_secret("t", "builder", Some("u-1"), json!({})),
    );
    let cx = Cx {
        cache: &h.cache,
        now: h.now,
        client: &h.client,
    };
    assert!(h.ctrl.reconcile(&cx, "secret:ns/t").is_err());
}

#[test]
fn gone_secret_of_a_missing_account_needs_nothing() {
    let mut h = Harness::new(controller(b""));
    h.add(SERVICEACCOUNTS, sa("ns", "builder", "u-2"));
    // Another UID in the cache, or no account: no request, nothing written.
    assert!(h.sync("secret-gone:ns/t:builder:u-1").is_empty());
    assert!(h.sync("secret-gone:ns/t:missing:").is_empty());
}

#[test]
fn conflicts_and_gone_objects_are_not_failures() {
    let c = controller(b"");
    let conflict = crate::Error::api(409, "Conflict", "changed");
    let gone = crate::Error::api(404, "NotFound", "gone");
    let other = crate::Error::api(500, "InternalError", "boom");
    let del = delete_with_uid("ns", "t", "u");
    let put_secret = Action::Update {
        kind: SECRETS,
        object: json!({}),
    };
    let put_sa = Action::Update {
        kind: SERVICEACCOUNTS,
        object: json!({}),
    };
    assert_eq!(c.on_error(&del, &conflict), OnError::Ignore);
    assert_eq!(c.on_error(&del, &gone), OnError::Ignore);
    assert_eq!(c.on_error(&del, &other), OnError::Retry);
    assert_eq!(c.on_error(&put_secret, &conflict), OnError::Ignore);
    assert_eq!(c.on_error(&put_secret, &other), OnError::Retry);
    assert_eq!(c.on_error(&put_sa, &conflict), OnError::Retry);
    assert_eq!(c.on_error(&put_sa, &other), OnError::Ignore);
    let row = crate::controllers::testing::row("serviceaccount-token-controller");
    assert_eq!(row.max_retries, Some(10));
    assert_eq!(row.queue, "serviceaccount_tokens_secret");
    assert_eq!(row.workers, 5);
}

#[test]
fn builds_only_with_a_key() {
    let rest = crate::api::kubeconfig::RestConfig::default();
    let mut cfg = crate::config::Config::default();
    let cx = |cfg: &crate::config::Config| {
        build(&crate::controller::BuildCx {
            cfg,
            rest: &rest,
            workers: 5,
        })
    };
    assert!(cx(&cfg).unwrap().is_none());
    let dir = std::env::temp_dir().join(format!("edgekcm-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("sa.key");
    std::fs::write(&key, EC_P521_SEC1).unwrap();
    cfg.sa_controller.service_account_private_key_file = Some(key.clone());
    let err = cx(&cfg).err().expect("P-521 refused").to_string();
    assert!(err.contains("failed to build token generator"), "{err}");
    std::fs::write(&key, RSA_PKCS8).unwrap();
    let built = cx(&cfg).unwrap().expect("built");
    assert!(matches!(
        built,
        crate::controller::Runnable::Reconciles { .. }
    ));
    std::fs::remove_dir_all(&dir).ok();
}
