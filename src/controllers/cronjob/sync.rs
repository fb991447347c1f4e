//! One sync of a CronJob, as upstream's `syncCronJob` and `cleanupFinishedJobs` decide it:
//! history cleanup, active-list maintenance, then whether a Job starts now. The decisions
//! read the cache and, where upstream reads live, the apiserver; the writes are returned as
//! a [`Plan`] whose status is finished once the create and deletes were applied
//! (`super::finish`).

use super::gotime::{self, SECOND};
use super::schedule::{self, Missed, Schedule};
use crate::api::client::{Client, DeleteOptions};
use crate::api::resources::{CRONJOBS, JOBS};
use crate::controller::{EventSpec, EventType, ObjectRef};
use crate::obj;
use serde_json::{json, Map, Value};

/// The annotation upstream's `CronJobsScheduledAnnotation` gate (beta, on in 1.28) adds.
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// The Job to create for a start time.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    pub job: Value,
    /// The start time (nanoseconds since the epoch).
    pub scheduled: i64,
}

/// What one sync decided.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Plan {
    /// The CronJob with its status as the sync left it before its writes.
    pub cronjob: Value,
    pub update_status: bool,
    pub events: Vec<EventSpec>,
    /// Finished Jobs beyond the history limits, oldest first: (name, uid).
    pub history_deletes: Vec<(String, String)>,
    /// Active Jobs replaced (`Replace`): (name, uid).
    pub replace_deletes: Vec<(String, String)>,
    pub start: Option<Start>,
    /// Look again after this long (nanoseconds).
    pub requeue: Option<i64>,
    /// A live read failed after the status was decided: write it, then retry.
    pub retry: Option<String>,
}

/// The finished condition of a Job: `Complete` or `Failed` with status True.
pub fn finished(job: &Value) -> Option<&str> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
        .and_then(|c| c["type"].as_str())
}

fn time_of(v: &Value) -> Option<i64> {
    v.as_str()
        .and_then(crate::compat::timefmt::parse_rfc3339)
        .map(gotime::from_system)
}

/// Upstream's `byJobStartTime`: Jobs with a start time first, earliest first; ties by name.
pub fn sort_by_start_time(jobs: &mut [Value]) {
    crate::sort::sort_by(&mut jobs[..], |a, b| {
        let (sa, sb) = (
            time_of(&a["status"]["startTime"]),
            time_of(&b["status"]["startTime"]),
        );
        match (sa, sb) {
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(_), None) => std::cmp::Ordering::Less,
            (x, y) if x == y => obj::name(a).cmp(obj::name(b)),
            (x, y) => x.cmp(&y),
        }
    });
}

/// The finished Jobs to delete: beyond `successfulJobsHistoryLimit` of the Complete ones and
/// `failedJobsHistoryLimit` of the Failed ones, oldest start first. None when neither limit
/// is set.
pub fn history_to_delete(cj: &Value, jobs: &[Value]) -> Vec<Value> {
    let spec = &cj["spec"];
    let (ok_limit, failed_limit) = (
        spec["successfulJobsHistoryLimit"].as_i64(),
        spec["failedJobsHistoryLimit"].as_i64(),
    );
    let mut out = Vec::new();
    for (limit, kind) in [(ok_limit, "Complete"), (failed_limit, "Failed")] {
        let Some(limit) = limit else { continue };
        let mut these: Vec<Value> = jobs
            .iter()
            .filter(|j| finished(j) == Some(kind))
            .cloned()
            .collect();
        let n = these.len() as i64 - limit;
        if n <= 0 {
            continue;
        }
        sort_by_start_time(&mut these);
        out.extend(these.into_iter().take(n as usize));
    }
    out
}

/// `<cronjob>-<start time in minutes since the epoch>`.
pub fn job_name(cj_name: &str, scheduled: i64) -> String {
    format!("{cj_name}-{}", scheduled.div_euclid(SECOND) / 60)
}

