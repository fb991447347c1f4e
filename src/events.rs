//! Events: core/v1 Events written like client-go's recorder. A repeat of the same event about
//! the same object (same source, type, reason, message) within the correlation window patches
//! the existing Event's `count` and `lastTimestamp` instead of creating a new one; from the
//! tenth distinct message of one (source, object, type, reason) within 10 minutes on, the
//! messages are combined into one Event "(combined from similar events): <latest>", patched
//! as more come (client-go's EventAggregator); a per-object spam filter (burst 25, one more
//! every 5 minutes) drops floods. Sending happens on background threads so a slow apiserver
//! never stalls a reconcile.

use crate::api::client::{Client, PatchType};
use crate::api::resources::EVENTS;
use crate::api::Kind;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// A core/v1 Event to record about an object.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    pub involved: ObjectRef,
    pub event_type: EventType,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    pub kind: String,
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
}

impl ObjectRef {
    pub fn of(kind: &Kind, o: &Value) -> Self {
        ObjectRef {
            kind: kind.kind.to_string(),
            api_version: kind.api_version(),
            namespace: crate::obj::namespace(o).to_string(),
            name: crate::obj::name(o).to_string(),
            uid: crate::obj::uid(o).to_string(),
            resource_version: crate::obj::resource_version(o).to_string(),
        }
    }
}

/// Events queued at most before new ones are dropped (client-go's broadcaster queue length).
const QUEUE_LEN: usize = 1000;
/// Remembered events for aggregation (client-go's LRU size).
const MAX_REMEMBERED: usize = 4096;
const SPAM_BURST: f64 = 25.0;
const SPAM_REFILL_PER_SEC: f64 = 1.0 / 300.0;

struct Msg {
    client: Client,
    component: &'static str,
    spec: EventSpec,
    at: SystemTime,
}

pub struct Recorder {
    /// One queue and sender thread per partition; an object's events always go through
    /// the same one, so their order and aggregation are kept.
    tx: Mutex<Vec<Queue>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Set by `shutdown`: an event waiting to be tried again is given up.
    stopping: Arc<AtomicBool>,
}

/// One lock per client (by user agent: one per controller identity), held while one of its
/// events is written: a controller has one event on the wire at a time, as client-go's one
/// sink goroutine per recorder, so its events take no more of its client's QPS than
/// upstream's do (with two senders writing one controller's events, a burst of pod creations
/// spent a third more of the controller's QPS on Events than upstream and finished later).
#[derive(Default, Clone)]
struct Turns(Arc<Mutex<HashMap<String, Arc<Mutex<()>>>>>);

impl Turns {
    fn of(&self, client: &Client) -> Arc<Mutex<()>> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(client.user_agent().to_string())
            .or_default()
            .clone()
    }
}

/// Tries of one event while the server cannot be reached, and the wait between them
/// (client-go's recorder: 12 tries, 10 s apart, the first wait random).
const MAX_TRIES: u32 = 12;
const RETRY_SLEEP: Duration = Duration::from_secs(10);

/// Sender threads. One sends an event at a time, as client-go's sink does; a burst of pod
/// creations makes events faster than one sender writes them, and a full queue drops them.
const SENDERS: usize = 2;

/// One partition's queue: bounded by a count rather than a preallocated ring (a
/// `sync_channel` of `QUEUE_LEN` holds its slots from the start, about 250 KB each, resident
/// while the process idles); blocks of slots are made as events come and freed once sent.
struct Queue {
    tx: Sender<Msg>,
    queued: Arc<AtomicUsize>,
}

impl Queue {
    /// Queue `m` unless `QUEUE_LEN` are waiting already: then, or with the sender gone, it
    /// is handed back.
    fn try_send(&self, m: Msg) -> Option<Msg> {
        if self.queued.fetch_add(1, Ordering::SeqCst) >= QUEUE_LEN {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            return Some(m);
        }
        let refused = self.tx.send(m).err()?;
        self.queued.fetch_sub(1, Ordering::SeqCst);
        Some(refused.0)
    }
}

