//! Compact object storage for one kind, with the indexes controllers need.
//!
//! Objects are keyed `ns/name` (or `name`) in a `BTreeMap`, so a namespace is a range scan and
//! no separate namespace index is needed. Objects are shared by `Arc`; `managedFields` is
//! dropped on the way in.

use crate::obj::{self, Obj};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaKind {
    Added,
    Updated,
    Deleted,
}

/// One change seen by the cache, handed to event handlers.
///
/// `new` is the object as the cache now holds it; for a deletion `old` is the object as the
/// DELETED event showed it. For an update `old` carries only `apiVersion`, `kind` and
/// `metadata` of the previous version (labels, owner references, UID, deletion state,
/// finalizers: what handlers compare): decoding whole previous versions was a tenth of the
/// informers' CPU.
#[derive(Debug, Clone)]
pub struct Delta {
    pub kind: DeltaKind,
    pub old: Option<Obj>,
    pub new: Option<Obj>,
}

impl Delta {
    /// The object as it is now (or as it was last seen, for a deletion).
    pub fn object(&self) -> &Obj {
        match (&self.new, &self.old) {
            (Some(o), _) | (None, Some(o)) => o,
            (None, None) => unreachable_empty(),
        }
    }
}

fn unreachable_empty() -> &'static Obj {
    static EMPTY: std::sync::OnceLock<Obj> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| Arc::new(Value::Null))
}

/// One stored object: its compact JSON text, plus what the indexes and version checks read,
/// so that neither needs to decode it. A decoded `serde_json::Value` costs about twelve times
/// its text (every small map is a B-tree node of ~630 bytes); readers decode on demand.
#[derive(Clone)]
struct Entry {
    json: Arc<str>,
    uid: Box<str>,
    resource_version: Box<str>,
    /// UIDs named in ownerReferences; the controller's first when there is one.
    owners: Box<[Box<str>]>,
    controlled: bool,
}

impl Entry {
    fn pack(o: &Value) -> Entry {
        let mut refs: Vec<(bool, Box<str>)> = obj::owner_ref_views(o)
            .map(|r| (r.controller, r.uid.into()))
            .collect();
        // The controller's first (a stable sort keeps the order otherwise).
        crate::sort::sort_by_key(&mut refs[..], |(controller, _)| !controller);
        let controlled = refs.first().is_some_and(|(c, _)| *c);
        let owners: Vec<Box<str>> = refs.into_iter().map(|(_, uid)| uid).collect();
        Entry {
            json: serde_json::to_string(o).unwrap_or_default().into(),
            uid: obj::uid(o).into(),
            resource_version: obj::resource_version(o).into(),
            owners: owners.into_boxed_slice(),
            controlled,
        }
    }

    /// The stored text, to decode once the lock is released.
    fn text(&self) -> Text {
        Text(self.json.clone())
    }

    fn controller_uid(&self) -> Option<&str> {
        self.controlled
            .then(|| self.owners.first().map(|u| &**u))
            .flatten()
    }

    fn rv_number(&self) -> Option<u64> {
        self.resource_version.parse().ok()
    }
}

/// A stored object's text, decoded outside the store's lock.
#[derive(Clone)]
struct Text(Arc<str>);

impl Text {
    fn decode(&self) -> Option<Obj> {
        self.decode_as(None)
    }

    /// The previous version for a `Delta`: metadata only.
    fn decode_metadata(&self) -> Option<Obj> {
        self.decode_as(Some(&[]))
    }

    fn decode_as(&self, fields: Option<&[&str]>) -> Option<Obj> {
        match crate::api::trim::from_str(&self.0, fields) {
            Ok(v) => Some(Arc::new(v)),
            Err(e) => {
                log::error!("cache: a stored object does not decode: {e}");
                None
            }
        }
    }
}

/// Listed objects packed as the list's pages arrive, for `Store::replace_staged`.
#[derive(Default)]
pub struct Staged(Inner);

impl Staged {
    /// Pack a page of objects decoded in the store's shape (the page is dropped after).
    pub fn add(&mut self, items: Vec<Value>) {
        for o in items {
            if obj::name(&o).is_empty() {
                log::warn!("cache: skipping a listed object without metadata.name");
                continue;
            }
            self.0.put(obj::key(&o), Entry::pack(&o));
        }
    }

