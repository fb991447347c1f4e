//! The log, in kube-controller-manager's two formats.
//!
//! - `--logging-format=text` (the default): klog's header, so tools that read
//!   kube-controller-manager's log read edgekcm's:
//!   `I1123 22:15:10.486123   12345 reflector.rs:95] message` (severity, month and day, local
//!   time to the microsecond, the process id right-aligned in seven columns, the source file's
//!   name and line). A line with key-value pairs is written as klog writes a structured one:
//!   `E1123 ... main.rs:150] "command failed" err="..."`.
//! - `--logging-format=json`: component-base's JSON lines, one object per line:
//!   `{"ts":<Unix time in milliseconds, a float>,"caller":"cache/reflector.rs:95","msg":"...","v":0}`;
//!   an error has no `"v"` and its error under `"err"`, after any other key.
//!
//! Severities are klog's: `E` for errors, `W` for warnings, `I` for everything else. The lines
//! `-v` asks for (log's debug and trace, shown from `--v=2` and `--v=4`) are `I` lines, as
//! klog's `V(n)` lines are; in JSON their `"v"` is 2 or 4. Writes that fail (a closed pipe) are
//! dropped; they never stop the program.
//!
//! The verbosity can change while the program runs ([`set_verbosity`], behind `PUT
//! /debug/flags/v`): edgekcm's records pass a gate that reads it on every record, and log's
//! global maximum level follows it, so lines above it still cost one comparison.

use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// `--logging-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
}

impl FromStr for Format {
    type Err = String;
    /// Upstream's names and its error for any other.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Format::Text),
            "json" => Ok(Format::Json),
            other => Err(format!(
                "format: Invalid value: {}: Unsupported log format",
                quote(other)
            )),
        }
    }
}

/// Log's level filter for a klog verbosity: 0-1 info, 2-3 debug (one line per applied
/// action), 4 and more trace.
pub fn level_for(verbosity: u32) -> log::LevelFilter {
    match verbosity {
        0 | 1 => log::LevelFilter::Info,
        2 | 3 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    }
}

/// The klog verbosity edgekcm's own lines are shown at (`-v`, `PUT /debug/flags/v`).
static VERBOSITY: AtomicU32 = AtomicU32::new(0);
/// `EDGEKCM_LOG` set: its filter decides alone, and the verbosity changes nothing.
static ENV_FILTER: AtomicBool = AtomicBool::new(false);

/// The current verbosity.
pub fn verbosity() -> u32 {
    VERBOSITY.load(Ordering::Relaxed)
}

/// Show edgekcm's lines up to `v` from now on (klog's `V(n)`: log's debug lines from 2, trace
/// lines from 4).
pub fn set_verbosity(v: u32) {
    VERBOSITY.store(v, Ordering::Relaxed);
    if !ENV_FILTER.load(Ordering::Relaxed) {
        // Other crates' lines stop at warnings; edgekcm's at the verbosity, never below info.
        log::set_max_level(level_for(v));
    }
}

/// Held by the unit tests that change the verbosity, which is global.
#[cfg(test)]
pub(crate) static VERBOSITY_TEST_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether a record of `target` at `level` passes the verbosity (other crates' records are
/// left to the filter built in [`init`]).
fn shown(target: &str, level: log::Level) -> bool {
    ENV_FILTER.load(Ordering::Relaxed)
        || !(target == "edgekcm" || target.starts_with("edgekcm::"))
        || level <= level_for(verbosity())
}

/// env_logger's filter and format, behind the verbosity gate.
struct Gated(env_logger::Logger);

impl log::Log for Gated {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        shown(m.target(), m.level()) && self.0.enabled(m)
    }
    fn log(&self, rec: &log::Record<'_>) {
        if shown(rec.target(), rec.level()) {
            self.0.log(rec);
        }
    }
    fn flush(&self) {
        self.0.flush();
    }
}

