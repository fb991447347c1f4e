//! Whether a pod fits a node by what the scheduler's filters read of the pod spec alone:
//! `spec.nodeName`, `spec.nodeSelector`, the required node affinity (`matchExpressions` on
//! labels and `matchFields` on `metadata.name`), and taints against tolerations (upstream's
//! `nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)` and
//! `v1helper.FindMatchingUntoleratedTaint`). Toleration matching itself is
//! `nodelifecycle::taints::tolerates`.

use crate::controllers::nodelifecycle::taints::tolerates;
use crate::obj;
use crate::obj::At as _;
use serde_json::{json, Value};

/// The node facts the predicates read: its name, labels and taints.
pub struct NodeView<'a> {
    pub name: &'a str,
    pub labels: Option<&'a serde_json::Map<String, Value>>,
    pub taints: &'a [Value],
}

impl<'a> NodeView<'a> {
    pub fn of(node: &'a Value) -> Self {
        NodeView {
            name: obj::name(node),
            labels: obj::labels(node),
            taints: node
                .at("/spec/taints")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]),
        }
    }
    fn label(&self, k: &str) -> Option<&str> {
        self.labels.and_then(|l| l.get(k)).and_then(Value::as_str)
    }
}

/// `spec.nodeSelector` and the required node affinity of `spec` both match the node.
pub fn matches_node_selector_and_affinity(spec: &Value, node: &NodeView) -> bool {
    if let Some(sel) = spec.get("nodeSelector").and_then(Value::as_object) {
        let all = sel
            .iter()
            .all(|(k, v)| v.as_str().is_some_and(|v| node.label(k) == Some(v)));
        if !all {
            return false;
        }
    }
    match spec.at("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution") {
        None | Some(Value::Null) => true,
        Some(ns) => node_selector_matches(ns, node),
    }
}

/// A `v1.NodeSelector`: its terms are ORed; a term with no requirement matches nothing, and a
/// malformed term matches nothing.
pub fn node_selector_matches(ns: &Value, node: &NodeView) -> bool {
    let Some(terms) = ns.get("nodeSelectorTerms").and_then(Value::as_array) else {
        return false;
    };
    terms.iter().any(|t| term_matches(t, node))
}

fn reqs<'a>(t: &'a Value, f: &str) -> &'a [Value] {
    t.get(f)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn term_matches(t: &Value, node: &NodeView) -> bool {
    let (exprs, fields) = (reqs(t, "matchExpressions"), reqs(t, "matchFields"));
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, |k| node.label(k), false))
        && fields
            .iter()
            .all(|r| requirement_matches(r, |k| (k == "metadata.name").then_some(node.name), true))
}

/// One `NodeSelectorRequirement`. Fields take only `In` and `NotIn` with one value, on
/// `metadata.name`; anything malformed does not match.
fn requirement_matches<'a>(r: &Value, get: impl Fn(&str) -> Option<&'a str>, field: bool) -> bool {
    let key = r.get("key").and_then(Value::as_str).unwrap_or("");
    let op = r.get("operator").and_then(Value::as_str).unwrap_or("");
    let values: Vec<&str> = reqs(r, "values").iter().filter_map(Value::as_str).collect();
    if field {
        if key != "metadata.name" || values.len() != 1 {
            return false;
        }
        if !matches!(op, "In" | "NotIn") {
            return false;
        }
    }
    let have = get(key);
    match op {
        "In" => !values.is_empty() && have.is_some_and(|h| values.contains(&h)),
        "NotIn" => !values.is_empty() && have.is_none_or(|h| !values.contains(&h)),
        "Exists" => values.is_empty() && have.is_some(),
        "DoesNotExist" => values.is_empty() && have.is_none(),
        "Gt" | "Lt" => {
            let (Some(h), [v]) = (have, values.as_slice()) else {
                return false;
            };
            match (h.parse::<i64>(), v.parse::<i64>()) {
                (Ok(h), Ok(v)) if op == "Gt" => h > v,
                (Ok(h), Ok(v)) => h < v,
                _ => false,
            }
        }
        _ => false,
    }
}

/// The first taint with an effect `effects` accepts that no toleration tolerates.
pub fn untolerated_taint<'a>(
    taints: &'a [Value],
    tolerations: &[Value],
    effects: impl Fn(&str) -> bool,
) -> Option<&'a Value> {
    taints.iter().find(|t| {
        effects(t.get("effect").and_then(Value::as_str).unwrap_or(""))
            && !tolerations.iter().any(|tol| tolerates(tol, t))
    })
}

