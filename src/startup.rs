//! Start-up, before any controller runs: which controllers kube-controller-manager would run
//! with this command line that edgekcm cannot run yet, the wait for the API server, and the
//! Kubernetes version to emulate for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::api::client::{user_agent_base, Client};
use crate::api::kubeconfig::RestConfig;
use crate::config::version::{self, Emulation};
use crate::config::Config;
use crate::controllers::registry::{self, ControllerInfo};
use crate::error::{Error, Result};

/// Whether kube-controller-manager v1.37, emulating the version edgekcm emulates, starts an
/// enabled controller with this configuration: only when the feature gates it needs are on
/// (at the emulated version), and the token controller, the CSR signer, node IPAM and the
/// garbage collector only when their flags ask for them.
pub fn upstream_starts(info: &ControllerInfo, cfg: &Config) -> bool {
    if !registry::required_gates(info.name)
        .iter()
        .all(|g| cfg.gates.enabled(g))
    {
        return false;
    }
    match info.needs {
        "" | "feature-gate" => true,
        "--service-account-private-key-file" => {
            cfg.sa_controller.service_account_private_key_file.is_some()
        }
        "--cluster-signing-cert-file" => cfg.cluster_signing.enabled(),
        "--allocate-node-cidrs" => cfg.kube_cloud_shared.allocate_node_cidrs,
        "--enable-garbage-collector" => cfg.garbage_collector.enable_garbage_collector,
        _ => false,
    }
}

/// The controllers kube-controller-manager would run with this configuration and edgekcm
/// does not implement, in upstream's table order.
pub fn not_implemented(cfg: &Config, implemented: &[&str]) -> Vec<&'static ControllerInfo> {
    registry::known()
        .iter()
        .filter(|i| cfg.controllers.is_enabled(i.name))
        .filter(|i| upstream_starts(i, cfg))
        .filter(|i| !implemented.contains(&i.name))
        .collect()
}

/// One line naming them by their short `--controllers` names, or None when there are none.
pub fn not_implemented_line(cfg: &Config, implemented: &[&str]) -> Option<String> {
    let missing = not_implemented(cfg, implemented);
    if missing.is_empty() {
        return None;
    }
    let names: Vec<&str> = missing
        .iter()
        .map(|i| i.aliases.first().copied().unwrap_or(i.name))
        .collect();
    Some(format!(
        "{} controllers that kube-controller-manager v{} would run with these flags are not in edgekcm yet: {}",
        names.len(),
        cfg.emulation.version,
        names.join(", ")
    ))
}

/// Read the API server's `/version` and decide which Kubernetes version to emulate (see
/// `config::version::decide`); a `/version` that cannot be read is an error only when
/// `--emulated-version` is not given.
pub fn emulation(rest: &RestConfig, cfg: &Config) -> Result<Emulation> {
    let client = Client::new_with_timeout(
        rest,
        0.0,
        1,
        &format!("{} shared-informers", user_agent_base()),
        ATTEMPT_TIMEOUT,
    )?;
    let (server, shown) = match read_version(&client) {
        Ok(body) => {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let shown = v["gitVersion"].as_str().unwrap_or("").to_string();
            let server = version::server_version(&v);
            let shown = match (shown.is_empty(), server) {
                (false, _) => shown,
                (true, Some(s)) => format!("v{s}"),
                (true, None) => "(no version)".to_string(),
            };
            (server, shown)
        }
        Err(e) if cfg.version_flags.emulated.is_some() => {
            (None, format!("(its /version failed: {})", cause(&e)))
        }
        Err(e) => {
            return Err(Error::Config(format!(
                "reading the API server's /version to choose the Kubernetes version to emulate: {}",
                cause(&e)
            )))
        }
    };
    version::decide(server, &shown, &cfg.version_flags).map_err(Error::Config)
}

