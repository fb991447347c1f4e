//! (temporary stand-in)
use std::time::{Duration, Instant};
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
            burst: burst as f64,
            tokens: burst as f64,
            last: None,
        }
    }
    pub fn reserve_at(&mut self, now: Instant) -> Duration {
        if self.qps <= 0.0 {
            return Duration::ZERO;
        }
        if let Some(l) = self.last {
            self.tokens = (self.tokens + now.saturating_duration_since(l).as_secs_f64() * self.qps)
                .min(self.burst);
        }
        self.last = Some(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

// Stand-in workqueue with the agreed interface (replaced by the full implementation).
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
pub struct WorkQueue<K> {
    m: Mutex<(VecDeque<K>, HashSet<K>, HashSet<K>, bool)>,
    cv: Condvar,
}
impl<K: Clone + Eq + std::hash::Hash + Send + 'static> WorkQueue<K> {
    pub fn new(_name: &str) -> Arc<Self> {
        Arc::new(WorkQueue {
            m: Mutex::new((VecDeque::new(), HashSet::new(), HashSet::new(), false)),
            cv: Condvar::new(),
        })
    }
    pub fn add(&self, k: K) {
        let mut g = self.m.lock().unwrap_or_else(|p| p.into_inner());
        if g.3 || g.1.contains(&k) {
            return;
        }
        g.1.insert(k.clone());
        if !g.2.contains(&k) {
            g.0.push_back(k);
            self.cv.notify_one();
        }
    }
    pub fn add_after(self: &Arc<Self>, k: K, d: Duration) {
        if d.is_zero() {
            self.add(k);
            return;
        }
        let q = self.clone();
        std::thread::spawn(move || {
            std::thread::sleep(d);
            q.add(k);
        });
    }
    pub fn add_rate_limited(self: &Arc<Self>, k: K) {
        self.add_after(k, Duration::from_millis(50));
    }
    pub fn forget(&self, _k: &K) {}
    pub fn get(&self) -> Option<K> {
        let mut g = self.m.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(k) = g.0.pop_front() {
                g.1.remove(&k);
                g.2.insert(k.clone());
                return Some(k);
            }
            if g.3 {
                return None;
            }
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
    pub fn done(&self, k: &K) {
        let mut g = self.m.lock().unwrap_or_else(|p| p.into_inner());
        g.2.remove(k);
        if g.1.contains(k) {
            g.0.push_back(k.clone());
            self.cv.notify_one();
        }
    }
    pub fn shut_down(&self) {
        self.m.lock().unwrap_or_else(|p| p.into_inner()).3 = true;
        self.cv.notify_all();
    }
    pub fn len(&self) -> usize {
        self.m.lock().unwrap_or_else(|p| p.into_inner()).0.len()
    }
}