/// Upstream's `AddOrUpdateTolerationInPodSpec`: a toleration equal in key, operator, value
/// and effect to `tol` is replaced by it, else `tol` is appended.
pub fn add_or_update_toleration(tolerations: &mut Vec<Value>, tol: Value) {
    let s = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    let op = |v: &Value| match s(v, "operator").as_str() {
        "" => "Equal".to_string(),
        o => o.to_string(),
    };
    let same = |a: &Value| {
        s(a, "key") == s(&tol, "key")
            && op(a) == op(&tol)
            && s(a, "value") == s(&tol, "value")
            && s(a, "effect") == s(&tol, "effect")
    };
    match tolerations.iter().position(same) {
        Some(i) => {
            if tolerations[i] != tol {
                tolerations[i] = tol;
            }
        }
        None => tolerations.push(tol),
    }
}

/// The tolerations every daemon pod gets (upstream's `AddOrUpdateDaemonPodTolerations`):
/// not-ready and unreachable (NoExecute), disk, memory and PID pressure and unschedulable
/// (NoSchedule), and network-unavailable (NoSchedule) for a host-network pod.
pub fn add_daemon_tolerations(spec: &mut Value) {
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    let mut tols: Vec<Value> = spec
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut add = |key: &str, effect: &str| {
        add_or_update_toleration(
            &mut tols,
            json!({"key": key, "operator": "Exists", "effect": effect}),
        )
    };
    add("node.kubernetes.io/not-ready", "NoExecute");
    add("node.kubernetes.io/unreachable", "NoExecute");
    add("node.kubernetes.io/disk-pressure", "NoSchedule");
    add("node.kubernetes.io/memory-pressure", "NoSchedule");
    add("node.kubernetes.io/pid-pressure", "NoSchedule");
    add("node.kubernetes.io/unschedulable", "NoSchedule");
    if host_network {
        add("node.kubernetes.io/network-unavailable", "NoSchedule");
    }
    if let Some(m) = spec.as_object_mut() {
        m.insert("tolerations".into(), Value::Array(tols));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints}})
    }

    #[test]
    fn selector_and_affinity() {
        let n = node(json!({"zone": "a", "cpu": "8"}), json!([]));
        let v = NodeView::of(&n);
        assert!(matches_node_selector_and_affinity(&json!({}), &v));
        assert!(matches_node_selector_and_affinity(
            &json!({"nodeSelector": {"zone": "a"}}),
            &v
        ));
        assert!(!matches_node_selector_and_affinity(
            &json!({"nodeSelector": {"zone": "b"}}),
            &v
        ));
        let aff = |term: Value| {
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [term]}}}})
        };
        let yes = [
            json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}),
            json!({"matchExpressions": [{"key": "cpu", "operator": "Gt", "values": ["4"]}]}),
            json!({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}),
            json!({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}),
            json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}),
        ];
        for t in yes {
            assert!(
                matches_node_selector_and_affinity(&aff(t.clone()), &v),
                "{t}"
            );
        }
        let no = [
            json!({}),
            json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}),
            json!({"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["n1"]}]}),
            json!({"matchExpressions": [{"key": "cpu", "operator": "Lt", "values": ["4"]}]}),
            json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": []}]}),
            json!({"matchExpressions": [{"key": "zone", "operator": "Bogus"}]}),
        ];
        for t in no {
            assert!(
                !matches_node_selector_and_affinity(&aff(t.clone()), &v),
                "{t}"
            );
        }
    }

    #[test]
    fn daemon_tolerations_and_untolerated_taints() {
        let mut spec = json!({"tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 5}]});
        add_daemon_tolerations(&mut spec);
        let tols = spec["tolerations"].as_array().unwrap().clone();
        assert_eq!(tols.len(), 6, "replaced, not doubled: {tols:?}");
        assert!(tols[0].get("tolerationSeconds").is_none());
        let mut hn = json!({"hostNetwork": true});
        add_daemon_tolerations(&mut hn);
        assert_eq!(hn["tolerations"].as_array().unwrap().len(), 7);

        let taints = [
            json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}),
            json!({"key": "dedicated", "value": "db", "effect": "NoSchedule"}),
        ];
        let found = untolerated_taint(&taints, &tols, |e| e == "NoSchedule");
        assert_eq!(found, Some(&taints[1]));
        assert!(untolerated_taint(&taints, &tols, |e| e == "NoExecute").is_none());
    }
}
