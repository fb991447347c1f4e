//! job-controller scenarios, against the sandbox always and a real kube-apiserver with
//! `KCM_E2E_KUBECONFIG` (`real_*`; with `--use-service-account-credentials=true`). There is no
//! kubelet: the tests play it by writing the pods' phase and container exit codes through
//! `pods/status`.

use crate::common::*;
use edgekcm::api::client::{Client, ListOptions, PatchType};
use edgekcm::api::resources::{EVENTS, JOBS, PODS};
use serde_json::{json, Value};
use std::time::Duration;

pub(crate) const LIMIT: Duration = Duration::from_secs(40);
pub(crate) const CONTROLLERS: &str = "--controllers=job-controller";
pub(crate) const FINALIZER: &str = "batch.kubernetes.io/job-tracking";
pub(crate) const INDEX: &str = "batch.kubernetes.io/job-completion-index";

pub(crate) fn new_ns(t: &Target, prefix: &str) -> Ns {
    Ns::with_cleanup(t, prefix, &[JOBS])
}

pub(crate) fn job_object(name: &str, spec: Value) -> Value {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"template": {"metadata": {"labels": {"app": "e2e"}},
            "spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}}}});
    for (k, v) in spec.as_object().expect("an object") {
        j["spec"][k] = v.clone();
    }
    j
}

pub(crate) fn create_job(admin: &Client, ns: &str, name: &str, spec: Value) -> Value {
    admin
        .create(&JOBS, Some(ns), &job_object(name, spec))
        .expect("create job")
}

pub(crate) fn get_job(admin: &Client, ns: &str, name: &str) -> Value {
    admin.get(&JOBS, Some(ns), name).expect("get job")
}

pub(crate) fn job_pods(admin: &Client, ns: &str, uid: &str) -> Vec<Value> {
    admin
        .list(&PODS, Some(ns), &ListOptions::default())
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| edgekcm::obj::controller_ref(p).is_some_and(|r| r.uid == uid))
        .collect()
}

pub(crate) fn has_finalizer(p: &Value) -> bool {
    p["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|l| l.iter().any(|f| f == FINALIZER))
}

pub(crate) fn is_active(p: &Value) -> bool {
    let ph = p["status"]["phase"].as_str().unwrap_or("");
    ph != "Succeeded" && ph != "Failed" && p["metadata"]["deletionTimestamp"].is_null()
}

pub(crate) fn wait_active(admin: &Client, ns: &str, uid: &str, n: usize) -> Vec<Value> {
    eventually(LIMIT, &format!("{n} active pods"), || {
        let pods: Vec<Value> = job_pods(admin, ns, uid)
            .into_iter()
            .filter(is_active)
            .collect();
        (pods.len() == n).then_some(pods)
    })
}

pub(crate) fn condition<'a>(j: &'a Value, t: &str) -> Option<&'a Value> {
    j["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t && c["status"] == "True")
}

pub(crate) fn wait_condition(admin: &Client, ns: &str, name: &str, t: &str) -> Value {
    eventually(LIMIT, &format!("job {name} {t}"), || {
        let j = get_job(admin, ns, name);

        condition(&j, t).is_some().then_some(j)
    })
}

/// Play kubelet: the pod ran and its container exited with `code`.
pub(crate) fn finish_pod(admin: &Client, ns: &str, name: &str, code: i64) {
    eventually(LIMIT, "pod status update", || {
        let mut p = admin.get(&PODS, Some(ns), name).expect("get pod");
        let now = edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now());
        p["status"]["phase"] = json!(if code == 0 { "Succeeded" } else { "Failed" });
        p["status"]["containerStatuses"] = json!([{"name": "main", "image": "registry.k8s.io/pause:3.9",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": code, "startedAt": now, "finishedAt": now,
                "reason": if code == 0 { "Completed" } else { "Error" }}}}]);
        admin.update_subresource(&PODS, &p, "status").ok()
    });
}

