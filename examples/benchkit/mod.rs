//! What every benchmark example shares: its flags, the API server it runs against (a real one
//! from `KCM_E2E_KUBECONFIG`, else an in-process sandbox), the controller managers it compares
//! (edgekcm, and upstream from `KCM_BENCH_UPSTREAM`), each run as a child process whose CPU
//! seconds and peak RSS are read from `/proc`, and the result table. An example takes it with
//! `#[path = "benchkit/mod.rs"] mod benchkit;`.
//!
//! Environment (every bench):
//! - `KCM_E2E_KUBECONFIG`: a real cluster (admin credentials for the bench's own writes);
//!   else an in-process sandbox API server.
//! - `KCM_BENCH_EDGEKCM_ARGS` (else `KCM_E2E_KCM_ARGS`): edgekcm's flags against a real
//!   cluster; default `--kubeconfig=<the bench's>`.
//! - `KCM_BENCH_EDGEKCM_BIN`: the edgekcm binary; default `edgekcm` in the profile directory
//!   the example was built in (`cargo build --release --bin edgekcm` first).
//! - `KCM_BENCH_UPSTREAM`: the whole command line of another controller manager (upstream
//!   kube-controller-manager) run on the same workload after edgekcm.
//! - `KCM_BENCH_KEEP`: keep the scratch directory with each manager's log.
//!
//! Each bench adds its own flags to both command lines (`--controllers=...`,
//! `--leader-elect=false`, `--secure-port=0`, ...): a flag given twice counts by its last value
//! in both managers.

#![allow(dead_code)]

use edgekcm::api::client::{Client, DeleteOptions, ListOptions, WatchOptions};
use edgekcm::api::kubeconfig;
use edgekcm::api::resources::{Kind, NAMESPACES, SERVICEACCOUNTS};
use edgekcm::api::trim::Shape;
use edgekcm::api::watch::EventType;
use edgekcm_sandbox::{Sandbox, SandboxOptions};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Which API server a bench runs against, for its first line: `/version`'s gitVersion and
/// where it came from (`KCM_E2E_KUBECONFIG`'s path, else the sandbox in this process).
pub fn server_version(admin: &Client, kubeconfig: Option<&str>) -> String {
    let version = admin
        .get_path("/version")
        .ok()
        .and_then(|v| v["gitVersion"].as_str().map(str::to_string))
        .unwrap_or_else(|| "(no /version)".into());
    match kubeconfig {
        Some(p) => format!("kube-apiserver {version} (KCM_E2E_KUBECONFIG={p})"),
        None => format!("sandbox API server, serving as {version}"),
    }
}

