//! The schedule search (checked against robfig/cron's own answers, DST transitions in real
//! zones included), the missed-times rule, history cleanup, and whole syncs.

use super::gotime::{self, SECOND};
use super::schedule::{self, most_recent, next_duration, parse, Missed};
use super::sync::{self, plan, Live, Plan};
use super::CronJobController;
use crate::api::resources::{CRONJOBS, JOBS};
use crate::controller::{Action, Applied, Controller, Cx, EventType};
use crate::controllers::testing::Harness;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::HashMap;

fn t(s: &str) -> i64 {
    gotime::from_system(crate::compat::timefmt::parse_rfc3339(s).expect("an RFC 3339 time"))
}

fn iso(ns: i64) -> String {
    crate::compat::timefmt::rfc3339(gotime::to_system(ns))
}

/// The start times after `from`, `n` of them, as RFC 3339 UTC.
fn nexts(spec: &str, from: &str, n: usize) -> Vec<String> {
    let s = parse(spec).expect("a valid schedule");
    let mut at = t(from);
    let mut out = Vec::new();
    for _ in 0..n {
        match s.next(at) {
            Some(x) => {
                out.push(iso(x));
                at = x;
            }
            None => break,
        }
    }
    out
}

#[test]
fn parse_errors_are_the_librarys() {
    for (spec, want) in [
        ("", "empty spec string"),
        ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
        (
            "* * * * * *",
            "expected exactly 5 fields, found 6: [* * * * * *]",
        ),
        ("60 * * * *", "end of range (60) above maximum (59): 60"),
        ("* 24 * * *", "end of range (24) above maximum (23): 24"),
        ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
        ("* * * 13 *", "end of range (13) above maximum (12): 13"),
        ("* * * * 7", "end of range (7) above maximum (6): 7"),
        (
            "*/0 * * * *",
            "step of range should be a positive number: */0",
        ),
        (
            "5-1 * * * *",
            "beginning of range (5) beyond end of range (1): 5-1",
        ),
        ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
        ("1/2/3 * * * *", "too many slashes: 1/2/3"),
        (
            "a * * * *",
            "failed to parse int from a: strconv.Atoi: parsing \"a\": invalid syntax",
        ),
        (
            "*/ * * * *",
            "failed to parse int from : strconv.Atoi: parsing \"\": invalid syntax",
        ),
        (
            "* * * * mon-sun",
            "beginning of range (1) beyond end of range (0): mon-sun",
        ),
        ("@foo", "unrecognized descriptor: @foo"),
        (
            "@every x",
            "failed to parse duration @every x: time: invalid duration \"x\"",
        ),
        (
            "TZ=Nowhere/City * * * * *",
            "provided bad location Nowhere/City: unknown time zone Nowhere/City",
        ),
        ("TZ=UTC", "provided bad location UTC: no schedule after it"),
    ] {
        assert_eq!(parse(spec).err().as_deref(), Some(want), "{spec:?}");
    }
}

#[test]
fn fields_names_ranges_steps_and_lists() {
    let from = "2024-04-06T14:45:00Z"; // a Saturday
    assert_eq!(
        nexts("* * * * *", from, 2),
        ["2024-04-06T14:46:00Z", "2024-04-06T14:47:00Z"]
    );
    assert_eq!(
        nexts("*/20 * * * *", from, 2),
        ["2024-04-06T15:00:00Z", "2024-04-06T15:20:00Z"]
    );
    assert_eq!(
        nexts("10-50/20 9-17/4 * * *", from, 4),
        [
            "2024-04-06T17:10:00Z",
            "2024-04-06T17:30:00Z",
            "2024-04-06T17:50:00Z",
            "2024-04-07T09:10:00Z",
        ]
    );
    // Names in any case; `?` is `*`.
    assert_eq!(
        nexts("0 12 ? JAN,Jul mon", from, 2),
        ["2024-07-01T12:00:00Z", "2024-07-08T12:00:00Z"]
    );
    // A single value with a step runs to the end of the range.
    assert_eq!(
        nexts("50/5 14 6 4 *", from, 3),
        [
            "2024-04-06T14:50:00Z",
            "2024-04-06T14:55:00Z",
            "2025-04-06T14:50:00Z"
        ]
    );
    // Leap days, and a date that never comes.
    assert_eq!(
        nexts("0 0 29 2 *", "2024-03-01T00:00:00Z", 1),
        ["2028-02-29T00:00:00Z"]
    );
    assert!(nexts("0 0 30 2 *", from, 1).is_empty());
}

