//! Discovery documents in kube-apiserver's legacy (unaggregated) shapes.

use serde_json::{json, Value};

use super::meta::{has_scale_subresource, has_status_subresource, is_review};
use edgekcm::api::resources::Kind;

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn short_names(k: &Kind) -> &'static [&'static str] {
    match k.plural {
        "namespaces" => &["ns"],
        "nodes" => &["no"],
        "pods" => &["po"],
        "services" => &["svc"],
        "endpoints" => &["ep"],
        "configmaps" => &["cm"],
        "secrets" => &[],
        "serviceaccounts" => &["sa"],
        "events" => &["ev"],
        "replicationcontrollers" => &["rc"],
        "persistentvolumes" => &["pv"],
        "persistentvolumeclaims" => &["pvc"],
        "resourcequotas" => &["quota"],
        "limitranges" => &["limits"],
        "deployments" => &["deploy"],
        "replicasets" => &["rs"],
        "statefulsets" => &["sts"],
        "daemonsets" => &["ds"],
        "cronjobs" => &["cj"],
        "certificatesigningrequests" => &["csr"],
        "poddisruptionbudgets" => &["pdb"],
        "horizontalpodautoscalers" => &["hpa"],
        "storageclasses" => &["sc"],
        "volumeattributesclasses" => &["vac"],
        "customresourcedefinitions" => &["crd", "crds"],
        _ => &[],
    }
}

fn in_category_all(k: &Kind) -> bool {
    matches!(
        k.plural,
        "pods"
            | "services"
            | "replicationcontrollers"
            | "deployments"
            | "replicasets"
            | "statefulsets"
            | "daemonsets"
            | "jobs"
            | "cronjobs"
    )
}

fn sub(k: &Kind, name: &str, kind: &str, gv: Option<(&str, &str)>, verbs: &[&str]) -> Value {
    let mut v = json!({
        "name": format!("{}/{}", k.plural, name),
        "singularName": "",
        "namespaced": k.namespaced,
        "kind": kind,
        "verbs": verbs,
    });
    if let Some((g, ver)) = gv {
        v["group"] = json!(g);
        v["version"] = json!(ver);
    }
    v
}

/// `APIResourceList` for one group/version.
pub fn resource_list(group_version: &str, kinds: &[Kind]) -> Value {
    let mut resources = Vec::new();
    for k in kinds {
        let verbs: Vec<&str> = if is_review(k) {
            vec!["create"]
        } else if k.plural == "namespaces" {
            ALL_VERBS
                .iter()
                .copied()
                .filter(|v| *v != "deletecollection")
                .collect()
        } else {
            ALL_VERBS.to_vec()
        };
        let mut r = json!({
            "name": k.plural,
            "singularName": k.kind.to_ascii_lowercase(),
            "namespaced": k.namespaced,
            "kind": k.kind,
            "verbs": verbs,
        });
        let sn = short_names(k);
        if !sn.is_empty() {
            r["shortNames"] = json!(sn);
        }
        if in_category_all(k) {
            r["categories"] = json!(["all"]);
        }
        resources.push(r);
        let rw = &["get", "patch", "update"];
        if has_status_subresource(k) {
            resources.push(sub(k, "status", k.kind, None, rw));
        }
        if has_scale_subresource(k) {
            resources.push(sub(k, "scale", "Scale", Some(("autoscaling", "v1")), rw));
        }
        match (k.group, k.plural) {
            ("", "namespaces") => resources.push(sub(k, "finalize", k.kind, None, &["update"])),
            ("", "serviceaccounts") => resources.push(sub(
                k,
                "token",
                "TokenRequest",
                Some(("authentication.k8s.io", "v1")),
                &["create"],
            )),
            ("certificates.k8s.io", "certificatesigningrequests") => {
                resources.push(sub(k, "approval", k.kind, None, rw))
            }
            _ => {}
        }
    }
    resources.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

/// `APIVersions` for `/api`.
pub fn api_versions(port: u16) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": format!("127.0.0.1:{port}")}
        ],
    })
}

/// One `APIGroup` entry: versions in table order, the first one preferred.
pub fn api_group(name: &str, kinds: &[Kind]) -> Value {
    let mut versions: Vec<&str> = Vec::new();
    for k in kinds.iter().filter(|k| k.group == name) {
        if !versions.contains(&k.version) {
            versions.push(k.version);
        }
    }
    let gv = |v: &str| json!({"groupVersion": format!("{name}/{v}"), "version": v});
    let preferred = versions.first().map(|v| gv(v)).unwrap_or(Value::Null);
    json!({
        "name": name,
        "versions": versions.iter().map(|v| gv(v)).collect::<Vec<_>>(),
        "preferredVersion": preferred,
    })
}

/// `APIGroupList` for `/apis`.
pub fn group_list(kinds: &[Kind]) -> Value {
    let mut names: Vec<&str> = Vec::new();
    for k in kinds.iter().filter(|k| !k.group.is_empty()) {
        if !names.contains(&k.group) {
            names.push(k.group);
        }
    }
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": names.iter().map(|n| api_group(n, kinds)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgekcm::api::resources::ALL;

    #[test]
    fn shapes() {
        let apps: Vec<Kind> = ALL.iter().copied().filter(|k| k.group == "apps").collect();
        let l = resource_list("apps/v1", &apps);
        let names: Vec<&str> = l["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"deployments/scale"));
        assert!(names.contains(&"deployments/status"));
        assert!(names.contains(&"controllerrevisions"));
        assert!(!names.contains(&"controllerrevisions/status"));
        let g = group_list(ALL);
        let apps = g["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "apps")
            .unwrap();
        assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");
        let core: Vec<Kind> = ALL.iter().copied().filter(|k| k.group.is_empty()).collect();
        let c = resource_list("v1", &core);
        let ns = c["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "namespaces")
            .unwrap();
        assert!(!ns["verbs"]
            .as_array()
            .unwrap()
            .contains(&json!("deletecollection")));
        assert!(c["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "serviceaccounts/token"));
    }
}
