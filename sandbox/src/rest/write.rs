//! Writes: PUT and PATCH of a resource or a subresource, DELETE and deletecollection.

use edgekcm::obj::At as _;
use serde_json::{json, Value};

use super::read::selectors;
use super::{parse_body, Reply};
use crate::http::Request;
use crate::meta::{self, name_of, namespace_of, ApiError};
use crate::store::{DeleteOpts, Deleted, PatchType, WriteMode};
use crate::Shared;
use edgekcm::api::resources::Kind;

pub(super) fn write(
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
        let res = if pt == PatchType::Apply {
            let manager = req.param("fieldManager").unwrap_or("");
            st.apply(&kind, ns, name, manager, &body, mode)
        } else {
            st.patch(&kind, ns, name, pt, &body, mode)
        };
        return match res {
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
        o.grace_period_seconds = b.get("gracePeriodSeconds").and_then(Value::as_i64);
    }
    if let Some(g) = req.param("gracePeriodSeconds") {
        o.grace_period_seconds =
            Some(g.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid gracePeriodSeconds: {g:?}"))
            })?);
    }
    if let Some(p) = req.param("propagationPolicy") {
        o.propagation = Some(p.to_string());
    }
    if let Some(p) = req.param("orphanDependents") {
        o.orphan_dependents = Some(p == "true");
    }
    Ok(o)
}

pub(super) fn delete(shared: &Shared, req: &Request, kind: Kind, ns: &str, name: &str) -> Reply {
    let opts = match delete_opts(req) {
        Ok(o) => o,
        Err(e) => return e.into(),
    };
    let res = shared.lock_state().delete(&kind, ns, name, &opts);
    match res {
        Ok(Deleted::Pending(o)) => Reply::Json(200, (*o).clone()),
        Ok(Deleted::Now(o)) => {
            // The kinds whose storage returns the deleted object (`ReturnDeletedObject`);
            // the others answer with a Status (pods too: only a pod still terminating is
            // answered with itself).
            const RETURN_DELETED: &[&str] = &[
                "namespaces",
                "persistentvolumes",
                "persistentvolumeclaims",
                "serviceaccounts",
                "resourcequotas",
            ];
            if kind.group.is_empty() && RETURN_DELETED.contains(&kind.plural)
                || kind.plural == "csidrivers"
            {
                Reply::Json(200, (*o).clone())
            } else {
                let uid = meta::meta_str(&o, "uid").unwrap_or("");
                Reply::Json(200, meta::success_status(&kind, name_of(&o), uid))
            }
        }
        Err(e) => e.into(),
    }
}

pub(super) fn delete_collection(
    shared: &Shared,
    req: &Request,
    kind: Kind,
    ns: Option<&str>,
) -> Reply {
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
