//! edgekcm's log as operators and their tools read it: klog's text header (or component-base's
//! JSON lines with `--logging-format=json`), each event once, no overlong lines, and a fatal
//! error written once, also when nobody reads it any more.

use crate::common::{eventually, free_port, kubeconfig_arg, sandbox, Kcm};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const BIN: &str = env!("CARGO_BIN_EXE_edgekcm");
/// The longest line edgekcm may write (an apiserver URL with a watch query and an error fits
/// in a third of it).
const LONGEST: usize = 700;

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `I1123 22:15:10.486123   12345 reflector.rs:95] ...`: klog's header; returns the severity.
fn klog_header(l: &str) -> Option<char> {
    let sev = l.chars().next().filter(|c| "IWEF".contains(*c))?;
    let b = l.as_bytes();
    let ok = b.len() > 32
        && digits(&l[1..5])
        && b[5] == b' '
        && digits(&l[6..8])
        && b[8] == b':'
        && digits(&l[9..11])
        && b[11] == b':'
        && digits(&l[12..14])
        && b[14] == b'.'
        && digits(&l[15..21])
        && b[21] == b' '
        && digits(l[22..29].trim_start())
        && b[29] == b' ';
    let (caller, _) = l[30..].split_once("] ")?;
    let (file, line) = caller.split_once(':')?;
    (ok && file.ends_with(".rs") && !file.contains('/') && digits(line)).then_some(sev)
}

fn count(log: &str, what: &str) -> usize {
    log.lines().filter(|l| l.contains(what)).count()
}

/// edgekcm with its secure port and leader election on, until it serves a new namespace.
fn run_until_served(extra: &[&str]) -> String {
    let t = sandbox();
    let port = free_port();
    let kc = kubeconfig_arg(&t);
    let mut args = vec![
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".to_string(),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        "--leader-elect=true".to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut kcm = Kcm::start(&t, "logs", &args);
    let admin = t.admin();
    kcm.served_namespace(&admin, "logs", Duration::from_secs(40));
    // The garbage collector's first sync with discovery is in the log too.
    eventually(Duration::from_secs(20), "the collector's sync", || {
        kcm.log_text()
            .contains("proceeding to collect garbage")
            .then_some(())
    });
    kcm.kill();
    kcm.log_text()
}

#[test]
fn text_log_is_klog() {
    let log = run_until_served(&[]);
    for l in log.lines() {
        assert!(klog_header(l).is_some(), "not a klog line: {l:?}\n{log}");
        assert!(l.len() <= LONGEST, "{} characters: {l}", l.len());
    }
    // `--v=2` (the harness's) lines are I lines: klog has no debug severity.
    let created = log
        .lines()
        .find(|l| l.contains("serviceaccount-controller: created serviceaccounts"))
        .unwrap_or_else(|| panic!("no -v 2 line for the write:\n{log}"));
    assert!(created.starts_with('I'), "{created}");
    // The controllers upstream v1.37 would run with these flags that edgekcm lacks are named
    // at most once, by short name, and only those (none are missing today).
    assert!(
        count(&log, "would run with these flags are not in edgekcm yet") <= 1,
        "{log}"
    );
    let missing = log
        .lines()
        .find_map(|l| l.split_once("are not in edgekcm yet: ").map(|(_, m)| m))
        .unwrap_or_default();
    for name in missing.split(", ").filter(|n| !n.is_empty()) {
        let row = edgekcm::controllers::registry::info(name).unwrap_or_else(|| panic!("{name}"));
        assert!(!row.implemented(), "{name} runs:\n{log}");
    }
    // Each event once.
    assert_eq!(count(&log, "Serving securely"), 1, "{log}");
    assert_eq!(count(&log, "successfully acquired lease"), 1, "{log}");
    assert_eq!(count(&log, "edgekcm v"), 1, "{log}");
}

#[test]
fn json_log_is_component_base_json() {
    let log = run_until_served(&["--logging-format=json"]);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    let mut lines = 0;
    for l in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}\n{log}"));
        // zapr's key order: ts, caller, msg, then v or the pairs.
        let at = |k: &str| l.find(&format!("\"{k}\":")).unwrap_or(usize::MAX);
        assert!(l.starts_with("{\"ts\":") && at("caller") < at("msg"), "{l}");
        assert_eq!(v.as_object().map(|o| o.len() >= 4), Some(true), "{l}");
        let ts = v["ts"].as_f64().expect("ts is a number");
        assert!(
            (now_ms - ts).abs() < 120_000.0,
            "ts {ts} is not Unix milliseconds: {l}"
        );
        let caller = v["caller"].as_str().unwrap();
        let (file, line) = caller.rsplit_once(':').unwrap();
        assert!(file.ends_with(".rs") && digits(line), "{l}");
        assert!(v["msg"].is_string(), "{l}");
        // Errors have no "v" (and their error under "err"); everything else has one.
        if let Some(e) = v.get("err") {
            assert!(e.is_string() && v.get("v").is_none(), "{l}");
        }
        assert!(v.get("v").is_none_or(|n| n.is_u64()), "{l}");
        assert!(l.len() <= LONGEST, "{} characters: {l}", l.len());
        lines += 1;
    }
    assert!(lines > 5, "{log}");
    assert_eq!(count(&log, "Serving securely"), 1, "{log}");
    assert_eq!(count(&log, "successfully acquired lease"), 1, "{log}");
}