#[test]
fn day_of_month_or_day_of_week_when_both_are_restricted() {
    // The 13th or a Friday.
    assert_eq!(
        nexts("0 12 13 * 5", "2024-04-06T14:45:00Z", 3),
        [
            "2024-04-12T12:00:00Z",
            "2024-04-13T12:00:00Z",
            "2024-04-19T12:00:00Z"
        ]
    );
    // With `*` in one of them: both must match (every day of the week, on the 13th).
    assert_eq!(
        nexts("0 12 13 * *", "2024-04-06T14:45:00Z", 1),
        ["2024-04-13T12:00:00Z"]
    );
    // `*/1` restricts (no star bit once a step is given... but a step of 1 keeps it).
    assert_eq!(
        nexts("0 12 13 * */2", "2024-04-06T14:45:00Z", 2),
        ["2024-04-07T12:00:00Z", "2024-04-09T12:00:00Z"]
    );
}

#[test]
fn descriptors() {
    let from = "2024-04-06T14:45:00Z";
    assert_eq!(nexts("@hourly", from, 1), ["2024-04-06T15:00:00Z"]);
    assert_eq!(nexts("@daily", from, 1), ["2024-04-07T00:00:00Z"]);
    assert_eq!(nexts("@midnight", from, 1), ["2024-04-07T00:00:00Z"]);
    assert_eq!(nexts("@weekly", from, 1), ["2024-04-07T00:00:00Z"]);
    assert_eq!(nexts("@monthly", from, 1), ["2024-05-01T00:00:00Z"]);
    assert_eq!(nexts("@yearly", from, 1), ["2025-01-01T00:00:00Z"]);
    assert_eq!(nexts("@annually", from, 1), ["2025-01-01T00:00:00Z"]);
    assert_eq!(
        nexts("@every 1h30m", from, 2),
        ["2024-04-06T16:15:00Z", "2024-04-06T17:45:00Z"]
    );
    // Under a second is a second; fractions of a second are dropped.
    assert_eq!(nexts("@every 10ms", from, 1), ["2024-04-06T14:45:01Z"]);
    assert_eq!(nexts("@every 1.5s", from, 1), ["2024-04-06T14:45:01Z"]);
    // Descriptors in a zone.
    assert_eq!(
        nexts("TZ=Asia/Kolkata @weekly", from, 1),
        ["2024-04-06T18:30:00Z"]
    );
}

#[test]
fn dst_spring_forward_skips_the_missing_time() {
    // New York, 2024-03-10: 02:00 EST jumps to 03:00 EDT. 02:30 does not happen that day.
    assert_eq!(
        nexts("TZ=America/New_York 30 2 * * *", "2024-03-09T08:00:00Z", 2),
        ["2024-03-11T06:30:00Z", "2024-03-12T06:30:00Z"]
    );
    // 01:15 happens as usual, in EST.
    assert_eq!(
        nexts("TZ=America/New_York 15 1 * * *", "2024-03-10T01:30:00Z", 2),
        ["2024-03-10T06:15:00Z", "2024-03-11T05:15:00Z"]
    );
    // Berlin, 2024-03-31: 02:00 CET jumps to 03:00 CEST.
    assert_eq!(
        nexts("TZ=Europe/Berlin 30 2 * * *", "2024-03-31T00:30:00Z", 1),
        ["2024-04-01T00:30:00Z"]
    );
    // Sao Paulo, 2018-11-04: midnight did not exist (00:00 -03 became 01:00 -02): no run.
    assert_eq!(
        nexts("TZ=America/Sao_Paulo 0 0 * * *", "2018-11-03T02:00:00Z", 3),
        [
            "2018-11-03T03:00:00Z",
            "2018-11-05T02:00:00Z",
            "2018-11-06T02:00:00Z",
        ]
    );
}

