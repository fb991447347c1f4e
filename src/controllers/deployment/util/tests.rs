use super::hash::{semantic_eq_without_by_copy, ALPHANUMS};
use super::*;
use std::sync::Arc;

fn dep(spec: Value) -> Deployment {
    Deployment::parse(Arc::new(json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "d-1", "generation": 1},
        "spec": spec,
    })))
    .expect("parse")
}

fn rolling(replicas: i64, surge: Value, unavailable: Value) -> Deployment {
    dep(json!({"replicas": replicas, "template": {},
        "strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}}))
}

#[test]
fn int_or_percent_scaling() {
    let p = IntOrPercent::parse(&json!("25%"));
    assert_eq!(p, IntOrPercent::Percent(25));
    assert_eq!(p.scaled(10, true), Some(3));
    assert_eq!(p.scaled(10, false), Some(2));
    assert_eq!(p.scaled(4, true), Some(1));
    assert_eq!(p.scaled(4, false), Some(1));
    assert_eq!(p.scaled(0, true), Some(0));
    assert_eq!(IntOrPercent::parse(&json!(3)).scaled(10, true), Some(3));
    assert_eq!(IntOrPercent::parse(&json!("3")), IntOrPercent::Invalid);
    assert_eq!(IntOrPercent::parse(&json!("x%")), IntOrPercent::Invalid);
    assert_eq!(IntOrPercent::Percent(1).scaled(1, true), Some(1));
    assert_eq!(IntOrPercent::Percent(1).scaled(1, false), Some(0));
    assert_eq!(IntOrPercent::Percent(100).scaled(7, false), Some(7));
}

#[test]
fn fenceposts() {
    let p = |s: &str| Some(IntOrPercent::parse(&json!(s)));
    // Surge rounds up, unavailable rounds down.
    assert_eq!(resolve_fenceposts(p("25%"), p("25%"), 10), (3, 2));
    // Both zero after rounding: one may be unavailable.
    assert_eq!(resolve_fenceposts(p("1%"), p("1%"), 0), (0, 1));
    assert_eq!(resolve_fenceposts(p("0%"), p("1%"), 2), (0, 1));
    assert_eq!(
        resolve_fenceposts(Some(IntOrPercent::Int(0)), Some(IntOrPercent::Int(0)), 5),
        (0, 1)
    );
    assert_eq!(resolve_fenceposts(p("1%"), p("25%"), 2), (1, 0));
    assert_eq!(resolve_fenceposts(None, None, 3), (0, 1));

    let d = rolling(10, json!("25%"), json!("25%"));
    assert_eq!((d.max_surge(), d.max_unavailable()), (3, 2));
    let d = rolling(3, json!(1), json!(0));
    assert_eq!((d.max_surge(), d.max_unavailable()), (1, 0));
    // maxUnavailable never exceeds the replicas; 0 replicas -> 0.
    let d = rolling(2, json!(0), json!(5));
    assert_eq!(d.max_unavailable(), 2);
    let d = rolling(0, json!(1), json!(1));
    assert_eq!(d.max_unavailable(), 0);
    // Recreate: neither.
    let d = dep(json!({"replicas": 3, "template": {}, "strategy": {"type": "Recreate"}}));
    assert_eq!((d.max_surge(), d.max_unavailable()), (0, 0));
    // Defaults: 25% / 25%.
    let d = dep(json!({"replicas": 4, "template": {}}));
    assert_eq!((d.max_surge(), d.max_unavailable()), (1, 1));
}

#[test]
fn safe_encode_and_fnv() {
    // FNV-1a test vectors.
    assert_eq!(fnv32a(b""), 0x811c9dc5);
    assert_eq!(fnv32a(b"a"), 0xe40c292c);
    assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
    // Each character maps through the 27-character alphabet by its code point.
    assert_eq!(safe_encode("0123456789"), "456789bcdf");
    assert_eq!(safe_encode(""), "");
    assert_eq!(safe_encode("abc"), "vwx");
}

#[test]
fn hash_is_stable_and_depends_on_collision_count() {
    let t1 = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}});
    let t2 = json!({"spec": {"containers": [{"image": "nginx:1", "name": "c"}]},
        "metadata": {"labels": {"tier": "fe", "app": "web"}}});
    let h = compute_hash(&t1, None);
    assert_eq!(h, compute_hash(&t2, None));
    assert!(h.chars().all(|c| ALPHANUMS.contains(&(c as u8))));
    assert!(!h.is_empty() && h.len() <= 10);
    assert_ne!(h, compute_hash(&t1, Some(0)));
    assert_ne!(compute_hash(&t1, Some(0)), compute_hash(&t1, Some(1)));
    let t3 = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}});
    assert_ne!(h, compute_hash(&t3, None));
    // The exact value is fixed: ReplicaSet names must not change between releases.
    let mut s = String::new();
    canonical_json(&t1, &mut s);
    assert_eq!(
        s,
        r#"{"metadata":{"labels":{"app":"web","tier":"fe"}},"spec":{"containers":[{"image":"nginx:1","name":"c"}]}}"#
    );
    assert_eq!(h, safe_encode(&fnv32a(s.as_bytes()).to_string()));
}

