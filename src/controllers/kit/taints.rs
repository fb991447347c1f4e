//! Tolerations against taints, as the NoExecute taint eviction and the node-fit predicates
//! read them (upstream's `Toleration.ToleratesTaint`, `v1helper.GetMatchingTolerations` and
//! the eviction controller's `getMinTolerationTime`). Pure.

use crate::obj::At as _;
use serde_json::Value;
use std::time::Duration;

pub const NO_EXECUTE: &str = "NoExecute";

fn s<'a>(v: &'a Value, f: &str) -> &'a str {
    v.get(f).and_then(Value::as_str).unwrap_or("")
}

/// `Toleration.ToleratesTaint` with the `Lt` and `Gt` operators off
/// (TaintTolerationComparisonOperators, alpha and off by default in 1.35).
pub fn tolerates(tol: &Value, taint: &Value) -> bool {
    tolerates_with(tol, taint, false)
}

/// `Toleration.ToleratesTaint`; `comparisons` says whether `Lt` and `Gt` compare the values
/// as decimal integers (the taint's value below, or above, the toleration's).
pub fn tolerates_with(tol: &Value, taint: &Value, comparisons: bool) -> bool {
    if !s(tol, "effect").is_empty() && s(tol, "effect") != s(taint, "effect") {
        return false;
    }
    if !s(tol, "key").is_empty() && s(tol, "key") != s(taint, "key") {
        return false;
    }
    match s(tol, "operator") {
        "" | "Equal" => s(tol, "value") == s(taint, "value"),
        "Exists" => true,
        op @ ("Lt" | "Gt") if comparisons => {
            let (Some(t), Some(v)) = (decimal(s(tol, "value")), decimal(s(taint, "value"))) else {
                return false;
            };
            if op == "Lt" {
                v < t
            } else {
                v > t
            }
        }
        _ => false,
    }
}

/// A decimal integer as `content.IsDecimalInteger` accepts it (an optional minus, no
/// leading zeros, no plus sign) that fits an int64.
fn decimal(v: &str) -> Option<i64> {
    let digits = v.strip_prefix('-').unwrap_or(v);
    let ok = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && !(v.starts_with('-') && digits == "0");
    if ok {
        v.parse().ok()
    } else {
        None
    }
}

/// How long a pod may stay on a node with these NoExecute taints (`GetMatchingTolerations`
/// then `getMinTolerationTime`): `Some(ZERO)` at once (a taint not tolerated, or a toleration
/// of zero seconds or less), `Some(d)` after `d`, None for ever.
pub fn toleration_time(
    taints: &[Value],
    tolerations: &[Value],
    comparisons: bool,
) -> Option<Duration> {
    if taints.is_empty() {
        return None;
    }
    let mut used = Vec::new();
    for t in taints {
        match tolerations
            .iter()
            .find(|tol| tolerates_with(tol, t, comparisons))
        {
            Some(tol) => used.push(tol),
            None => return Some(Duration::ZERO),
        }
    }
    let mut min: Option<i64> = None;
    for tol in used {
        if let Some(secs) = tol.get("tolerationSeconds").and_then(Value::as_i64) {
            if secs <= 0 {
                return Some(Duration::ZERO);
            }
            min = Some(min.map_or(secs, |m| m.min(secs)));
        }
    }
    min.map(|s| Duration::from_secs(s as u64))
}

/// Whether every taint is tolerated (`GetMatchingTolerations`'s first answer).
pub fn all_tolerated(taints: &[Value], tolerations: &[Value], comparisons: bool) -> bool {
    taints.iter().all(|t| {
        tolerations
            .iter()
            .any(|tol| tolerates_with(tol, t, comparisons))
    })
}

/// The NoExecute taints of a node.
pub fn no_execute(node: &Value) -> Vec<Value> {
    node.at("/spec/taints")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter(|t| t.get("effect").and_then(Value::as_str) == Some(NO_EXECUTE))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taint(key: &str, value: &str, effect: &str) -> Value {
        json!({"key": key, "value": value, "effect": effect})
    }
    const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

    #[test]
    fn tolerations_decide_when_a_pod_goes() {
        let unreachable = [taint(UNREACHABLE, "", "NoExecute")];
        let time = |t: &[Value], tol: &[Value]| toleration_time(t, tol, false);
        assert_eq!(time(&unreachable, &[]), Some(Duration::ZERO));
        let exists = json!({"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"});
        assert_eq!(time(&unreachable, std::slice::from_ref(&exists)), None);
        let mut for30 = exists.clone();
        for30["tolerationSeconds"] = json!(30);
        assert_eq!(
            time(&unreachable, &[for30.clone()]),
            Some(Duration::from_secs(30))
        );
        let mut zero = exists;
        zero["tolerationSeconds"] = json!(0);
        assert_eq!(time(&unreachable, &[zero]), Some(Duration::ZERO));
        // Every taint must be tolerated; the shortest time wins.
        let two = [
            taint(UNREACHABLE, "", "NoExecute"),
            taint("example.com/x", "v", "NoExecute"),
        ];
        assert_eq!(time(&two, &[for30.clone()]), Some(Duration::ZERO));
        let eq = json!({"key": "example.com/x", "operator": "Equal", "value": "v", "tolerationSeconds": 10});
        assert_eq!(
            time(&two, &[for30.clone(), eq]),
            Some(Duration::from_secs(10))
        );
        let wrong_value = json!({"key": "example.com/x", "value": "w"});
        assert!(!all_tolerated(&two, &[for30.clone(), wrong_value], false));
        // An empty key with Exists tolerates everything.
        assert_eq!(time(&two, &[json!({"operator": "Exists"})]), None);
        // An effect that differs does not tolerate.
        let other = json!({"key": UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"});
        assert!(!tolerates(&other, &unreachable[0]));
    }

    #[test]
    fn comparison_operators_only_with_their_gate() {
        let t = taint("example.com/level", "5", "NoExecute");
        let lt = json!({"key": "example.com/level", "operator": "Lt", "value": "10"});
        let gt = json!({"key": "example.com/level", "operator": "Gt", "value": "10"});
        assert!(!tolerates(&lt, &t), "off by default");
        assert!(tolerates_with(&lt, &t, true));
        assert!(!tolerates_with(&gt, &t, true));
        assert!(tolerates_with(
            &gt,
            &taint("example.com/level", "11", "NoExecute"),
            true
        ));
        // Not decimal integers: no match.
        for bad in ["05", "+5", "5.0", "", "x", "-0", "99999999999999999999"] {
            assert!(
                !tolerates_with(&lt, &taint("example.com/level", bad, "NoExecute"), true),
                "{bad}"
            );
        }
        assert!(tolerates_with(
            &lt,
            &taint("example.com/level", "-3", "NoExecute"),
            true
        ));
    }
}
