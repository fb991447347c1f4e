//! Back at once after an outage: one readiness probe for every reflector that waits.
//!
//! A reflector whose list or watch failed waits out its backoff (client-go's, 0.8 s doubling to
//! 30 s): after an apiserver restart, or a starting apiserver that refuses requests with 403
//! while its RBAC warms up, that wait could last up to 30 s after the server was ready again.
//! Now a waiting reflector also waits on its server's [`Gate`]: while any reflector waits
//! because the server was unreachable or unavailable, one probe per server (`GET /readyz`,
//! every [`INTERVAL`], one at a time however many wait, each within [`TIMEOUT`]) runs as a
//! task on the watch threads; when it finds the server ready after seeing it down, it releases
//! every waiting reflector at once (their waits end; their backoffs go on). With
//! nothing waiting, nothing probes. The backoff stays the upper bound of every wait.
//!
//! A `/readyz` of 200 can come while requests are still refused for a moment (RBAC warming
//! up): for [`WARM`] after the server came back, each successful probe releases again whoever
//! failed since (so at most once per `INTERVAL`). A reflector is released at most
//! [`MAX_RELEASES`] times in one run of failures, after which only its backoff counts: a
//! resource that fails on a ready server (an aggregated API that is down) is never retried
//! faster than its backoff for long.
//!
//! The decisions are [`Decide`]'s (pure, the time passed in), the waiting is `wait`'s.

use crate::api::client::Client;
use futures_lite::future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// Between the starts of two probes.
pub const INTERVAL: Duration = Duration::from_millis(500);
/// A probe's own deadline (connect, TLS, the answer's head).
pub const TIMEOUT: Duration = Duration::from_secs(2);
/// After the server came back, how long successful probes release the reflectors that
/// failed again (a 403 while RBAC warms up).
pub const WARM: Duration = Duration::from_secs(5);
/// Releases of one reflector in one run of failures.
pub const MAX_RELEASES: u32 = 10;

/// Why a reflector waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The server was not reached, or answered that it cannot serve (5xx, 429).
    Down,
    /// The server refused the request (a 403 while its RBAC warms up, any other 4xx).
    Refused,
}

impl Cause {
    pub fn of(e: &crate::error::Error) -> Cause {
        if e.is_transient() {
            Cause::Down
        } else {
            Cause::Refused
        }
    }
}

/// What the prober does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Probe,
    /// Nothing to probe for: the prober ends (the next waiter for a down server starts one).
    Stop,
}

/// The prober's decisions for one server.
#[derive(Debug, Default)]
pub struct Decide {
    down: usize,
    refused: usize,
    /// A prober task runs.
    running: bool,
    /// The server was seen down (a probe failed, or a reflector found it down) since the
    /// last release. Kept when the prober stops: while a starting apiserver holds every
    /// list unanswered nothing waits, and the refusals (403) that follow need the probe.
    down_seen: bool,
    /// When a probe last found the server ready after it was seen down.
    back_at: Option<Instant>,
    released_at: Option<Instant>,
}

impl Decide {
    /// A reflector starts waiting at `now`: true when a prober must be started for it.
    pub fn wait(&mut self, cause: Cause, now: Instant) -> bool {
        match cause {
            Cause::Down => {
                self.down += 1;
                self.down_seen = true;
            }
            Cause::Refused => self.refused += 1,
        }
        // Only a server seen down (or just back) is worth probing; a refusal on a server
        // that was not down is its backoff's business.
        if self.useful(now) && !self.running {
            self.running = true;
            return true;
        }
        false
    }

    fn useful(&self, now: Instant) -> bool {
        self.down > 0 || self.down_seen || self.warm(now)
    }

    /// A reflector's wait ended (its backoff ran out, it was released or stopped).
    pub fn done(&mut self, cause: Cause) {
        let n = match cause {
            Cause::Down => &mut self.down,
            Cause::Refused => &mut self.refused,
        };
        *n = n.saturating_sub(1);
    }