#[test]
fn dst_fall_back_runs_in_both_occurrences_of_the_hour() {
    // New York, 2018-11-04: 02:00 EDT falls back to 01:00 EST; 01:15 comes twice.
    assert_eq!(
        nexts("TZ=America/New_York 15 1 * * *", "2018-11-03T02:00:00Z", 4),
        [
            "2018-11-03T05:15:00Z",
            "2018-11-04T05:15:00Z",
            "2018-11-04T06:15:00Z",
            "2018-11-05T06:15:00Z",
        ]
    );
    // Every hour: the repeated hour is two runs, an hour apart in real time.
    assert_eq!(
        nexts("TZ=America/New_York 0 * * * *", "2024-11-03T04:30:00Z", 3),
        [
            "2024-11-03T05:00:00Z",
            "2024-11-03T06:00:00Z",
            "2024-11-03T07:00:00Z"
        ]
    );
    // Lord Howe moves by half an hour.
    assert_eq!(
        nexts(
            "TZ=Australia/Lord_Howe 30 2 * * *",
            "2024-10-05T15:40:00Z",
            1
        ),
        ["2024-10-06T15:30:00Z"]
    );
}

#[test]
fn time_zones_load_by_exact_iana_name() {
    assert!(gotime::load_location("Europe/Berlin").is_ok());
    assert!(gotime::load_location("").is_ok());
    assert!(gotime::load_location("UTC").is_ok());
    assert_eq!(
        gotime::load_location("europe/berlin").err().as_deref(),
        Some("unknown time zone europe/berlin")
    );
    assert!(gotime::load_location("../etc/passwd").is_err());
    // The copy built in, for images without zoneinfo.
    let bundled = jiff::tz::TimeZoneDatabase::bundled();
    assert_eq!(
        bundled
            .get("America/Sao_Paulo")
            .ok()
            .and_then(|z| z.iana_name().map(str::to_string)),
        Some("America/Sao_Paulo".to_string())
    );
    assert_eq!(
        gotime::rfc3339_in(
            &gotime::load_location("Asia/Kolkata").unwrap(),
            t("2024-01-01T00:00:00Z")
        ),
        "2024-01-01T05:30:00+05:30"
    );
    assert_eq!(
        gotime::rfc3339_in(
            &gotime::load_location("").unwrap(),
            t("2024-01-01T00:00:00Z")
        ),
        "2024-01-01T00:00:00Z"
    );
}

#[test]
fn most_recent_start_time_and_missed_count() {
    let every_min = parse("TZ=UTC * * * * *").unwrap();
    let created = t("2024-01-01T00:00:30Z");
    // Nothing due yet.
    let (_, r, m, e) = most_recent(&every_min, created, None, t("2024-01-01T00:00:50Z"));
    assert_eq!((r, m, e), (None, Missed::None, Ok(())));
    // One due.
    let (_, r, m, _) = most_recent(&every_min, created, None, t("2024-01-01T00:01:10Z"));
    assert_eq!(
        (r.map(iso), m),
        (Some("2024-01-01T00:01:00Z".into()), Missed::None)
    );
    // A few missed: the latest one is taken.
    let (_, r, m, _) = most_recent(&every_min, created, None, t("2024-01-01T00:05:10Z"));
    assert_eq!(
        (r.map(iso), m),
        (Some("2024-01-01T00:05:00Z".into()), Missed::Few)
    );
    // 100 missed is still few, 101 is many.
    let (_, _, m, _) = most_recent(&every_min, created, None, t("2024-01-01T01:40:10Z"));
    assert_eq!(m, Missed::Few);
    let (_, r, m, _) = most_recent(&every_min, created, None, t("2024-01-01T01:41:10Z"));
    assert_eq!(
        (r.map(iso), m),
        (Some("2024-01-01T01:41:00Z".into()), Missed::Many)
    );
    // A starting deadline bounds how far back is looked.
    let (from, _, m, _) = most_recent(&every_min, created, Some(300), t("2024-01-01T01:41:10Z"));
    assert_eq!(
        (iso(from), m),
        ("2024-01-01T01:36:10Z".to_string(), Missed::Few)
    );
    // A schedule that never fires.
    let never = parse("TZ=UTC 0 0 30 2 *").unwrap();
    let (_, r, _, e) = most_recent(&never, created, None, t("2024-03-01T00:00:00Z"));
    assert_eq!(r, None);
    assert_eq!(
        e.err().as_deref(),
        Some("time difference between two schedules is less than 1 second")
    );
}

