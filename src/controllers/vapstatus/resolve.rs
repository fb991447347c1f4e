//! What a policy is checked against (upstream's `typesToCheck` and its schema resolver): the
//! kinds its resource rules name, found through discovery as the REST mapper finds them, and
//! each kind's schema from the API server's OpenAPI v3 documents.

use super::types::{from_schema, Schemas, Ty};
use crate::api::client::Client;
use crate::obj::At as _;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Upstream's `maxTypesToCheck`.
const MAX_TYPES: usize = 10;

/// A group, version and kind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl std::fmt::Display for Gvk {
    /// `schema.GroupVersionKind.String()`: `apps/v1, Kind=Deployment`, `/v1, Kind=Pod`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}, Kind={}", self.group, self.version, self.kind)
    }
}

/// Where the kinds and schemas come from: the API server, or a test's answers.
pub trait Source {
    /// `APIResourceList` of a group version (`/api/v1`, `/apis/<g>/<v>`), None when not served.
    fn resources(&self, group: &str, version: &str) -> Option<Value>;
    /// The OpenAPI v3 document of a group version (its text), None when not served.
    fn openapi(&self, group: &str, version: &str) -> Option<String>;
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The API server as a source.
pub struct Live<'a>(pub &'a Client);

impl Source for Live<'_> {
    fn resources(&self, group: &str, version: &str) -> Option<Value> {
        self.0
            .get_path(&format!("/{}", gv_path(group, version)))
            .ok()
    }

    fn openapi(&self, group: &str, version: &str) -> Option<String> {
        self.0
            .get_raw(&format!("/openapi/v3/{}", gv_path(group, version)))
            .ok()
    }
}

fn strs(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `typesToCheck`: the kinds of a policy's resource rules, wildcards and subresources left
/// out, at most 10, sorted by group, version and kind.
pub fn kinds(policy: &Value, src: &dyn Source) -> Vec<Gvk> {
    let rules = policy
        .at("/spec/matchConstraints/resourceRules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut found = BTreeSet::new();
    let mut count = 0;
    let mut lists: HashMap<(String, String), Option<Value>> = HashMap::new();
    for rule in &rules {
        let mut groups = strs(rule, "apiGroups");
        let mut versions = strs(rule, "apiVersions");
        if groups.iter().chain(&versions).any(|g| g.contains('*')) {
            continue;
        }
        let mut resources: Vec<String> = strs(rule, "resources")
            .into_iter()
            .filter(|r| !r.contains(['*', '/']))
            .collect();
        crate::sort::sort(&mut groups[..]);
        crate::sort::sort(&mut versions[..]);
        crate::sort::sort(&mut resources[..]);
        for g in &groups {
            for v in &versions {
                let list = lists
                    .entry((g.clone(), v.clone()))
                    .or_insert_with(|| src.resources(g, v));
                for r in &resources {
                    let Some(kind) = list.as_ref().and_then(|l| kind_of(l, r)) else {
                        continue;
                    };
                    found.insert(Gvk {
                        group: g.clone(),
                        version: v.clone(),
                        kind,
                    });
                    count += 1;
                    if count == MAX_TYPES {
                        return found.into_iter().collect();
                    }
                }
            }
        }
    }
    found.into_iter().collect()
}

/// The kind a resource name (plural or singular, no subresource) has in an APIResourceList.
fn kind_of(list: &Value, resource: &str) -> Option<String> {
    list.get("resources")?
        .as_array()?
        .iter()
        .filter(|r| !r["name"].as_str().unwrap_or("").contains('/'))
        .find(|r| r["name"] == resource || r["singularName"] == resource)
        .and_then(|r| r["kind"].as_str().map(str::to_string))
}

#[derive(serde::Deserialize)]
struct Doc {
    components: Components,
}

#[derive(serde::Deserialize)]
struct Components {
    #[serde(default)]
    schemas: Schemas,
}

/// Whether a schema names the kind in its `x-kubernetes-group-version-kind`.
fn is_root(s: &Value, gvk: &Gvk) -> bool {
    s.get("x-kubernetes-group-version-kind")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            a.iter().any(|k| {
                k["group"].as_str().unwrap_or("") == gvk.group
                    && k["version"] == gvk.version.as_str()
                    && k["kind"] == gvk.kind.as_str()
            })
        })
}

/// The schema of a kind, as a type named `name`; None when the API server has none. The
/// document's schemas stay text until a type needs them.
pub fn schema_type(src: &dyn Source, gvk: &Gvk, name: &str) -> Option<Ty> {
    let text = src.openapi(&gvk.group, &gvk.version)?;
    let doc: Doc = serde_json::from_str(&text).ok()?;
    drop(text);
    let schemas = Arc::new(doc.components.schemas);
    let root: Value = schemas
        .values()
        .filter(|raw| raw.get().contains(&format!("\"{}\"", gvk.kind)))
        .filter_map(|raw| serde_json::from_str::<Value>(raw.get()).ok())
        .find(|s| is_root(s, gvk))?;
    from_schema(&schemas, &root, name, true)
}

/// `generateUniqueTypeName`: the kind and the nanoseconds of the current second.
pub fn unique_name(kind: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{kind}{nanos}")
}
