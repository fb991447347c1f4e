use super::resolve::{Gvk, Source};
use super::*;
use serde_json::json;

/// The schemas kube-apiserver v1.37.2 serves for apps/v1 and v1 (descriptions left out), as
/// the sandbox serves them.
const APPS: &str = include_str!("../../../sandbox/src/openapi/apps-v1.json");
const CORE: &str = include_str!("../../../sandbox/src/openapi/core-v1.json");
/// Policies and the statuses upstream kube-controller-manager v1.37.2 wrote for them against
/// kube-apiserver v1.37.2 (the digits of the generated type names replaced by `N`).
const UPSTREAM: &str = include_str!("testdata/upstream-v1.37.2.json");
/// A custom resource's schema as kube-apiserver v1.37.2 serves it (`widgets.example.com`:
/// preserve-unknown-fields, int-or-string, embedded resource, formats, an escaped name), and
/// the status upstream wrote for a policy on it.
const EXAMPLE: &str = include_str!("testdata/example-v1.json");
const UPSTREAM_CRD: &str = include_str!("testdata/upstream-crd-v1.37.2.json");
/// A policy using Kubernetes' libraries and the conversions, with upstream's status and the
/// warnings this checker does not give (`int(bool)`: the conversions' overloads are not all
/// modelled; `strings.quote`: namespaced functions are unknown).
const UPSTREAM_LIB: &str = include_str!("testdata/upstream-lib-v1.37.2.json");

struct Fixed;

impl Source for Fixed {
    fn resources(&self, group: &str, version: &str) -> Option<Value> {
        let rs: &[(&str, &str)] = match (group, version) {
            ("apps", "v1") => &[
                ("deployments", "Deployment"),
                ("deployments/status", "Deployment"),
                ("replicasets", "ReplicaSet"),
                ("statefulsets", "StatefulSet"),
            ],
            ("", "v1") => &[("pods", "Pod"), ("configmaps", "ConfigMap")],
            ("example.com", "v1") => &[("widgets", "Widget")],
            _ => return None,
        };
        Some(
            json!({"resources": rs.iter().map(|(n, k)| json!({"name": n, "kind": k,
            "singularName": k.to_lowercase()})).collect::<Vec<_>>()}),
        )
    }

    fn openapi(&self, group: &str, version: &str) -> Option<String> {
        match (group, version) {
            ("apps", "v1") => Some(APPS.to_string()),
            ("", "v1") => Some(CORE.to_string()),
            ("example.com", "v1") => Some(EXAMPLE.to_string()),
            _ => None,
        }
    }
}

/// Generated type names with their digits replaced by `N`.
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
        let c = rest.chars().next().unwrap();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

fn status_of(policy: &Value) -> Value {
    let w = check_policy(policy, &Fixed);
    let Action::Apply { object, .. } = status_apply("p", 1, &w) else {
        panic!()
    };
    serde_json::from_str(&normal(&object["status"].to_string())).unwrap()
}

#[test]
fn same_warnings_as_upstream() {
    let mut cases: Vec<Value> = serde_json::from_str(UPSTREAM).unwrap();
    assert_eq!(cases.len(), 11);
    cases.extend(serde_json::from_str::<Vec<Value>>(UPSTREAM_CRD).unwrap());
    for c in &cases {
        let ours = status_of(&c["policy"]);
        assert_eq!(
            ours, c["status"],
            "{}: ours\n{ours:#}\nupstream\n{:#}",
            c["policy"]["metadata"]["name"], c["status"]
        );
    }
}

#[test]
fn libraries_as_upstream_but_for_what_is_not_modelled() {
    let cases: Vec<Value> = serde_json::from_str(UPSTREAM_LIB).unwrap();
    let c = &cases[0];
    let not_given = c["notGiven"].as_array().unwrap();
    let mut want = c["status"].clone();
    let list = want["typeChecking"]["expressionWarnings"]
        .as_array_mut()
        .unwrap();
    let before = list.len();
    list.retain(|w| !not_given.contains(&w["fieldRef"]));
    assert_eq!(list.len(), before - not_given.len());
    assert_eq!(status_of(&c["policy"]), want);
}

