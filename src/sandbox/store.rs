//! The object store: objects per kind, one resourceVersion counter, the event history and the
//! watchers. Every write happens under one lock and is handed to the watchers under that same
//! lock, so a watcher sees every event of its kind exactly once and in order.

use crate::obj::At as _;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::SystemTime;

use super::defaults;
use super::meta::{
    self, finalizers, has_status_subresource, is_deleting, meta_mut, meta_str, name_of,
    namespace_of, now_rfc3339, rv_of, set_finalizers, ApiError,
};
use super::patch;
use crate::api::resources::{self, Kind, NAMESPACES};

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type Key = (String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvType {
    Added,
    Modified,
    Deleted,
}

/// One committed change. `old` is the state before it (absent for ADDED).
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: Kind,
    pub typ: EvType,
    pub obj: Arc<Value>,
    pub old: Option<Arc<Value>>,
}

struct Watcher {
    kind: Kind,
    tx: Sender<Arc<Event>>,
}

/// The events to send first and the channel of live events of a new watch.
pub type WatchStart = (Vec<Arc<Event>>, Receiver<Arc<Event>>);

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    Main,
    Status,
    Finalize,
    Approval,
}

/// The parts of `DeleteOptions` the sandbox honours.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub propagation: Option<String>,
    pub orphan_dependents: Option<bool>,
}

/// The outcome of a delete: the object is gone, or it stays with a deletionTimestamp.
#[derive(Debug)]
pub enum Deleted {
    Now(Arc<Value>),
    Pending(Arc<Value>),
}

/// The media types a PATCH may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

pub const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

pub struct State {
    pub rv: u64,
    objects: BTreeMap<Kind, BTreeMap<Key, Arc<Value>>>,
    history: VecDeque<Arc<Event>>,
    /// Every event with a resourceVersion above this one is still in `history`.
    pub compacted: u64,
    window: usize,
    watchers: Vec<Watcher>,
    /// Minted bearer tokens: token -> (user name, expiry).
    pub tokens: HashMap<String, (String, SystemTime)>,
    /// Kinds served because a CustomResourceDefinition defines them.
    pub crd_kinds: Vec<Kind>,
    /// (user, path substring) pairs a SubjectAccessReview denies.
    pub denials: Vec<(String, String)>,
    next_ip: u32,
}

fn key_of(kind: &Kind, obj: &Value) -> Key {
    let ns = if kind.namespaced {
        namespace_of(obj).to_string()
    } else {
        String::new()
    };
    (ns, name_of(obj).to_string())
}

