//! validatingadmissionpolicy-status-controller scenarios, against the sandbox always and a
//! real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`, edgekcm with
//! `--use-service-account-credentials`, writing as
//! `validatingadmissionpolicy-status-controller`). The policies and the statuses they must
//! get are those upstream kube-controller-manager v1.37.2 wrote against kube-apiserver
//! v1.37.2 (`src/controllers/vapstatus/testdata`); `KCM_E2E_KCM_BINARY` runs the same
//! scenarios with upstream's binary.

use crate::common::*;
use edgekcm::api::client::Client;
use edgekcm::api::resources::{CRDS, VALIDATINGADMISSIONPOLICIES};
use serde_json::{json, Value};
use std::time::Duration;

const UPSTREAM: &str =
    include_str!("../../src/controllers/vapstatus/testdata/upstream-v1.37.2.json");
const UPSTREAM_CRD: &str =
    include_str!("../../src/controllers/vapstatus/testdata/upstream-crd-v1.37.2.json");

/// Generated type names (`Deployment123456789.spec`) with their digits replaced by `N`.
fn normal(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    'outer: while !rest.is_empty() {
        for k in [
            "Deployment",
            "ReplicaSet",
            "StatefulSet",
            "Pod",
            "ConfigMap",
        ] {
            if let Some(after) = rest.strip_prefix(k) {
                let digits = after.chars().take_while(char::is_ascii_digit).count();
                if digits > 0 && after[digits..].starts_with('.') {
                    out.push_str(k);
                    out.push('N');
                    rest = &after[digits..];
                    continue 'outer;
                }
            }
        }
        let c = rest.chars().next().expect("not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Policies deleted even when a step fails.
struct Policies {
    admin: Client,
    names: Vec<String>,
}

impl Drop for Policies {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = self
                .admin
                .delete(&VALIDATINGADMISSIONPOLICIES, None, n, &Default::default());
        }
    }
}

fn get(admin: &Client, name: &str) -> Option<Value> {
    admin.get(&VALIDATINGADMISSIONPOLICIES, None, name).ok()
}

/// The policy once its status has caught up with its generation.
fn checked(admin: &Client, name: &str) -> Value {
    eventually(Duration::from_secs(30), "status.observedGeneration", || {
        let p = get(admin, name)?;
        (p["status"]["observedGeneration"] == p["metadata"]["generation"]).then_some(p)
    })
}

/// Every recorded policy gets upstream's warnings, word for word.
fn scenario_warnings_as_upstream(t: &Target) {
    let admin = t.admin();
    let cases: Vec<Value> = serde_json::from_str(UPSTREAM).expect("cases");
    let mut made = Policies {
        admin: admin.clone(),
        names: vec![],
    };
    let _kcm = Kcm::start(
        t,
        "vapstatus",
        &["--controllers=validatingadmissionpolicy-status-controller"],
    );
    let mut want = Vec::new();
    for c in &cases {
        let mut p = c["policy"].clone();
        let name = unique(p["metadata"]["name"].as_str().expect("name"));
        p["metadata"] = json!({"name": name});
        admin
            .create(&VALIDATINGADMISSIONPOLICIES, None, &p)
            .expect("create policy");
        made.names.push(name.clone());
        want.push((name, c["status"].clone()));
    }
    for (name, status) in &want {
        let p = checked(&admin, name);
        let got: Value = serde_json::from_str(&normal(&p["status"].to_string())).expect("json");
        assert_eq!(&got, status, "{name}: got\n{got:#}\nwant\n{status:#}");
    }
}

