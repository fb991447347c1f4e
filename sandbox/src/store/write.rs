//! Creates, updates (of the resource and its subresources) and patches, with the admission
//! checks of the namespace lifecycle and the server-owned fields.

use edgekcm::obj::At as _;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

use super::{set_path, EvType, Kind, PatchType, State, WriteMode, NAMESPACES};
use crate::defaults;
use crate::meta::{
    self, finalizers, has_status_subresource, is_deleting, meta_mut, meta_str, name_of,
    namespace_of, now_rfc3339, rv_of, ApiError,
};
use crate::patch;

/// The object without metadata and status: what `generation` tracks.
fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("kind");
        m.remove("apiVersion");
    }
    v
}

impl State {
    fn check_namespace(
        &self,
        kind: &Kind,
        ns: &str,
        name: &str,
        create: bool,
    ) -> Result<(), ApiError> {
        if !kind.namespaced {
            return Ok(());
        }
        let Some(nso) = self.get(&NAMESPACES, "", ns) else {
            return Err(ApiError::namespace_not_found(ns));
        };
        let terminating = nso.at("/status/phase").and_then(Value::as_str) == Some("Terminating");
        if create && terminating {
            let why = format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            );
            let mut e = ApiError::forbidden(kind, name, &why);
            if let Some(d) = e.details.as_mut() {
                d["causes"] = json!([{"reason": "NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field": "metadata.namespace"}]);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Create an object (POST). `path_ns` is the namespace from the URL, if any.
    pub fn create(
        &mut self,
        kind: &Kind,
        path_ns: Option<&str>,
        mut obj: Value,
    ) -> Result<Arc<Value>, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request is not a JSON object",
            ));
        }
        let body_ns = namespace_of(&obj).to_string();
        let ns = if kind.namespaced {
            match path_ns {
                Some(p) if !body_ns.is_empty() && body_ns != p => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ))
                }
                Some(p) => p.to_string(),
                None if body_ns.is_empty() => "default".to_string(),
                None => body_ns,
            }
        } else {
            String::new()
        };
        let mut name = name_of(&obj).to_string();
        let gen = meta_str(&obj, "generateName").unwrap_or("").to_string();
        if name.is_empty() && gen.is_empty() {
            return Err(ApiError::invalid(
                kind,
                "",
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required",
            ));
        }
        self.check_namespace(kind, &ns, if name.is_empty() { &gen } else { &name }, true)?;
        if name.is_empty() {
            let base: String = gen.chars().take(58).collect();
            for _ in 0..16 {
                name = format!("{base}{}", meta::name_suffix());
                if self.get(kind, &ns, &name).is_none() {
                    break;
                }
            }
        }
        if self.get(kind, &ns, &name).is_some() {
            return Err(ApiError::already_exists(kind, &name));
        }
        let uid = meta::uuid_v4();
        {
            let m = meta_mut(&mut obj);
            m.insert("name".into(), json!(name));
            if kind.namespaced {
                m.insert("namespace".into(), json!(ns));
            } else {
                m.remove("namespace");
            }
            m.insert("uid".into(), json!(uid));
            m.insert("creationTimestamp".into(), json!(now_rfc3339()));
            m.insert("generation".into(), json!(1));
            for f in [
                "resourceVersion",
                "managedFields",
                "selfLink",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ] {
                m.remove(f);
            }
        }
        obj["kind"] = json!(kind.kind);
        obj["apiVersion"] = json!(kind.api_version());
        defaults::prepare_for_create(kind, &mut obj, &uid);
        defaults::apply(kind, &mut obj);
        if kind.group.is_empty() && kind.plural == "services" {
            self.allocate_cluster_ip(&mut obj);
        }
        if kind.group == "apiextensions.k8s.io" && kind.plural == "customresourcedefinitions" {
            self.crd_added(&obj)?;
        }
        Ok(self.commit(kind, EvType::Added, obj, None))
    }

    fn allocate_cluster_ip(&mut self, obj: &mut Value) {
        let ty = obj.at("/spec/type").and_then(Value::as_str).unwrap_or("");
        if ty == "ExternalName" {
            return;
        }
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        let ip = match spec.get("clusterIP").and_then(Value::as_str) {
            Some(ip) if !ip.is_empty() => ip.to_string(),
            _ => {
                let n = self.next_ip;
                self.next_ip += 1;
                format!("10.96.{}.{}", (n / 250) % 256, n % 250 + 1)
            }
        };
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
        if ip != "None" || !spec.contains_key("ipFamilies") {
            spec.insert("ipFamilies".into(), json!(["IPv4"]));
        }
        spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
    }

    /// Replace an object (PUT on the resource or one of its subresources).
    pub fn update(
        &mut self,
        kind: &Kind,
        ns: &str,
        name: &str,
        new: Value,
        mode: WriteMode,
    ) -> Result<Arc<Value>, ApiError> {
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request is not a JSON object",
            ));
        }
        let old = self
            .get(kind, ns, name)
            .ok_or_else(|| ApiError::not_found(kind, name))?;
        self.check_namespace(kind, ns, name, false)?;
        let body_name = name_of(&new);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = meta_str(&new, "resourceVersion").filter(|s| !s.is_empty()) {
            if rv.parse::<u64>().ok() != Some(rv_of(&old)) {
                return Err(ApiError::conflict(kind, name));
            }
        }
        let old_uid = meta_str(&old, "uid").unwrap_or("").to_string();
        if let Some(uid) = meta_str(&new, "uid").filter(|s| !s.is_empty()) {
            if uid != old_uid {
                return Err(ApiError::precondition(kind, name, "UID", uid, &old_uid));
            }
        }
        let mut result = match mode {
            WriteMode::Main => {
                let mut r = new;
                if has_status_subresource(kind) {
                    match old.get("status") {
                        Some(s) => r["status"] = s.clone(),
                        None => {
                            if let Some(m) = r.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
                if *kind == NAMESPACES {
                    let f = old.at("/spec/finalizers").cloned();
                    set_path(&mut r, &["spec", "finalizers"], f);
                }
                r
            }
            WriteMode::Status => {
                let mut r = (*old).clone();
                r["status"] = new.get("status").cloned().unwrap_or(json!({}));
                r["metadata"] = new.get("metadata").cloned().unwrap_or(json!({}));
                r
            }
            WriteMode::Finalize => {
                let mut r = (*old).clone();
                let f = new.at("/spec/finalizers").cloned();
                set_path(&mut r, &["spec", "finalizers"], f);
                r["metadata"] = new.get("metadata").cloned().unwrap_or(json!({}));
                r
            }
            WriteMode::Approval => {
                let mut r = (*old).clone();
                let c = new.at("/status/conditions").cloned();
                set_path(&mut r, &["status", "conditions"], c);
                r
            }
        };
        if kind.plural == "certificatesigningrequests" && mode != WriteMode::Main {
            condition_times(&mut result, &old);
        }
        // Server-owned metadata comes from the stored object.
        let old_meta = meta::meta(&old).cloned().unwrap_or_default();
        {
            let m = meta_mut(&mut result);
            for f in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old_meta.get(f) {
                    Some(v) => m.insert(f.into(), v.clone()),
                    None => m.remove(f),
                };
            }
            m.remove("managedFields");
            m.remove("selfLink");
            m.insert("resourceVersion".into(), json!(rv_of(&old).to_string()));
        }
        result["kind"] = json!(kind.kind);
        result["apiVersion"] = json!(kind.api_version());
        if is_deleting(&old) {
            let before = finalizers(&old);
            let added: Vec<String> = finalizers(&result)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    kind,
                    name,
                    "metadata.finalizers",
                    "FieldValueForbidden",
                    &format!("Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"),
                ));
            }
        }
        defaults::apply(kind, &mut result);
        if spec_part(&old) != spec_part(&result) {
            let g = old
                .at("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut result).insert("generation".into(), json!(g + 1));
        }
        if result == *old {
            return Ok(old);
        }
        let ns_done = *kind != NAMESPACES
            || result
                .at("/spec/finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
        if is_deleting(&result) && finalizers(&result).is_empty() && ns_done {
            return Ok(self.remove(kind, result, old));
        }
        Ok(self.commit(kind, EvType::Modified, result, Some(old)))
    }

    /// Sets a stored object's `creationTimestamp` (a MODIFIED event): for scenarios about
    /// objects older than a test can wait for. kube-apiserver has no such thing.
    pub fn backdate(
        &mut self,
        kind: &Kind,
        ns: &str,
        name: &str,
        created: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let old = self
            .get(kind, ns, name)
            .ok_or_else(|| ApiError::not_found(kind, name))?;
        let mut r = (*old).clone();
        meta_mut(&mut r).insert("creationTimestamp".into(), json!(created));
        Ok(self.commit(kind, EvType::Modified, r, Some(old)))
    }

    /// Server-side apply as `manager`: a merge patch (that may create the object) in which
    /// the top-level fields this manager applied before and leaves out now are removed.
    pub fn apply(
        &mut self,
        kind: &Kind,
        ns: &str,
        name: &str,
        manager: &str,
        body: &Value,
        mode: WriteMode,
    ) -> Result<Arc<Value>, ApiError> {
        let ns_key = if kind.namespaced { ns } else { "" };
        let object = (*kind, ns_key.to_string(), name.to_string());
        if self.get(kind, ns, name).is_none() {
            self.applied.retain(|(o, _), _| *o != object);
        }
        let fields: BTreeSet<String> = body
            .as_object()
            .map(|m| {
                m.keys()
                    .filter(|k| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let key = (object, manager.to_string());
        let mut body = body.clone();
        if let (Some(before), Some(m)) = (self.applied.get(&key), body.as_object_mut()) {
            for gone in before.difference(&fields) {
                m.insert(gone.clone(), Value::Null);
            }
        }
        let out = self.patch(kind, ns, name, PatchType::Apply, &body, mode)?;
        self.applied.insert(key, fields);
        Ok(out)
    }

    /// PATCH: apply the patch to the stored object, then store it as an update would.
    pub fn patch(
        &mut self,
        kind: &Kind,
        ns: &str,
        name: &str,
        ptype: PatchType,
        body: &Value,
        mode: WriteMode,
    ) -> Result<Arc<Value>, ApiError> {
        if ptype == PatchType::Strategic && self.is_crd_kind(kind) {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        let Some(current) = self.get(kind, ns, name) else {
            if ptype == PatchType::Apply && mode == WriteMode::Main {
                let mut obj = body.clone();
                let m = meta_mut(&mut obj);
                m.insert("name".into(), json!(name));
                if kind.namespaced {
                    m.insert("namespace".into(), json!(ns));
                }
                return self.create(kind, Some(ns).filter(|_| kind.namespaced), obj);
            }
            return Err(ApiError::not_found(kind, name));
        };
        let mut target = (*current).clone();
        let res = match ptype {
            PatchType::Merge | PatchType::Apply => {
                if !body.is_object() {
                    Err("a merge patch must be a JSON object".to_string())
                } else {
                    patch::merge_patch(&mut target, body);
                    Ok(())
                }
            }
            PatchType::Json => patch::json_patch(&mut target, body),
            PatchType::Strategic => {
                if !body.is_object() {
                    Err("a strategic merge patch must be a JSON object".to_string())
                } else {
                    patch::strategic_merge_patch(&mut target, body)
                }
            }
        };
        if let Err(e) = res {
            return Err(ApiError::new(422, "Invalid", e));
        }
        // A patch that does not name a resourceVersion is unconditional.
        let patched_rv = body
            .at("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        if ptype != PatchType::Json {
            let m = meta_mut(&mut target);
            match patched_rv {
                Some(rv) => m.insert("resourceVersion".into(), json!(rv)),
                None => m.insert("resourceVersion".into(), json!(rv_of(&current).to_string())),
            };
        }
        self.update(kind, ns, name, target, mode)
    }
}

/// kube-apiserver's `populateConditionTimestamps` for CSR status and approval writes: a
/// condition without `lastUpdateTime` gets now; one without `lastTransitionTime` gets the
/// stored one of the same type and status, else now.
fn condition_times(csr: &mut Value, old: &Value) {
    let now = now_rfc3339();
    let old_conds = old
        .at("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let Some(conds) = csr
        .at_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let missing = |c: &Value, f: &str| c.get(f).is_none_or(Value::is_null);
    for c in conds.iter_mut().filter(|c| c.is_object()) {
        if missing(c, "lastUpdateTime") {
            c["lastUpdateTime"] = json!(now);
        }
        if missing(c, "lastTransitionTime") {
            let same = old_conds.iter().find(|o| {
                o.get("type") == c.get("type")
                    && o.get("status") == c.get("status")
                    && !missing(o, "lastTransitionTime")
            });
            c["lastTransitionTime"] = same
                .and_then(|o| o.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| json!(now));
        }
    }
}
