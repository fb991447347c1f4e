//! The main job: connect, elect a leader (optional), start the controllers, serve health.

use crate::api::client::{user_agent_base, Client};
use crate::api::fence::WriteFence;
use crate::api::kubeconfig::{self, RestConfig};
use crate::api::resources::LEASES;
use crate::cache::Cache;
use crate::config::Config;
use crate::controllers::registry;
use crate::controllers::{EventSpec, EventType, ObjectRef, Runnable, Settings};
use crate::credentials::ServiceAccountTokens;
use crate::error::{Error, Result};
use crate::events::Recorder;
use crate::leader::{Ended, LeaderElectionConfig, LeaderElector, LeaseApi};
use crate::manager::Manager;
use crate::server::{Health, ServeConfig, Server};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Process exit status after a clean stop.
pub const EXIT_OK: i32 = 0;
/// Exit status when leadership is lost (as upstream: the process exits and is restarted).
pub const EXIT_LOST_LEADERSHIP: i32 = 1;

struct LeaseClient {
    client: Client,
    namespace: String,
    name: String,
}

impl LeaseApi for LeaseClient {
    fn get(&self) -> Result<Option<Value>> {
        match self.client.get(&LEASES, Some(&self.namespace), &self.name) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
    fn create(&self, lease: &Value) -> Result<Value> {
        self.client.create(&LEASES, Some(&self.namespace), lease)
    }
    fn update(&self, lease: &Value) -> Result<Value> {
        self.client.update(&LEASES, lease)
    }
}

/// The client a controller writes with: its own ServiceAccount with
/// `--use-service-account-credentials`, else the root identity.
fn controller_client(
    cfg: &Config,
    rest: &RestConfig,
    root: &Client,
    ctrl: &Settings,
) -> Result<Client> {
    let name = ctrl.name;
    let (qps, burst) = ctrl.client_rate(cfg.kube_api_qps, cfg.kube_api_burst);
    let ua = format!("{} {name}", user_agent_base());
    let sa = registry::info(name).and_then(|i| i.sa_name);
    match sa {
        Some(sa) if cfg.use_service_account_credentials => {
            let anonymous = RestConfig {
                client_cert_pem: None,
                client_key_pem: None,
                token: None,
                token_file: None,
                ..rest.clone()
            };
            let ua = format!("{ua}/system:serviceaccount:kube-system:{sa}");
            Client::with_token_source(
                &anonymous,
                qps,
                burst,
                &ua,
                Arc::new(ServiceAccountTokens::new(root.clone(), sa)),
            )
        }
        _ => Client::new(rest, qps, burst, &ua),
    }
}

/// Every enabled controller edgekcm has, built from its row of the controller table, with
/// the settings of its row.
fn build_controllers(cfg: &Config, rest: &RestConfig) -> Result<Vec<(Runnable, Settings)>> {
    let mut out = Vec::new();
    for row in registry::implemented() {
        if !cfg.controllers.is_enabled(row.name) {
            continue;
        }
        // As v1.37's descriptors: not started while a gate it requires is off.
        if !registry::required_gates(row.name)
            .iter()
            .all(|g| cfg.gates.enabled(g))
        {
            continue;
        }
        if let Some(c) = row.build(cfg, rest)? {
            out.push((c, row.settings(cfg)));
        }
    }
    Ok(out)
}

fn lease_event(recorder: &Recorder, client: &Client, lease: &Value, message: String) {
    recorder.record(
        client,
        "kube-controller-manager",
        EventSpec {
            involved: ObjectRef::of(&LEASES, lease),
            event_type: EventType::Normal,
            reason: "LeaderElection".into(),
            message,
        },
    );
}

/// Run until `stop` is set (returns EXIT_OK) or leadership is lost (EXIT_LOST_LEADERSHIP).
pub fn run(mut cfg: Config, stop: Arc<AtomicBool>) -> Result<i32> {
    crate::config::files::check(&cfg, |name| cfg.controllers.is_enabled(name))?;
    let rest = kubeconfig::load(cfg.kubeconfig.as_deref(), cfg.master.as_deref())?;
    rest.validate()?;
    let base_ua = user_agent_base();
    let root = Client::new(
        &rest,
        cfg.kube_api_qps,
        cfg.kube_api_burst,
        &format!("{base_ua} shared-informers"),
    )?;
    // Every write but the Lease's passes this fence; it closes at shutdown (see `wind_down`).
    let fence = WriteFence::new();
    root.set_fence(fence.clone());
    log::info!(
        "edgekcm v{} using {} ({})",
        env!("CARGO_PKG_VERSION"),
        rest.server,
        rest.source
    );
    if cfg.use_service_account_credentials
        && cfg.sa_controller.service_account_private_key_file.is_none()
    {
        log::warn!("--use-service-account-credentials was specified without providing a --service-account-private-key-file");
    }

    let health = Health::new();
    // systemd: ping the watchdog while /healthz passes (WatchdogSec= in the unit).
    let _watchdog = crate::runtime::notify::start_watchdog({
        let h = health.clone();
        move || h.healthz(&Default::default()).status == 200
    });
    let server = start_server(&cfg, &health)?;

    if crate::startup::wait_for_apiserver(&rest, &stop)? == crate::startup::Waited::Stopped {
        if let Some(s) = server {
            s.stop();
        }
        return Ok(EXIT_OK);
    }

    let emulation = crate::startup::emulation(&rest, &cfg)?;
    log::info!("{}", emulation.line());
    crate::config::zpages::set_emulated(emulation.version.to_string());
    cfg.emulate(emulation)?;
    for line in cfg.gates.warnings() {
        log::warn!("{line}");
    }
    crate::config::gates::install(cfg.gates.clone());

    let controllers = build_controllers(&cfg, &rest)?;
    if let Some(line) = crate::startup::not_implemented_line(&cfg, &registry::implemented_names()) {
        log::warn!("{line}");
    }

    let recorder = Arc::new(Recorder::start());
    let cache = Cache::new(root.clone());
    crate::cache::register_metrics(&cache);
    let mut manager = Manager::new(cache.clone(), recorder.clone());
    for (c, settings) in controllers {
        let client = controller_client(&cfg, &rest, &root, &settings)?;
        client.set_fence(fence.clone());
        manager.add(c, settings, client);
    }

    let elector = leader_elector(&cfg, &rest, &base_ua, &health)?;
    set_ready_check(&health, &cache, elector.clone());

    let manager = Arc::new(Mutex::new(manager));
    let started = Arc::new(AtomicBool::new(false));
    let start_controllers = {
        let (manager, health, stop, started) = (
            manager.clone(),
            health.clone(),
            stop.clone(),
            started.clone(),
        );
        move || {
            let mut m = manager.lock().unwrap_or_else(|p| p.into_inner());
            if m.start(&stop) {
                for name in m.controller_names() {
                    health.add_check(name, Arc::new(|| Ok(())));
                }
                started.store(true, Ordering::SeqCst);
                let n = m.controller_names().len();
                crate::runtime::notify::ready(&format!("caches synced; {n} controllers running"));
            }
        }
    };

    // None: leader election is off. Otherwise how the elector ended and the elector.
    let led = match &elector {
        None => {
            start_controllers();
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
            }
            None
        }
        Some(e) => {
            let lead = Lead {
                cfg: &cfg,
                elector: e,
                lease_client: &root,
                recorder: &recorder,
                started: &started,
                stop: &stop,
            };
            match lead.run(start_controllers)? {
                Some(led) => Some(led),
                None => {
                    // As upstream: exit at once, nothing released; the successor waits out
                    // the lease. Nothing more is written meanwhile: another may hold the
                    // lease already.
                    fence.close();
                    log::error!("leaderelection lost");
                    crate::runtime::notify::stopping();
                    return Ok(EXIT_LOST_LEADERSHIP);
                }
            }
        }
    };

