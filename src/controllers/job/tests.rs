use super::backoff::{self, Record};
use super::indexes::{self, Intervals};
use super::policy::{self, PolicyAction};
use super::sync::{self, Input, Mode, Plan, TRACKING_FINALIZER};
use super::*;
use crate::controllers::testing::Harness;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub(super) const NOW: &str = "2024-01-01T00:10:00Z";

pub(super) fn now() -> SystemTime {
    crate::compat::timefmt::parse_rfc3339(NOW).unwrap()
}

pub(super) fn job(spec: Value) -> Value {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi", "namespace": "ns", "uid": "job-uid", "resourceVersion": "5"},
        "spec": {"parallelism": 2, "completions": 3, "backoffLimit": 6,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "job-uid"}},
            "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "job-uid",
                "batch.kubernetes.io/job-name": "pi", "controller-uid": "job-uid", "job-name": "pi"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
        "status": {}});
    for (k, v) in spec.as_object().unwrap() {
        j["spec"][k] = v.clone();
    }
    j
}

pub(super) fn pod(name: &str, phase: &str, finalizer: bool) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"), "resourceVersion": "7",
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "labels": {"batch.kubernetes.io/controller-uid": "job-uid"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": "job-uid",
                "controller": true, "blockOwnerDeletion": true}]},
        "status": {"phase": phase}});
    if finalizer {
        p["metadata"]["finalizers"] = json!([TRACKING_FINALIZER]);
    }
    p
}

pub(super) fn with_index(mut p: Value, ix: usize) -> Value {
    p["metadata"]["annotations"] = json!({indexes::COMPLETION_INDEX: ix.to_string()});
    p
}

pub(super) fn exited(mut p: Value, container: &str, code: i64, at: &str) -> Value {
    p["status"]["containerStatuses"] = json!([{"name": container, "restartCount": 0,
        "state": {"terminated": {"exitCode": code, "finishedAt": at}}}]);
    p
}

pub(super) fn plan_of(j: &Value, pods: &[Value], mode: Mode, record: Record) -> Plan {
    let pods: Vec<Obj> = pods.iter().cloned().map(Arc::new).collect();
    sync::plan(&Input {
        job: j,
        pods: &pods,
        now: now(),
        record,
        settled: true,
        mode,
    })
}

pub(super) fn plan(j: &Value, pods: &[Value]) -> Plan {
    plan_of(j, pods, Mode::Act, Record::default())
}

pub(super) fn status(p: &Plan) -> &Value {
    &p.status.as_ref().expect("a status write")["status"]
}

pub(super) fn cond<'a>(st: &'a Value, t: &str) -> Option<&'a Value> {
    st["conditions"].as_array()?.iter().find(|c| c["type"] == t)
}

// ---- indexes ----

#[test]
fn intervals_are_written_in_upstreams_compressed_form() {
    let iv = Intervals::default().with_indexes([0, 1, 3, 4, 5, 7, 9, 10]);
    assert_eq!(iv.to_string(), "0,1,3-5,7,9,10");
    assert_eq!(iv.total(), 8);
    assert!(iv.has(4) && iv.has(10) && !iv.has(2) && !iv.has(8) && !iv.has(11));
    let parsed = Intervals::parse("0,1,3-5,7,9,10", 100);
    assert_eq!(parsed, iv);
    // Out of range is cut, corrupted parts skipped, neighbours merged.
    assert_eq!(Intervals::parse("1-3,x,4,8-20", 10).to_string(), "1-4,8,9");
    assert_eq!(Intervals::parse("", 10), Intervals::default());
    assert_eq!(Intervals::parse("12", 10).total(), 0);
}

#[test]
fn first_pending_indexes_skip_succeeded_and_active() {
    let succeeded = Intervals::parse("0,2-4", 10);
    let active: BTreeSet<usize> = [1, 6].into_iter().collect();
    assert_eq!(
        indexes::first_pending(&succeeded, &active, 3, 10),
        vec![5, 7, 8]
    );
    assert_eq!(
        indexes::first_pending(&succeeded, &active, 10, 8),
        vec![5, 7]
    );
    assert!(indexes::first_pending(&succeeded, &active, 0, 10).is_empty());
}

