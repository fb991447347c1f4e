//! The demo: edgekcm's main job, every controller, against the in-repo sandbox API server.
//!
//! It starts the sandbox on loopback with its scheduler and kubelet stand-in for two nodes
//! (`sandbox::kubelet`: the demo's only kubelet), makes a CA and a service-account key as
//! `edgekcm certs` does, and runs edgekcm (the same code path as the binary) with every
//! controller it has: `--controllers=*` plus the two that are off by default, node CIDRs,
//! CSR signing and per-controller ServiceAccount credentials. Then it creates a small
//! workload (`workload.rs`: a Deployment behind a Service, a StatefulSet, a DaemonSet on both
//! nodes, a Job, a CronJob firing once, and what gives the other controllers work), waits for
//! it to settle, puts load on it, deletes the namespace and waits for it to go. Every write a
//! controller makes is printed as it happens, with the time since edgekcm started (`feed.rs`);
//! a summary per controller ends it.
//!
//!     cargo run --example demo

mod feed;
mod workload;

use edgekcm::api::client::{Client, DeleteOptions, PatchType};
use edgekcm::api::kubeconfig;
use edgekcm::api::resources::{
    Kind, CONFIGMAPS, NAMESPACES, PERSISTENTVOLUMECLAIMS as PVCS, SERVICEACCOUNTS,
};
use edgekcm::certs::{generate, CertsOptions};
use edgekcm::cli::{self, Command};
use edgekcm::controllers::registry;
use edgekcm::obj::At as _;
use edgekcm_sandbox::{KubeletOptions, Sandbox, SandboxOptions};
use feed::{Action, Feed};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    // The sandbox lives until the process ends: edgekcm's caches, as in the binary, stop
    // with the process, not when run() returns, and should not see the server go first.
    let result = demo();
    let code = match &result {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("demo failed: {e}");
            1
        }
    };
    std::process::exit(code);
}

/// edgekcm's flags: every controller, and what the off-by-default and flag-gated ones need.
fn flags(kubeconfig: &Path, pki: &Path) -> Res<Vec<String>> {
    let report = generate(&CertsOptions::new(pki))?;
    // From what `edgekcm certs` suggests, the flags of the CA, the signer and the
    // service-account key (the sandbox takes bearer tokens, not client certificates, and
    // the demo serves no secure port).
    let wanted = [
        "--root-ca-file=",
        "--cluster-signing-cert-file=",
        "--cluster-signing-key-file=",
        "--service-account-private-key-file=",
        "--use-service-account-credentials=",
    ];
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--controllers=*,bootstrap-signer-controller,token-cleaner-controller".into(),
        "--allocate-node-cidrs=true".into(),
        "--cluster-cidr=10.244.0.0/16".into(),
        // The autoscaler looks every 2 s instead of 15 s, so the demo need not wait for it.
        "--horizontal-pod-autoscaler-sync-period=2s".into(),
        // Tokens unused for a second are old enough (the demo's one was never used).
        "--legacy-service-account-token-clean-up-period=1s".into(),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
    ];
    args.extend(
        report
            .edgekcm_flags
            .into_iter()
            .filter(|f| wanted.iter().any(|w| f.starts_with(w))),
    );
    Ok(args)
}

/// The demo's own step, printed in the timeline.
fn step(feed: &mut Feed, verb: &str, kind: &str, key: &str) {
    feed.did(Action {
        at: Instant::now(),
        by: "demo".into(),
        verb: verb.into(),
        kind: kind.into(),
        key: key.into(),
        sub: None,
    });
}

