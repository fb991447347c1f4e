//! A kubelet stand-in for a real kube-apiserver, for running upstream's e2e suites against a
//! controller manager without container runtimes (`tools/k8s/e2e-upstream.sh`), as kwok does:
//!
//! - registers `--nodes` Ready nodes (`<prefix>-0`, ...) with room for 110 pods each, and
//!   renews their Ready heartbeat and their Lease in `kube-node-lease` every 10 s;
//! - a pod kube-scheduler bound to one of them becomes Running with an IP from
//!   10.88.<node>.0/24, and Ready once each container's readiness probe's
//!   `initialDelaySeconds` passed (at once without a probe); its containers "run" what
//!   `script.rs` recognises in their commands (the e2e Job fixtures' `exit` snippets),
//!   restarting in place as `restartPolicy` says;
//!   a pod whose containers all ended becomes Succeeded or Failed;
//! - a deleted pod's containers end as SIGTERM ends them (`script::on_term`: a `trap` handler
//!   that sleeps takes that long, within the grace period; 143 or 137), the pod gets its
//!   terminal phase, then is removed with `gracePeriodSeconds: 0`.
//!
//! Usage: cargo run --release --example kubelet -- --kubeconfig admin.conf [--nodes 3]
//!        [--prefix standin]

mod script;

use edgekcm::api::client::{Client, DeleteOptions, ListOptions, PatchType};
use edgekcm::api::kubeconfig;
use edgekcm::api::resources::{LEASES, NODES, PODS};
use edgekcm::compat::timefmt::{rfc3339, rfc3339_micro};
use script::Run;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

const HEARTBEAT: Duration = Duration::from_secs(10);
const TICK: Duration = Duration::from_millis(500);

struct Args {
    kubeconfig: PathBuf,
    nodes: usize,
    prefix: String,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        kubeconfig: PathBuf::new(),
        nodes: 3,
        prefix: "standin".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (flag.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or(format!("{name} needs a value"))
        };
        match name.as_str() {
            "--kubeconfig" => a.kubeconfig = value()?.into(),
            "--nodes" => a.nodes = value()?.parse().map_err(|e| format!("--nodes: {e}"))?,
            "--prefix" => a.prefix = value()?,
            _ => return Err(format!("unknown flag {name}")),
        }
    }
    if a.kubeconfig.as_os_str().is_empty() {
        return Err("--kubeconfig is required".into());
    }
    Ok(a)
}

/// One container of a running pod.
struct Container {
    name: String,
    image: String,
    run: Run,
    started: Instant,
    started_at: String,
    /// Ready this long after it started: its readiness probe's `initialDelaySeconds` (the
    /// probe is taken to pass from then on), zero without a probe.
    ready_after: Duration,
    restarts: u32,
    exit: Option<i32>,
}

impl Container {
    /// Running, and past its readiness probe's initial delay.
    fn is_ready(&self) -> bool {
        self.exit.is_none() && self.started.elapsed() >= self.ready_after
    }
}

/// A pod the stand-in runs.
struct PodRun {
    ns: String,
    name: String,
    node: usize,
    ip: String,
    start_time: String,
    restart: String,
    index: Option<String>,
    containers: Vec<Container>,
    written: Option<Value>,
    /// When the stand-in first saw the pod's deletion.
    terminating: Option<Instant>,
}

struct Standin {
    client: Client,
    nodes: Vec<String>,
    heartbeat: Option<Instant>,
    pods: HashMap<String, PodRun>,
    next_ip: Vec<u32>,
    /// Marker files per volume (`/data`): a hostPath's path, else the pod's uid.
    markers: HashMap<String, HashSet<String>>,
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("kubelet stand-in: {e}");
        std::process::exit(2)
    });
    edgekcm::api::client::install_crypto_provider();
    let cfg = kubeconfig::load(Some(&args.kubeconfig), None).unwrap_or_else(|e| {
        eprintln!("kubelet stand-in: {}: {e}", args.kubeconfig.display());
        std::process::exit(2)
    });
    let client = Client::new(&cfg, 0.0, 1, "kubelet-standin").expect("client");
    let nodes = (0..args.nodes)
        .map(|i| format!("{}-{i}", args.prefix))
        .collect();
    let mut s = Standin {
        client,
        nodes,
        heartbeat: None,
        pods: HashMap::new(),
        next_ip: vec![1; args.nodes],
        markers: HashMap::new(),
    };
    loop {
        if let Err(e) = s.pass() {
            log::warn!("pass: {e}");
        }
        std::thread::sleep(TICK);
    }
}

impl Standin {
    fn pass(&mut self) -> edgekcm::Result<()> {
        if self.heartbeat.is_none_or(|t| t.elapsed() >= HEARTBEAT) {
            for i in 0..self.nodes.len() {
                self.node_heartbeat(i)?;
            }
            self.heartbeat = Some(Instant::now());
        }
        let pods = self.client.list(&PODS, None, &ListOptions::default())?;
        let mut seen = HashSet::new();
        for pod in pods.items {
            let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
            let Some(i) = self.nodes.iter().position(|n| n == node) else {
                continue;
            };
            let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
            seen.insert(uid.clone());
            if let Err(e) = self.pod(i, &uid, &pod) {
                log::warn!("pod {}: {e}", pod["metadata"]["name"]);
            }
        }
        self.pods.retain(|uid, _| seen.contains(uid));
        Ok(())
    }