pub(crate) fn events_of(admin: &Client, ns: &str, name: &str) -> Vec<(String, String)> {
    admin
        .list(&EVENTS, Some(ns), &ListOptions::default())
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name && e["involvedObject"]["kind"] == "Job")
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").to_string(),
                e["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

pub(crate) fn wait_event(admin: &Client, ns: &str, name: &str, reason: &str) -> String {
    eventually(LIMIT, &format!("event {reason}"), || {
        events_of(admin, ns, name)
            .into_iter()
            .find(|e| e.0 == reason)
            .map(|e| e.1)
    })
}

pub(crate) fn uid(j: &Value) -> String {
    j["metadata"]["uid"].as_str().unwrap_or("").to_string()
}

/// Pods run to completion; every finalizer is removed once counted; status, labels, Events.
fn scenario_nonindexed_completes(t: &Target) {
    let ns = new_ns(t, "job-ni");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-ni", CONTROLLERS);
    let j = create_job(
        admin,
        n,
        "work",
        json!({"completions": 3, "parallelism": 2}),
    );
    let id = uid(&j);
    let pods = wait_active(admin, n, &id, 2);
    for p in &pods {
        assert!(has_finalizer(p), "{p}");
        let l = &p["metadata"]["labels"];
        assert_eq!(l["batch.kubernetes.io/job-name"], "work");
        assert_eq!(l["batch.kubernetes.io/controller-uid"], id.as_str());
        assert_eq!(l["job-name"], "work");
        assert_eq!(l["app"], "e2e");
        assert!(p["metadata"]["generateName"] == "work-");
    }
    eventually(LIMIT, "active 2 and ready 0", || {
        let j = get_job(admin, n, "work");
        (j["status"]["active"] == 2
            && j["status"]["ready"] == 0
            && j["status"]["startTime"].is_string())
        .then_some(())
    });
    // Finish them one by one as they come.
    let mut finished = 0;
    while finished < 3 {
        let active = eventually(LIMIT, "an active pod", || {
            let v: Vec<Value> = job_pods(admin, n, &id)
                .into_iter()
                .filter(is_active)
                .collect();
            (!v.is_empty()).then_some(v)
        });
        let name = active[0]["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_string();
        finish_pod(admin, n, &name, 0);
        finished += 1;
    }
    let j = wait_condition(admin, n, "work", "Complete");
    let scm = condition(&j, "SuccessCriteriaMet").expect("SuccessCriteriaMet kept");
    let done = condition(&j, "Complete").unwrap();
    for c in [scm, done] {
        assert_eq!(c["reason"], "CompletionsReached");
        assert_eq!(c["message"], "Reached expected number of succeeded pods");
    }
    assert_eq!(j["status"]["terminating"], 0);
    assert_eq!(j["status"]["succeeded"], 3);
    assert!(j["status"]["failed"].is_null());
    assert!(j["status"]["active"].is_null());
    assert!(j["status"]["completionTime"].is_string());
    assert_eq!(j["status"]["uncountedTerminatedPods"], json!({}));
    let pods = job_pods(admin, n, &id);
    assert_eq!(pods.len(), 3);
    assert!(pods.iter().all(|p| !has_finalizer(p)), "finalizers removed");
    wait_event(admin, n, "work", "Completed");
    let created = events_of(admin, n, "work")
        .into_iter()
        .filter(|e| e.0 == "SuccessfulCreate")
        .count();
    assert!(created >= 3, "{created} SuccessfulCreate events");
}

/// Indexed: each index once, its annotation, label, hostname; completedIndexes.
fn scenario_indexed_completes(t: &Target) {
    let ns = new_ns(t, "job-ix");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-ix", CONTROLLERS);
    let j = create_job(
        admin,
        n,
        "ix",
        json!({"completions": 4, "parallelism": 2, "completionMode": "Indexed"}),
    );
    let id = uid(&j);
    let pods = wait_active(admin, n, &id, 2);
    let mut ixs: Vec<String> = pods
        .iter()
        .map(|p| {
            p["metadata"]["annotations"][INDEX]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    ixs.sort();
    assert_eq!(ixs, vec!["0", "1"]);
    for p in &pods {
        let ix = p["metadata"]["annotations"][INDEX].as_str().expect("index");
        assert_eq!(p["metadata"]["labels"][INDEX], ix);
        assert_eq!(p["spec"]["hostname"], format!("ix-{ix}"));
        assert!(p["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with(&format!("ix-{ix}-")));
        let env = &p["spec"]["containers"][0]["env"][0];
        assert_eq!(env["name"], "JOB_COMPLETION_INDEX");
    }
    // Index 1 succeeds: completedIndexes "1", index 2 created next.
    let one = pods
        .iter()
        .find(|p| p["metadata"]["annotations"][INDEX] == "1")
        .expect("index 1");
    finish_pod(admin, n, one["metadata"]["name"].as_str().unwrap(), 0);
    eventually(LIMIT, "completedIndexes 1", || {
        let j = get_job(admin, n, "ix");
        (j["status"]["completedIndexes"] == "1" && j["status"]["succeeded"] == 1).then_some(())
    });
    let pods = wait_active(admin, n, &id, 2);
    let mut ixs: Vec<String> = pods
        .iter()
        .map(|p| {
            p["metadata"]["annotations"][INDEX]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    ixs.sort();
    assert_eq!(ixs, vec!["0", "2"]);
    for p in pods {
        finish_pod(admin, n, p["metadata"]["name"].as_str().unwrap(), 0);
    }
    let last = wait_active(admin, n, &id, 1);
    assert_eq!(last[0]["metadata"]["annotations"][INDEX], "3");
    finish_pod(admin, n, last[0]["metadata"]["name"].as_str().unwrap(), 0);
    let j = wait_condition(admin, n, "ix", "Complete");
    assert_eq!(j["status"]["completedIndexes"], "0-3");
    assert_eq!(j["status"]["succeeded"], 4);
}

/// backoffLimit 0: the first failure fails the job; the other pod is deleted and counted.
fn scenario_backoff_limit(t: &Target) {
    let ns = new_ns(t, "job-bl");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-bl", CONTROLLERS);
    let j = create_job(
        admin,
        n,
        "bl",
        json!({"completions": 2, "parallelism": 2, "backoffLimit": 0}),
    );
    let id = uid(&j);
    let pods = wait_active(admin, n, &id, 2);
    finish_pod(admin, n, pods[0]["metadata"]["name"].as_str().unwrap(), 1);
    let j = wait_condition(admin, n, "bl", "Failed");
    let c = condition(&j, "Failed").unwrap();
    assert_eq!(c["reason"], "BackoffLimitExceeded");
    assert_eq!(c["message"], "Job has reached the specified backoff limit");
    let ft = condition(&j, "FailureTarget").expect("FailureTarget kept");
    assert_eq!(ft["reason"], "BackoffLimitExceeded");
    assert_eq!(ft["message"], c["message"]);
    assert_eq!(j["status"]["terminating"], 0);
    assert_eq!(j["status"]["failed"], 2, "the deleted pod counts as failed");
    assert!(j["status"]["active"].is_null());
    assert_eq!(
        wait_event(admin, n, "bl", "BackoffLimitExceeded"),
        "Job has reached the specified backoff limit"
    );
    eventually(LIMIT, "no pod left with the finalizer", || {
        job_pods(admin, n, &id)
            .iter()
            .all(|p| !has_finalizer(p))
            .then_some(())
    });
}

/// A FailJob rule: FailureTarget first, then Failed with the rule's message.
fn scenario_pod_failure_policy(t: &Target) {
    let ns = new_ns(t, "job-pfp");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-pfp", CONTROLLERS);
    let j = create_job(
        admin,
        n,
        "pfp",
        json!({"completions": 3, "parallelism": 1, "backoffLimit": 6,
        "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onExitCodes": {"containerName": "main", "operator": "In", "values": [3]}},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]}}),
    );
    let id = uid(&j);
    let first = wait_active(admin, n, &id, 1);
    let first_name = first[0]["metadata"]["name"].as_str().unwrap().to_string();
    // Exit 3 is ignored: not counted, replaced at once.
    finish_pod(admin, n, &first_name, 3);
    let second = eventually(LIMIT, "a replacement", || {
        let v: Vec<Value> = job_pods(admin, n, &id)
            .into_iter()
            .filter(is_active)
            .collect();
        v.into_iter()
            .find(|p| p["metadata"]["name"] != first_name.as_str())
    });
    let j = get_job(admin, n, "pfp");
    assert!(j["status"]["failed"].is_null(), "ignored: {}", j["status"]);
    finish_pod(admin, n, second["metadata"]["name"].as_str().unwrap(), 42);
    let j = wait_condition(admin, n, "pfp", "Failed");
    let ft = condition(&j, "FailureTarget").expect("FailureTarget kept");
    let failed = condition(&j, "Failed").unwrap();
    assert_eq!(failed["reason"], "PodFailurePolicy");
    assert_eq!(ft["message"], failed["message"]);
    let msg = failed["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Container main for pod ")
            && msg.ends_with("failed with exit code 42 matching FailJob rule at index 1"),
        "{msg}"
    );
    assert_eq!(j["status"]["failed"], 1);
    wait_event(admin, n, "pfp", "PodFailurePolicy");
}

/// Suspended: no pods, Suspended condition; resumed: pods, condition False, new startTime.
fn scenario_suspend_resume(t: &Target) {
    let ns = new_ns(t, "job-sus");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-sus", CONTROLLERS);
    let j = create_job(admin, n, "sus", json!({"completions": 2, "parallelism": 2}));
    let id = uid(&j);
    wait_active(admin, n, &id, 2);
    eventually(LIMIT, "startTime", || {
        get_job(admin, n, "sus")["status"]["startTime"]
            .as_str()
            .map(str::to_string)
    });
    let mut j = get_job(admin, n, "sus");
    j["spec"]["suspend"] = json!(true);
    admin.update(&JOBS, &j).expect("suspend");
    let j = wait_condition(admin, n, "sus", "Suspended");
    assert_eq!(
        condition(&j, "Suspended").unwrap()["reason"],
        "JobSuspended"
    );
    wait_active(admin, n, &id, 0);
    eventually(LIMIT, "deleted pods gone", || {
        job_pods(admin, n, &id).is_empty().then_some(())
    });
    assert_eq!(wait_event(admin, n, "sus", "Suspended"), "Job suspended");
    // v1.36 and later (MutableSchedulingDirectivesForSuspendedJobs): no startTime while
    // suspended.
    let before = get_job(admin, n, "sus")["status"]["startTime"].clone();
    assert!(before.is_null(), "startTime cleared: {before}");
    std::thread::sleep(Duration::from_millis(1100));
    let mut j = get_job(admin, n, "sus");
    j["spec"]["suspend"] = json!(false);
    admin.update(&JOBS, &j).expect("resume");
    wait_active(admin, n, &id, 2);
    let j = eventually(LIMIT, "Suspended False", || {
        let j = get_job(admin, n, "sus");
        let c = j["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Suspended")?
            .clone();
        (c["status"] == "False" && c["reason"] == "JobResumed").then_some(j)
    });
    assert_ne!(j["status"]["startTime"], before, "startTime reset");
    wait_event(admin, n, "sus", "Resumed");
}

/// activeDeadlineSeconds: the job fails with DeadlineExceeded and its pods go.
fn scenario_active_deadline(t: &Target) {
    let ns = new_ns(t, "job-dl");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-dl", CONTROLLERS);
    let j = create_job(
        admin,
        n,
        "dl",
        json!({"completions": 2, "parallelism": 2, "activeDeadlineSeconds": 3}),
    );
    let id = uid(&j);
    wait_active(admin, n, &id, 2);
    let j = wait_condition(admin, n, "dl", "Failed");
    assert_eq!(
        condition(&j, "Failed").unwrap()["reason"],
        "DeadlineExceeded"
    );
    assert_eq!(
        condition(&j, "FailureTarget").expect("FailureTarget kept")["reason"],
        "DeadlineExceeded"
    );
    assert_eq!(j["status"]["failed"], 2);
    wait_event(admin, n, "dl", "DeadlineExceeded");
    eventually(LIMIT, "pods gone", || {
        job_pods(admin, n, &id).is_empty().then_some(())
    });
}

/// edgekcm dies between the status write and the finalizer removals (both halves played by
/// the test), and again at a random moment: every success is counted exactly once.
fn scenario_restart_between_writes(t: &Target) {
    let ns = new_ns(t, "job-rs");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut kcm = start_with(t, "job-rs-1", CONTROLLERS);
    let j = create_job(admin, n, "rs", json!({"completions": 6, "parallelism": 3}));
    let id = uid(&j);
    let pods = wait_active(admin, n, &id, 3);
    eventually(LIMIT, "active 3", || {
        (get_job(admin, n, "rs")["status"]["active"] == 3).then_some(())
    });
    kcm.kill();
    let names: Vec<String> = pods
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let uids: Vec<String> = pods
        .iter()
        .map(|p| p["metadata"]["uid"].as_str().unwrap().to_string())
        .collect();
    for name in &names {
        finish_pod(admin, n, name, 0);
    }
    // As if the first write was done: pods 0 and 1 in uncountedTerminatedPods; pod 1's
    // finalizer already removed (the second write was not); pod 2 not yet seen.
    let mut j = get_job(admin, n, "rs");
    j["status"]["uncountedTerminatedPods"] = json!({"succeeded": [uids[0], uids[1]]});
    admin
        .update_subresource(&JOBS, &j, "status")
        .expect("status");
    admin
        .patch(
            &PODS,
            Some(n),
            &names[1],
            PatchType::Strategic,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}}),
            None,
        )
        .expect("remove finalizer");
    let mut kcm = start_with(t, "job-rs-2", CONTROLLERS);
    eventually(LIMIT, "three counted", || {
        let j = get_job(admin, n, "rs");
        (j["status"]["succeeded"] == 3 && j["status"]["uncountedTerminatedPods"] == json!({}))
            .then_some(())
    });
    // Finish the rest while edgekcm is killed at some point of it.
    let rest = wait_active(admin, n, &id, 3);
    for (i, p) in rest.iter().enumerate() {
        finish_pod(admin, n, p["metadata"]["name"].as_str().unwrap(), 0);
        if i == 1 {
            std::thread::sleep(Duration::from_millis(fastrand::u64(0..1500)));
            kcm.kill();
        }
    }
    let _kcm = start_with(t, "job-rs-3", CONTROLLERS);
    let j = wait_condition(admin, n, "rs", "Complete");
    assert_eq!(j["status"]["succeeded"], 6, "{}", j["status"]);
    let all = job_pods(admin, n, &id);
    assert_eq!(all.len(), 6);
    assert!(all.iter().all(|p| !has_finalizer(p)));
}

/// A pod holding the tracking finalizer without a Job: released.
fn scenario_orphan_released(t: &Target) {
    let ns = new_ns(t, "job-or");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-or", CONTROLLERS);
    let p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stray", "finalizers": [FINALIZER, "example.com/keep"]},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}});
    admin.create(&PODS, Some(n), &p).expect("pod");
    eventually(LIMIT, "finalizer released", || {
        let p = admin.get(&PODS, Some(n), "stray").expect("pod");
        (!has_finalizer(&p)).then_some(p)
    });
    let p = admin.get(&PODS, Some(n), "stray").expect("pod");
    assert_eq!(p["metadata"]["finalizers"], json!(["example.com/keep"]));
    admin
        .patch(
            &PODS,
            Some(n),
            "stray",
            PatchType::Merge,
            &json!({"metadata": {"finalizers": null}}),
            None,
        )
        .expect("release");
}

/// Pods holding the tracking finalizer without a Job before the controller manager starts
/// (they come in its first list, their keys delayed by the pod batch period): all released.
fn scenario_orphans_released_at_start(t: &Target) {
    let ns = new_ns(t, "job-ors");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    // Between the two in the list, pods without it: the second one's key is queued a
    // little later than the first's, as in a cluster with many pods.
    let names = ["a-stray", "z-stray"];
    let pod = |name: &str, finalizers: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "finalizers": finalizers},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}})
    };
    admin
        .create(&PODS, Some(n), &pod(names[0], json!([FINALIZER])))
        .expect("pod");
    let plain: Vec<String> = (0..300).map(|i| format!("m-{i:03}")).collect();
    for name in &plain {
        admin
            .create(&PODS, Some(n), &pod(name, json!([])))
            .expect("pod");
    }
    admin
        .create(&PODS, Some(n), &pod(names[1], json!([FINALIZER])))
        .expect("pod");
    let _kcm = start_with(t, "job-ors", CONTROLLERS);
    for name in names {
        eventually(LIMIT, &format!("{name} released"), || {
            let p = admin.get(&PODS, Some(n), name).expect("pod");
            (!has_finalizer(&p)).then_some(())
        });
    }
}

