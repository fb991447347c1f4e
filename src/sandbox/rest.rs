//! Routing and the REST verbs.

use crate::obj::At as _;
use base64::Engine as _;
use serde_json::{json, Value};
use std::io::Write;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::discovery;
use super::http::Request;
use super::meta::{
    self, has_scale_subresource, has_status_subresource, is_review, name_of, namespace_of, ApiError,
};
use super::selector::{label_selector_string, FieldSelector, LabelSelector};
use super::store::{DeleteOpts, Deleted, Event, PatchType, WriteMode};
use super::Shared;
use crate::api::resources::Kind;

/// What a handler answers.
pub enum Reply {
    Json(u16, Value),
    Bytes(u16, &'static str, Vec<u8>),
    Watch(Box<WatchPlan>),
}

impl From<ApiError> for Reply {
    fn from(e: ApiError) -> Reply {
        Reply::Json(e.code, e.to_status())
    }
}

/// Everything a watch stream needs once the store lock is released.
pub struct WatchPlan {
    pub kind: Kind,
    pub ns: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub initial: Vec<Arc<Event>>,
    pub rx: Option<Receiver<Arc<Event>>>,
    /// A `Status` to send as the only (ERROR) event.
    pub error: Option<Value>,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
    pub partial: bool,
}

impl WatchPlan {
    fn matches(&self, obj: &Value) -> bool {
        (!self.kind.namespaced || self.ns.as_deref().is_none_or(|ns| namespace_of(obj) == ns))
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }

    /// The event a watcher should see for a store event (selectors can turn a MODIFIED into an
    /// ADDED or a DELETED), if any.
    pub fn translate(&self, ev: &Event) -> Option<&'static str> {
        use super::store::EvType::*;
        match ev.typ {
            Added => self.matches(&ev.obj).then_some("ADDED"),
            Modified => {
                let was = ev.old.as_deref().is_some_and(|o| self.matches(o));
                match (was, self.matches(&ev.obj)) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
            Deleted => self
                .matches(ev.old.as_deref().unwrap_or(&ev.obj))
                .then_some("DELETED"),
        }
    }

    /// One serialized watch event line.
    pub fn encode(&self, typ: &str, obj: &Value) -> Vec<u8> {
        let mut out = format!("{{\"type\":\"{typ}\",\"object\":").into_bytes();
        if self.partial {
            let _ = serde_json::to_writer(&mut out, &partial(obj));
        } else {
            let _ = serde_json::to_writer(&mut out, obj);
        }
        out.extend_from_slice(b"}\n");
        out
    }

