//! cronjob-controller and ttl-after-finished-controller scenarios, against the sandbox always
//! and a real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`; edgekcm with
//! `--use-service-account-credentials=true`). No job-controller runs: the tests finish Jobs
//! themselves (status conditions through the status subresource, as a job controller would).
//! A CronJob is made due at once by writing a `lastScheduleTime` minutes in the past before
//! edgekcm starts: the most recent missed start time (the current minute) is then taken.

use crate::common::*;
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{CRONJOBS, EVENTS, JOBS};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const CRONJOB: &str = "--controllers=cronjob-controller";
const TTL: &str = "--controllers=ttl-after-finished-controller";
const LIMIT: Duration = Duration::from_secs(30);
const SCHEDULED: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

fn rfc3339(secs: i64) -> String {
    edgekcm::compat::timefmt::rfc3339(UNIX_EPOCH + Duration::from_secs(secs as u64))
}

fn template() -> Value {
    json!({
        "metadata": {"labels": {"app": "backup"}, "annotations": {"team": "edge"}},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
            "restartPolicy": "Never"}}}
    })
}

/// A CronJob due now: `lastScheduleTime` five minutes ago (a whole minute).
fn create_due_cronjob(admin: &Client, ns: &str, name: &str, schedule: &str, extra: Value) -> Value {
    let mut spec = json!({"schedule": schedule, "jobTemplate": template()});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    let cj = admin
        .create(
            &CRONJOBS,
            Some(ns),
            &json!({"apiVersion": "batch/v1", "kind": "CronJob",
                    "metadata": {"name": name}, "spec": spec}),
        )
        .expect("create cronjob");
    set_cronjob_status(
        admin,
        cj,
        json!({"lastScheduleTime": rfc3339((now_secs() / 60 - 5) * 60)}),
    )
}

fn set_cronjob_status(admin: &Client, mut cj: Value, status: Value) -> Value {
    cj["status"] = status;
    admin.update_status(&CRONJOBS, &cj).expect("cronjob status")
}

fn get_cronjob(admin: &Client, ns: &str, name: &str) -> Value {
    admin.get(&CRONJOBS, Some(ns), name).expect("get cronjob")
}

fn jobs(admin: &Client, ns: &str) -> Vec<Value> {
    admin
        .list(&JOBS, Some(ns), &ListOptions::default())
        .expect("list jobs")
        .items
}

fn names(v: &[Value]) -> Vec<String> {
    let mut n: Vec<String> = v
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    n.sort();
    n
}

/// A Job owned by `cj` (as the controller would make it), started at `start`.
fn create_owned_job(admin: &Client, ns: &str, cj: &Value, name: &str, ttl: Option<i64>) -> Value {
    let mut spec = template()["spec"].clone();
    if let Some(t) = ttl {
        spec["ttlSecondsAfterFinished"] = t.into();
    }
    let mut meta = json!({"name": name});
    if !cj.is_null() {
        meta["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "CronJob",
            "name": cj["metadata"]["name"], "uid": cj["metadata"]["uid"],
            "controller": true, "blockOwnerDeletion": true}]);
    }
    admin
        .create(
            &JOBS,
            Some(ns),
            &json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}),
        )
        .expect("create job")
}

/// Write the Job's status as a job controller would: started at `start`, and finished with
/// `cond` (`Complete` or `Failed`) at `end` when given, after the condition that leads to it
/// (`SuccessCriteriaMet` or `FailureTarget`: kube-apiserver 1.31 and later refuse a finished
/// Job without it).
fn set_job_status(admin: &Client, ns: &str, name: &str, start: i64, fin: Option<(&str, i64)>) {
    let mut job = admin.get(&JOBS, Some(ns), name).expect("get job");
    let mut status = json!({"startTime": rfc3339(start)});
    if let Some((cond, end)) = fin {
        let (before, reason) = if cond == "Complete" {
            ("SuccessCriteriaMet", "CompletionsReached")
        } else {
            ("FailureTarget", "BackoffLimitExceeded")
        };
        let at = rfc3339(end);
        status["conditions"] = json!([
            {"type": before, "status": "True", "reason": reason,
                "lastTransitionTime": at, "lastProbeTime": at},
            {"type": cond, "status": "True", "reason": reason,
                "lastTransitionTime": at, "lastProbeTime": at}]);
        if cond == "Complete" {
            status["completionTime"] = rfc3339(end).into();
            status["succeeded"] = 1.into();
        } else {
            status["failed"] = 1.into();
        }
    }
    job["status"] = status;
    admin.update_status(&JOBS, &job).expect("job status");
}

