//! clusterrole-aggregation-controller: the `rules` of a ClusterRole with an `aggregationRule`
//! are the rules of the ClusterRoles its selectors match, as upstream builds them: selector by
//! selector, the matching roles sorted by name (the role itself skipped), their rules in order,
//! a rule already taken (equal in all five lists, an empty list equal to a missing one) not
//! taken again. The rules are written only when they differ, with a server-side apply as
//! fieldManager `clusterrole-aggregation-controller` with `force=true` (the body upstream's
//! apply configuration sends: kind, apiVersion, `metadata.name` and the rules, no `rules`
//! when there are none); a server without server-side apply (415) gets an update of the whole
//! role instead, as upstream falls back.
//!
//! Any change of any ClusterRole looks at every aggregating role again (upstream's handlers
//! do the same); the aggregating roles are kept in a small index so the watch path never
//! scans. Queue `ClusterRoleAggregator`, 5 workers, no Events.

use super::kit::selector;
use super::{Action, Controller, Cx, Outcome, Watch};
use crate::api::resources::CLUSTERROLES;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::{Error, Result};
use crate::obj;
use serde_json::{json, Map, Value};
use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::sync::Mutex;

pub const FIELD_MANAGER: &str = "clusterrole-aggregation-controller";

/// The five lists of a PolicyRule in upstream's field order; a missing or null list is empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule([Vec<String>; 5]);

const RULE_FIELDS: [&str; 5] = [
    "verbs",
    "apiGroups",
    "resources",
    "resourceNames",
    "nonResourceURLs",
];

impl Rule {
    pub fn of(v: &Value) -> Rule {
        Rule(RULE_FIELDS.map(|f| {
            v.get(f)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|s| s.as_str().unwrap_or("").to_string())
                        .collect()
                })
                .unwrap_or_default()
        }))
    }

    /// As upstream's PolicyRule apply configuration encodes it: empty lists left out.
    pub fn to_apply(&self) -> Value {
        let mut m = Map::new();
        for (f, list) in RULE_FIELDS.iter().zip(&self.0) {
            if !list.is_empty() {
                m.insert(f.to_string(), json!(list));
            }
        }
        Value::Object(m)
    }

    /// As a PolicyRule in an update: `verbs` always, the other lists when not empty.
    pub fn to_object(&self) -> Value {
        let mut v = self.to_apply();
        if let Some(m) = v.as_object_mut() {
            m.entry("verbs").or_insert_with(|| json!([]));
        }
        v
    }
}

fn rules_of(role: &Value) -> Vec<Rule> {
    role.get("rules")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(Rule::of).collect())
        .unwrap_or_default()
}

fn aggregation_rule(role: &Value) -> Option<&Value> {
    role.get("aggregationRule").filter(|r| !r.is_null())
}

/// The rules `role` should have, from `all` (every ClusterRole); None when it does not
/// aggregate. A selector upstream's `LabelSelectorAsSelector` refuses is an error.
pub fn aggregate(role: &Value, all: &[impl Borrow<Value>]) -> Result<Option<Vec<Rule>>> {
    let Some(rule) = aggregation_rule(role) else {
        return Ok(None);
    };
    let empty = json!({});
    let selectors = rule
        .get("clusterRoleSelectors")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut sorted: Vec<&Value> = all.iter().map(Borrow::borrow).collect();
    crate::sort::sort_by(&mut sorted[..], |a, b| obj::name(a).cmp(obj::name(b)));
    let mut out: Vec<Rule> = Vec::new();
    for sel in selectors {
        // A null selector in the list decodes to an empty one in Go: everything.
        let sel = if sel.is_null() { &empty } else { sel };
        if !selector::is_valid(sel) {
            return Err(Error::Decode(format!(
                "{}: invalid cluster role selector {sel}",
                obj::name(role)
            )));
        }
        for other in &sorted {
            if obj::name(other) == obj::name(role) || !selector::matches(sel, other) {
                continue;
            }
            for r in rules_of(other) {
                if !out.contains(&r) {
                    out.push(r);
                }
            }
        }
    }
    Ok(Some(out))
}

/// Its row in the controller table: 5 workers, as upstream starts it.
pub fn build(_: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    Ok(Some(super::Runnable::reconciles(
        ClusterRoleAggregation::default(),
    )))
}

#[derive(Default)]
pub struct ClusterRoleAggregation {
    /// Names of the ClusterRoles that have an aggregationRule, kept by `keys_for`.
    aggregating: Mutex<BTreeSet<String>>,
}

impl Controller for ClusterRoleAggregation {
    fn watches(&self) -> Vec<Watch> {
        vec![Watch::full(CLUSTERROLES)]
    }

    fn keys_for(&self, _: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        let o = d.object();
        let name = obj::name(o).to_string();
        let mut set = self.aggregating.lock().unwrap_or_else(|p| p.into_inner());
        if d.kind != DeltaKind::Deleted && aggregation_rule(o).is_some() {
            set.insert(name);
        } else {
            set.remove(&name);
        }
        set.iter().cloned().collect()
    }

    fn reconcile(&self, cx: &Cx, name: &str) -> Result<Outcome> {
        let store = cx.cache.store(CLUSTERROLES);
        let Some(role) = store.get(name) else {
            return Ok(Outcome::none());
        };
        let Some(rule) = aggregation_rule(&role) else {
            return Ok(Outcome::none());
        };
        // Only the roles some selector matches are decoded whole (labels are read from the
        // metadata first); the rest of the decision is `aggregate`'s.
        let empty = json!({});
        let selectors: Vec<&Value> = rule
            .get("clusterRoleSelectors")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|s| if s.is_null() { &empty } else { s })
                    .collect()
            })
            .unwrap_or_default();
        let candidates: Vec<_> = store
            .keys()
            .into_iter()
            .filter(|k| k != name)
            .filter(|k| {
                store
                    .get_metadata_in("", k)
                    .is_some_and(|m| selectors.iter().any(|s| selector::matches(s, &m)))
            })
            .filter_map(|k| store.get(&k))
            .collect();
        let Some(want) = aggregate(&role, &candidates)? else {
            return Ok(Outcome::none());
        };
        if want == rules_of(&role) {
            return Ok(Outcome::none());
        }
        let mut apply = json!({
            "kind": "ClusterRole",
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "metadata": {"name": name},
        });
        if !want.is_empty() {
            apply["rules"] = Value::Array(want.iter().map(Rule::to_apply).collect());
        }
        let mut updated = (*role).clone();
        updated["rules"] = if want.is_empty() {
            Value::Null
        } else {
            Value::Array(want.iter().map(Rule::to_object).collect())
        };
        Ok(Outcome::with(vec![Action::Apply {
            kind: CLUSTERROLES,
            namespace: String::new(),
            name: name.to_string(),
            field_manager: FIELD_MANAGER,
            object: apply,
            fallback: Some(Box::new(Action::Update {
                kind: CLUSTERROLES,
                object: updated,
            })),
            subresource: None,
        }]))
    }
}

#[cfg(test)]
#[path = "clusterroleaggregation_tests.rs"]
mod tests;
