//! The token controllers under load: a controller manager runs
//! `serviceaccount-token,bootstrapsigner,tokencleaner`; once it has synced (a probe token
//! Secret is filled), N ServiceAccounts each with a token Secret, B bootstrap tokens allowed
//! to sign `kube-public/cluster-info` and E expired bootstrap tokens are created at once.
//! Prints the wall time until every token Secret is filled, `cluster-info` carries the B
//! signatures and the E expired tokens are gone, the CPU seconds that took, and the peak and
//! final RSS. A benchmark, not a test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_tokens
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig cargo run --release --example bench_tokens
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`); `KCM_BENCH_UPSTREAM` runs after
//! edgekcm on a fresh copy of the workload. `KCM_BENCH_SA_KEY`: the signing key (default: the
//! unit tests' RSA key); against a real apiserver any key signs, only the TokenReview would
//! need the apiserver's.
//!
//! Flags: `--accounts=N` (500), `--bootstrap=B` (50), `--expired=E` (50), `--timeout=SECONDS`
//! (300), `--skip-edgekcm`.

#[path = "benchkit/mod.rs"]
mod benchkit;

use benchkit::{parallel, Args, Cluster, Proc, Res, Table};
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{CONFIGMAPS, NAMESPACES, SECRETS, SERVICEACCOUNTS};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

struct Opts {
    accounts: usize,
    bootstrap: usize,
    expired: usize,
    timeout: Duration,
    skip_edgekcm: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut a = Args::parse();
    let o = Opts {
        accounts: a.count("--accounts", 500)?,
        bootstrap: a.count("--bootstrap", 50)?,
        expired: a.count("--expired", 50)?,
        timeout: a.secs("--timeout", 300)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
    };
    a.done()?;
    Ok(o)
}

fn token_secret(name: &str, sa: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": name, "annotations": {"kubernetes.io/service-account.name": sa}}})
}

fn filled(s: &Value) -> bool {
    s["data"]["token"].as_str().is_some_and(|t| !t.is_empty())
}

fn bootstrap_id(prefix: char, i: usize) -> String {
    format!("{prefix}{i:05}")
}

fn create_bootstrap(admin: &Client, id: &str, extra: Value) {
    let mut data = json!({"token-id": id, "token-secret": "0123456789abcdef"});
    for (k, v) in extra.as_object().into_iter().flatten() {
        data[k] = v.clone();
    }
    let _ = admin.create(
        &SECRETS,
        Some("kube-system"),
        &json!({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": format!("bootstrap-token-{id}")}, "stringData": data}),
    );
}

fn ensure_namespace(admin: &Client, name: &str) {
    let _ = admin.create(
        &NAMESPACES,
        None,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    );
}

fn cleanup_bootstrap(c: &Cluster) {
    let list = c
        .admin
        .list(&SECRETS, Some("kube-system"), &ListOptions::default())
        .map(|l| l.items)
        .unwrap_or_default();
    let names: Vec<String> = list
        .iter()
        .filter_map(|s| s["metadata"]["name"].as_str())
        .filter(|n| n.starts_with("bootstrap-token-b") || n.starts_with("bootstrap-token-x"))
        .map(str::to_string)
        .collect();
    let _ = parallel(names.len(), 8, |i| {
        let _ = c.admin.delete(
            &SECRETS,
            Some("kube-system"),
            &names[i],
            &Default::default(),
        );
        Ok(())
    });
}

/// Run one controller manager on a fresh copy of the workload.
fn run(c: &Cluster, m: &benchkit::Manager, o: &Opts, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    ensure_namespace(admin, "kube-system");
    ensure_namespace(admin, "kube-public");
    cleanup_bootstrap(c);
    let _ = admin.delete(
        &CONFIGMAPS,
        Some("kube-public"),
        "cluster-info",
        &Default::default(),
    );
    admin.create(
        &CONFIGMAPS,
        Some("kube-public"),
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info"},
            "data": {"kubeconfig": "apiVersion: v1\nclusters:\n- cluster:\n    server: https://10.0.0.1:6443\n  name: \"\"\nkind: Config\n"}}),
    )?;
    let ns = c.namespace("bench-tokens")?;
    admin.create(
        &SERVICEACCOUNTS,
        Some(&ns),
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "probe"}}),
    )?;
    admin.create(&SECRETS, Some(&ns), &token_secret("probe-token", "probe"))?;

    let mut p = Proc::start(m, &c.work)?;
    p.wait_ready(Duration::from_secs(60), || {
        admin
            .get(&SECRETS, Some(&ns), "probe-token")
            .is_ok_and(|s| filled(&s))
    })?;
    p.reset_peak_rss();
    let cpu0 = p.cpu_seconds();
    let started = Instant::now();
    parallel(o.accounts, 8, |i| {
        let sa = format!("sa-{i:05}");
        let _ = admin.create(
            &SERVICEACCOUNTS,
            Some(&ns),
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}}),
        );
        let _ = admin.create(
            &SECRETS,
            Some(&ns),
            &token_secret(&format!("{sa}-token"), &sa),
        );
        Ok(())
    })?;
    parallel(o.bootstrap, 8, |i| {
        create_bootstrap(
            admin,
            &bootstrap_id('b', i),
            json!({"usage-bootstrap-signing": "true", "expiration": "2099-01-01T00:00:00Z"}),
        );
        Ok(())
    })?;
    parallel(o.expired, 8, |i| {
        create_bootstrap(
            admin,
            &bootstrap_id('x', i),
            json!({"usage-bootstrap-signing": "true", "expiration": "2000-01-01T00:00:00Z"}),
        );
        Ok(())
    })?;
    println!(
        "created the workload in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut converged = None;
    while started.elapsed() < o.timeout && p.alive() {
        std::thread::sleep(Duration::from_millis(250));
        let secrets = admin
            .list(&SECRETS, Some(&ns), &ListOptions::default())
            .map(|l| l.items)
            .unwrap_or_default();
        let done = secrets.iter().filter(|s| filled(s)).count();
        let sigs = admin
            .get(&CONFIGMAPS, Some("kube-public"), "cluster-info")
            .ok()
            .and_then(|cm| cm["data"].as_object().cloned())
            .map(|d| {
                d.keys()
                    .filter(|k| k.starts_with("jws-kubeconfig-"))
                    .count()
            })
            .unwrap_or(0);
        let expired_left = admin
            .list(&SECRETS, Some("kube-system"), &ListOptions::default())
            .map(|l| {
                l.items
                    .iter()
                    .filter(|s| {
                        s["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with("bootstrap-token-x"))
                    })
                    .count()
            })
            .unwrap_or(usize::MAX);
        if done > o.accounts && sigs == o.bootstrap && expired_left == 0 {
            converged = Some(started.elapsed().as_secs_f64());
            break;
        }
    }
    let cpu = p.cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let row = table.row(&m.name);
    table.num(row, "converge s", converged);
    table.num(row, "converge CPU s", cpu);
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    table.num(row, "end RSS MB", p.rss_mb());
    p.stop();
    cleanup_bootstrap(c);
    let _ = admin.delete(
        &CONFIGMAPS,
        Some("kube-public"),
        "cluster-info",
        &Default::default(),
    );
    let _ = admin.delete(&NAMESPACES, None, &ns, &Default::default());
    println!("{}: log in {}", m.name, p.log.display());
    Ok(())
}

fn main() {
    benchkit::main(|| {
        let o = parse_opts()?;
        let c = Cluster::from_env("bench-tokens")?;
        let key = std::env::var("KCM_BENCH_SA_KEY").unwrap_or_else(|_| {
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/controllers/tokens/testdata/rsa-pkcs1.pem"
            )
            .to_string()
        });
        let extra = [
            "--controllers=serviceaccount-token,bootstrapsigner,tokencleaner".to_string(),
            format!("--service-account-private-key-file={key}"),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        let mut table = Table::default();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            run(&c, &m, &o, &mut table)?;
        }
        table.print(&format!(
            "{} token Secrets, {} signing bootstrap tokens, {} expired",
            o.accounts, o.bootstrap, o.expired
        ));
        Ok(())
    })
}