/// Upstream's `getJobFromTemplate2`: the template's labels and annotations, the scheduled
/// timestamp annotation (in the CronJob's zone, UTC without one), the controller reference
/// and the template's spec.
pub fn job_from_template(cj: &Value, scheduled: i64) -> Result<Value, String> {
    let tmpl = &cj["spec"]["jobTemplate"];
    let tz = gotime::load_location(cj["spec"]["timeZone"].as_str().unwrap_or(""))?;
    let mut annotations = tmpl["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    annotations.insert(
        SCHEDULED_TIMESTAMP.into(),
        gotime::rfc3339_in(&tz, scheduled).into(),
    );
    let mut meta = Map::new();
    meta.insert("name".into(), job_name(obj::name(cj), scheduled).into());
    meta.insert("namespace".into(), obj::namespace(cj).into());
    if let Some(l) = tmpl["metadata"]["labels"]
        .as_object()
        .filter(|l| !l.is_empty())
    {
        meta.insert("labels".into(), Value::Object(l.clone()));
    }
    meta.insert("annotations".into(), Value::Object(annotations));
    meta.insert(
        "ownerReferences".into(),
        json!([{
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "name": obj::name(cj),
            "uid": obj::uid(cj),
            "controller": true,
            "blockOwnerDeletion": true,
        }]),
    );
    Ok(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": tmpl.get("spec").cloned().unwrap_or_else(|| json!({})),
    }))
}

/// The reference the active list keeps of a Job.
pub fn job_ref(job: &Value) -> Value {
    json!({
        "kind": "Job",
        "namespace": obj::namespace(job),
        "name": obj::name(job),
        "uid": obj::uid(job),
        "apiVersion": "batch/v1",
        "resourceVersion": obj::resource_version(job),
    })
}

fn active(cj: &Value) -> Vec<Value> {
    cj["status"]["active"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn in_active(cj: &Value, uid: &str) -> bool {
    active(cj).iter().any(|r| r["uid"] == uid)
}

/// Drop the Job with `uid` from the active list (an empty list is left out).
pub fn remove_active(cj: &mut Value, uid: &str) {
    let left: Vec<Value> = active(cj).into_iter().filter(|r| r["uid"] != uid).collect();
    set_active(cj, left);
}

pub fn set_active(cj: &mut Value, list: Vec<Value>) {
    if !cj["status"].is_object() {
        cj["status"] = json!({});
    }
    let status = cj["status"].as_object_mut().expect("an object");
    if list.is_empty() {
        status.remove("active");
    } else {
        status.insert("active".into(), Value::Array(list));
    }
}

fn set_status_field(cj: &mut Value, field: &str, v: Value) {
    if !cj["status"].is_object() {
        cj["status"] = json!({});
    }
    let status = cj["status"].as_object_mut().expect("an object");
    if v.is_null() {
        status.remove(field);
    } else {
        status.insert(field.into(), v);
    }
}

/// Record the start of `job` at `scheduled` in the status.
pub fn started(cj: &mut Value, job: &Value, scheduled: i64) {
    let mut list = active(cj);
    list.push(job_ref(job));
    set_active(cj, list);
    set_status_field(
        cj,
        "lastScheduleTime",
        crate::compat::timefmt::rfc3339(gotime::to_system(scheduled)).into(),
    );
}

/// Go's `time.RFC1123Z` of an instant in UTC.
pub fn rfc1123z(t: i64) -> String {
    let c = gotime::civil(&jiff::tz::TimeZone::UTC, t);
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} +0000",
        DAYS[c.weekday as usize],
        c.day,
        MONTHS[(c.month - 1) as usize],
        c.year,
        c.hour,
        c.minute,
        c.second
    )
}

/// The reads upstream makes live rather than from its caches.
pub trait Live {
    fn cronjob(&self, ns: &str, name: &str) -> crate::Result<Value>;
    fn job(&self, ns: &str, name: &str) -> crate::Result<Value>;
}

impl Live for Client {
    fn cronjob(&self, ns: &str, name: &str) -> crate::Result<Value> {
        self.get(&CRONJOBS, Some(ns), name)
    }
    fn job(&self, ns: &str, name: &str) -> crate::Result<Value> {
        self.get(&JOBS, Some(ns), name)
    }
}

/// Upstream's `formatSchedule`: a schedule naming `TZ` itself is used as written (with an
/// `UnsupportedSchedule` warning); otherwise a valid `timeZone` is put in front as `TZ=`.
pub fn formatted_schedule(cj: &Value, events: Option<&mut Vec<EventSpec>>) -> String {
    let sched = cj["spec"]["schedule"].as_str().unwrap_or("");
    if sched.contains("TZ") {
        if let Some(events) = events {
            events.push(event(
                cj,
                EventType::Warning,
                "UnsupportedSchedule",
                format!(
                    "CRON_TZ or TZ used in schedule {sched:?} is not officially supported, see \
                     https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for \
                     more details"
                ),
            ));
        }
        return sched.to_string();
    }
    match cj["spec"]["timeZone"].as_str() {
        Some(tz) if gotime::load_location(tz).is_ok() => format!("TZ={tz} {sched}"),
        _ => sched.to_string(),
    }
}