#[test]
fn requeue_is_at_the_next_start_time_plus_100ms() {
    let hourly = parse("TZ=UTC 0 * * * *").unwrap();
    let created = t("2024-01-01T00:10:00Z");
    let now = t("2024-01-01T00:20:00Z");
    assert_eq!(
        next_duration(&hourly, created, now),
        Some(40 * 60 * SECOND + schedule::NEXT_DELTA)
    );
    // Missed ones: from the most recent.
    let now = t("2024-01-01T05:20:00Z");
    assert_eq!(
        next_duration(&hourly, created, now),
        Some(40 * 60 * SECOND + schedule::NEXT_DELTA)
    );
    assert_eq!(
        next_duration(&parse("TZ=UTC 0 0 30 2 *").unwrap(), created, now),
        None
    );
}

// ---- history and syncs ----

fn cronjob(name: &str, schedule: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("cj-{name}"),
                     "resourceVersion": "7", "creationTimestamp": "2024-01-01T00:00:30Z"},
        "spec": {
            "schedule": schedule,
            "jobTemplate": {
                "metadata": {"labels": {"app": "x"}, "annotations": {"note": "y"}},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}],
                                               "restartPolicy": "Never"}}}
            }
        },
        "status": {}
    })
}

fn job(cj: &Value, name: &str, cond: Option<&str>, start: &str) -> Value {
    let mut j = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                     "resourceVersion": "3",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                        "name": cj["metadata"]["name"], "uid": cj["metadata"]["uid"],
                        "controller": true, "blockOwnerDeletion": true}]},
        "spec": {},
        "status": {"startTime": start},
    });
    if let Some(c) = cond {
        j["status"]["conditions"] =
            json!([{"type": c, "status": "True", "lastTransitionTime": "2024-01-01T00:30:00Z"}]);
        if c == "Complete" {
            j["status"]["completionTime"] = "2024-01-01T00:30:00Z".into();
        }
    }
    j
}

fn activate(cj: &mut Value, jobs: &[&Value]) {
    cj["status"]["active"] = jobs.iter().map(|j| sync::job_ref(j)).collect();
}

/// Live reads from a map; a missing name is NotFound.
#[derive(Default)]
struct FakeLive {
    cronjobs: HashMap<String, Value>,
    jobs: HashMap<String, Value>,
    reads: RefCell<Vec<String>>,
}

impl Live for FakeLive {
    fn cronjob(&self, _: &str, name: &str) -> crate::Result<Value> {
        self.reads.borrow_mut().push(format!("cronjob {name}"));
        self.cronjobs
            .get(name)
            .cloned()
            .ok_or_else(|| crate::Error::api(404, "NotFound", "not found"))
    }
    fn job(&self, _: &str, name: &str) -> crate::Result<Value> {
        self.reads.borrow_mut().push(format!("job {name}"));
        self.jobs.get(name).cloned().ok_or_else(|| {
            crate::Error::api(404, "NotFound", format!("jobs.batch \"{name}\" not found"))
        })
    }
}

fn reasons(p: &Plan) -> Vec<String> {
    p.events.iter().map(|e| e.reason.clone()).collect()
}

