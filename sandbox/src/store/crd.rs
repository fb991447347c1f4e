//! Kinds defined by CustomResourceDefinitions: served from the moment their CRD is created,
//! gone with their objects and watches when it is deleted.

use edgekcm::obj::At as _;
use serde_json::Value;

use super::{Kind, State};
use crate::meta::ApiError;

impl State {
    pub(super) fn crd_added(&mut self, crd: &Value) -> Result<(), ApiError> {
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

    pub(super) fn crd_removed(&mut self, crd: &Value) {
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
