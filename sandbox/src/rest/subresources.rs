//! The `token` and `scale` subresources.

use edgekcm::obj::At as _;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

use super::{parse_body, Reply};
use crate::http::Request;
use crate::meta::{self, ApiError};
use crate::selector::label_selector_string;
use crate::store::{PatchType, WriteMode};
use crate::Shared;
use edgekcm::api::resources::Kind;

pub(super) fn token_request(
    shared: &Shared,
    req: &Request,
    kind: Kind,
    ns: &str,
    name: &str,
) -> Reply {
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

pub(super) fn scale_write(
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
        return ApiError::sub_not_found(&kind, "scale", name).into();
    };
    let mut scale = scale_of(&kind, &cur);
    if is_patch {
        let ct = req.header("content-type").unwrap_or("");
        let r = match PatchType::from_content_type(ct) {
            Some(PatchType::Json) => crate::patch::json_patch(&mut scale, &body),
            Some(PatchType::Strategic) => crate::patch::strategic_merge_patch(&mut scale, &body),
            Some(_) => {
                crate::patch::merge_patch(&mut scale, &body);
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
    crate::store::set_path(&mut obj, &["spec", "replicas"], Some(json!(replicas)));
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