pub fn event(cj: &Value, t: EventType, reason: &str, message: String) -> EventSpec {
    EventSpec {
        involved: ObjectRef::of(&CRONJOBS, cj),
        event_type: t,
        reason: reason.to_string(),
        message,
    }
}

/// Where the schedule search starts: the last start time, else the creation time.
pub fn earliest(cj: &Value) -> i64 {
    time_of(&cj["status"]["lastScheduleTime"])
        .or_else(|| time_of(&cj["metadata"]["creationTimestamp"]))
        .unwrap_or(0)
}

/// Upstream's `nextScheduleTimeDuration` for this CronJob.
pub fn requeue(cj: &Value, sched: &Schedule, now: i64) -> Option<i64> {
    schedule::next_duration(sched, earliest(cj), now)
}

/// Delete options of the Jobs the controller deletes.
pub fn background() -> DeleteOptions {
    DeleteOptions {
        propagation_policy: Some("Background"),
        ..DeleteOptions::default()
    }
}

/// The sync of `cj` with its Jobs (those whose controller reference names it) at `now`.
/// An error is a failed live read: the sync is retried.
pub fn plan(cj: &Value, jobs: &[Value], now: i64, live: &dyn Live) -> crate::Result<Plan> {
    let mut p = Plan {
        cronjob: cj.clone(),
        ..Plan::default()
    };
    // History first; the active list forgets a deleted Job (it is finished: the sync below
    // would drop it anyway).
    for j in history_to_delete(cj, jobs) {
        remove_active(&mut p.cronjob, obj::uid(&j));
        p.history_deletes
            .push((obj::name(&j).to_string(), obj::uid(&j).to_string()));
    }
    let mut cur = p.cronjob.clone();
    let mut events = Vec::new();
    let mut update = false;
    for j in jobs {
        let uid = obj::uid(j);
        let found = in_active(&cur, uid);
        let done = finished(j);
        if !found && done.is_none() {
            let fresh = live.cronjob(obj::namespace(cj), obj::name(cj))?;
            if in_active(&fresh, uid) {
                cur = fresh;
                continue;
            }
            events.push(event(
                cj,
                EventType::Warning,
                "UnexpectedJob",
                format!(
                    "Saw a job that the controller did not create or forgot: {}",
                    obj::name(j)
                ),
            ));
        } else if found {
            if let Some(status) = done {
                remove_active(&mut cur, uid);
                events.push(event(
                    cj,
                    EventType::Normal,
                    "SawCompletedJob",
                    format!("Saw completed job: {}, condition: {status}", obj::name(j)),
                ));
                update = true;
            }
        } else if done.is_some() {
            let completion = &j["status"]["completionTime"];
            let last = time_of(&cur["status"]["lastSuccessfulTime"]);
            if cur["status"]["lastSuccessfulTime"].is_null() {
                set_status_field(&mut cur, "lastSuccessfulTime", completion.clone());
                update = true;
            } else if let (Some(c), Some(l)) = (time_of(completion), last) {
                if c > l {
                    set_status_field(&mut cur, "lastSuccessfulTime", completion.clone());
                    update = true;
                }
            }
        }
    }
    let children: Vec<&str> = jobs.iter().map(obj::uid).collect();
    for r in active(&cur) {
        let uid = r["uid"].as_str().unwrap_or("");
        if children.contains(&uid) {
            continue;
        }
        let name = r["name"].as_str().unwrap_or("");
        match live.job(r["namespace"].as_str().unwrap_or(""), name) {
            Err(e) if e.is_not_found() => {
                events.push(event(
                    cj,
                    EventType::Normal,
                    "MissingJob",
                    format!("Active job went missing: {name}"),
                ));
                remove_active(&mut cur, uid);
                update = true;
            }
            Err(e) => return Err(e),
            Ok(_) => {}
        }
    }
    // A history delete that went through is a status change too (`super::finish`).
    p.update_status = update;
    p.cronjob = cur;
    decide_start(&mut p, now, live, &mut events)?;
    p.events = events;
    Ok(p)
}

