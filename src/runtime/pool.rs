//! Helper threads for running one piece of work on several threads at once (a slow-start
//! batch of creations, a namespace's deletions), kept between uses.
//!
//! Starting a thread for every batch and ending it after cost about 3 % of the benchmark's
//! CPU: a stack mapped, guarded, touched and unmapped each time, about 800 times a run. Here
//! a helper that finished waits for the next hand-off, and ends after `IDLE` without one, so an
//! idle edgekcm keeps none.
//!
//! There is no queue: every hand-off goes to an idle helper or to a new one, so work handed
//! off from inside a helper (a batch nested in a batch) can never wait behind itself.
//!
//! [`unblock`] runs one blocking call (a reflector's list) on a helper for async code on the
//! watch threads (`crate::runtime::reactor`), which must never block.

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// How long a helper waits for work before it ends.
const IDLE: Duration = Duration::from_secs(20);

/// Stack of a helper: requests, JSON and TLS records, as the request threads had.
const STACK: usize = 512 * 1024;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Where one waiting helper gets its next job.
#[derive(Default)]
struct Slot {
    job: Mutex<Option<Job>>,
    ready: Condvar,
}

#[derive(Default)]
struct Idle(Mutex<Vec<Arc<Slot>>>);

fn idle() -> &'static Idle {
    static IDLE_HELPERS: OnceLock<Idle> = OnceLock::new();
    IDLE_HELPERS.get_or_init(Idle::default)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run `job` on a helper: an idle one, or a new one. The job back if no thread could be
/// started.
fn hand_off(job: Job) -> Result<(), Job> {
    let helpers = idle();
    {
        // The idle list's lock is held while the job is placed, so a helper timing out
        // (which takes the same lock before it leaves) either is still listed and leaves,
        // or finds the job.
        let mut list = lock(&helpers.0);
        if let Some(slot) = list.pop() {
            *lock(&slot.job) = Some(job);
            slot.ready.notify_one();
            return Ok(());
        }
    }
    let slot = Arc::new(Slot::default());
    *lock(&slot.job) = Some(job);
    let theirs = slot.clone();
    match std::thread::Builder::new()
        .name("helper".into())
        .stack_size(STACK)
        .spawn(move || helper(theirs))
    {
        Ok(_) => Ok(()),
        // The thread never ran, so the job is still in its slot.
        Err(_) => lock(&slot.job).take().map_or(Ok(()), Err),
    }
}

/// Run the blocking `f` on a helper and wait for its result without blocking the caller's
/// thread (an executor thread of `crate::runtime::reactor`). Run in place when no helper can be
/// started. A panic in `f` is raised again in the caller.
pub async fn unblock<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = smol::channel::bounded(1);
    let job: Job = Box::new(move || {
        // The caller may have gone (its future dropped): then the result is dropped.
        let _ = tx.try_send(panic::catch_unwind(AssertUnwindSafe(f)));
    });
    if let Err(job) = hand_off(job) {
        log::warn!("cannot start a helper thread; running a blocking call in place");
        job();
    }
    match rx.recv().await {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => panic::resume_unwind(p),
        // Only if the job was dropped unrun, which `hand_off` does not do.
        Err(_) => panic!("a blocking call was lost"),
    }
}

/// Run `job` on a helper thread and return at once. False if no thread could be started.
pub fn spawn(job: impl FnOnce() + Send + 'static) -> bool {
    hand_off(Box::new(job)).is_ok()
}

fn helper(slot: Arc<Slot>) {
    loop {
        let job = lock(&slot.job).take();
        if let Some(job) = job {
            job();
            lock(&idle().0).push(slot.clone());
        }
        let mut held = lock(&slot.job);
        while held.is_none() {
            let (g, timeout) = slot
                .ready
                .wait_timeout(held, IDLE)
                .unwrap_or_else(|p| p.into_inner());
            held = g;
            if timeout.timed_out() && held.is_none() {
                drop(held);
                let mut list = lock(&idle().0);
                if lock(&slot.job).is_some() {
                    // Handed a job just as the wait ended.
                    break;
                }
                list.retain(|s| !Arc::ptr_eq(s, &slot));
                drop(list);
                // A helper idle this long means the load has passed: what the allocator
                // keeps cached for it goes back (static musl builds; nothing otherwise), and
                // so do the binary's cold pages (at most every 10 minutes).
                crate::runtime::heap::HEAP.release();
                crate::runtime::pageout::page_out_if_due();
                return;
            }
        }
    }
}

/// Counts helpers still running a borrowed job; the caller waits on it before the borrow ends.
struct Latch {
    left: Mutex<usize>,
    done: Condvar,
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

impl Latch {
    fn count_down(&self) {
        let mut left = lock(&self.left);
        *left -= 1;
        if *left == 0 {
            self.done.notify_all();
        }
    }

