//! `/metrics`: the Prometheus text exposition (format 0.0.4) of the metric families
//! kube-controller-manager's dashboards and alerts read, with upstream's names, labels, help
//! texts and buckets, written by hand.
//!
//! Sources:
//! * `workqueue_*{name}`: every named work queue (`queue::WorkQueue`) registers itself here
//!   (weakly); queues sharing a name are summed, as they share one series upstream.
//! * `rest_client_requests_total{code,host,method}` (every attempt, `<error>` when no answer
//!   came) and `rest_client_request_duration_seconds{host,verb}` (a whole call with its
//!   retries), fed by the API client.
//! * `leader_election_master_status{name}`, `running_managed_controllers{manager,name}`.
//! * `process_*`, read from `/proc/self` at scrape time (network bytes from its `net/dev`).
//! * `registered_metrics_total` and the registry's other counters, computed over the rest.
//! * Collectors registered at run time ([`register_collector`]), e.g. the cache gauges
//!   `edgekcm_cache_objects{resource}` and `edgekcm_cache_bytes{resource}`.
//!
//! Families are written sorted by name, series sorted by their label values, labels sorted
//! by name with `le` last, numbers formatted as Go's `strconv.FormatFloat(v, 'g', -1, 64)`:
//! the output reads like upstream's, byte for byte where the values agree.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

mod meta;
mod process;
mod rest;
mod text;
mod workqueue;

pub use meta::{build_info, version_info};
pub use process::{parse_limit, parse_proc_stat, process_start_unix, ProcessStats};
pub use rest::{host_of, rest_request_latency, rest_request_result, REST_LATENCY_BUCKETS};
pub use text::{encode, format_float, CONTENT_TYPE};
pub use workqueue::{Histogram, QueueStats, DURATION_BUCKETS};

use process::process_families;
use rest::rest_client_families;

/// The `manager` label of `running_managed_controllers`.
pub const MANAGER_NAME: &str = "kube-controller-manager";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
}

impl MetricType {
    fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum SampleValue {
    Scalar(f64),
    Histogram(Histogram),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: Vec<(String, String)>,
    pub value: SampleValue,
}

/// One metric family: `# HELP`, `# TYPE` and its series.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: String,
    pub help: String,
    pub kind: MetricType,
    pub samples: Vec<Sample>,
}