    pub fn bookmark(&self, rv: u64) -> Vec<u8> {
        let (kind, api_version) = if self.partial {
            (
                "PartialObjectMetadata".to_string(),
                "meta.k8s.io/v1".to_string(),
            )
        } else {
            (self.kind.kind.to_string(), self.kind.api_version())
        };
        let obj = json!({"kind": kind, "apiVersion": api_version,
                         "metadata": {"resourceVersion": rv.to_string()}});
        let mut out = b"{\"type\":\"BOOKMARK\",\"object\":".to_vec();
        let _ = serde_json::to_writer(&mut out, &obj);
        out.extend_from_slice(b"}\n");
        out
    }
}

fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

fn not_found_path() -> Reply {
    Reply::Json(
        404,
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
        .to_status(),
    )
}

fn method_not_allowed(method: &str) -> Reply {
    ApiError::new(
        405,
        "MethodNotAllowed",
        format!("the server does not allow this method on the requested resource ({method})"),
    )
    .into()
}

fn parse_body(req: &Request) -> Result<Value, ApiError> {
    if req.body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    serde_json::from_slice(&req.body).map_err(|e| {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    })
}

/// Which metadata-only form, if any, the Accept header asks for.
fn accept_partial(req: &Request) -> (bool, bool) {
    let a = req.header("accept").unwrap_or("");
    (
        a.contains("as=PartialObjectMetadataList"),
        a.contains("as=PartialObjectMetadata;") || a.ends_with("as=PartialObjectMetadata"),
    )
}

/// Dispatch one request (authentication, faults and pauses are handled by the caller).
pub fn handle(shared: &Shared, req: &Request) -> Reply {
    let segs: Vec<&str> = req.path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        [] => Reply::Json(
            200,
            json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]}),
        ),
        ["healthz" | "readyz" | "livez"] => {
            Reply::Bytes(200, "text/plain; charset=utf-8", b"ok".to_vec())
        }
        ["version"] => Reply::Json(
            200,
            json!({"major": "1", "minor": "28", "gitVersion": "v1.28.0-sandbox",
                   "gitCommit": "0000000000000000000000000000000000000000",
                   "gitTreeState": "clean", "buildDate": "2023-08-15T00:00:00Z",
                   "goVersion": "go1.20", "compiler": "gc", "platform": "linux/amd64"}),
        ),
        ["api"] => Reply::Json(200, discovery::api_versions(shared.port())),
        ["apis"] => Reply::Json(
            200,
            discovery::group_list(&shared.lock_state().served_kinds()),
        ),
        ["api", "v1"] => {
            let kinds: Vec<Kind> = shared
                .lock_state()
                .served_kinds()
                .into_iter()
                .filter(|k| k.group.is_empty())
                .collect();
            Reply::Json(200, discovery::resource_list("v1", &kinds))
        }
        ["apis", g] => {
            let kinds = shared.lock_state().served_kinds();
            if !kinds.iter().any(|k| k.group == *g) {
                return not_found_path();
            }
            let mut v = discovery::api_group(g, &kinds);
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            Reply::Json(200, v)
        }
        ["apis", g, v] => {
            let kinds: Vec<Kind> = shared
                .lock_state()
                .served_kinds()
                .into_iter()
                .filter(|k| k.group == *g && k.version == *v)
                .collect();
            if kinds.is_empty() {
                return not_found_path();
            }
            Reply::Json(200, discovery::resource_list(&format!("{g}/{v}"), &kinds))
        }
        ["api", "v1", rest @ ..] => resource(shared, req, "", "v1", rest),
        ["apis", g, v, rest @ ..] => resource(shared, req, g, v, rest),
        _ => not_found_path(),
    }
}