#[test]
fn kinds_from_rules() {
    let p = json!({"spec": {"matchConstraints": {"resourceRules": [
        {"apiGroups": ["apps"], "apiVersions": ["v1"],
         "resources": ["statefulsets", "deployments", "deployments/status", "nosuch", "*"]},
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pod"]},
        {"apiGroups": ["*"], "apiVersions": ["v1"], "resources": ["pods"]},
    ]}}});
    let k: Vec<String> = resolve::kinds(&p, &Fixed)
        .iter()
        .map(Gvk::to_string)
        .collect();
    assert_eq!(
        k,
        [
            "/v1, Kind=Pod",
            "apps/v1, Kind=Deployment",
            "apps/v1, Kind=StatefulSet"
        ]
    );
}

fn one(expr: &str) -> String {
    let p = json!({"spec": {"matchConstraints": {"resourceRules": [
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]},
        "validations": [{"expression": expr}]}});
    check_policy(&p, &Fixed)
        .first()
        .map(|(_, w)| normal(w))
        .unwrap_or_default()
}

#[test]
fn what_is_not_modelled_gives_no_warning() {
    for e in [
        "url(object.metadata.name).getHost() == 1",
        "quantity('1').isGreaterThan(quantity('2'))",
        "object.spec.template.spec.containers.all(i, c, c.image == 1)",
        "[unknownFn(1)].exists(x, x == 'a')",
        "authorizer.group('apps').resource('deployments').check('get').allowed()",
        "object.?spec.orValue(1) == 1",
    ] {
        assert_eq!(one(e), "", "{e}");
    }
}

#[test]
fn more_messages() {
    assert_eq!(
        one("object.spec.replicas.foo == 1"),
        "apps/v1, Kind=Deployment: ERROR: <input>:1:21: type 'int' does not support field selection\n | object.spec.replicas.foo == 1\n | ....................^\n"
    );
    assert_eq!(
        one("object.metadata.labels.size() == 'a'"),
        "apps/v1, Kind=Deployment: ERROR: <input>:1:31: found no matching overload for '_==_' applied to '(int, string)'\n | object.metadata.labels.size() == 'a'\n | ..............................^\n"
    );
    // Two messages, in order of position.
    let w = one("object.spec.a == 1 || object.spec.b == 2");
    assert!(
        w.contains("1:12: undefined field 'a'") && w.contains("1:34: undefined field 'b'"),
        "{w}"
    );
    assert!(w.find("'a'").unwrap() < w.find("'b'").unwrap());
}

/// Upstream v1.37.2's warnings on namespaceObject (the API server refuses a type error
/// within namespaceObject alone when the policy is written; one against the typed object is
/// found by the status controller).
#[test]
fn namespace_object_typed() {
    assert_eq!(
        one("namespaceObject.metadata.name == object.spec.replicas"),
        "apps/v1, Kind=Deployment: ERROR: <input>:1:31: found no matching overload for '_==_' applied to '(string, int)'\n | namespaceObject.metadata.name == object.spec.replicas\n | ..............................^\n"
    );
    assert_eq!(
        one("namespaceObject.metadata.labels.all(k, k != object.metadata.name)"),
        ""
    );
    assert_eq!(
        one("namespaceObject.status.conditions.exists(c, c.lastTransitionTime > object.spec.replicas)"),
        "apps/v1, Kind=Deployment: ERROR: <input>:1:66: found no matching overload for '_>_' applied to '(timestamp, int)'\n | namespaceObject.status.conditions.exists(c, c.lastTransitionTime > object.spec.replicas)\n | .................................................................^\n"
    );
}

#[test]
fn escaped_names() {
    assert_eq!(types::escape("namespace").as_deref(), Some("__namespace__"));
    assert_eq!(
        types::escape("a-b.c/d").as_deref(),
        Some("a__dash__b__dot__c__slash__d")
    );
    assert_eq!(types::escape("x__y").as_deref(), Some("x__underscores__y"));
    assert_eq!(types::escape("1a"), None);
    assert_eq!(types::escape("a b"), None);
}
