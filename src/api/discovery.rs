//! API discovery: which resources the server serves, in which versions, with which verbs.
//!
//! Follows client-go's discovery client: the aggregated form (`apidiscovery.k8s.io/v2beta1`,
//! two requests) when the server answers with it, else `/api`, `/apis` and one request per group
//! version. A group version that cannot be fetched is recorded in `failed` and the rest is kept,
//! as `ServerPreferredResources` does. Subresources (`pods/status`) are dropped on the way in.

use crate::api::client::Client;
use crate::api::resources::{self, Kind};
use crate::error::{Error, Result};
use crate::obj::At as _;
use serde_json::Value;
use std::collections::BTreeMap;

/// The Accept header client-go v1.28 sends for discovery: aggregated first, legacy after.
pub const ACCEPT: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// The verbs of a resource, as a small bit set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Verbs(u16);

impl Verbs {
    pub const GET: Verbs = Verbs(1);
    pub const LIST: Verbs = Verbs(1 << 1);
    pub const WATCH: Verbs = Verbs(1 << 2);
    pub const CREATE: Verbs = Verbs(1 << 3);
    pub const UPDATE: Verbs = Verbs(1 << 4);
    pub const PATCH: Verbs = Verbs(1 << 5);
    pub const DELETE: Verbs = Verbs(1 << 6);
    pub const DELETECOLLECTION: Verbs = Verbs(1 << 7);

    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Verbs {
        let mut v = Verbs::default();
        for n in names {
            v.0 |= match n {
                "get" => Self::GET.0,
                "list" => Self::LIST.0,
                "watch" => Self::WATCH.0,
                "create" => Self::CREATE.0,
                "update" => Self::UPDATE.0,
                "patch" => Self::PATCH.0,
                "delete" => Self::DELETE.0,
                "deletecollection" => Self::DELETECOLLECTION.0,
                _ => 0,
            };
        }
        v
    }

    fn from_json(v: Option<&Value>) -> Verbs {
        Verbs::parse(
            v.and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str),
        )
    }

    /// These verbs and those of `other` (`|` in constants).
    pub const fn union(self, other: Verbs) -> Verbs {
        Verbs(self.0 | other.0)
    }

    /// Every verb of `other` is here.
    pub fn has(self, other: Verbs) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Verbs {
    type Output = Verbs;
    fn bitor(self, o: Verbs) -> Verbs {
        Verbs(self.0 | o.0)
    }
}

/// One served resource (never a subresource) of one group version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    pub kind: Kind,
    pub verbs: Verbs,
}

/// One API group as discovery lists it: versions in the server's order, the preferred one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Group {
    /// "" for the legacy core group.
    pub name: String,
    /// (version, groupVersion as the server wrote it)
    pub versions: Vec<(String, String)>,
    pub preferred: String,
}

/// The result of one discovery.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Discovery {
    /// Core first, then `/apis` in the server's order.
    pub groups: Vec<Group>,
    /// The resources of every group version that could be fetched, keyed (group, version).
    pub resources: BTreeMap<(String, String), Vec<Resource>>,
    /// Group versions (`apps/v1`, `v1`) that could not be fetched, with the reason.
    pub failed: BTreeMap<String, String>,
    /// Whether the aggregated form answered.
    pub aggregated: bool,
}

/// The text of an error as client-go would print it: the Status message when there is one.
fn error_text(e: &Error) -> String {
    match e {
        Error::Api { message, .. } if !message.is_empty() => message.clone(),
        other => other.to_string(),
    }
}