fn events_about(admin: &Client, ns: &str, name: &str) -> Vec<(String, String, String)> {
    admin
        .list(&EVENTS, Some(ns), &ListOptions::default())
        .expect("list events")
        .items
        .iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("").to_string(),
                e["reason"].as_str().unwrap_or("").to_string(),
                e["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn wait_event(admin: &Client, ns: &str, name: &str, reason: &str) -> (String, String, String) {
    eventually(LIMIT, &format!("{reason} Event about {name}"), || {
        events_about(admin, ns, name)
            .into_iter()
            .find(|e| e.1 == reason)
    })
}

fn active_names(cj: &Value) -> Vec<String> {
    let mut n: Vec<String> = cj["status"]["active"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .map(|r| r["name"].as_str().unwrap_or("").to_string())
        .collect();
    n.sort();
    n
}

/// A due start time: the Job `<cronjob>-<minutes>` from the template, owned by the CronJob;
/// the status names it; once it completes it leaves the active list and sets
/// lastSuccessfulTime.
fn scenario_due_time_starts_a_job_and_tracks_it(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-cron-start", &[JOBS, CRONJOBS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    // The scenario counts one Job: it starts early in a minute, so that the next minute's
    // Job (rightly made when the minute turns) does not come within it.
    let into_minute = now_secs() % 60;
    if into_minute > 30 {
        std::thread::sleep(Duration::from_secs((61 - into_minute) as u64));
    }
    let cj = create_due_cronjob(admin, n, "backup", "* * * * *", json!({}));
    let _kcm = start_with(t, "cron-start", CRONJOB);
    let job = eventually(LIMIT, "a Job", || jobs(admin, n).into_iter().next());
    let scheduled = job["metadata"]["annotations"][SCHEDULED]
        .as_str()
        .expect("the scheduled-timestamp annotation")
        .to_string();
    let at = edgekcm::compat::timefmt::parse_rfc3339(&scheduled).expect("RFC 3339");
    let minutes = at.duration_since(UNIX_EPOCH).unwrap().as_secs() / 60;
    let name = format!("backup-{minutes}");
    assert_eq!(job["metadata"]["name"], name.as_str());
    assert!(
        scheduled.ends_with('Z'),
        "UTC without a timeZone: {scheduled}"
    );
    assert_eq!(job["metadata"]["labels"]["app"], "backup");
    assert_eq!(job["metadata"]["annotations"]["team"], "edge");
    let owner = &job["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "CronJob");
    assert_eq!(owner["uid"], cj["metadata"]["uid"]);
    assert_eq!(owner["controller"], true);
    assert_eq!(owner["blockOwnerDeletion"], true);
    let cur = eventually(LIMIT, "the active list", || {
        let c = get_cronjob(admin, n, "backup");
        (active_names(&c) == [name.clone()]).then_some(c)
    });
    assert_eq!(cur["status"]["lastScheduleTime"], scheduled.as_str());
    assert_eq!(cur["status"]["active"][0]["uid"], job["metadata"]["uid"]);
    assert_eq!(cur["status"]["active"][0]["kind"], "Job");
    assert_eq!(cur["status"]["active"][0]["apiVersion"], "batch/v1");
    let e = wait_event(admin, n, "backup", "SuccessfulCreate");
    assert_eq!(
        (e.0.as_str(), e.2.as_str()),
        ("Normal", format!("Created job {name}").as_str())
    );
    // Only one Job for the time.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        names(&jobs(admin, n)).len(),
        1,
        "{:?}",
        names(&jobs(admin, n))
    );
    // The Job completes.
    let now = now_secs();
    set_job_status(admin, n, &name, now - 1, Some(("Complete", now)));
    let done = eventually(LIMIT, "lastSuccessfulTime", || {
        let c = get_cronjob(admin, n, "backup");
        (c["status"]["lastSuccessfulTime"].is_string()).then_some(c)
    });
    assert!(active_names(&done).is_empty(), "{done}");
    assert_eq!(done["status"]["lastSuccessfulTime"], rfc3339(now).as_str());
    let e = wait_event(admin, n, "backup", "SawCompletedJob");
    assert_eq!(
        e.2,
        format!("Saw completed job: {name}, condition: Complete")
    );
}

/// A running Job in the active list: `Forbid` starts nothing (JobAlreadyActive); `Replace`
/// deletes it and starts the new one.
fn scenario_forbid_and_replace(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-cron-conc", &[JOBS, CRONJOBS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut made = Vec::new();
    for (name, policy) in [("forbid", "Forbid"), ("replace", "Replace")] {
        let cj = create_due_cronjob(
            admin,
            n,
            name,
            "* * * * *",
            json!({"concurrencyPolicy": policy}),
        );
        let running = create_owned_job(admin, n, &cj, &format!("{name}-old"), None);
        set_job_status(admin, n, &format!("{name}-old"), now_secs() - 60, None);
        let mut status = cj["status"].clone();
        status["active"] = json!([{"kind": "Job", "namespace": n, "name": running["metadata"]["name"],
            "uid": running["metadata"]["uid"], "apiVersion": "batch/v1"}]);
        set_cronjob_status(admin, get_cronjob(admin, n, name), status);
        made.push(running);
    }
    let _kcm = start_with(t, "cron-conc", CRONJOB);
    let e = wait_event(admin, n, "forbid", "JobAlreadyActive");
    assert_eq!(e.0, "Normal");
    // Replace: the old Job goes, a new one takes its place.
    let cur = eventually(LIMIT, "the replacement in the active list", || {
        let c = get_cronjob(admin, n, "replace");
        let a = active_names(&c);
        (a.len() == 1 && a[0] != "replace-old").then_some(c)
    });
    let new = active_names(&cur)[0].clone();
    assert!(new.starts_with("replace-"), "{new}");
    let e = wait_event(admin, n, "replace", "SuccessfulDelete");
    assert_eq!(e.2, "Deleted job replace-old");
    wait_event(admin, n, "replace", "SuccessfulCreate");
    eventually(LIMIT, "replace-old deleted", || {
        let j = admin.get(&JOBS, Some(n), "replace-old");
        match j {
            Err(e) if e.is_not_found() => Some(()),
            Ok(j) if !j["metadata"]["deletionTimestamp"].is_null() => Some(()),
            _ => None,
        }
    });
    // Forbid started nothing and kept its Job.
    let forbid_jobs: Vec<String> = names(&jobs(admin, n))
        .into_iter()
        .filter(|j| j.starts_with("forbid"))
        .collect();
    assert_eq!(forbid_jobs, ["forbid-old"]);
    assert_eq!(
        active_names(&get_cronjob(admin, n, "forbid")),
        ["forbid-old"]
    );
}

/// History limits: of finished Jobs, the newest `successfulJobsHistoryLimit` Complete and
/// `failedJobsHistoryLimit` Failed ones stay (by start time); running Jobs and those of other
/// owners are not touched. Suspended: nothing new starts.
fn scenario_history_limits(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-cron-hist", &[JOBS, CRONJOBS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let cj = create_due_cronjob(
        admin,
        n,
        "hist",
        "* * * * *",
        json!({"suspend": true, "successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1}),
    );
    let now = now_secs();
    for (i, (name, cond)) in [
        ("hist-ok-1", Some("Complete")),
        ("hist-ok-2", Some("Complete")),
        ("hist-ok-3", Some("Complete")),
        ("hist-bad-1", Some("Failed")),
        ("hist-bad-2", Some("Failed")),
        ("hist-running", None),
    ]
    .iter()
    .enumerate()
    {
        create_owned_job(admin, n, &cj, name, None);
        let start = now - 600 + 60 * i as i64;
        set_job_status(admin, n, name, start, cond.map(|c| (c, start + 30)));
    }
    create_owned_job(admin, n, &Value::Null, "orphan", None);
    set_job_status(admin, n, "orphan", now - 900, Some(("Complete", now - 800)));
    let _kcm = start_with(t, "cron-hist", CRONJOB);
    eventually(LIMIT, "history trimmed", || {
        (names(&jobs(admin, n)) == ["hist-bad-2", "hist-ok-3", "hist-running", "orphan"])
            .then_some(())
    });
    let deleted: Vec<String> = events_about(admin, n, "hist")
        .into_iter()
        .filter(|e| e.1 == "SuccessfulDelete")
        .map(|e| e.2)
        .collect();
    eventually(LIMIT, "three SuccessfulDelete Events", || {
        let mut d: Vec<String> = events_about(admin, n, "hist")
            .into_iter()
            .filter(|e| e.1 == "SuccessfulDelete")
            .map(|e| e.2)
            .collect();
        d.sort();
        (d == [
            "Deleted job hist-bad-1",
            "Deleted job hist-ok-1",
            "Deleted job hist-ok-2",
        ])
        .then_some(())
    });
    let _ = deleted;
    // Suspended: the due time started nothing.
    std::thread::sleep(Duration::from_secs(2));
    assert!(events_about(admin, n, "hist")
        .iter()
        .all(|e| e.1 != "SuccessfulCreate"));
}

/// A finished Job with a TTL is deleted (foreground) once it expires; one with a long TTL
/// and an unfinished one stay.
fn scenario_ttl_after_finished(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-ttl-fin", &[JOBS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let _kcm = start_with(t, "ttl-fin", TTL);
    create_owned_job(admin, n, &Value::Null, "short", Some(3));
    create_owned_job(admin, n, &Value::Null, "long", Some(3600));
    create_owned_job(admin, n, &Value::Null, "running", Some(0));
    let now = now_secs();
    set_job_status(admin, n, "short", now - 1, Some(("Complete", now)));
    set_job_status(admin, n, "long", now - 1, Some(("Failed", now)));
    set_job_status(admin, n, "running", now - 1, None);
    // Not before its time is up.
    std::thread::sleep(Duration::from_secs(1));
    let short = admin.get(&JOBS, Some(n), "short").expect("still there");
    assert!(short["metadata"]["deletionTimestamp"].is_null());
    // Foreground deletion: the Job waits for its dependents to go (without a garbage
    // collector running it keeps the foregroundDeletion finalizer).
    eventually(LIMIT, "short deleted", || {
        match admin.get(&JOBS, Some(n), "short") {
            Err(e) if e.is_not_found() => Some(()),
            Ok(j) if !j["metadata"]["deletionTimestamp"].is_null() => {
                assert_eq!(j["metadata"]["finalizers"], json!(["foregroundDeletion"]));
                Some(())
            }
            _ => None,
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    for name in ["long", "running"] {
        let j = admin.get(&JOBS, Some(n), name).expect("kept");
        assert!(j["metadata"]["deletionTimestamp"].is_null(), "{name}");
    }
    // A TTL shortened later counts from the finish time.
    let mut long = admin.get(&JOBS, Some(n), "long").expect("long");
    long["spec"]["ttlSecondsAfterFinished"] = 1.into();
    admin.update(&JOBS, &long).expect("shorter ttl");
    eventually(LIMIT, "long deleted", || {
        match admin.get(&JOBS, Some(n), "long") {
            Err(e) if e.is_not_found() => Some(()),
            Ok(j) if !j["metadata"]["deletionTimestamp"].is_null() => Some(()),
            _ => None,
        }
    });
    for name in ["short", "long"] {
        let _ = admin.patch(
            &JOBS,
            Some(n),
            name,
            edgekcm::api::client::PatchType::Merge,
            &json!({"metadata": {"finalizers": null}}),
            None,
        );
    }
}

/// The apiserver goes away and comes back: the controller goes on from its caches (the
/// started Job is not started again) and serves new CronJobs.
fn scenario_apiserver_restart(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-cron-restart", &[JOBS, CRONJOBS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    create_due_cronjob(admin, n, "before", "*/1 * * * *", json!({}));
    let mut kcm = start_with(t, "cron-restart", CRONJOB);
    // The outage comes once the CronJob's status lists the Job: a status write lost to the
    // outage is not made again (upstream too takes the Job's AlreadyExists on the next sync
    // as someone else's doing), and that is not what this scenario is about.
    eventually(LIMIT, "the first Job, listed active", || {
        (jobs(admin, n).len() == 1 && active_names(&get_cronjob(admin, n, "before")).len() == 1)
            .then_some(())
    });
    match t.sandbox() {
        Some(sb) => {
            sb.stop_listening();
            std::thread::sleep(Duration::from_secs(5));
            sb.try_resume_listening().expect("listen again");
        }
        None => {
            let cmd = std::env::var("KCM_E2E_APISERVER_RESTART")
                .expect("the restart scenario needs KCM_E2E_APISERVER_RESTART");
            let ok = std::process::Command::new("sh")
                .arg("-c")
                .arg(&cmd)
                .status();
            assert!(matches!(ok.map(|s| s.success()), Ok(true)), "{cmd}");
            eventually(Duration::from_secs(60), "apiserver back", || {
                admin.get_raw("/readyz").ok()
            });
        }
    }
    create_due_cronjob(admin, n, "after", "*/1 * * * *", json!({}));
    eventually(Duration::from_secs(60), "the second CronJob's Job", || {
        names(&jobs(admin, n))
            .iter()
            .any(|j| j.starts_with("after-"))
            .then_some(())
    });
    assert!(kcm.exited().is_none(), "edgekcm kept running");
    let before: Vec<String> = names(&jobs(admin, n))
        .into_iter()
        .filter(|j| j.starts_with("before-"))
        .collect();
    // At most one more: the next minute may have come meanwhile.
    assert!(!before.is_empty() && before.len() <= 2, "{before:?}");
    let c = get_cronjob(admin, n, "before");
    assert_eq!(active_names(&c), before);
}

/// In a zone: the start time is that zone's; the annotation carries its offset.
fn scenario_time_zone(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-cron-tz", &[JOBS, CRONJOBS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    create_due_cronjob(
        admin,
        n,
        "kolkata",
        "* * * * *",
        json!({"timeZone": "Asia/Kolkata"}),
    );
    let _kcm = start_with(t, "cron-tz", CRONJOB);
    let job = eventually(LIMIT, "a Job", || jobs(admin, n).into_iter().next());
    let s = job["metadata"]["annotations"][SCHEDULED]
        .as_str()
        .unwrap_or("");
    assert!(s.ends_with("+05:30"), "{s}");
}

/// Jobs are the CronJob's by the controller reference's UID (v1.37): a finished Job of an
/// earlier CronJob of the same name is neither counted in the history nor deleted.
fn scenario_jobs_by_controller_uid(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-cron-uid", &[JOBS, CRONJOBS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let cj = create_due_cronjob(
        admin,
        n,
        "same",
        "* * * * *",
        json!({"suspend": true, "successfulJobsHistoryLimit": 0}),
    );
    let mut earlier = cj.clone();
    earlier["metadata"]["uid"] = json!("0b3a4d9e-0000-4000-8000-00000000e411");
    let now = now_secs();
    for (name, owner) in [("same-mine", &cj), ("same-earlier", &earlier)] {
        create_owned_job(admin, n, owner, name, None);
        set_job_status(admin, n, name, now - 300, Some(("Complete", now - 200)));
    }
    let _kcm = start_with(t, "cron-uid", CRONJOB);
    eventually(LIMIT, "its own Job deleted", || {
        (names(&jobs(admin, n)) == ["same-earlier"]).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(names(&jobs(admin, n)), ["same-earlier"]);
    let deleted: Vec<String> = events_about(admin, n, "same")
        .into_iter()
        .filter(|e| e.1 == "SuccessfulDelete")
        .map(|e| e.2)
        .collect();
    assert_eq!(deleted, ["Deleted job same-mine"]);
}

scenarios! {
    due_time_starts_a_job_and_tracks_it => scenario_due_time_starts_a_job_and_tracks_it,
    forbid_and_replace => scenario_forbid_and_replace,
    history_limits => scenario_history_limits,
    ttl_after_finished => scenario_ttl_after_finished,
    apiserver_restart => scenario_apiserver_restart,
    time_zone => scenario_time_zone,
    jobs_by_controller_uid => scenario_jobs_by_controller_uid,
}