    log::info!("shutting down");
    crate::runtime::notify::stopping();
    shut_down(led, &manager, &recorder, &fence);
    if let Some(s) = server {
        s.stop();
    }
    Ok(EXIT_OK)
}

/// The secure port with its authentication, /metrics, the debug routes and the enabled
/// controllers' own routes; None when `--secure-port` is 0.
fn start_server(
    cfg: &Config,
    health: &Arc<Health>,
) -> Result<Option<crate::server::RunningServer>> {
    if cfg.secure_port == 0 {
        return Ok(None);
    }
    let mut s = Server::new(
        ServeConfig {
            bind_address: cfg.bind_address,
            port: cfg.secure_port,
            cert_dir: cfg.cert_dir.clone(),
            tls_cert_file: cfg.tls_cert_file.clone(),
            tls_private_key_file: cfg.tls_private_key_file.clone(),
        },
        health.clone(),
    );
    let auth = crate::auth::Delegating::new(crate::auth::AuthOptions::from_config(cfg)?)?;
    s.set_filter(auth.filter());
    s.route("/metrics", crate::server::metrics_handler());
    crate::config::debug::install(&mut s, cfg);
    for row in registry::implemented() {
        if let Some(route) = row.debug.filter(|_| cfg.controllers.is_enabled(row.name)) {
            let (base, handler) = route();
            s.route_tree(base, handler);
        }
    }
    Ok(Some(s.start()?))
}

