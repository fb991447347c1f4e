//! job-controller scenarios for what v1.29-v1.37 added: the finished Job waits for its
//! terminating pods, `podReplacementPolicy`, `spec.managedBy`. Against the sandbox always and
//! a real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`). The tests play kubelet; a pod
//! is kept terminating by a finalizer of the test's own.

use crate::common::*;
use crate::e2e_job::{
    condition, create_job, finish_pod, get_job, job_pods, new_ns, uid, wait_active, wait_condition,
    wait_event, CONTROLLERS, FINALIZER, LIMIT,
};
use edgekcm::api::client::{Client, DeleteOptions, PatchType};
use edgekcm::api::resources::PODS;
use serde_json::{json, Value};
use std::time::Duration;

const KEEP: &str = "example.com/keep";

fn name_of(p: &Value) -> String {
    p["metadata"]["name"].as_str().unwrap_or("").to_string()
}

/// The pod gets the test's finalizer beside the tracking one.
fn keep(admin: &Client, ns: &str, pod: &str) {
    admin
        .patch(
            &PODS,
            Some(ns),
            pod,
            PatchType::Merge,
            &json!({"metadata": {"finalizers": [FINALIZER, KEEP]}}),
            None,
        )
        .expect("add finalizer");
}

/// The test's finalizer goes (the tracking one too if still there: the pod is then gone).
fn release(admin: &Client, ns: &str, pod: &str) {
    let _ = admin.patch(
        &PODS,
        Some(ns),
        pod,
        PatchType::Strategic,
        &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [KEEP]}}),
        None,
    );
}

fn delete(admin: &Client, ns: &str, pod: &str) {
    admin
        .delete(&PODS, Some(ns), pod, &DeleteOptions::default())
        .expect("delete pod");
}

