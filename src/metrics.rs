//! `/metrics`: the Prometheus text exposition (format 0.0.4) of the metric families
//! kube-controller-manager's dashboards and alerts read, with upstream's names, labels, help
//! texts and buckets, written by hand.
//!
//! Sources:
//! * `workqueue_*{name}`: every named [`crate::queue::WorkQueue`] registers itself here
//!   (weakly); queues sharing a name are summed, as they share one series upstream.
//! * `rest_client_requests_total{code,host,method}` (every attempt, `<error>` when no answer
//!   came) and `rest_client_request_duration_seconds{host,verb}` (a whole call with its
//!   retries), fed by the API client.
//! * `leader_election_master_status{name}`, `running_managed_controllers{manager,name}`.
//! * `process_*`, read from `/proc/self` at scrape time.
//! * Collectors registered at run time ([`register_collector`]), e.g. the cache gauges
//!   `edgekcm_cache_objects{resource}` and `edgekcm_cache_bytes{resource}`.
//!
//! Families are written sorted by name, series sorted by their label values, labels sorted
//! by name with `le` last, numbers formatted as Go's `strconv.FormatFloat(v, 'g', -1, 64)`:
//! the output reads like upstream's, byte for byte where the values agree.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::queue::{Histogram, QueueStats};

/// The content type of the text format, as promhttp sends it.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Buckets of `rest_client_request_duration_seconds`.
pub const REST_LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

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

/// `host[:port]` of a base URL, client-go's `host` label.
pub fn host_of(base_url: &str) -> &str {
    let rest = base_url
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or(base_url);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = &rest[..end];
    // Credentials in the URL are not part of the host.
    host.rsplit_once('@').map(|(_, h)| h).unwrap_or(host)
}

/// One HTTP attempt made by the API client; `status` None when no answer came.
pub fn rest_request_result(base_url: &str, method: &str, status: Option<u16>) {
    let code = status.map_or_else(|| "<error>".to_string(), |s| s.to_string());
    let key = (code, host_of(base_url).to_string(), method.to_string());
    *lock(&registry().rest_results).entry(key).or_insert(0) += 1;
}

/// One whole API call (retries and waits included).
pub fn rest_request_latency(base_url: &str, verb: &str, took: Duration) {
    let key = (host_of(base_url).to_string(), verb.to_string());
    lock(&registry().rest_latency)
        .entry(key)
        .or_insert_with(|| Histogram::new(&REST_LATENCY_BUCKETS))
        .observe(took.as_secs_f64());
}

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

/// `edgekcm_cache_objects{resource}` and `edgekcm_cache_bytes{resource}` for this cache
/// (informers of one resource with different field selectors are added together).
pub fn register_cache(cache: &Arc<crate::cache::Cache>) {
    let weak = Arc::downgrade(cache);
    register_collector(
        "cache",
        Arc::new(move || {
            let Some(cache) = weak.upgrade() else {
                return Vec::new();
            };
            let mut per: BTreeMap<String, (usize, usize)> = BTreeMap::new();
            for (kind, objects, bytes) in cache.sizes() {
                let resource = if kind.group.is_empty() {
                    kind.plural.to_string()
                } else {
                    format!("{}.{}", kind.plural, kind.group)
                };
                let e = per.entry(resource).or_default();
                e.0 += objects;
                e.1 += bytes;
            }
            let mut objects = Family::new(
                "edgekcm_cache_objects",
                "Objects held in the shared informer cache, by resource.",
                MetricType::Gauge,
            );
            let mut bytes = Family::new(
                "edgekcm_cache_bytes",
                "Approximate bytes held by the shared informer cache, by resource.",
                MetricType::Gauge,
            );
            for (resource, (n, b)) in &per {
                objects.push(&[("resource", resource)], *n as f64);
                bytes.push(&[("resource", resource)], *b as f64);
            }
            vec![objects, bytes]
        }),
    );
}

// ---------------------------------------------------------------------------------------------
// Gathering

fn merge_histogram(into: &mut Histogram, h: &Histogram) {
    if into.buckets.len() != h.buckets.len() {
        return;
    }
    for (a, b) in into.buckets.iter_mut().zip(&h.buckets) {
        a.1 += b.1;
    }
    into.sum += h.sum;
    into.count += h.count;
}

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
                merge_histogram(&mut t.queue_duration, &s.queue_duration);
                merge_histogram(&mut t.work_duration, &s.work_duration);
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

