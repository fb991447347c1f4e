use super::*;
use crate::controllers::testing::Harness;

fn role(name: &str, labels: Value, rules: Value) -> Value {
    static RV: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(3);
    let rv = RV
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        .to_string();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": {"name": name, "labels": labels, "resourceVersion": rv},
           "rules": rules})
}

fn aggregating(name: &str, selectors: Value, rules: Value) -> Value {
    let mut r = role(name, json!({}), rules);
    r["aggregationRule"] = json!({"clusterRoleSelectors": selectors});
    r
}

fn rule(verbs: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": [""], "resources": resources})
}

#[test]
fn rules_in_upstream_order_without_repeats() {
    let all = vec![
        role("b", json!({"agg": "x"}), json!([rule(&["get"], &["pods"])])),
        role(
            "a",
            json!({"agg": "x", "also": "y"}),
            json!([rule(&["list"], &["pods"]), rule(&["get"], &["pods"])]),
        ),
        role(
            "c",
            json!({"other": "y"}),
            json!([rule(&["watch"], &["pods"])]),
        ),
        // The same rule spelled with an empty list where the others leave it out.
        role(
            "d",
            json!({"also": "y"}),
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"],
                    "resourceNames": []}, rule(&["delete"], &["pods"])]),
        ),
    ];
    let agg = aggregating(
        "agg",
        json!([{"matchLabels": {"agg": "x"}}, {"matchExpressions": [
            {"key": "also", "operator": "Exists"}]}]),
        json!(null),
    );
    let got = aggregate(&agg, &all).unwrap().unwrap();
    // Selector by selector; matches by name (a before b); d's first rule is a's second.
    assert_eq!(
        got.iter().map(Rule::to_apply).collect::<Vec<_>>(),
        [
            rule(&["list"], &["pods"]),
            rule(&["get"], &["pods"]),
            rule(&["delete"], &["pods"]),
        ]
    );
    // Not aggregating; an empty selector matches every role but itself.
    assert!(aggregate(&all[0], &all).unwrap().is_none());
    let everything = aggregating("z", json!([{}]), json!([]));
    let mut with_self = all.clone();
    with_self.push(everything.clone());
    assert_eq!(
        aggregate(&everything, &with_self).unwrap().unwrap().len(),
        4
    );
    let bad = aggregating(
        "bad",
        json!([{"matchExpressions": [{"key": "k", "operator": "Gt"}]}]),
        json!([]),
    );
    assert!(aggregate(&bad, &all).is_err());
}

#[test]
fn applies_only_changes_and_requeues_aggregators_on_any_change() {
    let mut h = Harness::new(ClusterRoleAggregation::default());
    h.add(
        CLUSTERROLES,
        aggregating(
            "admin",
            json!([{"matchLabels": {"to-admin": "true"}}]),
            json!(null),
        ),
    );
    h.add(
        CLUSTERROLES,
        aggregating(
            "view",
            json!([{"matchLabels": {"to-view": "true"}}]),
            json!([]),
        ),
    );
    assert_eq!(h.take_queued(), ["admin", "view"]);
    // A plain role changing requeues both aggregating roles.
    h.add(
        CLUSTERROLES,
        role(
            "piece",
            json!({"to-admin": "true"}),
            json!([rule(&["get"], &["pods"])]),
        ),
    );
    assert_eq!(h.take_queued(), ["admin", "view"]);

    let w = h.sync("admin");
    let [(kind, key, manager, body, Some(fallback))] = &w.applies[..] else {
        panic!("expected one apply, got {w:?}");
    };
    assert_eq!(
        (*kind, key.as_str(), *manager),
        (CLUSTERROLES, "admin", FIELD_MANAGER)
    );
    assert_eq!(
        *body,
        json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "admin"}, "rules": [rule(&["get"], &["pods"])]})
    );
    // The fallback update keeps the role and replaces the rules.
    let (_, None, updated) = &fallback.updates[0] else {
        panic!("expected an update");
    };
    assert!(updated["metadata"]["resourceVersion"].is_string());
    assert_eq!(updated["rules"], json!([rule(&["get"], &["pods"])]));
    assert!(updated["aggregationRule"].is_object());
    // view selects nothing and has no rules: nothing to write.
    assert!(h.sync("view").is_empty());

    // Filled: nothing more to write.
    h.update(
        CLUSTERROLES,
        aggregating(
            "admin",
            json!([{"matchLabels": {"to-admin": "true"}}]),
            json!([rule(&["get"], &["pods"])]),
        ),
    );
    assert!(h.sync("admin").is_empty());
    // The piece goes: the rules are emptied, with an apply that names no rules.
    h.delete(
        CLUSTERROLES,
        role("piece", json!({"to-admin": "true"}), json!([])),
    );
    assert_eq!(h.take_queued(), ["admin", "view"]);
    let w = h.sync("admin");
    assert!(w.applies[0].3.get("rules").is_none());
    // An aggregating role that stops aggregating leaves the index.
    h.update(CLUSTERROLES, role("view", json!({}), json!([])));
    assert_eq!(h.take_queued(), ["admin"]);
    assert!(h.sync("view").is_empty());
    assert!(h.sync("missing").is_empty());
}