/// The second half of `syncCronJob`: whether a Job starts now, and when to look again.
fn decide_start(
    p: &mut Plan,
    now: i64,
    live: &dyn Live,
    events: &mut Vec<EventSpec>,
) -> crate::Result<()> {
    let cj = p.cronjob.clone();
    if obj::is_deleting(&cj) {
        return Ok(());
    }
    if let Some(tz) = cj["spec"]["timeZone"].as_str() {
        if let Err(e) = gotime::load_location(tz) {
            events.push(event(
                &cj,
                EventType::Warning,
                "UnknownTimeZone",
                format!("invalid timeZone: {tz:?}: {e}"),
            ));
            return Ok(());
        }
    }
    if cj["spec"]["suspend"] == true {
        return Ok(());
    }
    let spec = cj["spec"]["schedule"].as_str().unwrap_or("");
    let sched = match schedule::parse(&formatted_schedule(&cj, Some(events))) {
        Ok(s) => s,
        Err(e) => {
            events.push(event(
                &cj,
                EventType::Warning,
                "UnparseableSchedule",
                format!("unparseable schedule: {spec:?} : {e}"),
            ));
            return Ok(());
        }
    };
    let deadline = cj["spec"]["startingDeadlineSeconds"].as_i64();
    let (_, recent, missed, err) = schedule::most_recent(&sched, earliest(&cj), deadline, now);
    let scheduled = match (recent.filter(|t| *t <= now), err) {
        (Some(t), _) => t,
        (None, Err(e)) => {
            events.push(event(
                &cj,
                EventType::Warning,
                "InvalidSchedule",
                format!("invalid schedule: {spec} : {e}"),
            ));
            return Ok(());
        }
        (None, Ok(())) => {
            p.requeue = requeue(&cj, &sched, now);
            return Ok(());
        }
    };
    if missed == Missed::Many {
        events.push(event(
            &cj,
            EventType::Warning,
            "TooManyMissedTimes",
            "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or \
             check clock skew"
                .into(),
        ));
    }
    if matches!(deadline, Some(d) if scheduled + d.saturating_mul(SECOND) < now) {
        events.push(event(
            &cj,
            EventType::Warning,
            "MissSchedule",
            format!(
                "Missed scheduled time to start a job: {}",
                rfc1123z(scheduled)
            ),
        ));
        p.requeue = requeue(&cj, &sched, now);
        return Ok(());
    }
    let name = job_name(obj::name(&cj), scheduled);
    let last = time_of(&cj["status"]["lastScheduleTime"]);
    if active(&cj).iter().any(|r| r["name"] == name.as_str()) || last == Some(scheduled) {
        p.requeue = requeue(&cj, &sched, now);
        return Ok(());
    }
    let policy = cj["spec"]["concurrencyPolicy"].as_str().unwrap_or("Allow");
    if policy == "Forbid" && !active(&cj).is_empty() {
        events.push(event(
            &cj,
            EventType::Normal,
            "JobAlreadyActive",
            "Not starting job because prior execution is running and concurrency policy is \
             Forbid"
                .into(),
        ));
        p.requeue = requeue(&cj, &sched, now);
        return Ok(());
    }
    if policy == "Replace" {
        for r in active(&cj) {
            let (ns, n) = (
                r["namespace"].as_str().unwrap_or(""),
                r["name"].as_str().unwrap_or(""),
            );
            match live.job(ns, n) {
                Ok(j) => p
                    .replace_deletes
                    .push((obj::name(&j).to_string(), obj::uid(&j).to_string())),
                Err(e) => {
                    events.push(event(
                        &cj,
                        EventType::Warning,
                        "FailedGet",
                        format!("Get job: {}", e.message()),
                    ));
                    p.replace_deletes.clear();
                    p.retry = Some(format!("getting job {ns}/{n}: {e}"));
                    return Ok(());
                }
            }
        }
    }
    let job = job_from_template(&cj, scheduled).map_err(crate::Error::config)?;
    p.start = Some(Start { job, scheduled });
    // As upstream: the next look is counted from the start time just taken.
    let mut after = cj.clone();
    set_status_field(
        &mut after,
        "lastScheduleTime",
        crate::compat::timefmt::rfc3339(gotime::to_system(scheduled)).into(),
    );
    p.requeue = requeue(&after, &sched, now);
    Ok(())
}
