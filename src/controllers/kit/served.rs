//! Whether the API server serves a resource: a gated controller whose API is not served
//! stays off with one line, as upstream's does when discovery does not list it.

use serde_json::Value;

/// Whether the API server lists `resource` at `group_version_path` (e.g.
/// `/apis/networking.k8s.io/v1`); None when it cannot be asked (then the controller starts).
pub fn served(
    rest: &crate::api::kubeconfig::RestConfig,
    group_version_path: &str,
    resource: &str,
) -> Option<bool> {
    let ua = crate::api::client::user_agent_base();
    let client = crate::api::client::Client::new(rest, 0.0, 0, &ua).ok()?;
    match client.get_path(group_version_path) {
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
    use super::*;
    use serde_json::json;

    #[test]
    fn listed_names_only_that_resource() {
        let l = json!({"resources": [{"name": "servicecidrs"}, {"name": "servicecidrs/status"}]});
        assert!(listed(&l, "servicecidrs"));
        assert!(!listed(&l, "ipaddresses"));
        assert!(!listed(&json!({}), "servicecidrs"));
    }
}
