//! validatingadmissionpolicy-status-controller (upstream's
//! `validatingadmissionpolicystatus`, on by default, no gate): type-checks the CEL
//! expressions of each `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy against
//! the schemas of the kinds it matches and writes `status.typeChecking.expressionWarnings`
//! and `status.observedGeneration`.
//!
//! - Queue `validatingadmissionpolicy-status`, `--concurrent-validating-admission-policy-status-syncs`
//!   workers (5); a policy is queued when added or updated, and looked at only while its
//!   generation is newer than `status.observedGeneration`.
//! - The status is written by server-side apply of the status subresource as field manager
//!   `validatingadmissionpolicy-status`, forced, as upstream's `ApplyStatus`.
//! - What is checked (upstream's `TypeChecker.Check`): `spec.validations[*].expression` and
//!   `messageExpression`, against each kind the resource rules name (wildcards and
//!   subresources left out, at most 10, through discovery) with `object` and `oldObject`
//!   typed from the kind's OpenAPI v3 schema, `params` from the `paramKind`'s, `request`,
//!   `namespaceObject` and `variables` as upstream types them. Each warning is `<gvk>: <cel-go's message>`
//!   followed by a newline, the kinds' warnings joined by newlines.
//! - CEL: `parse` (our parser), `types` (types from schemas), `funcs` (overloads), `check`
//!   (the checker). What it does not model is typed as unknown and never reported; see
//!   docs/controllers/validatingadmissionpolicy-status-controller.md.

pub mod check;
pub mod funcs;
pub mod parse;
pub mod resolve;
pub mod types;

use crate::api::resources::VALIDATINGADMISSIONPOLICIES;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controllers::{Action, Controller, Cx, Outcome, Watch};
use crate::error::Result;
use crate::obj::At as _;
use resolve::{Gvk, Source};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use types::{Obj, Ty};

pub const NAME: &str = "validatingadmissionpolicy-status-controller";
/// Upstream's `ControllerName`: the field manager of its status writes.
pub const FIELD_MANAGER: &str = "validatingadmissionpolicy-status";

pub const POLICY_WATCH: Watch = Watch::full(VALIDATINGADMISSIONPOLICIES);

pub fn build(
    _cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controllers::Runnable>> {
    Ok(Some(crate::controllers::Runnable::reconciles(VapStatus)))
}

pub struct VapStatus;

impl Controller for VapStatus {
    fn watches(&self) -> Vec<Watch> {
        vec![POLICY_WATCH]
    }

    fn keys_for(&self, _: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        // Added and updated policies; a deleted one needs nothing.
        match (&d.kind, &d.new) {
            (DeltaKind::Deleted, _) | (_, None) => vec![],
            (_, Some(p)) => vec![crate::obj::name(p).to_string()],
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(policy) = cx.cache.store_for(&POLICY_WATCH).get(key) else {
            return Ok(Outcome::none());
        };
        let generation = policy
            .at("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let observed = policy
            .at("/status/observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if generation <= observed {
            return Ok(Outcome::none());
        }
        let warnings = check_policy(&policy, &resolve::Live(cx.client));
        Ok(Outcome::with(vec![status_apply(
            key, generation, &warnings,
        )]))
    }
}

/// The status write: server-side apply of the status subresource, forced.
pub fn status_apply(name: &str, generation: i64, warnings: &[(String, String)]) -> Action {
    let mut tc = json!({});
    if !warnings.is_empty() {
        tc["expressionWarnings"] = warnings
            .iter()
            .map(|(f, w)| json!({"fieldRef": f, "warning": w}))
            .collect();
    }
    let object = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "status": {"observedGeneration": generation, "typeChecking": tc},
    });
    Action::Apply {
        kind: VALIDATINGADMISSIONPOLICIES,
        namespace: String::new(),
        name: name.to_string(),
        subresource: Some("status"),
        field_manager: FIELD_MANAGER,
        object,
        fallback: None,
    }
}

/// What a policy's expressions are checked with, for one kind.
struct Env {
    gvk: Gvk,
    vars: HashMap<String, Ty>,
}

/// `TypeChecker.Check`: (fieldRef, warning) for each expression with messages.
pub fn check_policy(policy: &Value, src: &dyn Source) -> Vec<(String, String)> {
    let envs = environments(policy, src);
    let mut out = Vec::new();
    let validations = policy
        .at("/spec/validations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, v) in validations.iter().enumerate() {
        for field in ["expression", "messageExpression"] {
            let text = v[field].as_str().unwrap_or("");
            if text.is_empty() {
                continue;
            }
            let shown = check_expression(&envs, text);
            if !shown.is_empty() {
                out.push((format!("spec.validations[{i}].{field}"), shown));
            }
        }
    }
    out
}

/// The warning of one expression over every kind: `<gvk>: <messages>\n` for each kind with
/// messages, joined by newlines; empty when none has any.
fn check_expression(envs: &[Env], text: &str) -> String {
    let Ok(expr) = parse::parse(text) else {
        return String::new();
    };
    let mut parts = Vec::new();
    for env in envs {
        let mut c = check::Checker::new(&env.vars);
        c.check(&expr);
        if !c.issues.is_empty() {
            parts.push(format!(
                "{}: {}\n",
                env.gvk,
                check::display(text, &c.issues)
            ));
        }
    }
    parts.join("\n")
}

/// One environment per kind the policy matches whose schema is found (upstream skips the
/// others), with its variables typed in order.
fn environments(policy: &Value, src: &dyn Source) -> Vec<Env> {
    let params = policy.at("/spec/paramKind").map(|pk| {
        let api = pk["apiVersion"].as_str().unwrap_or("");
        let (group, version) = api.rsplit_once('/').unwrap_or(("", api));
        let gvk = Gvk {
            group: group.to_string(),
            version: version.to_string(),
            kind: pk["kind"].as_str().unwrap_or("").to_string(),
        };
        resolve::schema_type(src, &gvk, &resolve::unique_name(&gvk.kind)).unwrap_or(Ty::Dyn)
    });
    let variables = policy
        .at("/spec/variables")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut envs = Vec::new();
    for gvk in resolve::kinds(policy, src) {
        let Some(object) = resolve::schema_type(src, &gvk, &resolve::unique_name(&gvk.kind)) else {
            continue;
        };
        let mut vars = HashMap::new();
        vars.insert("object".to_string(), object.clone());
        vars.insert("oldObject".to_string(), object);
        vars.insert("request".to_string(), types::request());
        vars.insert("namespaceObject".to_string(), types::namespace());
        vars.insert("authorizer".to_string(), Ty::Unknown);
        if let Some(p) = &params {
            vars.insert("params".to_string(), p.clone());
        }
        let mut fields = std::collections::BTreeMap::new();
        for v in &variables {
            vars.insert("variables".to_string(), variables_type(&fields));
            let t = match parse::parse(v["expression"].as_str().unwrap_or("")) {
                Ok(e) => {
                    let mut c = check::Checker::new(&vars);
                    let t = c.check(&e);
                    if c.issues.is_empty() {
                        types::as_variable(&t)
                    } else {
                        Ty::Dyn
                    }
                }
                Err(_) => Ty::Dyn,
            };
            fields.insert(v["name"].as_str().unwrap_or("").to_string(), t);
        }
        vars.insert("variables".to_string(), variables_type(&fields));
        envs.push(Env { gvk, vars });
    }
    envs
}

fn variables_type(fields: &std::collections::BTreeMap<String, Ty>) -> Ty {
    Ty::Obj(Arc::new(Obj::new(
        "kubernetes.variables".to_string(),
        fields.clone(),
    )))
}

#[cfg(test)]
mod tests;
