//! The elector: the acquire and renew loops around `decide`, and the API calls.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use super::{decide, Decision, LeaderElectionConfig, LeaseApi, LeaseRecord, JITTER_FACTOR};
use crate::error::Result;

/// How `LeaderElector::run` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// `stop` was raised before the lease was acquired: nothing was written.
    NeverLed,
    /// `stop` was raised while leading; the lease is ours until released or expired.
    Stopped,
    /// No renewal succeeded for a whole `renew_deadline`.
    Lost,
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
    /// Set when `release` begins: no attempt writes the lease after that.
    releasing: AtomicBool,
    /// Failures of the lease requests, logged without repeating themselves.
    failures: Mutex<Repeats>,
}

/// A failure that repeats (a standby polling an API server that is away) is logged once, then
/// once a minute with a count of the lines not shown, until an attempt gets an answer.
#[derive(Default)]
struct Repeats {
    last: Option<(String, Instant)>,
    hidden: u32,
}

impl Repeats {
    const EVERY: Duration = Duration::from_secs(60);

    /// The line to log for `text` at `now`, if any.
    fn line(&mut self, now: Instant, text: String) -> Option<String> {
        if let Some((last, at)) = &self.last {
            if *last == text && now.saturating_duration_since(*at) < Self::EVERY {
                self.hidden += 1;
                return None;
            }
        }
        let line = match std::mem::take(&mut self.hidden) {
            0 => text.clone(),
            n => format!("{text} ({n} similar lines not shown)"),
        };
        self.last = Some((text, now));
        Some(line)
    }

