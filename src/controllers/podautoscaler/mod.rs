//! `horizontal-pod-autoscaler-controller`: scales any target with a `scale` subresource from
//! the resource, custom and external metrics APIs, as upstream's `pkg/controller/podautoscaler`.
//!
//! Each HPA is synced every `--horizontal-pod-autoscaler-sync-period` (15 s), upstream's
//! fixed-interval queue: a new HPA and a spec change (HPAGeneration) are synced at once, other
//! changes wait for the period, and a failed sync is not retried sooner. v1.37's per-HPA
//! tolerances, scale to zero and `observedGeneration` follow their gates at the emulated
//! version (`docs/controllers/horizontalpodautoscaler.md` lists the v1.29-v1.37 changes). A sync reads the target's Scale live, computes one proposal per
//! metric ([`metrics`], [`calc`]), stabilises and limits it ([`normalize`]), PUTs the Scale
//! when the count changes (live, in the sync: the status and Events depend on its answer),
//! and returns the status update and Events as actions. Pods come from the shared cache
//! (metadata, `spec.containers` and `status`). What upstream keeps in memory per HPA (recent
//! recommendations and scale changes, the selectors that detect two HPAs on the same pods)
//! is kept here the same way and, as upstream's, starts empty after a restart.
//!
//! Differences: the custom metrics API is asked at `v1beta2` only (upstream discovers
//! `v1beta1` servers too); a target kind's resource is looked up in the version its
//! `apiVersion` names (upstream's mapper tries every version of the group). Its metrics are
//! upstream's ([`monitor`]).

pub mod calc;
pub mod metrics;
pub mod monitor;
pub mod normalize;
pub mod source;
pub mod spec;
pub mod sync;
#[cfg(test)]
mod tests;

use crate::api::labels::LabelSelector;
use crate::api::resources::{HPAS, PODS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controller::BuildCx;
use crate::controller::{Action, Applied, Controller, Cx, OnError, Outcome, Watch};
use crate::controllers::Runnable;
use crate::obj::{At as _, Obj};
use crate::queue::RateLimiter;
use crate::Result;
use normalize::History;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The controller's flags.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    pub sync_period: Duration,
    pub calc: calc::Calc,
    pub downscale_stabilization: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sync_period: Duration::from_secs(15),
            calc: calc::Calc {
                tolerance: calc::Tolerances::both(0.1),
                cpu_initialization_period: Duration::from_secs(300),
                initial_readiness_delay: Duration::from_secs(30),
            },
            downscale_stabilization: Duration::from_secs(300),
        }
    }
}

impl Options {
    /// From the flags' text (checked against their Go types when the command line was read).
    pub fn from_given(given: &BTreeMap<&'static str, String>) -> Options {
        let mut o = Options::default();
        let dur = |flag: &str, slot: &mut Duration| {
            if let Some(d) = given
                .get(flag)
                .and_then(|v| crate::compat::parse::parse_go_duration(v).ok())
            {
                *slot = d;
            }
        };
        dur("horizontal-pod-autoscaler-sync-period", &mut o.sync_period);
        dur(
            "horizontal-pod-autoscaler-downscale-stabilization",
            &mut o.downscale_stabilization,
        );
        dur(
            "horizontal-pod-autoscaler-cpu-initialization-period",
            &mut o.calc.cpu_initialization_period,
        );
        dur(
            "horizontal-pod-autoscaler-initial-readiness-delay",
            &mut o.calc.initial_readiness_delay,
        );
        if let Some(t) = given
            .get("horizontal-pod-autoscaler-tolerance")
            .and_then(|v| v.trim().parse::<f64>().ok())
        {
            o.calc.tolerance = calc::Tolerances::both(t);
        }
        o
    }
}

pub fn build(cx: &BuildCx<'_, crate::config::Config>) -> Result<Option<Runnable>> {
    for flag in [
        "horizontal-pod-autoscaler-upscale-delay",
        "horizontal-pod-autoscaler-downscale-delay",
    ] {
        if cx.cfg.given.contains_key(flag) {
            log::warn!(
                "Flag --{flag} has been deprecated, This flag is currently no-op and will be deleted."
            );
        }
    }
    crate::metrics::register_collector("horizontal-pod-autoscaler", Arc::new(monitor::families));
    Ok(Some(Runnable::reconciles(Hpa::new(Options::from_given(
        &cx.cfg.given,
    )))))
}