#[test]
fn history_keeps_the_newest_of_each_kind() {
    let mut cj = cronjob("c", "* * * * *");
    cj["spec"]["successfulJobsHistoryLimit"] = 1.into();
    cj["spec"]["failedJobsHistoryLimit"] = 0.into();
    let jobs = vec![
        job(&cj, "ok-new", Some("Complete"), "2024-01-01T00:03:00Z"),
        job(&cj, "ok-old", Some("Complete"), "2024-01-01T00:01:00Z"),
        job(&cj, "ok-mid", Some("Complete"), "2024-01-01T00:02:00Z"),
        job(&cj, "failed", Some("Failed"), "2024-01-01T00:02:00Z"),
        job(&cj, "running", None, "2024-01-01T00:04:00Z"),
    ];
    let names: Vec<String> = sync::history_to_delete(&cj, &jobs)
        .iter()
        .map(|j| crate::obj::name(j).to_string())
        .collect();
    assert_eq!(names, ["ok-old", "ok-mid", "failed"]);
    // No limits: nothing goes.
    let plain = cronjob("c", "* * * * *");
    assert!(sync::history_to_delete(&plain, &jobs).is_empty());
    // Without a start time a Job sorts last; ties by name.
    let mut v = vec![
        job(&cj, "b", None, "2024-01-01T00:01:00Z"),
        job(&cj, "a", None, "2024-01-01T00:01:00Z"),
    ];
    v[0]["status"].as_object_mut().unwrap().remove("startTime");
    sync::sort_by_start_time(&mut v);
    assert_eq!(crate::obj::name(&v[0]), "a");
}