fn resource(shared: &Shared, req: &Request, group: &str, version: &str, rest: &[&str]) -> Reply {
    let (ns, plural, name, sub) = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if !matches!(*plural, "status" | "finalize") && tail.len() <= 2 =>
        {
            (
                Some(*ns),
                *plural,
                tail.first().copied(),
                tail.get(1).copied(),
            )
        }
        [plural, tail @ ..] if tail.len() <= 2 => {
            (None, *plural, tail.first().copied(), tail.get(1).copied())
        }
        _ => return not_found_path(),
    };
    let Some(kind) = shared.lock_state().find_kind(group, version, plural) else {
        return not_found_path();
    };
    if (ns.is_some() && !kind.namespaced) || (kind.namespaced && ns.is_none() && name.is_some()) {
        return not_found_path();
    }
    if req.param("dryRun").is_some_and(|v| !v.is_empty()) {
        return ApiError::bad_request("dryRun is not supported by the sandbox").into();
    }
    let ns_str = ns.unwrap_or("");
    let m = req.method.as_str();
    match (name, sub) {
        (None, _) => match m {
            "GET" => {
                let watch = matches!(req.param("watch"), Some("true" | "1"));
                if watch {
                    start_watch(shared, req, kind, ns)
                } else {
                    list(shared, req, kind, ns)
                }
            }
            "POST" if is_review(&kind) => review(shared, req, kind),
            "POST" => match parse_body(req) {
                Ok(body) => match shared.lock_state().create(&kind, ns, body) {
                    Ok(o) => Reply::Json(201, (*o).clone()),
                    Err(e) => e.into(),
                },
                Err(e) => e.into(),
            },
            "DELETE" if kind.plural != "namespaces" => delete_collection(shared, req, kind, ns),
            _ => method_not_allowed(m),
        },
        (Some(name), None) => match m {
            "GET" => get(shared, req, kind, ns_str, name),
            "PUT" => write(shared, req, kind, ns_str, name, WriteMode::Main, false),
            "PATCH" => write(shared, req, kind, ns_str, name, WriteMode::Main, true),
            "DELETE" => delete(shared, req, kind, ns_str, name),
            _ => method_not_allowed(m),
        },
        (Some(name), Some("status")) if has_status_subresource(&kind) => match m {
            "GET" => get(shared, req, kind, ns_str, name),
            "PUT" => write(shared, req, kind, ns_str, name, WriteMode::Status, false),
            "PATCH" => write(shared, req, kind, ns_str, name, WriteMode::Status, true),
            _ => method_not_allowed(m),
        },
        (Some(name), Some("finalize")) if kind.plural == "namespaces" && kind.group.is_empty() => {
            match m {
                "PUT" => write(shared, req, kind, ns_str, name, WriteMode::Finalize, false),
                _ => method_not_allowed(m),
            }
        }
        (Some(name), Some("approval")) if kind.plural == "certificatesigningrequests" => match m {
            "GET" => get(shared, req, kind, ns_str, name),
            "PUT" => write(shared, req, kind, ns_str, name, WriteMode::Approval, false),
            "PATCH" => write(shared, req, kind, ns_str, name, WriteMode::Approval, true),
            _ => method_not_allowed(m),
        },
        (Some(name), Some("token"))
            if kind.plural == "serviceaccounts" && kind.group.is_empty() =>
        {
            match m {
                "POST" => token_request(shared, req, kind, ns_str, name),
                _ => method_not_allowed(m),
            }
        }
        (Some(name), Some("scale")) if has_scale_subresource(&kind) => match m {
            "GET" => match shared.lock_state().get(&kind, ns_str, name) {
                Some(o) => Reply::Json(200, scale_of(&kind, &o)),
                None => ApiError::not_found(&kind, name).into(),
            },
            "PUT" | "PATCH" => scale_write(shared, req, kind, ns_str, name, m == "PATCH"),
            _ => method_not_allowed(m),
        },
        _ => not_found_path(),
    }
}

fn get(shared: &Shared, req: &Request, kind: Kind, ns: &str, name: &str) -> Reply {
    match shared.lock_state().get(&kind, ns, name) {
        Some(o) => {
            if accept_partial(req).1 {
                Reply::Json(200, partial(&o))
            } else {
                Reply::Json(200, (*o).clone())
            }
        }
        None => ApiError::not_found(&kind, name).into(),
    }
}

fn selectors(req: &Request, kind: &Kind) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let ls_text = req.param("labelSelector").unwrap_or("");
    let fs_text = req.param("fieldSelector").unwrap_or("");
    let ls = LabelSelector::parse(ls_text).map_err(ApiError::bad_request)?;
    let fs = FieldSelector::parse(fs_text, kind).map_err(|e| {
        let gv = if kind.group.is_empty() {
            format!("/{}", kind.version)
        } else {
            format!("{}/{}", kind.group, kind.version)
        };
        ApiError::bad_request(format!(
            "Unable to find \"{gv}, Resource={}\" that match label selector \"{ls_text}\", field selector \"{fs_text}\": {e}",
            kind.plural
        ))
    })?;
    Ok((ls, fs))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    v: String,
    rv: u64,
    start: (String, String),
}