const HPA_WATCH: Watch = Watch::full(HPAS);
const POD_WATCH: Watch = Watch::fields(
    PODS,
    &[
        "/spec/containers",
        "/spec/initContainers",
        "/spec/resources",
        "/spec/overhead",
        "/status",
    ],
);

pub struct Hpa {
    opts: Options,
    histories: Mutex<HashMap<String, History>>,
    /// Every HPA's last parsed selector (None until its first sync), by key.
    selectors: Mutex<BTreeMap<String, Option<LabelSelector>>>,
    /// The resourceVersion of each HPA's last status written here, while the cache has not
    /// shown it yet (StaleControllerConsistencyHPA).
    written: Mutex<HashMap<String, u64>>,
    /// The `action` and `error` labels of each HPA's reconciliation being applied, observed
    /// once its status write is done (a failed one makes it `internal`, as upstream's).
    reconciling: Mutex<HashMap<String, (&'static str, &'static str)>>,
}

/// Upstream's `FixedItemIntervalRateLimiter`: every retry waits one sync period.
struct FixedInterval(Duration);

impl RateLimiter<String> for FixedInterval {
    fn when(&mut self, _k: &String) -> Duration {
        self.0
    }
    fn forget(&mut self, _k: &String) {}
    fn num_requeues(&self, _k: &String) -> u32 {
        1
    }
}

/// Whether an HPA change is synced at once rather than after the period.
fn at_once(d: &Delta, generation_gate: bool) -> bool {
    let generation = |o: &Option<Obj>| {
        o.as_ref().and_then(|o| {
            o.at("/metadata/generation")
                .and_then(serde_json::Value::as_i64)
        })
    };
    match d.kind {
        DeltaKind::Added => true,
        DeltaKind::Updated => generation_gate && generation(&d.old) != generation(&d.new),
        DeltaKind::Deleted => false,
    }
}

impl Hpa {
    pub fn new(opts: Options) -> Self {
        Hpa {
            opts,
            histories: Mutex::new(HashMap::new()),
            selectors: Mutex::new(BTreeMap::new()),
            written: Mutex::new(HashMap::new()),
            reconciling: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the cached `hpa` is older than the status last written for `key` (upstream's
    /// consistency store: the sync is skipped and the HPA synced again a period later). A
    /// cache that caught up forgets the write.
    fn stale(&self, key: &str, hpa: &Obj) -> bool {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let Some(&w) = written.get(key) else {
            return false;
        };
        let cached: Option<u64> = hpa
            .at("/metadata/resourceVersion")
            .and_then(serde_json::Value::as_str)
            .and_then(|v| v.parse().ok());
        if cached.is_some_and(|c| c < w) {
            return true;
        }
        written.remove(key);
        false
    }

    fn selectors(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Option<LabelSelector>>> {
        self.selectors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The HPAs whose selectors pick any of `pods`, after recording `key`'s selector.
    fn selecting(&self, key: &str, sel: &LabelSelector, pods: &[Obj]) -> Vec<String> {
        let mut all = self.selectors();
        if let Some(slot) = all.get_mut(key) {
            *slot = Some(sel.clone());
        }
        let (ns, _) = crate::obj::split_key(key);
        let prefix = format!("{ns}/");
        all.range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(k, s)| Some((k, s.as_ref()?)))
            .filter(|(_, s)| pods.iter().any(|p| s.matches(p)))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// One sync against `source` (the live API, or a test's answers).
    pub fn sync_with(&self, cx: &Cx, key: &str, source: &dyn source::Source) -> Outcome {
        let Some(hpa) = cx.cache.store(HPAS).get(key) else {
            log::info!("Horizontal Pod Autoscaler {key} has been deleted");
            self.histories
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(key);
            self.written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(key);
            return Outcome::none();
        };
        if self.stale(key, &hpa) {
            monitor::SKIPS.observe_pod_skip();
            log::debug!("horizontal-pod-autoscaler: {key}: the cache shows an older HPA than written; synced again in a period");
            return Outcome {
                requeue_after: Some(self.opts.sync_period),
                ..Outcome::none()
            };
        }
        let (ns, _) = crate::obj::split_key(key);
        let pods = |sel: &LabelSelector| -> Vec<Obj> {
            cx.cache
                .store_for(&POD_WATCH)
                .list_namespace(ns)
                .into_iter()
                .filter(|p| sel.matches(p))
                .collect()
        };
        let selecting = |sel: &LabelSelector, pods: &[Obj]| self.selecting(key, sel, pods);
        let input = sync::Input {
            hpa: &hpa,
            now: cx.now,
            calc: spec::with_tolerances(&hpa, self.opts.calc),
            downscale_window: self.opts.downscale_stabilization,
            pods: &pods,
            selecting: &selecting,
            source,
        };
        let mut history = self
            .histories
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key)
            .unwrap_or_default();
        let done = sync::sync(&input, &mut history);
        // Upstream's `spec` label comes only from an unparseable `scaleTargetRef.apiVersion`,
        // which fails here as reading the scale does: `internal`.
        let error = if done.error.is_some() {
            "internal"
        } else {
            "none"
        };
        self.reconciling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), (done.action, error));
        self.histories
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), history);
        if let Some(e) = &done.error {
            log::warn!("horizontal-pod-autoscaler: {key}: {e}");
        }
        Outcome {
            actions: done.actions,
            requeue_after: Some(self.opts.sync_period),
            ..Outcome::default()
        }
    }
}

