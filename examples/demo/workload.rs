//! The demo's workload, and when it has settled.
//!
//! In namespace `demo`: a Deployment behind a Service, with a PodDisruptionBudget and (once it
//! runs) a HorizontalPodAutoscaler that load scales it to 4; a StatefulSet with its headless
//! Service and a volume per replica; a DaemonSet, one pod per node; a Job with a scratch
//! volume, removed a second after it finished; a CronJob that fires once; an old
//! ReplicationController; an external database behind a Service without selector; a
//! ResourceQuota; a long-lived ServiceAccount token; a pod asking for a device through a
//! ResourceClaimTemplate. Around it, what a cluster has: a
//! StorageClass and a CSI PersistentVolume, an aggregated ClusterRole, the `cluster-info`
//! ConfigMap with a bootstrap token to sign it and an expired one, a joining node's request for
//! a client certificate, a VolumeAttributesClass, a retired node with a NoExecute taint and a
//! pod left on it, and (made before edgekcm starts) a Secret-based ServiceAccount token nobody
//! used since kube-apiserver began tracking their use.

use base64::Engine as _;
use edgekcm::api::resources::{
    Kind, CLUSTERROLES, CONFIGMAPS, CRONJOBS, CSRS, DAEMONSETS, DEPLOYMENTS, ENDPOINTS,
    ENDPOINTSLICES, HPAS, JOBS, NODES, PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES,
    PODDISRUPTIONBUDGETS, PODS, REPLICATIONCONTROLLERS, RESOURCECLAIMTEMPLATES, RESOURCEQUOTAS,
    SECRETS, SERVICEACCOUNTS, SERVICES, STATEFULSETS, STORAGECLASSES, VOLUMEATTACHMENTS,
    VOLUMEATTRIBUTESCLASSES,
};
use edgekcm::api::resources::{PODCERTIFICATEREQUESTS, SERVICECIDRS};
use edgekcm::obj::At as _;
use edgekcm_sandbox::Sandbox;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

pub const NS: &str = "demo";

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// A pod template of one container labelled `app`, asking for a tenth of a CPU and 64 MiB. Pods get one
/// second to stop, so the namespace controller, which waits out the longest grace period,
/// finishes soon.
fn template(app: &str, image: &str, restart: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}},
        "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": app, "image": image,
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}})
}

/// An object of `kind` in `ns` ("" for cluster-scoped kinds) with these top-level fields.
fn obj(kind: &'static Kind, ns: &str, name: &str, fields: Value) -> (&'static Kind, Value) {
    let mut o = json!({"apiVersion": kind.api_version(), "kind": kind.kind,
        "metadata": {"name": name}});
    if !ns.is_empty() {
        o["metadata"]["namespace"] = json!(ns);
    }
    for (k, v) in fields.as_object().into_iter().flatten() {
        o[k] = v.clone();
    }
    (kind, o)
}

fn spec(kind: &'static Kind, name: &str, spec: Value) -> (&'static Kind, Value) {
    obj(kind, NS, name, json!({ "spec": spec }))
}

/// A cron schedule that matched once, a minute ago (UTC), and not again for a year, with a
/// last start before that: the CronJob finds one missed start and fires at once, as one that
/// had been running for a while would. (Its `status` is written after the create.)
fn cronjob(now: SystemTime) -> (&'static Kind, Value) {
    let ago = |s| edgekcm::compat::timefmt::rfc3339(now - Duration::from_secs(s));
    let t = ago(60);
    let num = |r: std::ops::Range<usize>| t[r].parse::<u32>().unwrap_or(0);
    let schedule = format!(
        "{} {} {} {} *",
        num(14..16),
        num(11..13),
        num(8..10),
        num(5..7)
    );
    let mut cj = spec(
        &CRONJOBS,
        "report",
        json!({"schedule": schedule, "timeZone": "Etc/UTC",
            "jobTemplate": {"spec": {"template": template("report", "busybox:1.36", "Never")}}}),
    );
    cj.1["status"] = json!({"lastScheduleTime": ago(120)});
    cj
}