fn list(shared: &Shared, req: &Request, kind: Kind, ns: Option<&str>) -> Reply {
    let (ls, fs) = match selectors(req, &kind) {
        Ok(s) => s,
        Err(e) => return e.into(),
    };
    let mut limit: usize = match req.param("limit").unwrap_or("").trim() {
        "" => 0,
        t => match t.parse::<i64>() {
            Ok(n) if n > 0 => n as usize,
            Ok(_) => 0,
            Err(_) => return ApiError::bad_request(format!("invalid limit {t:?}")).into(),
        },
    };
    let cont = req.param("continue").unwrap_or("");
    let token = if cont.is_empty() {
        None
    } else {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(cont)
            .ok()
            .and_then(|b| serde_json::from_slice::<ContinueToken>(&b).ok());
        match decoded {
            Some(t) => Some(t),
            None => {
                return ApiError::bad_request("continue key is not valid: malformed token").into()
            }
        }
    };
    if token.is_none() && req.param("resourceVersion") == Some("0") {
        // Served from the watch cache upstream, which ignores the limit.
        limit = 0;
    }
    let st = shared.lock_state();
    let at = token.as_ref().map(|t| t.rv).unwrap_or(st.rv);
    let snapshot = match st.snapshot(&kind, at) {
        Ok(s) => s,
        Err(e) => return e.into(),
    };
    drop(st);
    let matches = |o: &Value| {
        (!kind.namespaced || ns.is_none_or(|n| namespace_of(o) == n))
            && ls.matches(o)
            && fs.matches(o)
    };
    let start = token.map(|t| t.start);
    let mut iter = snapshot
        .iter()
        .filter(|(k, _)| start.as_ref().is_none_or(|s| *k > s))
        .filter(|(_, o)| matches(o));
    let mut items: Vec<&Arc<Value>> = Vec::new();
    let mut last_key = None;
    let mut more = false;
    for (k, o) in iter.by_ref() {
        if limit > 0 && items.len() == limit {
            more = true;
            break;
        }
        items.push(o);
        last_key = Some(k.clone());
    }
    let mut list_meta = json!({"resourceVersion": at.to_string()});
    if more {
        let remaining = 1 + iter.count();
        if let Some(k) = last_key {
            let t = ContinueToken {
                v: "meta.k8s.io/v1".into(),
                rv: at,
                start: k,
            };
            let raw = serde_json::to_vec(&t).unwrap_or_default();
            list_meta["continue"] = json!(base64::engine::general_purpose::STANDARD.encode(raw));
            if ls.is_empty() && fs.is_empty() {
                list_meta["remainingItemCount"] = json!(remaining);
            }
        }
    }
    let (partial_list, _) = accept_partial(req);
    let mut out = Vec::with_capacity(256 + items.len() * 512);
    let (lk, lav) = if partial_list {
        (
            "PartialObjectMetadataList".to_string(),
            "meta.k8s.io/v1".to_string(),
        )
    } else {
        (format!("{}List", kind.kind), kind.api_version())
    };
    let _ = write!(
        out,
        "{{\"kind\":\"{lk}\",\"apiVersion\":\"{lav}\",\"metadata\":"
    );
    let _ = serde_json::to_writer(&mut out, &list_meta);
    out.extend_from_slice(b",\"items\":[");
    let typed = !shared.lock_state().is_crd_kind(&kind);
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if partial_list {
            let _ = serde_json::to_writer(&mut out, &partial(o));
        } else if typed {
            // Built-in kinds list their items without kind and apiVersion, as upstream does.
            write_without_type(&mut out, o);
        } else {
            let _ = serde_json::to_writer(&mut out, &***o);
        }
    }
    out.extend_from_slice(b"]}");
    Reply::Bytes(200, "application/json", out)
}

fn write_without_type(out: &mut Vec<u8>, o: &Value) {
    let Some(m) = o.as_object() else {
        let _ = serde_json::to_writer(&mut *out, o);
        return;
    };
    out.push(b'{');
    let mut first = true;
    for (k, v) in m {
        if k == "kind" || k == "apiVersion" {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        let _ = serde_json::to_writer(&mut *out, k);
        out.push(b':');
        let _ = serde_json::to_writer(&mut *out, v);
    }
    out.push(b'}');
}

fn start_watch(shared: &Shared, req: &Request, kind: Kind, ns: Option<&str>) -> Reply {
    let (labels, fields) = match selectors(req, &kind) {
        Ok(s) => s,
        Err(e) => return e.into(),
    };
    let from = match req.param("resourceVersion").unwrap_or("") {
        "" | "0" => None,
        t => match t.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return ApiError::bad_request(format!("invalid resource version: {t:?}")).into()
            }
        },
    };
    let timeout = match req.param("timeoutSeconds").unwrap_or("") {
        "" | "0" => None,
        t => match t.parse::<u64>() {
            Ok(n) => Some(Duration::from_secs(n)),
            Err(_) => return ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")).into(),
        },
    };
    let (partial_list, partial_obj) = accept_partial(req);
    let mut plan = WatchPlan {
        kind,
        ns: ns.map(str::to_string),
        labels,
        fields,
        initial: Vec::new(),
        rx: None,
        error: None,
        bookmarks: matches!(req.param("allowWatchBookmarks"), Some("true" | "1")),
        timeout,
        partial: partial_list || partial_obj,
    };
    match shared.lock_state().watch(&kind, ns, from) {
        Ok((initial, rx)) => {
            plan.initial = initial;
            plan.rx = Some(rx);
        }
        Err(e) => plan.error = Some(e.to_status()),
    }
    Reply::Watch(Box::new(plan))
}

