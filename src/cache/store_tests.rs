//! Tests of the store (`store.rs`).

use super::*;
use serde_json::json;

fn pod(ns: &str, name: &str, rv: &str, owner: Option<&str>) -> Value {
    let mut v = json!({"metadata":{"name":name,"namespace":ns,"resourceVersion":rv,"managedFields":[{"x":1}]}});
    if let Some(o) = owner {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":o,"controller":true}]);
    }
    v
}

#[test]
fn namespace_scan_and_owner_index() {
    let s = Store::new();
    s.apply(DeltaKind::Added, pod("a", "p1", "1", Some("o1")));
    s.apply(DeltaKind::Added, pod("a", "p2", "2", Some("o1")));
    s.apply(DeltaKind::Added, pod("a-b", "p3", "3", None));
    s.apply(DeltaKind::Added, pod("b", "p4", "4", Some("o2")));
    assert_eq!(s.list_namespace("a").len(), 2);
    assert_eq!(s.list_namespace("a-b").len(), 1);
    let v: Vec<(String, String)> = s
        .versions_namespace("a")
        .into_iter()
        .map(|(k, rv)| (k, rv.to_string()))
        .collect();
    assert_eq!(
        v,
        [
            ("a/p1".to_string(), "1".to_string()),
            ("a/p2".into(), "2".into())
        ]
    );
    assert_eq!(s.by_owner("o1").len(), 2);
    let names = s.scan(|o| (obj::namespace(o) == "a").then(|| obj::name(o).to_string()));
    assert_eq!(names, ["p1", "p2"]);
    // re-owned: the index follows
    s.apply(DeltaKind::Updated, pod("a", "p1", "5", Some("o2")));
    assert_eq!(s.by_owner("o1").len(), 1);
    assert_eq!(s.by_owner("o2").len(), 2);
    let d = s.apply(DeltaKind::Deleted, pod("b", "p4", "6", None));
    assert!(d.is_some_and(|d| d.old.is_some()));
    assert_eq!(s.by_owner("o2").len(), 1);
    assert_eq!(s.resource_version(), "6");
    assert!(s
        .get("a/p1")
        .is_some_and(|p| p["metadata"].get("managedFields").is_none()));
}

#[test]
fn claimable_is_owned_plus_orphans_of_the_namespace() {
    let s = Store::new();
    s.apply(DeltaKind::Added, pod("a", "mine", "1", Some("o1")));
    s.apply(DeltaKind::Added, pod("a", "theirs", "2", Some("o2")));
    let mut orphan = pod("a", "orphan", "3", None);
    orphan["spec"] = json!({"nodeName": "n1"});
    s.apply(DeltaKind::Added, orphan);
    s.apply(DeltaKind::Added, pod("a-b", "elsewhere", "4", None));
    s.apply(DeltaKind::Added, pod("b", "mine-too", "5", Some("o1")));
    // An owner reference that is not a controller reference leaves the object claimable.
    let mut weak = pod("a", "weak", "6", Some("o3"));
    weak["metadata"]["ownerReferences"][0]["controller"] = json!(false);
    s.apply(DeltaKind::Added, weak);
    let names = |v: Vec<Obj>| {
        v.iter()
            .map(|o| obj::name(o).to_string())
            .collect::<Vec<_>>()
    };
    let all = |_: &Value| true;
    assert_eq!(
        names(s.claimable("a", "o1", all)),
        ["mine", "orphan", "weak"]
    );
    assert_eq!(names(s.claimable("a", "o9", all)), ["orphan", "weak"]);
    // Orphans the caller would not take are left out (they are seen as metadata only);
    // what the owner already controls is always there.
    let no_orphans = |m: &Value| {
        assert!(m.get("spec").is_none(), "orphans are judged by metadata");
        false
    };
    assert_eq!(s.claimable("a", "o1", all)[1]["spec"]["nodeName"], "n1");
    assert_eq!(names(s.claimable("a", "o1", no_orphans)), ["mine"]);
    assert_eq!(
        names(s.claimable("a", "o9", |m: &Value| obj::name(m) == "weak")),
        ["weak"]
    );
    // Adopted: no longer an orphan of anybody else.
    s.apply(DeltaKind::Updated, pod("a", "orphan", "7", Some("o2")));
    assert_eq!(names(s.claimable("a", "o1", all)), ["mine", "weak"]);
    s.apply(DeltaKind::Deleted, pod("a", "weak", "8", None));
    assert_eq!(names(s.claimable("a", "o9", all)), Vec::<String>::new());
    // After a relist the index is rebuilt.
    s.replace(vec![pod("a", "orphan", "9", None)], "9");
    assert_eq!(names(s.claimable("a", "o1", all)), ["orphan"]);
}