#[test]
fn generated_names_of_indexes_fit_the_limit() {
    assert_eq!(indexes::generate_name("pi", 3), "pi-3-");
    let long = "a".repeat(70);
    let g = indexes::generate_name(&long, 12);
    assert_eq!(g.len(), 58);
    assert!(g.ends_with("-12-"));
}

// ---- backoff ----

#[test]
fn recreation_backoff_doubles_from_ten_seconds_to_the_cap() {
    let at = now();
    let r = |n| Record {
        failures_after_last_success: n,
        last_failure: Some(at),
    };
    assert_eq!(backoff::remaining(&Record::default(), at), Duration::ZERO);
    assert_eq!(backoff::remaining(&r(1), at), Duration::from_secs(10));
    assert_eq!(backoff::remaining(&r(2), at), Duration::from_secs(20));
    assert_eq!(backoff::remaining(&r(3), at), Duration::from_secs(40));
    assert_eq!(backoff::remaining(&r(7), at), Duration::from_secs(600));
    assert_eq!(backoff::remaining(&r(30), at), Duration::from_secs(600));
    assert_eq!(
        backoff::remaining(&r(1), at + Duration::from_secs(4)),
        Duration::from_secs(6)
    );
    assert_eq!(
        backoff::remaining(&r(1), at + Duration::from_secs(11)),
        Duration::ZERO
    );
}

#[test]
fn backoff_record_counts_failures_after_the_last_success() {
    let f1 = exited(pod("f1", "Failed", true), "c", 1, "2024-01-01T00:01:00Z");
    let f2 = exited(pod("f2", "Failed", true), "c", 1, "2024-01-01T00:03:00Z");
    let s = exited(pod("s", "Succeeded", true), "c", 0, "2024-01-01T00:02:00Z");
    let r = backoff::next_record(Record::default(), &[], &[&f1]);
    assert_eq!(r.failures_after_last_success, 1);
    let r = backoff::next_record(r, &[], &[&f2]);
    assert_eq!(r.failures_after_last_success, 2);
    assert_eq!(
        r.last_failure,
        crate::compat::timefmt::parse_rfc3339("2024-01-01T00:03:00Z")
    );
    // A success in between: only failures after it count.
    let r = backoff::next_record(Record::default(), &[&s], &[&f1, &f2]);
    assert_eq!(r.failures_after_last_success, 1);
    assert_eq!(backoff::next_record(r, &[&s], &[]), Record::default());
}

// ---- pod failure policy ----

pub(super) fn with_policy(rules: Value) -> Value {
    job(json!({"podFailurePolicy": {"rules": rules}}))
}

#[test]
fn failure_policy_matches_exit_codes_and_conditions() {
    let j = with_policy(json!([
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0, 42]}}
    ]));
    let p = exited(pod("a", "Failed", true), "main", 42, NOW);
    let m = policy::match_policy(&j, &p);
    assert_eq!(m.action, Some(PolicyAction::FailJob));
    assert_eq!(
        m.fail_job.as_deref(),
        Some(
            "Container main for pod ns/a failed with exit code 42 matching FailJob rule at index 0"
        )
    );
    // Another container name: not the first rule; 42 is excluded by NotIn: no rule.
    let p = exited(pod("b", "Failed", true), "side", 42, NOW);
    assert_eq!(policy::match_policy(&j, &p).action, None);
    assert!(policy::match_policy(&j, &p).counts);
    let p = exited(pod("c", "Failed", true), "side", 3, NOW);
    assert_eq!(
        policy::match_policy(&j, &p).action,
        Some(PolicyAction::Count)
    );
    let mut p = pod("d", "Failed", true);
    p["status"]["conditions"] = json!([{"type": "DisruptionTarget", "status": "True"}]);
    let m = policy::match_policy(&j, &p);
    assert_eq!((m.action, m.counts), (Some(PolicyAction::Ignore), false));
    // With a policy only the Failed phase counts as failed; without, a deleted pod does too.
    let mut deleting = pod("e", "Running", true);
    deleting["metadata"]["deletionTimestamp"] = json!(NOW);
    assert!(!policy::is_pod_failed(&deleting, &j));
    assert!(policy::is_pod_failed(&deleting, &job(json!({}))));
}