#[test]
fn equal_ignoring_the_hash_label() {
    let d = json!({"metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
        "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}});
    let rs = json!({"metadata": {"labels": {"app": "web", "pod-template-hash": "abc"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1", "env": []}]}});
    assert!(equal_ignore_hash(&d, &rs));
    let other = json!({"metadata": {"labels": {"app": "web", "pod-template-hash": "abc"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}});
    assert!(!equal_ignore_hash(&d, &other));
    let only_hash = json!({"metadata": {"labels": {"pod-template-hash": "x"}}});
    assert!(equal_ignore_hash(&only_hash, &json!({})));
    assert!(!equal_ignore_hash(
        &json!({"metadata": {"labels": {"a": "1"}}}),
        &json!({"metadata": {"labels": {"a": "2"}}})
    ));
}

#[test]
fn equal_ignoring_the_hash_label_agrees_with_removing_it_first() {
    let templates = [
        json!({}),
        json!(null),
        json!({"metadata": null}),
        json!({"metadata": {}}),
        json!({"metadata": {"labels": null}}),
        json!({"metadata": {"labels": {}}}),
        json!({"metadata": {"labels": "odd"}}),
        json!({"metadata": "odd"}),
        json!({"metadata": {"labels": {"pod-template-hash": "h1"}}}),
        json!({"metadata": {"labels": {"pod-template-hash": "h2"}}}),
        json!({"metadata": {"labels": {"pod-template-hash": "h1", "app": "web"}}}),
        json!({"metadata": {"labels": {"app": "web"}}}),
        json!({"metadata": {"labels": {"app": "web", "x": ""}}}),
        json!({"metadata": {"labels": {"app": "web"}, "annotations": {}}}),
        json!({"metadata": {"labels": {"app": "db"}}}),
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}),
        json!({"metadata": {"name": "n"}, "spec": {"containers": [{"name": "c"}]}}),
        json!({"spec": {"containers": [{"name": "c"}]}}),
    ];
    for a in &templates {
        for b in &templates {
            assert_eq!(
                equal_ignore_hash(a, b),
                semantic_eq_without_by_copy(
                    Some(a),
                    Some(b),
                    &["metadata", "labels", POD_TEMPLATE_HASH]
                ),
                "{a} vs {b}"
            );
        }
    }
}

#[test]
fn selector_helpers() {
    let s = selector_with_label(
        &json!({"matchLabels": {"app": "web"}}),
        POD_TEMPLATE_HASH,
        "h",
    );
    assert_eq!(
        s,
        json!({"matchLabels": {"app": "web", "pod-template-hash": "h"}})
    );
    let s = selector_with_label(
        &json!({"matchExpressions": [{"key": "a", "operator": "Exists"}]}),
        POD_TEMPLATE_HASH,
        "h",
    );
    assert_eq!(s["matchLabels"]["pod-template-hash"], "h");
    assert_eq!(s["matchExpressions"][0]["key"], "a");
    let t = template_with_label(&json!({"spec": {}}), POD_TEMPLATE_HASH, "h");
    assert_eq!(t["metadata"]["labels"]["pod-template-hash"], "h");
}

fn rs(name: &str, created: &str, replicas: i64, rev: Option<&str>) -> ReplicaSet {
    let mut o = json!({"metadata": {"name": name, "uid": format!("u-{name}"),
        "creationTimestamp": created}, "spec": {"replicas": replicas}});
    if let Some(r) = rev {
        o["metadata"]["annotations"] = json!({REVISION: r});
    }
    ReplicaSet::parse(&o)
}

#[test]
fn orderings() {
    let a = rs("a", "2024-01-01T00:00:00Z", 3, Some("2"));
    let b = rs("b", "2024-01-02T00:00:00Z", 3, Some("1"));
    let c = rs("c", "2024-01-02T00:00:00Z", 5, Some("x"));
    let mut v = vec![c.clone(), b.clone(), a.clone()];
    v.sort_by(by_creation);
    assert_eq!(names(&v), ["a", "b", "c"]);
    // b(1) < a(2); c is unparsable and sorts by age against both.
    let mut w = vec![a.clone(), b.clone()];
    w.sort_by(by_revision);
    assert_eq!(names(&w), ["b", "a"]);
    let mut v = vec![a.clone(), b.clone(), c.clone()];
    v.sort_by(by_size_older);
    assert_eq!(names(&v), ["c", "a", "b"]);
    v.sort_by(by_size_newer);
    assert_eq!(names(&v), ["c", "b", "a"]);
}

fn names(v: &[ReplicaSet]) -> Vec<&str> {
    v.iter().map(|r| r.name.as_str()).collect()
}

#[test]
fn new_rs_annotations() {
    let mut d = rolling(3, json!(1), json!(0));
    d.annotations.insert("team".into(), "a".into());
    d.annotations.insert(REVISION.into(), "9".into());
    d.annotations.insert(LAST_APPLIED.into(), "{}".into());
    // A ReplicaSet about to be created.
    let mut a = BTreeMap::new();
    assert!(set_new_rs_annotations(
        &d,
        &mut a,
        1,
        false,
        MAX_REV_HISTORY_CHARS
    ));
    assert_eq!(a.get("team").map(String::as_str), Some("a"));
    assert_eq!(a.get(REVISION).map(String::as_str), Some("1"));
    assert_eq!(a.get(DESIRED_REPLICAS).map(String::as_str), Some("3"));
    assert_eq!(a.get(MAX_REPLICAS).map(String::as_str), Some("4"));
    assert!(!a.contains_key(LAST_APPLIED));
    assert!(!a.contains_key(REVISION_HISTORY));
    // Nothing new: unchanged.
    assert!(!set_new_rs_annotations(
        &d,
        &mut a,
        1,
        true,
        MAX_REV_HISTORY_CHARS
    ));
    // Rolled back to: the old revision goes into the history.
    assert!(set_new_rs_annotations(
        &d,
        &mut a,
        4,
        true,
        MAX_REV_HISTORY_CHARS
    ));
    assert_eq!(a.get(REVISION).map(String::as_str), Some("4"));
    assert_eq!(a.get(REVISION_HISTORY).map(String::as_str), Some("1"));
    assert!(set_new_rs_annotations(
        &d,
        &mut a,
        6,
        true,
        MAX_REV_HISTORY_CHARS
    ));
    assert_eq!(a.get(REVISION_HISTORY).map(String::as_str), Some("1,4"));
    // The history is trimmed from the front to the character limit.
    assert!(set_new_rs_annotations(&d, &mut a, 10, true, 4));
    assert_eq!(a.get(REVISION_HISTORY).map(String::as_str), Some("4,6"));
    // A higher revision already there stays.
    assert!(!set_new_rs_annotations(
        &d,
        &mut a,
        2,
        true,
        MAX_REV_HISTORY_CHARS
    ));
    assert_eq!(a.get(REVISION).map(String::as_str), Some("10"));
    // An unparsable revision: nothing reported as changed.
    let mut bad = BTreeMap::from([(REVISION.to_string(), "x".to_string())]);
    assert!(!set_new_rs_annotations(
        &d,
        &mut bad,
        2,
        true,
        MAX_REV_HISTORY_CHARS
    ));
}

#[test]
fn new_replicas_for_rolling_and_recreate() {
    // 3 replicas, surge 1: total may reach 4.
    let d = rolling(3, json!(1), json!(0));
    assert_eq!(new_rs_new_replicas(&d, 3, 0), Ok(1));
    assert_eq!(new_rs_new_replicas(&d, 4, 1), Ok(1));
    assert_eq!(new_rs_new_replicas(&d, 3, 1), Ok(2));
    // Never above the desired count.
    assert_eq!(new_rs_new_replicas(&d, 0, 0), Ok(3));
    // 5 replicas with 25% surge: a fresh deployment starts at full size.
    let d = rolling(5, json!("25%"), json!("25%"));
    assert_eq!(new_rs_new_replicas(&d, 0, 0), Ok(5));
    let d = dep(json!({"replicas": 4, "template": {}, "strategy": {"type": "Recreate"}}));
    assert_eq!(new_rs_new_replicas(&d, 10, 0), Ok(4));
}

#[test]
fn proportions() {
    // Deployment scaled 10 -> 15 during a rollout with surge 3 (max 13 -> 18).
    let mut d = rolling(15, json!(3), json!(2));
    d.status.replicas = 13;
    let mut a = rs("a", "t1", 8, None);
    a.annotations.insert(MAX_REPLICAS.into(), "13".into());
    let mut b = rs("b", "t2", 5, None);
    b.annotations.insert(MAX_REPLICAS.into(), "13".into());
    // 18 allowed, 13 there: add 5. a: 8*18/13 = 11.08 -> 11 (+3); b: 5*18/13 = 6.9 -> 7 (+2).
    assert_eq!(proportion(&a, &d, 5, 0), 3);
    assert_eq!(proportion(&b, &d, 5, 3), 2);
    // Bounded by what is left.
    assert_eq!(proportion(&b, &d, 5, 4), 1);
    assert_eq!(proportion(&b, &d, 5, 5), 0);
    // Without the annotation the deployment's status replicas stand in.
    a.annotations.clear();
    assert_eq!(proportion(&a, &d, 5, 0), 3);
    // Scaling down to 0: the whole size.
    let mut z = rolling(0, json!(3), json!(2));
    z.status.replicas = 13;
    let a = rs("a", "t1", 8, None);
    assert_eq!(proportion(&a, &z, -13, 0), -8);
    // Down: the larger (negative) of the fraction and what is left.
    let mut d = rolling(5, json!(1), json!(1));
    d.status.replicas = 11;
    let mut a = rs("a", "t1", 8, None);
    a.annotations.insert(MAX_REPLICAS.into(), "11".into());
    // 8*6/11 = 4.36 -> 4 (-4); bounded by -5 allowed.
    assert_eq!(proportion(&a, &d, -5, 0), -4);
    assert_eq!(proportion(&a, &d, -5, -3), -2);
    assert_eq!(round(2.5), 3);
    assert_eq!(round(-2.5), -3);
    assert_eq!(round(2.49), 2);
}

#[test]
fn replica_annotations_read_as_non_negative_int32() {
    assert_eq!(non_negative_int32("0"), Some(0));
    assert_eq!(non_negative_int32("13"), Some(13));
    assert_eq!(non_negative_int32("2147483647"), Some(i32::MAX as i64));
    for bad in [
        "",
        "-3",
        "+3",
        " 3",
        "3.0",
        "x",
        "2147483648",
        "99999999999999999999",
    ] {
        assert_eq!(non_negative_int32(bad), None, "{bad:?}");
    }
    // A zero, negative or invalid max-replicas annotation falls back to status.replicas.
    let mut d = rolling(15, json!(3), json!(2));
    d.status.replicas = 13;
    for bad in ["0", "-13", "x"] {
        let mut a = rs("a", "t1", 8, None);
        a.annotations.insert(MAX_REPLICAS.into(), bad.into());
        assert_eq!(proportion(&a, &d, 5, 0), 3, "{bad:?}");
    }
    // ... and with no status replicas either, the ReplicaSet gets nothing.
    d.status.replicas = 0;
    let mut a = rs("a", "t1", 8, None);
    a.annotations.insert(MAX_REPLICAS.into(), "0".into());
    assert_eq!(proportion(&a, &d, 5, 0), 0);
    // desired-replicas: a negative value is no annotation.
    a.annotations.insert(DESIRED_REPLICAS.into(), "-1".into());
    assert_eq!(a.desired_replicas_annotation(), None);
}

#[test]
fn replica_set_names_fit_a_dns_subdomain() {
    assert_eq!(replica_set_name("web", "5d4f8b"), "web-5d4f8b");
    let long = "a".repeat(253);
    let name = replica_set_name(&long, "5d4f8b");
    assert_eq!(name.len(), 253);
    assert!(name.ends_with("a-5d4f8b"));
    let exact = "b".repeat(246);
    assert_eq!(
        replica_set_name(&exact, "5d4f8b"),
        format!("{exact}-5d4f8b")
    );
}

#[test]
fn terminating_replicas_sum() {
    let mut a = rs("a", "t1", 2, None);
    let mut b = rs("b", "t2", 2, None);
    // Neither synced yet: nothing to add, the sum is 0.
    assert_eq!(terminating_replicas([&a, &b]), Some(0));
    a.terminating_replicas = Some(2);
    b.terminating_replicas = Some(1);
    assert_eq!(terminating_replicas([&a, &b]), Some(3));
    // A synced ReplicaSet without the count (its controller does not report it): unknown.
    b.terminating_replicas = None;
    b.observed_generation = 1;
    assert_eq!(terminating_replicas([&a, &b]), None);
    // The JSON form writes 0 and omits None.
    let st = DeploymentStatus {
        terminating_replicas: Some(0),
        ..DeploymentStatus::default()
    };
    assert_eq!(st.to_json()["terminatingReplicas"], 0);
    assert!(DeploymentStatus::default()
        .to_json()
        .get("terminatingReplicas")
        .is_none());
}

#[test]
fn conditions_follow_upstream_rules() {
    let mut s = DeploymentStatus::default();
    s.set_condition(Condition::new(
        PROGRESSING,
        "True",
        REASON_NEW_RS_CREATED,
        "m1".into(),
        "t1",
    ));
    s.set_condition(Condition::new(
        AVAILABLE,
        "False",
        REASON_MIN_UNAVAILABLE,
        "m".into(),
        "t1",
    ));
    // Same status and reason: nothing changes, not even the message.
    s.set_condition(Condition::new(
        PROGRESSING,
        "True",
        REASON_NEW_RS_CREATED,
        "m2".into(),
        "t2",
    ));
    assert_eq!(s.conditions[0].message, "m1");
    // Same status, other reason: transition time kept, condition moves last.
    s.set_condition(Condition::new(
        PROGRESSING,
        "True",
        REASON_RS_UPDATED,
        "m3".into(),
        "t3",
    ));
    let p = s.condition(PROGRESSING).expect("progressing");
    assert_eq!(
        (p.last_transition_time.as_str(), p.last_update_time.as_str()),
        ("t1", "t3")
    );
    assert_eq!(s.conditions[1].type_, PROGRESSING);
    // Other status: a new transition time.
    s.set_condition(Condition::new(
        PROGRESSING,
        "False",
        REASON_TIMED_OUT,
        "m4".into(),
        "t4",
    ));
    assert_eq!(
        s.condition(PROGRESSING).expect("p").last_transition_time,
        "t4"
    );
    s.remove_condition(PROGRESSING);
    assert!(s.condition(PROGRESSING).is_none());
    // JSON round trip, zeros omitted.
    s.replicas = 2;
    s.collision_count = Some(0);
    let j = s.to_json();
    assert!(j.get("updatedReplicas").is_none());
    assert_eq!(j["collisionCount"], 0);
    let back = DeploymentStatus::parse(&json!({"status": j}));
    assert_eq!(back, s);
}

#[test]
fn progress_checks() {
    let mut d = rolling(3, json!(1), json!(0));
    d.progress_deadline_seconds = Some(10);
    d.generation = 2;
    let mut s = DeploymentStatus {
        observed_generation: 2,
        replicas: 3,
        updated_replicas: 3,
        available_replicas: 3,
        ..Default::default()
    };
    assert!(deployment_complete(&d, &s));
    s.observed_generation = 1;
    assert!(!deployment_complete(&d, &s));
    d.status = DeploymentStatus {
        replicas: 4,
        updated_replicas: 1,
        ..Default::default()
    };
    let mut n = d.status.clone();
    assert!(!deployment_progressing(&d, &n));
    n.updated_replicas = 2;
    assert!(deployment_progressing(&d, &n));
    let mut n = d.status.clone();
    n.replicas = 3; // one old pod fewer
    assert!(deployment_progressing(&d, &n));

    let t0 = crate::compat::timefmt::parse_rfc3339("2024-01-01T00:00:00Z").expect("t");
    let mut n = DeploymentStatus::default();
    assert!(!deployment_timed_out(&d, &n, t0));
    n.set_condition(Condition::new(
        PROGRESSING,
        "True",
        REASON_RS_UPDATED,
        String::new(),
        "2024-01-01T00:00:00Z",
    ));
    assert!(!deployment_timed_out(&d, &n, t0 + Duration::from_secs(10)));
    assert!(deployment_timed_out(&d, &n, t0 + Duration::from_secs(11)));
    d.progress_deadline_seconds = Some(i32::MAX as i64);
    assert!(!deployment_timed_out(&d, &n, t0 + Duration::from_secs(11)));
}
