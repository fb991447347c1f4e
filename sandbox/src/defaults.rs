//! Defaulting for the fields controllers rely on (a subset of upstream's
//! `pkg/apis/*/v1/defaults.go` and the create strategies).

use edgekcm::obj::At as _;
use serde_json::{json, Map, Value};

use edgekcm::api::resources::Kind;

fn obj_at<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let m = v.as_object_mut()?;
    let e = m
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if e.is_null() {
        *e = Value::Object(Map::new());
    }
    e.as_object_mut()
}

fn set_default(m: &mut Map<String, Value>, key: &str, v: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), v);
    }
}

/// Defaults for a pod spec (also applied to pod templates).
fn pod_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    for field in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = spec.get_mut(field) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                container(c);
            }
        }
    }
}

fn container(c: &mut Map<String, Value>) {
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    let last = image.rsplit('/').next().unwrap_or("");
    let pull = if image.contains('@') || (last.contains(':') && !last.ends_with(":latest")) {
        "IfNotPresent"
    } else {
        "Always"
    };
    set_default(c, "imagePullPolicy", json!(pull));
    if let Some(Value::Array(ports)) = c.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
}

fn template_spec(spec: &mut Map<String, Value>) {
    if let Some(t) = spec.get_mut("template") {
        if let Some(ps) = obj_at(t, "spec") {
            pod_spec(ps);
        }
    }
}

/// Apply defaults to an object about to be stored (create and update alike).
pub fn apply(kind: &Kind, obj: &mut Value) {
    drop_empty_meta_lists(obj);
    match (kind.group, kind.plural) {
        ("", "pods") => pod(obj),
        ("", "podtemplates") => {
            if let Some(m) = obj.as_object_mut() {
                template_spec(m);
            }
        }
        ("", "replicationcontrollers") => replication_controller(obj),
        ("apps", "deployments") => deployment(obj),
        ("apps", "replicasets") => {
            if let Some(spec) = obj_at(obj, "spec") {
                set_default(spec, "replicas", json!(1));
                template_spec(spec);
            }
        }
        ("apps", "statefulsets") => stateful_set(obj),
        ("apps", "daemonsets") => daemon_set(obj),
        ("batch", "jobs") => {
            if let Some(spec) = obj_at(obj, "spec") {
                job_spec(spec);
            }
        }
        ("batch", "cronjobs") => cron_job(obj),
        ("", "services") => service(obj),
        ("", "secrets") => secret(obj),
        ("", "persistentvolumeclaims") => persistent_volume_claim(obj),
        ("", "persistentvolumes") => persistent_volume(obj),
        ("autoscaling", "horizontalpodautoscalers") => {
            if let Some(spec) = obj_at(obj, "spec") {
                set_default(spec, "minReplicas", json!(1));
            }
        }
        _ => {}
    }
}

/// ObjectMeta's lists are `omitempty`: kube-apiserver never returns an emptied one.
fn drop_empty_meta_lists(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in ["ownerReferences", "finalizers"] {
            if m.get(f)
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                m.remove(f);
            }
        }
    }
}

fn pod(obj: &mut Value) {
    if let Some(spec) = obj_at(obj, "spec") {
        pod_spec(spec);
        set_default(spec, "enableServiceLinks", json!(true));
        set_default(spec, "serviceAccountName", json!("default"));
        let sa = spec.get("serviceAccountName").cloned();
        if let Some(sa) = sa {
            set_default(spec, "serviceAccount", sa);
        }
        set_default(spec, "priority", json!(0));
    }
    if let Some(status) = obj_at(obj, "status") {
        set_default(status, "phase", json!("Pending"));
    }
}

fn replication_controller(obj: &mut Value) {
    if let Some(spec) = obj_at(obj, "spec") {
        set_default(spec, "replicas", json!(1));
        set_default(spec, "minReadySeconds", json!(0));
        template_spec(spec);
        let tl = spec
            .get("template")
            .and_then(|t| t.at("/metadata/labels"))
            .cloned();
        if let Some(tl) = tl {
            if spec
                .get("selector")
                .is_none_or(|s| s.as_object().is_none_or(Map::is_empty))
            {
                spec.insert("selector".into(), tl);
            }
        }
    }
}

