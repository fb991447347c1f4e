//! Whether the API server serves a resource, asked once when a controller is built: a
//! controller whose informer would never sync (an API the server does not serve) stays off,
//! as upstream's would fail on its own, because the shared cache waits for every informer
//! before any controller starts.

use serde_json::Value;

/// Whether `/apis/<group_version>` lists `resource`; None when the server cannot be asked
/// (then the caller starts as if it were).
pub fn served(
    rest: &crate::api::kubeconfig::RestConfig,
    group_version: &str,
    resource: &str,
) -> Option<bool> {
    let ua = crate::api::client::user_agent_base();
    let client = crate::api::client::Client::new(rest, 0.0, 0, &ua).ok()?;
    match client.get_path(&format!("/apis/{group_version}")) {
        Ok(list) => Some(listed(&list, resource)),
        Err(e) if e.is_not_found() => Some(false),
        Err(_) => None,
    }
}

/// Whether an APIResourceList names `resource`.
pub fn listed(list: &Value, resource: &str) -> bool {
    list.get("resources")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|x| x["name"] == resource))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_resource_list_names_what_it_serves() {
        let list = serde_json::json!({"kind": "APIResourceList", "groupVersion": "resource.k8s.io/v1",
            "resources": [{"name": "resourceclaims"}, {"name": "resourceclaims/status"}]});
        assert!(super::listed(&list, "resourceclaims"));
        assert!(!super::listed(&list, "deviceclasses"));
        assert!(!super::listed(&serde_json::json!({}), "resourceclaims"));
    }
}