/// The workloads in `demo`.
pub fn objects(now: SystemTime) -> Vec<(&'static Kind, Value)> {
    let selector = |app: &str| json!({"matchLabels": {"app": app}});
    let mut job = template("pi", "perl:5.34", "Never");
    job["spec"]["volumes"] = json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate":
        {"spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
            "resources": {"requests": {"storage": "1Gi"}}}}}}]);
    let claim = json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
        "storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}});
    let mut trainer = template("trainer", "trainer:1.0", "Always")["spec"].clone();
    trainer["resourceClaims"] = json!([{"name": "gpu", "resourceClaimTemplateName": "gpu"}]);
    trainer["containers"][0]["resources"]["claims"] = json!([{"name": "gpu"}]);
    vec![
        spec(
            &RESOURCECLAIMTEMPLATES,
            "gpu",
            json!({"spec": {"devices": {"requests": [{"name": "gpu",
                "exactly": {"deviceClassName": "gpu.example.com"}}]}}}),
        ),
        spec(&PODS, "trainer", trainer),
        spec(
            &SERVICES,
            "web",
            json!({"selector": {"app": "web"}, "ports": [{"port": 80}]}),
        ),
        spec(
            &DEPLOYMENTS,
            "web",
            json!({"replicas": 2, "selector": selector("web"),
                "template": template("web", "nginx:1.25", "Always")}),
        ),
        spec(
            &PODDISRUPTIONBUDGETS,
            "web",
            json!({"minAvailable": 1, "selector": selector("web")}),
        ),
        spec(
            &SERVICES,
            "db",
            json!({"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432}]}),
        ),
        spec(
            &STATEFULSETS,
            "db",
            json!({"replicas": 2, "serviceName": "db", "selector": selector("db"),
                "template": template("db", "postgres:16", "Always"),
                "volumeClaimTemplates": [claim]}),
        ),
        spec(
            &DAEMONSETS,
            "agent",
            json!({"selector": selector("agent"),
                "template": template("agent", "fluent-bit:3.0", "Always")}),
        ),
        spec(
            &JOBS,
            "pi",
            json!({"ttlSecondsAfterFinished": 1, "template": job}),
        ),
        cronjob(now),
        spec(
            &REPLICATIONCONTROLLERS,
            "legacy",
            json!({"replicas": 1, "selector": {"app": "legacy"},
                "template": template("legacy", "httpd:2.4", "Always")}),
        ),
        spec(&SERVICES, "billing-db", json!({"ports": [{"port": 5432}]})),
        obj(
            &ENDPOINTS,
            NS,
            "billing-db",
            json!({"subsets": [{"addresses": [{"ip": "192.168.10.5"}],
                "ports": [{"port": 5432}]}]}),
        ),
        spec(
            &RESOURCEQUOTAS,
            "demo",
            json!({"hard": {"pods": "20", "requests.cpu": "4"}}),
        ),
        obj(
            &SECRETS,
            NS,
            "ci-token",
            json!({"type": "kubernetes.io/service-account-token", "metadata": {"name": "ci-token",
                "namespace": NS, "annotations": {"kubernetes.io/service-account.name": "default"}}}),
        ),
    ]
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A bootstrap token Secret in kube-system that may sign `cluster-info`.
fn bootstrap_token(id: &str, secret: &str, expiration: SystemTime) -> (&'static Kind, Value) {
    let name = format!("bootstrap-token-{id}");
    let expiration = edgekcm::compat::timefmt::rfc3339(expiration);
    obj(
        &SECRETS,
        "kube-system",
        &name,
        json!({"type": "bootstrap.kubernetes.io/token", "data": {"token-id": b64(id),
            "token-secret": b64(secret), "usage-bootstrap-signing": b64("true"),
            "expiration": b64(&expiration)}}),
    )
}

/// A node joining: its kubelet asks for a client certificate (a key and request as Go's x509
/// makes them).
fn node_csr(node: &str) -> Res<(&'static Kind, Value)> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    p.distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    let pem = p.serialize_request(&key)?.pem()?;
    Ok(obj(
        &CSRS,
        "",
        &format!("{node}-client"),
        json!({"spec": {"request": b64(&pem), "usages": ["digital signature", "client auth"],
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet"}}),
    ))
}

/// A node's request from long ago, approved and issued, its certificate expired since: made
/// before edgekcm starts, for the cleaner's pass at start.
pub fn old_csr() -> Res<(&'static Kind, Value)> {
    let (_, mut csr) = node_csr("node-old")?;
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "system:node:node-old");
    p.not_before = rcgen::date_time_ymd(2020, 1, 1);
    p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let cert = p.self_signed(&key)?.pem();
    csr["status"] = json!({"certificate": b64(&cert), "conditions": [{"type": "Approved",
        "status": "True", "reason": "AutoApproved", "lastUpdateTime": "2020-01-01T00:00:00Z"}]});
    Ok((&CSRS, csr))
}

/// The claim the CSI volume is bound to, asked to grow to 2 GiB (the external resizer's job).
pub fn grow_claim(sb: &Sandbox) -> Option<(String, Value)> {
    let claim = sb.get(&PERSISTENTVOLUMES, None, "pv-1")?;
    let name = claim.at("/spec/claimRef/name")?.as_str()?.to_string();
    Some((
        name,
        json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
    ))
}

/// What a cluster has around the workload (left in place when the namespace goes).
pub fn cluster(now: SystemTime) -> Res<Vec<(&'static Kind, Value)>> {
    let kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    \
                      server: https://10.0.0.1:6443\n";
    let aggregate = json!({"rbac.example.com/aggregate-to-monitoring": "true"});
    Ok(vec![
        obj(
            &STORAGECLASSES,
            "",
            "standard",
            json!({"provisioner": "csi.example.com", "volumeBindingMode": "Immediate",
                "allowVolumeExpansion": true}),
        ),
        obj(
            &PERSISTENTVOLUMES,
            "",
            "pv-1",
            json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "storageClassName": "standard", "persistentVolumeReclaimPolicy": "Retain",
                "csi": {"driver": "csi.example.com", "volumeHandle": "vol-1"}}}),
        ),
        obj(
            &CLUSTERROLES,
            "",
            "monitoring",
            json!({"aggregationRule": {"clusterRoleSelectors": [{"matchLabels": aggregate}]}}),
        ),
        obj(
            &CLUSTERROLES,
            "",
            "monitoring-pods",
            json!({"metadata": {"name": "monitoring-pods", "labels": aggregate},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}),
        ),
        obj(
            &CONFIGMAPS,
            "kube-public",
            "cluster-info",
            json!({ "data": { "kubeconfig": kubeconfig } }),
        ),
        bootstrap_token(
            "abcdef",
            "0123456789abcdef",
            now + Duration::from_secs(86400),
        ),
        bootstrap_token("oldtok", "fedcba9876543210", now - Duration::from_secs(60)),
        node_csr("node-c")?,
        obj(
            &SERVICECIDRS,
            "",
            "extra",
            json!({"spec": {"cidrs": ["10.100.0.0/16"]}}),
        ),
        obj(
            &VOLUMEATTRIBUTESCLASSES,
            "",
            "fast",
            json!({"driverName": "csi.example.com", "parameters": {"iops": "3000"}}),
        ),
        obj(
            &NODES,
            "",
            RETIRED,
            json!({"spec": {"taints": [{"key": "example.com/retired", "effect": "NoExecute"}]}}),
        ),
        obj(
            &PODS,
            "default",
            "stranded",
            json!({"spec": {"nodeName": RETIRED, "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}),
        ),
    ])
}

/// A node no kubelet runs, tainted NoExecute: its pod is evicted, nothing is scheduled there.
pub const RETIRED: &str = "node-retired";

/// Made before edgekcm starts (the demo backdates it 16 minutes): a PodCertificateRequest
/// the cleaner deletes at its first pass.
pub fn old_pod_certificate_request() -> (&'static Kind, Value) {
    obj(
        &PODCERTIFICATEREQUESTS,
        "default",
        "expired",
        json!({"spec": {"signerName": "example.com/demo", "podName": "p", "nodeName": "node-a"}}),
    )
}

/// A ValidatingAdmissionPolicy on Deployments whose second validation compares
/// `spec.replicas` with a string: its status gets the type checker's warning.
pub fn policy() -> (&'static Kind, Value) {
    (
        &edgekcm::api::resources::VALIDATINGADMISSIONPOLICIES,
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "replicas-limit"},
            "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [
                {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                 "resources": ["deployments"]}]},
             "validations": [{"expression": "object.spec.replicas <= 10"},
                             {"expression": "object.spec.replicas != '0'"}]}}),
    )
}