fn deployment(obj: &mut Value) {
    if let Some(spec) = obj_at(obj, "spec") {
        set_default(spec, "replicas", json!(1));
        set_default(spec, "revisionHistoryLimit", json!(10));
        set_default(spec, "progressDeadlineSeconds", json!(600));
        let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
        if let Some(st) = strategy.as_object_mut() {
            set_default(st, "type", json!("RollingUpdate"));
            if st.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                let ru = st.entry("rollingUpdate").or_insert_with(|| json!({}));
                if let Some(ru) = ru.as_object_mut() {
                    set_default(ru, "maxUnavailable", json!("25%"));
                    set_default(ru, "maxSurge", json!("25%"));
                }
            }
        }
        template_spec(spec);
    }
}

fn stateful_set(obj: &mut Value) {
    if let Some(spec) = obj_at(obj, "spec") {
        set_default(spec, "replicas", json!(1));
        set_default(spec, "podManagementPolicy", json!("OrderedReady"));
        set_default(spec, "revisionHistoryLimit", json!(10));
        set_default(
            spec,
            "updateStrategy",
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
        );
        set_default(
            spec,
            "persistentVolumeClaimRetentionPolicy",
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
        );
        template_spec(spec);
    }
}

fn daemon_set(obj: &mut Value) {
    if let Some(spec) = obj_at(obj, "spec") {
        set_default(spec, "revisionHistoryLimit", json!(10));
        set_default(
            spec,
            "updateStrategy",
            json!({"type": "RollingUpdate",
                   "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
        );
        template_spec(spec);
    }
}

fn cron_job(obj: &mut Value) {
    if let Some(spec) = obj_at(obj, "spec") {
        set_default(spec, "concurrencyPolicy", json!("Allow"));
        set_default(spec, "suspend", json!(false));
        set_default(spec, "successfulJobsHistoryLimit", json!(3));
        set_default(spec, "failedJobsHistoryLimit", json!(1));
        if let Some(jt) = spec.get_mut("jobTemplate") {
            if let Some(js) = obj_at(jt, "spec") {
                job_spec(js);
            }
        }
    }
}

fn service(obj: &mut Value) {
    if let Some(spec) = obj_at(obj, "spec") {
        set_default(spec, "type", json!("ClusterIP"));
        set_default(spec, "sessionAffinity", json!("None"));
        if spec.get("type").and_then(Value::as_str) != Some("ExternalName") {
            set_default(spec, "internalTrafficPolicy", json!("Cluster"));
        }
        if let Some(Value::Array(ports)) = spec.get_mut("ports") {
            for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                set_default(p, "protocol", json!("TCP"));
                if let Some(port) = p.get("port").cloned() {
                    set_default(p, "targetPort", port);
                }
            }
        }
    }
}

fn secret(obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        set_default(m, "type", json!("Opaque"));
        // `stringData` is written into `data` (base64) and never stored.
        if let Some(Value::Object(strings)) = m.remove("stringData") {
            use base64::Engine as _;
            let data = m.entry("data").or_insert_with(|| json!({}));
            if !data.is_object() {
                *data = json!({});
            }
            for (k, v) in strings {
                let text = v.as_str().unwrap_or("").as_bytes();
                data[k.as_str()] = json!(base64::engine::general_purpose::STANDARD.encode(text));
            }
        }
    }
}

fn persistent_volume_claim(obj: &mut Value) {
    if let Some(spec) = obj_at(obj, "spec") {
        set_default(spec, "volumeMode", json!("Filesystem"));
    }
    if let Some(status) = obj_at(obj, "status") {
        set_default(status, "phase", json!("Pending"));
    }
}

fn persistent_volume(obj: &mut Value) {
    if let Some(spec) = obj_at(obj, "spec") {
        set_default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
        set_default(spec, "volumeMode", json!("Filesystem"));
    }
    if let Some(status) = obj_at(obj, "status") {
        set_default(status, "phase", json!("Pending"));
    }
}

