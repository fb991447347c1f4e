//! resourcequota-controller: `status.hard` and `status.used` of every ResourceQuota
//! (upstream's `pkg/controller/resourcequota` with the evaluators of `pkg/quota/v1`).
//!
//! As upstream:
//! - Usage is computed from the cache: pods (requests and limits of cpu, memory,
//!   ephemeral-storage, hugepages and extended resources; `pods` counts pods not finished and
//!   not past their deletion grace period; `count/pods` counts them all), services (node
//!   ports, load balancers), persistent volume claims (`requests.storage`, per storage class
//!   `<class>.storageclass.storage.k8s.io/...`), DRA's resource claims
//!   (`count/resourceclaims.resource.k8s.io`, and `<class>.deviceclass.resource.k8s.io/devices`:
//!   the devices their requests ask for per device class, the largest subrequest of a
//!   prioritized list), and `count/<resource>.<group>` for every
//!   namespaced resource discovery serves with create, list, watch and delete (Events and
//!   virtual resources aside), with the legacy names `configmaps`, `secrets`,
//!   `resourcequotas`, `replicationcontrollers`. Scopes (`Terminating`, `NotTerminating`,
//!   `BestEffort`, `NotBestEffort`, `PriorityClass`, `CrossNamespacePodAffinity`) and scope
//!   selectors select pods; object counts, services and claims match no scope.
//! - A sync writes `status` (PUT `resourcequotas/status`) only when the hard limits or the
//!   usage changed; usage of resources nothing here measures is kept as it was, and names
//!   not in `spec.hard` are dropped.
//! - Two queues with upstream's names: `resourcequota_priority` for quotas whose status lacks
//!   the hard limits or some usage, `resourcequota_primary` for the rest; each served by
//!   `--concurrent-resource-quota-syncs` workers.
//! - Replenishment: deleting an object queues the quotas of its namespace that track its
//!   resource; so do a pod update that leaves it uncounted (finished, or past its grace
//!   period) and a service update (its type may have changed). Creations are charged by the
//!   apiserver's quota admission, not here.
//! - Every `--resource-quota-sync-period` (5m; 0 turns it off) every quota is synced again.
//! - Discovery runs every 30 s on the kernel's discovery-driven monitors
//!   (`cache::monitors`), the same ones the garbage collector uses: the informers are shared,
//!   and workers wait while a new set of monitors syncs.
//!
//! Memory: counted resources are metadata-only informers, counted without decoding an
//! object; pods, services and claims are cached with only the parts a quota reads
//! ([`usage::POD_FIELDS`] and the others).
//!
//! Unlike upstream, a pod update queues the quotas whenever the pod no longer counts (the
//! previous version of an update carries metadata only here, so "it counted before" is not
//! checked), and any service update queues them, not only a change of type: more syncs that
//! find nothing to write, never fewer.

pub mod dra;
pub mod podmemo;
pub mod podres;
#[cfg(test)]
mod tests;
pub mod usage;

use super::{RunEnv, SelfDriven};
use crate::api::client::Client;
use crate::api::discovery::Verbs;
use crate::api::resources::{
    DEVICECLASSES, PERSISTENTVOLUMECLAIMS, PODS, RESOURCECLAIMS, RESOURCEQUOTAS, SERVICES,
};
use crate::api::Kind;
use crate::cache::monitors::{served_with, KeepFailed, Monitors, MonitorsConfig};
use crate::cache::{Cache, Delta, DeltaKind, Watch};
use crate::compat::quantity::Quantity;
use crate::obj;
use crate::queue::WorkQueue;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};
use usage::{Evaluator, ResourceList, Scopes};

pub const NAME: &str = "resourcequota-controller";
const PRIMARY: &str = "resourcequota_primary";
const PRIORITY: &str = "resourcequota_priority";
/// How often discovery runs (upstream's quota controller sync period).
const DISCOVERY_PERIOD: Duration = Duration::from_secs(30);
/// Upstream's default `--resource-quota-sync-period`.
const DEFAULT_SYNC_PERIOD: Duration = Duration::from_secs(300);
const VERBS: Verbs = Verbs::CREATE
    .union(Verbs::LIST)
    .union(Verbs::WATCH)
    .union(Verbs::DELETE);

/// Resources never counted (upstream's ignored resources, and cluster-scoped ones).
pub fn ignored(k: &Kind) -> bool {
    if !k.namespaced {
        return true;
    }
    matches!(
        (k.group, k.plural),
        ("", "events" | "bindings" | "componentstatuses")
            | ("events.k8s.io", "events")
            | (
                "authentication.k8s.io",
                "tokenreviews" | "selfsubjectreviews"
            )
            | (
                "authorization.k8s.io",
                "subjectaccessreviews"
                    | "selfsubjectaccessreviews"
                    | "localsubjectaccessreviews"
                    | "selfsubjectrulesreviews"
            )
    )
}