/// Made before edgekcm starts: kube-apiserver's tracking ConfigMap (tracking since 2020), and
/// a ServiceAccount's Secret-based token never used since; with the demo's clean-up period of
/// 1 s the cleaner labels it invalid at its first pass.
pub fn legacy_token() -> Vec<(&'static Kind, Value)> {
    vec![
        obj(
            &CONFIGMAPS,
            "kube-system",
            "kube-apiserver-legacy-service-account-token-tracking",
            json!({"data": {"since": "2020-01-01"}}),
        ),
        obj(
            &SERVICEACCOUNTS,
            "default",
            "legacy-user",
            json!({"secrets": [{"name": "legacy-token"}]}),
        ),
        obj(
            &SECRETS,
            "default",
            "legacy-token",
            json!({"type": "kubernetes.io/service-account-token",
                "metadata": {"name": "legacy-token", "namespace": "default",
                    "annotations": {"kubernetes.io/service-account.name": "legacy-user"}}}),
        ),
    ]
}

/// Load on the web pods: each uses 96 MiB where it asks for 64 (the metrics API's values, as
/// metrics-server would report them).
pub fn load(sb: &Sandbox) {
    for p in sb.list(&PODS, Some(NS)) {
        if p["metadata"]["labels"]["app"] == "web" {
            let name = p["metadata"]["name"].as_str().unwrap_or("");
            let usage = json!([{"name": "web", "usage": {"cpu": "50m", "memory": "96Mi"}}]);
            sb.metrics().set_pod(NS, name, usage);
        }
    }
}