    /// An attempt got its answer: the next failure is logged at once.
    fn clear(&mut self) {
        *self = Repeats::default();
    }
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
            releasing: AtomicBool::new(false),
            failures: Mutex::new(Repeats::default()),
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
                self.failed(format!("error retrieving resource lock {desc}: {e}"));
                return false;
            }
        };
        lock(&self.failures).clear();
        // An attempt that was under way when the release began writes nothing.
        if self.releasing.load(Ordering::SeqCst) {
            return false;
        }
        let Some(mut lease) = lease else {
            let obj = fresh.new_lease(&self.cfg.lock_namespace, &self.cfg.lock_name);
            return match self.api.create(&obj) {
                Ok(_) => {
                    self.set_observed(fresh);
                    true
                }
                Err(e) => {
                    self.failed(format!(
                        "error initially creating leader election record: {e}"
                    ));
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
        if self.releasing.load(Ordering::SeqCst) {
            return false;
        }
        record.write_into(&mut lease);
        match self.api.update(&lease) {
            Ok(_) => {
                self.set_observed(record);
                true
            }
            Err(e) => {
                self.failed(format!("Failed to update lock: {e}"));
                false
            }
        }
    }

    fn failed(&self, text: String) {
        if let Some(line) = lock(&self.failures).line(Instant::now(), text) {
            log::error!("{line}");
        }
    }

    /// Block: acquire the lease, call `on_started_leading`, keep renewing until `stop` is
    /// raised or no renewal succeeds for a whole `renew_deadline`; say which. The lease is not
    /// released here: after `Ended::Stopped`, the caller stops its writers and then calls
    /// `release`.
    ///
    /// The callback runs on this thread, so it must return promptly (start the work
    /// elsewhere); renewals begin once it has returned. It is not called if `stop` was raised
    /// while the lease was being acquired.
    pub fn run(self: &Arc<Self>, on_started_leading: impl FnOnce(), stop: &AtomicBool) -> Ended {
        let desc = self.cfg.describe();
        log::info!("attempting to acquire leader lease {desc}...");
        loop {
            if stop.load(Ordering::SeqCst) {
                return Ended::NeverLed;
            }
            if self.try_acquire_or_renew() {
                break;
            }
            log::debug!("failed to acquire lease {desc}");
            if !sleep_unless_stopped(self.standby_wait(), stop) {
                return Ended::NeverLed;
            }
        }
        log::info!("successfully acquired lease {desc}");
        if stop.load(Ordering::SeqCst) {
            // Acquired by an attempt that began before the stop: ours to release, nothing
            // to start.
            return Ended::Stopped;
        }
        self.leading.store(true, Ordering::SeqCst);
        crate::metrics::set_leader(&self.cfg.lock_name, true);
        on_started_leading();

        let lost = self.renew_loop(stop);
        self.leading.store(false, Ordering::SeqCst);
        crate::metrics::set_leader(&self.cfg.lock_name, false);
        if lost {
            log::info!("failed to renew lease {desc}: timed out waiting for the condition");
            Ended::Lost
        } else {
            Ended::Stopped
        }
    }

    /// Give the lease up if this elector still holds it, as client-go's `ReleaseOnCancel`
    /// does: the record becomes `LeaseRecord::released`, so a candidate takes the lease the
    /// next time it looks instead of waiting out the lease duration. Call it once `stop` was
    /// raised and nothing acts as leader any more. From then on the elector writes nothing
    /// else: an attempt still under way (waiting on a slow answer) does not write, and should
    /// its write already be on the wire, the resourceVersion makes one of the two fail.
    ///
    /// Nothing is sent if this elector never held the lease or last saw someone else hold it
    /// (Ok(false)). Otherwise the lease is fetched, and written back only if it still names
    /// us, with the fetched resourceVersion: if anyone wrote it since, the PUT fails with 409
    /// and their record stands.
    pub fn release(&self) -> Result<bool> {
        self.releasing.store(true, Ordering::SeqCst);
        let me = self.cfg.identity.as_str();
        if self.leader() != me {
            return Ok(false);
        }
        let Some(mut lease) = self.api.get()? else {
            return Ok(false);
        };
        let current = LeaseRecord::from_lease(&lease);
        if current.holder_identity != me {
            log::info!(
                "lease {} is held by {}; not releasing it",
                self.cfg.describe(),
                current.holder_identity
            );
            return Ok(false);
        }
        let record = current.released(SystemTime::now());
        record.write_into(&mut lease);
        self.api.update(&lease)?;
        self.set_observed(record);
        log::info!("released lease {}", self.cfg.describe());
        Ok(true)
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
    use crate::compat::timefmt;
    use crate::error::{Error, Result};
    use crate::leader::tests::cfg;
    use crate::leader::HEALTHZ_TOLERANCE;
    use serde_json::{json, Value};
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
        /// Creates and updates received.
        writes: AtomicUsize,
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
            self.writes.fetch_add(1, Ordering::SeqCst);
            let mut obj = self.obj.lock().unwrap();
            if obj.is_some() {
                return Err(Error::api(409, "AlreadyExists", "exists"));
            }
            let v = self.stamp(lease);
            *obj = Some(v.clone());
            Ok(v)
        }
        fn update(&self, lease: &Value) -> Result<Value> {
            self.writes.fetch_add(1, Ordering::SeqCst);
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
        thread: thread::JoinHandle<Ended>,
    }

    fn spawn(id: &str, api: &Arc<FakeLeases>) -> Running {
        let le = LeaderElector::new(cfg(id), api.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (le, stop, started) = (le.clone(), stop.clone(), started.clone());
            thread::spawn(move || {
                le.run(
                    || {
                        started.fetch_add(1, Ordering::SeqCst);
                    },
                    &stop,
                )
            })
        };
        Running {
            le,
            stop,
            started,
            thread,
        }
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
        assert_eq!(r.thread.join().unwrap(), Ended::Stopped);
        assert!(!r.le.is_leader());
        // Not released by run(): the lease still names us until release().
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
        assert_eq!(leader.thread.join().unwrap(), Ended::Stopped);
        eventually("follower takes over", || follower.le.is_leader());
        let spec = api.stored().unwrap()["spec"].clone();
        assert_eq!(spec["holderIdentity"], follower.le.identity());
        assert_eq!(spec["leaseTransitions"], 1);
        follower.stop.store(true, Ordering::SeqCst);
        assert_eq!(follower.thread.join().unwrap(), Ended::Stopped);
        assert_eq!(follower.started.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn renew_failures_past_deadline_lose_leadership() {
        let api = Arc::new(FakeLeases::default());
        let r = spawn("a", &api);
        eventually("a leads", || r.le.is_leader());
        *api.fail_holder.lock().unwrap() = Some("a".into());
        // run() returns by itself once the renew deadline has passed.
        assert_eq!(r.thread.join().unwrap(), Ended::Lost);
        assert_eq!(r.started.load(Ordering::SeqCst), 1);
        assert!(!r.le.is_leader());
    }

    #[test]
    fn stop_before_acquiring_calls_no_callback_and_releases_nothing() {
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
        assert_eq!(r.thread.join().unwrap(), Ended::NeverLed);
        assert_eq!(r.started.load(Ordering::SeqCst), 0);
        let writes = api.writes.load(Ordering::SeqCst);
        // Never held: nothing to release, and no request for it.
        assert!(!r.le.release().unwrap());
        assert_eq!(api.writes.load(Ordering::SeqCst), writes);
        assert_eq!(api.stored().unwrap()["spec"]["holderIdentity"], "other");
    }

    #[test]
    fn stopped_leader_releases_and_a_standby_takes_over_at_once() {
        let api = Arc::new(FakeLeases::default());
        let a = spawn("a", &api);
        eventually("a leads", || a.le.is_leader());
        let transitions = api.stored().unwrap()["spec"]["leaseTransitions"].clone();
        let b = spawn("b", &api);
        eventually("b saw a", || b.le.leader() == "a");
        a.stop.store(true, Ordering::SeqCst);
        assert_eq!(a.thread.join().unwrap(), Ended::Stopped);
        let before = api.stored().unwrap();
        assert!(a.le.release().unwrap());
        let after = api.stored().unwrap();
        let spec = &after["spec"];
        assert_eq!(spec["holderIdentity"], "");
        assert_eq!(spec["leaseDurationSeconds"], 1);
        assert_eq!(spec["leaseTransitions"], transitions);
        assert_eq!(spec["renewTime"], spec["acquireTime"]);
        assert_ne!(spec["acquireTime"], before["spec"]["acquireTime"]);
        assert_eq!(a.le.leader(), "");
        // Releasing again sends nothing: the lease no longer names a. Nor does an attempt to
        // take the lease (free now) that was still under way.
        let writes = api.writes.load(Ordering::SeqCst);
        assert!(!a.le.release().unwrap());
        assert!(!a.le.try_acquire_or_renew());
        assert_eq!(api.writes.load(Ordering::SeqCst), writes);
        // b looks every retry_period/4 (25-55 ms here): far sooner than the 2 s lease.
        let t0 = Instant::now();
        eventually("b takes over", || b.le.is_leader());
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        let spec = api.stored().unwrap()["spec"].clone();
        assert_eq!(spec["holderIdentity"], "b");
        assert_eq!(spec["leaseTransitions"], transitions.as_i64().unwrap() + 1);
        b.stop.store(true, Ordering::SeqCst);
        assert_eq!(b.thread.join().unwrap(), Ended::Stopped);
    }

    #[test]
    fn release_never_overwrites_another_holder() {
        // The lease was taken over (say after a long pause) since we last renewed it.
        let api = Arc::new(FakeLeases::default());
        let le = LeaderElector::new(cfg("a"), api.clone());
        assert!(le.try_acquire_or_renew());
        let mut lease = api.stored().unwrap();
        let other = LeaseRecord {
            holder_identity: "b".into(),
            lease_duration_seconds: 15,
            lease_transitions: 1,
            ..Default::default()
        };
        other.write_into(&mut lease);
        api.update(&lease).unwrap();
        let writes = api.writes.load(Ordering::SeqCst);
        assert!(!le.release().unwrap());
        assert_eq!(api.writes.load(Ordering::SeqCst), writes);
        assert_eq!(api.stored().unwrap()["spec"]["holderIdentity"], "b");

        // Someone writes between our read and our write: the resourceVersion makes it a 409
        // and their record stands.
        let api = Arc::new(FakeLeases::default());
        let le = LeaderElector::new(cfg("a"), api.clone());
        assert!(le.try_acquire_or_renew());
        api.race_next_update.store(true, Ordering::SeqCst);
        let err = le.release().unwrap_err();
        assert!(err.is_conflict(), "{err}");
        assert_eq!(api.stored().unwrap()["spec"]["holderIdentity"], "a");
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

    #[test]
    fn repeated_failures_are_logged_once_a_minute_until_an_answer() {
        let mut r = Repeats::default();
        let t0 = Instant::now();
        let refused = || "error retrieving resource lock kube-system/x: refused".to_string();
        let mut lines = Vec::new();
        // Two minutes of a standby's polls, every 2 s.
        for i in 0..60u64 {
            lines.extend(r.line(t0 + Duration::from_secs(2 * i), refused()));
        }
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0], refused());
        assert_eq!(
            lines[1],
            format!("{} (29 similar lines not shown)", refused())
        );
        // Another error is shown at once; after an answer, the same one is too.
        let t = t0 + Duration::from_secs(121);
        assert!(r
            .line(t, "Failed to update lock: conflict".into())
            .is_some());
        r.clear();
        assert_eq!(r.line(t, refused()), Some(refused()));
    }
}