/// Pods as the quota reads them.
pub const POD_WATCH: Watch = Watch::fields(PODS, usage::POD_FIELDS);
pub const SERVICE_WATCH: Watch = Watch::fields(SERVICES, usage::SERVICE_FIELDS);
pub const PVC_WATCH: Watch = Watch::fields(PERSISTENTVOLUMECLAIMS, usage::PVC_FIELDS);
pub const RESOURCECLAIM_WATCH: Watch = Watch::fields(RESOURCECLAIMS, usage::RESOURCECLAIM_FIELDS);
/// Device classes: the extended resource name each stands for.
pub const DEVICECLASS_WATCH: Watch = Watch::fields(DEVICECLASSES, &["/spec/extendedResourceName"]);

/// Its row in the controller table.
pub fn build(
    cx: &super::BuildCx<'_, crate::config::Config>,
) -> crate::Result<Option<super::Runnable>> {
    let period = match cx.cfg.given.get("resource-quota-sync-period") {
        Some(v) => crate::compat::parse::parse_go_duration(v).unwrap_or(Duration::ZERO),
        None => DEFAULT_SYNC_PERIOD,
    };
    // DRA's claims are measured (not only counted) when the gate is on and the API server
    // serves them (upstream: `isEnabled` from discovery and the gate).
    let claims = crate::config::gates::enabled("DynamicResourceAllocation")
        && super::kit::served::served(cx.rest, "/apis/resource.k8s.io/v1", "resourceclaims")
            != Some(false);
    Ok(Some(super::Runnable::drives(
        ResourceQuotaController::new(cx.workers, period).measuring_claims(claims),
    )))
}

struct Env {
    cache: Arc<Cache>,
    client: Client,
}

pub(crate) struct Inner {
    workers: usize,
    sync_period: Duration,
    primary: Arc<WorkQueue<String>>,
    priority: Arc<WorkQueue<String>>,
    /// The evaluators of the resources discovery serves that can be counted (set once
    /// monitors synced), the core ones always; built once per discovery change.
    counted: RwLock<Arc<Vec<Evaluator>>>,
    monitors: OnceLock<Arc<Monitors>>,
    env: OnceLock<Env>,
    /// What each pod adds to quotas without scopes, by version.
    pods: podmemo::PodMemo,
}

pub struct ResourceQuotaController {
    inner: Arc<Inner>,
    /// Whether DRA's ResourceClaims are cached with their requests.
    claims: bool,
}

impl ResourceQuotaController {
    /// `workers`: `--concurrent-resource-quota-syncs`; `sync_period`:
    /// `--resource-quota-sync-period` (zero: no periodic full sync).
    pub fn new(workers: usize, sync_period: Duration) -> Self {
        ResourceQuotaController {
            inner: Arc::new(Inner {
                workers: workers.max(1),
                sync_period,
                primary: WorkQueue::new(PRIMARY),
                priority: WorkQueue::new(PRIORITY),
                counted: RwLock::new(Arc::new(evaluators_for(BTreeSet::new()))),
                monitors: OnceLock::new(),
                env: OnceLock::new(),
                pods: podmemo::PodMemo::default(),
            }),
            claims: false,
        }
    }

    /// Cache DRA's ResourceClaims with the requests a quota reads (only when they are served:
    /// an informer of an unserved resource never syncs).
    pub fn measuring_claims(mut self, on: bool) -> Self {
        self.claims = on;
        self
    }
}

/// The names of a resource list object.
fn names(v: &Value) -> Vec<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Two resource lists hold the same names with equal values (`quota.Equals`, and the
/// semantic equality of `spec.hard` and `status.hard`). Unreadable values compare as text.
pub fn lists_equal(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a.as_object().is_none_or(Map::is_empty) && b.as_object().is_none_or(Map::is_empty);
    };
    a.len() == b.len()
        && a.iter().all(|(k, x)| {
            b.get(k).is_some_and(|y| {
                match (
                    x.as_str().and_then(Quantity::parse),
                    y.as_str().and_then(Quantity::parse),
                ) {
                    (Some(p), Some(q)) => p == q,
                    _ => x == y,
                }
            })
        })
}

