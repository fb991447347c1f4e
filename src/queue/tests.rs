//! Tests of the queue (dedup, one worker per key, delayed adds, shutdown and drain), its rate
//! limiters and its stats, most with a fake clock.

use super::ratelimit::exponential_backoff;
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
fn token_bucket_low_priority_waits_for_the_waiting() {
    let t0 = Instant::now();
    // 10 a second, burst 1: a worker takes the token at t0.
    let mut b = TokenBucket::new(10.0, 1);
    assert_eq!(b.reserve_at(t0), Duration::ZERO);
    // An event finds no whole token: nothing taken, try again when one would be there.
    assert_eq!(b.take_idle_at(t0), Err(100 * MS));
    // A worker asking meanwhile reserves the next token (at t0 + 100 ms) ...
    assert_eq!(b.reserve_at(t0 + 10 * MS), 90 * MS);
    // ... so when the event tries again at t0 + 100 ms that token is the worker's.
    assert_eq!(b.take_idle_at(t0 + 100 * MS), Err(100 * MS));
    // Nobody else waits: the event gets the next one, and leaves no debt behind it.
    assert_eq!(b.take_idle_at(t0 + 200 * MS), Ok(()));
    assert_eq!(b.take_idle_at(t0 + 250 * MS), Err(50 * MS));
    assert_eq!(b.reserve_at(t0 + 300 * MS), Duration::ZERO);
    // Idle: events drain at the bucket's rate, after its burst.
    let mut b = TokenBucket::new(10.0, 3);
    let mut at = t0;
    let mut sent = 0;
    while sent < 6 {
        match b.take_idle_at(at) {
            Ok(()) => sent += 1,
            Err(wait) => at += wait,
        }
    }
    assert_eq!(at, t0 + 300 * MS);
    // Unlimited: always.
    let mut b = TokenBucket::new(0.0, 0);
    assert_eq!(b.reserve_at(t0), Duration::ZERO);
    assert_eq!(b.take_idle_at(t0), Ok(()));
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

/// Keys delayed before the workers were attached (a cache's first list with a batch period)
/// each come in at their time, not only the earliest: the later ones used to wait for an
/// unrelated add, forever on an idle cluster.
#[test]
fn keys_delayed_before_on_ready_all_come_in() {
    let q: Arc<WorkQueue<String>> = WorkQueue::new("");
    q.add_after(s("a"), 20 * MS);
    q.add_after(s("b"), 40 * MS);
    q.add_after(s("c"), 60 * MS);
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(tx);
    let weak = Arc::downgrade(&q);
    q.set_on_ready(move || {
        let Some(q) = weak.upgrade() else { return };
        while let Some(k) = q.try_get() {
            q.done(&k);
            let _ = tx.lock().unwrap().send(k);
        }
    });
    let got: Vec<String> = (0..3)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(10))
                .expect("every key comes in")
        })
        .collect();
    assert_eq!(got, vec![s("a"), s("b"), s("c")]);
}

#[test]
fn token_bucket_wait_takes_nothing() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(10.0, 1);
    assert_eq!(b.wait_at(t0), Duration::ZERO);
    assert_eq!(b.take_idle_at(t0), Ok(()));
    assert_eq!(b.wait_at(t0), 100 * MS);
    assert_eq!(b.wait_at(t0 + 40 * MS), 60 * MS);
    assert_eq!(b.wait_at(t0 + 40 * MS), 60 * MS, "asking takes nothing");
    assert_eq!(b.wait_at(t0 + 100 * MS), Duration::ZERO);
    // An earlier time than the last refills nothing.
    assert_eq!(b.take_idle_at(t0 + 100 * MS), Ok(()));
    assert_eq!(b.take_idle_at(t0), Err(100 * MS));
    assert!(TokenBucket::new(0.0, 0).wait_at(t0).is_zero());
}
