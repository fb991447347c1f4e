//! StatefulSetSemanticRevisionComparison: templates compared after Go's defaulting, and the
//! update revision kept when the newest stored one differs only in form.

use super::semantic::{matches_latest, normalize};
use super::*;
use crate::controllers::kit::history;
use crate::controllers::testing::Harness;
use crate::obj::At as _;
use serde_json::json;

/// A template as kube-apiserver v1.37 returns it (defaulted, no `creationTimestamp`).
fn served_template() -> Value {
    json!({"metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27",
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}],
            "readinessProbe": {"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
                "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
            "resources": {}, "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
            "volumes": [{"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 420}},
                {"name": "scratch", "emptyDir": {}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst", "securityContext": {}, "schedulerName": "default-scheduler"}})
}

/// The same template as an older release stored it: `creationTimestamp: null` (Go before
/// v1.34) and none of the defaults.
fn older_template() -> Value {
    json!({"metadata": {"creationTimestamp": null, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27",
            "ports": [{"containerPort": 80}],
            "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "readinessProbe": {"httpGet": {"port": 80}},
            "resources": {}}],
            "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}, {"name": "scratch"}]}})
}

fn set_with(template: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web", "resourceVersion": "5",
            "generation": 2},
        "spec": {"replicas": 2, "serviceName": "web", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "web"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "template": template},
        "status": {"replicas": 0}})
}

fn stored_revision(set: &Value, template: Value) -> Value {
    let mut data_set = set.clone();
    data_set["spec"]["template"] = template;
    let mut r = history::new_revision(
        &STATEFULSETS,
        &data_set,
        set.at("/spec/template/metadata/labels")
            .and_then(Value::as_object),
        None,
        &identity::revision_data(&data_set),
        1,
        0,
    );
    r["metadata"]["uid"] = json!("rev-1");
    r["metadata"]["resourceVersion"] = json!("3");
    r
}

#[test]
fn an_older_releases_template_equals_the_served_one_once_defaulted() {
    assert_ne!(older_template(), served_template());
    assert_eq!(normalize(&older_template()), normalize(&served_template()));
    let set = set_with(served_template());
    let rev = stored_revision(&set, older_template());
    assert!(
        !history::equal(&rev, &stored_revision(&set, served_template())),
        "not equal as stored"
    );
    assert!(matches_latest(&set, &rev));
}

#[test]
fn a_real_change_is_still_a_new_template() {
    let set = set_with(served_template());
    for change in [
        json!({"image": "nginx:1.28"}),
        json!({"imagePullPolicy": "Always"}),
        json!({"ports": [{"containerPort": 80, "protocol": "UDP"}]}),
        json!({"terminationMessagePolicy": "FallbackToLogsOnError"}),
    ] {
        let mut t = older_template();
        for (k, v) in change.as_object().unwrap() {
            t["spec"]["containers"][0][k] = v.clone();
        }
        assert!(!matches_latest(&set, &stored_revision(&set, t)), "{change}");
    }
    let mut t = older_template();
    t["spec"]["restartPolicy"] = json!("OnFailure");
    assert!(!matches_latest(&set, &stored_revision(&set, t)));
    let mut t = older_template();
    t["metadata"]["labels"]["tier"] = json!("db");
    assert!(!matches_latest(&set, &stored_revision(&set, t)));
    let mut t = older_template();
    t["spec"]["volumes"][0]["configMap"]["defaultMode"] = json!(256);
    assert!(!matches_latest(&set, &stored_revision(&set, t)));
}

#[test]
fn pull_policy_and_other_defaults_follow_go() {
    let pull = |image: &str| {
        let t = json!({"spec": {"containers": [{"name": "c", "image": image}]}});
        normalize(&t)["spec"]["containers"][0]["imagePullPolicy"].clone()
    };
    assert_eq!(pull("nginx"), "Always");
    assert_eq!(pull("nginx:latest"), "Always");
    assert_eq!(pull("localhost:5000/nginx"), "Always");
    assert_eq!(pull("localhost:5000/nginx:1"), "IfNotPresent");
    assert_eq!(pull("nginx@sha256:0123"), "IfNotPresent");
    assert_eq!(pull("nginx:1@sha256:0123"), "IfNotPresent");
    let t = normalize(&json!({"spec": {
        "serviceAccount": "old",
        "containers": [{"name": "c", "image": "x:1",
            "livenessProbe": {"grpc": {"port": 9}, "periodSeconds": 5},
            "lifecycle": {"preStop": {"httpGet": {"port": 1}}}}],
        "volumes": [{"name": "h", "hostPath": {"path": "/x"}},
            {"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}}));
    assert_eq!(t["spec"]["serviceAccountName"], "old");
    assert_eq!(t["spec"]["serviceAccount"], "old");
    let c = &t["spec"]["containers"][0];
    assert_eq!(
        c["livenessProbe"],
        json!({"grpc": {"port": 9, "service": ""}, "periodSeconds": 5, "timeoutSeconds": 1,
            "successThreshold": 1, "failureThreshold": 3})
    );
    assert_eq!(c["lifecycle"]["preStop"]["httpGet"]["scheme"], "HTTP");
    assert_eq!(t["spec"]["volumes"][0]["hostPath"]["type"], "");
    assert_eq!(
        t["spec"]["volumes"][1]["projected"],
        json!({"defaultMode": 420, "sources": [{"serviceAccountToken": {"path": "t",
            "expirationSeconds": 3600}}]})
    );
}

fn harness_with(set: &Value, rev: &Value, pods_at: &str) -> Harness<StatefulSetController> {
    let mut h = Harness::new(StatefulSetController::new()).at("2024-06-01T12:00:00Z");
    h.add(STATEFULSETS, set.clone());
    h.add(CONTROLLERREVISIONS, rev.clone());
    let old = set_with(older_template());
    for ord in 0..2 {
        let mut p = identity::new_pod(&old, ord, pods_at).expect("pod");
        p["metadata"]["uid"] = json!(format!("p-{ord}"));
        p["metadata"]["resourceVersion"] = json!("9");
        p["status"] = json!({"phase": "Running", "conditions": [{"type": "Ready",
            "status": "True", "lastTransitionTime": "2024-06-01T11:00:00Z"}]});
        h.add(PODS, p);
    }
    h
}

#[test]
fn a_set_whose_newest_revision_differs_only_in_form_keeps_it_and_its_pods() {
    let mut set = set_with(served_template());
    let rev = stored_revision(&set, older_template());
    let name = obj::name(&rev).to_string();
    set["status"] = json!({"currentRevision": name, "updateRevision": name, "replicas": 2,
        "readyReplicas": 2, "currentReplicas": 2, "updatedReplicas": 2, "availableReplicas": 2,
        "observedGeneration": 1, "collisionCount": 0});
    let w = harness_with(&set, &rev, &name).sync("ns/web");
    assert!(
        w.creates.is_empty(),
        "no new revision, no pod: {:?}",
        w.creates
    );
    assert!(w.deletes.is_empty(), "no pod replaced: {:?}", w.deletes);
    let st = w
        .updates
        .iter()
        .find(|(k, sub, _)| *k == STATEFULSETS && *sub == Some("status"))
        .map(|(_, _, o)| o["status"].clone())
        .expect("observedGeneration written");
    assert_eq!(st["updateRevision"], name);
    assert_eq!(st["updatedReplicas"], 2);

    // A real change of the template makes a revision and replaces the newest pod.
    set["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    let w = harness_with(&set, &rev, &name).sync("ns/web");
    let revs: Vec<&Value> = w
        .creates
        .iter()
        .filter(|(k, _)| *k == CONTROLLERREVISIONS)
        .map(|(_, o)| o)
        .collect();
    assert_eq!(revs.len(), 1);
    assert_eq!(revs[0]["revision"], 2);
    assert_eq!(w.deletes.len(), 1, "{:?}", w.deletes);
}
