//! Upstream's per-zone `RateLimitedTimedQueue`: nodes waiting to be tainted NoExecute, each
//! once, in the order they were added, taken no faster than a token bucket allows (burst 1,
//! `flowcontrol.NewTokenBucketRateLimiter`), the bucket swapped when the zone changes state.
//! The clock is an argument, so tests choose it.

use crate::queue::TokenBucket;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// `EvictionRateLimiterBurst`.
pub const BURST: u32 = 1;

/// The eviction limiter (`flowcontrol.NewTokenBucketRateLimiter`): the shared token bucket
/// with burst [`BURST`], full when made; a rate of zero or less never accepts
/// (`NewFakeNeverRateLimiter`).
#[derive(Debug, Clone)]
pub struct Limiter {
    qps: f32,
    bucket: TokenBucket,
}

impl Limiter {
    pub fn new(qps: f32) -> Self {
        Limiter {
            qps,
            bucket: TokenBucket::new(f64::from(qps), BURST),
        }
    }

    pub fn qps(&self) -> f32 {
        self.qps
    }

    pub fn try_accept(&mut self, now: Instant) -> bool {
        self.qps > 0.0 && self.bucket.take_idle_at(now).is_ok()
    }

    /// How long until a token is there (None: never).
    pub fn wait(&self, now: Instant) -> Option<Duration> {
        (self.qps > 0.0).then(|| self.bucket.wait_at(now))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Timed {
    pub value: String,
    pub uid: String,
    pub added: Instant,
    pub process_at: Instant,
}

/// Nodes of one zone waiting to be tainted.
#[derive(Debug)]
pub struct ZoneQueue {
    /// Ordered by `process_at` (ties: insertion order).
    items: VecDeque<Timed>,
    /// Every value added and not removed: a node stays here after it was processed, so it is
    /// not added again until `remove` (upstream's `UniqueQueue` set).
    set: std::collections::HashSet<String>,
    limiter: Limiter,
}

impl ZoneQueue {
    pub fn new(qps: f32) -> Self {
        ZoneQueue {
            items: VecDeque::new(),
            set: Default::default(),
            limiter: Limiter::new(qps),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Added and not removed since (processed or not).
    pub fn contains(&self, value: &str) -> bool {
        self.set.contains(value)
    }

    fn insert(&mut self, t: Timed) {
        let at = self
            .items
            .iter()
            .position(|o| o.process_at > t.process_at)
            .unwrap_or(self.items.len());
        self.items.insert(at, t);
    }

    /// Add `value` unless it is queued already (`Add`).
    pub fn add(&mut self, value: &str, uid: &str, now: Instant) -> bool {
        if !self.set.insert(value.to_string()) {
            return false;
        }
        self.insert(Timed {
            value: value.to_string(),
            uid: uid.to_string(),
            added: now,
            process_at: now,
        });
        true
    }

    /// Forget `value` (`Remove`); whether it had been added.
    pub fn remove(&mut self, value: &str) -> bool {
        if !self.set.remove(value) {
            return false;
        }
        self.items.retain(|t| t.value != value);
        true
    }

    /// Upstream's `Try`: while the head is due and the limiter gives a token, hand it to `f`;
    /// `f` answers done, or not done and how long to wait before the next try. A token is
    /// taken before the head's time is looked at, as upstream takes it.
    pub fn try_process(&mut self, now: Instant, mut f: impl FnMut(&Timed) -> (bool, Duration)) {
        while let Some(head) = self.items.front().cloned() {
            if !self.limiter.try_accept(now) {
                break;
            }
            if now < head.process_at {
                break;
            }
            let (done, wait) = f(&head);
            self.items.pop_front();
            if !done {
                let mut again = head;
                again.process_at = now + wait + Duration::from_nanos(1);
                self.insert(again);
            }
        }
    }

    /// Upstream's `SwapLimiter`: a new bucket for `qps` unless the rate is the same; when the
    /// old bucket had no token left, the new one starts without one either.
    pub fn swap_limiter(&mut self, qps: f32, now: Instant) {
        if self.limiter.qps() == qps {
            return;
        }
        let mut new = Limiter::new(qps);
        if qps > 0.0 && !self.limiter.try_accept(now) {
            new.try_accept(now);
        }
        self.limiter = new;
    }

    pub fn qps(&self) -> f32 {
        self.limiter.qps()
    }

    /// When the next `try_process` could do something (None: nothing queued or never).
    pub fn next_due(&self, now: Instant) -> Option<Duration> {
        let head = self.items.front()?;
        let token = self.limiter.wait(now)?;
        Some(token.max(head.process_at.saturating_duration_since(now)))
    }
}