/// What was sent before for one (source, object, type, reason, message), or for one
/// combined event of similar ones.
struct Seen {
    name: String,
    namespace: String,
    count: u64,
    first: String,
    message: String,
}

/// Distinct messages seen lately for one (source, object, type, reason).
struct Similar {
    /// Hashes of the messages (`key_hash`).
    messages: std::collections::HashSet<u64>,
    last: Instant,
}

/// Correlation state (pure; the sender thread owns it).
#[derive(Default)]
pub struct Correlator {
    // Keys are kept as 64-bit hashes of their text (`key_hash`): 4096 remembered events of
    // each kind held their keys (component, object, reason, message) twice as strings.
    seen: HashMap<u64, Seen>,
    order: VecDeque<u64>,
    spam: HashMap<u64, (f64, Instant)>,
    spam_order: VecDeque<u64>,
    similar: HashMap<u64, Similar>,
    similar_order: VecDeque<u64>,
    /// The key of the last Patch decided (for `recreate`).
    last_patched: Option<u64>,
}

/// From this many distinct messages of one (source, object, type, reason) within
/// `SIMILAR_WINDOW`, further ones are combined into one Event (client-go's EventAggregator).
const SIMILAR_MAX: usize = 10;
const SIMILAR_WINDOW: Duration = Duration::from_secs(600);
const SIMILAR_PREFIX: &str = "(combined from similar events): ";

/// What to send for one event.
#[derive(Debug, PartialEq)]
pub enum Send {
    Create(serde_json::Value),
    /// Patch the existing Event `namespace/name`.
    Patch {
        namespace: String,
        name: String,
        patch: serde_json::Value,
    },
    Drop,
}

/// Record `key` as newly remembered in `order` (oldest first), forgetting the oldest keys of
/// `map` beyond `MAX_REMEMBERED` (client-go's LRUs of that size).
fn remember<V>(map: &mut HashMap<u64, V>, order: &mut VecDeque<u64>, key: u64) {
    order.push_back(key);
    while order.len() > MAX_REMEMBERED {
        if let Some(old) = order.pop_front() {
            map.remove(&old);
        }
    }
}

/// A correlation key's 64-bit hash (SipHash with fixed keys: the same in every run).
fn key_hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

fn timestamp(t: SystemTime) -> String {
    crate::compat::timefmt::rfc3339(t)
}

