//! Leader election on a `coordination.k8s.io/v1` Lease, following client-go's
//! `tools/leaderelection` algorithm (v1.28):
//!
//! * Acquire: every `retry_period` (jittered by up to 1.2x) GET the Lease. Missing: POST a new
//!   one naming us. Held by someone else and not expired: wait. Otherwise PUT the fetched object
//!   back with our record; the PUT carries the fetched `resourceVersion`, so a concurrent writer
//!   makes it fail with 409 and we simply try again next period.
//! * Expiry is judged by the *local* monotonic time at which this process last saw the record
//!   change, plus the record's `leaseDurationSeconds`; the timestamps written in the Lease are
//!   never compared with our clock, so clock skew between hosts does not matter.
//! * Renew: while leading, try every `retry_period`; if no attempt succeeds within a
//!   `renew_deadline` window, leadership is lost. The Lease is never released.
//!
//! `decide` is the pure core of one attempt; `LeaderElector` adds the API calls and the loops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::timefmt;

/// client-go's `JitterFactor` for the acquire loop.
pub const JITTER_FACTOR: f64 = 1.2;

/// How long past `lease_duration` a leader that failed to renew still reports healthy
/// (kube-controller-manager passes 20 s to the healthz adaptor).
pub const HEALTHZ_TOLERANCE: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, PartialEq)]
pub struct LeaderElectionConfig {
    pub lock_namespace: String,
    pub lock_name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// The checks client-go's NewLeaderElector makes.
    pub fn validate(&self) -> Result<()> {
        if self.lease_duration <= self.renew_deadline {
            return Err(Error::config(
                "leaseDuration must be greater than renewDeadline",
            ));
        }
        let jittered = Duration::try_from_secs_f64(self.retry_period.as_secs_f64() * JITTER_FACTOR)
            .unwrap_or(Duration::MAX);
        if self.renew_deadline <= jittered {
            return Err(Error::config(
                "renewDeadline must be greater than retryPeriod*JitterFactor",
            ));
        }
        if self.lease_duration.is_zero() {
            return Err(Error::config("leaseDuration must be greater than zero"));
        }
        if self.renew_deadline.is_zero() {
            return Err(Error::config("renewDeadline must be greater than zero"));
        }
        if self.retry_period.is_zero() {
            return Err(Error::config("retryPeriod must be greater than zero"));
        }
        if self.identity.is_empty() {
            return Err(Error::config("Lock identity is empty"));
        }
        Ok(())
    }

    /// `namespace/name`, as used in log lines.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.lock_namespace, self.lock_name)
    }
}

fn hostname() -> String {
    let from_proc = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    from_proc
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".to_string())
}

/// A random (version 4) UUID in its canonical lowercase 8-4-4-4-12 form.
fn new_uuid() -> String {
    let mut b = [0u8; 16];
    for x in &mut b {
        *x = fastrand::u8(..);
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// `<hostname>_<uuid>`, the identity kube-controller-manager uses.
pub fn default_identity() -> String {
    format!("{}_{}", hostname(), new_uuid())
}

/// The Lease API for one lock object, implemented over the real client elsewhere.
pub trait LeaseApi: Send + Sync {
    /// The Lease, or None if it does not exist (404).
    fn get(&self) -> Result<Option<Value>>;
    fn create(&self, lease: &Value) -> Result<Value>;
    /// PUT; the object carries `metadata.resourceVersion`, so a stale write fails with 409.
    fn update(&self, lease: &Value) -> Result<Value>;
}

/// The leader election record as stored in a Lease's spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    pub holder_identity: String,
    pub lease_duration_seconds: i64,
    pub acquire_time: Option<SystemTime>,
    pub renew_time: Option<SystemTime>,
    pub lease_transitions: i64,
}

impl LeaseRecord {
    /// Read the record from a Lease object; absent fields read as empty/zero.
    pub fn from_lease(lease: &Value) -> Self {
        let spec = &lease["spec"];
        let time = |f: &str| spec[f].as_str().and_then(timefmt::parse_rfc3339);
        LeaseRecord {
            holder_identity: spec["holderIdentity"].as_str().unwrap_or("").to_string(),
            lease_duration_seconds: spec["leaseDurationSeconds"].as_i64().unwrap_or(0),
            acquire_time: time("acquireTime"),
            renew_time: time("renewTime"),
            lease_transitions: spec["leaseTransitions"].as_i64().unwrap_or(0),
        }
    }

    /// Write the record into `lease.spec`, leaving every other field of the object alone.
    pub fn write_into(&self, lease: &mut Value) {
        if !lease.is_object() {
            *lease = Value::Object(Map::new());
        }
        let Some(obj) = lease.as_object_mut() else {
            return;
        };
        let spec = obj
            .entry("spec")
            .or_insert_with(|| Value::Object(Map::new()));
        if !spec.is_object() {
            *spec = Value::Object(Map::new());
        }
        let Some(spec) = spec.as_object_mut() else {
            return;
        };
        let time = |t: Option<SystemTime>| match t {
            Some(t) => Value::String(timefmt::rfc3339_micro(t)),
            None => Value::Null,
        };
        spec.insert("holderIdentity".into(), json!(self.holder_identity));
        spec.insert(
            "leaseDurationSeconds".into(),
            json!(self.lease_duration_seconds),
        );
        spec.insert("acquireTime".into(), time(self.acquire_time));
        spec.insert("renewTime".into(), time(self.renew_time));
        spec.insert("leaseTransitions".into(), json!(self.lease_transitions));
    }

    /// A new Lease object holding this record, for POST.
    pub fn new_lease(&self, namespace: &str, name: &str) -> Value {
        let mut lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
        });
        self.write_into(&mut lease);
        lease
    }
}

