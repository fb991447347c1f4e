//! Label selectors in their query-string form (`a=b,c in (x,y),!d`), as list requests,
//! `Scale.status.selector` and the metrics APIs carry them.

use crate::obj::At as _;
use serde_json::Value;

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
    crate::sort::sort(&mut parts[..]);
    parts.join(",")
}
