//! `spec.successPolicy` of Indexed Jobs (upstream's `success_policy.go`; JobSuccessPolicy,
//! GA in v1.33): the first rule met by the succeeded indexes declares the Job succeeded
//! (`SuccessCriteriaMet` with reason `SuccessPolicy`, then `Complete`), its remaining pods
//! are deleted.

use super::indexes::Intervals;
use crate::obj::At as _;
use serde_json::Value;

/// The message of the first rule the succeeded indexes meet (upstream's
/// `matchSuccessPolicy`): `Matched rules at index <i>`.
pub fn matched(job: &Value, completions: usize, succeeded: &Intervals) -> Option<String> {
    let rules = job.at("/spec/successPolicy/rules")?.as_array()?;
    if succeeded.0.is_empty() {
        return None;
    }
    for (i, rule) in rules.iter().enumerate() {
        let count = rule.get("succeededCount").and_then(Value::as_u64);
        let hit = match rule.get("succeededIndexes").and_then(Value::as_str) {
            Some(ixs) => {
                let required = Intervals::parse(ixs, completions);
                // A rule whose indexes do not parse (or are all out of range) matches nothing.
                !required.0.is_empty() && indexes_rule_met(&required, succeeded, count)
            }
            None => count.is_some_and(|c| succeeded.total() as u64 >= c),
        };
        if hit {
            return Some(format!("Matched rules at index {i}"));
        }
    }
    None
}

/// Every required index succeeded, or at least `count` of them (upstream's
/// `matchSucceededIndexesRule`).
fn indexes_rule_met(required: &Intervals, succeeded: &Intervals, count: Option<u64>) -> bool {
    let contains: usize = required
        .0
        .iter()
        .map(|&(rf, rl)| {
            succeeded
                .0
                .iter()
                .map(|&(sf, sl)| (rl.min(sl) + 1).saturating_sub(rf.max(sf)))
                .sum::<usize>()
        })
        .sum();
    contains == required.total() || count.is_some_and(|c| contains as u64 >= c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(rules: Value) -> Value {
        json!({"spec": {"completionMode": "Indexed", "completions": 10,
            "successPolicy": {"rules": rules}}})
    }

    #[test]
    fn rules_match_by_indexes_count_or_both() {
        let ok = |s: &str| Intervals::parse(s, 10);
        let j = job(json!([{"succeededIndexes": "0,2-4"}]));
        assert_eq!(matched(&j, 10, &ok("0,2,3")), None);
        assert_eq!(
            matched(&j, 10, &ok("0-5")).as_deref(),
            Some("Matched rules at index 0")
        );
        let j = job(json!([{"succeededIndexes": "9"}, {"succeededCount": 3}]));
        assert_eq!(matched(&j, 10, &ok("0,1")), None);
        assert_eq!(
            matched(&j, 10, &ok("0,1,5")).as_deref(),
            Some("Matched rules at index 1")
        );
        assert_eq!(
            matched(&j, 10, &ok("9")).as_deref(),
            Some("Matched rules at index 0")
        );
        let j = job(json!([{"succeededIndexes": "1-7", "succeededCount": 2}]));
        assert_eq!(matched(&j, 10, &ok("0,8,9,1")), None, "one of 1-7 only");
        assert!(matched(&j, 10, &ok("3,5")).is_some());
        // Nothing succeeded, no policy, or a rule beyond completions: no match.
        assert_eq!(matched(&j, 10, &Intervals::default()), None);
        assert_eq!(matched(&json!({"spec": {}}), 10, &ok("1")), None);
        let j = job(json!([{"succeededIndexes": "12-15"}]));
        assert_eq!(matched(&j, 10, &ok("0-9")), None);
    }
}