// ---- sync decisions ----

#[test]
fn a_new_job_creates_parallelism_pods_with_the_tracking_finalizer() {
    let j = job(json!({}));
    let p = plan(&j, &[]);
    assert_eq!(p.creates.len(), 2);
    let c = &p.creates[0];
    assert_eq!(c["metadata"]["generateName"], "pi-");
    assert_eq!(c["metadata"]["finalizers"], json!([TRACKING_FINALIZER]));
    assert_eq!(
        c["metadata"]["labels"]["batch.kubernetes.io/job-name"],
        "pi"
    );
    assert_eq!(c["metadata"]["ownerReferences"][0]["kind"], "Job");
    assert_eq!(c["metadata"]["ownerReferences"][0]["controller"], true);
    assert!(p.status.is_none(), "the status follows the creations");
    // The pass after the writes: active 2 and startTime.
    let pods = [pod("a", "Pending", true), pod("b", "Pending", true)];
    let after = plan_of(&j, &pods, Mode::After, Record::default());
    let st = status(&after);
    assert_eq!(st["active"], 2);
    assert_eq!(st["ready"], 0);
    assert_eq!(st["startTime"], NOW);
    assert_eq!(st["uncountedTerminatedPods"], json!({}));
}

#[test]
fn indexed_pods_carry_their_index() {
    let j = job(
        json!({"completionMode": "Indexed", "completions": 4, "parallelism": 3,
        "template": {"metadata": {"labels": {"job-name": "pi"}},
            "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "X", "value": "1"}]}]}}}),
    );
    let mut j = j;
    j["status"]["completedIndexes"] = json!("1");
    j["status"]["succeeded"] = json!(1);
    let running = with_index(pod("p0", "Running", true), 0);
    let p = plan(&j, &[running]);
    let ixs: Vec<&str> = p
        .creates
        .iter()
        .map(|c| {
            c["metadata"]["annotations"][indexes::COMPLETION_INDEX]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(ixs, vec!["2", "3"]);
    let c = &p.creates[0];
    assert_eq!(c["metadata"]["labels"][indexes::COMPLETION_INDEX], "2");
    assert_eq!(c["metadata"]["generateName"], "pi-2-");
    assert_eq!(c["spec"]["hostname"], "pi-2");
    assert_eq!(
        c["spec"]["containers"][0]["env"][1]["name"],
        "JOB_COMPLETION_INDEX"
    );
    assert_eq!(
        c["spec"]["containers"][0]["env"][1]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.labels['batch.kubernetes.io/job-completion-index']"
    );
}

#[test]
fn a_succeeded_pod_is_put_in_status_before_its_finalizer_goes_then_counted() {
    let mut j = job(json!({"completions": 1, "parallelism": 1}));
    j["status"] = json!({"active": 1, "ready": 0, "startTime": NOW});
    let done = pod("a", "Succeeded", true);
    let p = plan(&j, std::slice::from_ref(&done));
    let st = status(&p);
    assert_eq!(st["uncountedTerminatedPods"]["succeeded"], json!(["u-a"]));
    assert!(st.get("succeeded").is_none());
    assert!(
        cond(st, "Complete").is_none(),
        "not before the finalizer is removed"
    );
    let scm = cond(st, "SuccessCriteriaMet").expect("the interim condition first");
    assert_eq!(
        (
            scm["status"].as_str(),
            scm["reason"].as_str(),
            scm["message"].as_str()
        ),
        (
            Some("True"),
            Some("CompletionsReached"),
            Some("Reached expected number of succeeded pods")
        )
    );
    assert_eq!(st["terminating"], 0);
    assert_eq!(p.removals, vec!["a".to_string()]);
    // Step two: the finalizer is gone; the UID leaves the uncounted list for the counter,
    // and the job completes.
    let mut j2 = p.status.clone().unwrap();
    j2["metadata"]["resourceVersion"] = json!("6");
    let p2 = plan(&j2, &[pod("a", "Succeeded", false)]);
    let st = status(&p2);
    assert_eq!(st["succeeded"], 1);
    assert_eq!(st["uncountedTerminatedPods"], json!({}));
    let c = cond(st, "Complete").unwrap();
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "CompletionsReached");
    assert_eq!(c["message"], "Reached expected number of succeeded pods");
    let types: Vec<&str> = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["SuccessCriteriaMet", "Complete"]);
    assert_eq!(st["completionTime"], NOW);
    assert!(st.get("active").is_none());
    assert!(p2
        .events
        .iter()
        .any(|e| e.1 == "Completed" && e.2 == "Job completed"));
    assert!(p2.finished && p2.removals.is_empty());
    // A finished job: nothing more.
    let p3 = plan(&p2.status.clone().unwrap(), &[pod("a", "Succeeded", false)]);
    assert!(p3.status.is_none() && p3.creates.is_empty() && p3.finished);
}

#[test]
fn an_uncounted_pod_whose_finalizer_removal_failed_keeps_waiting() {
    let mut j = job(json!({"completions": 1, "parallelism": 1}));
    j["status"] = json!({"startTime": NOW, "ready": 0, "terminating": 0,
        "uncountedTerminatedPods": {"succeeded": ["u-a"]}});
    let p = plan(&j, &[pod("a", "Succeeded", true)]);
    let st = status(&p);
    assert_eq!(st["uncountedTerminatedPods"]["succeeded"], json!(["u-a"]));
    assert!(cond(st, "SuccessCriteriaMet").is_some());
    assert_eq!(p.removals, vec!["a".to_string()]);
    let j = p.status.clone().unwrap();
    let p = plan(&j, &[pod("a", "Succeeded", true)]);
    assert!(p.status.is_none(), "nothing new to write");
    assert_eq!(p.removals, vec!["a".to_string()]);
    // A pod gone altogether counts as well.
    let p = plan(&j, &[]);
    assert_eq!(status(&p)["succeeded"], 1);
}

#[test]
fn indexed_successes_go_to_completed_indexes() {
    let mut j = job(json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3}));
    j["status"] = json!({"startTime": NOW, "active": 3, "ready": 0});
    let pods = [
        with_index(pod("a", "Succeeded", true), 0),
        with_index(pod("b", "Succeeded", true), 2),
        with_index(pod("c", "Running", true), 1),
    ];
    let p = plan(&j, &pods);
    let st = status(&p);
    assert_eq!(st["completedIndexes"], "0,2");
    assert_eq!(st["succeeded"], 2);
    assert_eq!(st["uncountedTerminatedPods"], json!({}));
    assert_eq!(p.removals.len(), 2);
}

#[test]
fn failures_wait_for_the_recreation_backoff() {
    let mut j = job(json!({"completions": 1, "parallelism": 1}));
    j["status"] = json!({"startTime": NOW, "ready": 0, "failed": 1});
    let rec = Record {
        failures_after_last_success: 1,
        last_failure: Some(now() - Duration::from_secs(3)),
    };
    let p = plan_of(&j, &[], Mode::Act, rec);
    assert!(p.creates.is_empty());
    assert_eq!(p.requeue, Some(Duration::from_secs(7)));
    // A new failure is recorded once its status write is done.
    let f = exited(pod("f", "Failed", true), "c", 1, NOW);
    let p = plan_of(&j, &[f], Mode::Act, Record::default());
    assert_eq!(p.record.unwrap().failures_after_last_success, 1);
    assert!(
        p.creates.is_empty(),
        "the new failure starts a 10 s backoff"
    );
    assert_eq!(
        status(&p)["uncountedTerminatedPods"]["failed"],
        json!(["u-f"])
    );
}

#[test]
fn backoff_limit_exceeded_fails_the_job_and_deletes_active_pods() {
    let mut j = job(json!({"backoffLimit": 1, "parallelism": 2, "completions": 5}));
    j["status"] = json!({"startTime": NOW, "failed": 1, "active": 1, "ready": 0});
    let f = pod("f", "Failed", true);
    let r = pod("r", "Running", true);
    let p = plan(&j, &[f.clone(), r.clone()]);
    assert_eq!(p.deletes.len(), 1);
    assert!(!p.deletes[0].remove_finalizer, "kept until counted");
    // After the delete: both pods are counted as failed, then the job fails.
    let mut gone = r;
    gone["metadata"]["deletionTimestamp"] = json!(NOW);
    let p = plan_of(&j, &[f, gone], Mode::After, Record::default());
    let st = status(&p);
    assert_eq!(
        st["uncountedTerminatedPods"]["failed"],
        json!(["u-f", "u-r"])
    );
    assert_eq!(p.removals.len(), 2);
    assert!(cond(st, "Failed").is_none());
    let ft = cond(st, "FailureTarget").expect("FailureTarget first");
    assert_eq!(ft["reason"], "BackoffLimitExceeded");
    assert_eq!(st["terminating"], 1, "the deleted pod is terminating");
    assert!(p.events.is_empty(), "no Event before Failed");
    let mut j2 = p.status.unwrap();
    j2["metadata"]["resourceVersion"] = json!("9");
    let p = plan(&j2, &[]);
    let st = status(&p);
    assert_eq!(st["failed"], 3);
    assert_eq!(st["terminating"], 0);
    let c = cond(st, "Failed").unwrap();
    assert_eq!(
        (c["reason"].as_str(), c["message"].as_str()),
        (
            Some("BackoffLimitExceeded"),
            Some("Job has reached the specified backoff limit")
        )
    );
    assert!(p
        .events
        .iter()
        .any(|e| e.0 && e.1 == "BackoffLimitExceeded"));
}

#[test]
fn active_deadline_fails_the_job_or_requeues_at_it() {
    let mut j = job(json!({"activeDeadlineSeconds": 60}));
    j["status"] = json!({"startTime": "2024-01-01T00:09:30Z", "active": 2, "ready": 0});
    let pods = [pod("a", "Running", true), pod("b", "Running", true)];
    let p = plan(&j, &pods);
    assert_eq!(p.requeue, Some(Duration::from_secs(30)));
    j["status"]["startTime"] = json!("2024-01-01T00:08:00Z");
    let p = plan(&j, &pods);
    assert_eq!(p.deletes.len(), 2);
    let p = plan(&j, &[]);
    assert!(cond(status(&p), "Failed").is_none(), "FailureTarget first");
    let ft = cond(status(&p), "FailureTarget").unwrap();
    assert_eq!(ft["reason"], "DeadlineExceeded");
    let mut j2 = p.status.clone().unwrap();
    j2["metadata"]["resourceVersion"] = json!("9");
    let p = plan(&j2, &[]);
    let c = cond(status(&p), "Failed").unwrap();
    assert_eq!(c["reason"], "DeadlineExceeded");
    assert_eq!(
        c["message"],
        "Job was active longer than specified deadline"
    );
}

#[test]
fn suspend_deletes_pods_and_resume_resets_start_time() {
    let mut j = job(json!({"suspend": true}));
    j["status"] = json!({"startTime": "2024-01-01T00:00:00Z", "active": 1, "ready": 0});
    let p = plan(&j, &[pod("a", "Running", true)]);
    assert_eq!(p.deletes.len(), 1);
    assert!(p.deletes[0].remove_finalizer);
    let p = plan(&j, &[]);
    let st = status(&p);
    let c = cond(st, "Suspended").unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("True"), Some("JobSuspended"))
    );
    assert!(p.events.iter().any(|e| e.1 == "Suspended"));
    assert!(st.get("startTime").is_none(), "cleared while suspended");
    // Resumed.
    let mut j2 = p.status.unwrap();
    j2["spec"]["suspend"] = json!(false);
    let p = plan(&j2, &[]);
    assert_eq!(p.creates.len(), 2);
    let p = plan_of(
        &j2,
        &[pod("a", "Pending", true), pod("b", "Pending", true)],
        Mode::After,
        Record::default(),
    );
    let st = status(&p);
    let c = cond(st, "Suspended").unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("JobResumed"))
    );
    assert_eq!(st["startTime"], NOW);
    assert!(p.events.iter().any(|e| e.1 == "Resumed"));
}

