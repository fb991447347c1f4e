//! The history and the watchers: every write is committed here (a new resourceVersion, the
//! object stored or removed, the event kept for replays and handed to the watchers of its
//! kind), and lists and watches read the past from here.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::mpsc::channel;
use std::sync::Arc;

use super::{key_of, EvType, Event, Key, Kind, State, WatchStart, Watcher};
use crate::meta::{meta_mut, rv_of, ApiError};

impl State {
    /// The objects of a kind as they were at resourceVersion `at` (rebuilt from the history).
    pub fn snapshot(&self, kind: &Kind, at: u64) -> Result<BTreeMap<Key, Arc<Value>>, ApiError> {
        let mut map = self.objects.get(kind).cloned().unwrap_or_default();
        if at >= self.rv {
            return Ok(map);
        }
        if at < self.compacted {
            return Err(ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. \
                 You can start a new list without the continue parameter.",
            ));
        }
        for ev in self.history.iter().rev() {
            if ev.rv <= at {
                break;
            }
            if ev.kind != *kind {
                continue;
            }
            let key = key_of(kind, &ev.obj);
            match (&ev.typ, &ev.old) {
                (EvType::Added, _) => {
                    map.remove(&key);
                }
                (_, Some(old)) => {
                    map.insert(key, old.clone());
                }
                (_, None) => {}
            }
        }
        Ok(map)
    }

    pub(super) fn commit(
        &mut self,
        kind: &Kind,
        typ: EvType,
        mut obj: Value,
        old: Option<Arc<Value>>,
    ) -> Arc<Value> {
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let obj = Arc::new(obj);
        let key = key_of(kind, &obj);
        let objs = self.objects.entry(*kind).or_default();
        if typ == EvType::Deleted {
            objs.remove(&key);
        } else {
            objs.insert(key, obj.clone());
        }
        let ev = Arc::new(Event {
            rv: self.rv,
            kind: *kind,
            typ,
            obj: obj.clone(),
            old,
        });
        self.history.push_back(ev.clone());
        while self.history.len() > self.window {
            if let Some(e) = self.history.pop_front() {
                self.compacted = e.rv;
            }
        }
        self.watchers
            .retain(|w| w.kind != *kind || w.tx.send(ev.clone()).is_ok());
        obj
    }

    /// Forget the history: every resourceVersion below the current one becomes too old.
    pub fn expire_history(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// Close every watch (their channels disconnect).
    pub fn drop_watchers(&mut self) {
        self.watchers.clear();
    }

    /// Start a watch. `from = None` means "send the current objects as ADDED first"; otherwise
    /// the events after `from` are replayed from the history (410 when they are gone).
    pub fn watch(
        &mut self,
        kind: &Kind,
        ns: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let initial: Vec<Arc<Event>> = match from {
            None => self
                .iter_kind(kind, ns)
                .map(|o| {
                    Arc::new(Event {
                        rv: rv_of(o),
                        kind: *kind,
                        typ: EvType::Added,
                        obj: o.clone(),
                        old: None,
                    })
                })
                .collect(),
            Some(rv) => {
                if rv < self.compacted {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        self.compacted
                    )));
                }
                self.history
                    .iter()
                    .filter(|e| e.rv > rv && e.kind == *kind)
                    .cloned()
                    .collect()
            }
        };
        let (tx, rx) = channel();
        self.watchers.push(Watcher { kind: *kind, tx });
        Ok((initial, rx))
    }
}
