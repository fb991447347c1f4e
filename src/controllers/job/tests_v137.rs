//! Unit tests of what v1.29-v1.37 added: the success policy, podReplacementPolicy,
//! managedBy, backoffLimitPerIndex and FailIndex.

use super::backoff::Record;
use super::finish;
use super::indexes;
use super::perindex;
use super::policy::{self, PolicyAction};
use super::sync::{Mode, TRACKING_FINALIZER};
use super::tests::{cond, exited, job, plan, plan_of, pod, status, with_index, with_policy, NOW};
use serde_json::{json, Value};
use std::time::Duration;

#[test]
fn a_met_success_policy_deletes_the_rest_then_completes() {
    let mut j = job(
        json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3,
        "successPolicy": {"rules": [{"succeededIndexes": "0"}]}}),
    );
    j["status"] = json!({"startTime": NOW, "active": 3, "ready": 0, "terminating": 0});
    let done = with_index(pod("a", "Succeeded", true), 0);
    let (b, c) = (
        with_index(pod("b", "Running", true), 1),
        with_index(pod("c", "Running", true), 2),
    );
    let p = plan(&j, &[done.clone(), b.clone(), c.clone()]);
    assert_eq!(p.deletes.len(), 2);
    assert!(p.deletes.iter().all(|d| !d.remove_finalizer));
    let deleting = |mut p: Value| {
        p["metadata"]["deletionTimestamp"] = json!(NOW);
        p
    };
    let pods = [done, deleting(b), deleting(c)];
    let p = plan_of(&j, &pods, Mode::After, Record::default());
    let st = status(&p);
    let scm = cond(st, "SuccessCriteriaMet").expect("SuccessCriteriaMet");
    assert_eq!(scm["reason"], "SuccessPolicy");
    assert_eq!(scm["message"], "Matched rules at index 0");
    assert!(cond(st, "Complete").is_none());
    assert_eq!(st["terminating"], 2);
    assert_eq!(st["completedIndexes"], "0");
    assert_eq!(p.removals.len(), 3);
    assert_eq!(
        st["uncountedTerminatedPods"],
        json!({}),
        "the deleted pods are not failures"
    );
    // The pods are gone: Complete with the policy's reason.
    let mut j2 = p.status.clone().unwrap();
    j2["status"]["uncountedTerminatedPods"] = json!({});
    let p = plan(&j2, &[]);
    let st = status(&p);
    let c = cond(st, "Complete").expect("Complete");
    assert_eq!(c["reason"], "SuccessPolicy");
    assert_eq!(c["message"], "Matched rules at index 0");
    assert!(st["completionTime"].is_string());
    assert_eq!(st["terminating"], 0);
    assert!(p.events.iter().any(|e| e.1 == "Completed"));
}

#[test]
fn a_job_managed_elsewhere_is_not_ours() {
    let j = job(json!({"managedBy": "example.com/queue"}));
    assert!(finish::managed_elsewhere(&j));
    let j = job(json!({"managedBy": "kubernetes.io/job-controller"}));
    assert!(!finish::managed_elsewhere(&j));
    assert!(!finish::managed_elsewhere(&job(json!({}))));
}

#[test]
fn replacement_waits_for_terminating_pods_only_with_the_failed_policy() {
    let mut deleting = pod("t", "Running", true);
    deleting["metadata"]["deletionTimestamp"] = json!(NOW);
    deleting["metadata"]["finalizers"] = json!([TRACKING_FINALIZER, "example.com/keep"]);
    for policy in ["TerminatingOrFailed", "Failed"] {
        let mut j = job(json!({"completions": 1, "parallelism": 1,
            "podReplacementPolicy": policy}));
        j["status"] = json!({"startTime": NOW, "active": 1, "ready": 0, "terminating": 0});
        let p = plan(&j, std::slice::from_ref(&deleting));
        assert!(p.creates.is_empty(), "{policy}");
        let st = status(&p);
        assert_eq!(st["terminating"], 1, "{policy}");
        if policy == "Failed" {
            // Not failed: nothing counted, the finalizer stays, nothing to wait for.
            assert!(st["uncountedTerminatedPods"].get("failed").is_none());
            assert!(p.removals.is_empty());
            assert_eq!(p.requeue, None);
        } else {
            // Failed at once: counted, replaced after the recreation backoff.
            assert_eq!(st["uncountedTerminatedPods"]["failed"], json!(["u-t"]));
            assert_eq!(p.removals, vec!["t".to_string()]);
            assert_eq!(p.requeue, Some(Duration::from_secs(10)));
        }
    }
    // Without the field, a Job with a pod failure policy replaces only failed pods.
    let j = with_policy(
        json!([{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}}]),
    );
    assert!(policy::only_replace_failed(&j));
    assert!(!policy::only_replace_failed(&job(json!({}))));
}

fn per_index_job(extra: Value) -> Value {
    let mut j = job(
        json!({"completionMode": "Indexed", "completions": 2, "parallelism": 2,
        "backoffLimitPerIndex": 1}),
    );
    for (k, v) in extra.as_object().unwrap() {
        j["spec"][k] = v.clone();
    }
    j["spec"].as_object_mut().unwrap().remove("backoffLimit");
    j["status"] = json!({"startTime": NOW, "active": 1, "ready": 0, "terminating": 0});
    j
}

