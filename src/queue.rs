//! A work queue with the semantics of client-go's rate-limited workqueue.
//!
//! * A key lives in the `dirty` set from `add` until a worker takes it with `get`; adding a key
//!   that is already dirty is a no-op, so bursts of events collapse into one pass.
//! * A key handed out by `get` is in the `processing` set until `done`. It is never handed to a
//!   second worker meanwhile: an `add` during processing only marks it dirty, and `done` puts it
//!   back on the queue.
//! * `add_after` holds keys in a min-heap until they are due; a second `add_after` for a waiting
//!   key only moves it earlier, never later. Due keys are moved onto the queue by whichever
//!   caller touches the queue next; blocked getters sleep with a timeout until the earliest one.
//! * `add_rate_limited` asks the rate limiter how long the key must wait (per-key exponential
//!   backoff combined with an overall token bucket by default); `forget` resets the key's history.
//!
//! Workers are OS threads: `get` blocks on a condition variable.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Rate limiters

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
fn exponential_backoff(base: Duration, max: Duration, exp: u32) -> Duration {
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

    /// Take one token at time `now` and return how long the caller must wait before acting.
    pub fn reserve_at(&mut self, now: Instant) -> Duration {
        if self.unlimited() {
            return Duration::ZERO;
        }
        let last = self.last.unwrap_or(now);
        let elapsed = now.saturating_duration_since(last);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.qps).min(self.burst);
        self.tokens -= 1.0;
        self.last = Some(now);
        if self.tokens >= 0.0 {
            return Duration::ZERO;
        }
        let nanos = -self.tokens / self.qps * 1e9;
        Duration::from_nanos(nanos as u64)
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

// ---------------------------------------------------------------------------------------------
// Metrics

/// Upper bounds of client-go's workqueue duration histograms: 1e-8 s .. 10 s, factor 10,
/// computed by repeated multiplication as Prometheus' `ExponentialBuckets` does (so the `le`
/// labels read exactly as upstream's, e.g. `9.999999999999999e-06`).
pub const DURATION_BUCKETS: [f64; 10] = exponential_buckets(10e-9, 10.0);

const fn exponential_buckets<const N: usize>(start: f64, factor: f64) -> [f64; N] {
    let mut b = [0.0; N];
    let mut v = start;
    let mut i = 0;
    while i < N {
        b[i] = v;
        v *= factor;
        i += 1;
    }
    b
}

/// A histogram with cumulative bucket counts (Prometheus `le` semantics).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// (upper bound in seconds, observations <= bound); `+Inf` is `count`.
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds: &[f64]) -> Self {
        Histogram {
            buckets: bounds.iter().map(|b| (*b, 0)).collect(),
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        for (le, c) in &mut self.buckets {
            if v <= *le {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

/// A snapshot of a queue's metrics (the `workqueue_*` family, labelled by `name`).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueStats {
    pub name: String,
    /// workqueue_adds_total
    pub adds_total: u64,
    /// workqueue_depth
    pub depth: usize,
    /// workqueue_retries_total
    pub retries_total: u64,
    /// workqueue_queue_duration_seconds
    pub queue_duration: Histogram,
    /// workqueue_work_duration_seconds
    pub work_duration: Histogram,
    /// workqueue_unfinished_work_seconds
    pub unfinished_work_seconds: f64,
    /// workqueue_longest_running_processor_seconds
    pub longest_running_processor_seconds: f64,
}

struct Metrics<K> {
    adds: u64,
    retries: u64,
    add_times: HashMap<K, Instant>,
    start_times: HashMap<K, Instant>,
    queue_duration: Histogram,
    work_duration: Histogram,
}

// ---------------------------------------------------------------------------------------------
// The queue

struct Waiting<K> {
    ready_at: Instant,
    seq: u64,
    key: K,
}

// Ordered so that the max-heap `BinaryHeap` pops the earliest `ready_at` first (ties: FIFO).
impl<K> Ord for Waiting<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.ready_at, other.seq).cmp(&(self.ready_at, self.seq))
    }
}
impl<K> PartialOrd for Waiting<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> PartialEq for Waiting<K> {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
    }
}
impl<K> Eq for Waiting<K> {}