fn rest_client_families() -> Vec<Family> {
    let mut results = Family::alpha(
        "rest_client_requests_total",
        "Number of HTTP requests, partitioned by status code, method, and host.",
        MetricType::Counter,
    );
    for ((code, host, method), n) in lock(&registry().rest_results).iter() {
        results.push(
            &[("code", code), ("host", host), ("method", method)],
            *n as f64,
        );
    }
    let mut latency = Family::alpha(
        "rest_client_request_duration_seconds",
        "Request latency in seconds. Broken down by verb, and host.",
        MetricType::Histogram,
    );
    for ((host, verb), h) in lock(&registry().rest_latency).iter() {
        latency.push_histogram(&[("host", host), ("verb", verb)], h.clone());
    }
    vec![results, latency]
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

/// What `/proc/self` tells about this process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub virtual_bytes: f64,
    pub start_time_seconds: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
    pub max_virtual_bytes: Option<f64>,
}

/// Linux' USER_HZ, the unit of times in `/proc/<pid>/stat` (fixed at 100 for user space).
const USER_HZ: f64 = 100.0;

/// Parse `/proc/<pid>/stat` (utime, stime, starttime, vsize) given the boot time.
pub fn parse_proc_stat(stat: &str, boot_time: Option<f64>) -> Option<ProcessStats> {
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state).
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    let (utime, stime) = (num(11)?, num(12)?);
    let start = num(19);
    Some(ProcessStats {
        cpu_seconds: (utime + stime) / USER_HZ,
        virtual_bytes: num(20).unwrap_or(0.0),
        start_time_seconds: boot_time.zip(start).map(|(b, s)| b + s / USER_HZ),
        ..ProcessStats::default()
    })
}

/// The soft limit of one `/proc/<pid>/limits` row ("Max open files"), unlimited as u64::MAX.
pub fn parse_limit(limits: &str, row: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with(row))?;
    let soft = line[row.len()..].split_whitespace().next()?;
    if soft == "unlimited" {
        return Some(u64::MAX as f64);
    }
    soft.parse::<u64>().ok().map(|v| v as f64)
}

fn read_process_stats() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    });
    let mut p = parse_proc_stat(&stat, boot)?;
    // VmRSS is the resident set in kB (stat's rss field is in pages of unknown size).
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        if let Some(kb) = status.lines().find_map(|l| l.strip_prefix("VmRSS:")) {
            let kb = kb.trim().trim_end_matches("kB").trim();
            p.resident_bytes = kb.parse::<f64>().unwrap_or(0.0) * 1024.0;
        }
    }
    p.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as f64);
    if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
        p.max_fds = parse_limit(&limits, "Max open files");
        p.max_virtual_bytes = parse_limit(&limits, "Max address space");
    }
    Some(p)
}

fn process_families() -> Vec<Family> {
    use MetricType::*;
    let Some(p) = read_process_stats() else {
        return Vec::new();
    };
    let one = |name: &str, help: &str, kind, v: f64| {
        let mut f = Family::new(name, help, kind);
        f.push(&[], v);
        f
    };
    let mut out = vec![
        one(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            Counter,
            p.cpu_seconds,
        ),
        one(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            Gauge,
            p.resident_bytes,
        ),
        one(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            Gauge,
            p.virtual_bytes,
        ),
    ];
    let optional = [
        (
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            p.start_time_seconds,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            p.open_fds,
        ),
        (
            "process_max_fds",
            "Maximum number of open file descriptors.",
            p.max_fds,
        ),
        (
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            p.max_virtual_bytes,
        ),
    ];
    for (name, help, v) in optional {
        if let Some(v) = v {
            out.push(one(name, help, Gauge, v));
        }
    }
    out
}

/// Every family, merged by name.
pub fn gather() -> Vec<Family> {
    let mut all: Vec<Family> = Vec::new();
    all.extend(workqueue_families());
    all.extend(rest_client_families());
    all.extend(leader_families());
    all.extend(process_families());
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
    by_name.into_values().collect()
}

/// The process start time as promhttp's `Process-Start-Time-Unix` header.
pub fn process_start_unix() -> Option<u64> {
    read_process_stats()
        .and_then(|p| p.start_time_seconds)
        .map(|s| s as u64)
        .or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs())
        })
}

