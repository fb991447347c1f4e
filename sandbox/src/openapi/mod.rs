//! OpenAPI v3: the documents of `apps/v1` and `v1` as kube-apiserver v1.37.2 serves them,
//! trimmed to the schemas of Deployments, ReplicaSets, StatefulSets, Pods and ConfigMaps and
//! what they reference, descriptions left out (what a CEL type checker reads). Other group
//! versions are 404.

use serde_json::{json, Value};

const APPS_V1: &str = include_str!("apps-v1.json");
const CORE_V1: &str = include_str!("core-v1.json");

/// The document at `/openapi/v3/<path>`, or the index at `/openapi/v3`.
pub fn document(path: &[&str]) -> Option<Value> {
    match path {
        [] => Some(json!({"paths": {
            "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1"},
            "apis/apps/v1": {"serverRelativeURL": "/openapi/v3/apis/apps/v1"},
        }})),
        ["api", "v1"] => serde_json::from_str(CORE_V1).ok(),
        ["apis", "apps", "v1"] => serde_json::from_str(APPS_V1).ok(),
        _ => None,
    }
}