#[test]
fn a_fatal_error_is_one_line() {
    fn text(l: &str) -> bool {
        klog_header(l) == Some('E')
            && l.contains("] \"command failed\" err=\"kubeconfig /nonexistent/kubeconfig: ")
    }
    fn json(l: &str) -> bool {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
        v["msg"] == "command failed"
            && v["err"]
                .as_str()
                .is_some_and(|e| e.starts_with("kubeconfig /nonexistent/kubeconfig: "))
    }
    type Check = fn(&str) -> bool;
    let checks: [(&str, Check); 2] = [("text", text), ("json", json)];
    for (format, check) in checks {
        let out = Command::new(BIN)
            .args([
                "--kubeconfig=/nonexistent/kubeconfig",
                &format!("--logging-format={format}"),
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{format}: {err}");
        assert!(check(lines[0]), "{format}: {err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn a_closed_stderr_keeps_the_exit_status() {
    // `edgekcm ... 2>&1 | head -1`: the reader is gone before the error is written.
    let mut child = Command::new(BIN)
        .args([
            "--kubeconfig=/nonexistent/kubeconfig",
            "--profiling",
            "--enable-hostpath-provisioner",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    drop(child.stdout.take());
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(1), "{st:?}");
    // The same for a bad command line, and for --help into a closed pipe.
    for args in [&["--nope"][..], &["--help"][..], &["certs", "--nope"][..]] {
        let mut child = Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stderr.take());
        drop(child.stdout.take());
        let st = child.wait().unwrap();
        let want = if args == ["--help"] { 0 } else { 1 };
        assert_eq!(st.code(), Some(want), "{args:?}: {st:?}");
    }
}

#[test]
fn the_demo_runs_every_controller() {
    // `cargo test` builds the examples next to the test binaries.
    let exe = std::env::current_exe().unwrap();
    let demo = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("examples").join("demo"))
        .unwrap();
    assert!(
        demo.exists(),
        "{} is not built: run `cargo test` (it builds the examples) or `cargo build --examples`",
        demo.display()
    );
    // It exits 1 when the workload does not settle, the namespace is not removed, or
    // kube-root-ca.crt does not carry the CA it made.
    let out = Command::new(&demo).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // edgekcm's log goes into the demo's timeline (its warnings too), not to stderr.
    assert!(stderr.is_empty(), "{stderr}");
    assert!(
        stdout.contains("created ConfigMap demo/kube-root-ca.crt"),
        "{stdout}"
    );
    assert!(stdout.contains("namespace demo is gone"), "{stdout}");
    // Every controller but the pod garbage collector, the storage version migrator (no
    // migration asked for) and the device taint eviction (no DRA devices) has something to
    // do; the list wraps.
    let idle = stdout
        .split_once("nothing to do in this workload (3): ")
        .map(|(_, rest)| {
            rest.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    assert_eq!(
        idle,
        "pod-garbage-collector-controller, storage-version-migrator-controller, device-taint-eviction-controller",
        "{stdout}"
    );
}