// ---------------------------------------------------------------------------------------------
// Text format

/// Go's `strconv.FormatFloat(v, 'g', -1, 64)` with the text format's spellings of the
/// special values (`+Inf`, `-Inf`, `NaN`).
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if v == 0.0 {
        return "0".into();
    }
    // Shortest round-trip digits and the decimal exponent, e.g. "1.2345e6".
    let e = format!("{v:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::with_capacity(24);
    if neg {
        out.push('-');
    }
    // Go: %e when exp < -4 || exp >= eprec, where eprec is 6 for the shortest form.
    if !(-4..6).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        );
        return out;
    }
    if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
        return out;
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        out.push_str(&digits);
        for _ in digits.len()..int_len {
            out.push('0');
        }
    } else {
        out.push_str(&digits[..int_len]);
        out.push('.');
        out.push_str(&digits[int_len..]);
    }
    out
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn write_labels(out: &mut String, labels: &[(String, String)], le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    let le_pair = le.map(|v| ("le".to_string(), v.to_string()));
    for (k, v) in labels.iter().chain(le_pair.iter()) {
        if !first {
            out.push(',');
        }
        first = false;
        let _ = write!(out, "{k}=\"{}\"", escape_label_value(v));
    }
    out.push('}');
}

fn write_line(out: &mut String, name: &str, labels: &[(String, String)], le: Option<&str>, v: f64) {
    out.push_str(name);
    write_labels(out, labels, le);
    out.push(' ');
    out.push_str(&format_float(v));
    out.push('\n');
}

/// Write families in the text format, sorting them by name and their series by labels.
pub fn encode(families: &[Family]) -> String {
    let mut fams: Vec<&Family> = families.iter().collect();
    fams.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = String::new();
    for f in fams {
        if f.samples.is_empty() {
            // As the Prometheus client: a vector with no series is not written at all.
            continue;
        }
        let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.as_str());
        let mut samples: Vec<Sample> = f.samples.clone();
        for s in &mut samples {
            s.labels.sort();
        }
        samples.sort_by(|a, b| a.labels.cmp(&b.labels));
        for s in &samples {
            match &s.value {
                SampleValue::Scalar(v) => write_line(&mut out, &f.name, &s.labels, None, *v),
                SampleValue::Histogram(h) => {
                    let bucket = format!("{}_bucket", f.name);
                    for (le, n) in &h.buckets {
                        write_line(
                            &mut out,
                            &bucket,
                            &s.labels,
                            Some(&format_float(*le)),
                            *n as f64,
                        );
                    }
                    write_line(&mut out, &bucket, &s.labels, Some("+Inf"), h.count as f64);
                    write_line(&mut out, &format!("{}_sum", f.name), &s.labels, None, h.sum);
                    write_line(
                        &mut out,
                        &format!("{}_count", f.name),
                        &s.labels,
                        None,
                        h.count as f64,
                    );
                }
            }
        }
    }
    out
}

/// The whole exposition, as `/metrics` serves it.
pub fn render() -> String {
    encode(&gather())
}

