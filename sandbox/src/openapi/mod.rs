//! OpenAPI v3: the documents of `apps/v1` and `v1` as kube-apiserver v1.37.2 serves them,
//! trimmed to the schemas of Deployments, ReplicaSets, StatefulSets, Pods and ConfigMaps and
//! what they reference, descriptions left out (what a CEL type checker reads); and for the
//! group versions of CustomResourceDefinitions, each served version's `openAPIV3Schema`
//! as kube-apiserver publishes it (named `<reversed group>.<version>.<Kind>`, with its
//! group-version-kind, `apiVersion`, `kind` and `metadata` as an ObjectMeta reference).
//! Other group versions are 404.

use crate::store::State;
use edgekcm::api::resources::CRDS;
use edgekcm::obj::At as _;
use serde_json::{json, Value};

const APPS_V1: &str = include_str!("apps-v1.json");
const CORE_V1: &str = include_str!("core-v1.json");

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";

/// The document at `/openapi/v3/<path>`, or the index at `/openapi/v3`.
pub fn document(st: &State, path: &[&str]) -> Option<Value> {
    match path {
        [] => Some(json!({"paths": {
            "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1"},
            "apis/apps/v1": {"serverRelativeURL": "/openapi/v3/apis/apps/v1"},
        }})),
        ["api", "v1"] => serde_json::from_str(CORE_V1).ok(),
        ["apis", "apps", "v1"] => serde_json::from_str(APPS_V1).ok(),
        ["apis", g, v] => custom(st, g, v),
        _ => None,
    }
}

/// The schemas of the custom resources of a group version, None when no CRD serves it.
fn custom(st: &State, group: &str, version: &str) -> Option<Value> {
    let core: Value = serde_json::from_str(CORE_V1).ok()?;
    let core = core.at("/components/schemas")?.as_object()?;
    let mut schemas = serde_json::Map::new();
    for crd in st.iter_kind(&CRDS, None) {
        if crd.at("/spec/group").and_then(Value::as_str) != Some(group) {
            continue;
        }
        let kind = crd
            .at("/spec/names/kind")
            .and_then(Value::as_str)
            .unwrap_or("");
        let versions = crd.at("/spec/versions").and_then(Value::as_array);
        let Some(v) = versions
            .into_iter()
            .flatten()
            .find(|v| v["name"] == version && v["served"] != false)
        else {
            continue;
        };
        let mut s = v
            .at("/schema/openAPIV3Schema")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        let props = &mut s["properties"];
        props["apiVersion"] = json!({"type": "string"});
        props["kind"] = json!({"type": "string"});
        props["metadata"] =
            json!({"allOf": [{"$ref": format!("#/components/schemas/{META}ObjectMeta")}]});
        s["x-kubernetes-group-version-kind"] =
            json!([{"group": group, "version": version, "kind": kind}]);
        let reversed: Vec<&str> = group.split('.').rev().collect();
        schemas.insert(format!("{}.{version}.{kind}", reversed.join(".")), s);
    }
    if schemas.is_empty() {
        return None;
    }
    for (name, s) in core.iter().filter(|(n, _)| n.starts_with(META)) {
        schemas.insert(name.clone(), s.clone());
    }
    Some(json!({"openapi": "3.0.0", "components": {"schemas": schemas}}))
}
