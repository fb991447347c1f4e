//! validatingadmissionpolicy-status-controller scenarios, against the sandbox always and a
//! real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`, edgekcm with
//! `--use-service-account-credentials`, writing as
//! `validatingadmissionpolicy-status-controller`). The policies and the statuses they must
//! get are those upstream kube-controller-manager v1.37.2 wrote against kube-apiserver
//! v1.37.2 (`src/controllers/vapstatus/testdata`); `KCM_E2E_KCM_BINARY` runs the same
//! scenarios with upstream's binary.

use crate::common::*;
use edgekcm::api::client::Client;
use edgekcm::api::resources::VALIDATINGADMISSIONPOLICIES;
use serde_json::{json, Value};
use std::time::Duration;

const UPSTREAM: &str =
    include_str!("../../src/controllers/vapstatus/testdata/upstream-v1.37.2.json");

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

scenarios! {
    warnings_as_upstream => scenario_warnings_as_upstream,
    fixed_policy_rechecked => scenario_fixed_policy_rechecked,
}
