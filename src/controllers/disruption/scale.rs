//! How many pods the budget's pods' controllers want (upstream's `getExpectedScale` and its
//! finders): ReplicationControllers, Deployments (through their ReplicaSets), ReplicaSets and
//! StatefulSets from the cache, anything else through its `scale` subresource, found by
//! discovery as upstream's REST mapper and scale client find it.

use super::NAME;
use crate::api::client::Client;
use crate::api::discovery::parse_group_version;
use crate::api::resources::{DEPLOYMENTS, REPLICASETS, REPLICATIONCONTROLLERS, STATEFULSETS};
use crate::api::Kind;
use crate::cache::Cache;
use crate::obj::At as _;
use crate::obj::{self, OwnerRefView};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Replicas and UID of a controller found for a pod.
type Found = Option<(String, i64)>;

/// Discovery answers (`APIResourceList`s) by group version, kept until a lookup misses.
#[derive(Default)]
pub struct Mapper {
    lists: Mutex<HashMap<String, Arc<Value>>>,
}

impl Mapper {
    fn list(&self, client: &Client, gv: &str, fresh: bool) -> Result<Arc<Value>, String> {
        let mut lists = self.lists.lock().unwrap_or_else(|p| p.into_inner());
        if !fresh {
            if let Some(l) = lists.get(gv) {
                return Ok(l.clone());
            }
        }
        let path = if gv.contains('/') {
            format!("/apis/{gv}")
        } else {
            format!("/api/{gv}")
        };
        match client.get_path(&path) {
            Ok(v) => {
                let v = Arc::new(v);
                lists.insert(gv.to_string(), v.clone());
                Ok(v)
            }
            Err(e) if e.is_not_found() => {
                lists.remove(gv);
                Ok(Arc::new(Value::Null))
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// The resource (plural) serving `kind` in group version `gv`, from discovery (read again
    /// once when the cached answer lacks it); upstream's `RESTMapping` error when none does.
    fn resource(
        &self,
        client: &Client,
        gv: &str,
        kind: &str,
    ) -> Result<(String, Arc<Value>), String> {
        for fresh in [false, true] {
            let list = self.list(client, gv, fresh)?;
            let found = resources(&list)
                .find(|r| str_of(r, "kind") == kind && !str_of(r, "name").contains('/'))
                .map(|r| str_of(r, "name").to_string());
            if let Some(plural) = found {
                return Ok((plural, list));
            }
        }
        Err(format!("no matches for kind {kind:?} in version {gv:?}"))
    }
}

fn resources(list: &Value) -> impl Iterator<Item = &Value> {
    list.get("resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// Upstream's `verifyGroupKind`: an unparsable apiVersion is an error.
fn is_kind(r: &OwnerRefView, kind: &str, groups: &[&str]) -> Result<bool, String> {
    let (group, _) = parse_group_version(r.api_version)?;
    Ok(r.kind == kind && groups.contains(&group.as_str()))
}

fn replicas(o: &Value) -> i64 {
    // Defaulted to 1 by the server; a missing value reads as upstream's defaulted pointer.
    o.at("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)
}

/// The cached object `kind` `ns/name` if its UID is `uid`.
fn cached(cache: &Cache, kind: Kind, ns: &str, name: &str, uid: &str) -> Option<obj::Obj> {
    cache
        .store(kind)
        .get_in(ns, name)
        .filter(|o| obj::uid(o) == uid)
}

/// The finders, in upstream's order: the first that knows the pod's controller answers.
pub fn find(
    cache: &Cache,
    client: &Client,
    mapper: &Mapper,
    r: &OwnerRefView,
    ns: &str,
) -> Result<Found, String> {
    // ReplicationController.
    if is_kind(r, "ReplicationController", &[""])? {
        if let Some(rc) = cached(cache, REPLICATIONCONTROLLERS, ns, r.name, r.uid) {
            return Ok(Some((r.uid.to_string(), replicas(&rc))));
        }
    }
    // Deployment, through the ReplicaSet.
    if is_kind(r, "ReplicaSet", &["apps", "extensions"])? {
        if let Some(rs) = cached(cache, REPLICASETS, ns, r.name, r.uid) {
            if let Some(dref) = obj::controller_ref(&rs) {
                if is_kind(&dref, "Deployment", &["apps", "extensions"])? {
                    if let Some(d) = cached(cache, DEPLOYMENTS, ns, dref.name, dref.uid) {
                        return Ok(Some((dref.uid.to_string(), replicas(&d))));
                    }
                }
            }
        }
    }
    // ReplicaSet not controlled by a Deployment.
    if is_kind(r, "ReplicaSet", &["apps", "extensions"])? {
        if let Some(rs) = cached(cache, REPLICASETS, ns, r.name, r.uid) {
            if obj::controller_ref(&rs).is_none_or(|c| c.kind != "Deployment") {
                return Ok(Some((r.uid.to_string(), replicas(&rs))));
            }
        }
    }
    // StatefulSet.
    if is_kind(r, "StatefulSet", &["apps"])? {
        if let Some(ss) = cached(cache, STATEFULSETS, ns, r.name, r.uid) {
            return Ok(Some((r.uid.to_string(), replicas(&ss))));
        }
    }
    scale_subresource(client, mapper, r, ns)
}

/// Upstream's `getScaleController`: GET `<resource>/<name>/scale`; a 404 is "no controller"
/// when the resource has a `scale` subresource, an error when it has none.
fn scale_subresource(
    client: &Client,
    mapper: &Mapper,
    r: &OwnerRefView,
    ns: &str,
) -> Result<Found, String> {
    let (group, version) = parse_group_version(r.api_version)?;
    let gv = r.api_version;
    let (plural, list) = mapper.resource(client, gv, r.kind)?;
    let base = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let path = format!("{base}/namespaces/{ns}/{plural}/{}/scale", r.name);
    match client.get_path(&path) {
        Ok(scale) => {
            if obj::uid(&scale) != r.uid {
                return Ok(None);
            }
            let replicas = scale
                .at("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            Ok(Some((r.uid.to_string(), replicas)))
        }
        Err(e) if e.is_not_found() => {
            let sub = format!("{plural}/scale");
            let has_scale = resources(&list).any(|x| {
                str_of(x, "name") == sub
                    && str_of(x, "kind") == "Scale"
                    && matches!(
                        (
                            x.get("group").and_then(Value::as_str),
                            x.get("version").and_then(Value::as_str)
                        ),
                        (Some("autoscaling"), Some("v1"))
                    )
            });
            if has_scale {
                log::debug!("{NAME}: {path}: not found");
                Ok(None)
            } else {
                let gr = if group.is_empty() {
                    plural
                } else {
                    format!("{plural}.{group}")
                };
                Err(format!("{gr} does not implement the scale subresource"))
            }
        }
        Err(e) => Err(e.to_string()),
    }
}

/// The expected pod count: the sum of the scales of the selected pods' controllers, and the
/// pods without a controller (upstream's `getExpectedScale`). An error when a pod's controller
/// is found nowhere.
pub fn expected_scale(
    cache: &Cache,
    client: &Client,
    mapper: &Mapper,
    pods: &[&Value],
) -> Result<(i64, Vec<String>), String> {
    let mut scales: BTreeMap<String, i64> = BTreeMap::new();
    let mut seen: Vec<String> = Vec::new();
    let mut unmanaged = Vec::new();
    for p in pods {
        let Some(r) = obj::controller_ref(p) else {
            unmanaged.push(obj::name(p).to_string());
            continue;
        };
        if scales.contains_key(r.uid) || seen.iter().any(|s| s == r.uid) {
            continue;
        }
        match find(cache, client, mapper, &r, obj::namespace(p))? {
            Some((uid, n)) => {
                scales.insert(uid, n);
                seen.push(r.uid.to_string());
            }
            None => return Err(format!("found no controllers for pod {:?}", obj::name(p))),
        }
    }
    Ok((scales.values().sum(), unmanaged))
}