fn gv_string(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// apimachinery's `ParseGroupVersion`: "", "v1", "apps/v1" are fine, more slashes are not.
pub fn parse_group_version(gv: &str) -> std::result::Result<(String, String), String> {
    if gv.is_empty() || gv == "/" {
        return Ok((String::new(), String::new()));
    }
    match gv.matches('/').count() {
        0 => Ok((String::new(), gv.to_string())),
        1 => {
            let (g, v) = gv.split_once('/').unwrap_or(("", gv));
            Ok((g.to_string(), v.to_string()))
        }
        _ => Err(format!("unexpected GroupVersion string: {gv}")),
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

impl Discovery {
    /// Discover everything. Fails only when `/api` or `/apis` cannot be read (a 404 on `/api`
    /// is tolerated, as aggregated API servers answer so).
    pub fn fetch(client: &Client) -> Result<Discovery> {
        let api = match client.request("GET", "/api", None, ACCEPT) {
            Ok(v) => Some(v),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let apis = client.request("GET", "/apis", None, ACCEPT)?;
        let agg = |v: &Value| str_of(v, "kind") == "APIGroupDiscoveryList";
        let api_agg = api.as_ref().is_none_or(agg);
        if api_agg && agg(&apis) {
            let mut d = Discovery::from_aggregated(api.as_ref(), &apis);
            d.aggregated = true;
            return Ok(d);
        }
        // Legacy: the group lists, then one resource list per group version.
        let mut d = Discovery::default();
        match &api {
            Some(v) if agg(v) => {
                let core = Discovery::from_aggregated(Some(v), &Value::Null);
                d.groups.extend(core.groups);
            }
            Some(v) => d.groups.extend(Self::core_group(v)),
            None => {}
        }
        if agg(&apis) {
            d.groups
                .extend(Discovery::from_aggregated(None, &apis).groups);
        } else {
            d.groups.extend(Self::groups_from_list(&apis));
        }
        let gvs: Vec<(String, String)> = d
            .groups
            .iter()
            .flat_map(|g| g.versions.iter().map(|(v, _)| (g.name.clone(), v.clone())))
            .collect();
        for (g, v) in gvs {
            let path = if g.is_empty() {
                format!("/api/{v}")
            } else {
                format!("/apis/{g}/{v}")
            };
            match client.request("GET", &path, None, "application/json") {
                Ok(list) => {
                    let rs = Self::resource_list(&g, &v, &list);
                    d.resources.insert((g, v), rs);
                }
                // client-go tolerates a missing core/v1 as an empty list.
                Err(e) if g.is_empty() && v == "v1" && e.is_not_found() => {
                    d.resources.insert((g, v), Vec::new());
                }
                Err(e) => {
                    d.failed.insert(gv_string(&g, &v), error_text(&e));
                }
            }
        }
        Ok(d)
    }

    /// `APIVersions` from `/api`: the core group.
    pub fn core_group(v: &Value) -> Option<Group> {
        let versions: Vec<(String, String)> = v
            .get("versions")
            .and_then(Value::as_array)?
            .iter()
            .filter_map(Value::as_str)
            .map(|s| (s.to_string(), s.to_string()))
            .collect();
        let preferred = versions.first()?.0.clone();
        Some(Group {
            name: String::new(),
            versions,
            preferred,
        })
    }

    /// `APIGroupList` from `/apis`.
    pub fn groups_from_list(v: &Value) -> Vec<Group> {
        let mut out = Vec::new();
        for g in v
            .get("groups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = str_of(g, "name");
            if name.is_empty() {
                log::warn!("discovery: skipping a group without a name");
                continue;
            }
            let versions: Vec<(String, String)> = g
                .get("versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|v| !str_of(v, "version").is_empty())
                .map(|v| {
                    (
                        str_of(v, "version").to_string(),
                        str_of(v, "groupVersion").to_string(),
                    )
                })
                .collect();
            let preferred = g
                .at("/preferredVersion/version")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            out.push(Group {
                name: name.to_string(),
                versions,
                preferred,
            });
        }
        out
    }

    /// An `APIResourceList` for `group`/`version`, subresources dropped.
    pub fn resource_list(group: &str, version: &str, v: &Value) -> Vec<Resource> {
        let mut out = Vec::new();
        for r in v
            .get("resources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = str_of(r, "name");
            let kind = str_of(r, "kind");
            if name.is_empty() || name.contains('/') {
                continue;
            }
            if kind.is_empty() {
                log::debug!("discovery: {group}/{version} {name} has no kind; skipped");
                continue;
            }
            let namespaced = r.get("namespaced").and_then(Value::as_bool) == Some(true);
            out.push(Resource {
                kind: resources::discovered(group, version, kind, name, namespaced),
                verbs: Verbs::from_json(r.get("verbs")),
            });
        }
        out
    }

    /// Both `APIGroupDiscoveryList` answers (either may be missing). Stale group versions are
    /// recorded as failed, as client-go does.
    pub fn from_aggregated(api: Option<&Value>, apis: &Value) -> Discovery {
        let mut d = Discovery {
            aggregated: true,
            ..Default::default()
        };
        for doc in api.into_iter().chain(std::iter::once(apis)) {
            for item in doc
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let name = item
                    .at("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let mut group = Group {
                    name: name.to_string(),
                    ..Default::default()
                };
                for v in item
                    .get("versions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let version = str_of(v, "version");
                    if version.is_empty() {
                        continue;
                    }
                    let gv = gv_string(name, version);
                    if str_of(v, "freshness") == "Stale" {
                        d.failed
                            .insert(gv.clone(), format!("stale GroupVersion discovery: {gv}"));
                        continue;
                    }
                    if group.preferred.is_empty() {
                        group.preferred = version.to_string();
                    }
                    group.versions.push((version.to_string(), gv));
                    let mut rs = Vec::new();
                    for r in v
                        .get("resources")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        let plural = str_of(r, "resource");
                        let kind = r
                            .at("/responseKind/kind")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        if plural.is_empty() || plural.contains('/') || kind.is_empty() {
                            continue;
                        }
                        rs.push(Resource {
                            kind: resources::discovered(
                                name,
                                version,
                                kind,
                                plural,
                                str_of(r, "scope") == "Namespaced",
                            ),
                            verbs: Verbs::from_json(r.get("verbs")),
                        });
                    }
                    d.resources
                        .insert((name.to_string(), version.to_string()), rs);
                }
                if !group.versions.is_empty() {
                    d.groups.push(group);
                }
            }
        }
        d
    }

    /// client-go's `ServerPreferredResources`: each (group, resource) once, in the group's
    /// preferred version when it is served there, else in the first version that serves it.
    pub fn preferred(&self) -> Vec<Resource> {
        let mut chosen: BTreeMap<(&str, &str), Resource> = BTreeMap::new();
        let mut order: Vec<(&str, &str)> = Vec::new();
        for g in &self.groups {
            for (v, _) in &g.versions {
                let Some(list) = self.resources.get(&(g.name.clone(), v.clone())) else {
                    continue;
                };
                for r in list {
                    let key = (g.name.as_str(), r.kind.plural);
                    if chosen.contains_key(&key) && *v != g.preferred {
                        continue;
                    }
                    if chosen.insert(key, *r).is_none() {
                        order.push(key);
                    }
                }
            }
        }
        order
            .iter()
            .filter_map(|k| chosen.get(k).copied())
            .collect()
    }

    /// `preferred()` limited to resources with every verb of `verbs`.
    pub fn preferred_with(&self, verbs: Verbs) -> Vec<Resource> {
        self.preferred()
            .into_iter()
            .filter(|r| r.verbs.has(verbs))
            .collect()
    }

    /// The resource serving `kind` in `api_version` (the REST mapping), in any served version.
    pub fn kind_for(&self, api_version: &str, kind: &str) -> Option<Kind> {
        let (g, v) = parse_group_version(api_version).ok()?;
        self.resources
            .get(&(g, v))?
            .iter()
            .find(|r| r.kind.kind == kind)
            .map(|r| r.kind)
    }

    /// client-go's `ErrGroupDiscoveryFailed` text, when some group version failed.
    pub fn failure(&self) -> Option<String> {
        if self.failed.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .failed
            .iter()
            .map(|(gv, e)| format!("{gv}: {e}"))
            .collect();
        Some(format!(
            "unable to retrieve the complete list of server APIs: {}",
            parts.join(", ")
        ))
    }

    /// Group versions, as the server wrote them, that apimachinery cannot parse.
    pub fn unparsable(&self) -> Vec<String> {
        self.groups
            .iter()
            .flat_map(|g| g.versions.iter())
            .filter_map(|(_, raw)| parse_group_version(raw).err())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn legacy() -> Discovery {
        let mut d = Discovery::default();
        d.groups.extend(Discovery::core_group(
            &json!({"kind":"APIVersions","versions":["v1"]}),
        ));
        d.groups.extend(Discovery::groups_from_list(&json!({"groups":[
            {"name":"autoscaling","versions":[{"groupVersion":"autoscaling/v2","version":"v2"},
                {"groupVersion":"autoscaling/v1","version":"v1"}],
             "preferredVersion":{"groupVersion":"autoscaling/v2","version":"v2"}},
            {"name":"example.com","versions":[{"groupVersion":"example.com/v1beta1","version":"v1beta1"},
                {"groupVersion":"example.com/v1","version":"v1"}],
             "preferredVersion":{"groupVersion":"example.com/v1","version":"v1"}}
        ]})));
        let core = json!({"groupVersion":"v1","resources":[
            {"name":"pods","namespaced":true,"kind":"Pod","verbs":["create","delete","deletecollection","get","list","patch","update","watch"]},
            {"name":"pods/status","namespaced":true,"kind":"Pod","verbs":["get","patch","update"]},
            {"name":"bindings","namespaced":true,"kind":"Binding","verbs":["create"]},
            {"name":"namespaces","namespaced":false,"kind":"Namespace","verbs":["create","delete","get","list","patch","update","watch"]},
            {"name":"nokind","namespaced":true,"verbs":["list"]}
        ]});
        d.resources.insert(
            ("".into(), "v1".into()),
            Discovery::resource_list("", "v1", &core),
        );
        let hpa = json!({"resources":[{"name":"horizontalpodautoscalers","namespaced":true,
            "kind":"HorizontalPodAutoscaler","verbs":["delete","list","watch"]}]});
        for v in ["v2", "v1"] {
            d.resources.insert(
                ("autoscaling".into(), v.into()),
                Discovery::resource_list("autoscaling", v, &hpa),
            );
        }
        // A resource only in the non-preferred version, and one in both.
        d.resources.insert(
            ("example.com".into(), "v1beta1".into()),
            Discovery::resource_list(
                "example.com",
                "v1beta1",
                &json!({"resources":[
                    {"name":"olds","namespaced":true,"kind":"Old","verbs":["list","watch","delete"]},
                    {"name":"widgets","namespaced":true,"kind":"Widget","verbs":["list"]}]}),
            ),
        );
        d.failed.insert(
            "example.com/v1".into(),
            "the server could not find the requested resource".into(),
        );
        d
    }

    #[test]
    fn legacy_parsing_and_preferred_versions() {
        let d = legacy();
        let pref = d.preferred();
        let names: Vec<String> = pref
            .iter()
            .map(|r| format!("{}/{}", r.kind.api_version(), r.kind.plural))
            .collect();
        assert_eq!(
            names,
            vec![
                "v1/pods",
                "v1/bindings",
                "v1/namespaces",
                "autoscaling/v2/horizontalpodautoscalers",
                "example.com/v1beta1/olds",
                "example.com/v1beta1/widgets",
            ]
        );
        // Subresources and kind-less entries never appear.
        assert!(pref.iter().all(|r| !r.kind.plural.contains('/')));
        let gc: Vec<&str> = d
            .preferred_with(Verbs::LIST | Verbs::WATCH | Verbs::DELETE)
            .iter()
            .map(|r| r.kind.plural)
            .collect();
        assert_eq!(
            gc,
            vec!["pods", "namespaces", "horizontalpodautoscalers", "olds"]
        );
        let pods = pref[0];
        assert!(pods.kind.namespaced && pods.verbs.has(Verbs::DELETECOLLECTION));
        assert!(!pref[2].verbs.has(Verbs::DELETECOLLECTION));
        assert_eq!(
            d.kind_for("autoscaling/v1", "HorizontalPodAutoscaler")
                .map(|k| k.version),
            Some("v1")
        );
        assert_eq!(d.kind_for("v1", "Pod"), Some(crate::api::resources::PODS));
        assert_eq!(d.kind_for("apps/v1", "Deployment"), None);
        assert_eq!(d.kind_for("a/b/c", "X"), None);
        assert_eq!(
            d.failure().as_deref(),
            Some("unable to retrieve the complete list of server APIs: example.com/v1: the server could not find the requested resource")
        );
        assert!(d.unparsable().is_empty());
    }

    #[test]
    fn aggregated_parsing() {
        let api = json!({"kind":"APIGroupDiscoveryList","items":[{"metadata":{},"versions":[
            {"version":"v1","resources":[
                {"resource":"configmaps","responseKind":{"group":"","version":"","kind":"ConfigMap"},
                 "scope":"Namespaced","verbs":["delete","deletecollection","list","watch"]},
                {"resource":"nodes","responseKind":{"group":"","version":"","kind":"Node"},
                 "scope":"Cluster","verbs":["delete","list","watch"],
                 "subresources":[{"subresource":"status","responseKind":{"kind":"Node"},"verbs":["get"]}]},
                {"resource":"broken","scope":"Cluster","verbs":["list"]}],
             "freshness":"Current"}]}]});
        let apis = json!({"kind":"APIGroupDiscoveryList","items":[
            {"metadata":{"name":"apps"},"versions":[{"version":"v1","resources":[
                {"resource":"deployments","responseKind":{"group":"","version":"","kind":"Deployment"},
                 "scope":"Namespaced","verbs":["list","watch","delete"]}],"freshness":"Current"}]},
            {"metadata":{"name":"metrics.k8s.io"},"versions":[{"version":"v1beta1","resources":[],
                "freshness":"Stale"}]}]});
        let d = Discovery::from_aggregated(Some(&api), &apis);
        assert!(d.aggregated);
        let names: Vec<&str> = d.preferred().iter().map(|r| r.kind.plural).collect();
        assert_eq!(names, vec!["configmaps", "nodes", "deployments"]);
        assert_eq!(d.preferred()[2].kind, crate::api::resources::DEPLOYMENTS);
        assert!(!d.preferred()[1].kind.namespaced);
        assert_eq!(
            d.failure().as_deref(),
            Some("unable to retrieve the complete list of server APIs: metrics.k8s.io/v1beta1: stale GroupVersion discovery: metrics.k8s.io/v1beta1")
        );
        assert_eq!(d.groups.len(), 2);
    }

    #[test]
    fn group_version_parsing() {
        assert_eq!(parse_group_version("v1"), Ok(("".into(), "v1".into())));
        assert_eq!(
            parse_group_version("apps/v1"),
            Ok(("apps".into(), "v1".into()))
        );
        assert_eq!(
            parse_group_version("a/b/c"),
            Err("unexpected GroupVersion string: a/b/c".into())
        );
        let mut d = Discovery::default();
        d.groups.push(Group {
            name: "a".into(),
            versions: vec![("b".into(), "a/b/c".into())],
            preferred: "b".into(),
        });
        assert_eq!(
            d.unparsable(),
            vec!["unexpected GroupVersion string: a/b/c"]
        );
    }

    #[test]
    fn verbs() {
        let v = Verbs::parse(["list", "watch", "bogus"]);
        assert!(v.has(Verbs::LIST | Verbs::WATCH));
        assert!(!v.has(Verbs::DELETE));
    }
}