/// `/version`, asked again every second for up to [`WAIT`] while the failure may heal (an
/// API server whose authorizer is still starting answers 403 for a few seconds; a 403 burst,
/// a 5xx or a reset connection right after `/healthz` answered must not end the start).
fn read_version(client: &Client) -> Result<String> {
    let start = Instant::now();
    loop {
        match client.get_raw("/version") {
            Ok(body) => return Ok(body),
            Err(e) if permanent(&e).is_none() && start.elapsed() < WAIT => {
                log::warn!(
                    "reading the API server's /version ({}s of {}s): {}",
                    start.elapsed().as_secs(),
                    WAIT.as_secs(),
                    cause(&e)
                );
                std::thread::sleep(POLL);
            }
            Err(e) => return Err(e),
        }
    }
}

/// How long upstream waits for `/healthz`, and how often it asks.
const WAIT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_secs(1);
/// One `/healthz` request may take this long (a server that takes the connection and never
/// answers must not hold the whole wait).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// While waiting, a progress line at most this often (and whenever the cause changes).
const PROGRESS_EVERY: Duration = Duration::from_secs(3);

/// How the wait for the API server ended, when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    Healthy,
    /// SIGTERM or SIGINT came first.
    Stopped,
}

/// The failures that waiting does not cure, said in words (`{url}` is the server): edgekcm's
/// credentials refused, a certificate on either side not trusted, something that is not a
/// Kubernetes API server. None for the ones that can heal (refused or reset connections,
/// timeouts, DNS, 5xx, 429, and the 403s of an API server whose authorizer is still starting).
pub fn permanent(e: &Error) -> Option<&'static str> {
    match e {
        Error::Api { code: 401, .. } => {
            Some("the API server at {url} refuses edgekcm's credentials")
        }
        Error::Api { code, .. } if (400..500).contains(code) && ![403, 408, 429].contains(code) => {
            Some("{url}/healthz does not answer as a Kubernetes API server")
        }
        Error::Transport(m) if m.contains("invalid peer certificate") => {
            Some("edgekcm does not trust the certificate of the API server at {url}")
        }
        Error::Transport(m) if m.contains("received fatal alert") => Some(
            "the API server at {url} refused the TLS handshake (edgekcm's client certificate?)",
        ),
        Error::Transport(m)
            if m.contains("corrupt message") || m.contains("peer is incompatible") =>
        {
            Some("the server at {url} does not speak TLS as the kubeconfig expects")
        }
        Error::Config(_) => Some("the client for {url} cannot be used"),
        _ => None,
    }
}

/// The cause as client-go would put it: a Status's message (`Unauthorized`) rather than the
/// whole body.
fn cause(e: &Error) -> String {
    match e {
        Error::Api { code, message, .. } => {
            let status: Option<serde_json::Value> = serde_json::from_str(message).ok();
            match status.as_ref().and_then(|s| s["message"].as_str()) {
                Some(m) => format!("{code} {m}"),
                None => format!(
                    "{code} {}",
                    message.trim().chars().take(200).collect::<String>()
                ),
            }
        }
        other => other.to_string(),
    }
}