#[test]
fn fail_job_rule_sets_failure_target_then_failed() {
    let mut j = with_policy(
        json!([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [5]}}]),
    );
    j["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    j["status"] = json!({"startTime": NOW, "active": 1, "ready": 0});
    let f = exited(pod("f", "Failed", true), "c", 5, NOW);
    let p = plan(&j, &[f.clone(), pod("r", "Running", true)]);
    assert_eq!(p.deletes.len(), 1, "the running pod goes first");
    let p = plan(&j, &[f]);
    let st = status(&p);
    let ft = cond(st, "FailureTarget").unwrap().clone();
    assert_eq!(ft["reason"], "PodFailurePolicy");
    assert!(cond(st, "Failed").is_none());
    let mut j2 = p.status.unwrap();
    j2["metadata"]["resourceVersion"] = json!("9");
    let p = plan(&j2, &[]);
    let st = status(&p);
    let failed = cond(st, "Failed").unwrap();
    assert_eq!(failed["reason"], "PodFailurePolicy");
    assert_eq!(failed["message"], ft["message"]);
    assert_eq!(st["failed"], 1);
}

#[test]
fn ignored_failures_are_not_counted_and_replaced() {
    let mut j = with_policy(
        json!([{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]),
    );
    j["spec"]["backoffLimit"] = json!(0);
    j["status"] = json!({"startTime": NOW, "active": 2, "ready": 0, "terminating": 0});
    let mut f = pod("f", "Failed", true);
    f["status"]["conditions"] = json!([{"type": "DisruptionTarget", "status": "True"}]);
    let p = plan(&j, &[f.clone(), pod("r", "Running", true)]);
    assert_eq!(p.creates.len(), 1, "replaced at once");
    let p = plan_of(
        &j,
        &[f, pod("r", "Running", true), pod("n", "Pending", true)],
        Mode::After,
        Record::default(),
    );
    assert_eq!(p.removals, vec!["f".to_string()]);
    assert!(
        p.status.is_none(),
        "nothing to count: the finalizer goes at once"
    );
}

#[test]
fn too_many_pods_are_deleted_with_their_finalizer_first() {
    let mut j = job(json!({"parallelism": 1, "completions": 5}));
    j["status"] = json!({"startTime": NOW, "active": 2, "ready": 0});
    let p = plan(&j, &[pod("a", "Running", true), pod("b", "Pending", true)]);
    assert_eq!(p.deletes.len(), 1);
    assert_eq!(p.deletes[0].name, "b", "pending before running");
    assert!(p.deletes[0].remove_finalizer);
}

#[test]
fn unknown_completion_mode_is_reported_and_skipped() {
    let j = job(json!({"completionMode": "Weird"}));
    let p = plan(&j, &[]);
    assert!(p.creates.is_empty() && p.status.is_none());
    assert_eq!(p.warnings[0].1, "UnknownCompletionMode");
}

// ---- the controller as the manager runs it ----

#[test]
fn status_then_finalizer_removals_in_that_order() {
    let mut h = Harness::new(JobController::new()).at(NOW);
    let mut j = job(json!({"completions": 1, "parallelism": 1}));
    j["status"] = json!({"startTime": NOW, "active": 1, "ready": 0});
    h.add(JOBS, j);
    h.add(PODS, pod("a", "Succeeded", true));
    assert!(h.take_queued().contains(&"ns/pi".to_string()));
    let o = h.outcome("ns/pi");
    assert!(o.status_after_writes);
    match &o.actions[..] {
        [Action::SlowStart(seq)] => {
            assert!(matches!(
                &seq[0],
                Action::UpdateSubresource {
                    subresource: "status",
                    ..
                }
            ));
            match &seq[1] {
                Action::Parallel(rm) => {
                    assert!(matches!(&rm[0], Action::Patch { name, .. } if name == "a"))
                }
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn orphan_pods_with_the_finalizer_are_released() {
    let mut h = Harness::new(JobController::new()).at(NOW);
    let mut p = pod("lost", "Succeeded", true);
    p["metadata"]["ownerReferences"] = json!([]);
    h.add(PODS, p);
    let keys = h.take_queued();
    assert_eq!(keys, vec!["orphan:ns/lost".to_string()]);
    let w = h.sync("orphan:ns/lost");
    assert_eq!(w.patches.len(), 1);
    assert_eq!(
        w.patches[0].2,
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}})
    );
    // A pod of a live job is not touched.
    h.add(JOBS, job(json!({})));
    h.add(PODS, pod("mine", "Running", true));
    assert!(h.sync("orphan:ns/mine").is_empty());
}

#[test]
fn a_cache_older_than_our_own_status_write_is_not_acted_on() {
    let mut h = Harness::new(JobController::new()).at(NOW);
    let j = job(json!({}));
    h.add(JOBS, j.clone());
    let mut written = j.clone();
    written["metadata"]["resourceVersion"] = json!("9");
    let write = Action::UpdateSubresource {
        kind: JOBS,
        object: written.clone(),
        subresource: "status",
    };
    h.ctrl
        .applied("ns/pi", &write, Applied::Done(Some(&written)));
    // The cache still holds resourceVersion 5 (a re-list from before the write).
    let o = h.outcome("ns/pi");
    assert!(o.actions.is_empty(), "{o:?}");
    assert!(o.requeue_after.is_some());
    // Once the cache has caught up, the job is synced again.
    h.update(JOBS, written);
    assert!(!h.sync("ns/pi").creates.is_empty());
}

#[test]
fn a_pod_that_stopped_matching_is_released_with_its_finalizer() {
    let mut h = Harness::new(JobController::new()).at(NOW);
    let mut j = job(json!({"completions": 1, "parallelism": 1}));
    j["status"] = json!({"startTime": NOW, "active": 1, "ready": 0});
    h.add(JOBS, j);
    let mut p = pod("moved", "Running", true);
    p["metadata"]["labels"] = json!({"app": "elsewhere"});
    h.add(PODS, p);
    let w = h.sync("ns/pi");
    let release = w
        .patches
        .iter()
        .find(|(_, name, _)| name == "ns/moved" || name == "moved")
        .expect("a release patch");
    assert_eq!(
        release.2,
        json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "job-uid"}],
            "uid": "u-moved", "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}})
    );
    // It no longer counts: a replacement is created.
    assert_eq!(w.creates.len(), 1);
}

#[test]
fn an_adopted_pod_gets_the_reference_and_the_finalizer() {
    let j = job(json!({}));
    assert_eq!(
        claim::adopt_patch(&j, "u-x"),
        json!({"metadata": {"uid": "u-x", "finalizers": [TRACKING_FINALIZER],
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi",
                "uid": "job-uid", "controller": true, "blockOwnerDeletion": true}]}})
    );
}
