//! Leader election on a `coordination.k8s.io/v1` Lease, following client-go's
//! `tools/leaderelection` algorithm (v1.28):
//!
//! * Acquire: every `retry_period` (jittered by up to 1.2x) GET the Lease. Missing: POST a new
//!   one naming us. Held by someone else and not expired: wait. Otherwise PUT the fetched object
//!   back with our record; the PUT carries the fetched `resourceVersion`, so a concurrent writer
//!   makes it fail with 409 and we simply try again next period.
//! * Expiry is judged by the *local* monotonic time at which this process last saw the record
//!   change, plus the record's `leaseDurationSeconds`; the timestamps written in the Lease are
//!   never compared with our clock, so clock skew between hosts does not matter.
//! * Renew: while leading, try every `retry_period`; if no attempt succeeds within a
//!   `renew_deadline` window, leadership is lost (the process then exits 1, as upstream's).
//! * Release: on a clean stop the leader, once its controllers have stopped writing, gives the
//!   lease up as client-go's `ReleaseOnCancel` does (an empty holder, a duration of 1 s), so a
//!   standby takes over on its next look instead of after the lease duration. Upstream's
//!   kube-controller-manager does not set `ReleaseOnCancel`; the record written is client-go's.
//!
//! `decide` is the pure core of one attempt; `LeaderElector` adds the API calls and the loops.

mod decide;
mod elector;

pub use decide::{decide, Decision, LeaseRecord};
pub use elector::{Ended, LeaderElector};

use std::time::Duration;

use serde_json::Value;

use crate::error::{Error, Result};

/// client-go's `JitterFactor` for the acquire loop.
pub const JITTER_FACTOR: f64 = 1.2;

/// How long past `lease_duration` a leader that failed to renew still reports healthy
/// (kube-controller-manager passes 20 s to the healthz adaptor).
pub const HEALTHZ_TOLERANCE: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, PartialEq)]
pub struct LeaderElectionConfig {
    pub lock_namespace: String,
    pub lock_name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// The checks client-go's NewLeaderElector makes.
    pub fn validate(&self) -> Result<()> {
        if self.lease_duration <= self.renew_deadline {
            return Err(Error::config(
                "leaseDuration must be greater than renewDeadline",
            ));
        }
        let jittered = Duration::try_from_secs_f64(self.retry_period.as_secs_f64() * JITTER_FACTOR)
            .unwrap_or(Duration::MAX);
        if self.renew_deadline <= jittered {
            return Err(Error::config(
                "renewDeadline must be greater than retryPeriod*JitterFactor",
            ));
        }
        if self.lease_duration.is_zero() {
            return Err(Error::config("leaseDuration must be greater than zero"));
        }
        if self.renew_deadline.is_zero() {
            return Err(Error::config("renewDeadline must be greater than zero"));
        }
        if self.retry_period.is_zero() {
            return Err(Error::config("retryPeriod must be greater than zero"));
        }
        if self.identity.is_empty() {
            return Err(Error::config("Lock identity is empty"));
        }
        Ok(())
    }

    /// `namespace/name`, as used in log lines.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.lock_namespace, self.lock_name)
    }
}

fn hostname() -> String {
    let from_proc = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    from_proc
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".to_string())
}

/// A random (version 4) UUID in its canonical lowercase 8-4-4-4-12 form.
fn new_uuid() -> String {
    let mut b = [0u8; 16];
    for x in &mut b {
        *x = fastrand::u8(..);
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// `<hostname>_<uuid>`, the identity kube-controller-manager uses.
pub fn default_identity() -> String {
    format!("{}_{}", hostname(), new_uuid())
}

/// The Lease API for one lock object, implemented over the real client elsewhere.
pub trait LeaseApi: Send + Sync {
    /// The Lease, or None if it does not exist (404).
    fn get(&self) -> Result<Option<Value>>;
    fn create(&self, lease: &Value) -> Result<Value>;
    /// PUT; the object carries `metadata.resourceVersion`, so a stale write fails with 409.
    fn update(&self, lease: &Value) -> Result<Value>;
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn cfg(id: &str) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lock_namespace: "kube-system".into(),
            lock_name: "kube-controller-manager".into(),
            identity: id.into(),
            // Short, but with room for a loaded test machine: a leader thread has to be
            // starved for a whole second before it loses the lease.
            lease_duration: Duration::from_secs(2),
            renew_deadline: Duration::from_secs(1),
            retry_period: Duration::from_millis(100),
        }
    }

    #[test]
    fn config_validation() {
        assert!(cfg("a").validate().is_ok());
        let mut c = cfg("a");
        c.renew_deadline = c.lease_duration;
        assert!(c.validate().is_err());
        let mut c = cfg("a");
        c.retry_period = Duration::from_millis(900); // 1.2 * 900 = 1080 >= 1000
        assert!(c.validate().is_err());
        let mut c = cfg("");
        c.identity.clear();
        assert!(c.validate().is_err());
        assert_eq!(cfg("a").describe(), "kube-system/kube-controller-manager");
    }

    #[test]
    fn identity_format() {
        let id = default_identity();
        let (host, uuid) = id.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        let parts: Vec<_> = uuid.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(uuid
            .chars()
            .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)));
        assert!(parts[2].starts_with('4'));
        assert!(matches!(
            parts[3].chars().next(),
            Some('8' | '9' | 'a' | 'b')
        ));
        assert_ne!(default_identity(), id);
    }
}
