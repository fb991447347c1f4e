//! The `process_*` metrics, read from `/proc/self` at scrape time.

use std::time::{SystemTime, UNIX_EPOCH};

use super::{Family, MetricType};

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

pub(super) fn process_families() -> Vec<Family> {
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
