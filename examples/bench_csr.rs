//! Kubelet client certificates under load: N CertificateSigningRequests created at once, each
//! as a kubelet asks for its first client certificate (`O=system:nodes`,
//! `CN=system:node:bench-<i>`, signer `kubernetes.io/kube-apiserver-client-kubelet`, ECDSA
//! P-256). A controller manager runs `csrapproving,csrsigning`: the approver auto-approves
//! them (the bench creates them as its admin user, whose SubjectAccessReview for
//! `certificatesigningrequests/nodeclient` is allowed) and the signer signs them. Prints the
//! wall time from the first create until every request carries a certificate, the CPU seconds
//! and the peak RSS of the manager meanwhile (started and synced before: a probe request
//! approved and signed). A benchmark, not a test: it never fails on a number.
//!
//!     cargo build --release --bin edgekcm && cargo run --release --example bench_csr
//!     KCM_E2E_KUBECONFIG=/path/admin.kubeconfig KCM_BENCH_UPSTREAM="kube-controller-manager --kubeconfig=..." \
//!         KCM_E2E_CA_CERT=/etc/kubernetes/pki/ca.crt KCM_E2E_CA_KEY=/etc/kubernetes/pki/ca.key \
//!         cargo run --release --example bench_csr
//!
//! Environment: as every bench (`examples/benchkit/mod.rs`); `KCM_BENCH_UPSTREAM` runs after
//! edgekcm on a fresh copy of the workload; `KCM_E2E_CA_CERT` and `KCM_E2E_CA_KEY` the
//! signing CA (default: a new ECDSA CA in the work directory).
//!
//! Flags: `--csrs=N` (500), `--timeout=SECONDS` (300), `--skip-edgekcm`, `--signing-only`
//! (the bench approves each request right after creating it, through the `approval`
//! subresource, and the managers run `csrsigning` alone).

#[path = "benchkit/mod.rs"]
mod benchkit;

use base64::Engine as _;
use benchkit::{parallel, Args, Cluster, Proc, Res, Table};
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::CSRS;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const LABEL: &str = "edgekcm-bench";

struct Opts {
    csrs: usize,
    ca: Option<(String, String)>,
    timeout: Duration,
    skip_edgekcm: bool,
    /// The bench approves each request itself; the managers run `csrsigning` only.
    signing_only: bool,
}

fn parse_opts() -> Res<Opts> {
    let mut a = Args::parse();
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let o = Opts {
        csrs: a.count("--csrs", 500)?,
        ca: env("KCM_E2E_CA_CERT").zip(env("KCM_E2E_CA_KEY")),
        timeout: a.secs("--timeout", 300)?,
        skip_edgekcm: a.flag("--skip-edgekcm")?,
        signing_only: a.flag("--signing-only")?,
    };
    a.done()?;
    Ok(o)
}

/// A new ECDSA CA in `dir`: (cert path, key path).
fn new_ca(dir: &std::path::Path) -> Res<(String, String)> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "edgekcm-bench-ca");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = p.self_signed(&key)?;
    let (c, k) = (dir.join("bench-ca.crt"), dir.join("bench-ca.key"));
    std::fs::write(&c, cert.pem())?;
    std::fs::write(&k, key.serialize_pem())?;
    Ok((c.display().to_string(), k.display().to_string()))
}

/// The request bodies, made before anything is timed (base64 of the PKCS#10 PEM).
fn requests(n: usize, run: &str) -> Res<Vec<Value>> {
    (0..n)
        .map(|i| {
            let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new())?;
            p.distinguished_name = rcgen::DistinguishedName::new();
            p.distinguished_name
                .push(rcgen::DnType::OrganizationName, "system:nodes");
            p.distinguished_name
                .push(rcgen::DnType::CommonName, format!("system:node:bench-{i}"));
            let pem = p.serialize_request(&key)?.pem()?;
            Ok(
                json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                "metadata": {"name": format!("bench-{run}-{i:04}"), "labels": {LABEL: run}},
                "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
                         "signerName": SIGNER, "usages": ["digital signature", "client auth"]}}),
            )
        })
        .collect()
}