#[test]
fn a_failed_index_is_retried_with_its_count_after_its_own_backoff() {
    let j = per_index_job(json!({}));
    let running = with_index(pod("b", "Running", true), 1);
    // Failed a second ago: the index waits 10 s; its pod keeps the finalizer meanwhile.
    let failed = with_index(
        exited(pod("a", "Failed", true), "c", 1, "2024-01-01T00:09:59Z"),
        0,
    );
    let p = plan(&j, &[failed.clone(), running.clone()]);
    assert!(p.creates.is_empty());
    assert_eq!(p.requeue, Some(Duration::from_secs(9)));
    assert!(p.removals.is_empty(), "kept for the replacement's count");
    assert_eq!(status(&p)["failedIndexes"], "");
    // A minute ago: the replacement carries the failure count.
    let failed = with_index(
        exited(pod("a", "Failed", true), "c", 1, "2024-01-01T00:09:00Z"),
        0,
    );
    let p = plan(&j, &[failed.clone(), running.clone()]);
    assert_eq!(p.creates.len(), 1);
    let ann = &p.creates[0]["metadata"]["annotations"];
    assert_eq!(ann[indexes::COMPLETION_INDEX], "0");
    assert_eq!(ann[perindex::FAILURE_COUNT], "1");
    assert!(ann.get(perindex::IGNORED_FAILURE_COUNT).is_none());
    // Once the replacement runs, the failed pod is counted and released.
    let mut again = with_index(pod("a2", "Running", true), 0);
    again["metadata"]["annotations"][perindex::FAILURE_COUNT] = json!("1");
    let p = plan(&j, &[failed, running.clone(), again.clone()]);
    assert_eq!(p.removals, vec!["a".to_string()]);
    assert_eq!(
        status(&p)["uncountedTerminatedPods"]["failed"],
        json!(["u-a"])
    );
    // The replacement fails too: the index has failed; with index 1 done, the Job fails.
    let mut failed2 = exited(again, "c", 1, NOW);
    failed2["status"]["phase"] = json!("Failed");
    let ok = with_index(pod("b", "Succeeded", true), 1);
    let p = plan(&j, &[failed2, ok]);
    let st = status(&p);
    assert_eq!(st["failedIndexes"], "0");
    assert_eq!(st["completedIndexes"], "1");
    let ft = cond(st, "FailureTarget").expect("FailureTarget");
    assert_eq!(ft["reason"], "FailedIndexes");
    assert_eq!(ft["message"], "Job has failed indexes");
    let mut j2 = p.status.clone().unwrap();
    j2["status"]["uncountedTerminatedPods"] = json!({});
    let p = plan(&j2, &[]);
    assert_eq!(
        cond(status(&p), "Failed").unwrap()["reason"],
        "FailedIndexes"
    );
    assert!(p
        .events
        .iter()
        .any(|e| e.0 && e.1 == "FailedIndexes" && e.2 == "Job has failed indexes"));
}

#[test]
fn max_failed_indexes_and_fail_index_rules_fail_the_job() {
    let j = per_index_job(json!({"completions": 4, "maxFailedIndexes": 0,
        "podFailurePolicy": {"rules": [{"action": "FailIndex",
            "onExitCodes": {"operator": "In", "values": [42]}}]}}));
    let failed = with_index(exited(pod("a", "Failed", true), "c", 42, NOW), 2);
    let p = plan(&j, &[failed, with_index(pod("b", "Running", true), 1)]);
    assert_eq!(p.deletes.len(), 1, "the running pod goes first");
    let p = plan(
        &j,
        &[with_index(
            exited(pod("a", "Failed", true), "c", 42, NOW),
            2,
        )],
    );
    let st = status(&p);
    assert_eq!(st["failedIndexes"], "2");
    let ft = cond(st, "FailureTarget").expect("FailureTarget");
    assert_eq!(ft["reason"], "MaxFailedIndexesExceeded");
    assert_eq!(
        ft["message"],
        "Job has exceeded the specified maximal number of failed indexes"
    );
    let m = policy::match_policy(&j, &exited(pod("x", "Failed", true), "c", 42, NOW));
    assert_eq!(m.action, Some(PolicyAction::FailIndex));
    assert!(m.counts);
}

#[test]
fn an_indexed_job_scaled_down_drops_the_indexes_beyond_its_completions() {
    // Was completions 4 (parallelism 4); now 2: indexes 2 and 3 are beyond the Job.
    let mut j = job(json!({"completionMode": "Indexed", "completions": 2, "parallelism": 2}));
    j["status"] = json!({"startTime": NOW, "active": 3, "ready": 0, "terminating": 0,
        "succeeded": 2, "completedIndexes": "0,3"});
    let pods = [
        with_index(pod("b", "Running", true), 1),
        with_index(pod("c", "Running", true), 2),
    ];
    let p = plan(&j, &pods);
    let gone: Vec<&str> = p.deletes.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(gone, ["c"], "the pod of index 2 goes");
    let p = plan_of(&j, &pods[..1], Mode::After, Record::default());
    let st = status(&p);
    assert_eq!(st["completedIndexes"], "0");
    assert_eq!(st["succeeded"], 1);
    assert_eq!(st["active"], 1);
}