/// Run `bench`, printing its error and exiting 1 when it fails.
pub fn main(bench: impl FnOnce() -> Res<()>) {
    if let Err(e) = bench() {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

// ---- flags ----

/// The command line's `--name=value` and `--name` arguments, taken by name; whatever is left
/// when `done` is called is an error naming it.
pub struct Args {
    given: Vec<(String, Option<String>)>,
}

impl Args {
    pub fn parse() -> Args {
        Args::from(std::env::args().skip(1))
    }

    pub fn from(args: impl IntoIterator<Item = String>) -> Args {
        let given = args
            .into_iter()
            .map(|a| match a.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
                None => (a, None),
            })
            .collect();
        Args { given }
    }

    fn take(&mut self, name: &str) -> Option<Option<String>> {
        let i = self.given.iter().rposition(|(k, _)| k == name)?;
        let v = self.given.remove(i).1;
        self.given.retain(|(k, _)| k != name);
        Some(v)
    }

    /// `--name=N`, else `default`.
    pub fn num(&mut self, name: &str, default: u64) -> Res<u64> {
        match self.take(name) {
            None => Ok(default),
            Some(Some(v)) => v
                .parse()
                .map_err(|_| format!("{name}: {v:?} is not a number").into()),
            Some(None) => Err(format!("{name} needs a value ({name}=N)").into()),
        }
    }

    /// `--name=N` as a count, else `default`.
    pub fn count(&mut self, name: &str, default: usize) -> Res<usize> {
        Ok(self.num(name, default as u64)? as usize)
    }

    /// `--name=SECONDS`, else `default` seconds.
    pub fn secs(&mut self, name: &str, default: u64) -> Res<Duration> {
        Ok(Duration::from_secs(self.num(name, default)?))
    }

    /// `--name` given (without a value).
    pub fn flag(&mut self, name: &str) -> Res<bool> {
        match self.take(name) {
            None => Ok(false),
            Some(None) => Ok(true),
            Some(Some(v)) => Err(format!("{name} takes no value (got {v:?})").into()),
        }
    }

    /// An error for any argument not taken.
    pub fn done(self) -> Res<()> {
        match self.given.first() {
            None => Ok(()),
            Some((k, _)) => Err(format!("unknown argument {k:?} (see the file's header)").into()),
        }
    }
}

// ---- the API server ----

/// The API server the bench runs against, the bench's admin client and a scratch directory.
pub struct Cluster {
    pub admin: Client,
    pub kubeconfig: PathBuf,
    pub real: bool,
    pub work: PathBuf,
    _sandbox: Option<Sandbox>,
}

impl Cluster {
    /// `KCM_E2E_KUBECONFIG`'s cluster, else a sandbox API server started here.
    pub fn from_env(tag: &str) -> Res<Cluster> {
        let work = std::env::temp_dir().join(format!("edgekcm-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&work)?;
        let real = std::env::var("KCM_E2E_KUBECONFIG")
            .ok()
            .filter(|s| !s.is_empty());
        let (sandbox, kubeconfig) = match &real {
            Some(p) => (None, PathBuf::from(p)),
            None => {
                let sb = Sandbox::start(SandboxOptions::default())?;
                let kc = work.join("kubeconfig");
                sb.write_kubeconfig(&kc)?;
                (Some(sb), kc)
            }
        };
        let admin = Client::new(&kubeconfig::load(Some(&kubeconfig), None)?, 0.0, 1, tag)?;
        println!("API server: {}", server_version(&admin, real.as_deref()));
        Ok(Cluster {
            admin,
            kubeconfig,
            real: real.is_some(),
            work,
            _sandbox: sandbox,
        })
    }

    /// The managers to compare: edgekcm (unless `skip_edgekcm`) and, on a real cluster,
    /// `KCM_BENCH_UPSTREAM`'s, each with `extra` appended.
    pub fn managers(&self, extra: &[String], skip_edgekcm: bool) -> Res<Vec<Manager>> {
        let mut out = Vec::new();
        if !skip_edgekcm {
            let args = ["KCM_BENCH_EDGEKCM_ARGS", "KCM_E2E_KCM_ARGS"]
                .iter()
                .find_map(|k| std::env::var(k).ok().filter(|s| !s.trim().is_empty()))
                .filter(|_| self.real)
                .unwrap_or_else(|| format!("--kubeconfig={}", self.kubeconfig.display()));
            let mut cmd = vec![edgekcm_binary()?.display().to_string()];
            cmd.extend(args.split_whitespace().map(str::to_string));
            cmd.extend(extra.iter().cloned());
            out.push(Manager {
                name: "edgekcm".into(),
                cmd,
            });
        }
        if let Ok(up) = std::env::var("KCM_BENCH_UPSTREAM") {
            let mut cmd: Vec<String> = up.split_whitespace().map(str::to_string).collect();
            if !self.real && !cmd.is_empty() {
                // Its command line names its own cluster, not this sandbox.
                println!("KCM_BENCH_UPSTREAM is for a real cluster (KCM_E2E_KUBECONFIG); not run");
            } else if !cmd.is_empty() {
                cmd.extend(extra.iter().cloned());
                out.push(Manager {
                    name: "upstream".into(),
                    cmd,
                });
            }
        }
        Ok(out)
    }

    /// A fresh namespace `<prefix>-<random>` with its `default` ServiceAccount (pods need it
    /// when no serviceaccount controller runs).
    pub fn namespace(&self, prefix: &str) -> Res<String> {
        let ns = format!("{prefix}-{:06x}", fastrand::u32(..0xffffff));
        self.admin.create(
            &NAMESPACES,
            None,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )?;
        let sa =
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
        let _ = self.admin.create(&SERVICEACCOUNTS, Some(&ns), &sa);
        Ok(ns)
    }

    /// Every object of `kind` in `ns` (`None`: cluster-scoped objects whose name starts with
    /// `prefix`) deleted at once, without grace.
    pub fn delete_all(&self, kind: &Kind, ns: Option<&str>, prefix: &str) {
        let Ok(list) = self.admin.list(
            kind,
            ns,
            &ListOptions {
                metadata_only: true,
                ..ListOptions::default()
            },
        ) else {
            return;
        };
        let names: Vec<String> = list
            .items
            .iter()
            .filter_map(|x| x["metadata"]["name"].as_str())
            .filter(|n| n.starts_with(prefix))
            .map(str::to_string)
            .collect();
        let now = DeleteOptions {
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        let _ = parallel(names.len(), 8, |i| {
            let _ = self.admin.delete(kind, ns, &names[i], &now);
            Ok(())
        });
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::env::var_os("KCM_BENCH_KEEP").is_some() {
            println!("logs kept in {}", self.work.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.work);
        }
    }
}

/// `KCM_BENCH_EDGEKCM_BIN`, else `edgekcm` in the profile directory of this example.
pub fn edgekcm_binary() -> Res<PathBuf> {
    if let Ok(p) = std::env::var("KCM_BENCH_EDGEKCM_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot locate the target directory")?
        .join("edgekcm");
    if !bin.exists() {
        return Err(format!(
            "{} does not exist: build it first (cargo build --release --bin edgekcm)",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}

// ---- the controller manager under test ----

/// A controller manager to run: its table name and whole command line.
#[derive(Clone)]
pub struct Manager {
    pub name: String,
    pub cmd: Vec<String>,
}

/// The first argument that runs a bench binary as its bare-client floor (`--floor`).
pub const FLOOR_CHILD_FLAG: &str = "--floor-child";

/// A bench's bare client (`--floor`) as a "manager" of the bench: this binary again, in
/// child mode.
pub fn floor_manager(c: &Cluster) -> Res<Manager> {
    let me = std::env::current_exe()?;
    Ok(Manager {
        name: "bare client".into(),
        cmd: vec![
            me.display().to_string(),
            FLOOR_CHILD_FLAG.to_string(),
            c.kubeconfig.display().to_string(),
        ],
    })
}

/// A floor's watch of `kind` (shaped to `fields` when given), on a thread of its own, each
/// event but bookmarks handed to `each` until it returns false; a watch that breaks or ends is
/// started again (a second later when refused) from the last resourceVersion seen.
pub fn floor_watch(
    c: Client,
    kind: Kind,
    fields: Option<&'static [&'static str]>,
    mut each: impl FnMut(EventType, Value) -> bool + Send + 'static,
) {
    std::thread::spawn(move || {
        let mut rv = String::new();
        loop {
            let opts = WatchOptions {
                timeout_seconds: 3600,
                resource_version: rv.clone(),
                shape: fields.map(|f| Shape {
                    fields: Some(f.into()),
                }),
                ..WatchOptions::default()
            };
            let Ok(w) = c.watch(&kind, None, &opts) else {
                std::thread::sleep(Duration::from_secs(1));
                continue;
            };
            for e in w.events.flatten() {
                if e.kind == EventType::Bookmark {
                    continue;
                }
                if let Some(v) = e.object["metadata"]["resourceVersion"].as_str() {
                    rv = v.to_string();
                }
                if !each(e.kind, e.object) {
                    return;
                }
            }
        }
    });
}

/// A running controller manager, its output in `<work>/<name>.log`; stopped when dropped.
pub struct Proc {
    child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn start(m: &Manager, work: &Path) -> Res<Proc> {
        println!("\n== {}: {}", m.name, m.cmd.join(" "));
        let log = work.join(format!("{}.log", m.name));
        let f = std::fs::File::create(&log)?;
        let child = Command::new(&m.cmd[0])
            .args(&m.cmd[1..])
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", m.cmd[0]))?;
        Ok(Proc { child, log })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// User + system CPU seconds so far.
    pub fn cpu_seconds(&self) -> Option<f64> {
        pid_cpu_seconds(&self.pid().to_string())
    }

    /// Peak RSS (`VmHWM`) in MB.
    pub fn peak_rss_mb(&self) -> Option<f64> {
        status_mb(self.pid(), "VmHWM:")
    }

    /// Current RSS in MB.
    pub fn rss_mb(&self) -> Option<f64> {
        status_mb(self.pid(), "VmRSS:")
    }

    /// Start the peak RSS afresh from the current RSS.
    pub fn reset_peak_rss(&self) {
        let _ = std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5");
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Wait until `ready()` (the manager has synced and acts: a probe object is handled), or
    /// fail after `timeout` or when the process exits. Returns the seconds it took.
    pub fn wait_ready(&mut self, timeout: Duration, mut ready: impl FnMut() -> bool) -> Res<f64> {
        let t0 = Instant::now();
        loop {
            if ready() {
                let s = t0.elapsed().as_secs_f64();
                println!("ready after {s:.1} s");
                return Ok(s);
            }
            if !self.alive() {
                return Err(
                    format!("exited before it was ready; see {}", self.log.display()).into(),
                );
            }
            if t0.elapsed() > timeout {
                return Err(format!(
                    "not ready within {} s; see {}",
                    timeout.as_secs(),
                    self.log.display()
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then SIGKILL after 10 s.
    pub fn stop(&mut self) {
        let _ = Command::new("kill").arg(self.pid().to_string()).status();
        for _ in 0..100 {
            if !self.alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.alive() {
            self.stop();
        }
    }
}

/// User + system CPU seconds of a process so far ("self": this one).
pub fn pid_cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / clock_ticks())
}

/// CPU seconds so far of every `KCM_BENCH_SERVER_PIDS` process (the apiserver and etcd when
/// they run on this machine); None when unset or one is gone.
pub fn server_cpu_seconds() -> Option<f64> {
    let pids = std::env::var("KCM_BENCH_SERVER_PIDS").ok()?;
    let pids: Vec<&str> = pids
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if pids.is_empty() {
        return None;
    }
    pids.iter().map(|p| pid_cpu_seconds(p)).sum()
}

/// A `/proc/<pid>/status` size in MB (`VmHWM:`, `VmRSS:`).
pub fn status_mb(pid: u32, field: &str) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
}

pub fn clock_ticks() -> f64 {
    static TICKS: Mutex<Option<f64>> = Mutex::new(None);
    *TICKS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(|| {
            Command::new("getconf")
                .arg("CLK_TCK")
                .output()
                .ok()
                .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
                .unwrap_or(100.0)
        })
}

// ---- load ----

/// Run `f(i)` for i in 0..n on `threads` threads; the first error wins (the rest still stop).
pub fn parallel(n: usize, threads: usize, f: impl Fn(usize) -> Res<()> + Sync) -> Res<()> {
    let next = AtomicUsize::new(0);
    let err: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    return;
                }
                if let Err(e) = f(i) {
                    err.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e.to_string());
                    return;
                }
            });
        }
    });
    match err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Poll `done` every 20 ms until it holds (the time it took) or `timeout` passes (None).
pub fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if done() {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

// ---- results ----

/// Rows of named columns, printed as one aligned table (a column missing from a row: "-").
#[derive(Default)]
pub struct Table {
    columns: Vec<String>,
    rows: Vec<(String, HashMap<String, String>)>,
}

impl Table {
    /// A row for `manager`; fill it with `set`.
    pub fn row(&mut self, manager: &str) -> usize {
        self.rows.push((manager.to_string(), HashMap::new()));
        self.rows.len() - 1
    }

    pub fn set(&mut self, row: usize, column: &str, value: impl std::fmt::Display) {
        if !self.columns.iter().any(|c| c == column) {
            self.columns.push(column.to_string());
        }
        self.rows[row]
            .1
            .insert(column.to_string(), value.to_string());
    }

    /// A number with two decimals, "-" when missing.
    pub fn num(&mut self, row: usize, column: &str, value: Option<f64>) {
        self.set(row, column, num(value));
    }

    pub fn print(&self, title: &str) {
        println!("\n{title}");
        let width = |c: &str| {
            self.rows
                .iter()
                .map(|(_, r)| r.get(c).map_or(1, String::len))
                .max()
                .unwrap_or(1)
                .max(c.len())
        };
        let mut line = format!("{:<12}", "manager");
        for c in &self.columns {
            line += &format!(" {c:>w$}", w = width(c));
        }
        println!("{line}");
        for (name, r) in &self.rows {
            let mut line = format!("{name:<12}");
            for c in &self.columns {
                let v = r.get(c).map_or("-", String::as_str);
                line += &format!(" {v:>w$}", w = width(c));
            }
            println!("{line}");
        }
    }
}

/// A number with two decimals, "-" when missing.
pub fn num(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.2}"))
}

/// Kubelets' Lease renewals (`kube-node-lease/<name(i)>`, i < `nodes`) every `every`,
/// `at_once` at a time, until dropped; nodes with an index below `dark_below` stop renewing.
pub struct LeaseBeats {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub dark_below: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LeaseBeats {
    pub fn start(
        admin: &edgekcm::api::client::Client,
        nodes: usize,
        every: std::time::Duration,
        at_once: usize,
        name: fn(usize) -> String,
    ) -> LeaseBeats {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let dark_below = std::sync::Arc::new(AtomicUsize::new(0));
        let (s, d, c) = (stop.clone(), dark_below.clone(), admin.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let t = std::time::Instant::now();
                let from = d.load(Ordering::SeqCst);
                let _ = parallel(nodes - from.min(nodes), at_once, |i| {
                    let now = edgekcm::compat::timefmt::rfc3339_micro(std::time::SystemTime::now());
                    let _ = c.patch(
                        &edgekcm::api::resources::LEASES,
                        Some("kube-node-lease"),
                        &name(from + i),
                        edgekcm::api::client::PatchType::Merge,
                        &serde_json::json!({"spec": {"renewTime": now}}),
                        None,
                    );
                    Ok(())
                });
                while t.elapsed() < every && !s.load(Ordering::SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            }
        });
        LeaseBeats {
            stop,
            dark_below,
            thread: Some(thread),
        }
    }
}

impl Drop for LeaseBeats {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