fn job_spec(spec: &mut Map<String, Value>) {
    let has_completions = spec.get("completions").is_some_and(|v| !v.is_null());
    let has_parallelism = spec.get("parallelism").is_some_and(|v| !v.is_null());
    if !has_completions && !has_parallelism {
        spec.insert("completions".into(), json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    set_default(spec, "backoffLimit", json!(6));
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    template_spec(spec);
}

/// What a create strategy does beyond defaulting: reset status where upstream does, and
/// derive server-generated fields. `uid` is the new object's uid.
pub fn prepare_for_create(kind: &Kind, obj: &mut Value, uid: &str) {
    match (kind.group, kind.plural) {
        ("", "namespaces") => {
            let name = obj.at("/metadata/name").cloned().unwrap_or(Value::Null);
            if let Some(spec) = obj_at(obj, "spec") {
                set_default(spec, "finalizers", json!(["kubernetes"]));
            }
            obj["status"] = json!({"phase": "Active"});
            if let Some(labels) = obj.get_mut("metadata").and_then(|m| obj_at(m, "labels")) {
                labels.insert("kubernetes.io/metadata.name".into(), name);
            }
        }
        ("", "pods") => {
            obj["status"] = json!({"phase": "Pending"});
        }
        ("", "nodes") => {}
        ("batch", "jobs") => {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
            let manual = obj
                .at("/spec/manualSelector")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if !manual {
                let name = obj
                    .at("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                if let Some(spec) = obj_at(obj, "spec") {
                    spec.insert(
                        "selector".into(),
                        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
                    );
                    if let Some(t) = spec.get_mut("template") {
                        if let Some(tm) = obj_at(t, "metadata") {
                            if let Some(l) = tm
                                .entry("labels")
                                .or_insert_with(|| json!({}))
                                .as_object_mut()
                            {
                                l.insert("batch.kubernetes.io/controller-uid".into(), json!(uid));
                                l.insert("batch.kubernetes.io/job-name".into(), json!(name));
                                l.insert("controller-uid".into(), json!(uid));
                                l.insert("job-name".into(), json!(name));
                            }
                        }
                    }
                }
            }
        }
        _ if crate::meta::has_status_subresource(kind) => {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgekcm::api::resources::{DEPLOYMENTS, JOBS, PODS, SERVICES};

    #[test]
    fn deployment_defaults() {
        let mut d = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}}});
        apply(&DEPLOYMENTS, &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        assert!(d["spec"].get("minReadySeconds").is_none());
        let ps = &d["spec"]["template"]["spec"];
        assert_eq!(ps["restartPolicy"], "Always");
        assert_eq!(ps["containers"][0]["imagePullPolicy"], "IfNotPresent");
        // Recreate gets no rollingUpdate block.
        let mut r = json!({"spec": {"strategy": {"type": "Recreate"}}});
        apply(&DEPLOYMENTS, &mut r);
        assert!(r["spec"]["strategy"].get("rollingUpdate").is_none());
    }

    #[test]
    fn job_pod_service_defaults() {
        let mut j = json!({"metadata": {"name": "j"}, "spec": {"parallelism": 3, "template": {}}});
        apply(&JOBS, &mut j);
        assert!(j["spec"].get("completions").is_none());
        assert_eq!(j["spec"]["backoffLimit"], 6);
        prepare_for_create(&JOBS, &mut j, "u1");
        assert_eq!(
            j["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
            "u1"
        );
        assert_eq!(j["spec"]["template"]["metadata"]["labels"]["job-name"], "j");
        let mut j2 = json!({"spec": {}});
        apply(&JOBS, &mut j2);
        assert_eq!(j2["spec"]["completions"], 1);
        assert_eq!(j2["spec"]["parallelism"], 1);

        let mut p = json!({"spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        apply(&PODS, &mut p);
        assert_eq!(p["spec"]["dnsPolicy"], "ClusterFirst");
        assert_eq!(p["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(p["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(p["status"]["phase"], "Pending");

        let mut s = json!({"spec": {"ports": [{"port": 80}]}});
        apply(&SERVICES, &mut s);
        assert_eq!(s["spec"]["type"], "ClusterIP");
        assert_eq!(s["spec"]["sessionAffinity"], "None");
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
    }
}
