use super::*;
use crate::cache::DeltaKind;
use serde_json::json;

fn lease(name: &str, identity: Option<&str>) -> Value {
    let mut l = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-system", "uid": name,
            "resourceVersion": "1"}});
    if let Some(v) = identity {
        l["metadata"]["labels"] = json!({decide::IDENTITY_LABEL: v});
    }
    l
}

fn sv(entries: &[(&str, &str)]) -> Value {
    let e: Vec<Value> = entries
        .iter()
        .map(|(id, enc)| {
            json!({"apiServerID": id, "encodingVersion": enc,
            "decodableVersions": [enc]})
        })
        .collect();
    json!({"apiVersion": "internal.apiserver.k8s.io/v1alpha1", "kind": "StorageVersion",
        "metadata": {"name": "apps.deployments", "uid": "sv", "resourceVersion": "1",
            "generation": 1},
        "status": {"storageVersions": e, "commonEncodingVersion": "apps/v1",
            "conditions": [{"type": "AllEncodingVersionsEqual", "status": "True",
                "reason": "CommonEncodingVersionSet", "message": "Common encoding version set",
                "observedGeneration": 1, "lastTransitionTime": "2024-01-01T00:00:00Z"}]}})
}

fn delta(kind: DeltaKind, o: Value) -> Delta {
    let o = Arc::new(o);
    match kind {
        DeltaKind::Deleted => Delta {
            kind,
            old: Some(o),
            new: None,
        },
        _ => Delta {
            kind,
            old: None,
            new: Some(o),
        },
    }
}

#[test]
fn only_deleted_identity_leases_of_kube_system_are_queued() {
    let d = |l| on_lease_delta(&delta(DeltaKind::Deleted, l));
    assert_eq!(
        d(lease("apiserver-a", Some("kube-apiserver"))),
        Some("apiserver-a".into())
    );
    assert_eq!(d(lease("n1", None)), None);
    assert_eq!(d(lease("x", Some("other"))), None);
    let mut elsewhere = lease("apiserver-b", Some("kube-apiserver"));
    elsewhere["metadata"]["namespace"] = json!("default");
    assert_eq!(d(elsewhere), None);
    assert_eq!(
        on_lease_delta(&delta(
            DeltaKind::Updated,
            lease("apiserver-a", Some("kube-apiserver"))
        )),
        None
    );
}

#[test]
fn storage_versions_with_unknown_servers_are_queued() {
    let (cache, _) = crate::controllers::testing::cx_with(&[]);
    cache.informer_for(&LEASE_WATCH);
    cache.store_for(&LEASE_WATCH).apply(
        DeltaKind::Added,
        lease("apiserver-a", Some("kube-apiserver")),
    );
    cache
        .store_for(&LEASE_WATCH)
        .apply(DeltaKind::Added, lease("apiserver-n", None));
    let q = |s| on_storage_version_delta(&delta(DeltaKind::Added, s), &cache);
    assert_eq!(q(sv(&[("apiserver-a", "apps/v1")])), None);
    assert_eq!(
        q(sv(&[
            ("apiserver-a", "apps/v1"),
            ("apiserver-gone", "apps/v1")
        ])),
        Some("apps.deployments".into())
    );
    assert_eq!(
        q(sv(&[("apiserver-n", "apps/v1")])),
        Some("apps.deployments".into()),
        "not an identity"
    );
    assert_eq!(
        on_storage_version_delta(&delta(DeltaKind::Deleted, sv(&[("gone", "v1")])), &cache),
        None
    );
}

#[test]
fn stale_entries_removed_and_the_common_version_recomputed() {
    let s = sv(&[("a", "apps/v1"), ("b", "apps/v1beta1")]);
    assert_eq!(entries_without(&s, |id| id == "c"), None);
    let keep = entries_without(&s, |id| id == "a").expect("one removed");
    assert_eq!(keep.len(), 1);
    let mut next = s.clone();
    next["status"]["storageVersions"] = Value::Array(keep);
    let now = crate::compat::timefmt::parse_rfc3339("2025-01-01T00:00:00Z").unwrap();
    set_common_encoding_version(&mut next, now);
    assert_eq!(next["status"]["commonEncodingVersion"], "apps/v1beta1");
    let c = &next["status"]["conditions"][0];
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("True"), Some("CommonEncodingVersionSet"))
    );
    assert_eq!(
        c["lastTransitionTime"], "2025-01-01T00:00:00Z",
        "the common version changed"
    );
    // Disagreeing entries: unset, False.
    let mut both = s.clone();
    set_common_encoding_version(&mut both, now);
    assert!(both["status"].get("commonEncodingVersion").is_none());
    let c = &both["status"]["conditions"][0];
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("CommonEncodingVersionUnset"))
    );
    assert_eq!(c["message"], "Common encoding version unset");
    // The same common version: no transition.
    let mut same = s;
    same["status"]["storageVersions"] = json!([{"apiServerID": "a", "encodingVersion": "apps/v1"}]);
    set_common_encoding_version(&mut same, now);
    assert_eq!(
        same["status"]["conditions"][0]["lastTransitionTime"],
        "2024-01-01T00:00:00Z"
    );
}