#[test]
fn a_write_answered_after_the_deletion_does_not_bring_the_object_back() {
    let s = Store::new();
    s.apply(DeltaKind::Added, pod("a", "p", "5", None));
    s.apply(DeltaKind::Deleted, pod("a", "p", "9", None));
    // Our status update (rv 7) was answered before the deletion but seen after it.
    s.observe_write(pod("a", "p", "7", None));
    assert!(s.get("a/p").is_none());
    // A newer object of the same name (created after the watch position) is kept.
    s.observe_write(pod("a", "p", "12", None));
    assert!(s.get("a/p").is_some());
}

#[test]
fn replace_reports_differences() {
    let s = Store::new();
    s.apply(DeltaKind::Added, pod("a", "keep", "1", None));
    s.apply(DeltaKind::Added, pod("a", "change", "2", None));
    s.apply(DeltaKind::Added, pod("a", "gone", "3", None));
    let deltas = s.replace(
        vec![
            pod("a", "keep", "1", None),
            pod("a", "change", "7", None),
            pod("a", "new", "8", None),
        ],
        "9",
    );
    let mut kinds: Vec<_> = deltas
        .iter()
        .map(|d| (obj::name(d.object()).to_string(), d.kind))
        .collect();
    kinds.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        kinds,
        vec![
            ("change".to_string(), DeltaKind::Updated),
            ("gone".to_string(), DeltaKind::Deleted),
            ("keep".to_string(), DeltaKind::Updated),
            ("new".to_string(), DeltaKind::Added)
        ]
    );
    // The unchanged one is a resync: the same version before and after.
    let keep = deltas.iter().find(|d| obj::name(d.object()) == "keep");
    assert_eq!(
        keep.and_then(|d| d.old.as_deref())
            .map(obj::resource_version),
        Some("1")
    );
    assert_eq!(s.resource_version(), "9");
    assert_eq!(s.len(), 3);
}

#[test]
fn a_list_older_than_our_own_writes_does_not_undo_them() {
    let s = Store::new();
    s.apply(DeltaKind::Added, pod("a", "patched", "5", None));
    s.apply(DeltaKind::Added, pod("a", "old", "6", None));
    // Answers of our own writes, newer than anything the watch showed.
    s.observe_write(pod("a", "patched", "12", None));
    s.observe_write(pod("a", "created", "13", None));
    // A re-list answered from a snapshot at 10.
    let deltas = s.replace(
        vec![pod("a", "patched", "5", None), pod("a", "old", "6", None)],
        "10",
    );
    let rv = |k: &str| s.get(k).map(|p| obj::resource_version(&p).to_string());
    assert_eq!(rv("a/patched"), Some("12".into()));
    assert_eq!(rv("a/created"), Some("13".into()));
    assert_eq!(rv("a/old"), Some("6".into()));
    assert!(deltas.iter().all(|d| d.kind != DeltaKind::Deleted));
    // The watch resumes from the list's version.
    assert_eq!(s.resource_version(), "10");
    // A newer list still replaces everything.
    s.replace(vec![pod("a", "old", "6", None)], "20");
    assert_eq!(s.len(), 1);
}

#[test]
fn own_writes_never_go_backwards() {
    let s = Store::new();
    s.apply(DeltaKind::Added, pod("a", "p", "10", None));
    s.observe_write(pod("a", "p", "9", None));
    assert_eq!(
        s.get("a/p").map(|p| obj::resource_version(&p).to_string()),
        Some("10".into())
    );
    s.observe_write(pod("a", "p", "11", None));
    assert_eq!(
        s.get("a/p").map(|p| obj::resource_version(&p).to_string()),
        Some("11".into())
    );
}