fn write(
    shared: &Shared,
    req: &Request,
    kind: Kind,
    ns: &str,
    name: &str,
    mode: WriteMode,
    is_patch: bool,
) -> Reply {
    let body = match parse_body(req) {
        Ok(b) => b,
        Err(e) => return e.into(),
    };
    let mut st = shared.lock_state();
    let res = if is_patch {
        let ct = req.header("content-type").unwrap_or("");
        let Some(pt) = PatchType::from_content_type(ct) else {
            return ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json ({ct})"),
            )
            .into();
        };
        let creates = pt == PatchType::Apply && st.get(&kind, ns, name).is_none();
        return match st.patch(&kind, ns, name, pt, &body, mode) {
            Ok(o) => Reply::Json(if creates { 201 } else { 200 }, (*o).clone()),
            Err(e) => e.into(),
        };
    } else {
        if kind.namespaced {
            let body_ns = namespace_of(&body);
            if !body_ns.is_empty() && body_ns != ns {
                return ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
                .into();
            }
        }
        st.update(&kind, ns, name, body, mode)
    };
    match res {
        Ok(o) => Reply::Json(200, (*o).clone()),
        Err(e) => e.into(),
    }
}

fn delete_opts(req: &Request) -> Result<DeleteOpts, ApiError> {
    let mut o = DeleteOpts::default();
    if !req.body.is_empty() {
        let b: Value = serde_json::from_slice(&req.body).map_err(|e| {
            ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
        })?;
        let s = |p: &str| b.at(p).and_then(Value::as_str).map(str::to_string);
        o.uid = s("/preconditions/uid");
        o.resource_version = s("/preconditions/resourceVersion");
        o.propagation = s("/propagationPolicy");
        o.orphan_dependents = b.get("orphanDependents").and_then(Value::as_bool);
    }
    if let Some(p) = req.param("propagationPolicy") {
        o.propagation = Some(p.to_string());
    }
    if let Some(p) = req.param("orphanDependents") {
        o.orphan_dependents = Some(p == "true");
    }
    Ok(o)
}

fn delete(shared: &Shared, req: &Request, kind: Kind, ns: &str, name: &str) -> Reply {
    let opts = match delete_opts(req) {
        Ok(o) => o,
        Err(e) => return e.into(),
    };
    let res = shared.lock_state().delete(&kind, ns, name, &opts);
    match res {
        Ok(Deleted::Pending(o)) => Reply::Json(200, (*o).clone()),
        Ok(Deleted::Now(o)) => {
            if kind.plural == "pods" || kind.plural == "namespaces" {
                Reply::Json(200, (*o).clone())
            } else {
                let uid = meta::meta_str(&o, "uid").unwrap_or("");
                Reply::Json(200, meta::success_status(&kind, name_of(&o), uid))
            }
        }
        Err(e) => e.into(),
    }
}

