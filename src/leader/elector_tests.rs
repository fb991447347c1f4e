//! The elector's tests: an in-memory Lease endpoint with fault injection.

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
    /// Each GET waits this long before it answers (a request on a link that went dead).
    hang_gets: Mutex<Option<Duration>>,
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
        let hang = *self.hang_gets.lock().unwrap();
        if let Some(d) = hang {
            thread::sleep(d);
        }
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
fn a_renewal_that_hangs_loses_leadership_at_the_deadline_and_writes_nothing_after() {
    let api = Arc::new(FakeLeases::default());
    let r = spawn("a", &api);
    eventually("a leads", || r.le.is_leader());
    // The link goes dead: every GET answers only after three renew deadlines (1 s here).
    *api.hang_gets.lock().unwrap() = Some(Duration::from_secs(3));
    let cut = Instant::now();
    let writes = api.writes.load(Ordering::SeqCst);
    assert_eq!(r.thread.join().unwrap(), Ended::Lost);
    // Lost within retry period + renew deadline (1.1 s) of the last renewal, not once the
    // hung request answers.
    let took = cut.elapsed();
    assert!(took < Duration::from_millis(1900), "{took:?}");
    assert!(!r.le.is_leader());
    // The hung attempt gets its answer later and, past its window, writes nothing.
    thread::sleep(Duration::from_millis(3300));
    assert_eq!(api.writes.load(Ordering::SeqCst), writes);
    assert_eq!(api.stored().unwrap()["spec"]["holderIdentity"], "a");
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