/// The `/metrics` handler for the secure port.
pub fn handler() -> crate::server::Handler {
    Arc::new(|_req: &crate::server::Request| {
        let mut r = crate::server::Response {
            status: 200,
            content_type: CONTENT_TYPE.to_string(),
            body: render().into_bytes(),
            headers: Vec::new(),
        };
        if let Some(t) = process_start_unix() {
            r.headers
                .push(("Process-Start-Time-Unix".to_string(), t.to_string()));
        }
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_float_format() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (11.0, "11"),
            (20000.0, "20000"),
            (123456.0, "123456"),
            (1e6, "1e+06"),
            (67764224.0, "6.7764224e+07"),
            (1.79526508126e9, "1.79526508126e+09"),
            (0.98, "0.98"),
            (0.005, "0.005"),
            (0.0001, "0.0001"),
            (1e-5, "1e-05"),
            (9.999999999999999e-06, "9.999999999999999e-06"),
            (1e-8, "1e-08"),
            (2.592e6, "2.592e+06"),
            (0.102573786, "0.102573786"),
            (u64::MAX as f64, "1.8446744073709552e+19"),
            (-0.5, "-0.5"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
            (12.5, "12.5"),
            (100.0, "100"),
        ];
        for (v, want) in cases {
            assert_eq!(format_float(*v), *want, "{v:e}");
        }
    }

    #[test]
    fn host_label() {
        assert_eq!(host_of("https://127.0.0.1:6443"), "127.0.0.1:6443");
        assert_eq!(host_of("https://k8s.example/base/"), "k8s.example");
        assert_eq!(host_of("http://u:p@h:1/x"), "h:1");
        assert_eq!(host_of("h:2"), "h:2");
    }

    #[test]
    fn proc_parsing() {
        let stat = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 \
                    7 0 12345 1048576 300 18446744073709551615";
        let p = parse_proc_stat(stat, Some(1_700_000_000.0)).unwrap();
        assert_eq!(p.cpu_seconds, 3.0);
        assert_eq!(p.virtual_bytes, 1048576.0);
        assert_eq!(p.start_time_seconds, Some(1_700_000_123.45));
        assert!(parse_proc_stat("garbage", None).is_none());
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 1048576              files     \n\
                      Max address space         unlimited            unlimited            bytes     \n";
        assert_eq!(parse_limit(limits, "Max open files"), Some(1024.0));
        assert_eq!(
            parse_limit(limits, "Max address space"),
            Some(u64::MAX as f64)
        );
        assert_eq!(parse_limit(limits, "Max nothing"), None);
    }

    #[test]
    fn encoding_sorts_and_escapes() {
        let mut g = Family::new("b_gauge", "Help with \\ and\nnewline.", MetricType::Gauge);
        g.push(&[("z", "2"), ("a", "x\"y")], 1.5);
        g.push(&[("z", "1"), ("a", "x\"y")], 2.0);
        g.push(&[("a", "a\\b\nc"), ("z", "0")], 0.0);
        let mut h = Family::new("a_hist", "H.", MetricType::Histogram);
        let mut hist = Histogram::new(&[0.1, 1.0]);
        hist.observe(0.05);
        hist.observe(0.5);
        hist.observe(5.0);
        h.push_histogram(&[("name", "q")], hist);
        let empty = Family::new("c_empty", "nothing", MetricType::Counter);
        let text = encode(&[g, h, empty]);
        assert_eq!(
            text,
            "# HELP a_hist H.\n# TYPE a_hist histogram\n\
             a_hist_bucket{name=\"q\",le=\"0.1\"} 1\n\
             a_hist_bucket{name=\"q\",le=\"1\"} 2\n\
             a_hist_bucket{name=\"q\",le=\"+Inf\"} 3\n\
             a_hist_sum{name=\"q\"} 5.55\n\
             a_hist_count{name=\"q\"} 3\n\
             # HELP b_gauge Help with \\\\ and\\nnewline.\n# TYPE b_gauge gauge\n\
             b_gauge{a=\"a\\\\b\\nc\",z=\"0\"} 0\n\
             b_gauge{a=\"x\\\"y\",z=\"1\"} 2\n\
             b_gauge{a=\"x\\\"y\",z=\"2\"} 1.5\n"
        );
    }

    #[test]
    fn rest_and_leader_series() {
        rest_request_result("https://unit-test-host:1", "GET", Some(200));
        rest_request_result("https://unit-test-host:1", "GET", Some(200));
        rest_request_result("https://unit-test-host:1", "POST", None);
        rest_request_latency("https://unit-test-host:1", "GET", Duration::from_millis(30));
        set_leader("unit-test-lease", true);
        let text = render();
        assert!(text.contains(
            "rest_client_requests_total{code=\"200\",host=\"unit-test-host:1\",method=\"GET\"} 2\n"
        ));
        assert!(text.contains(
            "rest_client_requests_total{code=\"<error>\",host=\"unit-test-host:1\",method=\"POST\"} 1\n"
        ));
        assert!(text.contains(
            "rest_client_request_duration_seconds_bucket{host=\"unit-test-host:1\",verb=\"GET\",le=\"0.025\"} 0\n\
             rest_client_request_duration_seconds_bucket{host=\"unit-test-host:1\",verb=\"GET\",le=\"0.1\"} 1\n"
        ));
        assert!(text.contains("leader_election_master_status{name=\"unit-test-lease\"} 1\n"));
        assert!(text.contains("# TYPE process_cpu_seconds_total counter\n"));
        assert!(
            text.contains(
                "# HELP workqueue_adds_total [ALPHA] Total number of adds handled by workqueue\n"
            ) || !text.contains("workqueue_adds_total{")
        );
    }
}
