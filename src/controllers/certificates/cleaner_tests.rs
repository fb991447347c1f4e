use super::*;
use base64::Engine as _;
use serde_json::json;

fn at(s: &str) -> SystemTime {
    crate::compat::timefmt::parse_rfc3339(s).expect("time")
}

const NOW: &str = "2024-05-02T12:00:00Z";

fn csr(created: &str, status: Value) -> Value {
    json!({"metadata": {"name": "c", "creationTimestamp": created}, "spec": {}, "status": status})
}

fn cond(type_: &str, updated: &str) -> Value {
    json!({"type": type_, "status": "True", "lastUpdateTime": updated,
           "lastTransitionTime": updated})
}

/// A PEM certificate valid until `not_after`, base64 as in `status.certificate`.
fn issued(not_after: (i32, u8, u8)) -> String {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.not_before = rcgen::date_time_ymd(2020, 1, 1);
    p.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
    let pem = p.self_signed(&key).unwrap().pem();
    base64::engine::general_purpose::STANDARD.encode(pem)
}

#[test]
fn retention_as_upstream() {
    let now = at(NOW);
    let old = "2024-05-02T10:59:59Z"; // just over an hour before
    let recent = "2024-05-02T11:00:01Z"; // just under
    let valid = issued((2030, 1, 1));

    let approved_issued = |t: &str| {
        csr(
            "2024-05-01T00:00:00Z",
            json!({"conditions": [cond("Approved", t)], "certificate": valid}),
        )
    };
    assert_eq!(
        decide(&approved_issued(old), now),
        Some(Reason::IssuedPastDeadline)
    );
    assert_eq!(decide(&approved_issued(recent), now), None);
    // Approved and not issued: kept however old (upstream keeps it).
    let unissued = csr(
        "2024-04-01T00:00:00Z",
        json!({"conditions": [cond("Approved", "2024-04-01T00:00:00Z")]}),
    );
    assert_eq!(decide(&unissued, now), None);

    let denied = |t| csr(NOW, json!({"conditions": [cond("Denied", t)]}));
    assert_eq!(decide(&denied(old), now), Some(Reason::DeniedPastDeadline));
    assert_eq!(decide(&denied(recent), now), None);
    let failed = |t| csr(NOW, json!({"conditions": [cond("Failed", t)]}));
    assert_eq!(decide(&failed(old), now), Some(Reason::FailedPastDeadline));
    assert_eq!(decide(&failed(recent), now), None);
    // Without lastUpdateTime (a zero time upstream) nothing is old.
    let untimed = csr(
        "2024-01-01T00:00:00Z",
        json!({"conditions": [{"type": "Denied", "status": "True"}]}),
    );
    assert_eq!(decide(&untimed, now), None);

    // Pending: 24 hours from creation.
    assert_eq!(
        decide(&csr("2024-05-01T11:59:59Z", json!({})), now),
        Some(Reason::PendingPastDeadline)
    );
    assert_eq!(decide(&csr("2024-05-01T12:00:01Z", json!({})), now), None);
    assert_eq!(decide(&csr("2024-05-01T12:00:01Z", Value::Null), now), None);

    // Issued with an expired certificate, approved a minute ago.
    let expired = csr(
        NOW,
        json!({"conditions": [cond("Approved", "2024-05-02T11:59:00Z")],
               "certificate": issued((2024, 5, 1))}),
    );
    assert_eq!(decide(&expired, now), Some(Reason::IssuedExpired));
    // A certificate that does not parse is not expired.
    let garbage = csr(
        NOW,
        json!({"conditions": [cond("Approved", "2024-05-02T11:59:00Z")],
               "certificate": base64::engine::general_purpose::STANDARD
                   .encode("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")}),
    );
    assert_eq!(decide(&garbage, now), None);
    assert_eq!(
        Reason::PendingPastDeadline.describe("c"),
        "Cleaning CSR as it is more than pendingExpiration duration old and unhandled. \
         csr=\"c\" pendingExpiration=\"24h0m0s\""
    );
}

#[test]
fn a_pass_deletes_what_is_due() {
    use crate::sandbox::{Sandbox, SandboxOptions};
    let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
    let client = sb.client("test");
    let cache = Cache::new(client.clone());
    cache.informer_for(&CSR_WATCH);
    let old = json!({"metadata": {"name": "old", "resourceVersion": "1",
                     "creationTimestamp": "2020-01-01T00:00:00Z"}});
    let new = json!({"metadata": {"name": "new", "resourceVersion": "2",
                     "creationTimestamp": crate::compat::timefmt::rfc3339(SystemTime::now())}});
    for o in [&old, &new] {
        let mut body = o.clone();
        body["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        body["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("creationTimestamp");
        sb.create(&CSRS, body).expect("create");
        cache
            .store_for(&CSR_WATCH)
            .apply(crate::cache::DeltaKind::Added, o.clone());
    }
    pass(&cache, &client, &AtomicBool::new(false));
    assert!(sb.get(&CSRS, None, "old").is_none());
    assert!(sb.get(&CSRS, None, "new").is_some());
    assert!(cache.store_for(&CSR_WATCH).get("old").is_none());
    // Already gone: nothing to report.
    cache
        .store_for(&CSR_WATCH)
        .apply(crate::cache::DeltaKind::Added, old);
    pass(&cache, &client, &AtomicBool::new(false));
}
