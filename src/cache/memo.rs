//! Objects decoded moments ago, handed out again while their stored text is unchanged.
//!
//! Some readers decode the same stored objects in quick succession: a pod change has the
//! endpoints and the EndpointSlice controllers each read every pod of the Service, within
//! milliseconds of each other, and the next change of a pod of that Service has them read the
//! same unchanged pods again. A few slots keep the last decodes; a slot answers only for the
//! very text it was decoded from (the stored `Arc`, compared by address, so a changed object
//! is never answered from an older decode) and the same fields. A decoded object is shared
//! (`Obj` is an `Arc`) and never changed, so handing it to several readers is safe.
//!
//! Memory is bounded by the slot count: each holds one decoded object (a pod as the Service
//! controllers read it is a few KiB) and keeps its text alive until the slot is reused.

use crate::obj::Obj;
use std::sync::{Arc, Mutex};

/// Slots per store. Enough for the pods of the Services being synced at once by both Service
/// controllers' workers.
const SLOTS: usize = 64;

struct Slot {
    text: Arc<str>,
    fields: &'static [&'static str],
    obj: Obj,
}

/// The slots, allocated at the first decode kept: stores no reader asks this of (most of
/// them) hold none.
#[derive(Default)]
pub(super) struct Memo {
    slots: Mutex<Vec<Option<Slot>>>,
}

/// The slot of a text: by its allocation's address (blocks are at least 16-byte aligned).
fn slot_of(text: &Arc<str>) -> usize {
    let addr = (text.as_ptr() as usize >> 4) as u64;
    // Fibonacci hashing spreads neighbouring allocations over the slots (in 64 bits, so the
    // same on 32-bit targets).
    (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % SLOTS
}

impl Memo {
    /// The object decoded from `text` with `fields`, from a slot or else from `decode` (kept
    /// in the slot for the next reader).
    pub(super) fn get_or_decode(
        &self,
        text: &Arc<str>,
        fields: &'static [&'static str],
        decode: impl FnOnce() -> Option<Obj>,
    ) -> Option<Obj> {
        let i = slot_of(text);
        {
            let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(Some(s)) = slots.get(i) {
                if Arc::ptr_eq(&s.text, text) && s.fields == fields {
                    return Some(s.obj.clone());
                }
            }
        }
        let obj = decode()?;
        let slot = Slot {
            text: text.clone(),
            fields,
            obj: obj.clone(),
        };
        let before = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            if slots.is_empty() {
                slots.resize_with(SLOTS, || None);
            }
            slots[i].replace(slot)
        };
        // The decode it held is freed (when no reader holds it) after the lock is released.
        drop(before);
        Some(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::cell::Cell;

    const F: &[&str] = &["/status"];
    const G: &[&str] = &["/spec"];

    #[test]
    fn a_slot_answers_only_for_its_own_text_and_fields() {
        let memo = Memo::default();
        assert!(memo.slots.lock().unwrap().is_empty(), "no slots until used");
        let decodes = Cell::new(0);
        let decode = |v: serde_json::Value| {
            decodes.set(decodes.get() + 1);
            Some(Arc::new(v))
        };
        let a: Arc<str> = Arc::from("{\"a\":1}");
        let first = memo.get_or_decode(&a, F, || decode(json!({"a": 1})));
        let again = memo.get_or_decode(&a, F, || decode(json!({"other": 1})));
        assert_eq!(decodes.get(), 1);
        assert!(Arc::ptr_eq(
            first.as_ref().unwrap(),
            again.as_ref().unwrap()
        ));
        // Other fields of the same text: decoded, not answered from the slot.
        let g = memo.get_or_decode(&a, G, || decode(json!({"g": 1})));
        assert_eq!(g.unwrap().as_ref(), &json!({"g": 1}));
        assert_eq!(decodes.get(), 2);
        // Equal bytes in another allocation (a changed object stored anew): decoded.
        let b: Arc<str> = Arc::from("{\"a\":1}");
        let other = memo.get_or_decode(&b, F, || decode(json!({"b": 1})));
        assert_eq!(other.unwrap().as_ref(), &json!({"b": 1}));
        assert_eq!(decodes.get(), 3);
        // A failed decode keeps nothing and answers None.
        let c: Arc<str> = Arc::from("{");
        assert!(memo.get_or_decode(&c, F, || None).is_none());
        assert!(memo
            .get_or_decode(&c, F, || decode(json!({"c": 1})))
            .is_some());
        assert_eq!(decodes.get(), 4);
    }
}
