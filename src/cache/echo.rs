//! The answers to a store's own writes, held for the watch events that echo them
//! (`api::echo`).
//!
//! Held answers are taken by their event within milliseconds; those whose event never comes
//! (the watch restarted and listed instead, or had passed their version already) go when
//! newer ones push them out. A store holds at most `HELD`.

use crate::obj::Obj;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Answers a store holds at most.
const HELD: usize = 16;

struct Answer {
    key: String,
    resource_version: Box<str>,
    object: Obj,
}

#[derive(Default)]
pub(super) struct Held {
    answers: Mutex<VecDeque<Answer>>,
    /// How many are held, read without the lock.
    count: AtomicUsize,
    /// Set once a watch takes echoes from this store; until then nothing is held.
    wanted: AtomicBool,
}

/// Whether `key` is `namespace/name` (or `name` without a namespace).
fn key_is(key: &str, namespace: &str, name: &str) -> bool {
    match namespace {
        "" => key == name,
        ns => {
            key.len() == ns.len() + 1 + name.len()
                && key.starts_with(ns)
                && key.as_bytes()[ns.len()] == b'/'
                && key.ends_with(name)
        }
    }
}

impl Held {
    pub(super) fn want(&self) {
        self.wanted.store(true, Ordering::Relaxed);
    }

    pub(super) fn waiting(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Hold the answer `object` (at `resource_version`) for the event of `key`.
    pub(super) fn hold(&self, key: &str, resource_version: &str, object: &Obj) {
        if !self.wanted.load(Ordering::Relaxed) || resource_version.is_empty() {
            return;
        }
        let pushed_out = {
            let mut a = self.answers.lock().unwrap_or_else(|p| p.into_inner());
            let out = (a.len() >= HELD).then(|| a.pop_front()).flatten();
            a.push_back(Answer {
                key: key.to_string(),
                resource_version: resource_version.into(),
                object: object.clone(),
            });
            self.count.store(a.len(), Ordering::Relaxed);
            out
        };
        // Freed after the lock is released.
        drop(pushed_out);
    }

    /// The answer held for `namespace/name` at `resource_version`, taken.
    pub(super) fn take(&self, namespace: &str, name: &str, resource_version: &str) -> Option<Obj> {
        if !self.waiting() {
            return None;
        }
        let mut a = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        let i = a.iter().position(|h| {
            *h.resource_version == *resource_version && key_is(&h.key, namespace, name)
        })?;
        let taken = a.remove(i).map(|h| h.object);
        self.count.store(a.len(), Ordering::Relaxed);
        taken
    }

    /// Drop what is held (the store was listed afresh).
    pub(super) fn clear(&self) {
        let all = {
            let mut a = self.answers.lock().unwrap_or_else(|p| p.into_inner());
            self.count.store(0, Ordering::Relaxed);
            std::mem::take(&mut *a)
        };
        drop(all);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn an_answer_is_taken_once_by_its_name_and_version() {
        let h = Held::default();
        let o: Obj = Arc::new(json!({"metadata": {"name": "p"}}));
        h.hold("ns/p", "5", &o);
        assert!(!h.waiting(), "nothing is held before a watch wants it");
        h.want();
        h.hold("ns/p", "5", &o);
        assert!(h.waiting());
        assert!(h.take("ns", "p", "4").is_none());
        assert!(h.take("n", "sp", "5").is_none());
        assert!(h.take("ns", "q", "5").is_none());
        assert!(Arc::ptr_eq(&h.take("ns", "p", "5").unwrap(), &o));
        assert!(h.take("ns", "p", "5").is_none());
        assert!(!h.waiting());
        h.hold("node-1", "9", &o);
        assert!(h.take("", "node-1", "9").is_some());
    }

    #[test]
    fn at_most_held_stay_the_newest() {
        let h = Held::default();
        h.want();
        let o: Obj = Arc::new(json!({}));
        for i in 0..HELD + 3 {
            h.hold(&format!("ns/p{i}"), "1", &o);
        }
        assert!(h.take("ns", "p0", "1").is_none());
        assert!(h.take("ns", "p2", "1").is_none());
        assert!(h.take("ns", "p3", "1").is_some());
        assert!(h.take("ns", &format!("p{}", HELD + 2), "1").is_some());
        h.clear();
        assert!(!h.waiting());
        assert!(h.take("ns", "p4", "1").is_none());
    }
}