/// A Job with a manual selector adopts a matching orphan pod (controller reference and the
/// tracking finalizer added), counts it instead of creating one, and releases a pod whose
/// labels stop matching (reference and finalizer removed), as upstream's ClaimPods does.
fn scenario_orphans_adopted_and_released(t: &Target) {
    let ns = new_ns(t, "job-adopt");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "job-adopt", CONTROLLERS);
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "adopt"}},
            "spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}})
    };
    admin.create(&PODS, Some(n), &pod("stray")).expect("pod");
    let mut j = job_object(
        "adopter",
        json!({"completions": 1, "parallelism": 1, "manualSelector": true,
            "selector": {"matchLabels": {"app": "adopt"}}}),
    );
    j["spec"]["template"]["metadata"]["labels"] = json!({"app": "adopt"});
    let j = admin.create(&JOBS, Some(n), &j).expect("job");
    let juid = uid(&j);
    let adopted = eventually(LIMIT, "the orphan adopted", || {
        let p = admin.get(&PODS, Some(n), "stray").expect("pod");
        (edgekcm::obj::controller_ref(&p).is_some_and(|r| r.uid == juid)).then_some(p)
    });
    assert!(has_finalizer(&adopted), "{}", adopted["metadata"]);
    let refs = &adopted["metadata"]["ownerReferences"][0];
    assert_eq!(refs["kind"], "Job");
    assert_eq!(refs["blockOwnerDeletion"], true);
    eventually(LIMIT, "active 1", || {
        (get_job(admin, n, "adopter")["status"]["active"] == 1).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        job_pods(admin, n, &juid).len(),
        1,
        "no pod created beside it"
    );
    // Relabelled: released, and a replacement made.
    admin
        .patch(
            &PODS,
            Some(n),
            "stray",
            PatchType::Merge,
            &json!({"metadata": {"labels": {"app": "other"}}}),
            None,
        )
        .expect("relabel");
    let released = eventually(LIMIT, "the pod released", || {
        let p = admin.get(&PODS, Some(n), "stray").expect("pod");
        edgekcm::obj::controller_ref(&p).is_none().then_some(p)
    });
    assert!(!has_finalizer(&released), "{}", released["metadata"]);
    let made = wait_active(admin, n, &juid, 1);
    finish_pod(
        admin,
        n,
        made[0]["metadata"]["name"].as_str().unwrap_or(""),
        0,
    );
    let done = wait_condition(admin, n, "adopter", "Complete");
    assert_eq!(done["status"]["succeeded"], 1);
    delete_pod_now(admin, n, "stray").expect("delete");
}