    fn node_heartbeat(&self, i: usize) -> edgekcm::Result<()> {
        let name = &self.nodes[i];
        let now = rfc3339(SystemTime::now());
        if let Err(e) = self.client.get(&NODES, None, name) {
            if e.code() != Some(404) {
                return Err(e);
            }
            let labels = json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64"});
            let node = json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels}});
            self.client.create(&NODES, None, &node)?;
            log::info!("node {name} registered");
        }
        let cond = |t: &str, s: &str, reason: &str| {
            json!({"type": t, "status": s, "reason": reason, "message": "kubelet stand-in",
                "lastHeartbeatTime": now, "lastTransitionTime": now})
        };
        let room = json!({"cpu": "8", "memory": "16Gi", "pods": "110",
            "ephemeral-storage": "100Gi"});
        let status = json!({"status": {
            "capacity": room, "allocatable": room,
            "conditions": [cond("Ready", "True", "KubeletReady"),
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID")],
            "addresses": [{"type": "InternalIP", "address": format!("10.0.0.{}", i + 10)},
                {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": "v1.37.2", "kubeProxyVersion": "",
                "containerRuntimeVersion": "standin://1", "operatingSystem": "linux",
                "architecture": "amd64", "osImage": "stand-in", "kernelVersion": "",
                "machineID": "", "systemUUID": "", "bootID": ""}}});
        self.client.patch(
            &NODES,
            None,
            name,
            PatchType::Strategic,
            &status,
            Some("status"),
        )?;
        self.renew_lease(name)
    }

    fn renew_lease(&self, name: &str) -> edgekcm::Result<()> {
        let spec = json!({"holderIdentity": name, "leaseDurationSeconds": 40,
            "renewTime": rfc3339_micro(SystemTime::now())});
        let ns = Some("kube-node-lease");
        match self.client.patch(
            &LEASES,
            ns,
            name,
            PatchType::Merge,
            &json!({"spec": spec}),
            None,
        ) {
            Err(e) if e.code() == Some(404) => {
                let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": "kube-node-lease"}, "spec": spec});
                self.client.create(&LEASES, ns, &lease).map(|_| ())
            }
            r => r.map(|_| ()),
        }
    }

    fn pod(&mut self, node: usize, uid: &str, pod: &Value) -> edgekcm::Result<()> {
        let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
        let deleting = !pod["metadata"]["deletionTimestamp"].is_null();
        if !self.pods.contains_key(uid) {
            if deleting || phase == "Succeeded" || phase == "Failed" {
                return self.remove_if_deleting(pod, deleting);
            }
            let run = self.start(node, uid, pod);
            self.pods.insert(uid.to_string(), run);
        }
        let mut run = self.pods.remove(uid).expect("just inserted");
        let mut gone = false;
        if deleting {
            // Containers get SIGTERM; each ends after its own handler's time (the grace
            // period at most), as `script::on_term` says, with 143 or 137.
            let since = *run.terminating.get_or_insert_with(Instant::now);
            let grace = pod["metadata"]["deletionGracePeriodSeconds"]
                .as_u64()
                .unwrap_or(0);
            let specs = pod["spec"]["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for (c, spec) in run.containers.iter_mut().zip(specs.iter()) {
                if c.exit.is_some() {
                    continue;
                }
                let (after, code) = script::on_term(&command_text(spec));
                if since.elapsed() >= after.min(Duration::from_secs(grace)) {
                    c.exit = Some(code);
                }
            }
            gone = run.containers.iter().all(|c| c.exit.is_some());
        } else {
            self.advance(uid, pod, &mut run);
        }
        let status = status_of(&run, pod);
        if run.written.as_ref() != Some(&status) {
            self.client.patch(
                &PODS,
                Some(&run.ns),
                &run.name,
                PatchType::Merge,
                &json!({"status": status}),
                Some("status"),
            )?;
            run.written = Some(status);
        }
        if gone {
            return self.remove_if_deleting(pod, true);
        }
        self.pods.insert(uid.to_string(), run);
        Ok(())
    }

    fn remove_if_deleting(&self, pod: &Value, deleting: bool) -> edgekcm::Result<()> {
        if !deleting {
            return Ok(());
        }
        let opts = DeleteOptions {
            grace_period_seconds: Some(0),
            precondition_uid: pod["metadata"]["uid"].as_str().map(str::to_string),
            ..DeleteOptions::default()
        };
        let (ns, name) = ns_name(pod);
        match self.client.delete(&PODS, Some(ns), name, &opts) {
            Err(e) if matches!(e.code(), Some(404 | 409)) => Ok(()),
            r => r,
        }
    }

    fn start(&mut self, node: usize, uid: &str, pod: &Value) -> PodRun {
        let ip = format!("10.88.{node}.{}", self.next_ip[node] % 250 + 2);
        self.next_ip[node] += 1;
        let now = rfc3339(SystemTime::now());
        let (ns, name) = ns_name(pod);
        let index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
            .map(str::to_string);
        let volume = volume_key(uid, pod);
        let markers = self.markers.entry(volume).or_default();
        let containers = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| Container {
                name: c["name"].as_str().unwrap_or("").to_string(),
                image: c["image"].as_str().unwrap_or("").to_string(),
                run: script::run(&command_text(c), index.as_deref(), markers),
                started: Instant::now(),
                started_at: now.clone(),
                ready_after: Duration::from_secs(
                    c["readinessProbe"]["initialDelaySeconds"]
                        .as_u64()
                        .unwrap_or(0),
                ),
                restarts: 0,
                exit: None,
            })
            .collect();
        log::info!("pod {ns}/{name} runs on {} as {ip}", self.nodes[node]);
        PodRun {
            ns: ns.to_string(),
            name: name.to_string(),
            node,
            ip,
            start_time: now,
            restart: pod["spec"]["restartPolicy"]
                .as_str()
                .unwrap_or("Always")
                .to_string(),
            index,
            containers,
            written: None,
            terminating: None,
        }
    }

    /// Ends containers whose run is over, restarting them as the restart policy says.
    fn advance(&mut self, uid: &str, pod: &Value, run: &mut PodRun) {
        let markers = self.markers.entry(volume_key(uid, pod)).or_default();
        let specs = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for (c, spec) in run.containers.iter_mut().zip(specs.iter()) {
            let Run::Exit { code, after } = c.run else {
                continue;
            };
            if c.exit.is_some() || c.started.elapsed() < after {
                continue;
            }
            // A container's own restartPolicy (sidecars, container restart rules) wins.
            let policy = spec["restartPolicy"].as_str().unwrap_or(&run.restart);
            let again = match policy {
                "Always" => true,
                "OnFailure" => code != 0,
                _ => false,
            };
            if again {
                c.restarts += 1;
                c.started = Instant::now();
                c.started_at = rfc3339(SystemTime::now());
                c.run = script::run(&command_text(spec), run.index.as_deref(), markers);
            } else {
                c.exit = Some(code);
            }
        }
    }
}