#[test]
fn a_due_start_time_creates_the_job_from_the_template() {
    let mut cj = cronjob("c", "* * * * *");
    cj["spec"]["timeZone"] = "Asia/Kolkata".into();
    let p = plan(&cj, &[], t("2024-01-01T00:01:05Z"), &FakeLive::default()).unwrap();
    let start = p.start.expect("a start");
    assert_eq!(iso(start.scheduled), "2024-01-01T00:01:00Z");
    let j = &start.job;
    assert_eq!(
        j["metadata"]["name"],
        format!("c-{}", t("2024-01-01T00:01:00Z") / SECOND / 60)
    );
    assert_eq!(j["metadata"]["labels"], json!({"app": "x"}));
    assert_eq!(
        j["metadata"]["annotations"],
        json!({"note": "y", "batch.kubernetes.io/cronjob-scheduled-timestamp": "2024-01-01T05:31:00+05:30"})
    );
    assert_eq!(j["metadata"]["ownerReferences"][0]["uid"], "cj-c");
    assert_eq!(j["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(j["spec"], cj["spec"]["jobTemplate"]["spec"]);
    assert_eq!(p.requeue, Some(55 * SECOND + schedule::NEXT_DELTA));
    // Already started (by lastScheduleTime): only the requeue.
    let mut done = cj.clone();
    done["status"]["lastScheduleTime"] = "2024-01-01T00:01:00Z".into();
    let p = plan(&done, &[], t("2024-01-01T00:01:05Z"), &FakeLive::default()).unwrap();
    assert!(p.start.is_none() && p.events.is_empty() && !p.update_status);
    assert_eq!(p.requeue, Some(55 * SECOND + schedule::NEXT_DELTA));
}

#[test]
fn suspended_deleting_bad_zone_and_bad_schedule_start_nothing() {
    let now = t("2024-01-01T00:01:05Z");
    let mut s = cronjob("c", "* * * * *");
    s["spec"]["suspend"] = true.into();
    let p = plan(&s, &[], now, &FakeLive::default()).unwrap();
    assert!(p.start.is_none() && p.requeue.is_none() && p.events.is_empty());
    let mut d = cronjob("c", "* * * * *");
    d["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z".into();
    assert!(plan(&d, &[], now, &FakeLive::default())
        .unwrap()
        .start
        .is_none());
    let mut z = cronjob("c", "* * * * *");
    z["spec"]["timeZone"] = "Mars/Olympus".into();
    let p = plan(&z, &[], now, &FakeLive::default()).unwrap();
    assert_eq!(reasons(&p), ["UnknownTimeZone"]);
    assert_eq!(
        p.events[0].message,
        "invalid timeZone: \"Mars/Olympus\": unknown time zone Mars/Olympus"
    );
    let p = plan(&cronjob("c", "61 * * * *"), &[], now, &FakeLive::default()).unwrap();
    assert_eq!(reasons(&p), ["UnparseableSchedule"]);
    assert_eq!(
        p.events[0].message,
        "unparseable schedule: \"61 * * * *\" : end of range (61) above maximum (59): 61"
    );
    let p = plan(&cronjob("c", "0 0 30 2 *"), &[], now, &FakeLive::default()).unwrap();
    assert_eq!(reasons(&p), ["InvalidSchedule"]);
    assert!(p.requeue.is_none());
}

#[test]
fn tz_in_the_schedule_is_used_with_a_warning() {
    let cj = cronjob("c", "CRON_TZ=Asia/Kolkata 31 5 * * *");
    let p = plan(&cj, &[], t("2024-01-01T00:01:05Z"), &FakeLive::default()).unwrap();
    assert_eq!(reasons(&p), ["UnsupportedSchedule"]);
    assert_eq!(iso(p.start.unwrap().scheduled), "2024-01-01T00:01:00Z");
}

#[test]
fn missed_deadline_and_too_many_missed_times() {
    let mut cj = cronjob("c", "* * * * *");
    cj["spec"]["startingDeadlineSeconds"] = 10.into();
    // The most recent start time is 30 s ago, past the deadline: the search starts at the
    // deadline, so nothing is due (no Event), and the next start time is waited for.
    let p = plan(&cj, &[], t("2024-01-01T00:05:30Z"), &FakeLive::default()).unwrap();
    assert!(p.start.is_none() && p.events.is_empty());
    assert_eq!(p.requeue, Some(30 * SECOND + schedule::NEXT_DELTA));
    // Within the deadline it starts.
    cj["spec"]["startingDeadlineSeconds"] = 60.into();
    let p = plan(&cj, &[], t("2024-01-01T00:05:30Z"), &FakeLive::default()).unwrap();
    assert_eq!(iso(p.start.unwrap().scheduled), "2024-01-01T00:05:00Z");
    assert_eq!(
        sync::rfc1123z(t("2024-01-01T00:05:00Z")),
        "Mon, 01 Jan 2024 00:05:00 +0000"
    );
    // More than 100 missed, no deadline: the Event, and the most recent one still starts.
    let cj = cronjob("c", "* * * * *");
    let p = plan(&cj, &[], t("2024-01-01T03:00:05Z"), &FakeLive::default()).unwrap();
    assert_eq!(reasons(&p), ["TooManyMissedTimes"]);
    assert_eq!(iso(p.start.unwrap().scheduled), "2024-01-01T03:00:00Z");
}

#[test]
fn forbid_waits_and_replace_deletes_the_running_job() {
    let now = t("2024-01-01T00:02:05Z");
    let mut cj = cronjob("c", "* * * * *");
    cj["status"]["lastScheduleTime"] = "2024-01-01T00:01:00Z".into();
    let running = job(&cj, "c-old", None, "2024-01-01T00:01:00Z");
    activate(&mut cj, &[&running]);
    cj["spec"]["concurrencyPolicy"] = "Forbid".into();
    let p = plan(
        &cj,
        std::slice::from_ref(&running),
        now,
        &FakeLive::default(),
    )
    .unwrap();
    assert!(p.start.is_none());
    assert_eq!(reasons(&p), ["JobAlreadyActive"]);
    cj["spec"]["concurrencyPolicy"] = "Replace".into();
    let live = FakeLive {
        jobs: HashMap::from([("c-old".to_string(), running.clone())]),
        ..FakeLive::default()
    };
    let p = plan(&cj, std::slice::from_ref(&running), now, &live).unwrap();
    assert_eq!(
        p.replace_deletes,
        [("c-old".to_string(), "u-c-old".to_string())]
    );
    assert!(p.start.is_some());
    // The running Job could not be read: FailedGet, nothing replaced or started.
    let p = plan(
        &cj,
        std::slice::from_ref(&running),
        now,
        &FakeLive::default(),
    )
    .unwrap();
    assert_eq!(reasons(&p), ["FailedGet"]);
    assert!(p.start.is_none() && p.replace_deletes.is_empty() && p.retry.is_some());
    // Allow: a second Job alongside.
    cj["spec"]["concurrencyPolicy"] = "Allow".into();
    let p = plan(&cj, &[running], now, &FakeLive::default()).unwrap();
    assert!(p.start.is_some() && p.replace_deletes.is_empty());
}

#[test]
fn active_list_maintenance() {
    let now = t("2024-01-01T00:01:30Z");
    let mut cj = cronjob("c", "0 * * * *");
    let done = job(&cj, "c-done", Some("Complete"), "2024-01-01T00:00:00Z");
    let gone = job(&cj, "c-gone", None, "2024-01-01T00:00:00Z");
    let stranger = job(&cj, "c-stranger", None, "2024-01-01T00:00:00Z");
    activate(&mut cj, &[&done, &gone]);
    let live = FakeLive {
        cronjobs: HashMap::from([("c".to_string(), cj.clone())]),
        ..FakeLive::default()
    };
    let p = plan(&cj, &[done.clone(), stranger.clone()], now, &live).unwrap();
    let mut r = reasons(&p);
    r.sort();
    assert_eq!(r, ["MissingJob", "SawCompletedJob", "UnexpectedJob"]);
    assert!(p.update_status);
    assert!(p.cronjob["status"].get("active").is_none(), "{}", p.cronjob);
    assert_eq!(*live.reads.borrow(), ["cronjob c", "job c-gone"]);
    // Next sync: the finished Job moves lastSuccessfulTime.
    let p = plan(&p.cronjob, &[done], now, &live).unwrap();
    assert_eq!(
        p.cronjob["status"]["lastSuccessfulTime"],
        "2024-01-01T00:30:00Z"
    );
    assert!(p.update_status && p.events.is_empty());
}

#[test]
fn a_sync_creates_then_writes_the_status_with_the_new_job() {
    let mut h = Harness::new(CronJobController::new()).at("2024-01-01T00:01:05Z");
    let mut cj = cronjob("c", "* * * * *");
    cj["spec"]["successfulJobsHistoryLimit"] = 0.into();
    h.add(CRONJOBS, cj.clone());
    let old = job(&cj, "c-1", Some("Complete"), "2024-01-01T00:00:00Z");
    h.add(JOBS, old.clone());
    assert_eq!(h.take_queued(), ["ns/c"]);
    let o = h.outcome("ns/c");
    assert!(o.status_after_writes);
    assert_eq!(o.requeue_after, None);
    let w = crate::controllers::testing::Writes::of(&o);
    assert_eq!(w.deletes, [(JOBS, "ns/c-1".to_string())]);
    let name = format!("c-{}", t("2024-01-01T00:01:00Z") / SECOND / 60);
    assert_eq!(w.created_names(), std::slice::from_ref(&name));
    // The writes went through.
    let mut created = w.creates[0].1.clone();
    created["metadata"]["uid"] = "u-new".into();
    created["metadata"]["resourceVersion"] = "9".into();
    for a in &o.actions {
        match a {
            Action::Reported { action, .. } => h.ctrl.applied("ns/c", action, Applied::Done(None)),
            Action::Create { .. } => h.ctrl.applied("ns/c", a, Applied::Done(Some(&created))),
            _ => {}
        }
    }
    let cx = Cx {
        cache: &h.cache,
        now: h.now,
        client: &h.client,
    };
    let after = h.ctrl.status_after_writes(&cx, "ns/c").unwrap();
    let w = crate::controllers::testing::Writes::of(&after);
    assert_eq!(
        w.events,
        [(
            EventType::Normal,
            "SuccessfulCreate".to_string(),
            format!("Created job {name}")
        )]
    );
    let status = &w.updates[0].2["status"];
    assert_eq!(status["lastScheduleTime"], "2024-01-01T00:01:00Z");
    assert_eq!(
        status["active"],
        json!([{"kind": "Job", "namespace": "ns", "name": name, "uid": "u-new",
                "apiVersion": "batch/v1", "resourceVersion": "9"}])
    );
    assert_eq!(
        after.requeue_after,
        Some(std::time::Duration::from_millis(55_100))
    );
    // A Job whose controller is the CronJob queues it; one of another owner does not.
    h.update(JOBS, {
        let mut j = old;
        j["metadata"]["resourceVersion"] = "4".into();
        j
    });
    assert_eq!(h.take_queued(), ["ns/c"]);
    let mut foreign = job(&cj, "x", None, "2024-01-01T00:00:00Z");
    foreign["metadata"]["ownerReferences"][0]["uid"] = "other".into();
    h.add(JOBS, foreign);
    assert!(h.take_queued().is_empty());
}

#[test]
fn a_job_of_an_earlier_cronjob_of_the_same_name_is_not_ours() {
    let mut h = Harness::new(CronJobController::new()).at("2024-01-01T00:01:05Z");
    let mut cj = cronjob("c", "* * * * *");
    cj["spec"]["successfulJobsHistoryLimit"] = 0.into();
    cj["spec"]["suspend"] = true.into();
    h.add(CRONJOBS, cj.clone());
    let mut earlier = job(&cj, "c-1", Some("Complete"), "2024-01-01T00:00:00Z");
    earlier["metadata"]["ownerReferences"][0]["uid"] = "cj-c-before".into();
    h.add(JOBS, earlier);
    h.add(
        JOBS,
        job(&cj, "c-2", Some("Complete"), "2024-01-01T00:00:00Z"),
    );
    let w = crate::controllers::testing::Writes::of(&h.outcome("ns/c"));
    assert_eq!(w.deletes, [(JOBS, "ns/c-2".to_string())]);
}

#[test]
fn a_failed_create_is_reported_and_a_taken_name_of_another_owner_is_left() {
    let mut h = Harness::new(CronJobController::new()).at("2024-01-01T00:01:05Z");
    h.add(CRONJOBS, cronjob("c", "* * * * *"));
    let o = h.outcome("ns/c");
    let create = o
        .actions
        .iter()
        .find(|a| matches!(a, Action::Create { .. }))
        .unwrap();
    let err = crate::Error::api(403, "Forbidden", "quota exceeded");
    h.ctrl.applied("ns/c", create, Applied::Failed(&err));
    let cx = Cx {
        cache: &h.cache,
        now: h.now,
        client: &h.client,
    };
    let w =
        crate::controllers::testing::Writes::of(&h.ctrl.status_after_writes(&cx, "ns/c").unwrap());
    assert_eq!(
        w.events,
        [(
            EventType::Warning,
            "FailedCreate".to_string(),
            "Error creating job: quota exceeded".to_string()
        )]
    );
    assert!(w.updates.is_empty());
}

#[test]
fn a_schedule_change_waits_for_the_new_next_time() {
    let mut h = Harness::new(CronJobController::new());
    let cj = cronjob("c", "* * * * *");
    let w = crate::cache::Watch::full(CRONJOBS);
    let delta = |old: &Value, new: &Value| crate::cache::Delta {
        kind: crate::cache::DeltaKind::Updated,
        old: Some(old.clone().into()),
        new: Some(new.clone().into()),
    };
    h.add(CRONJOBS, cj.clone());
    assert_eq!(h.take_queued(), ["ns/c"]);
    // Another change: at once.
    let mut label = cj.clone();
    label["metadata"]["labels"] = json!({"a": "b"});
    let k = h.ctrl.delayed_keys_for(&w, &delta(&cj, &label), &h.cache);
    assert_eq!(k, [("ns/c".to_string(), std::time::Duration::ZERO)]);
    // A new schedule: at its next start time.
    let mut changed = cj.clone();
    changed["spec"]["schedule"] = "0 0 1 1 *".into();
    let k = h.ctrl.delayed_keys_for(&w, &delta(&cj, &changed), &h.cache);
    assert!(k[0].1 > std::time::Duration::from_secs(60), "{k:?}");
    // An unparseable new schedule: the Event only, no sync.
    let mut bad = cj.clone();
    bad["spec"]["schedule"] = "bad".into();
    bad["metadata"]["resourceVersion"] = "8".into();
    h.update(CRONJOBS, bad);
    assert_eq!(h.take_queued(), ["ns/c"]);
    let w = h.sync("ns/c");
    assert_eq!(
        w.events,
        [(
            EventType::Warning,
            "UnParseableCronJobSchedule".to_string(),
            "unparseable schedule for cronjob: bad".to_string()
        )]
    );
    assert!(w.updates.is_empty() && w.creates.is_empty());
    // The next sync is a sync (with the sync's own Event for the schedule).
    let w = h.sync("ns/c");
    assert_eq!(w.events[0].1, "UnparseableSchedule");
}