fn delete_collection(shared: &Shared, req: &Request, kind: Kind, ns: Option<&str>) -> Reply {
    let (ls, fs) = match selectors(req, &kind) {
        Ok(s) => s,
        Err(e) => return e.into(),
    };
    let opts = match delete_opts(req) {
        Ok(o) => o,
        Err(e) => return e.into(),
    };
    let mut st = shared.lock_state();
    let targets: Vec<(String, String)> = st
        .iter_kind(&kind, ns)
        .filter(|o| ls.matches(o) && fs.matches(o))
        .map(|o| (namespace_of(o).to_string(), name_of(o).to_string()))
        .collect();
    let mut items = Vec::new();
    for (n, name) in targets {
        match st.delete(&kind, &n, &name, &opts) {
            Ok(Deleted::Now(o)) | Ok(Deleted::Pending(o)) => items.push((*o).clone()),
            Err(_) => {}
        }
    }
    Reply::Json(
        200,
        json!({"kind": format!("{}List", kind.kind), "apiVersion": kind.api_version(),
               "metadata": {"resourceVersion": st.rv.to_string()}, "items": items}),
    )
}

fn token_request(shared: &Shared, req: &Request, kind: Kind, ns: &str, name: &str) -> Reply {
    let body: Value = if req.body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&req.body) {
            Ok(b) => b,
            Err(e) => {
                return ApiError::bad_request(format!(
                    "the body of the request could not be decoded: {e}"
                ))
                .into()
            }
        }
    };
    let secs = body
        .at("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    let tr_kind = Kind::new(
        "authentication.k8s.io",
        "v1",
        "TokenRequest",
        "tokenrequests",
        true,
    );
    if secs < 600 {
        return ApiError::invalid(
            &tr_kind,
            name,
            "spec.expirationSeconds",
            "FieldValueInvalid",
            &format!("Invalid value: {secs}: may not specify a duration less than 10 minutes"),
        )
        .into();
    }
    let mut st = shared.lock_state();
    let Some(sa) = st.get(&kind, ns, name) else {
        return ApiError::not_found(&kind, name).into();
    };
    let token = format!("sbx.{}", meta::random_token(48));
    let expiry = SystemTime::now() + Duration::from_secs(secs as u64);
    let user = format!("system:serviceaccount:{ns}:{name}");
    st.tokens.insert(token.clone(), (user, expiry));
    let audiences = body
        .at("/spec/audiences")
        .cloned()
        .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
        .unwrap_or(json!(["https://kubernetes.default.svc.cluster.local"]));
    Reply::Json(
        201,
        json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": null,
                         "uid": meta::meta_str(&sa, "uid")},
            "spec": {"audiences": audiences, "expirationSeconds": secs,
                     "boundObjectRef": body.at("/spec/boundObjectRef").cloned()},
            "status": {"token": token, "expirationTimestamp": meta::format_time(expiry)},
        }),
    )
}

fn groups_of(user: &str) -> Value {
    if let Some(rest) = user.strip_prefix("system:serviceaccount:") {
        let ns = rest.split(':').next().unwrap_or("");
        json!([
            "system:serviceaccounts",
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated"
        ])
    } else {
        json!(["system:masters", "system:authenticated"])
    }
}