fn ns_name(pod: &Value) -> (&str, &str) {
    let m = &pod["metadata"];
    (
        m["namespace"].as_str().unwrap_or(""),
        m["name"].as_str().unwrap_or(""),
    )
}

fn command_text(c: &Value) -> String {
    let words = c["command"]
        .as_array()
        .into_iter()
        .chain(c["args"].as_array())
        .flatten();
    words
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where a pod's `/data` lives: a hostPath volume outlives the pod, an emptyDir does not.
fn volume_key(uid: &str, pod: &Value) -> String {
    let vols = pod["spec"]["volumes"].as_array().into_iter().flatten();
    vols.filter_map(|v| v["hostPath"]["path"].as_str())
        .next()
        .map_or_else(|| uid.to_string(), |p| format!("host:{p}"))
}

/// The pod's status as a kubelet would write it for `run`.
fn status_of(run: &PodRun, pod: &Value) -> Value {
    let statuses: Vec<Value> = run
        .containers
        .iter()
        .map(|c| {
            let state = match c.exit {
                None => json!({"running": {"startedAt": c.started_at}}),
                Some(code) => json!({"terminated": {"exitCode": code,
                    "reason": if code == 0 { "Completed" } else { "Error" },
                    "startedAt": c.started_at, "finishedAt": c.started_at}}),
            };
            json!({"name": c.name, "image": c.image, "imageID": "",
                "containerID": format!("standin://{}-{}", run.name, c.name),
                "ready": c.is_ready(), "started": c.exit.is_none(),
                "restartCount": c.restarts, "state": state})
        })
        .collect();
    let ended = run.containers.iter().all(|c| c.exit.is_some());
    let phase = if !ended {
        "Running"
    } else if run.containers.iter().all(|c| c.exit == Some(0)) {
        "Succeeded"
    } else {
        "Failed"
    };
    let all_ready = run.containers.iter().all(Container::is_ready);
    let ready = if all_ready && !ended { "True" } else { "False" };
    let t = &run.start_time;
    let cond = |ty: &str, s: &str| json!({"type": ty, "status": s, "lastTransitionTime": t});
    let mut conditions = vec![
        cond(
            "PodReadyToStartContainers",
            if ended { "False" } else { "True" },
        ),
        cond("Initialized", "True"),
        cond("Ready", ready),
        cond("ContainersReady", ready),
        cond("PodScheduled", "True"),
    ];
    // Conditions others wrote (DisruptionTarget, readiness gates) stay.
    let ours = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ];
    for c in pod["status"]["conditions"].as_array().into_iter().flatten() {
        if !ours.contains(&c["type"].as_str().unwrap_or("")) {
            conditions.push(c.clone());
        }
    }
    let host_ip = format!("10.0.0.{}", run.node + 10);
    json!({"phase": phase, "conditions": conditions, "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}], "podIP": run.ip, "podIPs": [{"ip": run.ip}],
        "startTime": run.start_time, "containerStatuses": statuses})
}
