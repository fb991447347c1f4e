//! Run the sandbox API server on its own:
//!
//! ```text
//! cargo run --example sandbox -- [--port N] [--kubeconfig-out PATH] [--require-auth]
//! ```
//!
//! It prints the URL, writes a kubeconfig when asked, and serves until interrupted (Ctrl-C).

use edgekcm_sandbox::{Sandbox, SandboxOptions};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str =
    "usage: sandbox [--port N] [--kubeconfig-out PATH] [--require-auth] [--admin-token TOKEN]";

fn main() -> ExitCode {
    let mut opts = SandboxOptions::default();
    let mut kubeconfig: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let res: Result<(), String> = match flag.as_str() {
            "--port" => value("--port").and_then(|v| {
                v.parse()
                    .map(|p| opts.port = p)
                    .map_err(|_| format!("invalid port {v:?}"))
            }),
            "--kubeconfig-out" => value("--kubeconfig-out").map(|v| kubeconfig = Some(v.into())),
            "--admin-token" => value("--admin-token").map(|v| opts.admin_token = v),
            "--require-auth" => {
                opts.require_auth = true;
                Ok(())
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => Err(format!("unknown argument {other:?}")),
        };
        if let Err(e) = res {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    let sandbox = match Sandbox::start(opts) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot start the sandbox: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("sandbox API server listening on {}", sandbox.url());
    if let Some(path) = kubeconfig {
        if let Err(e) = sandbox.write_kubeconfig(&path) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("kubeconfig written to {}", path.display());
    }
    // Serve until the process is interrupted; Ctrl-C's default action ends it.
    loop {
        std::thread::park();
    }
}