/// The autoscaler the load makes scale web up to 4.
pub fn autoscaler() -> (&'static Kind, Value) {
    spec(
        &HPAS,
        "web",
        json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2, "maxReplicas": 4,
            "metrics": [{"type": "Resource", "resource": {"name": "memory",
                "target": {"type": "Utilization", "averageUtilization": 50}}}]}),
    )
}

fn at(sb: &Sandbox, kind: &Kind, ns: &str, name: &str, path: &str) -> Option<Value> {
    sb.get(kind, Some(ns), name)?.at(path).cloned()
}

/// What has not settled yet (empty: everything has); `web` pods of the Deployment wanted.
pub fn pending(sb: &Sandbox, nodes: usize, web: u64) -> Vec<&'static str> {
    let n = |v: Option<Value>| v.and_then(|v| v.as_u64()).unwrap_or(0);
    let demo = |kind, name, path| at(sb, kind, NS, name, path);
    let mut left = Vec::new();
    let mut want = |ok: bool, what| {
        if !ok {
            left.push(what)
        }
    };
    want(
        n(demo(&DEPLOYMENTS, "web", "/status/availableReplicas")) == web,
        "Deployment web available",
    );
    let addresses = demo(&ENDPOINTS, "web", "/subsets/0/addresses");
    want(
        addresses.as_ref().and_then(Value::as_array).map(Vec::len) == Some(web as usize),
        "Service web's endpoints",
    );
    want(
        n(demo(&STATEFULSETS, "db", "/status/readyReplicas")) == 2,
        "StatefulSet db ready",
    );
    want(
        n(demo(&DAEMONSETS, "agent", "/status/numberReady")) == nodes as u64,
        "DaemonSet agent ready on every node",
    );
    want(
        sb.get(&JOBS, Some(NS), "pi").is_none(),
        "Job pi finished and removed",
    );
    want(
        demo(&CRONJOBS, "report", "/status/lastSuccessfulTime").is_some(),
        "CronJob report's Job succeeded",
    );
    want(
        n(demo(
            &REPLICATIONCONTROLLERS,
            "legacy",
            "/status/readyReplicas",
        )) == 1,
        "ReplicationController legacy ready",
    );
    want(
        n(demo(&PODDISRUPTIONBUDGETS, "web", "/status/currentHealthy")) == web,
        "PodDisruptionBudget web counted",
    );
    want(
        demo(&RESOURCEQUOTAS, "demo", "/status/used/pods").is_some(),
        "ResourceQuota demo counted",
    );
    want(
        demo(&SECRETS, "ci-token", "/data/token").is_some(),
        "Secret ci-token filled",
    );
    want(
        sb.list(&ENDPOINTSLICES, Some(NS))
            .iter()
            .any(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == "billing-db"),
        "Endpoints billing-db mirrored",
    );
    want(
        ["data-db-0", "data-db-1"]
            .iter()
            .all(|c| sb.get(&PERSISTENTVOLUMECLAIMS, Some(NS), c).is_some()),
        "StatefulSet db's volume claims",
    );
    want(
        !sb.list(&VOLUMEATTACHMENTS, None).is_empty(),
        "CSI volume pv-1 attached",
    );
    want(
        sb.get(&CLUSTERROLES, None, "monitoring")
            .is_some_and(|r| r["rules"].as_array().is_some_and(|r| !r.is_empty())),
        "ClusterRole monitoring aggregated",
    );
    want(
        at(
            sb,
            &CONFIGMAPS,
            "kube-public",
            "cluster-info",
            "/data/jws-kubeconfig-abcdef",
        )
        .is_some(),
        "cluster-info signed",
    );
    want(
        sb.get(&SECRETS, Some("kube-system"), "bootstrap-token-oldtok")
            .is_none(),
        "expired bootstrap token removed",
    );
    want(
        at(sb, &CSRS, "", "node-c-client", "/status/certificate").is_some(),
        "node-c's certificate approved and signed",
    );
    want(
        sb.get(&VOLUMEATTRIBUTESCLASSES, None, "fast")
            .and_then(|c| c.at("/metadata/finalizers/0").cloned())
            == Some(json!("kubernetes.io/vac-protection")),
        "VolumeAttributesClass fast protected",
    );
    want(
        at(
            sb,
            &PODS,
            NS,
            "trainer",
            "/status/resourceClaimStatuses/0/resourceClaimName",
        )
        .is_some(),
        "pod trainer's ResourceClaim made from its template",
    );
    want(
        sb.get(&PODS, Some("default"), "stranded").is_none(),
        "pod stranded evicted from the retired node",
    );
    want(
        at(
            sb,
            &SECRETS,
            "default",
            "legacy-token",
            "/metadata/labels/kubernetes.io~1legacy-token-invalid-since",
        )
        .is_some(),
        "unused legacy token labelled invalid",
    );
    left
}
