//! StatefulSetSemanticRevisionComparison (on, never turned off by `--emulated-version`):
//! when no stored revision equals the set's template byte for byte, upstream rebuilds the
//! newest revision as it would be restored (`setMatchesLatestExistingRevision`: the
//! revision's template put back into the set, Go's `SetObjectDefaults_StatefulSet`, encoded
//! again) and keeps it as the update revision when that equals the template, so a revision
//! written by an older release (the `creationTimestamp: null` Go wrote before v1.34, or a
//! defaulted field it did not have) does not roll every pod.
//!
//! Here both templates go through [`normalize`]: the pod template defaults of
//! `SetObjectDefaults_StatefulSet` (listed on the function), then what Go's decode and
//! encode drop (nulls; empty objects and lists, as `omitempty`). Not done: the rounding of
//! resource quantities to milli units and their canonical form (`SetDefaults_ResourceList`;
//! the API server stores both templates in canonical form already) and fields Go does not
//! know (the API server has pruned them from the set).

use crate::obj::At as _;
use serde_json::{json, Map, Value};

/// The pod template `t` with the defaults Go's `SetObjectDefaults_StatefulSet` gives a
/// template, and without what its decode/encode round trip drops:
/// - pod spec: `dnsPolicy: ClusterFirst`, `restartPolicy: Always`, `securityContext: {}`,
///   `terminationGracePeriodSeconds: 30`, `schedulerName: default-scheduler`,
///   `serviceAccount` = `serviceAccountName` (either way round);
/// - every init, app and ephemeral container: `imagePullPolicy` (`Always` for a `latest` or
///   missing tag without digest, else `IfNotPresent`), `terminationMessagePath:
///   /dev/termination-log`, `terminationMessagePolicy: File`, ports' `protocol: TCP`, env
///   `fieldRef.apiVersion: v1` and `fileKeyRef.optional: false`, probes (`timeoutSeconds`
///   1, `periodSeconds` 10, `successThreshold` 1, `failureThreshold` 3, `httpGet` `path: /`
///   and `scheme: HTTP`, `grpc.service: ""`), lifecycle hooks' `httpGet`;
/// - volumes: no source is `emptyDir: {}`; `defaultMode: 420` for secret, configMap,
///   downwardAPI and projected; `hostPath.type: ""`; downward API `fieldRef.apiVersion`;
///   projected `serviceAccountToken.expirationSeconds: 3600`; iSCSI `iscsiInterface`, RBD
///   `pool`/`user`/`keyring`, ScaleIO `storageMode`/`fsType`, AzureDisk
///   `cachingMode`/`fsType`/`readOnly`/`kind`; ephemeral claim templates' `volumeMode:
///   Filesystem`.
pub fn normalize(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(m) = t.as_object_mut() {
        m.remove("$patch");
        if let Some(spec) = m.get_mut("spec").and_then(Value::as_object_mut) {
            pod_spec(spec);
        }
    }
    prune(&mut t);
    t
}

/// Does the newest stored revision's template, restored and defaulted, equal the set's?
pub fn matches_latest(set: &Value, latest: &Value) -> bool {
    let (Some(stored), Some(current)) =
        (latest.at("/data/spec/template"), set.at("/spec/template"))
    else {
        return false;
    };
    normalize(stored) == normalize(current)
}

fn put(m: &mut Map<String, Value>, k: &str, v: Value) {
    if m.get(k).is_none_or(|x| x.is_null() || x == "") {
        m.insert(k.to_string(), v);
    }
}

fn objects<'a>(
    m: &'a mut Map<String, Value>,
    k: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    m.get_mut(k)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

fn object<'a>(m: &'a mut Map<String, Value>, k: &str) -> Option<&'a mut Map<String, Value>> {
    m.get_mut(k).and_then(Value::as_object_mut)
}

fn pod_spec(s: &mut Map<String, Value>) {
    let sa = s
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
        .or_else(|| s.get("serviceAccount").and_then(Value::as_str))
        .unwrap_or("")
        .to_string();
    for k in ["serviceAccountName", "serviceAccount"] {
        s.insert(k.to_string(), json!(sa));
    }
    put(s, "dnsPolicy", json!("ClusterFirst"));
    put(s, "restartPolicy", json!("Always"));
    put(s, "securityContext", json!({}));
    put(s, "terminationGracePeriodSeconds", json!(30));
    put(s, "schedulerName", json!("default-scheduler"));
    for k in ["initContainers", "containers", "ephemeralContainers"] {
        for c in objects(s, k) {
            container(c);
        }
    }
    for v in objects(s, "volumes") {
        volume(v);
    }
}

/// The tag `imagePullPolicy` defaults by (Go's `ParseImageName`: `latest` when neither a tag
/// nor a digest is given).
fn pull_policy(image: &str) -> &'static str {
    let (name, digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.split_once(':').map(|(_, t)| t);
    match tag {
        Some("latest") => "Always",
        None if !digest => "Always",
        _ => "IfNotPresent",
    }
}