/// The Job fails (FailureTarget at once), but the Failed condition, its Event and the
/// counters wait until its last pod is no longer terminating; `status.terminating` says how
/// many are.
fn scenario_failed_waits_for_terminating_pods(t: &Target) {
    let ns = new_ns(t, "job-term");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-term", CONTROLLERS);
    let j = create_job(
        admin,
        n,
        "tm",
        json!({"completions": 2, "parallelism": 2, "backoffLimit": 0}),
    );
    let id = uid(&j);
    let pods = wait_active(admin, n, &id, 2);
    let (kept, failing) = (name_of(&pods[0]), name_of(&pods[1]));
    keep(admin, n, &kept);
    finish_pod(admin, n, &failing, 1);
    let j = wait_condition(admin, n, "tm", "FailureTarget");
    let ft = condition(&j, "FailureTarget").unwrap();
    assert_eq!(ft["reason"], "BackoffLimitExceeded");
    eventually(LIMIT, "one terminating", || {
        (get_job(admin, n, "tm")["status"]["terminating"] == 1).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let j = get_job(admin, n, "tm");
    assert!(
        condition(&j, "Failed").is_none(),
        "not Failed while a pod terminates: {}",
        j["status"]
    );
    assert_eq!(j["status"]["terminating"], 1, "{}", j["status"]);
    release(admin, n, &kept);
    let j = wait_condition(admin, n, "tm", "Failed");
    let c = condition(&j, "Failed").unwrap();
    assert_eq!(c["reason"], "BackoffLimitExceeded");
    assert_eq!(j["status"]["terminating"], 0);
    assert_eq!(j["status"]["failed"], 2);
    assert!(j["status"]["active"].is_null());
    wait_event(admin, n, "tm", "BackoffLimitExceeded");
}

/// `podReplacementPolicy`: TerminatingOrFailed (the default) counts a deleted pod as failed
/// and replaces it while it terminates; Failed waits until it is Failed.
fn scenario_pod_replacement_policy(t: &Target) {
    let ns = new_ns(t, "job-prp");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-prp", CONTROLLERS);
    let spec = |policy: &str| {
        json!({"completions": 1, "parallelism": 1, "backoffLimit": 3,
            "podReplacementPolicy": policy})
    };
    let tof = create_job(admin, n, "tof", spec("TerminatingOrFailed"));
    let fail = create_job(admin, n, "fail", spec("Failed"));
    let (tof_id, fail_id) = (uid(&tof), uid(&fail));
    let tof_pod = name_of(&wait_active(admin, n, &tof_id, 1)[0]);
    let fail_pod = name_of(&wait_active(admin, n, &fail_id, 1)[0]);
    for p in [&tof_pod, &fail_pod] {
        keep(admin, n, p);
        delete(admin, n, p);
    }
    // TerminatingOrFailed: failed at once, replaced (after the 10 s recreation backoff).
    eventually(LIMIT, "tof: failed 1 and terminating 1", || {
        let s = &get_job(admin, n, "tof")["status"];
        (s["failed"] == 1 && s["terminating"] == 1).then_some(())
    });
    let replaced = wait_active(admin, n, &tof_id, 1);
    assert_ne!(name_of(&replaced[0]), tof_pod);
    // Failed: not counted, not replaced while terminating.
    let s = get_job(admin, n, "fail")["status"].clone();
    assert_eq!(s["terminating"], 1, "{s}");
    assert!(s["failed"].is_null(), "{s}");
    assert_eq!(job_pods(admin, n, &fail_id).len(), 1, "not replaced yet");
    finish_pod(admin, n, &fail_pod, 1);
    eventually(LIMIT, "fail: failed 1 and terminating 0", || {
        let s = &get_job(admin, n, "fail")["status"];
        (s["failed"] == 1 && s["terminating"] == 0).then_some(())
    });
    let replaced = wait_active(admin, n, &fail_id, 1);
    assert_ne!(name_of(&replaced[0]), fail_pod);
    for p in [&tof_pod, &fail_pod] {
        release(admin, n, p);
    }
}

/// A Job whose `spec.managedBy` names another controller is left alone: no pods, no status;
/// a Job naming the job controller is run as any other.
fn scenario_managed_by(t: &Target) {
    let ns = new_ns(t, "job-mb");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-mb", CONTROLLERS);
    let other = create_job(
        admin,
        n,
        "other",
        json!({"completions": 1, "managedBy": "example.com/queue"}),
    );
    let ours = create_job(
        admin,
        n,
        "ours",
        json!({"completions": 1, "managedBy": "kubernetes.io/job-controller"}),
    );
    let pods = wait_active(admin, n, &uid(&ours), 1);
    finish_pod(admin, n, &name_of(&pods[0]), 0);
    wait_condition(admin, n, "ours", "Complete");
    std::thread::sleep(Duration::from_secs(1));
    assert!(job_pods(admin, n, &uid(&other)).is_empty(), "no pods");
    let st = &get_job(admin, n, "other")["status"];
    assert!(
        st.as_object().is_none_or(|m| m.is_empty()),
        "status untouched: {st}"
    );
}

/// `successPolicy`: index 0 succeeding meets the rule; the other pods are deleted and the
/// Job completes with the policy's reason once they are gone.
fn scenario_success_policy(t: &Target) {
    let ns = new_ns(t, "job-sp");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-sp", CONTROLLERS);
    let j = create_job(
        admin,
        n,
        "sp",
        json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
            "successPolicy": {"rules": [{"succeededIndexes": "0"}]}}),
    );
    let id = uid(&j);
    let pods = wait_active(admin, n, &id, 3);
    let leader = pods
        .iter()
        .find(|p| p["metadata"]["annotations"][crate::e2e_job::INDEX] == "0")
        .expect("index 0");
    finish_pod(admin, n, &name_of(leader), 0);
    let j = wait_condition(admin, n, "sp", "Complete");
    for t in ["SuccessCriteriaMet", "Complete"] {
        let c = condition(&j, t).unwrap();
        assert_eq!(c["reason"], "SuccessPolicy", "{t}");
        assert_eq!(c["message"], "Matched rules at index 0", "{t}");
    }
    assert_eq!(j["status"]["completedIndexes"], "0");
    assert_eq!(j["status"]["succeeded"], 1);
    assert!(
        j["status"]["failed"].is_null(),
        "the deleted pods are not failures"
    );
    assert_eq!(j["status"]["terminating"], 0);
    wait_event(admin, n, "sp", "Completed");
    eventually(LIMIT, "the other pods gone", || {
        (job_pods(admin, n, &id).len() == 1).then_some(())
    });
}

