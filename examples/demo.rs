//! The demo: starts the in-repo sandbox API server on loopback, makes a CA and a
//! service-account key as `edgekcm certs` does, runs edgekcm's main job against the server
//! (the same code path and log format as the binary, with the flags below), creates a
//! namespace and shows it getting its `default` ServiceAccount and `kube-root-ca.crt`
//! ConfigMap.
//!
//!     cargo run --example demo

use edgekcm::api::client::Client;
use edgekcm::api::kubeconfig;
use edgekcm::api::resources::{CONFIGMAPS, NAMESPACES, SERVICEACCOUNTS};
use edgekcm::certs::{generate, CertsOptions};
use edgekcm::cli::{self, Command};
use edgekcm_sandbox::{Sandbox, SandboxOptions};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

fn demo() -> Result<Sandbox, Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("edgekcm-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kc = dir.join("kubeconfig");
    // The cluster CA published in kube-root-ca.crt and the service-account key.
    let pki = dir.join("pki");
    generate(&CertsOptions::new(&pki))?;

    let sb = Sandbox::start(SandboxOptions::default())?;
    sb.write_kubeconfig(&kc)?;
    println!("sandbox API server at {}", sb.url());

    let args: Vec<String> = [
        format!("--kubeconfig={}", kc.display()),
        "--controllers=serviceaccount,root-ca-cert-publisher".into(),
        format!("--root-ca-file={}", pki.join("ca.crt").display()),
        format!(
            "--service-account-private-key-file={}",
            pki.join("sa.key").display()
        ),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
        "--use-service-account-credentials=true".into(),
    ]
    .into();
    println!("edgekcm {}", args.join(" "));
    let Command::Run(cfg) = cli::parse(&args)? else {
        return Err("unexpected command".into());
    };
    edgekcm::logging::init(cfg.verbosity, cfg.logging_format);
    let stop = Arc::new(AtomicBool::new(false));
    let kcm = {
        let stop = stop.clone();
        std::thread::spawn(move || edgekcm::run::run(*cfg, stop))
    };

    let admin = Client::new(&kubeconfig::load(Some(&kc), None)?, 0.0, 1, "demo")?;
    let t0 = Instant::now();
    admin.create(
        &NAMESPACES,
        None,
        &json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"demo"}}),
    )?;
    println!("created namespace demo");
    let deadline = t0 + Duration::from_secs(30);
    let (mut sa, mut cm) = (None, None);
    while Instant::now() < deadline && (sa.is_none() || cm.is_none()) {
        sa = sa.or_else(|| admin.get(&SERVICEACCOUNTS, Some("demo"), "default").ok());
        cm = cm.or_else(|| {
            admin
                .get(&CONFIGMAPS, Some("demo"), "kube-root-ca.crt")
                .ok()
        });
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = t0.elapsed();
    stop.store(true, Ordering::SeqCst);
    let _ = kcm.join();
    let _ = std::fs::remove_dir_all(&dir);
    match (sa, cm) {
        (Some(sa), Some(cm)) => {
            println!(
                "\nServiceAccount demo/default (uid {})",
                sa["metadata"]["uid"].as_str().unwrap_or("")
            );
            println!(
                "ConfigMap demo/kube-root-ca.crt:\n{}",
                serde_json::to_string_pretty(&cm)?
            );
            println!("\nnamespace served in {} ms", took.as_millis());
            Ok(sb)
        }
        _ => Err("the namespace was not served within 30 s".into()),
    }
}
