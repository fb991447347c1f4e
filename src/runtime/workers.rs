//! The worker loop, once for every controller: the keys of a work queue are handled on helper
//! threads (`crate::runtime::pool`), at most `limit` at a time (a `--concurrent-*-syncs` value).
//!
//! No thread waits on an empty queue: when a key becomes available the queue calls back
//! (`WorkQueue::set_on_ready`), a helper is put to work if fewer than `limit` are, and it
//! takes keys until none is left. Delayed keys are brought in by the timer thread. An idle
//! controller therefore holds no thread, and helpers that finished are shared by all
//! controllers (they end after a while without work).

use std::hash::Hash;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// What workers take keys from: a work queue (`crate::queue::WorkQueue`, client-go's
/// semantics). The runtime names only this, so the queue can be built on the runtime's timer.
pub trait KeyQueue<K>: Send + Sync {
    /// `f` is called whenever a key becomes available.
    fn set_on_ready(&self, f: Box<dyn Fn() + Send + Sync>);
    /// A key to handle now, if any, without waiting.
    fn try_get(&self) -> Option<K>;
    /// Queue `k` again after `d`.
    fn add_after(&self, k: K, d: Duration);
    /// `k` has been handled.
    fn done(&self, k: &K);
    /// Whether a key waits to be taken.
    fn has_queued(&self) -> bool;
}

struct State {
    running: usize,
    stopped: bool,
}

/// Workers of one queue (see the module docs).
pub struct Workers<K> {
    name: String,
    queue: Arc<dyn KeyQueue<K>>,
    limit: usize,
    handle: Box<dyn Fn(&K) + Send + Sync>,
    state: Mutex<State>,
    finished: Condvar,
    me: Weak<Self>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<K: Clone + Eq + Hash + Send + 'static> Workers<K> {
    /// Start serving `queue`: each key it hands out goes to `handle`, then `done`. `handle`
    /// decides about retries (`forget`, `add_rate_limited`, `add_after`). Keys already queued
    /// are taken at once.
    pub fn start(
        name: &str,
        queue: Arc<dyn KeyQueue<K>>,
        limit: usize,
        handle: impl Fn(&K) + Send + Sync + 'static,
    ) -> Arc<Self> {
        let w = Arc::new_cyclic(|me| Workers {
            name: name.to_string(),
            queue: queue.clone(),
            limit: limit.max(1),
            handle: Box::new(handle),
            state: Mutex::new(State {
                running: 0,
                stopped: false,
            }),
            finished: Condvar::new(),
            me: me.clone(),
        });
        let weak = Arc::downgrade(&w);
        queue.set_on_ready(Box::new(move || {
            if let Some(w) = weak.upgrade() {
                w.kick();
            }
        }));
        w
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Workers busy now.
    pub fn running(&self) -> usize {
        lock(&self.state).running
    }

    /// A key is available: put one more helper to work, unless `limit` are at work already
    /// (one of them will take it).
    fn kick(&self) {
        {
            let mut st = lock(&self.state);
            if st.stopped || st.running >= self.limit {
                return;
            }
            st.running += 1;
        }
        let Some(me) = self.me.upgrade() else {
            self.leave();
            return;
        };
        if !crate::runtime::pool::spawn(move || me.run()) {
            log::error!("{}: cannot start a worker thread", self.name);
            self.leave();
        }
    }

    fn leave(&self) {
        let mut st = lock(&self.state);
        st.running -= 1;
        if st.running == 0 {
            self.finished.notify_all();
        }
    }

    fn run(&self) {
        loop {
            while let Some(k) = self.queue.try_get() {
                if panic::catch_unwind(AssertUnwindSafe(|| (self.handle)(&k))).is_err() {
                    log::error!("{}: a worker panicked; the key is retried later", self.name);
                    self.queue.add_after(k.clone(), Duration::from_secs(1));
                }
                self.queue.done(&k);
                if lock(&self.state).stopped {
                    break;
                }
            }
            let mut st = lock(&self.state);
            // A key queued after the last `try_get` whose kick found `limit` workers at work
            // (this one included) is this worker's to take. Checked under the lock `kick`
            // takes, so either the kick starts a worker or this check sees the key.
            if !st.stopped && self.queue.has_queued() {
                continue;
            }
            st.running -= 1;
            if st.running == 0 {
                self.finished.notify_all();
            }
            return;
        }
    }

    /// Take no more keys; the ones in hand are finished.
    pub fn stop(&self) {
        lock(&self.state).stopped = true;
    }

    /// Wait until no worker is at work, or `until`; true if none is.
    pub fn wait(&self, until: Instant) -> bool {
        let mut st = lock(&self.state);
        while st.running > 0 {
            let now = Instant::now();
            if now >= until {
                return false;
            }
            st = self
                .finished
                .wait_timeout(st, until - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::WorkQueue;
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_key_is_handled_with_at_most_limit_at_once() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new("");
        let (now, peak, seen) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(Mutex::new(HashSet::new())),
        );
        let (n2, p2, s2) = (now.clone(), peak.clone(), seen.clone());
        let w = Workers::start("t", q.clone(), 3, move |k: &u32| {
            let c = n2.fetch_add(1, Ordering::SeqCst) + 1;
            p2.fetch_max(c, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(2));
            lock(&s2).insert(*k);
            n2.fetch_sub(1, Ordering::SeqCst);
        });
        for k in 0..200 {
            q.add(k);
            if k % 50 == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let end = Instant::now() + Duration::from_secs(20);
        while lock(&seen).len() < 200 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(lock(&seen).len(), 200);
        assert!(peak.load(Ordering::SeqCst) <= 3);
        assert!(w.wait(Instant::now() + Duration::from_secs(5)));
        assert_eq!(w.running(), 0);
    }

    #[test]
    fn delayed_and_retried_keys_come_back_without_a_waiting_thread() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new("");
        let (tx, rx) = std::sync::mpsc::channel();
        let tries = Arc::new(AtomicUsize::new(0));
        let (q2, t2) = (q.clone(), tries.clone());
        let _w = Workers::start("t", q.clone(), 2, move |k: &u32| {
            if t2.fetch_add(1, Ordering::SeqCst) < 2 {
                q2.add_rate_limited(*k);
            } else {
                let _ = tx.send(*k);
            }
        });
        q.add_after(7, Duration::from_millis(30));
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(7));
        assert_eq!(tries.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn keys_queued_before_the_start_are_taken() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new("");
        q.add(1);
        q.add(2);
        let (tx, rx) = std::sync::mpsc::channel();
        let _w = Workers::start("t", q, 1, move |k: &u32| {
            let _ = tx.send(*k);
        });
        let mut got = vec![
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        ];
        got.sort();
        assert_eq!(got, vec![1, 2]);
    }

    #[test]
    fn stop_waits_for_the_key_in_hand_only() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new("");
        let handled = Arc::new(AtomicUsize::new(0));
        let h2 = handled.clone();
        let w = Workers::start("t", q.clone(), 1, move |_k: &u32| {
            std::thread::sleep(Duration::from_millis(50));
            h2.fetch_add(1, Ordering::SeqCst);
        });
        for k in 0..10 {
            q.add(k);
        }
        std::thread::sleep(Duration::from_millis(20));
        w.stop();
        q.shut_down();
        assert!(w.wait(Instant::now() + Duration::from_secs(5)));
        assert_eq!(handled.load(Ordering::SeqCst), 1);
    }
}
