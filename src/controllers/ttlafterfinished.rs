//! ttl-after-finished-controller: deletes a finished Job (condition `Complete` or `Failed`
//! True) once `ttlSecondsAfterFinished` seconds have passed since the condition's
//! `lastTransitionTime`, as upstream's `pkg/controller/ttlafterfinished`.
//!
//! As upstream:
//! - A Job is queued when it is added or changes, is not being deleted, has a TTL and is
//!   finished. A sync of a Job whose time is not up looks at it again when it is.
//! - Before deleting, the Job is read again from the apiserver (not the cache) and checked
//!   again: its TTL may have been changed or removed meanwhile. The delete has foreground
//!   propagation (the Job goes after its pods) and the fresh Job's UID as a precondition.
//! - No Events; `--concurrent-ttl-after-finished-syncs` workers (5); queue
//!   `ttl_jobs_to_delete`; the histogram
//!   `ttl_after_finished_controller_job_deletion_duration_seconds` (from expiry to the
//!   delete's answer).

use super::{Action, Controller, Cx, Outcome, Watch};
use crate::api::client::DeleteOptions;
use crate::api::resources::JOBS;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::Result;
use crate::obj;
use serde_json::Value;
use std::time::{Duration, SystemTime};

/// The parts of a Job this controller reads besides its metadata.
pub const JOB_WATCH: Watch = Watch::fields(JOBS, &["/spec/ttlSecondsAfterFinished", "/status"]);

/// Its row in the controller table.
pub fn build(_: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    crate::metrics::register_collector("ttl-after-finished", std::sync::Arc::new(metric_families));
    Ok(Some(super::Runnable::reconciles(TtlAfterFinished::new())))
}

pub struct TtlAfterFinished {
    /// When the TTL of each Job being deleted ran out, for the deletion-duration histogram.
    expired: std::sync::Mutex<std::collections::HashMap<String, SystemTime>>,
}

impl Default for TtlAfterFinished {
    fn default() -> Self {
        Self::new()
    }
}

impl TtlAfterFinished {
    pub fn new() -> Self {
        TtlAfterFinished {
            expired: Default::default(),
        }
    }

    fn expired(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, SystemTime>> {
        self.expired.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether the Job has a TTL and is finished (upstream's `needsCleanup`).
pub fn needs_cleanup(job: &Value) -> bool {
    job["spec"]["ttlSecondsAfterFinished"].is_i64() && finish_time_field(job).is_some()
}

/// The `lastTransitionTime` of the Job's finished condition (may be empty).
fn finish_time_field(job: &Value) -> Option<&str> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
        .map(|c| c["lastTransitionTime"].as_str().unwrap_or(""))
}

/// What a look at one Job decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ttl {
    /// Nothing to do (not finished, no TTL, being deleted).
    Keep,
    /// Expired: delete it.
    Expired,
    /// Not yet: look again after this long.
    Wait(Duration),
}

/// Upstream's `processTTL` for `job` at `now`; an error when the finished condition has no
/// transition time.
pub fn process_ttl(job: &Value, now: SystemTime) -> std::result::Result<Ttl, String> {
    if obj::is_deleting(job) || !needs_cleanup(job) {
        return Ok(Ttl::Keep);
    }
    let key = obj::key(job);
    let finished = finish_time_field(job)
        .and_then(crate::compat::timefmt::parse_rfc3339)
        .ok_or_else(|| format!("unable to find the time when the Job {key} finished"))?;
    if finished > now {
        log::info!(
            "ttl-after-finished-controller: Job {key} finished in the future (clock skew?); \
             its cleanup is deferred"
        );
    }
    let expire = expiry(job).unwrap_or(finished);
    Ok(match expire.duration_since(now) {
        Ok(left) if !left.is_zero() => Ttl::Wait(left),
        _ => Ttl::Expired,
    })
}

/// `ttl_after_finished_controller_job_deletion_duration_seconds`: buckets 0.1, 0.2, ...
/// 819.2 (14).
fn deletion_duration() -> std::sync::MutexGuard<'static, crate::metrics::Histogram> {
    static H: std::sync::OnceLock<std::sync::Mutex<crate::metrics::Histogram>> =
        std::sync::OnceLock::new();
    H.get_or_init(|| {
        let bounds: Vec<f64> = (0..14).map(|i| 0.1 * f64::from(1u32 << i)).collect();
        std::sync::Mutex::new(crate::metrics::Histogram::new(&bounds))
    })
    .lock()
    .unwrap_or_else(|p| p.into_inner())
}

/// The controller's metric family (registered when the controller is built, as upstream's).
pub fn metric_families() -> Vec<crate::metrics::Family> {
    let mut f = crate::metrics::Family::alpha(
        "ttl_after_finished_controller_job_deletion_duration_seconds",
        "The time it took to delete the job since it became eligible for deletion",
        crate::metrics::MetricType::Histogram,
    );
    f.push_histogram(&[], deletion_duration().clone());
    vec![f]
}

/// When a Job's TTL ran out.
fn expiry(job: &Value) -> Option<SystemTime> {
    let finished = finish_time_field(job).and_then(crate::compat::timefmt::parse_rfc3339)?;
    let ttl = job["spec"]["ttlSecondsAfterFinished"].as_i64()?;
    if ttl >= 0 {
        finished.checked_add(Duration::from_secs(ttl as u64))
    } else {
        finished.checked_sub(Duration::from_secs(ttl.unsigned_abs()))
    }
}

impl Controller for TtlAfterFinished {
    fn watches(&self) -> Vec<Watch> {
        vec![JOB_WATCH]
    }