/// What one acquire-or-renew attempt should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No Lease exists: create it naming us (transitions 0).
    Create,
    /// Someone else holds an unexpired lease.
    Wait(String),
    /// We hold it: keep acquireTime and leaseTransitions, bump renewTime.
    Renew,
    /// Free or expired: take it with this transition count and a new acquireTime.
    TakeOver(i64),
}

/// The pure decision. `observed_at` is the local time at which `current` was first seen in its
/// present form; the lease is valid until `observed_at + current.lease_duration_seconds`.
pub fn decide(
    current: Option<&LeaseRecord>,
    observed_at: Instant,
    me: &str,
    now: Instant,
) -> Decision {
    let Some(cur) = current else {
        return Decision::Create;
    };
    let duration = Duration::from_secs(cur.lease_duration_seconds.max(0) as u64);
    let valid = observed_at
        .checked_add(duration)
        .is_none_or(|expiry| expiry > now);
    if !cur.holder_identity.is_empty() && valid && cur.holder_identity != me {
        return Decision::Wait(cur.holder_identity.clone());
    }
    if cur.holder_identity == me {
        Decision::Renew
    } else {
        Decision::TakeOver(cur.lease_transitions + 1)
    }
}

struct Observed {
    /// The record we last saw or wrote.
    record: Option<LeaseRecord>,
    /// The record as last fetched; a fetch that differs from it counts as a change.
    fetched: Option<LeaseRecord>,
    /// When `record` was last set.
    time: Instant,
}

pub struct LeaderElector {
    cfg: LeaderElectionConfig,
    api: Arc<dyn LeaseApi>,
    observed: Mutex<Observed>,
    leading: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sleep for `d` in short slices; false if `stop` was raised meanwhile.
fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) -> bool {
    const SLICE: Duration = Duration::from_millis(20);
    // None: too far in the future to represent, i.e. until stopped.
    let end = Instant::now().checked_add(d);
    loop {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let now = Instant::now();
        let left = match end {
            Some(end) if now >= end => return true,
            Some(end) => end - now,
            None => SLICE,
        };
        std::thread::sleep(left.min(SLICE));
    }
}

/// `d` plus a random extra of up to `factor * d` (client-go's wait.Jitter).
fn jitter(d: Duration, factor: f64) -> Duration {
    let extra = Duration::try_from_secs_f64(d.as_secs_f64() * factor * fastrand::f64())
        .unwrap_or(Duration::MAX);
    d.saturating_add(extra)
}

impl LeaderElector {
    /// The configuration is not checked here; call `LeaderElectionConfig::validate` first.
    pub fn new(cfg: LeaderElectionConfig, api: Arc<dyn LeaseApi>) -> Arc<Self> {
        // As client-go: the gauge exists (at 0) from the moment an elector is made.
        crate::metrics::set_leader(&cfg.lock_name, false);
        Arc::new(LeaderElector {
            cfg,
            api,
            observed: Mutex::new(Observed {
                record: None,
                fetched: None,
                time: Instant::now(),
            }),
            leading: AtomicBool::new(false),
        })
    }