fn review(shared: &Shared, req: &Request, kind: Kind) -> Reply {
    let mut body = match parse_body(req) {
        Ok(b) => b,
        Err(e) => return e.into(),
    };
    if !body.is_object() {
        return ApiError::bad_request("the body of the request is not a JSON object").into();
    }
    body["kind"] = json!(kind.kind);
    body["apiVersion"] = json!(kind.api_version());
    if kind.plural == "tokenreviews" {
        let token = body.at("/spec/token").and_then(Value::as_str).unwrap_or("");
        body["status"] = match shared.authenticate(token) {
            Some(user) => json!({
                "authenticated": true,
                "user": {"username": user, "groups": groups_of(&user)},
                "audiences": body.at("/spec/audiences").cloned()
                    .unwrap_or(json!(["https://kubernetes.default.svc.cluster.local"])),
            }),
            None => json!({"authenticated": false, "user": {}}),
        };
    } else {
        let user = body
            .at("/spec/user")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let path = if let Some(ra) = body.at("/spec/resourceAttributes") {
            let s = |k: &str| ra.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let mut p = if s("group").is_empty() {
                format!(
                    "/api/{}",
                    if s("version").is_empty() {
                        "v1".into()
                    } else {
                        s("version")
                    }
                )
            } else {
                format!(
                    "/apis/{}/{}",
                    s("group"),
                    if s("version").is_empty() {
                        "v1".into()
                    } else {
                        s("version")
                    }
                )
            };
            if !s("namespace").is_empty() {
                p.push_str(&format!("/namespaces/{}", s("namespace")));
            }
            p.push_str(&format!("/{}", s("resource")));
            if !s("name").is_empty() {
                p.push_str(&format!("/{}", s("name")));
            }
            if !s("subresource").is_empty() {
                p.push_str(&format!("/{}", s("subresource")));
            }
            p
        } else {
            body.at("/spec/nonResourceAttributes/path")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let denied = shared
            .lock_state()
            .denials
            .iter()
            .any(|(u, p)| (u == "*" || *u == user) && path.contains(p.as_str()));
        body["status"] = if denied {
            json!({"allowed": false, "denied": true, "reason": "denied by the sandbox's deny rules"})
        } else {
            json!({"allowed": true, "reason": "the sandbox allows everything not denied"})
        };
    }
    if body.get("metadata").is_none() {
        body["metadata"] = json!({"creationTimestamp": null});
    }
    Reply::Json(201, body)
}

/// The `autoscaling/v1` Scale view of a workload.
pub fn scale_of(kind: &Kind, obj: &Value) -> Value {
    let m = meta::meta(obj).cloned().unwrap_or_default();
    let sel = obj.at("/spec/selector").cloned().unwrap_or(Value::Null);
    let selector = if kind.plural == "replicationcontrollers" {
        let mut parts: Vec<String> = sel
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect()
            })
            .unwrap_or_default();
        parts.sort();
        parts.join(",")
    } else {
        label_selector_string(&sel)
    };
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m.get("name"), "namespace": m.get("namespace"), "uid": m.get("uid"),
            "resourceVersion": m.get("resourceVersion"),
            "creationTimestamp": m.get("creationTimestamp"),
        },
        "spec": {"replicas": obj.at("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {
            "replicas": obj.at("/status/replicas").cloned().unwrap_or(json!(0)),
            "selector": selector,
        },
    })
}

fn scale_write(
    shared: &Shared,
    req: &Request,
    kind: Kind,
    ns: &str,
    name: &str,
    is_patch: bool,
) -> Reply {
    let body = match parse_body(req) {
        Ok(b) => b,
        Err(e) => return e.into(),
    };
    let mut st = shared.lock_state();
    let Some(cur) = st.get(&kind, ns, name) else {
        return ApiError::not_found(&kind, name).into();
    };
    let mut scale = scale_of(&kind, &cur);
    if is_patch {
        let ct = req.header("content-type").unwrap_or("");
        let r = match PatchType::from_content_type(ct) {
            Some(PatchType::Json) => super::patch::json_patch(&mut scale, &body),
            Some(PatchType::Strategic) => super::patch::strategic_merge_patch(&mut scale, &body),
            Some(_) => {
                super::patch::merge_patch(&mut scale, &body);
                Ok(())
            }
            None => Err(format!("unsupported patch type {ct:?}")),
        };
        if let Err(e) = r {
            return ApiError::new(422, "Invalid", e).into();
        }
    } else {
        scale = body;
    }
    let Some(replicas) = scale.at("/spec/replicas").and_then(Value::as_i64) else {
        return ApiError::invalid(
            &kind,
            name,
            "spec.replicas",
            "FieldValueRequired",
            "Required value",
        )
        .into();
    };
    if replicas < 0 {
        return ApiError::invalid(
            &kind,
            name,
            "spec.replicas",
            "FieldValueInvalid",
            &format!("Invalid value: {replicas}: must be greater than or equal to 0"),
        )
        .into();
    }
    let mut obj = (*cur).clone();
    super::store::set_path(&mut obj, &["spec", "replicas"], Some(json!(replicas)));
    let rv = scale
        .at("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv));
    match st.update(&kind, ns, name, obj, WriteMode::Main) {
        Ok(o) => Reply::Json(200, scale_of(&kind, &o)),
        Err(e) => e.into(),
    }
}
