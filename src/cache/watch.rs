//! What a reader of the cache watches: a kind, optionally scoped by a field selector, and
//! what of each object it reads.

use crate::api::Kind;

/// What a controller watches, and whether it needs whole objects or only metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch {
    pub kind: Kind,
    /// A field selector scoping the informer (e.g. one well-known name); "" for all objects.
    pub field_selector: &'static str,
    pub metadata_only: bool,
    /// Beyond metadata, the only parts (JSON pointers) this controller reads; None for the
    /// whole object. A shared informer keeps the union of what its readers ask for, so an
    /// object cached this way is a partial copy: never write it back whole.
    pub fields: Option<&'static [&'static str]>,
}

impl Watch {
    pub const fn full(kind: Kind) -> Self {
        Watch {
            kind,
            field_selector: "",
            metadata_only: false,
            fields: None,
        }
    }
    pub const fn named(kind: Kind, field_selector: &'static str) -> Self {
        Watch {
            kind,
            field_selector,
            metadata_only: false,
            fields: None,
        }
    }
    /// Metadata and the parts at `fields` (JSON pointers, e.g. `/status`).
    pub const fn fields(kind: Kind, fields: &'static [&'static str]) -> Self {
        Watch {
            kind,
            field_selector: "",
            metadata_only: false,
            fields: Some(fields),
        }
    }
}