impl Correlator {
    fn spam_ok(&mut self, key: &str, now: Instant) -> bool {
        let key = key_hash(key);
        // At most `MAX_REMEMBERED` objects' buckets (client-go's LRU of the same size): an
        // object forgotten starts again with a full bucket, as one never seen.
        if !self.spam.contains_key(&key) {
            remember(&mut self.spam, &mut self.spam_order, key);
        }
        let (tokens, last) = self.spam.entry(key).or_insert((SPAM_BURST, now));
        let refill = now.saturating_duration_since(*last).as_secs_f64() * SPAM_REFILL_PER_SEC;
        *tokens = (*tokens + refill).min(SPAM_BURST);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// client-go's EventAggregator: true when this event is to be combined with the
    /// similar ones before it (the 10th distinct message within 10 minutes and later).
    fn combine(&mut self, similar_key: &str, message: &str, now: Instant) -> bool {
        let similar_key = key_hash(similar_key);
        let rec = match self.similar.get_mut(&similar_key) {
            Some(r) => r,
            None => {
                remember(&mut self.similar, &mut self.similar_order, similar_key);
                self.similar.entry(similar_key).or_insert(Similar {
                    messages: Default::default(),
                    last: now,
                })
            }
        };
        if now.saturating_duration_since(rec.last) > SIMILAR_WINDOW {
            rec.messages.clear();
        }
        rec.messages.insert(key_hash(message));
        rec.last = now;
        if rec.messages.len() < SIMILAR_MAX {
            return false;
        }
        // Keep the set at its bound, as client-go does.
        if let Some(any) = rec.messages.iter().next().copied() {
            rec.messages.remove(&any);
        }
        true
    }

    pub fn decide(
        &mut self,
        component: &str,
        spec: &EventSpec,
        at: SystemTime,
        now: Instant,
    ) -> Send {
        let inv = &spec.involved;
        let obj_key = format!(
            "{component}\x00{}\x00{}\x00{}\x00{}\x00{}",
            inv.kind, inv.namespace, inv.name, inv.uid, inv.api_version
        );
        if !self.spam_ok(&obj_key, now) {
            return Send::Drop;
        }
        let etype = match spec.event_type {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let similar_key = format!("{obj_key}\x00{etype}\x00{}", spec.reason);
        let (key, message) = if self.combine(&similar_key, &spec.message, now) {
            (
                format!("{similar_key}\x00\x01combined"),
                format!("{SIMILAR_PREFIX}{}", spec.message),
            )
        } else {
            (
                format!("{similar_key}\x00{}", spec.message),
                spec.message.clone(),
            )
        };
        let ts = timestamp(at);
        let key = key_hash(&key);
        if let Some(s) = self.seen.get_mut(&key) {
            s.count += 1;
            s.message = message.clone();
            self.last_patched = Some(key);
            return Send::Patch {
                namespace: s.namespace.clone(),
                name: s.name.clone(),
                patch: json!({"count": s.count, "lastTimestamp": ts, "message": message}),
            };
        }
        let namespace = if inv.namespace.is_empty() {
            "default".to_string()
        } else {
            inv.namespace.clone()
        };
        let nanos = at
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!("{}.{:x}", inv.name, nanos);
        let event = event_json(
            component, spec, etype, &name, &namespace, &message, &ts, &ts, 1,
        );
        self.seen.insert(
            key,
            Seen {
                name,
                namespace,
                count: 1,
                first: ts,
                message,
            },
        );
        remember(&mut self.seen, &mut self.order, key);
        Send::Create(event)
    }

    /// The Event to create again when the patch just decided found the old one gone: the
    /// same name, count and first timestamp.
    fn recreate(&mut self, component: &str, spec: &EventSpec, at: SystemTime) -> serde_json::Value {
        let etype = match spec.event_type {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let ts = timestamp(at);
        match self.last_patched.and_then(|k| self.seen.get(&k)) {
            Some(s) => event_json(
                component,
                spec,
                etype,
                &s.name,
                &s.namespace,
                &s.message,
                &s.first,
                &ts,
                s.count,
            ),
            None => {
                let mut c = Correlator::default();
                match c.decide(component, spec, at, Instant::now()) {
                    Send::Create(ev) => ev,
                    _ => json!({}),
                }
            }
        }
    }
}

/// A core/v1 Event as client-go's recorder writes it.
#[allow(clippy::too_many_arguments)]
fn event_json(
    component: &str,
    spec: &EventSpec,
    etype: &str,
    name: &str,
    namespace: &str,
    message: &str,
    first: &str,
    last: &str,
    count: u64,
) -> serde_json::Value {
    let inv = &spec.involved;
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "kind": inv.kind, "namespace": inv.namespace, "name": inv.name,
            "uid": inv.uid, "apiVersion": inv.api_version,
            "resourceVersion": inv.resource_version,
        },
        "reason": spec.reason,
        "message": message,
        "source": {"component": component},
        "firstTimestamp": first,
        "lastTimestamp": last,
        "count": count,
        "type": etype,
        "eventTime": null,
        "reportingComponent": component,
        "reportingInstance": "",
    })
}

impl Recorder {
    pub fn start() -> Self {
        let mut txs = Vec::new();
        let mut threads = Vec::new();
        let stopping = Arc::new(AtomicBool::new(false));
        let turns = Turns::default();
        for i in 0..SENDERS {
            let turns = turns.clone();
            let (tx, rx) = channel::<Msg>();
            let queued = Arc::new(AtomicUsize::new(0));
            let stop = stopping.clone();
            let left = queued.clone();
            if let Ok(t) = std::thread::Builder::new()
                .name(format!("events-{i}"))
                .stack_size(256 * 1024)
                .spawn(move || sender(rx, &left, &stop, &turns))
            {
                txs.push(Queue { tx, queued });
                threads.push(t);
            }
        }
        Recorder {
            tx: Mutex::new(txs),
            threads: Mutex::new(threads),
            stopping,
        }
    }