impl Inner {
    /// Evaluators for every counted resource (the core ones always).
    fn evaluators(&self) -> Arc<Vec<Evaluator>> {
        self.counted
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A quota was added or its hard limits changed (`addQuota`).
    fn add_quota(&self, q: &Value) {
        let key = obj::key(q);
        let status = &q["status"];
        if !lists_equal(&q["spec"]["hard"], &status["hard"]) || status["hard"].is_null() {
            self.priority.add(key);
            return;
        }
        let used = &status["used"];
        let missing: Vec<String> = names(&status["hard"])
            .into_iter()
            .filter(|n| used.get(n).is_none())
            .collect();
        if !missing.is_empty()
            && self
                .evaluators()
                .iter()
                .any(|e| !e.matching(missing.iter()).is_empty())
        {
            self.priority.add(key);
            return;
        }
        self.primary.add(key);
    }

    fn on_quota(&self, d: &Delta) {
        match d.kind {
            DeltaKind::Added => self.add_quota(d.object()),
            // The previous version carries metadata only: a change of `spec.hard` shows as
            // hard limits the status does not have yet.
            DeltaKind::Updated => {
                let q = d.object();
                if !lists_equal(&q["spec"]["hard"], &q["status"]["hard"]) {
                    self.add_quota(q);
                }
            }
            DeltaKind::Deleted => self.primary.add(obj::key(d.object())),
        }
    }

    /// A monitored object changed: queue the quotas of its namespace that track it.
    fn on_change(&self, kind: &Kind, d: &Delta) {
        let replenish = match d.kind {
            DeltaKind::Added => false,
            DeltaKind::Deleted => true,
            DeltaKind::Updated => {
                if *kind == PODS {
                    // Also a resize may have changed what it uses (v1.33 and later
                    // requeue on a change of its containers' status resources).
                    !usage::pod_counts(d.object(), SystemTime::now())
                        || usage::pod_reports_resources(d.object())
                } else {
                    // Upstream requeues on every claim update in v1.34 and later (its
                    // allocated-storage check compares two fresh pointers).
                    *kind == SERVICES || *kind == PERSISTENTVOLUMECLAIMS
                }
            }
        };
        if replenish {
            self.replenish(*kind, obj::namespace(d.object()));
        }
    }

    fn replenish(&self, kind: Kind, ns: &str) {
        let Some(env) = self.env.get() else { return };
        if ns.is_empty() {
            return;
        }
        let e = Evaluator::for_kind(kind);
        for q in env.cache.store(RESOURCEQUOTAS).list_namespace(ns) {
            let hard = names(&q["status"]["hard"]);
            if !e.matching(hard.iter()).is_empty() {
                self.primary.add(obj::key(&q));
            }
        }
    }

    fn enqueue_all(&self) {
        let Some(env) = self.env.get() else { return };
        for k in env.cache.store(RESOURCEQUOTAS).keys() {
            self.primary.add(k);
        }
        log::debug!("{NAME}: queued all resource quotas for full calculation of usage");
    }

    fn work(&self, queue: &WorkQueue<String>, key: &String) {
        let result = {
            let _running = self.monitors.get().map(|m| m.working());
            self.sync(key)
        };
        match result {
            Ok(()) => queue.forget(key),
            Err(e) => {
                log::error!("{NAME}: syncing {key}: {e}");
                queue.add_rate_limited(key.clone());
            }
        }
    }

    /// `syncResourceQuota`: compute, and write the status if it changed.
    fn sync(&self, key: &str) -> crate::Result<()> {
        let Some(env) = self.env.get() else {
            return Ok(());
        };
        let Some(q) = env.cache.store(RESOURCEQUOTAS).get(key) else {
            log::info!("{NAME}: resource quota {key} has been deleted");
            return Ok(());
        };
        let now = SystemTime::now();
        let Some(status) = desired_status(&env.cache, &q, &self.evaluators(), now, &self.pods)
        else {
            return Ok(());
        };
        let mut o = (*q).clone();
        o["status"] = status;
        let shape = env.cache.write_shape(RESOURCEQUOTAS);
        let v = env
            .client
            .update_shaped(&RESOURCEQUOTAS, &o, Some("status"), shape.as_deref())?;
        log::debug!("{NAME}: updated the status of resource quota {key}");
        env.cache.observe_write(RESOURCEQUOTAS, &v);
        Ok(())
    }
}

/// Evaluators for `kinds` and the core resources.
fn evaluators_for(mut kinds: BTreeSet<Kind>) -> Vec<Evaluator> {
    kinds.extend([PODS, SERVICES, PERSISTENTVOLUMECLAIMS]);
    kinds.into_iter().map(Evaluator::for_kind).collect()
}

/// The status a quota should have, or None when it has it already.
pub fn desired_status(
    cache: &Cache,
    q: &Value,
    evaluators: &[Evaluator],
    now: SystemTime,
    pods: &podmemo::PodMemo,
) -> Option<Value> {
    let hard = &q["spec"]["hard"];
    let status = &q["status"];
    let mut dirty =
        !lists_equal(hard, &status["hard"]) || status["hard"].is_null() || status["used"].is_null();
    let hard_names = names(hard);
    let used = calculate_usage(cache, q, &hard_names, evaluators, now, Some(pods));
    // Usage nothing here measures keeps its old value; names not in `hard` are dropped.
    let old_used = status["used"].as_object();
    let mut new_used = Map::new();
    for n in &hard_names {
        if let Some(v) = used.get(n) {
            new_used.insert(n.clone(), Value::String(v.to_string()));
        } else if let Some(v) = old_used.and_then(|m| m.get(n)) {
            new_used.insert(n.clone(), v.clone());
        }
    }
    let new_used = Value::Object(new_used);
    dirty = dirty || !lists_equal(&new_used, &status["used"]);
    if !dirty {
        return None;
    }
    let hard = if hard.is_object() {
        hard.clone()
    } else {
        Value::Object(Map::new())
    };
    Some(serde_json::json!({"hard": hard, "used": new_used}))
}

/// `quota.CalculateUsage`: the usage of every resource of `hard` some evaluator measures.
pub fn calculate_usage(
    cache: &Cache,
    q: &Value,
    hard: &[String],
    evaluators: &[Evaluator],
    now: SystemTime,
    pods: Option<&podmemo::PodMemo>,
) -> ResourceList {
    let scopes = Scopes::of(q);
    let ns = obj::namespace(q);
    let mut used: ResourceList = BTreeMap::new();
    let matched: BTreeSet<String> = evaluators
        .iter()
        .flat_map(|e| e.matching(hard.iter()))
        .collect();
    for e in evaluators {
        let mine = e.matching(matched.iter());
        if mine.is_empty() {
            continue;
        }
        let stats = e.usage_stats(cache, ns, &scopes, &mine, now, pods);
        usage::add(&mut used, &stats);
    }
    used.retain(|k, _| matched.contains(k));
    used
}

impl SelfDriven for ResourceQuotaController {
    fn register(&self, cache: &Arc<Cache>) {
        let weak = Arc::downgrade(&self.inner);
        cache
            .informer(RESOURCEQUOTAS)
            .add_handler(Arc::new(move |d: &Delta| {
                if let Some(i) = weak.upgrade() {
                    i.on_quota(d);
                }
            }));
        for w in [POD_WATCH, SERVICE_WATCH, PVC_WATCH] {
            cache.informer_for(&w);
        }
        if self.claims {
            cache.informer_for(&RESOURCECLAIM_WATCH);
            if crate::config::gates::enabled("DRAExtendedResource") {
                cache
                    .informer_for(&DEVICECLASS_WATCH)
                    .add_handler(Arc::new(|d: &Delta| {
                        dra::classes()
                            .write()
                            .unwrap_or_else(|p| p.into_inner())
                            .apply(d)
                    }));
            }
        }
    }

