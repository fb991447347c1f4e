//! The cronjob- and ttl-after-finished-controllers idle: N CronJobs whose schedules do not
//! come during the run (`0 0 1 1 *`), one probe CronJob due at once (its Job tells the
//! manager has synced and acts), then `--idle` seconds with nothing to do. Prints the time to
//! ready, the CPU seconds until then and while idle, and the peak and final RSS. Both
//! managers run, one after the other, on the same CronJobs (nothing in them changes: a
//! CronJob not due is written nothing). A benchmark, not a test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_cronjob
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig cargo run --release --example bench_cronjob -- --cronjobs=300
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`).
//!
//! Flags: `--cronjobs=N` (300), `--idle=SECONDS` (120), `--timeout=SECONDS` (120),
//! `--skip-edgekcm`.

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{parallel, Args, Cluster, Proc, Res, Table};
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{CRONJOBS, JOBS, NAMESPACES};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

struct Opts {
    cronjobs: usize,
    idle: Duration,
    timeout: Duration,
    skip_edgekcm: bool,
}

fn cronjob(name: &str, schedule: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
        "spec": {"schedule": schedule, "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
            "jobTemplate": {"spec": {"ttlSecondsAfterFinished": 600, "template": {"spec": {
                "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                "restartPolicy": "Never"}}}}}})
}

/// A CronJob due at once: `lastScheduleTime` five minutes ago.
fn probe(admin: &Client, ns: &str, name: &str) -> Res<()> {
    let mut cj = admin.create(&CRONJOBS, Some(ns), &cronjob(name, "* * * * *"))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let last = UNIX_EPOCH + Duration::from_secs((now / 60 - 5) * 60);
    cj["status"] = json!({"lastScheduleTime": edgekcm::compat::timefmt::rfc3339(last)});
    admin.update_status(&CRONJOBS, &cj)?;
    Ok(())
}

fn main() {
    benchkit::main(|| {
        let mut a = Args::parse();
        let o = Opts {
            cronjobs: a.count("--cronjobs", 300)?,
            idle: a.secs("--idle", 120)?,
            timeout: a.secs("--timeout", 120)?,
            skip_edgekcm: a.flag("--skip-edgekcm")?,
        };
        a.done()?;
        let c = Cluster::from_env("bench-cronjob")?;
        let admin = &c.admin;
        let ns = c.namespace("bench-cronjob")?;
        parallel(o.cronjobs, 8, |i| {
            admin.create(
                &CRONJOBS,
                Some(&ns),
                &cronjob(&format!("cj-{i}"), "0 0 1 1 *"),
            )?;
            Ok(())
        })?;
        let extra = [
            "--controllers=cronjob,ttl-after-finished".to_string(),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        let mut table = Table::default();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            let name = format!("probe-{}", m.name);
            probe(admin, &ns, &name)?;
            let mut p = Proc::start(&m, &c.work)?;
            let ready = p.wait_ready(o.timeout, || {
                admin
                    .list(&JOBS, Some(&ns), &ListOptions::default())
                    .map(|l| {
                        l.items.iter().any(|j| {
                            j["metadata"]["name"]
                                .as_str()
                                .is_some_and(|n| n.starts_with(&format!("{name}-")))
                        })
                    })
                    .unwrap_or(false)
            })?;
            let ready_cpu = p.cpu_seconds();
            std::thread::sleep(o.idle);
            let row = table.row(&m.name);
            table.num(row, "ready s", Some(ready));
            table.num(row, "ready CPU s", ready_cpu);
            table.num(
                row,
                "idle CPU s",
                p.cpu_seconds().zip(ready_cpu).map(|(a, b)| a - b),
            );
            table.num(row, "peak RSS MB", p.peak_rss_mb());
            table.num(row, "end RSS MB", p.rss_mb());
            p.stop();
            let _ = admin.delete(&CRONJOBS, Some(&ns), &name, &Default::default());
            println!("{}: log in {}", m.name, p.log.display());
        }
        let _ = admin.delete(&NAMESPACES, None, &ns, &Default::default());
        table.print(&format!(
            "{} CronJobs not due, idle {} s",
            o.cronjobs,
            o.idle.as_secs()
        ));
        Ok(())
    })
}