    /// Forget what was packed (a list started afresh).
    pub fn clear(&mut self) {
        self.0 = Inner::default();
    }
}

/// A change found by `Store::replace_staged`, still as stored text.
pub struct Change {
    kind: DeltaKind,
    old: Option<Text>,
    new: Option<Text>,
}

impl Change {
    /// The `Delta` handed to handlers: a deletion carries the whole last state, an update
    /// the previous metadata only. None when the stored text does not decode (logged).
    pub fn into_delta(self) -> Option<Delta> {
        let old = match (&self.kind, &self.old) {
            (DeltaKind::Deleted, Some(t)) => Some(t.decode()?),
            (_, Some(t)) => Some(t.decode_metadata()?),
            (_, None) => None,
        };
        let new = match &self.new {
            Some(t) => Some(t.decode()?),
            None => None,
        };
        Some(Delta {
            kind: self.kind,
            old,
            new,
        })
    }
}

fn decode_all(texts: Vec<Text>) -> Vec<Obj> {
    texts.iter().filter_map(Text::decode).collect()
}

#[derive(Default)]
struct Inner {
    objects: BTreeMap<String, Entry>,
    /// owner UID -> keys of dependents naming it in ownerReferences.
    by_owner: HashMap<Box<str>, BTreeSet<String>>,
    /// Keys of objects with no controller reference: the orphans a controller may adopt.
    uncontrolled: BTreeSet<String>,
    resource_version: String,
    /// key -> UID of objects we deleted ourselves whose DELETED event has not come yet: a late
    /// event about them must not bring them back (unless it shows them terminating).
    tombstones: HashMap<String, Box<str>>,
    /// key -> what was stored before our own writes (`observe_write`) whose watch event has
    /// not come yet (None: nothing was). That event is handed to the handlers as the change
    /// from it, as it would be without the write: the other controllers sharing the store
    /// see an update by one of ours as an update (and a create as an add), not as nothing.
    before_write: HashMap<String, Option<Text>>,
}

/// Tombstones are dropped wholesale past this many (their DELETED events went missing);
/// so are the states before our own writes.
const MAX_TOMBSTONES: usize = 4096;

impl Inner {
    fn index(&mut self, key: &str, e: &Entry) {
        if !e.controlled {
            self.uncontrolled.insert(key.to_string());
        }
        for uid in e.owners.iter() {
            self.by_owner
                .entry(uid.clone())
                .or_default()
                .insert(key.to_string());
        }
    }
    fn unindex(&mut self, key: &str, e: &Entry) {
        self.uncontrolled.remove(key);
        for uid in e.owners.iter() {
            if let Some(set) = self.by_owner.get_mut(uid) {
                set.remove(key);
                if set.is_empty() {
                    self.by_owner.remove(uid);
                }
            }
        }
    }
    fn put(&mut self, key: String, e: Entry) -> Option<Entry> {
        let old = self.objects.remove(&key);
        if let Some(old) = &old {
            self.unindex(&key, old);
        }
        self.index(&key, &e);
        self.objects.insert(key, e);
        old
    }
    fn take(&mut self, key: &str) -> Option<Entry> {
        self.before_write.remove(key);
        let old = self.objects.remove(key)?;
        self.unindex(key, &old);
        Some(old)
    }
}