    pub fn identity(&self) -> &str {
        &self.cfg.identity
    }

    pub fn config(&self) -> &LeaderElectionConfig {
        &self.cfg
    }

    /// True between acquiring the lease and losing it (or being stopped).
    pub fn is_leader(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// The holder this client last observed ("" if none yet).
    pub fn leader(&self) -> String {
        lock(&self.observed)
            .record
            .as_ref()
            .map(|r| r.holder_identity.clone())
            .unwrap_or_default()
    }

    /// The `leaderElection` health check: fails only while we lead and the lease is more than
    /// `lease_duration + tolerance` past the last time we saw it renewed.
    pub fn healthy(&self, tolerance: Duration) -> std::result::Result<(), String> {
        self.healthy_at(Instant::now(), tolerance)
    }

    fn healthy_at(&self, now: Instant, tolerance: Duration) -> std::result::Result<(), String> {
        if !self.is_leader() {
            return Ok(());
        }
        let since = now.saturating_duration_since(lock(&self.observed).time);
        if since > self.cfg.lease_duration.saturating_add(tolerance) {
            return Err(format!(
                "failed election to renew leadership on lease {}",
                self.cfg.lock_name
            ));
        }
        Ok(())
    }

    /// How long a standby waits before looking at the lease again. Expiry counts from the
    /// local time a renewal was first seen, so a standby that looks only every retry period
    /// (2-4.4 s with jitter) sees the holder's last renewal late and takes over late. It looks
    /// four times as often and wakes right at the expiry it computed: a successor acts within
    /// about lease duration + 1 s of the holder's last renewal. The decision itself is
    /// client-go's.
    fn standby_wait(&self) -> Duration {
        let poll = jitter(self.cfg.retry_period / 4, JITTER_FACTOR);
        let o = lock(&self.observed);
        match &o.record {
            Some(r) if r.holder_identity != self.cfg.identity => {
                let lease = Duration::from_secs(r.lease_duration_seconds.max(0) as u64);
                let until = (o.time + lease).saturating_duration_since(Instant::now());
                poll.min(until + Duration::from_millis(20))
            }
            _ => poll,
        }
    }

    fn set_observed(&self, record: LeaseRecord) {
        let mut o = lock(&self.observed);
        o.record = Some(record);
        o.time = Instant::now();
    }

    /// One attempt to acquire or renew; true if we hold the lease afterwards.
    fn try_acquire_or_renew(&self) -> bool {
        let now = Instant::now();
        let now_wall = SystemTime::now();
        let me = self.cfg.identity.as_str();
        let desc = self.cfg.describe();
        let fresh = LeaseRecord {
            holder_identity: me.to_string(),
            lease_duration_seconds: self.cfg.lease_duration.as_secs() as i64,
            acquire_time: Some(now_wall),
            renew_time: Some(now_wall),
            lease_transitions: 0,
        };

        let lease = match self.api.get() {
            Ok(lease) => lease,
            Err(e) => {
                log::error!("error retrieving resource lock {desc}: {e}");
                return false;
            }
        };
        let Some(mut lease) = lease else {
            let obj = fresh.new_lease(&self.cfg.lock_namespace, &self.cfg.lock_name);
            return match self.api.create(&obj) {
                Ok(_) => {
                    self.set_observed(fresh);
                    true
                }
                Err(e) => {
                    log::error!("error initially creating leader election record: {e}");
                    false
                }
            };
        };

        let current = LeaseRecord::from_lease(&lease);
        let observed_at = {
            let mut o = lock(&self.observed);
            if o.fetched.as_ref() != Some(&current) {
                o.record = Some(current.clone());
                o.fetched = Some(current.clone());
                o.time = Instant::now();
            }
            o.time
        };
        let record = match decide(Some(&current), observed_at, me, now) {
            Decision::Wait(holder) => {
                log::debug!("lock is held by {holder} and has not yet expired");
                return false;
            }
            Decision::Renew => LeaseRecord {
                acquire_time: current.acquire_time,
                lease_transitions: current.lease_transitions,
                ..fresh
            },
            Decision::TakeOver(transitions) => LeaseRecord {
                lease_transitions: transitions,
                ..fresh
            },
            // Not produced for an existing record.
            Decision::Create => return false,
        };
        record.write_into(&mut lease);
        match self.api.update(&lease) {
            Ok(_) => {
                self.set_observed(record);
                true
            }
            Err(e) => {
                log::error!("Failed to update lock: {e}");
                false
            }
        }
    }

    /// Block: acquire the lease, call `on_started_leading`, keep renewing; when renewal fails
    /// for a whole `renew_deadline` (or `stop` is raised while leading) call
    /// `on_stopped_leading` and return. Raising `stop` before the lease was acquired returns
    /// without calling either callback. The lease is never released.
    ///
    /// The callbacks run on this thread, so `on_started_leading` must return promptly (start
    /// the work elsewhere); renewals begin once it has returned.
    pub fn run(
        self: &Arc<Self>,
        on_started_leading: impl FnOnce(),
        on_stopped_leading: impl FnOnce(),
        stop: &AtomicBool,
    ) {
        let desc = self.cfg.describe();
        log::info!("attempting to acquire leader lease {desc}...");
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            if self.try_acquire_or_renew() {
                break;
            }
            log::debug!("failed to acquire lease {desc}");
            if !sleep_unless_stopped(self.standby_wait(), stop) {
                return;
            }
        }
        self.leading.store(true, Ordering::SeqCst);
        crate::metrics::set_leader(&self.cfg.lock_name, true);
        log::info!("successfully acquired lease {desc}");
        on_started_leading();

        let lost = self.renew_loop(stop);
        self.leading.store(false, Ordering::SeqCst);
        crate::metrics::set_leader(&self.cfg.lock_name, false);
        if lost {
            log::info!("failed to renew lease {desc}: timed out waiting for the condition");
        }
        on_stopped_leading();
    }