/// How many requests of `run` carry a certificate.
fn signed(admin: &Client, run: &str) -> usize {
    admin
        .list(
            &CSRS,
            None,
            &ListOptions {
                label_selector: Some(format!("{LABEL}={run}")),
                ..ListOptions::default()
            },
        )
        .map(|l| {
            l.items
                .iter()
                .filter(|o| {
                    o["status"]["certificate"]
                        .as_str()
                        .is_some_and(|c| !c.is_empty())
                })
                .count()
        })
        .unwrap_or(0)
}

/// Create a request, and approve it as an administrator would when `approve`.
fn create(admin: &Client, body: &Value, approve: bool) -> Res<()> {
    let mut o = admin.create(&CSRS, None, body)?;
    if approve {
        o["status"]["conditions"] = json!([{"type": "Approved", "status": "True",
            "reason": "Bench", "message": "approved by the bench"}]);
        admin.update_subresource(&CSRS, &o, "approval")?;
    }
    Ok(())
}

fn run(c: &Cluster, m: &benchkit::Manager, o: &Opts, table: &mut Table) -> Res<()> {
    let admin = &c.admin;
    let run = format!("{}-{:04x}", m.name, fastrand::u16(..));
    let bodies = requests(o.csrs, &run)?;
    let probe = requests(1, &format!("{run}-probe"))?.remove(0);
    let probe_run = format!("{run}-probe");
    let mut p = Proc::start(m, &c.work)?;
    create(admin, &probe, o.signing_only)?;
    p.wait_ready(Duration::from_secs(120), || signed(admin, &probe_run) == 1)?;
    p.reset_peak_rss();
    let cpu0 = p.cpu_seconds();
    let t0 = Instant::now();
    parallel(bodies.len(), 16, |i| {
        if let Err(e) = create(admin, &bodies[i], o.signing_only) {
            eprintln!("create request {i}: {e}");
        }
        Ok(())
    })?;
    println!("created in {:.2} s", t0.elapsed().as_secs_f64());
    let mut last = Instant::now();
    let done = loop {
        let n = signed(admin, &run);
        if n >= o.csrs {
            break Some(t0.elapsed().as_secs_f64());
        }
        if t0.elapsed() > o.timeout || !p.alive() {
            break None;
        }
        if last.elapsed() > Duration::from_secs(5) {
            println!(
                "  {:>5.1} s: {n}/{} signed",
                t0.elapsed().as_secs_f64(),
                o.csrs
            );
            last = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let cpu = p.cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let row = table.row(&m.name);
    table.set(
        row,
        "approved+signed s",
        done.map_or("timeout".to_string(), |s| format!("{s:.2}")),
    );
    table.num(row, "CPU s", cpu);
    table.num(row, "peak RSS MB", p.peak_rss_mb());
    p.stop();
    c.delete_all(&CSRS, None, &format!("bench-{run}"));
    println!("{}: log in {}", m.name, p.log.display());
    Ok(())
}

fn main() {
    benchkit::main(|| {
        let o = parse_opts()?;
        let c = Cluster::from_env("bench-csr")?;
        let (cert, key) = match &o.ca {
            Some(pair) => pair.clone(),
            None => new_ca(&c.work)?,
        };
        let controllers = if o.signing_only {
            "csrsigning"
        } else {
            "csrapproving,csrsigning"
        };
        let extra = [
            format!("--controllers={controllers}"),
            format!("--cluster-signing-cert-file={cert}"),
            format!("--cluster-signing-key-file={key}"),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        let mut table = Table::default();
        for m in c.managers(&extra, o.skip_edgekcm)? {
            run(&c, &m, &o, &mut table)?;
        }
        table.print(&format!(
            "{} kubelet client CSRs created at once, approved {} and signed (CA {cert})",
            o.csrs,
            if o.signing_only {
                "by the bench"
            } else {
                "by csrapproving"
            }
        ));
        Ok(())
    })
}