    fn wait(&self) {
        let mut left = lock(&self.left);
        while *left > 0 {
            left = self.done.wait(left).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Waits for the helpers when dropped: also when the caller's own share panicked, so no
/// helper can outlive what `work` borrows.
struct WaitOnDrop(Arc<Latch>);

impl Drop for WaitOnDrop {
    fn drop(&mut self) {
        self.0.wait();
    }
}

/// Run `work` on this thread and on up to `helpers` helper threads at once, and return when
/// every run has returned (as `std::thread::scope` would, without starting threads). `work`
/// shares its items out itself (an atomic index, say). Fewer helpers take part if threads
/// cannot be started; this thread always takes part. A panic in a helper's run is raised
/// again here.
pub fn run_on_helpers(helpers: usize, work: &(dyn Fn() + Sync)) {
    let latch = Arc::new(Latch {
        left: Mutex::new(helpers),
        done: Condvar::new(),
        panic: Mutex::new(None),
    });
    // SAFETY: the reference is only used by the jobs handed off below, and this function
    // does not return (nor unwind) before every one of them has finished with it: each job
    // counts the latch down after its last use, and `WaitOnDrop` waits for the count to reach
    // zero on every way out of this function. Jobs that were never started are counted down
    // here. So `work` outlives every use, as a scoped thread's closure would.
    let shared: &'static (dyn Fn() + Sync) =
        unsafe { std::mem::transmute::<&(dyn Fn() + Sync), &'static (dyn Fn() + Sync)>(work) };
    let guard = WaitOnDrop(latch.clone());
    for started in 0..helpers {
        let l = latch.clone();
        let job: Job = Box::new(move || {
            if let Err(p) = panic::catch_unwind(AssertUnwindSafe(shared)) {
                lock(&l.panic).get_or_insert(p);
            }
            l.count_down();
        });
        if hand_off(job).is_err() {
            log::warn!("cannot start a helper thread; going on with fewer");
            // This job and the ones not yet handed off never run.
            *lock(&latch.left) -= helpers - started;
            break;
        }
    }
    work();
    drop(guard);
    let raised = lock(&latch.panic).take();
    if let Some(p) = raised {
        panic::resume_unwind(p);
    }
}

/// Run `work(i)` for each `i` in `0..len` on up to `threads` threads: this one and helpers
/// (`pool`); inline for a single item, or when no helper can be started. A `false` from
/// `work` ends that thread's share.
pub fn for_each_parallel(len: usize, threads: usize, work: impl Fn(usize) -> bool + Sync) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let run = || loop {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if i >= len || !work(i) {
            break;
        }
    };
    let n = threads.min(len);
    if n <= 1 {
        run();
        return;
    }
    run_on_helpers(n - 1, &run);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_item_is_done_once() {
        for round in 0..20 {
            let items: Vec<usize> = (0..50).collect();
            let next = AtomicUsize::new(0);
            let sum = AtomicUsize::new(0);
            run_on_helpers(round % 6, &|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(v) = items.get(i) else { break };
                sum.fetch_add(*v, Ordering::SeqCst);
            });
            assert_eq!(sum.load(Ordering::SeqCst), (0..50).sum::<usize>());
        }
    }

    #[test]
    fn unblock_runs_elsewhere_and_returns_or_raises() {
        let caller = std::thread::current().id();
        let other =
            futures_lite::future::block_on(unblock(move || std::thread::current().id() != caller));
        assert!(other);
        let res = panic::catch_unwind(|| {
            futures_lite::future::block_on(unblock(|| -> u8 { panic!("job failed") }))
        });
        assert!(res.is_err());
    }

    #[test]
    fn nested_runs_do_not_wait_on_each_other() {
        let total = AtomicUsize::new(0);
        run_on_helpers(3, &|| {
            run_on_helpers(3, &|| {
                total.fetch_add(1, Ordering::SeqCst);
            });
        });
        assert_eq!(total.load(Ordering::SeqCst), 16);
    }

    #[test]
    fn a_panicking_helper_is_raised_in_the_caller_after_all_finished() {
        let finished = AtomicUsize::new(0);
        let caller = std::thread::current().id();
        let res = panic::catch_unwind(AssertUnwindSafe(|| {
            run_on_helpers(2, &|| {
                if std::thread::current().id() != caller {
                    std::thread::sleep(Duration::from_millis(20));
                    finished.fetch_add(1, Ordering::SeqCst);
                    panic!("helper failed");
                }
            })
        }));
        assert!(res.is_err());
        assert_eq!(finished.load(Ordering::SeqCst), 2);
    }
}