/// Install the logger: edgekcm's own lines at `verbosity` (changeable later with
/// [`set_verbosity`]), other crates' warnings and errors; `EDGEKCM_LOG` (env_logger's syntax)
/// overrides the filter.
pub fn init(verbosity: u32, format: Format) {
    let pid = std::process::id();
    let env = std::env::var_os("EDGEKCM_LOG").is_some_and(|v| !v.is_empty());
    let logger = env_logger::Builder::new()
        .filter_level(log::LevelFilter::Warn)
        .filter_module("edgekcm", log::LevelFilter::Trace)
        .parse_env("EDGEKCM_LOG")
        .format(move |buf, rec| {
            use std::io::Write as _;
            let line = Line::of(rec);
            let now = SystemTime::now();
            let text = match format {
                Format::Text => line.klog(now, local_offset(now), pid),
                Format::Json => line.json(now),
            };
            buf.write_all(text.as_bytes())
        })
        .build();
    let env_max = logger.filter();
    if log::set_boxed_logger(Box::new(Gated(logger))).is_err() {
        return; // a logger is installed already
    }
    ENV_FILTER.store(env, Ordering::Relaxed);
    if env {
        VERBOSITY.store(verbosity, Ordering::Relaxed);
        log::set_max_level(env_max);
    } else {
        set_verbosity(verbosity);
    }
}

/// One record, taken apart.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub level: log::Level,
    /// The source file as the compiler names it (`src/cache/reflector.rs`).
    pub file: String,
    pub line: u32,
    pub msg: String,
    /// Key-value pairs in the order given; `err` is one of them.
    pub kvs: Vec<(String, String)>,
}

impl Line {
    pub fn of(rec: &log::Record<'_>) -> Line {
        struct Collect(Vec<(String, String)>);
        impl<'kvs> log::kv::VisitSource<'kvs> for Collect {
            fn visit_pair(
                &mut self,
                key: log::kv::Key<'kvs>,
                value: log::kv::Value<'kvs>,
            ) -> Result<(), log::kv::Error> {
                self.0.push((key.to_string(), value.to_string()));
                Ok(())
            }
        }
        let mut kvs = Collect(Vec::new());
        let _ = rec.key_values().visit(&mut kvs);
        Line {
            level: rec.level(),
            file: rec.file().unwrap_or("???").to_string(),
            line: rec.line().unwrap_or(0),
            msg: rec.args().to_string(),
            kvs: kvs.0,
        }
    }

    fn severity(&self) -> char {
        match self.level {
            log::Level::Error => 'E',
            log::Level::Warn => 'W',
            _ => 'I',
        }
    }

    /// klog's verbosity of the line: 0, or the `--v` that shows it.
    fn verbosity(&self) -> u32 {
        match self.level {
            log::Level::Debug => 2,
            log::Level::Trace => 4,
            _ => 0,
        }
    }

    /// klog's text line, newline included. `offset` is the local time's offset from UTC in
    /// seconds.
    pub fn klog(&self, now: SystemTime, offset: i64, pid: u32) -> String {
        let d = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        let local = d.as_secs() as i64 + offset;
        let (_, mo, day, h, mi, s) = crate::compat::timefmt::civil_time(local);
        let base = self.file.rsplit('/').next().unwrap_or(&self.file);
        let mut out = format!(
            "{}{mo:02}{day:02} {h:02}:{mi:02}:{s:02}.{:06} {pid:>7} {base}:{}] ",
            self.severity(),
            d.subsec_micros(),
            self.line
        );
        if self.kvs.is_empty() {
            out.push_str(&self.msg);
        } else {
            out.push_str(&quote(&self.msg));
            for (k, v) in &self.kvs {
                let _ = write!(out, " {k}={}", quote(v));
            }
        }
        out.push('\n');
        out
    }

    /// component-base's JSON line, newline included.
    pub fn json(&self, now: SystemTime) -> String {
        let d = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        let millis = d.as_nanos() as f64 / 1e6;
        let mut out = format!(
            "{{\"ts\":{millis},\"caller\":{},\"msg\":{}",
            quote(&format!("{}:{}", short_caller(&self.file), self.line)),
            quote(&self.msg)
        );
        if self.level != log::Level::Error {
            let _ = write!(out, ",\"v\":{}", self.verbosity());
        }
        // zapr writes the error last.
        let (errs, rest): (Vec<_>, Vec<_>) = self.kvs.iter().partition(|(k, _)| k == "err");
        for (k, v) in rest.into_iter().chain(errs) {
            let _ = write!(out, ",{}:{}", quote(k), quote(v));
        }
        out.push_str("}\n");
        out
    }
}