#[test]
fn the_echo_of_our_own_write_is_told_but_not_stored_again() {
    let s = Store::new();
    s.observe_write(with_uid(pod("a", "p", "9", None), "u1"));
    // The watch's ADDED of the object we created: the handlers hear of it as an add (as
    // they would without the write: other controllers share the store), told from the
    // event itself (one resourceVersion is one content), and the store keeps what it had.
    let mut echo = with_uid(pod("a", "p", "9", None), "u1");
    echo["metadata"]["labels"] = json!({"seen": "watch"});
    let d = s.apply_shaped(DeltaKind::Added, echo).expect("delta");
    assert_eq!(d.kind, DeltaKind::Added);
    assert!(d.old.is_none());
    assert_eq!(
        d.new
            .as_deref()
            .map(|o| o["metadata"]["labels"]["seen"].clone()),
        Some(json!("watch"))
    );
    assert!(s.get("a/p").unwrap()["metadata"].get("labels").is_none());
    assert_eq!(s.resource_version(), "9");
    // A new version is stored.
    s.apply_shaped(
        DeltaKind::Updated,
        with_uid(pod("a", "p", "12", None), "u1"),
    );
    assert_eq!(obj::resource_version(&s.get("a/p").unwrap()), "12");
}

#[test]
fn an_answer_held_for_its_echo_is_the_echos_object() {
    use crate::api::echo::EchoSource;
    let s = Store::new();
    s.apply(DeltaKind::Added, with_uid(pod("a", "p", "5", None), "u1"));
    let answer: Obj = Arc::new(with_uid(pod("a", "p", "9", Some("n1")), "u1"));
    // Nothing is held until a watch takes echoes.
    s.observe_write_held(&answer);
    assert!(!s.waiting());
    s.hold_echoes();
    let newer: Obj = Arc::new(with_uid(pod("a", "p", "10", Some("n2")), "u1"));
    s.observe_write_held(&newer);
    // An answer older than what the store has is not held: its event has gone by.
    s.observe_write_held(&answer);
    assert!(s.take("a", "p", "9").is_none());
    let held = s.take("a", "p", "10").expect("held");
    assert!(Arc::ptr_eq(&held, &newer));
    assert!(!s.waiting());
    // Its event: the change from before the write, the answer itself as the object.
    let d = s.apply_obj(DeltaKind::Updated, held).expect("delta");
    assert_eq!(d.kind, DeltaKind::Updated);
    assert!(Arc::ptr_eq(d.new.as_ref().unwrap(), &newer));
    assert_eq!(obj::resource_version(d.old.as_ref().unwrap()), "5");
    assert_eq!(obj::resource_version(&s.get("a/p").unwrap()), "10");
}

#[test]
fn nameless_objects_are_skipped() {
    let s = Store::new();
    assert!(s.apply(DeltaKind::Added, json!({"metadata":{}})).is_none());
    assert!(s.is_empty());
}

fn with_uid(mut v: Value, uid: &str) -> Value {
    v["metadata"]["uid"] = json!(uid);
    v
}

#[test]
fn late_events_do_not_undo_our_own_writes() {
    let s = Store::new();
    s.apply(DeltaKind::Added, with_uid(pod("a", "p", "5", None), "u1"));
    s.observe_write(with_uid(pod("a", "p", "9", None), "u1"));
    // The watch catches up with an older version: ignored.
    assert!(s
        .apply(DeltaKind::Updated, with_uid(pod("a", "p", "7", None), "u1"))
        .is_none());
    assert_eq!(obj::resource_version(&s.get("a/p").unwrap()), "9");
    // The same version or a newer one goes in.
    assert!(s
        .apply(
            DeltaKind::Updated,
            with_uid(pod("a", "p", "10", None), "u1")
        )
        .is_some());

    // Deleted by us: a late update of the same object does not bring it back...
    s.observe_delete("a/p");
    assert!(s
        .apply(
            DeltaKind::Updated,
            with_uid(pod("a", "p", "11", None), "u1")
        )
        .is_none());
    assert!(s.get("a/p").is_none());
    // ...but its terminating state does (finalizers keep it), and so does a new object
    // of the same name.
    let mut terminating = with_uid(pod("a", "p", "12", None), "u1");
    terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert!(s.apply(DeltaKind::Updated, terminating).is_some());
    s.observe_delete("a/p");
    assert!(s
        .apply(DeltaKind::Added, with_uid(pod("a", "p", "13", None), "u2"))
        .is_some());
    // The DELETED event clears the tombstone.
    s.observe_delete("a/p");
    s.apply(
        DeltaKind::Deleted,
        with_uid(pod("a", "p", "14", None), "u2"),
    );
    assert!(s
        .apply(DeltaKind::Added, with_uid(pod("a", "p", "15", None), "u2"))
        .is_some());
}