    pub fn waiting(&self) -> usize {
        self.down + self.refused
    }

    fn warm(&self, now: Instant) -> bool {
        self.back_at
            .is_some_and(|t| now.saturating_duration_since(t) < WARM)
    }

    /// The server is coming back: seen down since the last release, or released within
    /// `WARM`.
    pub fn recovering(&self, now: Instant) -> bool {
        self.down_seen || self.warm(now)
    }

    /// Before each probe: probe while someone waits and the server is (or was just) down.
    pub fn next(&mut self, now: Instant) -> Step {
        if self.waiting() > 0 && self.useful(now) {
            return Step::Probe;
        }
        self.running = false;
        Step::Stop
    }

    /// A probe's result: true when every waiting reflector is to be released now.
    pub fn probed(&mut self, ready: bool, now: Instant) -> bool {
        if !ready {
            self.down_seen = true;
            return false;
        }
        let spaced = self
            .released_at
            .is_none_or(|t| now.saturating_duration_since(t) >= INTERVAL);
        let release = if self.down_seen {
            self.back_at = Some(now);
            true
        } else {
            self.warm(now) && spaced && self.waiting() > 0
        };
        if release {
            self.down_seen = false;
            self.released_at = Some(now);
        }
        release
    }
}

/// The waiting reflectors of one server and its prober.
#[derive(Default)]
struct Gate {
    decide: Mutex<Decide>,
    /// Counts releases: a waiter that saw it change was released.
    releases: AtomicU64,
    wakers: Mutex<Vec<(u64, Waker)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The gate of the server at `base` (one per server URL for the life of the process).
fn gate(base: &str) -> Arc<Gate> {
    static GATES: Mutex<Vec<(String, Arc<Gate>)>> = Mutex::new(Vec::new());
    let mut gates = lock(&GATES);
    if let Some((_, g)) = gates.iter().find(|(b, _)| b == base) {
        return g.clone();
    }
    let g = Arc::new(Gate::default());
    gates.push((base.to_string(), g.clone()));
    g
}

impl Gate {
    fn release(&self) -> usize {
        self.releases.fetch_add(1, Ordering::SeqCst);
        let woken = std::mem::take(&mut *lock(&self.wakers));
        let n = woken.len();
        for (_, w) in woken {
            w.wake();
        }
        n
    }
}

/// One reflector's place at the gate, given up when dropped.
struct Waiting {
    gate: Arc<Gate>,
    id: u64,
    cause: Cause,
    seen: u64,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        lock(&self.gate.decide).done(self.cause);
        lock(&self.gate.wakers).retain(|(id, _)| *id != self.id);
    }
}

impl Waiting {
    fn released(&self) -> bool {
        self.gate.releases.load(Ordering::SeqCst) != self.seen
    }

