//! `--use-service-account-credentials`: each controller acts as ServiceAccount
//! `kube-system/<sa-name>`, with a token obtained through TokenRequest by the root identity,
//! refreshed once 80 % of its lifetime has passed and dropped on a 401.

use crate::api::client::{Client, TokenSource};
use crate::api::resources::{NAMESPACES, SERVICEACCOUNTS};
use crate::error::{Error, Result};
use crate::obj::At as _;
use serde_json::json;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

pub const NAMESPACE: &str = "kube-system";
/// Requested token lifetime (upstream asks for one hour).
pub const EXPIRATION_SECONDS: u64 = 3600;

pub struct ServiceAccountTokens {
    root: Client,
    sa_name: String,
    cached: Mutex<Option<(String, Instant)>>,
}

/// When to fetch a new token: after 80 % of its lifetime (at least 10 minutes are assumed, so
/// a clock-skewed expiry does not make us refresh in a loop).
pub fn refresh_after(lifetime: Duration) -> Duration {
    lifetime.max(Duration::from_secs(600)).mul_f64(0.8)
}

impl ServiceAccountTokens {
    pub fn new(root: Client, sa_name: &str) -> Self {
        ServiceAccountTokens {
            root,
            sa_name: sa_name.to_string(),
            cached: Mutex::new(None),
        }
    }

    /// Make sure `kube-system/<name>` exists (and kube-system itself).
    pub fn ensure_service_account(&self) -> Result<()> {
        match self
            .root
            .get(&SERVICEACCOUNTS, Some(NAMESPACE), &self.sa_name)
        {
            Ok(_) => return Ok(()),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        match self.root.get(&NAMESPACES, None, NAMESPACE) {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {
                let ns =
                    json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":NAMESPACE}});
                match self.root.create(&NAMESPACES, None, &ns) {
                    Ok(_) => {}
                    Err(e) if e.is_already_exists() => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
        let sa = json!({"apiVersion":"v1","kind":"ServiceAccount",
            "metadata":{"name":self.sa_name,"namespace":NAMESPACE}});
        match self.root.create(&SERVICEACCOUNTS, Some(NAMESPACE), &sa) {
            Ok(_) => Ok(()),
            Err(e) if e.is_already_exists() => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn request_token(&self) -> Result<(String, Duration)> {
        let body = json!({"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest",
            "spec":{"expirationSeconds":EXPIRATION_SECONDS}});
        let asked_at = SystemTime::now();
        let mut delay = Duration::from_millis(500);
        let mut last = Error::Transport("no attempt".into());
        for attempt in 0..4 {
            if attempt > 0 {
                std::thread::sleep(delay);
                delay *= 2;
            }
            let res = self.ensure_service_account().and_then(|()| {
                self.root.create_subresource(
                    &SERVICEACCOUNTS,
                    Some(NAMESPACE),
                    &self.sa_name,
                    "token",
                    &body,
                )
            });
            match res {
                Ok(v) => {
                    let token = v
                        .at("/status/token")
                        .and_then(|t| t.as_str())
                        .filter(|t| !t.is_empty())
                        .ok_or_else(|| {
                            Error::Decode("TokenRequest answer without status.token".into())
                        })?
                        .to_string();
                    let lifetime = v
                        .at("/status/expirationTimestamp")
                        .and_then(|t| t.as_str())
                        .and_then(crate::compat::timefmt::parse_rfc3339)
                        .and_then(|exp| exp.duration_since(asked_at).ok())
                        .unwrap_or(Duration::from_secs(EXPIRATION_SECONDS));
                    return Ok((token, lifetime));
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

impl TokenSource for ServiceAccountTokens {
    fn token(&self) -> Result<String> {
        let mut c = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((tok, refresh_at)) = c.as_ref() {
            if Instant::now() < *refresh_at {
                return Ok(tok.clone());
            }
        }
        let (tok, lifetime) = self.request_token().map_err(|e| {
            Error::Transport(format!(
                "getting a token for service account {NAMESPACE}/{}: {e}",
                self.sa_name
            ))
        })?;
        log::debug!(
            "got a token for service account {NAMESPACE}/{} valid {}s",
            self.sa_name,
            lifetime.as_secs()
        );
        *c = Some((tok.clone(), Instant::now() + refresh_after(lifetime)));
        Ok(tok)
    }

    fn invalidate(&self) {
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_at_eighty_percent() {
        assert_eq!(
            refresh_after(Duration::from_secs(3600)),
            Duration::from_secs(2880)
        );
        assert_eq!(
            refresh_after(Duration::from_secs(60)),
            Duration::from_secs(480)
        );
    }
}
