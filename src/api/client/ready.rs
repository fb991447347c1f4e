//! One `GET /readyz` for async code (the readiness probe of `cache::ready`): on a connection of
//! its own, as an async watch opens (`stream.rs`), within a deadline, without a thread. The
//! answer's head is all it reads: 200 is ready, anything else (an error, 500 while the
//! server's post-start hooks run, a 403 while its RBAC warms up) is not.

use std::time::{Duration, Instant};

use super::stream::within;
use super::{Auth, Client};
use futures_lite::future;

impl Client {
    /// Whether the server answers `/readyz` with 200 within `timeout` (connect, TLS and the
    /// answer's head). Counted in `rest_client_requests_total` as any request.
    pub async fn ready_async(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let late = async {
            async_io::Timer::at(deadline).await;
            false
        };
        if self.inner.proxied {
            // Through ureq, which goes through the proxy: on a helper.
            let c = self.clone();
            let probe = crate::runtime::pool::unblock(move || c.get_raw("/readyz").is_ok());
            return future::or(probe, late).await;
        }
        future::or(self.probe(deadline), late).await
    }

    async fn probe(&self, deadline: Instant) -> bool {
        let authorization = match &self.inner.auth {
            // A token source may read a file: on a helper.
            Auth::Source(_) => {
                let c = self.clone();
                crate::runtime::pool::unblock(move || c.authorization()).await
            }
            _ => self.authorization(),
        };
        let Ok(authorization) = authorization else {
            return false;
        };
        let per_read = deadline.saturating_duration_since(Instant::now());
        let open = self.open("/readyz", "*/*", authorization.as_deref(), per_read);
        // Dropping the body closes the connection.
        let status = within(deadline, "readiness probe", open)
            .await
            .ok()
            .map(|(status, _, _)| status);
        crate::metrics::rest_request_result(&self.inner.base, "GET", status);
        status == Some(200)
    }
}