/// kube-controller-manager polls `/healthz` every second for 10 s before anything else and
/// exits if it never answers 200. edgekcm does the same for failures that may heal, saying
/// what it waits for; a failure that cannot heal ends the wait at once with its cause, and a
/// stop signal ends it quietly.
pub fn wait_for_apiserver(rest: &RestConfig, stop: &AtomicBool) -> Result<Waited> {
    let client = Client::new_with_timeout(
        rest,
        0.0,
        1,
        &format!("{} shared-informers", user_agent_base()),
        ATTEMPT_TIMEOUT,
    )?;
    let url = client.base_url().to_string();
    let start = Instant::now();
    let mut logged: Option<(Instant, String)> = None;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(Waited::Stopped);
        }
        let e = match client.get_raw("/healthz") {
            Ok(_) => {
                if logged.is_some() {
                    log::info!("the API server at {url} is healthy");
                }
                return Ok(Waited::Healthy);
            }
            Err(e) => e,
        };
        if stop.load(Ordering::SeqCst) {
            return Ok(Waited::Stopped);
        }
        let why = cause(&e);
        if let Some(what) = permanent(&e) {
            return Err(Error::Config(format!(
                "{} ({}): {why}",
                what.replace("{url}", &url),
                rest.source
            )));
        }
        let waited = start.elapsed();
        if waited >= WAIT {
            return Err(Error::Config(format!(
                "failed to wait for apiserver being healthy: timed out waiting for the condition: failed to get apiserver /healthz status: {why}"
            )));
        }
        let due = match &logged {
            None => true,
            Some((at, last)) => *last != why || at.elapsed() >= PROGRESS_EVERY,
        };
        if due {
            log::warn!(
                "waiting for the API server at {url} ({}s of {}s): {why}",
                waited.as_secs(),
                WAIT.as_secs()
            );
            logged = Some((Instant::now(), why));
        }
        // The next attempt a second after this one began, in steps that notice a stop.
        let next = start + POLL * (waited.as_secs() as u32 + 1);
        while Instant::now() < next {
            if stop.load(Ordering::SeqCst) {
                return Ok(Waited::Stopped);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{parse, Command};

    fn cfg(line: &str) -> Config {
        let args: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        match parse(&args).unwrap() {
            Command::Run(c) => *c,
            other => panic!("{other:?}"),
        }
    }

    /// Every controller the flags below start is implemented: the warning is seen at work
    /// with these two taken out of the implemented list.
    const PRETEND_MISSING: [&str; 2] = [
        "daemonset-controller",
        "horizontal-pod-autoscaler-controller",
    ];

    fn implemented() -> Vec<&'static str> {
        registry::implemented_names()
            .into_iter()
            .filter(|n| !PRETEND_MISSING.contains(n))
            .collect()
    }

    fn missing(line: &str) -> Vec<&'static str> {
        not_implemented(&cfg(line), &implemented())
            .iter()
            .map(|i| i.name)
            .collect()
    }

    const KUBEADM: &str = "--allocate-node-cidrs=true --cluster-cidr=10.244.0.0/16 \
        --cluster-signing-cert-file=/pki/ca.crt --cluster-signing-key-file=/pki/ca.key \
        --controllers=*,bootstrapsigner,tokencleaner --root-ca-file=/pki/ca.crt \
        --service-account-private-key-file=/pki/sa.key --use-service-account-credentials=true";

    #[test]
    fn flags_switch_controllers_on() {
        let m = missing(KUBEADM);
        assert!(m.contains(&"horizontal-pod-autoscaler-controller"), "{m:?}");
        // Never: implemented ones, cloud ones, feature-gated ones, later releases.
        for n in [
            "serviceaccount-token-controller",
            "bootstrap-signer-controller",
            "token-cleaner-controller",
            "deployment-controller",
            "certificatesigningrequest-signing-controller",
            "node-ipam-controller",
            // Its gates are off at v1.37.
            "podgroup-protection-controller",
            "selinux-warning-controller",
        ] {
            assert!(!m.contains(&n), "{n} in {m:?}");
        }
        // Without those flags upstream skips those three.
        let m = missing("");
        for n in [
            "serviceaccount-token-controller",
            "certificatesigningrequest-signing-controller",
            "node-ipam-controller",
            "bootstrap-signer-controller",
        ] {
            assert!(!m.contains(&n), "{n} in {m:?}");
        }
        assert!(m.contains(&"horizontal-pod-autoscaler-controller"));
        assert!(!m.contains(&"statefulset-controller"), "implemented");
        assert!(!m.contains(&"job-controller"), "implemented");
    }

    #[test]
    fn only_named_controllers_count() {
        assert!(missing("--controllers=deployment,replicaset,serviceaccount").is_empty());
        assert_eq!(
            missing(
                "--controllers=deployment,horizontalpodautoscaling --service-account-private-key-file=/sa.key"
            ),
            vec!["horizontal-pod-autoscaler-controller"]
        );
        assert!(not_implemented_line(&cfg("--controllers=deployment"), &implemented()).is_none());
    }

    #[test]
    fn the_emulated_version_decides_the_gated_controllers() {
        let names = |c: &Config| -> Vec<&str> {
            not_implemented(c, &registry::implemented_names())
                .iter()
                .map(|i| i.name)
                .collect()
        };
        let c = cfg("");
        assert_eq!(c.emulation.version, version::MajorMinor::kube(37));
        let at37 = names(&c);
        for n in &at37 {
            let row = registry::info(n).unwrap();
            assert!(!row.implemented() && !row.disabled_by_default, "{n}");
        }
        // Implemented: never named as missing (the storage version migrator, GA in v1.37).
        assert!(
            !at37.contains(&"storage-version-migrator-controller"),
            "{at37:?}"
        );
        assert!(!at37.contains(&"service-cidr-controller"), "{at37:?}");
        // A gate of the emulated version turns a missing controller on (one taken out of
        // the implemented names for the test).
        let rpsr = "resourcepoolstatusrequest-controller";
        assert!(!at37.contains(&rpsr), "{at37:?}");
        let c = cfg("--feature-gates=DRAResourcePoolStatus=true");
        assert!(!names(&c).contains(&rpsr));
        let mut without = registry::implemented_names();
        without.retain(|n| *n != rpsr);
        assert!(not_implemented(&c, &without).iter().any(|i| i.name == rpsr));
        let e = version::decide(
            Some(version::MajorMinor::kube(35)),
            "v1.35.0",
            &Default::default(),
        )
        .unwrap();
        let mut c = cfg("");
        c.emulate(e).unwrap();
        assert_eq!(c.emulation.version, version::MajorMinor::kube(35));
        assert!(!names(&c).contains(&"service-cidr-controller"));
        // Values set on the command line are checked again at the version chosen at start.
        let mut locked = cfg("--feature-gates=JobManagedBy=false --emulated-version=1.34");
        let flag37 = version::VersionFlags {
            emulated: Some(version::MajorMinor::kube(37)),
            min_compatibility: None,
        };
        let e37 = version::decide(None, "x", &flag37).unwrap();
        assert!(locked.emulate(e37).is_err());
        c.emulate(version::Emulation::default()).unwrap();
        assert_eq!(c.emulation.version, version::MajorMinor::kube(37));
    }

    #[test]
    fn what_waiting_cures() {
        let api = |code: u16| Error::api(code, "", "{}");
        assert!(permanent(&api(401)).is_some());
        assert!(permanent(&api(404)).is_some());
        assert!(permanent(&api(400)).is_some());
        for code in [403, 408, 429, 500, 503] {
            assert_eq!(permanent(&api(code)), None, "{code}");
        }
        let t = |m: &str| Error::Transport(m.to_string());
        assert!(permanent(&t(
            "GET https://x/healthz: io: invalid peer certificate: UnknownIssuer"
        ))
        .is_some());
        assert!(permanent(&t(
            "GET https://x/healthz: io: received fatal alert: BadCertificate"
        ))
        .is_some());
        assert_eq!(
            permanent(&t(
                "GET https://x/healthz: io: Connection refused (os error 111)"
            )),
            None
        );
        assert_eq!(
            permanent(&t("GET https://x/healthz: timeout: global")),
            None
        );
        assert_eq!(
            cause(&Error::api(
                401,
                "",
                r#"{"kind":"Status","message":"Unauthorized","code":401}"#
            )),
            "401 Unauthorized"
        );
        assert_eq!(
            cause(&Error::api(500, "", "[-]etcd failed\n")),
            "500 [-]etcd failed"
        );
    }

    #[test]
    fn one_readable_line() {
        let line = not_implemented_line(&cfg(KUBEADM), &implemented()).unwrap();
        let n = missing(KUBEADM).len();
        assert!(
            line.starts_with(&format!("{n} controllers that kube-controller-manager v1.37 would run with these flags are not in edgekcm yet: daemonset, ")),
            "{line}"
        );
        assert!(!line.contains("nodeipam") && !line.contains("csrsigning"));
        assert!(!line.contains("svm"), "{line}");
        // Short enough for one line of a terminal-wide log viewer's wrap, far under 700.
        assert!(line.len() < 600, "{} characters: {line}", line.len());
    }
}