fn demo() -> Res<Sandbox> {
    let dir = std::env::temp_dir().join(format!("edgekcm-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kc = dir.join("kubeconfig");
    let args = flags(&kc, &dir.join("pki"))?;

    let sb = Sandbox::start(SandboxOptions::default())?;
    sb.write_kubeconfig(&kc)?;
    let kubelet = KubeletOptions::default();
    let nodes = kubelet.nodes.len();
    println!(
        "sandbox API server at {}, kubelet stand-in for {}",
        sb.url(),
        kubelet.nodes.join(", ")
    );
    let _kubelet = sb.start_kubelet(kubelet);

    println!("edgekcm {}", args.join(" "));
    let Command::Run(cfg) = cli::parse(&args)? else {
        return Err("unexpected command".into());
    };
    let names: Vec<&'static str> = registry::implemented_names()
        .into_iter()
        .filter(|n| cfg.controllers.is_enabled(n))
        .filter(|n| {
            registry::required_gates(n)
                .iter()
                .all(|g| cfg.gates.enabled(g))
        })
        .collect();
    println!("{} controllers run\n", names.len());
    let t0 = Instant::now();
    let mut feed = Feed::install(t0, names);
    // Before edgekcm starts: what its CSR cleaner finds at start.
    let (csrs, old) = workload::old_csr()?;
    let made = sb.create(csrs, old.clone())?;
    sb.update_status(
        csrs,
        json!({"status": old["status"], "metadata": made["metadata"]}),
    )?;
    step(
        &mut feed,
        "created",
        "CertificateSigningRequest",
        "node-old-client",
    );
    for (kind, o) in workload::legacy_token() {
        let ns = o["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let made = sb.create(kind, o)?;
        let name = made["metadata"]["name"].as_str().unwrap_or("");
        step(&mut feed, "created", kind.kind, &format!("{ns}/{name}"));
    }
    // A PodCertificateRequest past its 15 minutes: gone at the cleaner's first pass.
    let (kind, pcr) = workload::old_pod_certificate_request();
    sb.create(kind, pcr)?;
    let then = std::time::SystemTime::now() - Duration::from_secs(16 * 60);
    sb.backdate(
        kind,
        Some("default"),
        "expired",
        &edgekcm::compat::timefmt::rfc3339(then),
    )?;
    step(&mut feed, "created", kind.kind, "default/expired");
    let (kind, policy) = workload::policy();
    sb.create(kind, policy)?;
    step(&mut feed, "created", kind.kind, "replicas-limit");
    // The token must be older than the clean-up period when the cleaner's first pass runs.
    std::thread::sleep(Duration::from_millis(1100));
    let stop = Arc::new(AtomicBool::new(false));
    let kcm = {
        let stop = stop.clone();
        std::thread::spawn(move || edgekcm::run::run(*cfg, stop))
    };
    let result = drive(&sb, &dir, &mut feed, nodes);
    stop.store(true, Ordering::SeqCst);
    let ran = kcm.join();
    feed.tick(&sb);
    let _ = std::fs::remove_dir_all(&dir);
    if let Ok(Err(e)) = ran {
        return Err(format!("edgekcm stopped: {e}").into());
    }
    result?;
    feed.summary();
    println!("\ndone in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(sb)
}

/// Create objects as the demo, printing each; a `status` is written after the create, as a
/// controller would (a create drops it).
fn create(admin: &Client, feed: &mut Feed, objects: Vec<(&'static Kind, Value)>) -> Res<()> {
    for (kind, mut obj) in objects {
        let status = obj.as_object_mut().and_then(|o| o.remove("status"));
        let ns = obj["metadata"]["namespace"].as_str().map(str::to_string);
        let made = admin.create(kind, ns.as_deref(), &obj)?;
        let name = made["metadata"]["name"].as_str().unwrap_or("");
        let key = match &ns {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        };
        step(feed, "created", kind.kind, &key);
        if let Some(s) = status {
            let patch = json!({ "status": s });
            admin.patch(
                kind,
                ns.as_deref(),
                name,
                PatchType::Merge,
                &patch,
                Some("status"),
            )?;
        }
    }
    Ok(())
}

/// Tick until nothing of the workload is pending (`web` pods wanted), or fail after 30 s.
fn settle(sb: &Sandbox, feed: &mut Feed, nodes: usize, web: u64) -> Res<()> {
    let settled = feed.wait(sb, Duration::from_secs(30), || {
        workload::load(sb);
        workload::pending(sb, nodes, web).is_empty()
    });
    if !settled {
        let left = workload::pending(sb, nodes, web).join(", ");
        return Err(format!("the workload did not settle within 30 s: {left}").into());
    }
    println!("{:6.2}s  settled", feed.since(Instant::now()));
    Ok(())
}

/// The workload: wait for edgekcm, create it, wait for it to settle, load it, delete the
/// namespace.
fn drive(sb: &Sandbox, dir: &Path, feed: &mut Feed, nodes: usize) -> Res<()> {
    let kc = dir.join("kubeconfig");
    let admin = Client::new(&kubeconfig::load(Some(&kc), None)?, 0.0, 1, "demo")?;
    // Controllers run once the default namespace has its ServiceAccount.
    let up = feed.wait(sb, Duration::from_secs(20), || {
        sb.get(&SERVICEACCOUNTS, Some("default"), "default")
            .is_some()
    });
    if !up {
        return Err("edgekcm did not start within 20 s".into());
    }
    let now = SystemTime::now();
    create(&admin, feed, workload::cluster(now)?)?;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": workload::NS}});
    create(&admin, feed, vec![(&NAMESPACES, ns)])?;
    create(&admin, feed, workload::objects(now))?;
    settle(sb, feed, nodes, 2)?;
    // The namespace's kube-root-ca.crt carries the CA made above.
    let ca = std::fs::read_to_string(dir.join("pki").join("ca.crt"))?;
    let published = sb.get(&CONFIGMAPS, Some(workload::NS), "kube-root-ca.crt");
    if published.as_ref().and_then(|c| c.at("/data/ca.crt")) != Some(&json!(ca)) {
        return Err("kube-root-ca.crt of namespace demo does not carry the cluster CA".into());
    }
    // Load arrives, and the CSI volume is asked to grow.
    create(&admin, feed, vec![workload::autoscaler()])?;
    if let Some((claim, patch)) = workload::grow_claim(sb) {
        let ns = Some(workload::NS);
        admin.patch(&PVCS, ns, &claim, PatchType::Merge, &patch, None)?;
        step(
            feed,
            "patched",
            "PersistentVolumeClaim",
            &format!("{}/{claim}", workload::NS),
        );
    }
    settle(sb, feed, nodes, 4)?;

    admin.delete(&NAMESPACES, None, workload::NS, &DeleteOptions::default())?;
    step(feed, "deleted", "Namespace", workload::NS);
    let gone = feed.wait(sb, Duration::from_secs(30), || {
        sb.get(&NAMESPACES, None, workload::NS).is_none()
    });
    if !gone {
        return Err("namespace demo was not emptied and removed within 30 s".into());
    }
    println!(
        "{:6.2}s  namespace demo is gone",
        feed.since(Instant::now())
    );
    // The garbage collector and others may still tidy up after the namespace.
    feed.wait(sb, Duration::from_millis(500), || false);
    Ok(())
}