/// A policy whose expression is fixed is checked again at its new generation.
fn scenario_fixed_policy_rechecked(t: &Target) {
    let admin = t.admin();
    let name = unique("vap-fix");
    let _made = Policies {
        admin: admin.clone(),
        names: vec![name.clone()],
    };
    let _kcm = Kcm::start(
        t,
        "vapstatus-fix",
        &["--controllers=validatingadmissionpolicy-status-controller"],
    );
    let p = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [
            {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
             "resources": ["deployments"]}]},
         "validations": [{"expression": "object.spec.replicas <= '5'"}]}});
    admin
        .create(&VALIDATINGADMISSIONPOLICIES, None, &p)
        .expect("create policy");
    let mut p = checked(&admin, &name);
    assert_eq!(
        p["status"]["typeChecking"]["expressionWarnings"],
        json!([{"fieldRef": "spec.validations[0].expression", "warning":
            "apps/v1, Kind=Deployment: ERROR: <input>:1:22: found no matching overload for '_<=_' applied to '(int, string)'\n | object.spec.replicas <= '5'\n | .....................^\n"}])
    );
    p["spec"]["validations"][0]["expression"] = json!("object.spec.replicas <= 5");
    admin
        .update(&VALIDATINGADMISSIONPOLICIES, &p)
        .expect("fix the policy");
    let p = checked(&admin, &name);
    assert_eq!(p["metadata"]["generation"], 2);
    // Server-side apply drops the warnings the controller no longer applies (and with them
    // the `typeChecking` it applies empty, as upstream's does); the sandbox's apply merges,
    // and keeps them.
    if t.is_real() {
        assert_eq!(p["status"], json!({"observedGeneration": 2}), "{p:#}");
    }
}

/// The custom resource the recorded policy was written for, in a group of its own.
fn widget_crd(group: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": format!("widgets.{group}")},
    "spec": {"group": group, "scope": "Namespaced",
     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
     "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
          "size": {"type": "integer"},
          "ratio": {"type": "number"},
          "mode": {"type": "string", "enum": ["a", "b"]},
          "port": {"x-kubernetes-int-or-string": true},
          "when": {"type": "string", "format": "date-time"},
          "timeout": {"type": "string", "format": "duration"},
          "blob": {"type": "string", "format": "byte"},
          "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
          "tags": {"type": "array", "items": {"type": "string"}},
          "labels": {"type": "object", "additionalProperties": {"type": "string"}},
          "items": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "weight": {"type": "integer"}}}},
          "template": {"type": "object", "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true},
          "dash-name": {"type": "string"},
          "namespace": {"type": "string"}
        }}}}}}]}})
}

/// A policy on a custom resource gets upstream's warnings (the schema read from the API
/// server's OpenAPI v3 document of the resource's group).
fn scenario_custom_resource_as_upstream(t: &Target) {
    let admin = t.admin();
    let group = format!("{}.example.com", unique("vap"));
    let crd_name = format!("widgets.{group}");
    admin
        .create(&CRDS, None, &widget_crd(&group))
        .expect("create CRD");
    struct CrdGone(Client, String);
    impl Drop for CrdGone {
        fn drop(&mut self) {
            let _ = self.0.delete(&CRDS, None, &self.1, &Default::default());
        }
    }
    let _crd = CrdGone(admin.clone(), crd_name);
    eventually(
        Duration::from_secs(30),
        "the CRD's OpenAPI document",
        || {
            admin
                .get_path(&format!("/openapi/v3/apis/{group}/v1"))
                .ok()
                .filter(|d| d.to_string().contains("\"Widget\""))
        },
    );
    let cases: Vec<Value> = serde_json::from_str(UPSTREAM_CRD).expect("cases");
    let mut p = cases[0]["policy"].clone();
    let name = unique("vap-crd");
    p["metadata"] = json!({"name": name});
    p["spec"]["matchConstraints"]["resourceRules"][0]["apiGroups"] = json!([group]);
    let _made = Policies {
        admin: admin.clone(),
        names: vec![name.clone()],
    };
    admin
        .create(&VALIDATINGADMISSIONPOLICIES, None, &p)
        .expect("create policy");
    let _kcm = Kcm::start(
        t,
        "vapstatus-crd",
        &["--controllers=validatingadmissionpolicy-status-controller"],
    );
    let got = checked(&admin, &name);
    let got = normal(&got["status"].to_string()).replace(&group, "example.com");
    let got: Value = serde_json::from_str(&got).expect("json");
    let want = &cases[0]["status"];
    assert_eq!(&got, want, "got\n{got:#}\nwant\n{want:#}");
}

scenarios! {
    custom_resource_as_upstream => scenario_custom_resource_as_upstream,
    warnings_as_upstream => scenario_warnings_as_upstream,
    fixed_policy_rechecked => scenario_fixed_policy_rechecked,
}