    /// Renew until a `renew_deadline` window passes without success (true) or `stop` (false).
    fn renew_loop(&self, stop: &AtomicBool) -> bool {
        let retry = self.cfg.retry_period;
        loop {
            let start = Instant::now();
            let deadline = self.cfg.renew_deadline;
            loop {
                if stop.load(Ordering::SeqCst) {
                    return false;
                }
                if self.try_acquire_or_renew() {
                    break;
                }
                let elapsed = start.elapsed();
                if elapsed >= deadline {
                    return true;
                }
                if !sleep_unless_stopped(retry.min(deadline - elapsed), stop) {
                    return false;
                }
                if start.elapsed() >= deadline {
                    return true;
                }
            }
            log::trace!("successfully renewed lease {}", self.cfg.describe());
            if !sleep_unless_stopped(retry, stop) {
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::thread;

    /// An in-memory Lease endpoint with resourceVersion checking and fault injection.
    #[derive(Default)]
    struct FakeLeases {
        obj: Mutex<Option<Value>>,
        rv: AtomicUsize,
        /// Updates naming this holder fail with 500.
        fail_holder: Mutex<Option<String>>,
        /// The next update loses a race (someone else wrote first).
        race_next_update: AtomicBool,
    }

    impl FakeLeases {
        fn stored(&self) -> Option<Value> {
            self.obj.lock().unwrap().clone()
        }
        fn stamp(&self, v: &Value) -> Value {
            let mut v = v.clone();
            let rv = self.rv.fetch_add(1, Ordering::SeqCst) + 1;
            v["metadata"]["resourceVersion"] = json!(rv.to_string());
            v
        }
    }

    impl LeaseApi for FakeLeases {
        fn get(&self) -> Result<Option<Value>> {
            Ok(self.stored())
        }
        fn create(&self, lease: &Value) -> Result<Value> {
            let mut obj = self.obj.lock().unwrap();
            if obj.is_some() {
                return Err(Error::api(409, "AlreadyExists", "exists"));
            }
            let v = self.stamp(lease);
            *obj = Some(v.clone());
            Ok(v)
        }
        fn update(&self, lease: &Value) -> Result<Value> {
            let mut obj = self.obj.lock().unwrap();
            let Some(cur) = obj.as_mut() else {
                return Err(Error::api(404, "NotFound", "gone"));
            };
            let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or("");
            if self.fail_holder.lock().unwrap().as_deref() == Some(holder) {
                return Err(Error::api(500, "InternalError", "injected"));
            }
            if self.race_next_update.swap(false, Ordering::SeqCst) {
                *cur = self.stamp(cur);
            }
            if cur["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"] {
                return Err(Error::api(409, "Conflict", "the object has been modified"));
            }
            let v = self.stamp(lease);
            *cur = v.clone();
            Ok(v)
        }
    }

    fn cfg(id: &str) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lock_namespace: "kube-system".into(),
            lock_name: "kube-controller-manager".into(),
            identity: id.into(),
            // Short, but with room for a loaded test machine: a leader thread has to be
            // starved for a whole second before it loses the lease.
            lease_duration: Duration::from_secs(2),
            renew_deadline: Duration::from_secs(1),
            retry_period: Duration::from_millis(100),
        }
    }

    /// Poll `f` until true; a generous bound only so that a broken build fails, not hangs.
    fn eventually(what: &str, f: impl Fn() -> bool) {
        let end = Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(Instant::now() < end, "never happened: {what}");
            thread::sleep(Duration::from_millis(10));
        }
    }