impl Controller for Hpa {
    fn watches(&self) -> Vec<Watch> {
        vec![HPA_WATCH, POD_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _cache: &Cache) -> Vec<String> {
        if w.kind != HPAS {
            // Pods are read by syncs; their changes queue nothing (as upstream).
            return Vec::new();
        }
        let key = crate::obj::key(d.object());
        if d.kind == DeltaKind::Deleted {
            if self.selectors().remove(&key).is_some() {
                monitor::hpa_deleted();
            }
            return Vec::new();
        }
        if let std::collections::btree_map::Entry::Vacant(e) = self.selectors().entry(key.clone()) {
            e.insert(None);
            monitor::hpa_added();
        }
        vec![key]
    }

    fn key_delay(&self, w: &Watch) -> Duration {
        if w.kind == HPAS {
            self.opts.sync_period
        } else {
            Duration::ZERO
        }
    }

    /// A new HPA is synced at once, and so is a spec change (a new `metadata.generation`,
    /// while HPAGeneration is on); other changes, the controller's own status writes among
    /// them, wait for the period (v1.37's `enqueueHPA` and `updateHPA`; v1.28 made every
    /// change wait).
    fn delayed_keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<(String, Duration)> {
        let at_once = w.kind == HPAS && at_once(d, crate::config::gates::enabled("HPAGeneration"));
        let delay = if at_once {
            Duration::ZERO
        } else {
            self.key_delay(w)
        };
        self.keys_for(w, d, cache)
            .into_iter()
            .map(|k| (k, delay))
            .collect()
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        Ok(self.sync_with(cx, key, &source::Rest { client: cx.client }))
    }

    /// A status written: remembered until the cache shows it, while the gate is on. A status
    /// write that failed makes the reconciliation's `error` label `internal`.
    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        if let (Action::UpdateSubresource { kind, .. }, Applied::Failed(_)) = (action, result) {
            if *kind == HPAS {
                let mut reconciling = self.reconciling.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(labels) = reconciling.get_mut(key) {
                    labels.1 = "internal";
                }
            }
            return;
        }
        let (Action::UpdateSubresource { kind, .. }, Applied::Done(Some(answer))) =
            (action, result)
        else {
            return;
        };
        if *kind != HPAS || !monitor::SKIPS.gate_on() {
            return;
        }
        if let Some(rv) = answer["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
        {
            self.written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key.to_string(), rv);
        }
    }

    /// The reconciliation observed, its status write included (`reconcileAutoscaler`'s
    /// deferred recorder).
    fn synced(&self, key: &str, began: std::time::Instant, _end: super::SyncEnd<'_>) {
        let labels = self
            .reconciling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        if let Some((action, error)) = labels {
            monitor::observe_reconciliation(action, error, began.elapsed());
        }
    }

    /// A status write that failed (a conflict included) was reported as an Event; the HPA is
    /// synced again after the period, not at once.
    fn on_error(&self, action: &Action, _err: &crate::Error) -> OnError {
        match action {
            Action::UpdateSubresource { kind, .. } if *kind == HPAS => OnError::Ignore,
            _ => OnError::Retry,
        }
    }

    fn rate_limiter(&self) -> Option<Box<dyn RateLimiter<String>>> {
        Some(Box::new(FixedInterval(self.opts.sync_period)))
    }
}