    async fn until_released(&self) {
        future::poll_fn(|cx| {
            if self.released() {
                return Poll::Ready(());
            }
            {
                let mut wakers = lock(&self.gate.wakers);
                match wakers.iter_mut().find(|(id, _)| *id == self.id) {
                    Some((_, w)) => w.clone_from(cx.waker()),
                    None => wakers.push((self.id, cx.waker().clone())),
                }
            }
            // Released between the check and the registration: its wake found no waker.
            if self.released() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

/// Wait `backoff`, or less when the probe finds the server ready again: true when released.
/// Run on the watch threads (the prober is a task there).
pub async fn wait(client: &Client, cause: Cause, backoff: Duration) -> bool {
    static IDS: AtomicU64 = AtomicU64::new(0);
    let gate = gate(client.base_url());
    let me = Waiting {
        seen: gate.releases.load(Ordering::SeqCst),
        id: IDS.fetch_add(1, Ordering::Relaxed),
        cause,
        gate: gate.clone(),
    };
    if lock(&gate.decide).wait(cause, Instant::now()) {
        crate::runtime::reactor::spawn(probe(gate, client.clone())).detach();
    }
    let timer = async {
        async_io::Timer::after(backoff).await;
        false
    };
    future::or(timer, async {
        me.until_released().await;
        true
    })
    .await
}

/// Whether `client`'s server is coming back after it was seen down (`Decide::recovering`).
pub fn recovering(client: &Client) -> bool {
    lock(&gate(client.base_url()).decide).recovering(Instant::now())
}

/// The prober: one `GET /readyz` every `INTERVAL` while `Decide` says so.
async fn probe(gate: Arc<Gate>, client: Client) {
    let mut down_since: Option<Instant> = None;
    loop {
        if lock(&gate.decide).next(Instant::now()) == Step::Stop {
            return;
        }
        let started = Instant::now();
        let ready = client.ready_async(TIMEOUT).await;
        if !ready {
            down_since.get_or_insert(started);
        }
        if lock(&gate.decide).probed(ready, Instant::now()) {
            let n = gate.release();
            match down_since.take() {
                Some(t) => log::info!(
                    "{} is ready again (not ready for {:.1}s): {n} waiting caches retry now",
                    client.base_url(),
                    t.elapsed().as_secs_f64()
                ),
                None => log::debug!(
                    "{} is ready: {n} waiting caches retry now",
                    client.base_url()
                ),
            }
        }
        async_io::Timer::at(started + INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn nothing_waits_nothing_probes() {
        let mut d = Decide::default();
        let t = Instant::now();
        assert_eq!(d.next(t), Step::Stop);
        // A refusal alone starts no prober: its backoff decides.
        assert!(!d.wait(Cause::Refused, t));
        assert!(!d.running);
        // A server seen down does, once however many wait.
        assert!(d.wait(Cause::Down, t));
        assert!(!d.wait(Cause::Down, t));
        assert!(!d.wait(Cause::Down, t));
        assert_eq!(d.next(t), Step::Probe);
        // Every wait ended on its own: the prober stops, and the next waiter starts one.
        for c in [Cause::Down, Cause::Down, Cause::Down, Cause::Refused] {
            d.done(c);
        }
        assert_eq!(d.waiting(), 0);
        assert_eq!(d.next(t), Step::Stop);
        assert!(!d.running);
        assert!(d.wait(Cause::Down, t));
    }

    #[test]
    fn released_when_ready_after_down_not_before() {
        let mut d = Decide::default();
        let t = Instant::now();
        assert!(d.wait(Cause::Down, t));
        // Down for a while: every probe fails, nobody is released, probing goes on.
        for i in 0..10 {
            assert_eq!(d.next(t + ms(500 * i)), Step::Probe);
            assert!(!d.probed(false, t + ms(500 * i)));
        }
        // Ready: everybody at once.
        assert_eq!(d.next(t + ms(5000)), Step::Probe);
        assert!(d.probed(true, t + ms(5000)));
        // The reflector's wait ended; with nobody waiting the prober ends.
        d.done(Cause::Down);
        assert_eq!(d.next(t + ms(5500)), Step::Stop);
    }

    #[test]
    fn a_server_found_down_by_a_reflector_is_released_on_the_first_ready_probe() {
        // The apiserver restarted faster than the first probe: the reflector saw it down.
        let mut d = Decide::default();
        let t = Instant::now();
        assert!(d.wait(Cause::Down, t));
        assert_eq!(d.next(t), Step::Probe);
        assert!(d.probed(true, t));
    }

    #[test]
    fn refusals_after_an_outage_start_the_prober_again() {
        // Down: probed; then every list hangs on the starting apiserver (nobody waits) and
        // the prober ends; then the lists are refused (403, RBAC warming up).
        let mut d = Decide::default();
        let t = Instant::now();
        assert!(d.wait(Cause::Down, t));
        assert!(!d.probed(false, t));
        d.done(Cause::Down);
        assert_eq!(d.next(t + ms(500)), Step::Stop);
        assert!(d.wait(Cause::Refused, t + ms(3000)), "seen down: probe");
        assert_eq!(d.next(t + ms(3000)), Step::Probe);
        assert!(d.probed(true, t + ms(3000)));
    }

    #[test]
    fn recovering_from_seen_down_until_warm_is_over() {
        let mut d = Decide::default();
        let t = Instant::now();
        assert!(!d.recovering(t));
        d.wait(Cause::Down, t);
        assert!(d.recovering(t));
        assert!(d.probed(true, t + ms(500)));
        assert!(d.recovering(t + ms(500) + WARM - ms(1)));
        assert!(!d.recovering(t + ms(500) + WARM));
    }

    #[test]
    fn refusals_on_a_ready_server_are_not_released() {
        // A refused reflector while the prober runs for another that found the server down.
        let mut d = Decide::default();
        let t = Instant::now();
        d.wait(Cause::Refused, t);
        assert!(d.wait(Cause::Down, t));
        assert!(!d.probed(false, t));
        assert!(d.probed(true, t + ms(500)));
        d.done(Cause::Down);
        // Long after the server came back: the refusal is its backoff's business.
        let later = t + WARM + ms(1000);
        assert_eq!(d.next(later), Step::Stop);
        assert!(!d.probed(true, later));
    }

    #[test]
    fn while_warming_up_releases_again_at_most_once_an_interval() {
        let mut d = Decide::default();
        let t = Instant::now();
        assert!(d.wait(Cause::Down, t));
        assert!(!d.probed(false, t));
        assert!(d.probed(true, t + ms(500)));
        d.done(Cause::Down);
        // Released, it is refused (403: RBAC warming up) and waits again.
        d.wait(Cause::Refused, t);
        assert_eq!(d.next(t + ms(600)), Step::Probe, "warm: probing goes on");
        assert!(!d.probed(true, t + ms(700)), "not sooner than an interval");
        assert!(d.probed(true, t + ms(1000)));
        d.done(Cause::Refused);
        d.wait(Cause::Refused, t);
        assert!(!d.probed(true, t + ms(1400)));
        assert!(d.probed(true, t + ms(1500)));
        // Once warm is over, only the backoff.
        let cold = t + ms(500) + WARM;
        assert!(!d.probed(true, cold));
        assert_eq!(d.next(cold), Step::Stop);
    }

    #[test]
    fn down_again_after_a_release_is_released_again() {
        let mut d = Decide::default();
        let t = Instant::now();
        assert!(d.wait(Cause::Down, t));
        assert!(d.probed(true, t));
        d.done(Cause::Down);
        // Failed again at once (connection reset): released by the next ready probe.
        assert!(!d.wait(Cause::Down, t), "the prober still runs");
        assert_eq!(d.next(t + ms(500)), Step::Probe);
        assert!(d.probed(true, t + ms(500)));
    }

    #[test]
    fn a_waiter_is_released_by_the_prober_and_not_otherwise() {
        use crate::sandbox::{Sandbox, SandboxOptions};
        let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
        let cfg = crate::api::kubeconfig::RestConfig {
            server: sb.url(),
            source: "test".into(),
            ..Default::default()
        };
        let client = Client::new(&cfg, 0.0, 1, "ready-test").expect("client");
        // A refusal on a ready server waits its whole backoff.
        let c = client.clone();
        let t0 = Instant::now();
        let released = futures_lite::future::block_on(crate::runtime::reactor::spawn(async move {
            wait(&c, Cause::Refused, ms(300)).await
        }));
        assert!(!released);
        assert!(t0.elapsed() >= ms(300));
        // A server seen down that answers /readyz: released by the first probe, long before
        // the backoff.
        let t0 = Instant::now();
        let released = futures_lite::future::block_on(crate::runtime::reactor::spawn(async move {
            wait(&client, Cause::Down, Duration::from_secs(20)).await
        }));
        assert!(released);
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
}
