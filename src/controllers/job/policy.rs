//! Pod failures as a Job sees them (upstream's `isPodFailed`, `onlyReplaceFailedPods` and
//! `pod_failure_policy.go` as of v1.37: JobPodFailurePolicy, JobPodReplacementPolicy and
//! JobBackoffLimitPerIndex GA, so `FailIndex` rules fail the pod's index).

use crate::controllers::kit::pod::phase;
use crate::obj::{self, At as _};
use serde_json::Value;

/// What a matched rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyAction {
    FailJob,
    FailIndex,
    Ignore,
    Count,
}

impl PolicyAction {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyAction::FailJob => "FailJob",
            PolicyAction::FailIndex => "FailIndex",
            PolicyAction::Ignore => "Ignore",
            PolicyAction::Count => "Count",
        }
    }
}

/// The outcome of matching a failed pod against the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    /// The message of the job's failure (a `FailJob` rule matched).
    pub fail_job: Option<String>,
    /// Whether the failure counts towards backoffLimit (not when an `Ignore` rule matched).
    pub counts: bool,
    pub action: Option<PolicyAction>,
}

pub fn policy(job: &Value) -> Option<&Value> {
    job.at("/spec/podFailurePolicy").filter(|p| p.is_object())
}

/// Replace only failed pods: `spec.podReplacementPolicy: Failed` (JobPodReplacementPolicy,
/// GA in v1.34). kube-apiserver defaults the field to `Failed` for a Job with a pod failure
/// policy and to `TerminatingOrFailed` otherwise; a Job read without it gets that default.
pub fn only_replace_failed(job: &Value) -> bool {
    match job.at("/spec/podReplacementPolicy").and_then(Value::as_str) {
        Some(p) => p == "Failed",
        None => policy(job).is_some(),
    }
}

/// Whether the pod counts as failed for the job: Failed, or (unless only failed pods are
/// replaced) deleted before it succeeded.
pub fn is_pod_failed(pod: &Value, job: &Value) -> bool {
    let ph = phase(pod);
    if ph == "Failed" {
        return true;
    }
    if only_replace_failed(job) {
        return false;
    }
    obj::is_deleting(pod) && ph != "Succeeded"
}

fn arr(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn terminated_exit_code(cs: &Value) -> Option<i64> {
    cs.at("/state/terminated").filter(|t| t.is_object())?;
    Some(
        cs.at("/state/terminated/exitCode")
            .and_then(Value::as_i64)
            .unwrap_or(0),
    )
}

/// The first terminated container (then init container) with a non-zero exit code that
/// the requirement matches: (name, exit code).
fn match_exit_codes(pod: &Value, req: &Value) -> Option<(String, i64)> {
    let want_name = req.get("containerName").and_then(Value::as_str);
    let op = req.get("operator").and_then(Value::as_str).unwrap_or("");
    let values: Vec<i64> = arr(req.get("values"))
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    for list in ["/status/containerStatuses", "/status/initContainerStatuses"] {
        for cs in arr(pod.at(list)) {
            let Some(code) = terminated_exit_code(cs) else {
                continue;
            };
            let name = cs.get("name").and_then(Value::as_str).unwrap_or("");
            if want_name.is_some_and(|w| w != name) || code == 0 {
                continue;
            }
            let hit = match op {
                "In" => values.contains(&code),
                "NotIn" => !values.contains(&code),
                _ => false,
            };
            if hit {
                return Some((name.to_string(), code));
            }
        }
    }
    None
}

/// The first pod condition matching one of the patterns: its type.
fn match_conditions(pod: &Value, patterns: &[Value]) -> Option<String> {
    for c in arr(pod.at("/status/conditions")) {
        for p in patterns {
            if c.get("type") == p.get("type") && c.get("status") == p.get("status") {
                return Some(
                    c.get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                );
            }
        }
    }
    None
}

fn action_of(rule: &Value) -> Option<PolicyAction> {
    match rule.get("action").and_then(Value::as_str)? {
        "FailJob" => Some(PolicyAction::FailJob),
        "Ignore" => Some(PolicyAction::Ignore),
        "Count" => Some(PolicyAction::Count),
        "FailIndex" => Some(PolicyAction::FailIndex),
        _ => None,
    }
}

/// Match a failed pod against the job's pod failure policy (upstream's
/// `matchPodFailurePolicy`); without a policy the failure counts.
pub fn match_policy(job: &Value, pod: &Value) -> Matched {
    let none = Matched {
        fail_job: None,
        counts: true,
        action: None,
    };
    let Some(pol) = policy(job) else {
        return none;
    };
    let (ns, name) = (obj::namespace(pod), obj::name(pod));
    for (i, rule) in arr(pol.get("rules")).iter().enumerate() {
        let on_exit = rule.get("onExitCodes").filter(|v| v.is_object());
        let on_cond = rule.get("onPodConditions").filter(|v| v.is_array());
        let what = if let Some(req) = on_exit {
            match_exit_codes(pod, req).map(|(c, code)| {
                move |a: &str| {
                    format!(
                        "Container {c} for pod {ns}/{name} failed with exit code {code} matching {a} rule at index {i}"
                    )
                }
            })
            .map(|f| Box::new(f) as Box<dyn Fn(&str) -> String>)
        } else if let Some(pats) = on_cond {
            match_conditions(pod, arr(Some(pats))).map(|t| {
                Box::new(move |a: &str| {
                    format!("Pod {ns}/{name} has condition {t} matching {a} rule at index {i}")
                }) as Box<dyn Fn(&str) -> String>
            })
        } else {
            None
        };
        let Some(message) = what else { continue };
        match action_of(rule) {
            Some(PolicyAction::Ignore) => {
                return Matched {
                    fail_job: None,
                    counts: false,
                    action: Some(PolicyAction::Ignore),
                }
            }
            Some(a @ (PolicyAction::Count | PolicyAction::FailIndex)) => {
                return Matched {
                    fail_job: None,
                    counts: true,
                    action: Some(a),
                }
            }
            Some(PolicyAction::FailJob) => {
                return Matched {
                    fail_job: Some(message("FailJob")),
                    counts: true,
                    action: Some(PolicyAction::FailJob),
                }
            }
            None => {}
        }
    }
    none
}