#[derive(Default)]
pub struct Store {
    inner: RwLock<Inner>,
    /// The parts kept beyond metadata (JSON pointers); None keeps whole objects.
    projection: RwLock<Option<Arc<[&'static str]>>>,
    /// The last decodes of `get_fields_shared`.
    memo: super::memo::Memo,
    /// Answers to our own writes, for their watch events (`observe_write_held`).
    held: super::echo::Held,
}

/// Parse a resourceVersion for ordering; unparsable ones compare as "unknown" (None).
fn rv_number(o: &Value) -> Option<u64> {
    obj::resource_version(o).parse().ok()
}

impl Store {
    pub fn new() -> Self {
        Store::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Keep only metadata and these parts of objects from now on (None: whole objects).
    pub fn set_projection(&self, fields: Option<Vec<&'static str>>) {
        *self.projection.write().unwrap_or_else(|p| p.into_inner()) = fields.map(Arc::from);
        self.held.clear();
    }

    /// A watch takes the objects of events echoing our writes from here from now on.
    pub fn hold_echoes(&self) {
        self.held.want();
    }

    /// The parts kept beyond metadata; None for whole objects.
    pub fn projection(&self) -> Option<Arc<[&'static str]>> {
        self.projection
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Shape an object for storage: what nothing reads is dropped.
    fn shape(&self, o: &mut Value) {
        obj::compact(o);
        if let Some(keep) = self.projection() {
            obj::project(o, &keep);
        }
    }

    pub fn get(&self, key: &str) -> Option<Obj> {
        let text = self.read().objects.get(key)?.text();
        text.decode()
    }

    pub fn get_in(&self, ns: &str, name: &str) -> Option<Obj> {
        self.get(&obj::make_key(ns, name))
    }

    /// The stored object's `apiVersion`, `kind` and `metadata` only: enough to check labels
    /// and owner references before decoding the whole object.
    pub fn get_metadata_in(&self, ns: &str, name: &str) -> Option<Obj> {
        let text = self.read().objects.get(&obj::make_key(ns, name))?.text();
        text.decode_metadata()
    }

    /// The stored object's metadata and the parts at `fields` (JSON pointers) only.
    pub fn get_fields(&self, key: &str, fields: &[&str]) -> Option<Obj> {
        let text = self.read().objects.get(key)?.text();
        text.decode_as(Some(fields))
    }

    /// As `get_fields`, for readers that decode the same objects again within moments (both
    /// Service controllers reading a Service's pods): an unchanged object decoded with the
    /// same fields a moment ago is handed out again (`memo`).
    pub fn get_fields_shared(&self, key: &str, fields: &'static [&'static str]) -> Option<Obj> {
        let text = self.read().objects.get(key)?.text();
        self.memo
            .get_or_decode(&text.0, fields, || text.decode_as(Some(fields)))
    }

    /// The stored object's UID, without decoding it.
    pub fn uid_of(&self, key: &str) -> Option<String> {
        self.read().objects.get(key).map(|e| e.uid.to_string())
    }

    pub fn len(&self) -> usize {
        self.read().objects.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn list(&self) -> Vec<Obj> {
        let texts = self.read().objects.values().map(Entry::text).collect();
        decode_all(texts)
    }

    /// Every object, decoded one at a time and handed to `f`, which keeps what it reads of
    /// it: a pass over many objects that needs a few facts of each holds one decoded object at
    /// a time instead of all of them (a decoded object costs about twelve times its text).
    pub fn scan<T>(&self, mut f: impl FnMut(&Value) -> Option<T>) -> Vec<T> {
        let texts: Vec<Text> = self.read().objects.values().map(Entry::text).collect();
        texts
            .iter()
            .filter_map(Text::decode)
            .filter_map(|o| f(&o))
            .collect()
    }

    /// As `scan`, each object decoded with its metadata and the parts at `fields` (JSON
    /// pointers, as `get_fields`) only: a pass that reads a few parts of many objects (a
    /// `/metrics` scrape counting pod volumes) builds none of the rest.
    pub fn scan_fields<T>(
        &self,
        fields: &[&str],
        mut f: impl FnMut(&Value) -> Option<T>,
    ) -> Vec<T> {
        let texts: Vec<Text> = self.read().objects.values().map(Entry::text).collect();
        texts
            .iter()
            .filter_map(|t| t.decode_as(Some(fields)))
            .filter_map(|o| f(&o))
            .collect()
    }

    pub fn keys(&self) -> Vec<String> {
        self.read().objects.keys().cloned().collect()
    }

    /// Every object of namespace `ns`, in name order.
    pub fn list_namespace(&self, ns: &str) -> Vec<Obj> {
        let lo = format!("{ns}/");
        let hi = format!("{ns}0"); // '0' follows '/'
        let texts = self
            .read()
            .objects
            .range(lo..hi)
            .map(|(_, e)| e.text())
            .collect();
        decode_all(texts)
    }

    /// The keys and resourceVersions of namespace `ns`, in key order (nothing decoded): for
    /// readers that keep what they derive from each object and decode only what changed.
    pub fn versions_namespace(&self, ns: &str) -> Vec<(String, Box<str>)> {
        let lo = format!("{ns}/");
        let hi = format!("{ns}0"); // '0' follows '/'
        self.read()
            .objects
            .range(lo..hi)
            .map(|(k, e)| (k.clone(), e.resource_version.clone()))
            .collect()
    }

    /// How many objects namespace `ns` holds (nothing decoded).
    pub fn count_namespace(&self, ns: &str) -> usize {
        let lo = format!("{ns}/");
        let hi = format!("{ns}0"); // '0' follows '/'
        self.read().objects.range(lo..hi).count()
    }

    /// Objects whose ownerReferences name `uid`.
    pub fn by_owner(&self, uid: &str) -> Vec<Obj> {
        let texts = {
            let g = self.read();
            g.by_owner
                .get(uid)
                .map(|keys| {
                    keys.iter()
                        .filter_map(|k| g.objects.get(k).map(Entry::text))
                        .collect()
                })
                .unwrap_or_default()
        };
        decode_all(texts)
    }

    /// The objects of namespace `ns` a controller with UID `uid` may own: those whose
    /// controller reference names it, and those with no controller reference at all that
    /// `takeable` accepts (it sees their metadata only, so that orphans the controller's
    /// selector does not match are never decoded whole). In key order; the same set as
    /// filtering `list_namespace` by controller, without the scan.
    pub fn claimable(&self, ns: &str, uid: &str, takeable: impl Fn(&Value) -> bool) -> Vec<Obj> {
        let lo = format!("{ns}/");
        let hi = format!("{ns}0"); // '0' follows '/'
        let texts: Vec<(Text, bool)> = {
            let g = self.read();
            let mut keys: BTreeSet<&String> =
                g.uncontrolled.range(lo.clone()..hi.clone()).collect();
            if let Some(owned) = g.by_owner.get(uid) {
                keys.extend(owned.range(lo..hi));
            }
            keys.into_iter()
                .filter_map(|k| g.objects.get(k))
                .filter(|e| e.controller_uid().is_none_or(|c| c == uid))
                .map(|e| (e.text(), e.controller_uid().is_none()))
                .collect()
        };
        texts
            .iter()
            .filter(|(t, orphan)| !orphan || t.decode_metadata().is_some_and(|m| takeable(&m)))
            .filter_map(|(t, _)| t.decode())
            .collect()
    }

    pub fn resource_version(&self) -> String {
        self.read().resource_version.clone()
    }

    pub fn set_resource_version(&self, rv: &str) {
        self.write().resource_version = rv.to_string();
    }

    /// Apply a watch event. Returns the delta to hand to handlers, or None when nothing changed.
    pub fn apply(&self, kind: DeltaKind, mut o: Value) -> Option<Delta> {
        self.shape(&mut o);
        self.apply_shaped(kind, o)
    }

    /// As `apply`, for an object already decoded in this store's shape (`api::trim` with
    /// `projection()`, as the reflector does): it is not shaped a second time.
    pub fn apply_shaped(&self, kind: DeltaKind, o: Value) -> Option<Delta> {
        self.apply_obj(kind, Arc::new(o))
    }

    /// As `apply_shaped`, for an object decoded already (an answer held for its echo).
    pub fn apply_obj(&self, kind: DeltaKind, o: Obj) -> Option<Delta> {
        let key = obj::key(&o);
        if obj::name(&o).is_empty() {
            log::warn!("cache: skipping an object without metadata.name");
            return None;
        }
        let rv = obj::resource_version(&o).to_string();
        // The watch echoing our own write (already stored by `observe_write`) carries the
        // same version: nothing to encode or store again, only the handlers to tell.
        let echo = |g: &Inner| {
            !rv.is_empty()
                && g.objects
                    .get(&key)
                    .is_some_and(|e| *e.resource_version == *rv)
        };
        let packed = (kind != DeltaKind::Deleted && !echo(&self.read())).then(|| Entry::pack(&o));
        let mut g = self.write();
        if !rv.is_empty() {
            g.resource_version = rv.clone();
        }
        let packed = match packed {
            None if kind != DeltaKind::Deleted && !echo(&g) => Some(Entry::pack(&o)),
            p => p,
        };
        match (kind, packed) {
            (DeltaKind::Deleted, _) => {
                g.tombstones.remove(&key);
                g.take(&key);
                Some(Delta {
                    kind: DeltaKind::Deleted,
                    old: Some(o),
                    new: None,
                })
            }
            (DeltaKind::Added | DeltaKind::Updated, packed) => {
                if g.tombstones
                    .get(&key)
                    .is_some_and(|uid| **uid == *obj::uid(&o))
                    && !obj::is_deleting(&o)
                {
                    return None;
                }
                let previous = match packed {
                    Some(packed) => {
                        // Our own newer write is already here: this event is older news.
                        if let (Some(cur), Some(new_rv)) = (g.objects.get(&key), rv_number(&o)) {
                            if cur.rv_number().is_some_and(|c| c > new_rv) {
                                return None;
                            }
                        }
                        let before = g.before_write.remove(&key);
                        let stored = g.put(key, packed).map(|e| e.text());
                        Some(before.unwrap_or(stored))
                    }
                    // The echo of our own write: the stored version is this one, the change
                    // is from what was stored before the write.
                    None => g.before_write.remove(&key),
                };
                drop(g);
                let old = match previous {
                    Some(text) => text.and_then(|t| t.decode_metadata()),
                    // An echo of a write whose former state is not known any more.
                    None => Some(o.clone()),
                };
                let kind = if old.is_some() {
                    DeltaKind::Updated
                } else {
                    DeltaKind::Added
                };
                Some(Delta {
                    kind,
                    old,
                    new: Some(o),
                })
            }
        }
    }

    /// Record the result of our own write so the next reconcile sees it before the watch
    /// delivers it. An older copy never replaces a newer one.
    pub fn observe_write(&self, mut o: Value) {
        self.shape(&mut o);
        self.observe_write_shaped(&o);
    }

    /// As `observe_write`, for an answer already decoded in this store's shape (`api::trim`
    /// with `projection()`): it is packed as it is, without a copy to shape.
    pub fn observe_write_shaped(&self, o: &Value) {
        self.observe_stored(o, None);
    }

    /// As `observe_write_shaped`, keeping the answer for the watch event that will echo it
    /// (`api::echo`) when a watch takes them (`hold_echoes`).
    pub fn observe_write_held(&self, o: &Obj) {
        self.observe_stored(o, Some(o));
    }

    /// Store our write's answer (unless the store has seen a newer version already), and
    /// hold it for its echo: before the lock is released, so that the watch cannot pass the
    /// echo before it is held.
    fn observe_stored(&self, o: &Value, hold: Option<&Obj>) {
        if obj::name(o).is_empty() {
            return;
        }
        let key = obj::key(o);
        let packed = Entry::pack(o);
        let mut g = self.write();
        if let Some(new_rv) = rv_number(o) {
            match g.objects.get(&key) {
                Some(cur) if cur.rv_number().is_some_and(|c| c >= new_rv) => return,
                Some(_) => {}
                // The watch has gone past this version and the object is not here: it was
                // deleted since (a write answered after its DELETED event must not bring
                // it back).
                None if g
                    .resource_version
                    .parse::<u64>()
                    .is_ok_and(|seen| seen >= new_rv) =>
                {
                    return
                }
                None => {}
            }
        }
        let before = g.put(key.clone(), packed).map(|e| e.text());
        if !g.before_write.contains_key(&key) {
            if g.before_write.len() >= MAX_TOMBSTONES {
                g.before_write.clear();
            }
            g.before_write.insert(key.clone(), before);
        }
        if let Some(h) = hold {
            self.held.hold(&key, obj::resource_version(o), h);
        }
    }

    /// Forget an object we deleted ourselves.
    pub fn observe_delete(&self, key: &str) {
        let mut g = self.write();
        // The watch already showed it being deleted: finalizers keep it on the server until
        // its DELETED event, so it stays (a DELETE answered after that event must not hide
        // an object that still exists).
        let deleting = g
            .objects
            .get(key)
            .and_then(|e| e.text().decode_metadata())
            .is_some_and(|o| obj::is_deleting(&o));
        if deleting {
            return;
        }
        if let Some(old) = g.take(key) {
            if g.tombstones.len() >= MAX_TOMBSTONES {
                g.tombstones.clear();
            }
            g.tombstones.insert(key.to_string(), old.uid);
        }
    }

    /// Swap the whole content atomically (after a list). Returns the deltas against the old
    /// content: objects gone (Deleted), new (Added), and an update for every other listed
    /// object, changed or not (a resync, as client-go's `Replace`).
    pub fn replace(&self, mut items: Vec<Value>, resource_version: &str) -> Vec<Delta> {
        for o in &mut items {
            self.shape(o);
        }
        self.replace_shaped(items, resource_version)
    }

    /// As `replace`, for objects already decoded in this store's shape.
    pub fn replace_shaped(&self, items: Vec<Value>, resource_version: &str) -> Vec<Delta> {
        let mut staged = Staged::default();
        staged.add(items);
        self.replace_staged(staged, resource_version)
            .into_iter()
            .filter_map(Change::into_delta)
            .collect()
    }

    /// As `replace_shaped`, for objects packed as their pages arrived (`Staged`). The
    /// changes decode the listed objects one at a time when they are handed on, so that a
    /// list never holds more than a page of decoded objects.
    pub fn replace_staged(&self, staged: Staged, resource_version: &str) -> Vec<Change> {
        let mut fresh = staged.0;
        fresh.resource_version = resource_version.to_string();
        let listed: Vec<String> = fresh.objects.keys().cloned().collect();
        let mut g = self.write();
        let old = std::mem::replace(&mut *g, fresh);
        // A list answered from a snapshot older than our own writes (`observe_write`) does
        // not undo them: an object stored here at a newer version than the list's stays as
        // it is (present in the list or created after its snapshot); the watch from the
        // list's version brings what happened to it since.
        let mut kept = Vec::new();
        if let Ok(list_rv) = resource_version.parse::<u64>() {
            for (k, e) in &old.objects {
                let Some(rv) = e.rv_number().filter(|rv| *rv > list_rv) else {
                    continue;
                };
                if g.objects
                    .get(k)
                    .is_none_or(|n| n.rv_number().is_some_and(|n| n < rv))
                {
                    g.put(k.clone(), e.clone());
                    if let Some(before) = old.before_write.get(k) {
                        g.before_write.insert(k.clone(), before.clone());
                    }
                    kept.push(k.clone());
                }
            }
        }
        // What each listed (or kept) key holds now.
        let mut now: BTreeMap<String, Text> = listed
            .into_iter()
            .chain(kept)
            .filter_map(|k| g.objects.get(&k).map(|e| (k, e.text())))
            .collect();
        drop(g);
        let mut changes = Vec::new();
        for (k, o) in &old.objects {
            // An own write whose event had not come: the change is from the state before it
            // (absent before it: an add).
            let (o, last) = match old.before_write.get(k) {
                Some(Some(before)) => (before.clone(), o.text()),
                Some(None) => {
                    if let Some(n) = now.remove(k) {
                        changes.push(Change {
                            kind: DeltaKind::Added,
                            old: None,
                            new: Some(n),
                        });
                    }
                    continue;
                }
                None => (o.text(), o.text()),
            };
            match now.remove(k) {
                // No final state was seen: the last one known.
                None => changes.push(Change {
                    kind: DeltaKind::Deleted,
                    old: Some(last),
                    new: None,
                }),
                // Changed, or not: every listed object is handed to the handlers again, as
                // client-go's `Replace` does, so that a controller looks once more at every
                // object after a re-list (a key that failed while the server was away is not
                // left to its backoff).
                Some(n) => changes.push(Change {
                    kind: DeltaKind::Updated,
                    old: Some(o),
                    new: Some(n),
                }),
            }
        }
        changes.extend(now.into_values().map(|n| Change {
            kind: DeltaKind::Added,
            old: None,
            new: Some(n),
        }));
        changes
    }

    /// Rough bytes held (serialized size), for the cache gauges.
    pub fn approximate_bytes(&self) -> usize {
        self.read().objects.values().map(|e| e.json.len()).sum()
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;

impl crate::api::echo::EchoSource for Store {
    fn waiting(&self) -> bool {
        self.held.waiting()
    }

    fn take(&self, namespace: &str, name: &str, resource_version: &str) -> Option<Obj> {
        self.held.take(namespace, name, resource_version)
    }
}