/// The leader elector when leader election is on, with its health check.
fn leader_elector(
    cfg: &Config,
    rest: &RestConfig,
    base_ua: &str,
    health: &Arc<Health>,
) -> Result<Option<Arc<LeaderElector>>> {
    if !cfg.leader_election.enabled {
        return Ok(None);
    }
    let le = &cfg.leader_election;
    let client = Client::new_with_timeout(
        rest,
        cfg.kube_api_qps,
        cfg.kube_api_burst,
        &format!("{base_ua} leader-election"),
        le.renew_deadline / 2,
    )?;
    let api = Arc::new(LeaseClient {
        client,
        namespace: le.resource_namespace.clone(),
        name: le.resource_name.clone(),
    });
    let e = LeaderElector::new(
        LeaderElectionConfig {
            lock_namespace: le.resource_namespace.clone(),
            lock_name: le.resource_name.clone(),
            identity: crate::leader::default_identity(),
            lease_duration: le.lease_duration,
            renew_deadline: le.renew_deadline,
            retry_period: le.retry_period,
        },
        api,
    );
    let h = e.clone();
    health.add_check(
        "leaderElection",
        Arc::new(move || h.healthy(Duration::from_secs(20))),
    );
    Ok(Some(e))
}

/// /readyz: the caches synced and, with leader election, the elector healthy.
fn set_ready_check(health: &Health, cache: &Arc<Cache>, elector: Option<Arc<LeaderElector>>) {
    let cache = cache.clone();
    health.set_ready_check(Arc::new(move || {
        if !cache.has_synced() {
            return Err("caches not synced".into());
        }
        match &elector {
            Some(e) => e.healthy(Duration::from_secs(20)),
            None => Ok(()),
        }
    }));
}

/// How the elector ended (None: still ending when the stop came), what it reports on, and
/// the elector.
type Led = (
    Option<Ended>,
    std::sync::mpsc::Receiver<Ended>,
    Arc<LeaderElector>,
);

/// Running with leader election: the controllers start once the lease is held.
struct Lead<'a> {
    cfg: &'a Config,
    elector: &'a Arc<LeaderElector>,
    lease_client: &'a Client,
    recorder: &'a Arc<Recorder>,
    started: &'a Arc<AtomicBool>,
    stop: &'a Arc<AtomicBool>,
}

impl Lead<'_> {
    /// Elect until the stop (Some: how it ended) or until the lease is lost (None).
    fn run(self, start_controllers: impl FnOnce() + Send + 'static) -> Result<Option<Led>> {
        let (e, stop) = (self.elector, self.stop);
        // systemd: a standby is up once it has seen another holder of the lease.
        let (e2, started2) = (e.clone(), self.started.clone());
        crate::runtime::notify::ready_when(stop.clone(), move || {
            let holder = e2.leader();
            let standby =
                !started2.load(Ordering::SeqCst) && !holder.is_empty() && holder != e2.identity();
            standby.then(|| format!("standby; the lease is held by {holder}"))
        });
        let lease_client = self.lease_client.clone();
        let (rec1, e1, lc1) = (self.recorder.clone(), e.clone(), lease_client.clone());
        let api_for_event = LeaseClient {
            client: lease_client.clone(),
            namespace: self.cfg.leader_election.resource_namespace.clone(),
            name: self.cfg.leader_election.resource_name.clone(),
        };
        let on_started = move || {
            if let Ok(Some(lease)) = api_for_event.get() {
                lease_event(
                    &rec1,
                    &lc1,
                    &lease,
                    format!("{} became leader", e1.identity()),
                );
            }
            // Controllers start on their own thread; the elector keeps renewing.
            std::thread::spawn(start_controllers);
        };
        // The elector runs on its own thread so that a stop is acted on at once, even
        // while an attempt waits on a slow API server.
        let (tx, rx) = std::sync::mpsc::channel();
        let (e3, stop3) = (e.clone(), stop.clone());
        std::thread::Builder::new()
            .name("leader-election".into())
            .spawn(move || {
                let _ = tx.send(e3.run(on_started, &stop3));
            })
            .map_err(|err| Error::Io(format!("cannot start leader election: {err}")))?;
        let ended = loop {
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(ended) => break Some(ended),
                Err(RecvTimeoutError::Timeout) if !stop.load(Ordering::SeqCst) => {}
                // Stopped (the elector ends soon), or the elector thread is gone.
                Err(_) => break None,
            }
        };
        if ended == Some(Ended::Lost) && !stop.load(Ordering::SeqCst) {
            return Ok(None);
        }
        Ok(Some((ended, rx, e.clone())))
    }
}

