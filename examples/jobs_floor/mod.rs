//! The floor of the job workload's requests: a bare client, edgekcm's API client and nothing
//! else (no cache, queue, controller or Event correlation), doing the requests the job
//! controller has to do for each Job of the bench and reading the same watches: for a new Job
//! its pods (`parallelism` of them, with the controller reference and the tracking finalizer),
//! a `SuccessfulCreate` Event each and a status write (`active`); once all its pods succeeded,
//! a status write with their UIDs uncounted, the finalizer removals, a status write with the
//! counters and `Complete`, and a `Completed` Event. Same requests, same watch events, same
//! QPS 20 / burst 30 as both managers (Events at low priority); the Jobs and pod status
//! decoded as the cache decodes them. Its CPU seconds are what these requests cost before any
//! controller logic. Run as a child process of the bench (`--floor`), so its CPU and RSS are
//! measured as a manager's.

use crate::benchkit::Res;
pub use crate::benchkit::{floor_manager as manager, FLOOR_CHILD_FLAG as CHILD_FLAG};
use edgekcm::api::client::{Client, PatchType};
use edgekcm::api::kubeconfig;
use edgekcm::api::resources::{Kind, EVENTS, JOBS, PODS};
use edgekcm::api::watch::EventType;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc::{channel, Sender};

const FINALIZER: &str = "batch.kubernetes.io/job-tracking";

#[derive(Default)]
struct JobState {
    /// The latest Job seen or written (for its resourceVersion).
    job: Value,
    created: bool,
    done: bool,
    succeeded: HashMap<String, String>,
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn now() -> String {
    edgekcm::compat::timefmt::rfc3339(std::time::SystemTime::now())
}

fn event(job: &Value, reason: &str, message: String) -> Value {
    let m = &job["metadata"];
    let t = now();
    json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": format!("{}.", m["name"].as_str().unwrap_or("")),
            "namespace": m["namespace"]},
        "involvedObject": {"kind": "Job", "apiVersion": "batch/v1", "namespace": m["namespace"],
            "name": m["name"], "uid": m["uid"], "resourceVersion": m["resourceVersion"]},
        "reason": reason, "message": message, "source": {"component": "job-controller"},
        "firstTimestamp": t, "lastTimestamp": t, "count": 1, "type": "Normal",
        "reportingComponent": "job-controller", "reportingInstance": ""})
}

/// Added and changed Jobs and pods, as (is a Job, object).
fn watch(c: Client, kind: Kind, fields: &'static [&'static str], tx: Sender<(bool, Value)>) {
    crate::benchkit::floor_watch(c, kind, Some(fields), move |t, o| {
        !matches!(t, EventType::Added | EventType::Modified) || tx.send((kind == JOBS, o)).is_ok()
    });
}

