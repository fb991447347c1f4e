//! The `/metrics` route: the exposition `crate::metrics` gathers.

use super::{Handler, Request, Response};
use crate::metrics;
use std::sync::Arc;

/// The `/metrics` handler for the secure port.
pub fn metrics_handler() -> Handler {
    Arc::new(|_req: &Request| {
        let mut r = Response {
            status: 200,
            content_type: metrics::CONTENT_TYPE.to_string(),
            body: metrics::render().into_bytes(),
            headers: Vec::new(),
        };
        if let Some(t) = metrics::process_start_unix() {
            r.headers
                .push(("Process-Start-Time-Unix".to_string(), t.to_string()));
        }
        r
    })
}