#[test]
fn the_echo_of_our_own_update_is_the_change_from_before_it() {
    let s = Store::new();
    s.apply(DeltaKind::Added, pod("a", "p", "5", None));
    // Two writes of ours (say two controllers'), then their events.
    s.observe_write(pod("a", "p", "7", None));
    s.observe_write(pod("a", "p", "8", None));
    // The first write's event is older than what is stored: nothing to tell.
    assert!(s
        .apply(DeltaKind::Updated, pod("a", "p", "7", None))
        .is_none());
    // The last one's: the change since before both writes, once.
    let d = s
        .apply(DeltaKind::Updated, pod("a", "p", "8", None))
        .expect("delta");
    assert_eq!(d.kind, DeltaKind::Updated);
    assert_eq!(d.old.as_deref().map(obj::resource_version), Some("5"));
    assert_eq!(d.new.as_deref().map(obj::resource_version), Some("8"));
    // Later events are changes from the stored version again.
    s.observe_write(pod("a", "p", "9", None));
    let d = s
        .apply(DeltaKind::Updated, pod("a", "p", "10", None))
        .expect("delta");
    assert_eq!(d.old.as_deref().map(obj::resource_version), Some("8"));
    // A deletion forgets a write's former state.
    s.observe_write(pod("a", "p", "11", None));
    s.apply(DeltaKind::Deleted, pod("a", "p", "12", None));
    let d = s
        .apply(DeltaKind::Added, pod("a", "p", "13", None))
        .expect("delta");
    assert_eq!(d.kind, DeltaKind::Added);
}

#[test]
fn a_relist_before_our_writes_echo_reports_the_change_from_before_them() {
    let s = Store::new();
    s.apply(DeltaKind::Added, pod("a", "p", "5", None));
    s.observe_write(pod("a", "p", "7", None));
    s.observe_write(pod("a", "created", "8", None));
    let deltas = s.replace(
        vec![pod("a", "p", "7", None), pod("a", "created", "8", None)],
        "9",
    );
    let of = |name: &str| {
        deltas
            .iter()
            .find(|d| d.object()["metadata"]["name"] == name)
            .map(|d| {
                (
                    d.kind,
                    d.old
                        .as_deref()
                        .map(|o| obj::resource_version(o).to_string()),
                )
            })
    };
    assert_eq!(of("p"), Some((DeltaKind::Updated, Some("5".into()))));
    assert_eq!(of("created"), Some((DeltaKind::Added, None)));
}

#[test]
fn scan_fields_decodes_the_metadata_and_the_asked_parts_only() {
    let s = Store::new();
    let mut p = pod("a", "p1", "1", None);
    p["spec"] =
        json!({"nodeName": "n1", "volumes": [{"name": "v"}], "containers": [{"name": "c"}]});
    p["status"] = json!({"phase": "Running"});
    s.apply(DeltaKind::Added, p);
    let mut q = pod("a", "p2", "2", None);
    q["spec"] = json!({"containers": [{"name": "c"}]});
    s.apply(DeltaKind::Added, q);
    let seen = s.scan_fields(&["/spec/nodeName", "/spec/volumes"], |o| Some(o.clone()));
    assert_eq!(
        seen,
        [
            json!({"metadata": {"name": "p1", "namespace": "a", "resourceVersion": "1"},
                   "spec": {"nodeName": "n1", "volumes": [{"name": "v"}]}}),
            json!({"metadata": {"name": "p2", "namespace": "a", "resourceVersion": "2"}}),
        ]
    );
    // What `f` declines is left out, as with `scan`.
    let named = s.scan_fields(&[], |o| {
        (obj::name(o) == "p2").then(|| obj::name(o).to_string())
    });
    assert_eq!(named, ["p2"]);
}