/// The child: runs until killed.
pub fn child(kubeconfig_path: &str) -> Res<()> {
    let cfg = kubeconfig::load(Some(Path::new(kubeconfig_path)), None)?;
    let c = Client::new(&cfg, 20.0, 30, "bench-jobs-floor")?;
    let (tx, rx) = channel();
    watch(c.clone(), JOBS, &["/spec", "/status"], tx.clone());
    watch(c.clone(), PODS, &["/spec/nodeName", "/status"], tx);
    let (etx, erx) = channel::<Value>();
    {
        let c = c.clone();
        std::thread::spawn(move || {
            for ev in erx {
                let ns = ev["metadata"]["namespace"].as_str().unwrap_or("default");
                let _ = c.create_unanswered(&EVENTS, Some(ns), &ev);
            }
        });
    }
    let mut jobs: HashMap<String, JobState> = HashMap::new();
    for (is_job, o) in rx {
        if is_job {
            let uid = o["metadata"]["uid"].as_str().unwrap_or("").to_string();
            let complete = o["status"]["conditions"]
                .as_array()
                .is_some_and(|l| l.iter().any(|c| c["type"] == "Complete"));
            let st = jobs.entry(uid).or_default();
            if rv(&o) > rv(&st.job) {
                st.job = o;
            }
            if complete {
                st.done = true;
            }
            if !st.created && !st.done {
                st.created = true;
                create_pods(&c, st, &etx);
            }
            continue;
        }
        let Some(owner) = o["metadata"]["ownerReferences"]
            .as_array()
            .and_then(|l| l.first())
            .and_then(|r| r["uid"].as_str())
        else {
            continue;
        };
        let Some(st) = jobs.get_mut(owner) else {
            continue;
        };
        let finalized = o["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|l| l.iter().any(|f| f == FINALIZER));
        if st.done || !finalized || o["status"]["phase"] != "Succeeded" {
            continue;
        }
        let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
        let uid = o["metadata"]["uid"].as_str().unwrap_or("").to_string();
        st.succeeded.insert(name, uid);
        let want = st.job["spec"]["completions"].as_u64().unwrap_or(1) as usize;
        if st.succeeded.len() >= want {
            st.done = true;
            finish(&c, st, &etx);
        }
    }
    Ok(())
}

fn put_status(c: &Client, st: &mut JobState, status: Value) {
    let mut j = st.job.clone();
    j["status"] = status;
    match c.update_subresource(&JOBS, &j, "status") {
        Ok(v) => st.job = v,
        Err(e) => eprintln!("status: {e}"),
    }
}

fn create_pods(c: &Client, st: &mut JobState, etx: &Sender<Value>) {
    let job = st.job.clone();
    let m = &job["metadata"];
    let (ns, name, uid) = (
        m["namespace"].as_str().unwrap_or(""),
        m["name"].as_str().unwrap_or(""),
        m["uid"].as_str().unwrap_or(""),
    );
    let n = job["spec"]["parallelism"].as_u64().unwrap_or(1);
    let mut labels = job["spec"]["template"]["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({"batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name, "controller-uid": uid, "job-name": name});
    }
    for _ in 0..n {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": format!("{name}-"), "labels": labels,
                "finalizers": [FINALIZER],
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                    "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
            "spec": job["spec"]["template"]["spec"]});
        match c.create_shaped(&PODS, Some(ns), &pod, Some(&["/spec/nodeName", "/status"])) {
            Ok(p) => {
                let pn = p["metadata"]["name"].as_str().unwrap_or("").to_string();
                let _ = etx.send(event(
                    &job,
                    "SuccessfulCreate",
                    format!("Created pod: {pn}"),
                ));
            }
            Err(e) => eprintln!("create: {e}"),
        }
    }
    let status = json!({"startTime": now(), "active": n, "ready": 0,
        "uncountedTerminatedPods": {}});
    put_status(c, st, status);
}

fn finish(c: &Client, st: &mut JobState, etx: &Sender<Value>) {
    let ns = st.job["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let start = st.job["status"]["startTime"].clone();
    let uids: Vec<&String> = st.succeeded.values().collect();
    let status = json!({"startTime": start, "ready": 0,
        "uncountedTerminatedPods": {"succeeded": uids}});
    put_status(c, st, status);
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}});
    for name in st.succeeded.keys() {
        if let Err(e) = c.patch_shaped(
            &PODS,
            Some(&ns),
            name,
            PatchType::Strategic,
            &patch,
            None,
            Some(&["/spec/nodeName", "/status"]),
        ) {
            eprintln!("patch: {e}");
        }
    }
    let t = now();
    let status = json!({"startTime": start, "ready": 0, "succeeded": st.succeeded.len(),
        "completionTime": t, "uncountedTerminatedPods": {},
        "conditions": [{"type": "Complete", "status": "True", "lastProbeTime": t,
            "lastTransitionTime": t}]});
    put_status(c, st, status);
    let _ = etx.send(event(&st.job, "Completed", "Job completed".into()));
}