fn container(c: &mut Map<String, Value>) {
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    put(c, "imagePullPolicy", json!(pull_policy(&image)));
    put(c, "terminationMessagePath", json!("/dev/termination-log"));
    put(c, "terminationMessagePolicy", json!("File"));
    for p in objects(c, "ports") {
        put(p, "protocol", json!("TCP"));
    }
    for e in objects(c, "env") {
        if let Some(from) = object(e, "valueFrom") {
            if let Some(f) = object(from, "fieldRef") {
                put(f, "apiVersion", json!("v1"));
            }
            if let Some(f) = object(from, "fileKeyRef") {
                put(f, "optional", json!(false));
            }
        }
    }
    for k in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = object(c, k) {
            probe(p);
        }
    }
    if let Some(l) = object(c, "lifecycle") {
        for k in ["postStart", "preStop"] {
            if let Some(g) = object(l, k).and_then(|h| object(h, "httpGet")) {
                http_get(g);
            }
        }
    }
}

fn probe(p: &mut Map<String, Value>) {
    for (k, v) in [
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ] {
        if p.get(k).and_then(Value::as_i64).unwrap_or(0) == 0 {
            p.insert(k.to_string(), json!(v));
        }
    }
    if let Some(g) = object(p, "httpGet") {
        http_get(g);
    }
    if let Some(g) = object(p, "grpc") {
        if g.get("service").is_none_or(Value::is_null) {
            g.insert("service".into(), json!(""));
        }
    }
}

fn http_get(g: &mut Map<String, Value>) {
    put(g, "path", json!("/"));
    put(g, "scheme", json!("HTTP"));
}

/// The sources of a volume (every key but its name and `image`'s sibling fields).
const SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

fn volume(v: &mut Map<String, Value>) {
    if !SOURCES
        .iter()
        .any(|k| v.get(*k).is_some_and(|s| !s.is_null()))
    {
        v.insert("emptyDir".into(), json!({}));
    }
    if let Some(h) = object(v, "hostPath") {
        if h.get("type").is_none_or(Value::is_null) {
            h.insert("type".into(), json!(""));
        }
    }
    for k in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = object(v, k) {
            if s.get("defaultMode").is_none_or(Value::is_null) {
                s.insert("defaultMode".into(), json!(420));
            }
        }
    }
    if let Some(d) = object(v, "downwardAPI") {
        field_refs(d);
    }
    if let Some(p) = object(v, "projected") {
        for src in objects(p, "sources") {
            if let Some(d) = object(src, "downwardAPI") {
                field_refs(d);
            }
            if let Some(t) = object(src, "serviceAccountToken") {
                if t.get("expirationSeconds").is_none_or(Value::is_null) {
                    t.insert("expirationSeconds".into(), json!(3600));
                }
            }
        }
    }
    if let Some(i) = object(v, "iscsi") {
        put(i, "iscsiInterface", json!("default"));
    }
    if let Some(r) = object(v, "rbd") {
        put(r, "pool", json!("rbd"));
        put(r, "user", json!("admin"));
        put(r, "keyring", json!("/etc/ceph/keyring"));
    }
    if let Some(s) = object(v, "scaleIO") {
        put(s, "storageMode", json!("ThinProvisioned"));
        put(s, "fsType", json!("xfs"));
    }
    if let Some(a) = object(v, "azureDisk") {
        for (k, d) in [
            ("cachingMode", json!("ReadWrite")),
            ("fsType", json!("ext4")),
            ("readOnly", json!(false)),
            ("kind", json!("Shared")),
        ] {
            if a.get(k).is_none_or(Value::is_null) {
                a.insert(k.into(), d);
            }
        }
    }
    if let Some(spec) = object(v, "ephemeral")
        .and_then(|e| object(e, "volumeClaimTemplate"))
        .and_then(|t| object(t, "spec"))
    {
        if spec.get("volumeMode").is_none_or(Value::is_null) {
            spec.insert("volumeMode".into(), json!("Filesystem"));
        }
    }
}

fn field_refs(d: &mut Map<String, Value>) {
    for item in objects(d, "items") {
        if let Some(f) = object(item, "fieldRef") {
            put(f, "apiVersion", json!("v1"));
        }
    }
}

/// Drop what Go's decode and encode would not write back: nulls, and (as `omitempty`) empty
/// objects and lists, depth first. The empty `{}` the defaults keep (`securityContext`,
/// `emptyDir`) go on both sides alike.
fn prune(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for x in m.values_mut() {
                prune(x);
            }
            m.retain(|_, x| !is_empty(x));
        }
        Value::Array(a) => a.iter_mut().for_each(prune),
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}
