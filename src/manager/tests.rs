//! Tests of slow-start batch sizes and of applying actions against the sandbox API server.

use super::*;
use crate::api::resources::{EVENTS, PODS};
use crate::cache::Delta;
use crate::controller::{Action, Applied, ObjectRef, Outcome, Report, Watch};
use crate::sandbox::{Sandbox, SandboxOptions};
use serde_json::{json, Value};

#[test]
fn slow_start_batch_sizes() {
    assert_eq!(slow_start_sizes(0), Vec::<usize>::new());
    assert_eq!(slow_start_sizes(1), vec![1]);
    assert_eq!(slow_start_sizes(5), vec![1, 2, 2]);
    assert_eq!(slow_start_sizes(10), vec![1, 2, 4, 3]);
    assert_eq!(
        slow_start_sizes(500),
        vec![1, 2, 4, 8, 16, 32, 64, 128, 245]
    );
}

/// Records what the manager tells it.
#[derive(Default)]
struct Probe {
    seen: Mutex<Vec<(String, &'static str)>>,
}

/// Its row, as the table would have it.
const PROBE: Settings = Settings {
    queue: "probe",
    ..Settings::named("probe")
};

impl Controller for Probe {
    fn watches(&self) -> Vec<Watch> {
        vec![]
    }
    fn keys_for(&self, _: &Watch, _: &Delta, _: &Cache) -> Vec<String> {
        vec![]
    }
    fn reconcile(&self, _: &Cx, _: &str) -> crate::Result<Outcome> {
        Ok(Outcome::none())
    }
    fn applied(&self, _key: &str, _a: &Action, r: Applied<'_>) {
        let entry = match r {
            Applied::Done(v) => (
                v.map(|v| crate::obj::name(v).to_string())
                    .unwrap_or_default(),
                "done",
            ),
            Applied::Failed(_) => (String::new(), "failed"),
            Applied::Skipped => (String::new(), "skipped"),
        };
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entry);
    }
}

fn create_in(ns: &str) -> Action {
    Action::Reported {
        action: Box::new(Action::Create {
            kind: PODS,
            namespace: ns.to_string(),
            object: json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "web-"}, "spec": {}}),
        }),
        report: Report {
            about: ObjectRef {
                kind: "ReplicaSet".into(),
                api_version: "apps/v1".into(),
                namespace: "default".into(),
                name: "web".into(),
                uid: "u1".into(),
                resource_version: "1".into(),
            },
            success_reason: "SuccessfulCreate",
            success_prefix: "Created pod: ",
            failure_reason: "FailedCreate",
            failure_prefix: "Error creating: ".into(),
        },
    }
}

/// A sandbox API server, a client for it, an empty cache and a recorder.
fn against_sandbox() -> (Sandbox, Client, Arc<Cache>, Recorder) {
    let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
    let client = sb.client("test");
    let cache = Cache::new(client.clone());
    (sb, client, cache, Recorder::start())
}

#[test]
fn slow_start_stops_after_a_failed_batch_and_reports() {
    let (sb, client, cache, recorder) = against_sandbox();
    let pods = cache.store(PODS);
    let probe = Probe::default();
    // Batches 1, 2, 4, 2: the third batch goes to a namespace that does not exist.
    let mut list: Vec<Action> = (0..3).map(|_| create_in("default")).collect();
    list.extend((0..6).map(|_| create_in("missing")));
    let run = Run {
        cache: &cache,
        client: &client,
        recorder: &recorder,
        ctrl: &probe,
        settings: &PROBE,
        key: "default/web",
        failures: Mutex::new(Vec::new()),
    };
    assert!(!run.one(&Action::SlowStart(list)));
    assert_eq!(run.failures.lock().map(|f| f.len()).unwrap_or(0), 4);
    let seen = probe.seen.lock().map(|s| s.clone()).unwrap_or_default();
    let count = |what: &str| seen.iter().filter(|(_, w)| *w == what).count();
    assert_eq!(
        (count("done"), count("failed"), count("skipped")),
        (3, 4, 2)
    );
    let created: Vec<String> = seen
        .iter()
        .filter(|(_, w)| *w == "done")
        .map(|(n, _)| n.clone())
        .collect();
    assert!(created.iter().all(|n| n.starts_with("web-") && n.len() > 4));
    // Written into the cache at once.
    assert_eq!(pods.list_namespace("default").len(), 3);
    recorder.shutdown(Duration::from_secs(5));
    let events = sb.list(&EVENTS, Some("default"));
    let mut msgs: Vec<String> = events
        .iter()
        .filter(|e| e["reason"] == "SuccessfulCreate")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect();
    msgs.sort();
    let mut want: Vec<String> = created
        .iter()
        .map(|n| format!("Created pod: {n}"))
        .collect();
    want.sort();
    assert_eq!(msgs, want);
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "FailedCreate")
        .collect();
    assert!(!failed.is_empty());
    assert!(failed.iter().all(|e| e["type"] == "Warning"
        && e["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Error creating: ") && !m.contains("server answered"))));
}

