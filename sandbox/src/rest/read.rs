//! Reads: get and list (selectors, `limit` and `continue`, metadata-only lists).

use base64::Engine as _;
use serde_json::{json, Value};
use std::io::Write;
use std::sync::Arc;

use super::{accept_partial, partial, Reply};
use crate::http::Request;
use crate::meta::{namespace_of, ApiError};
use crate::selector::{FieldSelector, LabelSelector};
use crate::Shared;
use edgekcm::api::resources::Kind;

pub(super) fn get(shared: &Shared, req: &Request, kind: Kind, ns: &str, name: &str) -> Reply {
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

pub(super) fn selectors(
    req: &Request,
    kind: &Kind,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
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

pub(super) fn list(shared: &Shared, req: &Request, kind: Kind, ns: Option<&str>) -> Reply {
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
