//! Watches: what a watch stream needs, and which event a watcher sees for a store event.

use serde_json::{json, Value};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use super::read::selectors;
use super::{accept_partial, partial, Reply};
use crate::http::Request;
use crate::meta::{namespace_of, ApiError};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::Event;
use crate::Shared;
use edgekcm::api::resources::Kind;

/// Everything a watch stream needs once the store lock is released.
pub struct WatchPlan {
    pub kind: Kind,
    pub ns: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub initial: Vec<Arc<Event>>,
    pub rx: Option<Receiver<Arc<Event>>>,
    /// A `Status` to send as the only (ERROR) event.
    pub error: Option<Value>,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
    pub partial: bool,
}

impl WatchPlan {
    fn matches(&self, obj: &Value) -> bool {
        (!self.kind.namespaced || self.ns.as_deref().is_none_or(|ns| namespace_of(obj) == ns))
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }

    /// The event a watcher should see for a store event (selectors can turn a MODIFIED into an
    /// ADDED or a DELETED), if any.
    pub fn translate(&self, ev: &Event) -> Option<&'static str> {
        use crate::store::EvType::*;
        match ev.typ {
            Added => self.matches(&ev.obj).then_some("ADDED"),
            Modified => {
                let was = ev.old.as_deref().is_some_and(|o| self.matches(o));
                match (was, self.matches(&ev.obj)) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
            Deleted => self
                .matches(ev.old.as_deref().unwrap_or(&ev.obj))
                .then_some("DELETED"),
        }
    }

    /// One serialized watch event line.
    pub fn encode(&self, typ: &str, obj: &Value) -> Vec<u8> {
        let mut out = format!("{{\"type\":\"{typ}\",\"object\":").into_bytes();
        if self.partial {
            let _ = serde_json::to_writer(&mut out, &partial(obj));
        } else {
            let _ = serde_json::to_writer(&mut out, obj);
        }
        out.extend_from_slice(b"}\n");
        out
    }

    pub fn bookmark(&self, rv: u64) -> Vec<u8> {
        let (kind, api_version) = if self.partial {
            (
                "PartialObjectMetadata".to_string(),
                "meta.k8s.io/v1".to_string(),
            )
        } else {
            (self.kind.kind.to_string(), self.kind.api_version())
        };
        let obj = json!({"kind": kind, "apiVersion": api_version,
                         "metadata": {"resourceVersion": rv.to_string()}});
        let mut out = b"{\"type\":\"BOOKMARK\",\"object\":".to_vec();
        let _ = serde_json::to_writer(&mut out, &obj);
        out.extend_from_slice(b"}\n");
        out
    }
}

pub(super) fn start_watch(shared: &Shared, req: &Request, kind: Kind, ns: Option<&str>) -> Reply {
    let (labels, fields) = match selectors(req, &kind) {
        Ok(s) => s,
        Err(e) => return e.into(),
    };
    let from = match req.param("resourceVersion").unwrap_or("") {
        "" | "0" => None,
        t => match t.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return ApiError::bad_request(format!("invalid resource version: {t:?}")).into()
            }
        },
    };
    let timeout = match req.param("timeoutSeconds").unwrap_or("") {
        "" | "0" => None,
        t => match t.parse::<u64>() {
            Ok(n) => Some(Duration::from_secs(n)),
            Err(_) => return ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")).into(),
        },
    };
    let (partial_list, partial_obj) = accept_partial(req);
    let mut plan = WatchPlan {
        kind,
        ns: ns.map(str::to_string),
        labels,
        fields,
        initial: Vec::new(),
        rx: None,
        error: None,
        bookmarks: matches!(req.param("allowWatchBookmarks"), Some("true" | "1")),
        timeout,
        partial: partial_list || partial_obj,
    };
    match shared.lock_state().watch(&kind, ns, from) {
        Ok((initial, rx)) => {
            plan.initial = initial;
            plan.rx = Some(rx);
        }
        Err(e) => plan.error = Some(e.to_status()),
    }
    Reply::Watch(Box::new(plan))
}