/// The API server goes away mid-run (the sandbox: connections dropped, watch history gone,
/// answers of status writes lost after they were carried out; a real one: killed and started
/// again): every Job completes with exactly its successes and no finalizer left.
fn scenario_apiserver_faults(t: &Target) {
    let ns = new_ns(t, "job-fault");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut kcm = start_with(t, "job-fault", CONTROLLERS);
    let jobs = 10;
    for i in 0..jobs {
        create_job(
            admin,
            n,
            &format!("f{i}"),
            json!({"completions": 3, "parallelism": 3}),
        );
    }
    let finish_some = |admin: &Client, limit: usize| {
        let mut done = 0;
        if let Ok(l) = admin.list(&PODS, Some(n), &ListOptions::default()) {
            for p in l.items.iter().filter(|p| is_active(p)).take(limit) {
                finish_pod(admin, n, p["metadata"]["name"].as_str().unwrap_or(""), 0);
                done += 1;
            }
        }
        done
    };
    eventually(LIMIT, "some pods", || {
        (finish_some(admin, 10) > 0).then_some(())
    });
    match t.sandbox() {
        Some(sb) => {
            let f = sb.faults();
            f.lose_answers(3, "PUT", Some("/status"));
            finish_some(admin, 5);
            std::thread::sleep(Duration::from_millis(1500));
            sb.stop_listening();
            std::thread::sleep(Duration::from_millis(500));
            f.expire_history();
            sb.resume_listening();
        }
        None => {
            let restart =
                std::env::var("KCM_E2E_APISERVER_RESTART").expect("KCM_E2E_APISERVER_RESTART");
            finish_some(admin, 5);
            let st = std::process::Command::new("sh")
                .args(["-c", &restart])
                .status()
                .expect("restart command");
            assert!(st.success(), "restart command failed: {st}");
        }
    }
    let admin = t.admin();
    eventually(Duration::from_secs(120), "every job Complete", || {
        finish_some(&admin, 100);
        let l = admin.list(&JOBS, Some(n), &ListOptions::default()).ok()?;
        (l.items.len() == jobs && l.items.iter().all(|j| condition(j, "Complete").is_some()))
            .then_some(())
    });
    for j in admin
        .list(&JOBS, Some(n), &ListOptions::default())
        .expect("jobs")
        .items
    {
        assert_eq!(j["status"]["succeeded"], 3, "{}", j["status"]);
        assert!(j["status"]["failed"].is_null(), "{}", j["status"]);
        let pods = job_pods(&admin, n, &uid(&j));
        assert_eq!(pods.len(), 3, "no extra pod");
        assert!(pods.iter().all(|p| !has_finalizer(p)));
    }
    assert!(kcm.exited().is_none(), "edgekcm exited");
}

scenarios! {
    apiserver_faults => scenario_apiserver_faults,
    nonindexed_completes => scenario_nonindexed_completes,
    indexed_completes => scenario_indexed_completes,
    backoff_limit => scenario_backoff_limit,
    pod_failure_policy => scenario_pod_failure_policy,
    suspend_resume => scenario_suspend_resume,
    active_deadline => scenario_active_deadline,
    restart_between_writes => scenario_restart_between_writes,
    orphan_released => scenario_orphan_released,
    orphans_released_at_start => scenario_orphans_released_at_start,
    orphans_adopted_and_released => scenario_orphans_adopted_and_released,
}