#[test]
fn creates_in_a_namespace_seen_terminating_are_not_sent_again() {
    let (sb, client, cache, recorder) = against_sandbox();
    let probe = Probe::default();
    sb.create(
        &crate::api::resources::NAMESPACES,
        json!({"metadata": {"name": "doomed"}, "spec": {"finalizers": ["kubernetes"]}}),
    )
    .expect("namespace");
    sb.delete(&crate::api::resources::NAMESPACES, None, "doomed")
        .expect("terminating");
    let run = Run {
        cache: &cache,
        client: &client,
        recorder: &recorder,
        ctrl: &probe,
        settings: &PROBE,
        key: "doomed/web",
        failures: Mutex::new(Vec::new()),
    };
    sb.clear_requests();
    let posts = || {
        sb.requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.contains("/namespaces/doomed/pods"))
            .count()
    };
    let batch = || Action::SlowStart((0..5).map(|_| create_in("doomed")).collect());
    // The first create is refused as terminating; the slow start stops there.
    run.one(&batch());
    assert_eq!(posts(), 1);
    assert!(cache.namespace_terminating("doomed"));
    assert!(!cache.namespace_terminating("default"));
    // The next sync's creates get the same answer without a request.
    run.one(&batch());
    assert_eq!(posts(), 1);
    let seen = probe.seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(seen.iter().filter(|(_, w)| *w == "failed").count(), 2);
    let failures = run.failures.lock().map(|f| f.len()).unwrap_or(0);
    assert!(run
        .failures
        .lock()
        .map(|f| f.iter().all(crate::Error::is_namespace_terminating))
        .unwrap_or(false));
    assert_eq!(failures, 2);
    recorder.shutdown(Duration::from_secs(5));
}

#[test]
fn reported_delete_of_a_missing_object_is_quiet() {
    let (sb, client, cache, recorder) = against_sandbox();
    let probe = Probe::default();
    let Action::Reported { report, .. } = create_in("default") else {
        panic!()
    };
    let del = Action::Reported {
        action: Box::new(Action::Delete {
            kind: PODS,
            namespace: "default".into(),
            name: "ghost".into(),
            options: Default::default(),
        }),
        report,
    };
    let run = Run {
        cache: &cache,
        client: &client,
        recorder: &recorder,
        ctrl: &probe,
        settings: &PROBE,
        key: "default/web",
        failures: Mutex::new(Vec::new()),
    };
    assert!(run.one(&Action::Parallel(vec![del.clone(), del])));
    recorder.shutdown(Duration::from_secs(5));
    assert!(sb.list(&EVENTS, Some("default")).is_empty());
    let seen = probe.seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|(_, w)| *w == "done"));
}

/// Gives keys up after two retries.
const LIMITED: Settings = Settings {
    queue: "limited",
    max_retries: Some(2),
    ..Settings::named("limited")
};

