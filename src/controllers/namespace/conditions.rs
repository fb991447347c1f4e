//! The five conditions a terminating namespace reports (`NamespaceDeletion*Failure`,
//! `Namespace*Remaining`), their reasons and messages as upstream words them.

use crate::controllers::kit::conditions;
use serde_json::Value;
use std::collections::BTreeMap;

pub const DISCOVERY_FAILURE: &str = "NamespaceDeletionDiscoveryFailure";
pub const GV_PARSING_FAILURE: &str = "NamespaceDeletionGroupVersionParsingFailure";
pub const CONTENT_FAILURE: &str = "NamespaceDeletionContentFailure";
pub const CONTENT_REMAINING: &str = "NamespaceContentRemaining";
pub const FINALIZERS_REMAINING: &str = "NamespaceFinalizersRemaining";

/// The condition types this controller maintains, in upstream's order, with the reason and
/// message of their "all is well" (status False) form.
pub const CONDITIONS: [(&str, &str, &str); 5] = [
    (
        DISCOVERY_FAILURE,
        "ResourcesDiscovered",
        "All resources successfully discovered",
    ),
    (
        GV_PARSING_FAILURE,
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    ),
    (
        CONTENT_FAILURE,
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    (
        CONTENT_REMAINING,
        "ContentRemoved",
        "All content successfully removed",
    ),
    (
        FINALIZERS_REMAINING,
        "ContentHasNoFinalizers",
        "All content-preserving finalizers finished",
    ),
];

/// A failing condition found by one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    pub type_: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// Collects what one pass found and turns it into conditions (upstream's
/// `namespaceConditionUpdater`).
#[derive(Debug, Default)]
pub struct Conditions {
    failing: Vec<Failing>,
    delete_errors: Vec<String>,
}

impl Conditions {
    /// Discovery failed: `partial` when only some group versions failed (`failed` of them).
    pub fn discovery_failed(&mut self, message: &str, partial_failed: Option<usize>) {
        let message = match partial_failed {
            Some(n) => format!("Discovery failed for some groups, {n} failing: {message}"),
            None => message.to_string(),
        };
        self.failing.push(Failing {
            type_: DISCOVERY_FAILURE,
            reason: "DiscoveryFailed",
            message,
        });
    }

    pub fn group_version_failed(&mut self, message: &str) {
        self.failing.push(Failing {
            type_: GV_PARSING_FAILURE,
            reason: "GroupVersionParsingFailed",
            message: message.to_string(),
        });
    }

    pub fn delete_failed(&mut self, message: String) {
        self.delete_errors.push(message);
    }

    /// What remains: instances per resource (`pods.`, `deployments.apps`, keyed as upstream
    /// prints them) and per finalizer.
    pub fn content_totals(
        &mut self,
        remaining: &BTreeMap<String, usize>,
        finalizers: &BTreeMap<String, usize>,
    ) {
        let mut parts: Vec<String> = remaining
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| format!("{r} has {n} resource instances"))
            .collect();
        if !remaining.is_empty() {
            crate::sort::sort(&mut parts[..]);
            self.failing.push(Failing {
                type_: CONTENT_REMAINING,
                reason: "SomeResourcesRemain",
                message: format!("Some resources are remaining: {}", parts.join(", ")),
            });
        }
        let mut parts: Vec<String> = finalizers
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect();
        if !finalizers.is_empty() {
            crate::sort::sort(&mut parts[..]);
            self.failing.push(Failing {
                type_: FINALIZERS_REMAINING,
                reason: "SomeFinalizersRemain",
                message: format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    parts.join(", ")
                ),
            });
        }
    }

    /// The failing conditions, the content-deletion one made from the collected errors.
    pub fn failing(&self) -> Vec<Failing> {
        let mut out = self.failing.clone();
        if !self.delete_errors.is_empty() && !out.iter().any(|f| f.type_ == CONTENT_FAILURE) {
            let mut msgs = self.delete_errors.clone();
            crate::sort::sort(&mut msgs[..]);
            out.push(Failing {
                type_: CONTENT_FAILURE,
                reason: "ContentDeletionFailed",
                message: format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    msgs.len(),
                    msgs.join(", ")
                ),
            });
        }
        out
    }

    /// Write the five conditions into `status` (a Namespace's `status`); true when anything
    /// changed. A condition's `lastTransitionTime` moves only when its status does.
    pub fn apply(&self, status: &mut Value, now: &str) -> bool {
        let failing = self.failing();
        let list = conditions::list_mut(status);
        let mut changed = false;
        for (type_, ok_reason, ok_message) in CONDITIONS {
            let (status, reason, message) = match failing.iter().find(|f| f.type_ == type_) {
                Some(f) => ("True", f.reason, f.message.as_str()),
                None => ("False", ok_reason, ok_message),
            };
            let c = conditions::Condition {
                type_,
                status,
                reason,
                message,
            };
            changed |= conditions::set_in_place(list, &c, now);
        }
        changed
    }
}