struct State<K> {
    queue: VecDeque<K>,
    dirty: HashSet<K>,
    processing: HashSet<K>,
    /// Delayed adds; entries superseded by an earlier time stay in the heap until popped and
    /// are recognised as stale because `waiting_by_key` holds a different sequence number.
    waiting: BinaryHeap<Waiting<K>>,
    waiting_by_key: HashMap<K, (Instant, u64)>,
    seq: u64,
    shutting_down: bool,
    drain: bool,
    /// Getters blocked on `ready`. Waking is skipped when there are none: with every worker
    /// busy (a long queue) each add would otherwise cost a futex syscall for nothing.
    idle: usize,
    metrics: Metrics<K>,
}

type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// A deduplicating, rate-limited work queue of keys (see the module docs).
pub struct WorkQueue<K> {
    name: String,
    state: Mutex<State<K>>,
    /// Signalled for getters: a key was queued, a delayed key may be due, or shutdown.
    ready: Condvar,
    /// Signalled for `shut_down_with_drain` when the queue may have drained.
    drained: Condvar,
    limiter: Mutex<Box<dyn RateLimiter<K>>>,
    clock: Clock,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// A queue with `default_controller_rate_limiter()`.
    pub fn new(name: &str) -> Arc<Self> {
        Self::with_rate_limiter(name, default_controller_rate_limiter())
    }

    pub fn with_rate_limiter(name: &str, rl: Box<dyn RateLimiter<K>>) -> Arc<Self> {
        Self::with_clock(name, rl, Arc::new(Instant::now))
    }