fn obj_key(kind: &Kind, ns: &str, name: &str) -> Key {
    (
        if kind.namespaced {
            ns.to_string()
        } else {
            String::new()
        },
        name.to_string(),
    )
}

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
    pub fn new(window: usize) -> State {
        let mut s = State {
            rv: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted: 0,
            window: window.max(1),
            watchers: Vec::new(),
            tokens: HashMap::new(),
            crd_kinds: Vec::new(),
            denials: Vec::new(),
            next_ip: 1,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            // Creating a namespace into an empty store cannot fail.
            let _ = s.create(&NAMESPACES, None, json!({"metadata": {"name": ns}}));
        }
        s
    }

    /// Every kind currently served: the built-in table plus CRD-defined kinds.
    pub fn served_kinds(&self) -> Vec<Kind> {
        let mut v: Vec<Kind> = resources::ALL.to_vec();
        v.extend(self.crd_kinds.iter().copied());
        v
    }

    pub fn find_kind(&self, group: &str, version: &str, plural: &str) -> Option<Kind> {
        resources::ALL
            .iter()
            .chain(self.crd_kinds.iter())
            .find(|k| k.group == group && k.version == version && k.plural == plural)
            .copied()
    }

    pub fn is_crd_kind(&self, kind: &Kind) -> bool {
        self.crd_kinds.contains(kind)
    }

    pub fn get(&self, kind: &Kind, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(kind)
            .and_then(|m| m.get(&obj_key(kind, ns, name)))
            .cloned()
    }

    /// Objects of a kind in key order, optionally limited to one namespace.
    pub fn iter_kind<'a>(
        &'a self,
        kind: &Kind,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        self.objects
            .get(kind)
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(move |((n, _), _)| ns.is_none_or(|x| x == n))
            .map(|(_, v)| v)
    }

    /// The objects of a kind as they were at resourceVersion `at` (rebuilt from the history).
    pub fn snapshot(&self, kind: &Kind, at: u64) -> Result<BTreeMap<Key, Arc<Value>>, ApiError> {
        let mut map = self.objects.get(kind).cloned().unwrap_or_default();
        if at >= self.rv {
            return Ok(map);
        }
        if at < self.compacted {
            return Err(ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. \
                 You can start a new list without the continue parameter.",
            ));
        }
        for ev in self.history.iter().rev() {
            if ev.rv <= at {
                break;
            }
            if ev.kind != *kind {
                continue;
            }
            let key = key_of(kind, &ev.obj);
            match (&ev.typ, &ev.old) {
                (EvType::Added, _) => {
                    map.remove(&key);
                }
                (_, Some(old)) => {
                    map.insert(key, old.clone());
                }
                (_, None) => {}
            }
        }
        Ok(map)
    }

    fn commit(
        &mut self,
        kind: &Kind,
        typ: EvType,
        mut obj: Value,
        old: Option<Arc<Value>>,
    ) -> Arc<Value> {
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let obj = Arc::new(obj);
        let key = key_of(kind, &obj);
        let objs = self.objects.entry(*kind).or_default();
        if typ == EvType::Deleted {
            objs.remove(&key);
        } else {
            objs.insert(key, obj.clone());
        }
        let ev = Arc::new(Event {
            rv: self.rv,
            kind: *kind,
            typ,
            obj: obj.clone(),
            old,
        });
        self.history.push_back(ev.clone());
        while self.history.len() > self.window {
            if let Some(e) = self.history.pop_front() {
                self.compacted = e.rv;
            }
        }
        self.watchers
            .retain(|w| w.kind != *kind || w.tx.send(ev.clone()).is_ok());
        obj
    }

    /// Forget the history: every resourceVersion below the current one becomes too old.
    pub fn expire_history(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// Close every watch (their channels disconnect).
    pub fn drop_watchers(&mut self) {
        self.watchers.clear();
    }

    /// Start a watch. `from = None` means "send the current objects as ADDED first"; otherwise
    /// the events after `from` are replayed from the history (410 when they are gone).
    pub fn watch(
        &mut self,
        kind: &Kind,
        ns: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let initial: Vec<Arc<Event>> = match from {
            None => self
                .iter_kind(kind, ns)
                .map(|o| {
                    Arc::new(Event {
                        rv: rv_of(o),
                        kind: *kind,
                        typ: EvType::Added,
                        obj: o.clone(),
                        old: None,
                    })
                })
                .collect(),
            Some(rv) => {
                if rv < self.compacted {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        self.compacted
                    )));
                }
                self.history
                    .iter()
                    .filter(|e| e.rv > rv && e.kind == *kind)
                    .cloned()
                    .collect()
            }
        };
        let (tx, rx) = channel();
        self.watchers.push(Watcher { kind: *kind, tx });
        Ok((initial, rx))
    }

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

    fn remove(&mut self, kind: &Kind, last: Value, old: Arc<Value>) -> Arc<Value> {
        if kind.group == "apiextensions.k8s.io" && kind.plural == "customresourcedefinitions" {
            self.crd_removed(&last);
        }
        self.commit(kind, EvType::Deleted, last, Some(old))
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

    pub fn delete(
        &mut self,
        kind: &Kind,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Deleted, ApiError> {
        let old = self
            .get(kind, ns, name)
            .ok_or_else(|| ApiError::not_found(kind, name))?;
        let old_uid = meta_str(&old, "uid").unwrap_or("");
        if let Some(uid) = opts.uid.as_deref() {
            if uid != old_uid {
                return Err(ApiError::precondition(kind, name, "UID", uid, old_uid));
            }
        }
        if let Some(rv) = opts.resource_version.as_deref() {
            let have = rv_of(&old).to_string();
            if rv != have {
                return Err(ApiError::precondition(
                    kind,
                    name,
                    "ResourceVersion",
                    rv,
                    &have,
                ));
            }
        }
        let mut obj = (*old).clone();
        if *kind == NAMESPACES {
            if IMMORTAL_NAMESPACES.contains(&name) {
                return Err(ApiError::forbidden(
                    kind,
                    name,
                    "this namespace may not be deleted",
                ));
            }
            if !is_deleting(&obj) {
                meta_mut(&mut obj).insert("deletionTimestamp".into(), json!(now_rfc3339()));
            }
            set_path(&mut obj, &["status", "phase"], Some(json!("Terminating")));
            let spec_empty = obj
                .at("/spec/finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
            if spec_empty && finalizers(&obj).is_empty() {
                return Ok(Deleted::Now(self.remove(kind, obj, old)));
            }
            if obj == *old {
                return Ok(Deleted::Pending(old));
            }
            return Ok(Deleted::Pending(self.commit(
                kind,
                EvType::Modified,
                obj,
                Some(old),
            )));
        }
        let policy = match (opts.propagation.as_deref(), opts.orphan_dependents) {
            (Some(p @ ("Orphan" | "Foreground" | "Background")), _) => Some(p),
            (Some(other), _) => {
                return Err(ApiError::invalid(
                    kind,
                    name,
                    "propagationPolicy",
                    "FieldValueNotSupported",
                    &format!("Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""),
                ))
            }
            (None, Some(true)) => Some("Orphan"),
            (None, Some(false)) => Some("Background"),
            (None, None) => None,
        };
        let mut fins = finalizers(&obj);
        let add = |fins: &mut Vec<String>, f: &str| {
            if !fins.iter().any(|x| x == f) {
                fins.push(f.to_string());
            }
        };
        match policy {
            Some("Orphan") => {
                fins.retain(|f| f != "foregroundDeletion");
                add(&mut fins, "orphan");
            }
            Some("Foreground") => {
                fins.retain(|f| f != "orphan");
                add(&mut fins, "foregroundDeletion");
            }
            Some(_) => fins.retain(|f| f != "orphan" && f != "foregroundDeletion"),
            None => {
                if !is_deleting(&obj)
                    && meta::default_propagation(kind) == "Orphan"
                    && !fins.iter().any(|f| f == "foregroundDeletion")
                {
                    add(&mut fins, "orphan");
                }
            }
        }
        set_finalizers(&mut obj, &fins);
        if fins.is_empty() {
            return Ok(Deleted::Now(self.remove(kind, obj, old)));
        }
        if !is_deleting(&obj) {
            let g = obj
                .at("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let m = meta_mut(&mut obj);
            m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            m.insert("generation".into(), json!(g + 1));
        }
        if obj == *old {
            return Ok(Deleted::Pending(old));
        }
        Ok(Deleted::Pending(self.commit(
            kind,
            EvType::Modified,
            obj,
            Some(old),
        )))
    }

    // ---- CustomResourceDefinitions ----

    fn crd_added(&mut self, crd: &Value) -> Result<(), ApiError> {
        let group = crd.at("/spec/group").and_then(Value::as_str).unwrap_or("");
        let plural = crd
            .at("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind_name = crd
            .at("/spec/names/kind")
            .and_then(Value::as_str)
            .unwrap_or("");
        let namespaced = crd.at("/spec/scope").and_then(Value::as_str) != Some("Cluster");
        if group.is_empty() || plural.is_empty() || kind_name.is_empty() {
            return Err(ApiError::new(
                422,
                "Invalid",
                "CustomResourceDefinition needs spec.group, spec.names.plural and spec.names.kind",
            ));
        }
        let versions: Vec<String> = crd
            .at("/spec/versions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
                    .filter_map(|v| v.get("name").and_then(Value::as_str).map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        for v in versions {
            if self.find_kind(group, &v, plural).is_some() {
                continue;
            }
            // Kind names are 'static in the kind table; a served CRD lives for the rest of the
            // process, so its few strings are leaked on purpose.
            let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
            self.crd_kinds.push(Kind::new(
                leak(group),
                leak(&v),
                leak(kind_name),
                leak(plural),
                namespaced,
            ));
        }
        Ok(())
    }

    fn crd_removed(&mut self, crd: &Value) {
        let group = crd.at("/spec/group").and_then(Value::as_str).unwrap_or("");
        let plural = crd
            .at("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or("");
        let gone: Vec<Kind> = self
            .crd_kinds
            .iter()
            .filter(|k| k.group == group && k.plural == plural)
            .copied()
            .collect();
        self.crd_kinds.retain(|k| !gone.contains(k));
        for k in gone {
            self.objects.remove(&k);
            self.watchers.retain(|w| w.kind != k);
        }
    }
}

/// Set (or with `None` remove) the value at a path of object keys, creating objects on the way
/// and replacing non-objects in between.
pub fn set_path(obj: &mut Value, path: &[&str], v: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    if !obj.is_object() {
        return;
    }
    let mut cur = obj;
    for p in parents {
        if !cur.get(*p).is_some_and(Value::is_object) {
            if v.is_none() {
                return;
            }
            cur[*p] = json!({});
        }
        cur = &mut cur[*p];
    }
    match (v, cur.as_object_mut()) {
        (Some(v), Some(m)) => {
            m.insert((*last).to_string(), v);
        }
        (None, Some(m)) => {
            m.remove(*last);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::{CONFIGMAPS, DEPLOYMENTS};

    fn cm(name: &str, v: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default"}, "data": {"k": v}})
    }

    fn names(m: &BTreeMap<Key, Arc<Value>>) -> Vec<String> {
        m.values()
            .map(|o| format!("{}={}", name_of(o), o["data"]["k"].as_str().unwrap_or("")))
            .collect()
    }

    #[test]
    fn snapshots_rebuild_earlier_states() {
        let mut s = State::new(100);
        s.create(&CONFIGMAPS, None, cm("a", "1")).unwrap();
        let at1 = s.rv;
        s.create(&CONFIGMAPS, None, cm("b", "1")).unwrap();
        s.update(&CONFIGMAPS, "default", "a", cm("a", "2"), WriteMode::Main)
            .unwrap();
        s.delete(&CONFIGMAPS, "default", "b", &DeleteOpts::default())
            .unwrap();
        assert_eq!(names(&s.snapshot(&CONFIGMAPS, at1).unwrap()), ["a=1"]);
        assert_eq!(
            names(&s.snapshot(&CONFIGMAPS, at1 + 2).unwrap()),
            ["a=2", "b=1"]
        );
        assert_eq!(names(&s.snapshot(&CONFIGMAPS, s.rv).unwrap()), ["a=2"]);
        s.expire_history();
        assert_eq!(s.snapshot(&CONFIGMAPS, at1).unwrap_err().code, 410);
    }

    #[test]
    fn history_window_and_watch_replay() {
        let mut s = State::new(3);
        let start = s.rv;
        for i in 0..5 {
            s.create(&CONFIGMAPS, None, cm(&format!("c{i}"), "x"))
                .unwrap();
        }
        let err = s.watch(&CONFIGMAPS, None, Some(start)).unwrap_err();
        assert_eq!(err.code, 410);
        assert_eq!(
            err.message,
            format!("too old resource version: {start} ({})", s.compacted)
        );
        let (replay, rx) = s.watch(&CONFIGMAPS, None, Some(s.rv - 2)).unwrap();
        assert_eq!(replay.len(), 2);
        s.create(&CONFIGMAPS, None, cm("live", "x")).unwrap();
        let ev = rx.try_recv().unwrap();
        assert_eq!(ev.typ, EvType::Added);
        // Other kinds do not reach this watcher.
        s.create(&DEPLOYMENTS, None, json!({"metadata": {"name": "d"}}))
            .unwrap();
        assert!(rx.try_recv().is_err());
        s.drop_watchers();
        assert!(matches!(
            rx.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Disconnected)
        ));
    }

    #[test]
    fn noop_update_keeps_the_resource_version() {
        let mut s = State::new(10);
        let a = s.create(&CONFIGMAPS, None, cm("a", "1")).unwrap();
        let again = s
            .update(&CONFIGMAPS, "default", "a", (*a).clone(), WriteMode::Main)
            .unwrap();
        assert_eq!(rv_of(&again), rv_of(&a));
        let mut no_rv = (*a).clone();
        no_rv["metadata"]["managedFields"] = json!([{"manager": "x"}]);
        let same = s
            .update(&CONFIGMAPS, "default", "a", no_rv, WriteMode::Main)
            .unwrap();
        assert!(same["metadata"].get("managedFields").is_none());
        assert_eq!(rv_of(&same), rv_of(&a));
    }
}
