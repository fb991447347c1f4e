//! A gate for writes, closed once at shutdown: after `close`, a client with the fence sends no
//! request but GETs, and `drain` waits for the writes already on the wire to be answered.
//! The leader closes it before it gives its Lease up, so nothing it writes can land after a
//! successor has started writing.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

#[derive(Default)]
struct State {
    closed: bool,
    in_flight: usize,
}

#[derive(Default)]
pub struct WriteFence {
    state: Mutex<State>,
    idle: Condvar,
}

/// One write let through; the fence counts it as in flight until this is dropped.
pub struct Pass<'a> {
    fence: &'a WriteFence,
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let mut st = self.fence.lock();
        st.in_flight -= 1;
        if st.in_flight == 0 {
            self.fence.idle.notify_all();
        }
    }
}

impl WriteFence {
    pub fn new() -> Arc<Self> {
        Arc::new(WriteFence::default())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Let a write through, or None once the fence is closed.
    pub fn enter(&self) -> Option<Pass<'_>> {
        let mut st = self.lock();
        if st.closed {
            return None;
        }
        st.in_flight += 1;
        Some(Pass { fence: self })
    }

    /// No write passes any more (those in flight go on).
    pub fn close(&self) {
        self.lock().closed = true;
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Writes passed and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// Wait until no write is in flight, or `until`; true if none is.
    pub fn drain(&self, until: Instant) -> bool {
        let mut st = self.lock();
        while st.in_flight > 0 {
            let now = Instant::now();
            if now >= until {
                return false;
            }
            st = match self.idle.wait_timeout(st, until - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn closed_fence_refuses_and_drain_waits_for_passes() {
        let f = WriteFence::new();
        let a = f.enter().expect("open");
        let b = f.enter().expect("open");
        assert_eq!(f.in_flight(), 2);
        f.close();
        assert!(f.is_closed());
        assert!(f.enter().is_none());
        // Still two in flight: a short drain gives up.
        assert!(!f.drain(Instant::now() + Duration::from_millis(20)));
        drop(a);
        let f2 = f.clone();
        let t = std::thread::spawn(move || f2.drain(Instant::now() + Duration::from_secs(20)));
        std::thread::sleep(Duration::from_millis(30));
        drop(b);
        assert!(t.join().unwrap());
        assert_eq!(f.in_flight(), 0);
        assert!(f.drain(Instant::now()));
    }

    #[test]
    fn a_client_with_a_closed_fence_reads_but_sends_no_write() {
        use crate::api::resources::CONFIGMAPS;
        use crate::sandbox::{Sandbox, SandboxOptions};
        use serde_json::json;

        let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
        let c = sb.client("fenced");
        let f = WriteFence::new();
        c.clone().set_fence(f.clone());
        let cm =
            |n: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}});
        c.create(&CONFIGMAPS, Some("default"), &cm("before"))
            .expect("open fence lets writes through");
        assert_eq!(f.in_flight(), 0);
        f.close();
        sb.clear_requests();
        let err = c
            .create(&CONFIGMAPS, Some("default"), &cm("after"))
            .unwrap_err();
        assert!(matches!(err, crate::Error::Cancelled), "{err}");
        c.get(&CONFIGMAPS, Some("default"), "before")
            .expect("reads go on");
        let methods: Vec<String> = sb.requests().into_iter().map(|r| r.method).collect();
        assert_eq!(methods, ["GET"]);
        // An unfenced client of the same server is not affected.
        let other = sb.client("other");
        other
            .create(&CONFIGMAPS, Some("default"), &cm("other"))
            .expect("unfenced");
    }
}