    struct Running {
        le: Arc<LeaderElector>,
        stop: Arc<AtomicBool>,
        started: Arc<AtomicUsize>,
        stopped: Arc<AtomicUsize>,
        thread: thread::JoinHandle<()>,
    }

    fn spawn(id: &str, api: &Arc<FakeLeases>) -> Running {
        let le = LeaderElector::new(cfg(id), api.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicUsize::new(0));
        let stopped = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (le, stop, started, stopped) =
                (le.clone(), stop.clone(), started.clone(), stopped.clone());
            thread::spawn(move || {
                le.run(
                    || {
                        started.fetch_add(1, Ordering::SeqCst);
                    },
                    || {
                        stopped.fetch_add(1, Ordering::SeqCst);
                    },
                    &stop,
                )
            })
        };
        Running {
            le,
            stop,
            started,
            stopped,
            thread,
        }
    }

    #[test]
    fn config_validation() {
        assert!(cfg("a").validate().is_ok());
        let mut c = cfg("a");
        c.renew_deadline = c.lease_duration;
        assert!(c.validate().is_err());
        let mut c = cfg("a");
        c.retry_period = Duration::from_millis(900); // 1.2 * 900 = 1080 >= 1000
        assert!(c.validate().is_err());
        let mut c = cfg("");
        c.identity.clear();
        assert!(c.validate().is_err());
        assert_eq!(cfg("a").describe(), "kube-system/kube-controller-manager");
    }

    #[test]
    fn identity_format() {
        let id = default_identity();
        let (host, uuid) = id.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        let parts: Vec<_> = uuid.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(uuid
            .chars()
            .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)));
        assert!(parts[2].starts_with('4'));
        assert!(matches!(
            parts[3].chars().next(),
            Some('8' | '9' | 'a' | 'b')
        ));
        assert_ne!(default_identity(), id);
    }

    #[test]
    fn decide_table() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let rec = |holder: &str, secs: i64, tr: i64| LeaseRecord {
            holder_identity: holder.into(),
            lease_duration_seconds: secs,
            lease_transitions: tr,
            ..Default::default()
        };
        let cases: Vec<(Option<LeaseRecord>, Duration, Decision)> = vec![
            (None, s(0), Decision::Create),
            (
                Some(rec("other", 15, 3)),
                s(0),
                Decision::Wait("other".into()),
            ),
            (
                Some(rec("other", 15, 3)),
                s(14),
                Decision::Wait("other".into()),
            ),
            // Exactly at expiry the lease is no longer valid.
            (Some(rec("other", 15, 3)), s(15), Decision::TakeOver(4)),
            (Some(rec("other", 15, 3)), s(100), Decision::TakeOver(4)),
            (Some(rec("me", 15, 3)), s(0), Decision::Renew),
            // Our own lease, even expired, is renewed (acquireTime and transitions kept).
            (Some(rec("me", 15, 3)), s(100), Decision::Renew),
            // Released / empty holder: take it at once.
            (Some(rec("", 15, 7)), s(0), Decision::TakeOver(8)),
            // A zero duration expires immediately.
            (Some(rec("other", 0, 0)), s(0), Decision::TakeOver(1)),
        ];
        for (cur, elapsed, want) in cases {
            assert_eq!(
                decide(cur.as_ref(), t0, "me", t0 + elapsed),
                want,
                "{cur:?} after {elapsed:?}"
            );
        }
    }

    #[test]
    fn record_round_trip_keeps_unknown_fields() {
        let mut lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "kube-controller-manager", "namespace": "kube-system",
                         "resourceVersion": "42", "labels": {"x": "y"}},
            "spec": {
                "holderIdentity": "old",
                "leaseDurationSeconds": 15,
                "acquireTime": "2024-01-02T03:04:05.123456Z",
                "renewTime": "2024-01-02T03:04:06.000001Z",
                "leaseTransitions": 2,
                "preferredHolder": "keep-me"
            }
        });
        let r = LeaseRecord::from_lease(&lease);
        assert_eq!(r.holder_identity, "old");
        assert_eq!(r.lease_duration_seconds, 15);
        assert_eq!(r.lease_transitions, 2);
        assert_eq!(
            r.acquire_time,
            timefmt::parse_rfc3339("2024-01-02T03:04:05.123456Z")
        );
        let new = LeaseRecord {
            holder_identity: "me".into(),
            lease_transitions: 3,
            ..r.clone()
        };
        new.write_into(&mut lease);
        assert_eq!(lease["metadata"]["resourceVersion"], "42");
        assert_eq!(lease["metadata"]["labels"]["x"], "y");
        assert_eq!(lease["spec"]["preferredHolder"], "keep-me");
        assert_eq!(lease["spec"]["holderIdentity"], "me");
        assert_eq!(lease["spec"]["leaseTransitions"], 3);
        assert_eq!(lease["spec"]["acquireTime"], "2024-01-02T03:04:05.123456Z");
        assert_eq!(lease["spec"]["renewTime"], "2024-01-02T03:04:06.000001Z");
        assert_eq!(LeaseRecord::from_lease(&lease), new);
        // Missing spec reads as the empty record.
        assert_eq!(LeaseRecord::from_lease(&json!({})), LeaseRecord::default());
        let mut odd = json!("not an object");
        new.write_into(&mut odd);
        assert_eq!(odd["spec"]["holderIdentity"], "me");
    }

    #[test]
    fn create_writes_upstream_shape() {
        let api = Arc::new(FakeLeases::default());
        let le = LeaderElector::new(cfg("me"), api.clone());
        assert!(le.try_acquire_or_renew());
        let obj = api.stored().unwrap();
        assert_eq!(obj["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(obj["kind"], "Lease");
        assert_eq!(obj["metadata"]["name"], "kube-controller-manager");
        assert_eq!(obj["metadata"]["namespace"], "kube-system");
        let spec = &obj["spec"];
        assert_eq!(spec["holderIdentity"], "me");
        assert_eq!(spec["leaseDurationSeconds"], 2);
        assert_eq!(spec["leaseTransitions"], 0);
        let acquire = spec["acquireTime"].as_str().unwrap();
        assert_eq!(acquire.len(), "2006-01-02T15:04:05.000000Z".len());
        assert!(acquire.ends_with('Z'));
        assert_eq!(spec["renewTime"], spec["acquireTime"]);

        // Renewing keeps acquireTime and transitions.
        thread::sleep(Duration::from_millis(2));
        assert!(le.try_acquire_or_renew());
        let obj = api.stored().unwrap();
        assert_eq!(obj["spec"]["acquireTime"], acquire);
        assert_ne!(obj["spec"]["renewTime"], acquire);
        assert_eq!(obj["spec"]["leaseTransitions"], 0);
        assert_eq!(obj["metadata"]["resourceVersion"], "2");
    }

    #[test]
    fn conflict_is_a_lost_race_retried_next_time() {
        let api = Arc::new(FakeLeases::default());
        let le = LeaderElector::new(cfg("me"), api.clone());
        assert!(le.try_acquire_or_renew());
        api.race_next_update.store(true, Ordering::SeqCst);
        assert!(!le.try_acquire_or_renew());
        assert!(le.try_acquire_or_renew());
    }

    #[test]
    fn takeover_of_expired_lease_bumps_transitions() {
        let api = Arc::new(FakeLeases::default());
        let other = LeaseRecord {
            holder_identity: "other".into(),
            lease_duration_seconds: 0, // already expired once observed
            lease_transitions: 4,
            acquire_time: timefmt::parse_rfc3339("2020-01-01T00:00:00Z"),
            renew_time: timefmt::parse_rfc3339("2020-01-01T00:00:00Z"),
        };
        api.create(&other.new_lease("kube-system", "kube-controller-manager"))
            .unwrap();
        let le = LeaderElector::new(cfg("me"), api.clone());
        // The first look starts the clock (observed after the attempt began, so even a zero
        // duration is still valid then); the next attempt finds it expired.
        assert!(!le.try_acquire_or_renew());
        assert!(le.try_acquire_or_renew());
        let spec = api.stored().unwrap()["spec"].clone();
        assert_eq!(spec["holderIdentity"], "me");
        assert_eq!(spec["leaseTransitions"], 5);
        assert_ne!(spec["acquireTime"], "2020-01-01T00:00:00.000000Z");
    }

    #[test]
    fn single_elector_acquires_and_stop_ends_it() {
        let api = Arc::new(FakeLeases::default());
        let r = spawn("a", &api);
        eventually("a leads", || r.le.is_leader());
        assert_eq!(r.started.load(Ordering::SeqCst), 1);
        assert_eq!(r.le.leader(), "a");
        assert!(r.le.healthy(HEALTHZ_TOLERANCE).is_ok());
        r.stop.store(true, Ordering::SeqCst);
        r.thread.join().unwrap();
        assert!(!r.le.is_leader());
        assert_eq!(r.stopped.load(Ordering::SeqCst), 1);
        // Not released: the lease still names us.
        assert_eq!(api.stored().unwrap()["spec"]["holderIdentity"], "a");
    }

    #[test]
    fn two_electors_one_leader_then_takeover() {
        let api = Arc::new(FakeLeases::default());
        let a = spawn("a", &api);
        let b = spawn("b", &api);
        eventually("someone leads", || a.le.is_leader() || b.le.is_leader());
        let (leader, follower) = if a.le.is_leader() { (a, b) } else { (b, a) };
        // Several renew periods later still exactly one leader.
        for _ in 0..5 {
            thread::sleep(Duration::from_millis(100));
            assert!(leader.le.is_leader());
            assert!(!follower.le.is_leader());
            assert_eq!(follower.started.load(Ordering::SeqCst), 0);
        }
        assert_eq!(follower.le.leader(), leader.le.identity());
        let holder = api.stored().unwrap()["spec"]["holderIdentity"].clone();
        assert_eq!(holder, leader.le.identity());

        // The leader stops renewing; the follower takes over once the lease expires.
        leader.stop.store(true, Ordering::SeqCst);
        leader.thread.join().unwrap();
        eventually("follower takes over", || follower.le.is_leader());
        let spec = api.stored().unwrap()["spec"].clone();
        assert_eq!(spec["holderIdentity"], follower.le.identity());
        assert_eq!(spec["leaseTransitions"], 1);
        follower.stop.store(true, Ordering::SeqCst);
        follower.thread.join().unwrap();
        assert_eq!(follower.started.load(Ordering::SeqCst), 1);
        assert_eq!(follower.stopped.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn renew_failures_past_deadline_lose_leadership() {
        let api = Arc::new(FakeLeases::default());
        let r = spawn("a", &api);
        eventually("a leads", || r.le.is_leader());
        *api.fail_holder.lock().unwrap() = Some("a".into());
        // run() returns by itself once the renew deadline has passed.
        r.thread.join().unwrap();
        assert_eq!(r.started.load(Ordering::SeqCst), 1);
        assert_eq!(r.stopped.load(Ordering::SeqCst), 1);
        assert!(!r.le.is_leader());
    }

    #[test]
    fn stop_before_acquiring_calls_no_callback() {
        let api = Arc::new(FakeLeases::default());
        let other = LeaseRecord {
            holder_identity: "other".into(),
            lease_duration_seconds: 3600,
            ..Default::default()
        };
        api.create(&other.new_lease("kube-system", "kube-controller-manager"))
            .unwrap();
        let r = spawn("a", &api);
        eventually("a observed the holder", || r.le.leader() == "other");
        r.stop.store(true, Ordering::SeqCst);
        r.thread.join().unwrap();
        assert_eq!(r.started.load(Ordering::SeqCst), 0);
        assert_eq!(r.stopped.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn health_check_tolerance() {
        let api = Arc::new(FakeLeases::default());
        let le = LeaderElector::new(cfg("me"), api);
        let t = Duration::from_secs(20);
        let far = Instant::now() + Duration::from_secs(60);
        // Not leading: always healthy.
        assert!(le.healthy_at(far, t).is_ok());
        assert!(le.try_acquire_or_renew());
        le.leading.store(true, Ordering::SeqCst);
        let seen = lock(&le.observed).time;
        let limit = le.config().lease_duration + t;
        assert!(le.healthy_at(seen + limit, t).is_ok());
        let err = le.healthy_at(seen + limit + Duration::from_millis(1), t);
        assert_eq!(
            err,
            Err("failed election to renew leadership on lease kube-controller-manager".into())
        );
    }
}