    fn with_clock(name: &str, rl: Box<dyn RateLimiter<K>>, clock: Clock) -> Arc<Self> {
        let q = Arc::new(WorkQueue {
            name: name.to_string(),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                waiting: BinaryHeap::new(),
                waiting_by_key: HashMap::new(),
                seq: 0,
                shutting_down: false,
                drain: false,
                idle: 0,
                metrics: Metrics {
                    adds: 0,
                    retries: 0,
                    add_times: HashMap::new(),
                    start_times: HashMap::new(),
                    queue_duration: Histogram::new(&DURATION_BUCKETS),
                    work_duration: Histogram::new(&DURATION_BUCKETS),
                },
            }),
            ready: Condvar::new(),
            drained: Condvar::new(),
            limiter: Mutex::new(rl),
            clock,
        });
        if !name.is_empty() {
            let weak: std::sync::Weak<Self> = Arc::downgrade(&q);
            crate::metrics::register_queue(weak);
        }
        q
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Mark `k` as needing processing.
    pub fn add(&self, k: K) {
        let now = (self.clock)();
        let mut st = lock(&self.state);
        self.promote(&mut st, now);
        self.add_locked(&mut st, k, now);
    }

    fn add_locked(&self, st: &mut State<K>, k: K, now: Instant) {
        if st.shutting_down || st.dirty.contains(&k) {
            return;
        }
        st.metrics.adds += 1;
        st.metrics.add_times.entry(k.clone()).or_insert(now);
        st.dirty.insert(k.clone());
        if st.processing.contains(&k) {
            // Re-queued by done().
            return;
        }
        st.queue.push_back(k);
        self.wake_one(st);
    }

    fn wake_one(&self, st: &State<K>) {
        if st.idle > 0 {
            self.ready.notify_one();
        }
    }

    /// Move every delayed key that is due onto the queue, earliest first.
    fn promote(&self, st: &mut State<K>, now: Instant) {
        if st.shutting_down {
            return;
        }
        while st.waiting.peek().is_some_and(|w| w.ready_at <= now) {
            let Some(w) = st.waiting.pop() else { break };
            if st.waiting_by_key.get(&w.key).map(|e| e.1) == Some(w.seq) {
                st.waiting_by_key.remove(&w.key);
                self.add_locked(st, w.key, now);
            }
        }
    }

    /// Add `k` once `d` has passed (at once if `d` is zero).
    pub fn add_after(&self, k: K, d: Duration) {
        let now = (self.clock)();
        let mut st = lock(&self.state);
        if st.shutting_down {
            return;
        }
        st.metrics.retries += 1;
        self.promote(&mut st, now);
        if d.is_zero() {
            self.add_locked(&mut st, k, now);
            return;
        }
        let Some(ready_at) = now.checked_add(d) else {
            // Beyond the representable future: it would never fire.
            return;
        };
        if let Some((t, _)) = st.waiting_by_key.get(&k) {
            if *t <= ready_at {
                return;
            }
        }
        st.seq += 1;
        let seq = st.seq;
        st.waiting_by_key.insert(k.clone(), (ready_at, seq));
        st.waiting.push(Waiting {
            ready_at,
            seq,
            key: k,
        });
        // A blocked getter may have to wake earlier than it planned.
        self.wake_one(&st);
    }

    /// Add `k` after the delay the rate limiter chooses.
    pub fn add_rate_limited(&self, k: K) {
        let d = lock(&self.limiter).when(&k);
        self.add_after(k, d);
    }

    /// Clear the rate limiter's history for `k` (does not remove it from the queue).
    pub fn forget(&self, k: &K) {
        lock(&self.limiter).forget(k);
    }

    pub fn num_requeues(&self, k: &K) -> u32 {
        lock(&self.limiter).num_requeues(k)
    }

    /// Block until a key is available and hand it out; `done(key)` must follow.
    /// Returns None after `shut_down`, or after `shut_down_with_drain` once every queued key
    /// was handed out and every handed-out key is done.
    pub fn get(&self) -> Option<K> {
        let mut st = lock(&self.state);
        loop {
            let now = (self.clock)();
            self.promote(&mut st, now);
            if st.shutting_down && !st.drain {
                return None;
            }
            if let Some(k) = st.queue.pop_front() {
                st.dirty.remove(&k);
                st.processing.insert(k.clone());
                let m = &mut st.metrics;
                m.start_times.insert(k.clone(), now);
                if let Some(t) = m.add_times.remove(&k) {
                    m.queue_duration
                        .observe(now.saturating_duration_since(t).as_secs_f64());
                }
                return Some(k);
            }
            if st.shutting_down && st.processing.is_empty() {
                return None;
            }
            let next = st.waiting.peek().map(|w| w.ready_at);
            st.idle += 1;
            st = match next {
                Some(t) => {
                    let timeout = t.saturating_duration_since(now);
                    self.ready
                        .wait_timeout(st, timeout)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0)
                }
                None => self.ready.wait(st).unwrap_or_else(|e| e.into_inner()),
            };
            st.idle -= 1;
        }
    }

    /// Mark `k` as processed; if it was added again meanwhile it goes back on the queue.
    pub fn done(&self, k: &K) {
        let now = (self.clock)();
        let mut st = lock(&self.state);
        if let Some(t) = st.metrics.start_times.remove(k) {
            st.metrics
                .work_duration
                .observe(now.saturating_duration_since(t).as_secs_f64());
        }
        st.processing.remove(k);
        if st.dirty.contains(k) {
            st.queue.push_back(k.clone());
            self.wake_one(&st);
        } else if st.processing.is_empty() {
            // Idle workers only need waking to exit (shutting down with nothing in flight);
            // waking all of them whenever the last key finishes made every idle worker of a
            // busy queue run for nothing.
            if st.shutting_down {
                self.ready.notify_all();
            }
            if st.queue.is_empty() {
                self.drained.notify_all();
            }
        }
    }

    /// Number of keys waiting to be handed out (not counting delayed or in-flight keys).
    pub fn len(&self) -> usize {
        let now = (self.clock)();
        let mut st = lock(&self.state);
        self.promote(&mut st, now);
        st.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn shutting_down(&self) -> bool {
        lock(&self.state).shutting_down
    }

    fn begin_shutdown(&self, st: &mut State<K>, drain: bool) {
        st.shutting_down = true;
        st.drain = drain;
        st.waiting.clear();
        st.waiting_by_key.clear();
        self.ready.notify_all();
        self.drained.notify_all();
    }

    /// Ignore further adds and make every `get` return None at once.
    pub fn shut_down(&self) {
        let mut st = lock(&self.state);
        self.begin_shutdown(&mut st, false);
    }

    /// Ignore further adds, let workers take the keys still queued, and block until all of
    /// them are done. Delayed keys are dropped. A later `shut_down` cuts the wait short.
    pub fn shut_down_with_drain(&self) {
        let mut st = lock(&self.state);
        self.begin_shutdown(&mut st, true);
        while st.drain && !(st.queue.is_empty() && st.processing.is_empty()) {
            st = self.drained.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    pub fn stats(&self) -> QueueStats {
        let now = (self.clock)();
        let mut st = lock(&self.state);
        self.promote(&mut st, now);
        let (mut total, mut longest) = (0.0f64, 0.0f64);
        for t in st.metrics.start_times.values() {
            let age = now.saturating_duration_since(*t).as_secs_f64();
            total += age;
            longest = longest.max(age);
        }
        QueueStats {
            name: self.name.clone(),
            adds_total: st.metrics.adds,
            depth: st.dirty.len(),
            retries_total: st.metrics.retries,
            queue_duration: st.metrics.queue_duration.clone(),
            work_duration: st.metrics.work_duration.clone(),
            unfinished_work_seconds: total,
            longest_running_processor_seconds: longest,
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> crate::metrics::QueueMetrics for WorkQueue<K> {
    fn queue_stats(&self) -> QueueStats {
        self.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering as AtOrd};
    use std::thread;

    const MS: Duration = Duration::from_millis(1);

    struct FakeClock(Mutex<Instant>);
    impl FakeClock {
        fn new() -> Arc<Self> {
            Arc::new(FakeClock(Mutex::new(Instant::now())))
        }
        fn advance(&self, d: Duration) {
            *self.0.lock().unwrap() += d;
        }
        fn now(&self) -> Instant {
            *self.0.lock().unwrap()
        }
    }

    fn fake_queue(name: &str) -> (Arc<WorkQueue<String>>, Arc<FakeClock>) {
        let clock = FakeClock::new();
        let c = clock.clone();
        let q = WorkQueue::with_clock(
            name,
            default_controller_rate_limiter(),
            Arc::new(move || c.now()),
        );
        (q, clock)
    }

    fn s(x: &str) -> String {
        x.to_string()
    }

    #[test]
    fn dedup_and_fifo() {
        let q = WorkQueue::new("t");
        q.add(s("a"));
        q.add(s("b"));
        q.add(s("a"));
        assert_eq!(q.len(), 2);
        assert_eq!(q.get(), Some(s("a")));
        assert_eq!(q.get(), Some(s("b")));
        assert!(q.is_empty());
        let st = q.stats();
        assert_eq!(st.adds_total, 2);
        assert_eq!(st.depth, 0);
        assert_eq!(st.queue_duration.count, 2);
        q.done(&s("a"));
        q.done(&s("b"));
        assert_eq!(q.stats().work_duration.count, 2);
    }

    #[test]
    fn re_add_while_processing_requeues_on_done() {
        let q = WorkQueue::new("t");
        q.add(s("a"));
        assert_eq!(q.get(), Some(s("a")));
        q.add(s("a"));
        q.add(s("a"));
        // Dirty but not queued: nobody else may take it.
        assert_eq!(q.len(), 0);
        assert_eq!(q.stats().depth, 1);
        q.done(&s("a"));
        assert_eq!(q.len(), 1);
        assert_eq!(q.get(), Some(s("a")));
        q.done(&s("a"));
        assert_eq!(q.len(), 0);
        assert_eq!(q.stats().adds_total, 2);
    }

    #[test]
    fn never_processed_concurrently() {
        let q: Arc<WorkQueue<String>> = WorkQueue::new("t");
        let in_flight = Arc::new(Mutex::new(HashSet::new()));
        let processed = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (q, in_flight, processed) = (q.clone(), in_flight.clone(), processed.clone());
                thread::spawn(move || {
                    while let Some(k) = q.get() {
                        assert!(in_flight.lock().unwrap().insert(k.clone()), "{k} twice");
                        thread::yield_now();
                        assert!(in_flight.lock().unwrap().remove(&k));
                        processed.fetch_add(1, AtOrd::SeqCst);
                        q.done(&k);
                    }
                })
            })
            .collect();
        let producers: Vec<_> = (0..3)
            .map(|p| {
                let q = q.clone();
                thread::spawn(move || {
                    for i in 0..2000 {
                        q.add(format!("k{}", (i * 7 + p) % 5));
                        if i % 100 == 0 {
                            thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        q.shut_down_with_drain();
        for w in workers {
            w.join().unwrap();
        }
        assert!(processed.load(AtOrd::SeqCst) >= 5);
        assert!(in_flight.lock().unwrap().is_empty());
        let st = q.stats();
        assert_eq!(st.depth, 0);
        assert_eq!(
            st.queue_duration.count,
            processed.load(AtOrd::SeqCst) as u64
        );
    }

    #[test]
    fn add_after_orders_by_time() {
        let (q, clock) = fake_queue("t");
        q.add_after(s("a"), 30 * MS);
        q.add_after(s("b"), 10 * MS);
        q.add_after(s("c"), 20 * MS);
        assert_eq!(q.len(), 0);
        clock.advance(25 * MS);
        assert_eq!(q.len(), 2);
        assert_eq!(q.get(), Some(s("b")));
        assert_eq!(q.get(), Some(s("c")));
        clock.advance(5 * MS);
        assert_eq!(q.get(), Some(s("a")));
        assert_eq!(q.stats().retries_total, 3);
    }

    #[test]
    fn add_after_earlier_wins_later_ignored() {
        let (q, clock) = fake_queue("t");
        q.add_after(s("a"), 50 * MS);
        q.add_after(s("a"), 10 * MS); // moves earlier
        q.add_after(s("b"), 10 * MS);
        q.add_after(s("b"), 50 * MS); // ignored
        clock.advance(10 * MS);
        assert_eq!(q.len(), 2);
        assert_eq!(q.get(), Some(s("a")));
        assert_eq!(q.get(), Some(s("b")));
        q.done(&s("a"));
        q.done(&s("b"));
        // The superseded entry for "a" must not fire again.
        clock.advance(100 * MS);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn an_event_queues_a_key_in_backoff_at_once() {
        let (q, clock) = fake_queue("t");
        // "a" failed 14 times before: its next retry waits 5 ms * 2^14 = 82 s.
        for _ in 0..14 {
            lock(&q.limiter).when(&s("a"));
        }
        q.add_rate_limited(s("a"));
        assert_eq!(q.num_requeues(&s("a")), 15);
        clock.advance(1000 * MS);
        assert_eq!(q.len(), 0);
        // A new event for it (the watch, a re-list) does not wait for the backoff.
        q.add(s("a"));
        assert_eq!(q.len(), 1);
        assert_eq!(q.get(), Some(s("a")));
        q.forget(&s("a"));
        q.done(&s("a"));
        assert_eq!(q.num_requeues(&s("a")), 0);
    }

    #[test]
    fn add_after_zero_is_add_and_dedups_with_queue() {
        let (q, clock) = fake_queue("t");
        q.add_after(s("a"), Duration::ZERO);
        assert_eq!(q.len(), 1);
        q.add_after(s("a"), 10 * MS);
        clock.advance(10 * MS);
        assert_eq!(q.len(), 1, "due key already queued: dedup");
        assert_eq!(q.stats().adds_total, 1);
    }

    #[test]
    fn blocked_get_wakes_for_delayed_key() {
        let q: Arc<WorkQueue<String>> = WorkQueue::new("t");
        let q2 = q.clone();
        let h = thread::spawn(move || q2.get());
        q.add_after(s("late"), 20 * MS);
        assert_eq!(h.join().unwrap(), Some(s("late")));
    }

    #[test]
    fn exponential_arithmetic() {
        let mut rl = ItemExponential::new(5 * MS, Duration::from_secs(1000));
        let k = s("k");
        let got: Vec<_> = (0..5).map(|_| rl.when(&k)).collect();
        assert_eq!(got, vec![5 * MS, 10 * MS, 20 * MS, 40 * MS, 80 * MS]);
        assert_eq!(rl.num_requeues(&k), 5);
        assert_eq!(rl.when(&s("other")), 5 * MS);
        rl.forget(&k);
        assert_eq!(rl.num_requeues(&k), 0);
        assert_eq!(rl.when(&k), 5 * MS);
        // Cap and overflow safety.
        for _ in 0..100 {
            rl.when(&k);
        }
        assert_eq!(rl.when(&k), Duration::from_secs(1000));
        assert_eq!(
            exponential_backoff(5 * MS, Duration::from_secs(1000), u32::MAX),
            Duration::from_secs(1000)
        );
        assert_eq!(
            exponential_backoff(Duration::from_secs(1), Duration::MAX, 70),
            Duration::MAX
        );
        // 2^18 * 5ms = 1310.72s > 1000s
        assert_eq!(
            exponential_backoff(5 * MS, Duration::from_secs(1000), 17),
            Duration::from_nanos(655_360_000_000)
        );
        assert_eq!(
            exponential_backoff(5 * MS, Duration::from_secs(1000), 18),
            Duration::from_secs(1000)
        );
    }

    #[test]
    fn token_bucket_burst_then_spacing() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10.0, 100);
        for _ in 0..100 {
            assert_eq!(b.reserve_at(t0), Duration::ZERO);
        }
        assert_eq!(b.reserve_at(t0), 100 * MS);
        assert_eq!(b.reserve_at(t0), 200 * MS);
        // 300 ms later the debt of 2 tokens is repaid and one more token accrued.
        assert_eq!(b.reserve_at(t0 + 300 * MS), Duration::ZERO);
        assert_eq!(b.reserve_at(t0 + 300 * MS), 100 * MS);
        // Steady state: one token per 100 ms.
        let mut b = TokenBucket::new(10.0, 1);
        assert_eq!(b.reserve_at(t0), Duration::ZERO);
        assert_eq!(b.reserve_at(t0 + 100 * MS), Duration::ZERO);
        assert_eq!(b.reserve_at(t0 + 150 * MS), 50 * MS);
        // A long idle time refills only up to the burst.
        let mut b = TokenBucket::new(10.0, 2);
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(b.reserve_at(later), Duration::ZERO);
        assert_eq!(b.reserve_at(later), Duration::ZERO);
        assert_eq!(b.reserve_at(later), 100 * MS);
    }

    #[test]
    fn token_bucket_unlimited() {
        let t0 = Instant::now();
        for qps in [0.0, -1.0, f64::INFINITY, f64::NAN] {
            let mut b = TokenBucket::new(qps, 0);
            assert!(b.unlimited());
            for _ in 0..1000 {
                assert_eq!(b.reserve_at(t0), Duration::ZERO);
            }
        }
    }

    #[test]
    fn max_of_and_queue_rate_limiting() {
        let mut rl: MaxOf<String> = MaxOf::new(vec![
            Box::new(ItemExponential::new(5 * MS, Duration::from_secs(1000))),
            Box::new(Bucket::new(10.0, 100)),
        ]);
        let k = s("k");
        assert_eq!(rl.when(&k), 5 * MS);
        assert_eq!(rl.when(&k), 10 * MS);
        assert_eq!(rl.num_requeues(&k), 2);
        rl.forget(&k);
        assert_eq!(rl.num_requeues(&k), 0);

        let (q, clock) = fake_queue("t");
        q.add_rate_limited(s("x"));
        q.add_rate_limited(s("x"));
        assert_eq!(q.num_requeues(&s("x")), 2);
        assert_eq!(q.len(), 0);
        clock.advance(5 * MS);
        assert_eq!(q.len(), 1);
        q.forget(&s("x"));
        assert_eq!(q.num_requeues(&s("x")), 0);
    }

    #[test]
    fn shutdown_wakes_blocked_getters() {
        let q: Arc<WorkQueue<String>> = WorkQueue::new("t");
        let getters: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                thread::spawn(move || q.get())
            })
            .collect();
        q.add_after(s("never"), Duration::from_secs(3600));
        q.shut_down();
        for g in getters {
            assert_eq!(g.join().unwrap(), None);
        }
        q.add(s("a"));
        assert_eq!(q.len(), 0);
        assert_eq!(q.get(), None);
    }

    #[test]
    fn shutdown_without_drain_stops_handing_out() {
        let q = WorkQueue::new("t");
        q.add(s("a"));
        q.shut_down();
        assert_eq!(q.get(), None);
        assert!(q.shutting_down());
    }

    #[test]
    fn drain_hands_out_remaining_and_waits_for_done() {
        let q: Arc<WorkQueue<String>> = WorkQueue::new("t");
        q.add(s("a"));
        q.add(s("b"));
        assert_eq!(q.get(), Some(s("a")));
        q.add(s("a")); // dirty while in flight: must come back after done
        q.add_after(s("delayed"), Duration::from_secs(3600));
        let q2 = q.clone();
        let drainer = thread::spawn(move || q2.shut_down_with_drain());
        while !q.shutting_down() {
            thread::yield_now();
        }
        q.add(s("c")); // ignored: shutting down
        assert_eq!(q.get(), Some(s("b")));
        q.done(&s("b"));
        // "a" is still in flight, so the drain cannot have finished.
        assert!(!drainer.is_finished());
        q.done(&s("a"));
        assert_eq!(q.get(), Some(s("a")));
        q.done(&s("a"));
        assert_eq!(q.get(), None);
        drainer.join().unwrap();
        assert_eq!(q.get(), None);
    }

    #[test]
    fn drain_getter_waits_for_in_flight_requeue() {
        let q: Arc<WorkQueue<String>> = WorkQueue::new("t");
        q.add(s("a"));
        assert_eq!(q.get(), Some(s("a")));
        q.add(s("a"));
        let q2 = q.clone();
        let drainer = thread::spawn(move || q2.shut_down_with_drain());
        while !q.shutting_down() {
            thread::yield_now();
        }
        // Another worker asks while "a" is in flight: it must block, then get "a".
        let q3 = q.clone();
        let getter = thread::spawn(move || q3.get());
        q.done(&s("a"));
        let got = getter.join().unwrap();
        assert_eq!(got, Some(s("a")));
        q.done(&s("a"));
        drainer.join().unwrap();
    }

    #[test]
    fn shut_down_cuts_drain_short() {
        let q: Arc<WorkQueue<String>> = WorkQueue::new("t");
        q.add(s("a"));
        assert_eq!(q.get(), Some(s("a")));
        let q2 = q.clone();
        let drainer = thread::spawn(move || q2.shut_down_with_drain());
        while !q.shutting_down() {
            thread::yield_now();
        }
        q.shut_down();
        drainer.join().unwrap();
    }

    #[test]
    fn stats_unfinished_work_with_fake_clock() {
        let (q, clock) = fake_queue("deployment");
        q.add(s("a"));
        q.add(s("b"));
        clock.advance(2 * MS);
        assert_eq!(q.get(), Some(s("a")));
        clock.advance(Duration::from_secs(3));
        assert_eq!(q.get(), Some(s("b")));
        clock.advance(Duration::from_secs(1));
        let st = q.stats();
        assert_eq!(st.name, "deployment");
        assert!((st.unfinished_work_seconds - 5.0).abs() < 1e-9);
        assert!((st.longest_running_processor_seconds - 4.0).abs() < 1e-9);
        // a waited 2 ms (<= 1e-2 bucket), b 3.002 s (<= 10 bucket only).
        let qd = &st.queue_duration;
        assert_eq!(qd.count, 2);
        assert_eq!(qd.buckets[6], (1e-2, 1));
        assert_eq!(qd.buckets[8], (1.0, 1));
        assert_eq!(qd.buckets[9], (10.0, 2));
        q.done(&s("a"));
        let st = q.stats();
        assert_eq!(st.work_duration.count, 1);
        assert!((st.work_duration.sum - 4.0).abs() < 1e-9);
        assert!((st.unfinished_work_seconds - 1.0).abs() < 1e-9);
    }
}
