//! TokenReviews and SubjectAccessReviews, answered from the sandbox's tokens and deny rules.

use edgekcm::obj::At as _;
use serde_json::{json, Value};

use super::{parse_body, Reply};
use crate::http::Request;
use crate::meta::ApiError;
use crate::Shared;
use edgekcm::api::resources::Kind;

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

pub(super) fn review(shared: &Shared, req: &Request, kind: Kind) -> Reply {
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
