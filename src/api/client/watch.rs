//! Opening a blocking watch, and the stream it returns, which another thread can cancel;
//! and what it shares with the async watch of the informers (`stream.rs`): the query, the
//! Accept header, the read timeout and the errors of refusals. The framing of the events is
//! `api::watch`.

use crate::api::resources::Kind;
use crate::api::watch::{status_error, EventReader};
use crate::error::{Error, Result};
use serde_json::Value;
use std::io::{BufReader, Read};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::connect::{agent_config, new_agent};
use super::query::{Query, WatchOptions};
use super::{parse_body, read_body, retry_after, Auth, Client, REQUEST_TIMEOUT};

impl Client {
    /// Open a watch. The returned stream blocks in `next()`; `WatchStream::canceller` gives a
    /// handle that ends the read from another thread.
    pub fn watch(&self, kind: &Kind, ns: Option<&str>, opts: &WatchOptions) -> Result<WatchStream> {
        let url = format!("{}{}", self.inner.base, watch_path(kind, ns, opts));
        let agent = new_agent(
            agent_config(
                &self.inner.user_agent,
                Some(per_read(opts)),
                REQUEST_TIMEOUT,
            ),
            &self.inner.connector,
        );
        let mut refreshed = false;
        loop {
            self.wait_for_limiter();
            let resp = self.send_once(&agent, "GET", &url, accept(opts), None)?;
            let status = resp.status().as_u16();
            if status == 200 {
                let reader: Box<dyn Read + Send> = Box::new(resp.into_body().into_reader());
                let label = format!("{kind}");
                return Ok(WatchStream {
                    events: {
                        let mut r =
                            EventReader::new(BufReader::with_capacity(8 * 1024, reader), label);
                        r.decoder.shape = opts.shape.clone();
                        r.decoder.echoes = opts.echoes.clone();
                        r
                    },
                    canceller: WatchCanceller {
                        agent: Arc::new(Mutex::new(Some(agent))),
                    },
                });
            }
            let retry_after = retry_after(&resp);
            let v = read_body(resp, "GET", &url)
                .map(|b| parse_body(&b))
                .unwrap_or(Value::Null);
            if status == 401 && !refreshed && matches!(self.inner.auth, Auth::Source(_)) {
                refreshed = true;
                self.invalidate_token();
                continue;
            }
            return Err(refusal(status, retry_after, &v));
        }
    }
}

/// The path and query of a watch.
pub(super) fn watch_path(kind: &Kind, ns: Option<&str>, opts: &WatchOptions) -> String {
    let mut q = Query::default();
    q.push("watch", "true");
    q.opt("labelSelector", opts.label_selector.as_deref());
    q.opt("fieldSelector", opts.field_selector.as_deref());
    q.opt(
        "resourceVersion",
        Some(opts.resource_version.as_str()).filter(|s| !s.is_empty()),
    );
    if opts.allow_bookmarks {
        q.push("allowWatchBookmarks", "true");
    }
    if opts.timeout_seconds > 0 {
        q.push("timeoutSeconds", &opts.timeout_seconds.to_string());
    }
    format!("{}{}", kind.collection_path(ns), q.finish())
}

/// How long a watch's read may wait. Reads may be idle up to timeoutSeconds (bookmarks come
/// about once a minute on a real server); a little more than that detects a half-open
/// connection.
pub(super) fn per_read(opts: &WatchOptions) -> Duration {
    Duration::from_secs(opts.timeout_seconds.max(60) + 30)
}

/// The Accept header of a watch.
pub(super) fn accept(opts: &WatchOptions) -> &'static str {
    if opts.metadata_only {
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
    } else {
        "application/json"
    }
}

/// The error for a watch answered with `status` (not 200) and the body `v`.
pub(super) fn refusal(status: u16, retry_after: Option<Duration>, v: &Value) -> Error {
    let mut err = status_error(v, status);
    if let Error::Api {
        code,
        retry_after: ra,
        ..
    } = &mut err
    {
        *code = status;
        *ra = retry_after;
    }
    err
}

/// Ends a watch's blocking read from another thread.
#[derive(Clone)]
pub struct WatchCanceller {
    agent: Arc<Mutex<Option<ureq::Agent>>>,
}

impl WatchCanceller {
    pub fn cancel(&self) {
        if let Some(a) = self.agent.lock().unwrap_or_else(|p| p.into_inner()).take() {
            a.shutdown();
        }
    }
}

pub struct WatchStream {
    pub events: EventReader<BufReader<Box<dyn Read + Send>>>,
    canceller: WatchCanceller,
}

impl WatchStream {
    pub fn canceller(&self) -> WatchCanceller {
        self.canceller.clone()
    }
}