/// `backoffLimitPerIndex: 0`: index 0 fails at its first failure and is not started again;
/// index 1 succeeds; the Job fails with `FailedIndexes` once every index is done.
fn scenario_backoff_limit_per_index(t: &Target) {
    let ns = new_ns(t, "job-bpi");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-bpi", CONTROLLERS);
    let j = create_job(
        admin,
        n,
        "bpi",
        json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed",
            "backoffLimitPerIndex": 0}),
    );
    let id = uid(&j);
    let pods = wait_active(admin, n, &id, 2);
    let of = |ix: &str| {
        name_of(
            pods.iter()
                .find(|p| p["metadata"]["annotations"][crate::e2e_job::INDEX] == ix)
                .expect("index"),
        )
    };
    assert_eq!(
        pods[0]["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"],
        "0"
    );
    finish_pod(admin, n, &of("0"), 1);
    eventually(LIMIT, "failedIndexes 0", || {
        (get_job(admin, n, "bpi")["status"]["failedIndexes"] == "0").then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        job_pods(admin, n, &id).len(),
        2,
        "index 0 not started again"
    );
    finish_pod(admin, n, &of("1"), 0);
    let j = wait_condition(admin, n, "bpi", "Failed");
    for t in ["FailureTarget", "Failed"] {
        let c = condition(&j, t).unwrap();
        assert_eq!(c["reason"], "FailedIndexes", "{t}");
        assert_eq!(c["message"], "Job has failed indexes", "{t}");
    }
    assert_eq!(j["status"]["failedIndexes"], "0");
    assert_eq!(j["status"]["completedIndexes"], "1");
    assert_eq!(j["status"]["failed"], 1);
    assert_eq!(j["status"]["succeeded"], 1);
    wait_event(admin, n, "bpi", "FailedIndexes");
}

/// Elastic Indexed Job: completions and parallelism lowered together from 3 to 1 after index
/// 0 succeeded; the pods of indexes 1 and 2 go and the Job completes with index 0.
fn scenario_elastic_indexed(t: &Target) {
    let ns = new_ns(t, "job-el");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-el", CONTROLLERS);
    let j = create_job(
        admin,
        n,
        "el",
        json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed"}),
    );
    let id = uid(&j);
    let pods = wait_active(admin, n, &id, 3);
    let zero = pods
        .iter()
        .find(|p| p["metadata"]["annotations"][crate::e2e_job::INDEX] == "0")
        .expect("index 0");
    finish_pod(admin, n, &name_of(zero), 0);
    eventually(LIMIT, "index 0 counted", || {
        (get_job(admin, n, "el")["status"]["completedIndexes"] == "0").then_some(())
    });
    let mut j = get_job(admin, n, "el");
    j["spec"]["completions"] = json!(1);
    j["spec"]["parallelism"] = json!(1);
    admin
        .update(&edgekcm::api::resources::JOBS, &j)
        .expect("scale down");
    let j = wait_condition(admin, n, "el", "Complete");
    assert_eq!(j["status"]["completedIndexes"], "0");
    assert_eq!(j["status"]["succeeded"], 1);
    assert_eq!(
        condition(&j, "SuccessCriteriaMet").unwrap()["reason"],
        "CompletionsReached"
    );
    eventually(LIMIT, "the pods of indexes 1 and 2 gone", || {
        (job_pods(admin, n, &id).len() == 1).then_some(())
    });
}

scenarios! {
    elastic_indexed => scenario_elastic_indexed,
    backoff_limit_per_index => scenario_backoff_limit_per_index,
    success_policy => scenario_success_policy,
    failed_waits_for_terminating_pods => scenario_failed_waits_for_terminating_pods,
    pod_replacement_policy => scenario_pod_replacement_policy,
    managed_by => scenario_managed_by,
}
