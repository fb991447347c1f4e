//! Label and field selectors in their query-string forms.

use edgekcm::obj::At as _;
use serde_json::Value;

use edgekcm::api::resources::Kind;

pub use edgekcm::api::labels::{label_selector_string, LabelSelector};

/// A parsed field selector (`a=b`, `a==b`, `a!=b`, comma separated).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

/// Field labels upstream accepts in field selectors, per kind, beyond `metadata.name` and
/// `metadata.namespace`.
fn supported_fields(kind: &Kind) -> &'static [&'static str] {
    match (kind.group, kind.plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "namespaces") => &["status.phase"],
        ("", "replicationcontrollers") => &["status.replicas"],
        ("apps", "replicasets") => &["status.replicas"],
        ("batch", "jobs") => &["status.successful"],
        ("certificates.k8s.io", "certificatesigningrequests") => &["spec.signerName"],
        ("certificates.k8s.io", "clustertrustbundles") => &["spec.signerName"],
        ("", "persistentvolumeclaims") => &[],
        _ => &[],
    }
}

fn field_value(obj: &Value, field: &str) -> String {
    if field == "source" {
        return obj
            .at("/source/component")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
    }
    let mut cur = obj;
    for part in field.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => {
                // Unset booleans and numbers read as their zero value, as upstream's typed
                // field functions do.
                return match field {
                    "spec.hostNetwork" | "spec.unschedulable" => "false".into(),
                    "status.replicas" | "status.successful" => "0".into(),
                    _ => String::new(),
                };
            }
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

impl FieldSelector {
    /// Parse and check every field against what the kind supports (error text as upstream).
    pub fn parse(s: &str, kind: &Kind) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector { reqs });
        }
        for t in s.split(',') {
            let t = t.trim();
            let (k, eq, v) = if let Some(i) = t.find("!=") {
                (&t[..i], false, &t[i + 2..])
            } else if let Some(i) = t.find("==") {
                (&t[..i], true, &t[i + 2..])
            } else if let Some(i) = t.find('=') {
                (&t[..i], true, &t[i + 1..])
            } else {
                return Err(format!("invalid selector: '{s}'; can't understand '{t}'"));
            };
            let k = k.trim();
            if k != "metadata.name"
                && k != "metadata.namespace"
                && !supported_fields(kind).contains(&k)
            {
                return Err(format!("field label not supported: {k}"));
            }
            reqs.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs
            .iter()
            .all(|(k, eq, v)| (field_value(obj, k) == *v) == *eq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgekcm::api::resources::{CONFIGMAPS, EVENTS, PODS};
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_selectors() {
        let o = obj(json!({"app": "web", "tier": "fe", "n": "5"}));
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app=db", false),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("app notin (db, x)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("app=web,tier=fe", true),
            ("app=web,tier=be", false),
            ("app in (web,db),tier notin (be)", true),
            ("missing!=x", true),
            ("n>3", true),
            ("n<3", false),
        ];
        for (s, want) in cases {
            let sel = LabelSelector::parse(s).expect(s);
            assert_eq!(sel.matches(&o), want, "{s}");
        }
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a=b=c").is_err());
        assert!(LabelSelector::parse("=x").is_err());
        // No labels at all.
        let bare = json!({"metadata": {"name": "b"}});
        assert!(LabelSelector::parse("!app").unwrap().matches(&bare));
        assert!(!LabelSelector::parse("app").unwrap().matches(&bare));
    }

    #[test]
    fn field_selectors() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"},
                         "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let sel = |s: &str| FieldSelector::parse(s, &PODS).expect(s);
        assert!(sel("spec.nodeName=n1").matches(&pod));
        assert!(sel("spec.nodeName!=n2,status.phase=Running").matches(&pod));
        assert!(!sel("status.phase==Pending").matches(&pod));
        assert!(sel("metadata.name=p").matches(&pod));
        assert!(sel("spec.hostNetwork=false").matches(&pod));
        assert!(sel("spec.nodeName=").matches(&json!({"metadata": {"name": "x"}})));
        let err = FieldSelector::parse("spec.foo=1", &PODS).unwrap_err();
        assert_eq!(err, "field label not supported: spec.foo");
        assert!(FieldSelector::parse("spec.nodeName=x", &CONFIGMAPS).is_err());
        let ev = json!({"involvedObject": {"kind": "Pod", "name": "p"}, "type": "Warning",
                        "source": {"component": "kcm"}});
        let es = |s: &str| FieldSelector::parse(s, &EVENTS).expect(s);
        assert!(es("involvedObject.kind=Pod,type=Warning,source=kcm").matches(&ev));
    }

    #[test]
    fn selector_strings() {
        let s = json!({"matchLabels": {"app": "web"},
                       "matchExpressions": [{"key": "t", "operator": "In", "values": ["a", "b"]},
                                            {"key": "x", "operator": "DoesNotExist"}]});
        let text = label_selector_string(&s);
        assert_eq!(text, "!x,app=web,t in (a,b)");
        assert!(LabelSelector::parse(&text).is_ok());
    }
}
