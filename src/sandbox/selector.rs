//! Label and field selectors in their query-string forms.

use crate::obj::At as _;
use serde_json::Value;

use crate::api::resources::Kind;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    Gt(String, i64),
    Lt(String, i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<Req>,
}

/// Split at commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn parse_set(rest: &str) -> Option<Vec<String>> {
    let rest = rest.trim();
    let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
    let vals: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if vals.iter().all(|v| valid_value(v)) {
        Some(vals)
    } else {
        None
    }
}

fn parse_term(t: &str) -> Option<Req> {
    let t = t.trim();
    if let Some(k) = t.strip_prefix('!') {
        let k = k.trim();
        return valid_key(k).then(|| Req::NotExists(k.to_string()));
    }
    for (op, is_eq) in [("!=", false), ("==", true), ("=", true)] {
        if let Some(i) = t.find(op) {
            let k = t[..i].trim();
            let v = t[i + op.len()..].trim();
            if !valid_key(k) || !valid_value(v) {
                return None;
            }
            return Some(if is_eq {
                Req::Eq(k.into(), v.into())
            } else {
                Req::NotEq(k.into(), v.into())
            });
        }
    }
    for (op, gt) in [(">", true), ("<", false)] {
        if let Some(i) = t.find(op) {
            let k = t[..i].trim();
            let v: i64 = t[i + 1..].trim().parse().ok()?;
            if !valid_key(k) {
                return None;
            }
            return Some(if gt {
                Req::Gt(k.into(), v)
            } else {
                Req::Lt(k.into(), v)
            });
        }
    }
    let mut parts = t.splitn(2, char::is_whitespace);
    let k = parts.next().unwrap_or("").trim();
    let rest = parts.next().unwrap_or("").trim();
    if rest.is_empty() {
        return valid_key(k).then(|| Req::Exists(k.to_string()));
    }
    if !valid_key(k) {
        return None;
    }
    if let Some(r) = rest.strip_prefix("notin") {
        return parse_set(r).map(|v| Req::NotIn(k.into(), v));
    }
    if let Some(r) = rest.strip_prefix("in") {
        return parse_set(r).map(|v| Req::In(k.into(), v));
    }
    None
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector { reqs });
        }
        for t in split_top(s) {
            match parse_term(t) {
                Some(r) => reqs.push(r),
                None => return Err(format!("unable to parse requirement: {:?}", t.trim())),
            }
        }
        Ok(LabelSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Match against an object's `metadata.labels`.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.reqs.is_empty() {
            return true;
        }
        let labels = obj.at("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::NotEq(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
            Req::Gt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            Req::Lt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
        })
    }
}

/// The query-string form of a `metav1.LabelSelector` JSON object (`matchLabels` and
/// `matchExpressions`), as written into `Scale.status.selector`.
pub fn label_selector_string(sel: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            parts.push(format!("{}={}", k, v.as_str().unwrap_or("")));
        }
    }
    if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
        for e in exprs {
            let key = e.get("key").and_then(Value::as_str).unwrap_or("");
            let vals: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                "In" => parts.push(format!("{key} in ({})", vals.join(","))),
                "NotIn" => parts.push(format!("{key} notin ({})", vals.join(","))),
                "Exists" => parts.push(key.to_string()),
                "DoesNotExist" => parts.push(format!("!{key}")),
                _ => {}
            }
        }
    }
    parts.sort();
    parts.join(",")
}

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
    use crate::api::resources::{CONFIGMAPS, EVENTS, PODS};
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