/// A clean stop: the controllers wound down and, when this process led, the lease given up.
fn shut_down(
    led: Option<Led>,
    manager: &Arc<Mutex<Manager>>,
    recorder: &Arc<Recorder>,
    fence: &WriteFence,
) {
    let t0 = Instant::now();
    match led {
        None => {
            wind_down(manager, recorder, fence, t0);
        }
        // Never led: nothing ran and nothing is written, the Lease included.
        Some((Some(Ended::NeverLed), _, _)) => {}
        // Stopped as the lease was lost: nothing to hand over.
        Some((Some(Ended::Lost), _, _)) => fence.close(),
        // Leading, or the elector is still ending an attempt: stop writing, then give the
        // lease up, unless a write may still land after that.
        Some((ended, rx, e)) => {
            let drained = wind_down(manager, recorder, fence, t0);
            // An attempt still unfinished by now waits on a request; should it renew the
            // lease after all, the release's resourceVersion check keeps either write from
            // undoing the other unseen.
            let wait = (t0 + WRITES_GRACE).saturating_duration_since(Instant::now());
            match ended.or_else(|| rx.recv_timeout(wait).ok()) {
                Some(Ended::NeverLed | Ended::Lost) => {}
                _ if drained => release_within(&e, t0 + STOP_GRACE),
                _ => log::warn!(
                    "not releasing lease {}: {} write(s) still unanswered; it expires in {}s",
                    e.config().describe(),
                    fence.in_flight(),
                    e.config().lease_duration.as_secs()
                ),
            }
        }
    }
}

/// How long a clean stop takes at most, the release of the Lease included. Of it, the
/// controllers get `WORKERS_GRACE` to finish the keys in hand, queued Events are sent until
/// `EVENTS_GRACE`, and writes already sent are waited for until `WRITES_GRACE`. A standby
/// looks at the lease every 0.5-1.1 s (`--leader-elect-retry-period` 2 s), so even a busy
/// leader, which releases after about 0.9 s, is succeeded within 3 s of its SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(2);
const WORKERS_GRACE: Duration = Duration::from_millis(600);
const EVENTS_GRACE: Duration = Duration::from_millis(900);
const WRITES_GRACE: Duration = Duration::from_millis(1500);

/// Stop writing, bounded by the graces above from `t0`: no new reconciles, the keys in hand
/// finish (or are cut short when the fence closes), queued Events go out, then the fence
/// closes and the writes on the wire are waited for. True if none is left unanswered, i.e.
/// nothing this process sent can land after this returns.
fn wind_down(
    manager: &Mutex<Manager>,
    recorder: &Recorder,
    fence: &WriteFence,
    t0: Instant,
) -> bool {
    {
        let mut m = manager.lock().unwrap_or_else(|p| p.into_inner());
        m.stop_work();
        if !m.wait_workers(t0 + WORKERS_GRACE) {
            log::info!(
                "controllers still busy after {}ms; their remaining writes are not sent",
                WORKERS_GRACE.as_millis()
            );
        }
    }
    recorder.shutdown((t0 + EVENTS_GRACE).saturating_duration_since(Instant::now()));
    fence.close();
    fence.drain(t0 + WRITES_GRACE)
}

/// Release the Lease (see `LeaderElector::release`), waiting for the answer until `until`
/// (at least a quarter second). Past that the process exits anyway: the PUT lands or not,
/// and either way nothing of ours follows it.
fn release_within(e: &Arc<LeaderElector>, until: Instant) {
    let (tx, rx) = std::sync::mpsc::channel();
    let e2 = e.clone();
    std::thread::spawn(move || {
        let _ = tx.send(e2.release());
    });
    let wait = until
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(250));
    match rx.recv_timeout(wait) {
        Ok(Ok(_)) => {}
        Ok(Err(err)) => log::error!("Failed to release lock: {err}"),
        Err(_) => log::warn!(
            "releasing lease {} took longer than {}ms; exiting",
            e.config().describe(),
            wait.as_millis()
        ),
    }
}
