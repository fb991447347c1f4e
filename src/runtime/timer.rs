//! One thread for every delay of the process: queue keys that become due (`add_after`,
//! rate-limited retries), periodic resyncs, and anything else that must happen at a time.
//!
//! A work queue whose workers are not blocked waiting (see `crate::runtime::workers`) has nobody to
//! notice that a delayed key became due; it asks this thread to poke it then. Callbacks run on
//! the timer thread and must be quick: move a key, hand work to a helper (`crate::runtime::pool`).
//! The thread starts with the first timer and stays (one thread, a 64 KiB stack).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

type Callback = Box<dyn FnOnce() + Send + 'static>;

struct Entry {
    at: Instant,
    seq: u64,
    f: Callback,
}

// The max-heap pops the earliest `at` first (ties: in the order they were added).
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.seq == o.seq
    }
}
impl Eq for Entry {}

#[derive(Default)]
struct Timers {
    heap: Mutex<(BinaryHeap<Entry>, u64)>,
    changed: Condvar,
    started: AtomicBool,
}

fn timers() -> &'static Timers {
    static TIMERS: OnceLock<Timers> = OnceLock::new();
    TIMERS.get_or_init(Timers::default)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run `f` on the timer thread at `at` (at once if that has passed).
pub fn at(at: Instant, f: impl FnOnce() + Send + 'static) {
    let t = timers();
    {
        let mut g = lock(&t.heap);
        g.1 += 1;
        let seq = g.1;
        let earliest = g.0.peek().is_none_or(|e| at < e.at);
        g.0.push(Entry {
            at,
            seq,
            f: Box::new(f),
        });
        if earliest {
            t.changed.notify_one();
        }
    }
    if !t.started.swap(true, AtomicOrdering::SeqCst) {
        let spawned = std::thread::Builder::new()
            .name("timers".into())
            .stack_size(64 * 1024)
            .spawn(run);
        if let Err(e) = spawned {
            t.started.store(false, AtomicOrdering::SeqCst);
            log::error!("cannot start the timer thread: {e}");
        }
    }
}

/// Run `f` on the timer thread after `d`.
pub fn after(d: Duration, f: impl FnOnce() + Send + 'static) {
    match Instant::now().checked_add(d) {
        Some(when) => at(when, f),
        // Beyond the representable future: it would never fire.
        None => drop(f),
    }
}

/// Run `f` every `period` (the first time one period from now) until it returns false.
pub fn every(period: Duration, f: impl Fn() -> bool + Send + Sync + 'static) {
    if period.is_zero() {
        return;
    }
    fn again(period: Duration, f: Arc<dyn Fn() -> bool + Send + Sync>) {
        after(period, move || {
            if f() {
                again(period, f);
            }
        });
    }
    again(period, Arc::new(f));
}

fn run() {
    let t = timers();
    let mut g = lock(&t.heap);
    loop {
        let now = Instant::now();
        match g.0.peek().map(|e| e.at) {
            Some(at) if at <= now => {
                let Some(e) = g.0.pop() else { continue };
                drop(g);
                (e.f)();
                g = lock(&t.heap);
            }
            Some(at) => {
                g = t
                    .changed
                    .wait_timeout(g, at - now)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
            None => g = t.changed.wait(g).unwrap_or_else(|p| p.into_inner()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn fires_in_time_order() {
        let (tx, rx) = mpsc::channel();
        let now = Instant::now();
        for (i, ms) in [(2, 60u64), (0, 20), (1, 40)] {
            let tx = tx.clone();
            at(now + Duration::from_millis(ms), move || {
                let _ = tx.send(i);
            });
        }
        let got: Vec<i32> = (0..3)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).expect("fired"))
            .collect();
        assert_eq!(got, vec![0, 1, 2]);
        assert!(now.elapsed() >= Duration::from_millis(60));
    }

    #[test]
    fn every_repeats_until_false() {
        let (tx, rx) = mpsc::channel();
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let n2 = n.clone();
        every(Duration::from_millis(5), move || {
            let k = n2.fetch_add(1, AtomicOrdering::SeqCst) + 1;
            if k == 3 {
                let _ = tx.send(());
            }
            k < 3
        });
        rx.recv_timeout(Duration::from_secs(5)).expect("three runs");
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(n.load(AtomicOrdering::SeqCst), 3);
    }
}