/// A list for a log line that stays short: `0`, `2 (a, b)`, or the first `max` names and how
/// many more (`52 (configmaps, endpoints, ... and 46 more)`).
pub fn few(items: &[String], max: usize) -> String {
    if items.is_empty() {
        return "0".to_string();
    }
    let shown = items[..items.len().min(max)].join(", ");
    if items.len() > max {
        format!("{} ({shown} and {} more)", items.len(), items.len() - max)
    } else {
        format!("{} ({shown})", items.len())
    }
}

/// A JSON string literal (also what klog's text format writes for a quoted value).
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

/// zap's short caller: the file's directory and name (`cache/reflector.rs`).
fn short_caller(file: &str) -> &str {
    match file.rmatch_indices('/').nth(1) {
        Some((i, _)) => &file[i + 1..],
        None => file,
    }
}

/// Seconds east of UTC of the local time zone at `t` (0 where it cannot be known).
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn local_offset(t: SystemTime) -> i64 {
    use std::os::raw::{c_char, c_int, c_long};
    // `struct tm` of glibc and musl on 64-bit Linux.
    #[repr(C)]
    struct Tm {
        tm_sec: c_int,
        tm_min: c_int,
        tm_hour: c_int,
        tm_mday: c_int,
        tm_mon: c_int,
        tm_year: c_int,
        tm_wday: c_int,
        tm_yday: c_int,
        tm_isdst: c_int,
        tm_gmtoff: c_long,
        tm_zone: *const c_char,
    }
    extern "C" {
        fn localtime_r(t: *const i64, out: *mut Tm) -> *mut Tm;
    }
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let mut tm = Tm {
        tm_sec: 0,
        tm_min: 0,
        tm_hour: 0,
        tm_mday: 0,
        tm_mon: 0,
        tm_year: 0,
        tm_wday: 0,
        tm_yday: 0,
        tm_isdst: 0,
        tm_gmtoff: 0,
        tm_zone: std::ptr::null(),
    };
    // SAFETY: localtime_r is reentrant; it reads the time_t (64-bit on these targets) and
    // fills the struct we own, whose layout is the C library's `struct tm`.
    let filled = unsafe { localtime_r(&secs, &mut tm) };
    if filled.is_null() {
        0
    } else {
        tm.tm_gmtoff as i64
    }
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn local_offset(_: SystemTime) -> i64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn line(level: log::Level, msg: &str, kvs: &[(&str, &str)]) -> Line {
        Line {
            level,
            file: "src/cache/reflector.rs".into(),
            line: 95,
            msg: msg.into(),
            kvs: kvs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    // 2023-11-23T22:15:10.486123Z
    fn at() -> SystemTime {
        UNIX_EPOCH + Duration::new(1_700_777_710, 486_123_456)
    }

    #[test]
    fn klog_header() {
        let l = line(log::Level::Info, "cache pods: synced", &[]);
        assert_eq!(
            l.klog(at(), 0, 12345),
            "I1123 22:15:10.486123   12345 reflector.rs:95] cache pods: synced\n"
        );
        // Local time, and each severity.
        let l = line(log::Level::Warn, "w", &[]);
        assert!(l
            .klog(at(), 3600, 7)
            .starts_with("W1123 23:15:10.486123       7 "));
        assert!(line(log::Level::Error, "e", &[])
            .klog(at(), 0, 1)
            .starts_with("E1123 "));
        // -v lines are I lines.
        assert!(line(log::Level::Debug, "d", &[])
            .klog(at(), 0, 1)
            .starts_with("I1123 "));
        assert!(line(log::Level::Trace, "t", &[])
            .klog(at(), 0, 1)
            .starts_with("I1123 "));
        // Past midnight on New Year's Eve, in a zone behind UTC.
        let ny = UNIX_EPOCH + Duration::from_secs(1_704_067_200); // 2024-01-01T00:00:00Z
        assert!(line(log::Level::Info, "x", &[])
            .klog(ny, -3600, 1)
            .starts_with("I1231 23:00:00.000000 "));
    }

    #[test]
    fn klog_structured() {
        let l = line(
            log::Level::Error,
            "command failed",
            &[("err", "open \"/x\": no such file or directory")],
        );
        assert_eq!(
            l.klog(at(), 0, 42),
            "E1123 22:15:10.486123      42 reflector.rs:95] \"command failed\" err=\"open \\\"/x\\\": no such file or directory\"\n"
        );
    }

    #[test]
    fn json_lines() {
        let l = line(log::Level::Info, "synced \"pods\"", &[]);
        let text = l.json(at());
        assert!(text.ends_with("}\n"));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["caller"], "cache/reflector.rs:95");
        assert_eq!(v["msg"], "synced \"pods\"");
        assert_eq!(v["v"], 0);
        let ts = v["ts"].as_f64().unwrap();
        assert!((ts - 1_700_777_710_486.123).abs() < 0.01, "{ts}");
        // Field order as zapr writes it.
        assert!(text.starts_with("{\"ts\":1700777710486.123"), "{text}");
        assert!(text.contains(",\"caller\":\"cache/reflector.rs:95\",\"msg\":"));

        let d: serde_json::Value =
            serde_json::from_str(&line(log::Level::Debug, "d", &[]).json(at())).unwrap();
        assert_eq!(d["v"], 2);
        let e = line(
            log::Level::Error,
            "command failed",
            &[("err", "boom"), ("controller", "x")],
        )
        .json(at());
        assert!(
            e.ends_with(",\"msg\":\"command failed\",\"controller\":\"x\",\"err\":\"boom\"}\n"),
            "{e}"
        );
        assert!(!e.contains("\"v\""));
    }

    #[test]
    fn short_callers() {
        assert_eq!(short_caller("src/cache/reflector.rs"), "cache/reflector.rs");
        assert_eq!(short_caller("src/run.rs"), "src/run.rs");
        assert_eq!(short_caller("main.rs"), "main.rs");
    }

    #[test]
    fn few_names() {
        let names = |n: usize| (0..n).map(|i| format!("r{i}")).collect::<Vec<_>>();
        assert_eq!(few(&names(0), 3), "0");
        assert_eq!(few(&names(2), 3), "2 (r0, r1)");
        assert_eq!(few(&names(5), 3), "5 (r0, r1, r2 and 2 more)");
    }

    #[test]
    fn verbosity_gate() {
        use log::Level::{Debug, Info, Trace};
        let _serial = VERBOSITY_TEST_LOCK
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        set_verbosity(0);
        assert!(shown("edgekcm::manager::apply", Info));
        assert!(!shown("edgekcm::manager::apply", Debug));
        assert!(
            shown("ureq", Trace),
            "other crates are left to env_logger's filter"
        );
        assert!(
            shown("edgekcmx", Trace),
            "another crate, not a module of edgekcm"
        );
        set_verbosity(2);
        assert_eq!(verbosity(), 2);
        assert_eq!(log::max_level(), log::LevelFilter::Debug);
        assert!(shown("edgekcm", Debug));
        assert!(!shown("edgekcm::run", Trace));
        set_verbosity(5);
        assert!(shown("edgekcm::run", Trace));
        assert_eq!(log::max_level(), log::LevelFilter::Trace);
        set_verbosity(0);
        assert_eq!(log::max_level(), log::LevelFilter::Info);
        assert!(!shown("edgekcm::run", Debug));
    }

    #[test]
    fn formats() {
        assert_eq!("text".parse(), Ok(Format::Text));
        assert_eq!("json".parse(), Ok(Format::Json));
        assert_eq!(
            "xml".parse::<Format>(),
            Err("format: Invalid value: \"xml\": Unsupported log format".to_string())
        );
    }
}