    fn applied(&self, key: &str, action: &Action, result: super::Applied<'_>) {
        let since = self.expired().remove(key);
        if let (Action::Delete { .. }, super::Applied::Done(_), Some(since)) =
            (action, result, since)
        {
            let took = SystemTime::now().duration_since(since).unwrap_or_default();
            deletion_duration().observe(took.as_secs_f64());
        }
    }

    fn keys_for(&self, _: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        match (d.kind, &d.new) {
            (DeltaKind::Added | DeltaKind::Updated, Some(j))
                if !obj::is_deleting(j) && needs_cleanup(j) =>
            {
                vec![obj::key(j)]
            }
            _ => vec![],
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(job) = cx.cache.store_for(&JOB_WATCH).get(key) else {
            return Ok(Outcome::none());
        };
        let wait = |d| Outcome {
            requeue_after: Some(d),
            ..Outcome::default()
        };
        match process_ttl(&job, cx.now).map_err(crate::Error::config)? {
            Ttl::Keep => return Ok(Outcome::none()),
            Ttl::Wait(d) => return Ok(wait(d)),
            Ttl::Expired => {}
        }
        // The cache may be behind: the TTL may have been changed since.
        let (ns, name) = obj::split_key(key);
        let fresh = match cx.client.get(&JOBS, Some(ns), name) {
            Err(e) if e.is_not_found() => return Ok(Outcome::none()),
            r => r?,
        };
        match process_ttl(&fresh, cx.now).map_err(crate::Error::config)? {
            Ttl::Keep => Ok(Outcome::none()),
            Ttl::Wait(d) => Ok(wait(d)),
            Ttl::Expired => {
                log::debug!("ttl-after-finished-controller: cleaning up Job {key}");
                if let Some(at) = expiry(&fresh) {
                    self.expired().insert(key.to_string(), at);
                }
                Ok(Outcome::with(vec![Action::Delete {
                    kind: JOBS,
                    namespace: ns.to_string(),
                    name: name.to_string(),
                    options: DeleteOptions {
                        propagation_policy: Some("Foreground"),
                        precondition_uid: Some(obj::uid(&fresh).to_string()),
                        ..DeleteOptions::default()
                    },
                }]))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testing::Harness;
    use serde_json::json;

    fn job(name: &str, ttl: Option<i64>, cond: Option<(&str, &str)>) -> Value {
        let mut j = json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                         "resourceVersion": "1"},
            "spec": {},
            "status": {},
        });
        if let Some(t) = ttl {
            j["spec"]["ttlSecondsAfterFinished"] = t.into();
        }
        if let Some((type_, at)) = cond {
            j["status"]["conditions"] =
                json!([{"type": type_, "status": "True", "lastTransitionTime": at}]);
        }
        j
    }

    fn at(s: &str) -> SystemTime {
        crate::compat::timefmt::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn ttl_counts_from_the_finished_condition() {
        let j = job("a", Some(30), Some(("Complete", "2024-01-01T00:00:00Z")));
        assert_eq!(
            process_ttl(&j, at("2024-01-01T00:00:10Z")),
            Ok(Ttl::Wait(Duration::from_secs(20)))
        );
        assert_eq!(
            process_ttl(&j, at("2024-01-01T00:00:30Z")),
            Ok(Ttl::Expired)
        );
        assert_eq!(
            process_ttl(&j, at("2024-01-01T00:05:00Z")),
            Ok(Ttl::Expired)
        );
        let failed = job("b", Some(0), Some(("Failed", "2024-01-01T00:00:00Z")));
        assert_eq!(
            process_ttl(&failed, at("2024-01-01T00:00:00Z")),
            Ok(Ttl::Expired)
        );
    }

    #[test]
    fn unfinished_untimed_or_deleting_jobs_are_kept() {
        let now = at("2024-01-01T01:00:00Z");
        assert_eq!(process_ttl(&job("a", Some(1), None), now), Ok(Ttl::Keep));
        assert_eq!(
            process_ttl(
                &job("b", None, Some(("Complete", "2024-01-01T00:00:00Z"))),
                now
            ),
            Ok(Ttl::Keep)
        );
        let mut suspended = job("c", Some(1), Some(("Suspended", "2024-01-01T00:00:00Z")));
        assert_eq!(process_ttl(&suspended, now), Ok(Ttl::Keep));
        suspended["status"]["conditions"][0]["type"] = "Complete".into();
        suspended["metadata"]["deletionTimestamp"] = "2024-01-01T00:30:00Z".into();
        assert_eq!(process_ttl(&suspended, now), Ok(Ttl::Keep));
        let mut not_true = job("d", Some(1), Some(("Complete", "2024-01-01T00:00:00Z")));
        not_true["status"]["conditions"][0]["status"] = "False".into();
        assert_eq!(process_ttl(&not_true, now), Ok(Ttl::Keep));
    }

    #[test]
    fn deletion_duration_histogram_is_upstreams() {
        let text = crate::metrics::encode(&metric_families());
        assert!(text.contains(
            "# HELP ttl_after_finished_controller_job_deletion_duration_seconds [ALPHA] The time \
             it took to delete the job since it became eligible for deletion"
        ));
        let les: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split("_bucket{le=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(
            les,
            [
                "0.1", "0.2", "0.4", "0.8", "1.6", "3.2", "6.4", "12.8", "25.6", "51.2", "102.4",
                "204.8", "409.6", "819.2", "+Inf"
            ]
        );
        let skew = crate::metrics::encode(&crate::controllers::cronjob::metric_families());
        assert!(skew
            .contains("cronjob_controller_job_creation_skew_duration_seconds_bucket{le=\"512\"}"));
        assert!(
            skew.contains("# TYPE cronjob_controller_job_creation_skew_duration_seconds histogram")
        );
    }

    #[test]
    fn a_finished_condition_without_a_time_is_an_error() {
        let j = job("a", Some(1), Some(("Complete", "")));
        assert!(process_ttl(&j, at("2024-01-01T00:00:00Z")).is_err());
    }

    #[test]
    fn only_finished_jobs_with_a_ttl_are_queued_and_unexpired_ones_wait() {
        let mut h = Harness::new(TtlAfterFinished::new()).at("2024-01-01T00:00:10Z");
        h.add(JOBS, job("running", Some(30), None));
        h.add(
            JOBS,
            job("no-ttl", None, Some(("Complete", "2024-01-01T00:00:00Z"))),
        );
        assert!(h.take_queued().is_empty());
        let mut done = job(
            "running",
            Some(30),
            Some(("Complete", "2024-01-01T00:00:00Z")),
        );
        done["metadata"]["resourceVersion"] = "2".into();
        h.update(JOBS, done);
        assert_eq!(h.take_queued(), ["ns/running"]);
        let w = h.sync("ns/running");
        assert!(w.is_empty());
        assert_eq!(w.requeue_after, Some(Duration::from_secs(20)));
        let mut deleting = job("going", Some(0), Some(("Failed", "2024-01-01T00:00:00Z")));
        deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:05Z".into();
        h.add(JOBS, deleting);
        assert!(h.take_queued().is_empty());
        assert!(h.sync("ns/gone").is_empty());
    }
}
