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
        self.try_acquire_or_renew_until(None)
    }

    /// As `try_acquire_or_renew`; an attempt that reaches `cutoff` before its write sends none.
    fn try_acquire_or_renew_until(&self, cutoff: Option<Instant>) -> bool {
        let past = |c: Option<Instant>| c.is_some_and(|c| Instant::now() >= c);
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
        // An attempt that was under way when the release began, or that outlived its renew
        // window, writes nothing.
        if self.releasing.load(Ordering::SeqCst) || past(cutoff) {
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
        if self.releasing.load(Ordering::SeqCst) || past(cutoff) {
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
    ///
    /// As client-go's context does, the window bounds every attempt in it, not just the
    /// start of the next: an attempt still waiting for an answer when the window closes
    /// counts as failed, and sends no write afterwards. (Each request may take up to half the
    /// renew deadline and a read is retried, so without the bound a leader cut off from its
    /// API server led on for 15 s and more without a renewal, past the lease duration after
    /// which a standby takes over.) The next window opens one retry period after the
    /// successful attempt was sent, not answered: a late answer does not extend leadership.
    /// So a leader stops at most `retry_period + renew_deadline` after its last renewal was
    /// sent, and a standby takes over no sooner than `lease_duration` after that renewal.
    fn renew_loop(self: &Arc<Self>, stop: &AtomicBool) -> bool {
        let retry = self.cfg.retry_period;
        let mut sent = Instant::now();
        loop {
            let wait = (sent + retry).saturating_duration_since(Instant::now());
            if !sleep_unless_stopped(wait, stop) {
                return false;
            }
            let start = (sent + retry).min(Instant::now());
            let end = start + self.cfg.renew_deadline;
            loop {
                let began = Instant::now();
                if began >= end {
                    return true;
                }
                match self.attempt_until(end, stop) {
                    None => return false,
                    Some(true) => {
                        sent = began;
                        break;
                    }
                    Some(false) => {}
                }
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return true;
                }
                if !sleep_unless_stopped(retry.min(left), stop) {
                    return false;
                }
            }
            log::trace!("successfully renewed lease {}", self.cfg.describe());
        }
    }

    /// One attempt on a thread of its own, waited for until `end`: Some(its result), Some(false)
    /// if it is still under way at `end` (it then writes nothing), None if `stop` was raised
    /// meanwhile (the release that follows keeps it from writing).
    fn attempt_until(self: &Arc<Self>, end: Instant, stop: &AtomicBool) -> Option<bool> {
        let (tx, rx) = std::sync::mpsc::channel();
        let le = self.clone();
        let spawned = std::thread::Builder::new()
            .name("leader-renew".into())
            .spawn(move || {
                let _ = tx.send(le.try_acquire_or_renew_until(Some(end)));
            });
        if spawned.is_err() {
            return Some(self.try_acquire_or_renew_until(Some(end)));
        }
        const SLICE: Duration = Duration::from_millis(20);
        loop {
            if stop.load(Ordering::SeqCst) {
                return None;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Some(false);
            }
            match rx.recv_timeout(left.min(SLICE)) {
                Ok(held) => return Some(held),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Some(false),
            }
        }
    }
}
#[cfg(test)]
#[path = "elector_tests.rs"]
mod tests;
