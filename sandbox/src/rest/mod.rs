//! Routing: the discovery and health paths here, resource paths to the handlers of each verb
//! (`read.rs`: get and list; `watch.rs`; `write.rs`: put, patch, delete, deletecollection;
//! `subresources.rs`: token and scale; `review.rs`: TokenReview and SubjectAccessReview).

mod read;
mod review;
mod subresources;
mod watch;
mod write;

pub use watch::WatchPlan;

use serde_json::{json, Value};

use super::discovery;
use super::http::Request;
use super::meta::{has_scale_subresource, has_status_subresource, is_review, ApiError};
use super::store::WriteMode;
use super::Shared;
use edgekcm::api::resources::Kind;
use read::{get, list};
use review::review;
use subresources::{scale_of, scale_write, token_request};
use watch::start_watch;
use write::{delete, delete_collection, write};

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

/// The `/version` answer for a `gitVersion` such as `v1.37.2-sandbox`.
fn version_body(git: &str) -> Value {
    let mut nums = git.trim_start_matches('v').split(['.', '-', '+']);
    let (major, minor) = (nums.next().unwrap_or(""), nums.next().unwrap_or(""));
    json!({"major": major, "minor": minor, "emulationMajor": major, "emulationMinor": minor,
           "minCompatibilityMajor": major, "minCompatibilityMinor": minor,
           "gitVersion": git, "gitCommit": "0000000000000000000000000000000000000000",
           "gitTreeState": "clean", "buildDate": "2026-08-15T00:00:00Z",
           "goVersion": "go1.26.0", "compiler": "gc", "platform": "linux/amd64"})
}

/// Dispatch one request (authentication, faults and pauses are handled by the caller).
pub fn handle(shared: &Shared, req: &Request) -> Reply {
    let segs: Vec<&str> = req.path.split('/').filter(|s| !s.is_empty()).collect();
    if let Some(r) = super::metrics::handle(shared, req, &segs) {
        return r;
    }
    match segs.as_slice() {
        [] => Reply::Json(
            200,
            json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]}),
        ),
        ["healthz" | "readyz" | "livez"] => {
            Reply::Bytes(200, "text/plain; charset=utf-8", b"ok".to_vec())
        }
        ["version"] => Reply::Json(200, version_body(&shared.lock_state().server_version)),
        ["openapi", "v3", rest @ ..] => {
            match crate::openapi::document(&shared.lock_state(), rest) {
                Some(doc) => Reply::Json(200, doc),
                None => not_found_path(),
            }
        }
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
                None => ApiError::sub_not_found(&kind, "scale", name).into(),
            },
            "PUT" | "PATCH" => scale_write(shared, req, kind, ns_str, name, m == "PATCH"),
            _ => method_not_allowed(m),
        },
        _ => not_found_path(),
    }
}