fn owned_labels(labels: &[(&str, &str)]) -> Vec<(String, String)> {
    labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Family {
    pub fn new(name: &str, help: &str, kind: MetricType) -> Self {
        Family {
            name: name.to_string(),
            help: help.to_string(),
            kind,
            samples: Vec::new(),
        }
    }

    /// A family of Kubernetes' metrics framework at stability ALPHA (help prefixed `[ALPHA] `).
    pub fn alpha(name: &str, help: &str, kind: MetricType) -> Self {
        Family::new(name, &format!("[ALPHA] {help}"), kind)
    }

    pub fn push(&mut self, labels: &[(&str, &str)], v: f64) {
        self.samples.push(Sample {
            labels: owned_labels(labels),
            value: SampleValue::Scalar(v),
        });
    }

    pub fn push_histogram(&mut self, labels: &[(&str, &str)], h: Histogram) {
        self.samples.push(Sample {
            labels: owned_labels(labels),
            value: SampleValue::Histogram(h),
        });
    }
}

/// Something that can report a queue's metrics (implemented by `WorkQueue`).
pub trait QueueMetrics: Send + Sync {
    fn queue_stats(&self) -> QueueStats;
}

/// Produces families at scrape time.
pub type Collector = Arc<dyn Fn() -> Vec<Family> + Send + Sync>;

#[derive(Default)]
struct Registry {
    /// (code, host, method) -> count.
    rest_results: Mutex<BTreeMap<(String, String, String), u64>>,
    /// (host, verb) -> latency.
    rest_latency: Mutex<BTreeMap<(String, String), Histogram>>,
    leader: Mutex<BTreeMap<String, f64>>,
    /// (manager, name) -> 0/1.
    controllers: Mutex<BTreeMap<(String, String), f64>>,
    queues: Mutex<Vec<Weak<dyn QueueMetrics>>>,
    collectors: Mutex<Vec<(String, Collector)>>,
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Registry::default)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Recording

/// `leader_election_master_status{name}`: 1 while this instance holds the lease.
pub fn set_leader(name: &str, leading: bool) {
    lock(&registry().leader).insert(name.to_string(), if leading { 1.0 } else { 0.0 });
}

/// `running_managed_controllers{manager="kube-controller-manager",name}` = 1.
pub fn controller_started(name: &str) {
    lock(&registry().controllers).insert((MANAGER_NAME.to_string(), name.to_string()), 1.0);
}

/// `running_managed_controllers{...}` = 0.
pub fn controller_stopped(name: &str) {
    lock(&registry().controllers).insert((MANAGER_NAME.to_string(), name.to_string()), 0.0);
}

/// Report this queue in `workqueue_*` for as long as it lives.
pub fn register_queue(q: Weak<dyn QueueMetrics>) {
    let mut queues = lock(&registry().queues);
    queues.retain(|w| w.strong_count() > 0);
    queues.push(q);
}

/// Add (or replace, by `id`) a collector called at every scrape.
pub fn register_collector(id: &str, c: Collector) {
    let mut cs = lock(&registry().collectors);
    cs.retain(|(i, _)| i != id);
    cs.push((id.to_string(), c));
}

// ---------------------------------------------------------------------------------------------
// Gathering

/// Stats of all live named queues, those sharing a name added together.
fn queue_stats() -> Vec<QueueStats> {
    let queues: Vec<Arc<dyn QueueMetrics>> = lock(&registry().queues)
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let mut by_name: BTreeMap<String, QueueStats> = BTreeMap::new();
    for q in queues {
        let s = q.queue_stats();
        if s.name.is_empty() {
            continue;
        }
        match by_name.get_mut(&s.name) {
            None => {
                by_name.insert(s.name.clone(), s);
            }
            Some(t) => {
                t.adds_total += s.adds_total;
                t.depth += s.depth;
                t.retries_total += s.retries_total;
                t.queue_duration.merge(&s.queue_duration);
                t.work_duration.merge(&s.work_duration);
                t.unfinished_work_seconds += s.unfinished_work_seconds;
                t.longest_running_processor_seconds = t
                    .longest_running_processor_seconds
                    .max(s.longest_running_processor_seconds);
            }
        }
    }
    by_name.into_values().collect()
}

fn workqueue_families() -> Vec<Family> {
    use MetricType::*;
    let stats = queue_stats();
    let mut depth = Family::alpha("workqueue_depth", "Current depth of workqueue", Gauge);
    let mut adds = Family::alpha(
        "workqueue_adds_total",
        "Total number of adds handled by workqueue",
        Counter,
    );
    let mut latency = Family::alpha(
        "workqueue_queue_duration_seconds",
        "How long in seconds an item stays in workqueue before being requested.",
        Histogram,
    );
    let mut work = Family::alpha(
        "workqueue_work_duration_seconds",
        "How long in seconds processing an item from workqueue takes.",
        Histogram,
    );
    let mut unfinished = Family::alpha(
        "workqueue_unfinished_work_seconds",
        "How many seconds of work has done that is in progress and hasn't been observed by \
         work_duration. Large values indicate stuck threads. One can deduce the number of \
         stuck threads by observing the rate at which this increases.",
        Gauge,
    );
    let mut longest = Family::alpha(
        "workqueue_longest_running_processor_seconds",
        "How many seconds has the longest running processor for workqueue been running.",
        Gauge,
    );
    let mut retries = Family::alpha(
        "workqueue_retries_total",
        "Total number of retries handled by workqueue",
        Counter,
    );
    for s in stats {
        let l = [("name", s.name.as_str())];
        depth.push(&l, s.depth as f64);
        adds.push(&l, s.adds_total as f64);
        latency.push_histogram(&l, s.queue_duration);
        work.push_histogram(&l, s.work_duration);
        unfinished.push(&l, s.unfinished_work_seconds);
        longest.push(&l, s.longest_running_processor_seconds);
        retries.push(&l, s.retries_total as f64);
    }
    vec![depth, adds, latency, work, unfinished, longest, retries]
}

fn leader_families() -> Vec<Family> {
    let mut leader = Family::alpha(
        "leader_election_master_status",
        "Gauge of if the reporting system is master of the relevant lease, 0 indicates \
         backup, 1 indicates master. 'name' is the string used to identify the lease. Please \
         make sure to group by name.",
        MetricType::Gauge,
    );
    for (name, v) in lock(&registry().leader).iter() {
        leader.push(&[("name", name)], *v);
    }
    let mut running = Family::alpha(
        "running_managed_controllers",
        "Indicates where instances of a controller are currently running",
        MetricType::Gauge,
    );
    for ((manager, name), v) in lock(&registry().controllers).iter() {
        running.push(&[("manager", manager), ("name", name)], *v);
    }
    vec![leader, running]
}

/// Every family, merged by name.
pub fn gather() -> Vec<Family> {
    let mut all: Vec<Family> = Vec::new();
    all.extend(workqueue_families());
    all.extend(rest_client_families());
    all.extend(leader_families());
    all.extend(process_families());
    all.extend(meta::network_families());
    let collectors: Vec<Collector> = lock(&registry().collectors)
        .iter()
        .map(|(_, c)| c.clone())
        .collect();
    for c in collectors {
        all.extend(c());
    }
    let mut by_name: BTreeMap<String, Family> = BTreeMap::new();
    for f in all {
        match by_name.get_mut(&f.name) {
            Some(t) if t.kind == f.kind => t.samples.extend(f.samples),
            Some(_) => log::warn!("metric {} collected with two types; dropped", f.name),
            None => {
                by_name.insert(f.name.clone(), f);
            }
        }
    }
    let registry = meta::registry_families(by_name.values());
    for f in registry {
        by_name.insert(f.name.clone(), f);
    }
    by_name.into_values().collect()
}

/// The whole exposition, as `/metrics` serves it.
pub fn render() -> String {
    encode(&gather())
}

#[cfg(test)]
mod tests;