#[test]
fn keys_are_given_up_after_max_retries() {
    let q: Arc<WorkQueue<String>> = WorkQueue::new("limited-test");
    let k = "a".to_string();
    retry_or_forget(&LIMITED, &q, &k);
    retry_or_forget(&LIMITED, &q, &k);
    assert_eq!(q.num_requeues(&k), 2);
    // The third failure: forgotten, not queued again.
    retry_or_forget(&LIMITED, &q, &k);
    assert_eq!(q.num_requeues(&k), 0);
    // Without a limit: retried for as long as it fails.
    for _ in 0..20 {
        retry_or_forget(&PROBE, &q, &k);
    }
    assert_eq!(q.num_requeues(&k), 20);
    q.shut_down();
}

#[test]
fn a_create_whose_answer_was_lost_makes_one_object() {
    let (sb, client, cache, recorder) = against_sandbox();
    let store = cache.store(PODS);
    let probe = Probe::default();
    let run = Run {
        cache: &cache,
        client: &client,
        recorder: &recorder,
        ctrl: &probe,
        settings: &PROBE,
        key: "default/web",
        failures: Mutex::new(Vec::new()),
    };
    // The first POST is carried out but its answer never comes.
    sb.faults().lose_answers(1, "POST", Some("/pods"));
    assert!(run.one(&create_in("default")));
    let pods = sb.list(&PODS, Some("default"));
    assert_eq!(pods.len(), 1, "one pod, not two");
    let seen = probe.seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].1, "done");
    assert_eq!(
        seen[0].0,
        pods[0]["metadata"]["name"].as_str().unwrap_or("")
    );
    assert_eq!(pods[0]["metadata"]["generateName"], "web-");
    // The answer read back is in the cache.
    assert_eq!(store.list_namespace("default").len(), 1);
    recorder.shutdown(Duration::from_secs(5));
}

#[test]
fn generated_names_look_like_the_api_servers() {
    let n = generated_name("web-");
    assert_eq!(n.len(), 9);
    assert!(n.starts_with("web-"));
    assert!(n[4..].bytes().all(|b| NAME_ALPHABET.contains(&b)));
    let long = "x".repeat(70);
    assert_eq!(generated_name(&long).len(), 63);
}

/// Reconciles to one create in the key's namespace (or retries quietly for key "quiet"),
/// and records how each sync ended.
#[derive(Default)]
struct Ends {
    ends: Mutex<Vec<String>>,
}

impl Controller for Ends {
    fn watches(&self) -> Vec<Watch> {
        vec![]
    }
    fn keys_for(&self, _: &Watch, _: &Delta, _: &Cache) -> Vec<String> {
        vec![]
    }
    fn reconcile(&self, _: &Cx, key: &str) -> crate::Result<Outcome> {
        if key == "quiet" {
            return Ok(Outcome {
                retry_quietly: Some("not yet".into()),
                ..Outcome::none()
            });
        }
        Ok(Outcome::with(vec![create_in(key)]))
    }
    fn synced(&self, key: &str, began: std::time::Instant, end: SyncEnd<'_>) {
        assert!(began.elapsed() < std::time::Duration::from_secs(60));
        let end = match end {
            SyncEnd::Done => "done".to_string(),
            SyncEnd::RetryQuietly(why) => format!("quiet: {why}"),
            SyncEnd::Failed(e) => format!("failed {:?}", e.code()),
        };
        self.ends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!("{key}: {end}"));
    }
}

#[test]
fn a_sync_ends_after_its_writes() {
    let (_sb, client, cache, recorder) = against_sandbox();
    let ctrl = Ends::default();
    let q: Arc<WorkQueue<String>> = WorkQueue::new("ends-test");
    for key in ["default", "missing", "quiet"] {
        sync_key(
            &cache,
            &recorder,
            &ctrl,
            &PROBE,
            &client,
            &q,
            &key.to_string(),
        );
    }
    assert_eq!(
        *ctrl.ends.lock().unwrap_or_else(|p| p.into_inner()),
        [
            "default: done",
            "missing: failed Some(404)",
            "quiet: quiet: not yet"
        ]
    );
    q.shut_down();
}
