use super::*;
use crate::api::resources::CONFIGMAPS;

fn svm(name: &str, created: &str, conds: &[(&str, &str)]) -> Value {
    let conds: Vec<Value> = conds
        .iter()
        .map(|(t, s)| {
            json!({"type": t, "status": s, "reason": "R", "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z"})
        })
        .collect();
    json!({"metadata": {"name": name, "creationTimestamp": created, "generation": 1},
        "spec": {"resource": {"group": "example.com", "resource": "widgets"}},
        "status": {"conditions": conds}})
}

#[test]
fn the_runner_starts_the_oldest_waiting_one_when_none_runs() {
    let all = [
        svm("b", "2026-01-01T00:00:02Z", &[]),
        svm("a", "2026-01-01T00:00:02Z", &[]),
        svm("old", "2026-01-01T00:00:01Z", &[(FAILED, "True")]),
    ];
    let (cleanup, promote) = runner_plan(&all);
    assert!(cleanup.is_empty());
    assert_eq!(obj::name(promote.expect("one to start")), "a");
    // One running: nothing starts; one running and ended: cleaned up, and the next starts.
    let all = [
        svm("r", "2026-01-01T00:00:00Z", &[(RUNNING, "True")]),
        svm("w", "2026-01-01T00:00:01Z", &[]),
    ];
    assert!(runner_plan(&all).1.is_none());
    let all = [
        svm(
            "r",
            "2026-01-01T00:00:00Z",
            &[(RUNNING, "True"), (SUCCEEDED, "True")],
        ),
        svm("w", "2026-01-01T00:00:01Z", &[]),
    ];
    let (cleanup, promote) = runner_plan(&all);
    assert_eq!(cleanup.len(), 1);
    assert_eq!(obj::name(promote.expect("next")), "w");
    // Cleaned up (Running False): neither cleaned again nor started again.
    let all = [svm(
        "r",
        "2026-01-01T00:00:00Z",
        &[(RUNNING, "False"), (SUCCEEDED, "True")],
    )];
    let (cleanup, promote) = runner_plan(&all);
    assert!(cleanup.is_empty() && promote.is_none());
}

#[test]
fn running_messages_are_upstreams() {
    assert_eq!(running_message(None, None), "The migration is running");
    assert_eq!(
        running_message(Some((0, 7)), None),
        "The migration is running, 7 objects verified migrated"
    );
    assert_eq!(
        running_message(Some((2, 7)), Some("etcdserver: too many requests")),
        "The migration is running, 2/7 objects not yet migrated; transient error: etcdserver: too many requests"
    );
    assert_eq!(
        running_message(Some((0, 0)), None),
        "The migration is running"
    );
}

#[test]
fn resources_and_patches() {
    let r = Resource {
        kind: CONFIGMAPS,
        verbs: Verbs::parse(["get", "list", "update", "patch"]),
    };
    assert_eq!(gvr_string(&r), "/v1, Resource=configmaps");
    assert!(migratable(&r));
    assert_eq!(
        merge_patch_of(&r, "42"),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"resourceVersion": "42"}})
    );
    let r = Resource {
        kind: CONFIGMAPS,
        verbs: Verbs::parse(["get", "list"]),
    };
    assert!(!migratable(&r));
}

#[test]
fn a_finished_crd_gets_its_stored_version_only_when_its_generation_is_current() {
    let crd = |observed: i64| {
        json!({"metadata": {"name": "widgets.example.com", "generation": 3, "resourceVersion": "9"},
            "spec": {"versions": [{"name": "v1", "storage": false}, {"name": "v2", "storage": true}]},
            "status": {"conditions": [{"type": "StorageMigrating", "status": "True",
                "observedGeneration": observed}]}})
    };
    let status_of = |a: &Action| match a {
        Action::Apply { object, .. } => object["status"].clone(),
        _ => panic!("an apply"),
    };
    let st = status_of(&steps::crd_finished(&crd(3), true, "now"));
    assert_eq!(st["storedVersions"], json!(["v2"]));
    assert_eq!(st["conditions"][0]["reason"], "MigrationSucceeded");
    assert_eq!(
        st["conditions"][0]["message"],
        "The migration has succeeded and the stored versions have been updated"
    );
    let st = status_of(&steps::crd_finished(&crd(2), true, "now"));
    assert!(st.get("storedVersions").is_none());
    let st = status_of(&steps::crd_finished(&crd(3), false, "now"));
    assert_eq!(st["conditions"][0]["message"], "The migration has failed");
    assert_eq!(st["storedVersions"], json!(["v2"]));
}
