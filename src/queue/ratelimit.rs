//! Rate limiters: how long a failed key waits before it is retried (per-key exponential
//! backoff, token buckets, and the worst case of several).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Decides how long a key must wait before it is retried.
pub trait RateLimiter<K>: Send {
    /// The delay for the next retry of `k`; counts as one more failure of `k`.
    fn when(&mut self, k: &K) -> Duration;
    /// Stop tracking `k` (it succeeded or was given up on).
    fn forget(&mut self, k: &K);
    /// How many times `k` has been retried since the last `forget`.
    fn num_requeues(&self, k: &K) -> u32;
}

/// Per-key exponential backoff: `base * 2^failures`, capped at `max`.
pub struct ItemExponential<K> {
    base: Duration,
    max: Duration,
    failures: HashMap<K, u32>,
}

impl<K: Eq + Hash> ItemExponential<K> {
    pub fn new(base: Duration, max: Duration) -> Self {
        ItemExponential {
            base,
            max,
            failures: HashMap::new(),
        }
    }
}

/// `base * 2^exp` capped at `max`, computed in floating point so that it cannot overflow.
pub(super) fn exponential_backoff(base: Duration, max: Duration, exp: u32) -> Duration {
    let backoff = base.as_nanos() as f64 * 2f64.powi(exp.min(2048) as i32);
    // Also catches infinity; `as` would saturate anyway.
    if backoff.is_nan() || backoff > i64::MAX as f64 {
        return max;
    }
    Duration::from_nanos(backoff as u64).min(max)
}

impl<K: Eq + Hash + Clone + Send> RateLimiter<K> for ItemExponential<K> {
    fn when(&mut self, k: &K) -> Duration {
        let slot = self.failures.entry(k.clone()).or_insert(0);
        let exp = *slot;
        *slot = slot.saturating_add(1);
        exponential_backoff(self.base, self.max, exp)
    }
    fn forget(&mut self, k: &K) {
        self.failures.remove(k);
    }
    fn num_requeues(&self, k: &K) -> u32 {
        self.failures.get(k).copied().unwrap_or(0)
    }
}

/// A token bucket in the manner of golang.org/x/time/rate: it starts full with `burst` tokens,
/// refills at `qps` tokens per second up to `burst`, and a reservation always succeeds but may
/// leave the bucket in debt, in which case the caller has to wait until the debt is repaid.
/// `qps <= 0` (or not finite) means unlimited.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    pub fn new(qps: f64, burst: u32) -> Self {
        TokenBucket {
            qps,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: None,
        }
    }

    pub fn unlimited(&self) -> bool {
        !(self.qps > 0.0 && self.qps.is_finite())
    }

    /// The tokens at time `now` (refilled since the last call).
    fn tokens_at(&self, now: Instant) -> f64 {
        let elapsed = self
            .last
            .map_or(Duration::ZERO, |l| now.saturating_duration_since(l));
        (self.tokens + elapsed.as_secs_f64() * self.qps).min(self.burst)
    }

    /// Bring the bucket to time `now` (refill since the last call; an earlier `now` than the
    /// last one refills nothing).
    fn advance(&mut self, now: Instant) {
        self.tokens = self.tokens_at(now);
        self.last = Some(self.last.map_or(now, |l| l.max(now)));
    }

    /// How long until a whole token would be there at `now` if nobody took one (zero when
    /// one is there). Takes nothing.
    pub fn wait_at(&self, now: Instant) -> Duration {
        if self.unlimited() {
            return Duration::ZERO;
        }
        Self::until_whole(self.tokens_at(now), self.qps).unwrap_or(Duration::ZERO)
    }

    /// None when `tokens` is a whole token but for the float sums' rounding, else how long
    /// until it is at `qps`.
    fn until_whole(tokens: f64, qps: f64) -> Option<Duration> {
        if tokens >= 1.0 - 1e-9 {
            return None;
        }
        let nanos = (1.0 - tokens) / qps * 1e9;
        Some(Duration::from_nanos(nanos as u64))
    }

    /// Take one token at time `now` and return how long the caller must wait before acting.
    pub fn reserve_at(&mut self, now: Instant) -> Duration {
        if self.unlimited() {
            return Duration::ZERO;
        }
        self.advance(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            return Duration::ZERO;
        }
        let nanos = -self.tokens / self.qps * 1e9;
        Duration::from_nanos(nanos as u64)
    }

    /// A token at low priority: taken only if a whole one is there at `now`, which means no
    /// reservation is still waiting for its turn (a waiting one leaves the bucket in debt).
    /// Otherwise nothing is taken and the answer is how long until a whole token would be
    /// there if nobody else took one: the caller tries again then. Never goes into debt, so
    /// a normal reservation made later is never delayed by a low-priority one that waited.
    pub fn take_idle_at(&mut self, now: Instant) -> std::result::Result<(), Duration> {
        if self.unlimited() {
            return Ok(());
        }
        self.advance(now);
        match Self::until_whole(self.tokens, self.qps) {
            Some(wait) => Err(wait),
            None => {
                self.tokens -= 1.0;
                Ok(())
            }
        }
    }

    /// `reserve_at(Instant::now())`.
    pub fn reserve(&mut self) -> Duration {
        self.reserve_at(Instant::now())
    }
}

/// An overall (not per-key) token bucket as a rate limiter.
pub struct Bucket(TokenBucket);

impl Bucket {
    pub fn new(qps: f64, burst: u32) -> Self {
        Bucket(TokenBucket::new(qps, burst))
    }
}

impl<K> RateLimiter<K> for Bucket {
    fn when(&mut self, _k: &K) -> Duration {
        self.0.reserve()
    }
    fn forget(&mut self, _k: &K) {}
    fn num_requeues(&self, _k: &K) -> u32 {
        0
    }
}

/// The worst case of several limiters; every limiter sees every call.
pub struct MaxOf<K>(pub Vec<Box<dyn RateLimiter<K>>>);

impl<K> MaxOf<K> {
    pub fn new(limiters: Vec<Box<dyn RateLimiter<K>>>) -> Self {
        MaxOf(limiters)
    }
}

impl<K> RateLimiter<K> for MaxOf<K> {
    fn when(&mut self, k: &K) -> Duration {
        self.0
            .iter_mut()
            .map(|l| l.when(k))
            .max()
            .unwrap_or(Duration::ZERO)
    }
    fn forget(&mut self, k: &K) {
        for l in &mut self.0 {
            l.forget(k);
        }
    }
    fn num_requeues(&self, k: &K) -> u32 {
        self.0.iter().map(|l| l.num_requeues(k)).max().unwrap_or(0)
    }
}

/// client-go's DefaultControllerRateLimiter: max of per-key 5ms..1000s exponential backoff and
/// an overall 10 qps / burst 100 bucket.
pub fn default_controller_rate_limiter<K: Eq + Hash + Clone + Send + 'static>(
) -> Box<dyn RateLimiter<K>> {
    Box::new(MaxOf(vec![
        Box::new(ItemExponential::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        )),
        Box::new(Bucket::new(10.0, 100)),
    ]))
}
