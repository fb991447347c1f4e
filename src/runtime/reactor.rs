//! The threads where waiting happens: one async executor, run by [`THREADS`] threads named
//! `watch`, that every informer's reflector runs on (`cache::reflector`). A watch stream
//! waiting for its next event, a backoff sleep and a list handed to a helper thread
//! (`pool::unblock`) cost a task and a timer or a socket in async-io's reactor, not a thread
//! each: a cluster with hundreds of CRDs, whose every resource the garbage collector watches,
//! keeps the same few threads.
//!
//! What runs on these threads must not block: watch events are decoded, stored and handed to
//! the controllers' handlers here (which only update indexes and add keys to queues); lists,
//! token files and anything else that waits on the network or disk go to `crate::runtime::pool`.

use std::future::Future;
use std::sync::Once;

/// Executor threads. With two, the benchmark (300 Deployments x 5) converged no faster and
/// used more CPU (ARCHITECTURE.md); the handlers' work per event is a few microseconds.
pub const THREADS: usize = 1;

/// Stack of an executor thread: event decoding (serde_json, bounded depth), TLS records and
/// the handlers, as the reflector threads had before (256 KiB), with room.
const STACK: usize = 512 * 1024;

static EXECUTOR: smol::Executor<'static> = smol::Executor::new();

std::thread_local! {
    static ON_EXECUTOR: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn start_threads() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        for _ in 0..THREADS {
            let started = std::thread::Builder::new()
                .name("watch".into())
                .stack_size(STACK)
                .spawn(|| {
                    ON_EXECUTOR.with(|c| c.set(true));
                    // `block_on` drives async-io's reactor itself while the executor is idle.
                    async_io::block_on(EXECUTOR.run(std::future::pending::<()>()));
                });
            if let Err(e) = started {
                log::error!("cannot start a watch thread: {e}");
            }
        }
    });
}

/// Run `fut` on the executor. Dropping the returned task cancels it (its sockets close).
pub fn spawn<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> smol::Task<T> {
    start_threads();
    EXECUTOR.spawn(fut)
}

/// Whether the caller runs on an executor thread (and so must not wait for a task).
pub fn on_executor() -> bool {
    ON_EXECUTOR.with(|c| c.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_run_on_the_watch_threads() {
        let t = spawn(async {
            async_io::Timer::after(std::time::Duration::from_millis(5)).await;
            (
                on_executor(),
                std::thread::current().name().map(String::from),
            )
        });
        let (on, name) = futures_lite::future::block_on(t);
        assert!(on);
        assert_eq!(name.as_deref(), Some("watch"));
        assert!(!on_executor());
    }
}