    /// Queue an event; never blocks (a full queue drops it, as client-go does).
    pub fn record(&self, client: &Client, component: &'static str, spec: EventSpec) {
        let guard = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_empty() {
            return;
        }
        let inv = &spec.involved;
        let part = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (&inv.namespace, &inv.name, &inv.kind).hash(&mut h);
            (h.finish() % guard.len() as u64) as usize
        };
        let msg = Msg {
            client: client.clone(),
            component,
            spec,
            at: SystemTime::now(),
        };
        if let Some(m) = guard[part].try_send(msg) {
            log::warn!(
                "events: queue full, dropping {} event about {}/{}",
                m.spec.reason,
                m.spec.involved.namespace,
                m.spec.involved.name
            );
        }
    }

    /// Send what is queued, then stop (bounded by `timeout`).
    pub fn shutdown(&self, timeout: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).clear();
        let threads: Vec<_> = self
            .threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        let end = Instant::now() + timeout;
        while threads.iter().any(|t| !t.is_finished()) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        for t in threads {
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

fn sender(rx: Receiver<Msg>, queued: &AtomicUsize, stopping: &AtomicBool, turns: &Turns) {
    let mut c = Correlator::default();
    // Namespaces an event was refused in because they are terminating: the events queued
    // for them meanwhile would be refused too, so they are dropped unsent.
    let terminating = crate::cache::TerminatingNamespaces::default();
    while let Ok(m) = rx.recv() {
        queued.fetch_sub(1, Ordering::SeqCst);
        let event_ns = match m.spec.involved.namespace.as_str() {
            "" => "default",
            ns => ns,
        };
        if terminating.contains(event_ns) {
            log::debug!(
                "events: dropping {} event about {}/{}: namespace {event_ns} is terminating",
                m.spec.reason,
                m.spec.involved.namespace,
                m.spec.involved.name
            );
            continue;
        }
        let send = c.decide(m.component, &m.spec, m.at, Instant::now());
        if matches!(send, Send::Drop) {
            continue;
        }
        // An unreachable server is waited for (as client-go's recorder does); an answer,
        // even a refusal, is final.
        let mut tries = 0;
        let res = loop {
            let res = {
                let turn = turns.of(&m.client);
                let _one = turn.lock().unwrap_or_else(|p| p.into_inner());
                write(&mut c, &m, &send)
            };
            tries += 1;
            match &res {
                Err(e @ crate::Error::Transport(_))
                    if tries < MAX_TRIES && !stopping.load(Ordering::SeqCst) =>
                {
                    let wait = if tries == 1 {
                        RETRY_SLEEP.mul_f64(fastrand::f64())
                    } else {
                        RETRY_SLEEP
                    };
                    let line = format!(
                        "events: could not write {} event about {}/{}: {e}; retrying in {:.1}s",
                        m.spec.reason,
                        m.spec.involved.namespace,
                        m.spec.involved.name,
                        wait.as_secs_f64()
                    );
                    // One line per event, the first time; the rest at debug level.
                    if tries == 1 {
                        log::warn!("{line}");
                    } else {
                        log::debug!("{line}");
                    }
                    let end = Instant::now() + wait;
                    while Instant::now() < end && !stopping.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
                // The first try was carried out after all.
                Err(e) if tries > 1 && e.is_already_exists() => break Ok(()),
                _ => break res,
            }
        };
        if let Err(e) = &res {
            if e.is_namespace_terminating() {
                terminating.saw(event_ns);
            }
        }
        if let Err(e) = res {
            log::warn!(
                "events: could not write {} event about {}/{}{}: {e}",
                m.spec.reason,
                m.spec.involved.namespace,
                m.spec.involved.name,
                if tries > 1 {
                    format!(" (gave up after {tries} tries)")
                } else {
                    String::new()
                }
            );
        }
    }
}

/// One attempt at writing what the correlator decided.
fn write(c: &mut Correlator, m: &Msg, send: &Send) -> crate::Result<()> {
    match send {
        Send::Drop => Ok(()),
        Send::Create(ev) => {
            let ns = ev["metadata"]["namespace"].as_str().unwrap_or("default");
            m.client.create_unanswered(&EVENTS, Some(ns), ev)
        }
        Send::Patch {
            namespace,
            name,
            patch,
        } => {
            match m.client.patch_unanswered(
                &EVENTS,
                Some(namespace),
                name,
                PatchType::Strategic,
                patch,
            ) {
                Err(e) if e.is_not_found() => {
                    let ev = c.recreate(m.component, &m.spec, m.at);
                    m.client.create_unanswered(&EVENTS, Some(namespace), &ev)
                }
                other => other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_turn_per_client_identity() {
        let cfg = crate::api::kubeconfig::RestConfig {
            server: "http://127.0.0.1:9".into(),
            source: "test".into(),
            ..Default::default()
        };
        let a = Client::new(&cfg, 0.0, 1, "a").expect("client");
        let b = Client::new(&cfg, 0.0, 1, "b").expect("client");
        let turns = Turns::default();
        assert!(Arc::ptr_eq(&turns.of(&a), &turns.of(&a.clone())));
        assert!(!Arc::ptr_eq(&turns.of(&a), &turns.of(&b)));
        // While one of a's events is written, another of a's waits; b's does not.
        let held = turns.of(&a);
        let _g = held.lock().unwrap();
        assert!(turns.of(&a).try_lock().is_err());
        assert!(turns.of(&b).try_lock().is_ok());
    }

    #[test]
    fn a_queue_holds_at_most_its_length_and_frees_room_as_events_go() {
        let cfg = crate::api::kubeconfig::RestConfig {
            server: "http://127.0.0.1:9".into(),
            source: "test".into(),
            ..Default::default()
        };
        let client = Client::new(&cfg, 0.0, 1, "a").expect("client");
        let (tx, rx) = channel::<Msg>();
        let q = Queue {
            tx,
            queued: Arc::new(AtomicUsize::new(0)),
        };
        let msg = || Msg {
            client: client.clone(),
            component: "test",
            spec: spec("R", "m"),
            at: SystemTime::UNIX_EPOCH,
        };
        for _ in 0..QUEUE_LEN {
            assert!(q.try_send(msg()).is_none());
        }
        assert!(q.try_send(msg()).is_some(), "the queue is full");
        // The sender takes one (and counts it out): there is room for one more.
        rx.recv().expect("queued");
        q.queued.fetch_sub(1, Ordering::SeqCst);
        assert!(q.try_send(msg()).is_none());
        assert!(q.try_send(msg()).is_some());
        // With the sender gone nothing is counted in.
        drop(rx);
        let before = q.queued.load(Ordering::SeqCst);
        assert!(q.try_send(msg()).is_some());
        assert_eq!(q.queued.load(Ordering::SeqCst), before);
    }

    fn spec(reason: &str, msg: &str) -> EventSpec {
        EventSpec {
            involved: ObjectRef {
                kind: "ReplicaSet".into(),
                api_version: "apps/v1".into(),
                namespace: "ns".into(),
                name: "web-1".into(),
                uid: "u".into(),
                resource_version: "3".into(),
            },
            event_type: EventType::Normal,
            reason: reason.into(),
            message: msg.into(),
        }
    }

    #[test]
    fn similar_events_are_combined_from_the_tenth_message() {
        let mut c = Correlator::default();
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let now = Instant::now();
        let decide = |c: &mut Correlator, msg: &str, now: Instant| {
            c.decide(
                "replicaset-controller",
                &spec("SuccessfulCreate", msg),
                t,
                now,
            )
        };
        for i in 0..9 {
            let Send::Create(ev) = decide(&mut c, &format!("Created pod: p{i}"), now) else {
                panic!("expected a plain create for message {i}");
            };
            assert_eq!(ev["message"], format!("Created pod: p{i}"));
        }
        // The tenth distinct message: one combined Event, then patched for the next ones.
        let Send::Create(combined) = decide(&mut c, "Created pod: p9", now) else {
            panic!("expected the combined create");
        };
        assert_eq!(
            combined["message"],
            "(combined from similar events): Created pod: p9"
        );
        assert_eq!(combined["count"], 1);
        let Send::Patch { name, patch, .. } = decide(&mut c, "Created pod: p10", now) else {
            panic!("expected a patch of the combined event");
        };
        assert_eq!(name, combined["metadata"]["name"].as_str().unwrap_or(""));
        assert_eq!(patch["count"], 2);
        assert_eq!(
            patch["message"],
            "(combined from similar events): Created pod: p10"
        );
        // Gone meanwhile: created again under the same name, with its count.
        let again = c.recreate(
            "replicaset-controller",
            &spec("SuccessfulCreate", "Created pod: p10"),
            t,
        );
        assert_eq!(again["metadata"]["name"], combined["metadata"]["name"]);
        assert_eq!(again["count"], 2);
        assert_eq!(again["message"], patch["message"]);
        // Another reason is counted apart; ten minutes later the count starts again.
        assert!(matches!(
            c.decide("replicaset-controller", &spec("FailedCreate", "x"), t, now),
            Send::Create(_)
        ));
        let later = now + Duration::from_secs(601);
        let Send::Create(fresh) = decide(&mut c, "Created pod: q", later) else {
            panic!("expected a plain create after the window");
        };
        assert_eq!(fresh["message"], "Created pod: q");
    }

    #[test]
    fn first_creates_repeat_patches() {
        let mut c = Correlator::default();
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let now = Instant::now();
        let Send::Create(ev) = c.decide(
            "replicaset-controller",
            &spec("SuccessfulCreate", "Created pod: a"),
            t,
            now,
        ) else {
            panic!("expected create");
        };
        assert_eq!(ev["source"]["component"], "replicaset-controller");
        assert_eq!(ev["count"], 1);
        assert_eq!(ev["type"], "Normal");
        assert_eq!(ev["metadata"]["namespace"], "ns");
        assert!(ev["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("web-1.")));
        let again = c.decide(
            "replicaset-controller",
            &spec("SuccessfulCreate", "Created pod: a"),
            t,
            now,
        );
        let Send::Patch { patch, name, .. } = again else {
            panic!("expected patch")
        };
        assert_eq!(patch["count"], 2);
        assert_eq!(Some(name.as_str()), ev["metadata"]["name"].as_str());
        // another message is another event
        assert!(matches!(
            c.decide(
                "replicaset-controller",
                &spec("SuccessfulCreate", "Created pod: b"),
                t,
                now
            ),
            Send::Create(_)
        ));
    }

    #[test]
    fn spam_filter_remembers_a_bounded_number_of_objects() {
        let mut c = Correlator::default();
        let now = Instant::now();
        for i in 0..MAX_REMEMBERED + 100 {
            assert!(c.spam_ok(&format!("object-{i}"), now));
        }
        assert_eq!(c.spam.len(), MAX_REMEMBERED);
        assert_eq!(c.spam_order.len(), MAX_REMEMBERED);
        assert!(!c.spam.contains_key(&key_hash("object-0")));
        assert!(c
            .spam
            .contains_key(&key_hash(&format!("object-{}", MAX_REMEMBERED + 99))));
    }

    #[test]
    fn spam_filter_limits_one_object() {
        let mut c = Correlator::default();
        let t = SystemTime::now();
        let now = Instant::now();
        let sent = (0..40)
            .filter(|i| {
                !matches!(
                    c.decide("x", &spec("R", &format!("m{i}")), t, now),
                    Send::Drop
                )
            })
            .count();
        assert_eq!(sent, 25);
        // five minutes later one more is allowed
        let later = now + Duration::from_secs(301);
        assert!(!matches!(
            c.decide("x", &spec("R", "late"), t, later),
            Send::Drop
        ));
    }
}
