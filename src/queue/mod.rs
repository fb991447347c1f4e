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
//! Workers either block in `get` (a condition variable), or are started on demand: with
//! `set_on_ready`, the queue calls back whenever a key becomes available (delayed keys are
//! brought in by the shared timer thread, `crate::runtime::timer`), and workers take keys with the
//! non-blocking `try_get` (see `crate::runtime::workers`).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

mod ratelimit;

use crate::metrics::{Histogram, QueueStats, DURATION_BUCKETS};
pub use ratelimit::{
    default_controller_rate_limiter, Bucket, ItemExponential, MaxOf, RateLimiter, TokenBucket,
};

struct Metrics<K> {
    adds: u64,
    retries: u64,
    add_times: HashMap<K, Instant>,
    start_times: HashMap<K, Instant>,
    queue_duration: Histogram,
    work_duration: Histogram,
}

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
    /// A key was queued under this lock: call `on_ready` once it is released.
    kick: bool,
    /// The latest time of the keys delayed before `on_ready` was set (no timer of their own).
    unarmed_until: Option<Instant>,
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
    /// Called (outside the lock) whenever a key became available; see `set_on_ready`.
    on_ready: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// This queue, for the timers of delayed keys.
    me: Weak<Self>,
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
        let q = Arc::new_cyclic(|me| WorkQueue {
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
                kick: false,
                unarmed_until: None,
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
            on_ready: OnceLock::new(),
            me: me.clone(),
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

    /// Have `f` called whenever a key becomes available to `try_get` (queued by `add`, due
    /// after `add_after`, back after `done`), outside the queue's lock. Delayed keys are then
    /// brought in on time by the timer thread. Set once; later calls are ignored. If keys are
    /// queued already, `f` is called at once.
    pub fn set_on_ready(&self, f: impl Fn() + Send + Sync + 'static) {
        if self.on_ready.set(Box::new(f)).is_err() {
            return;
        }
        let mut st = lock(&self.state);
        // Keys delayed before now (e.g. from a cache's first list) have no timer of their
        // own: one chain of timers brings them in, each at its time.
        st.unarmed_until = st.waiting.iter().map(|w| w.ready_at).max();
        if let Some(t) = st.waiting.peek().map(|w| w.ready_at) {
            self.poke_unarmed_at(t);
        }
        st.kick = !st.queue.is_empty();
        self.release(st);
    }

    /// Bring in the due keys of those delayed before `on_ready` was set, then wait for the
    /// next of them (see `set_on_ready`).
    fn poke_unarmed_at(&self, t: Instant) {
        let me = self.me.clone();
        crate::runtime::timer::at(t, move || {
            let Some(q) = me.upgrade() else { return };
            let now = (q.clock)();
            let mut st = lock(&q.state);
            q.promote(&mut st, now);
            let next = st.waiting.peek().map(|w| w.ready_at);
            match (next, st.unarmed_until) {
                (Some(next), Some(until)) if next <= until && !st.shutting_down => {
                    q.poke_unarmed_at(next);
                }
                _ => st.unarmed_until = None,
            }
            q.release(st);
        });
    }

    /// Release the lock, then tell `on_ready` if a key was queued under it.
    fn release(&self, mut st: MutexGuard<'_, State<K>>) {
        let kick = std::mem::take(&mut st.kick);
        drop(st);
        if kick {
            if let Some(f) = self.on_ready.get() {
                f();
            }
        }
    }

    /// With `on_ready` set: bring delayed keys in at `t`.
    fn poke_at(&self, t: Instant) {
        if self.on_ready.get().is_none() {
            return;
        }
        let me = self.me.clone();
        crate::runtime::timer::at(t, move || {
            if let Some(q) = me.upgrade() {
                q.poke();
            }
        });
    }

    /// Move due delayed keys onto the queue (and tell `on_ready`).
    pub fn poke(&self) {
        let now = (self.clock)();
        let mut st = lock(&self.state);
        self.promote(&mut st, now);
        self.release(st);
    }

    /// Mark `k` as needing processing.
    pub fn add(&self, k: K) {
        let now = (self.clock)();
        let mut st = lock(&self.state);
        self.promote(&mut st, now);
        self.add_locked(&mut st, k, now);
        self.release(st);
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
        st.kick = true;
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
            self.release(st);
            return;
        }
        let Some(ready_at) = now.checked_add(d) else {
            // Beyond the representable future: it would never fire.
            self.release(st);
            return;
        };
        if let Some((t, _)) = st.waiting_by_key.get(&k) {
            if *t <= ready_at {
                self.release(st);
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
        self.poke_at(ready_at);
        self.release(st);
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

    /// Hand out a key if one is available now (see `get`); `done(key)` must follow. None when
    /// none is, or after `shut_down` (or after `shut_down_with_drain` once drained).
    pub fn try_get(&self) -> Option<K> {
        let now = (self.clock)();
        let mut st = lock(&self.state);
        self.promote(&mut st, now);
        if st.shutting_down && !st.drain {
            return None;
        }
        let k = self.take_locked(&mut st, now);
        // Keys promoted above and still queued may want another worker.
        st.kick &= !st.queue.is_empty();
        self.release(st);
        k
    }

    fn take_locked(&self, st: &mut State<K>, now: Instant) -> Option<K> {
        let k = st.queue.pop_front()?;
        st.dirty.remove(&k);
        st.processing.insert(k.clone());
        let m = &mut st.metrics;
        m.start_times.insert(k.clone(), now);
        if let Some(t) = m.add_times.remove(&k) {
            m.queue_duration
                .observe(now.saturating_duration_since(t).as_secs_f64());
        }
        Some(k)
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
            if let Some(k) = self.take_locked(&mut st, now) {
                st.kick = false;
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
            st.kick = true;
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
        self.release(st);
    }

    /// Number of keys waiting to be handed out (not counting delayed or in-flight keys).
    pub fn len(&self) -> usize {
        let now = (self.clock)();
        let mut st = lock(&self.state);
        self.promote(&mut st, now);
        let n = st.queue.len();
        self.release(st);
        n
    }

    /// Whether a key waits to be handed out now, without bringing in due delayed keys (the
    /// timer does that) and without calling `on_ready`.
    pub fn has_queued(&self) -> bool {
        !lock(&self.state).queue.is_empty()
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
        let stats = QueueStats {
            name: self.name.clone(),
            adds_total: st.metrics.adds,
            depth: st.dirty.len(),
            retries_total: st.metrics.retries,
            queue_duration: st.metrics.queue_duration.clone(),
            work_duration: st.metrics.work_duration.clone(),
            unfinished_work_seconds: total,
            longest_running_processor_seconds: longest,
        };
        self.release(st);
        stats
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> crate::runtime::workers::KeyQueue<K> for WorkQueue<K> {
    fn set_on_ready(&self, f: Box<dyn Fn() + Send + Sync>) {
        WorkQueue::set_on_ready(self, f)
    }
    fn try_get(&self) -> Option<K> {
        WorkQueue::try_get(self)
    }
    fn add_after(&self, k: K, d: Duration) {
        WorkQueue::add_after(self, k, d)
    }
    fn done(&self, k: &K) {
        WorkQueue::done(self, k)
    }
    fn has_queued(&self) -> bool {
        WorkQueue::has_queued(self)
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> crate::metrics::QueueMetrics for WorkQueue<K> {
    fn queue_stats(&self) -> QueueStats {
        self.stats()
    }
}

#[cfg(test)]
mod tests;