    fn start(&self, env: &RunEnv) -> Vec<JoinHandle<()>> {
        let _ = self.inner.env.set(Env {
            cache: env.cache.clone(),
            client: env.client.clone(),
        });
        let (observe, synced) = (Arc::downgrade(&self.inner), Arc::downgrade(&self.inner));
        let run = env.clone();
        let cfg = MonitorsConfig {
            name: NAME,
            verbs: VERBS,
            ignore: ignored,
            period: DISCOVERY_PERIOD,
            pause_workers: true,
            keep_failed_groups: KeepFailed::All,
            on_delta: Arc::new(move |kind: &Kind, d: &Delta| {
                if let Some(i) = observe.upgrade() {
                    i.on_change(kind, d);
                }
            }),
            on_synced: Arc::new(move |first, all| {
                let Some(i) = synced.upgrade() else { return };
                if let Some(m) = i.monitors.get() {
                    let set = served_with(&m.discovery(), VERBS, ignored);
                    *i.counted.write().unwrap_or_else(|p| p.into_inner()) =
                        Arc::new(evaluators_for(set));
                }
                if !first {
                    if all {
                        log::info!("{NAME}: synced quota controller with discovery");
                    }
                    return;
                }
                log::info!("{NAME}: caches synced; starting the resource quota workers");
                for q in [i.primary.clone(), i.priority.clone()] {
                    let (inner, queue) = (i.clone(), q.clone());
                    run.serve(NAME, q, i.workers, move |key: &String| {
                        inner.work(&queue, key)
                    });
                }
                i.enqueue_all();
                let weak = Arc::downgrade(&i);
                crate::runtime::timer::every(i.sync_period, move || {
                    weak.upgrade().map(|i| i.enqueue_all()).is_some()
                });
            }),
            on_sync_error: Arc::new(|| {}),
        };
        let (m, thread) =
            Monitors::start(cfg, env.cache.clone(), env.client.clone(), env.stop.clone());
        let _ = self.inner.monitors.set(m);
        thread.into_iter().collect()
    }

    fn shutdown(&self) {
        self.inner.primary.shut_down();
        self.inner.priority.shut_down();
        if let Some(m) = self.inner.monitors.get() {
            m.wake();
        }
    }
}
