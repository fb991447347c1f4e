//! A stand-in for the scheduler and the kubelets of a few nodes, for the demo: without it a
//! pod stays Pending and unbound forever and a graceful pod deletion never ends (see "Pods" in
//! the module documentation). Tests play kubelet by hand instead (`tests/common/nodes.rs`).
//!
//! Every `interval`, under the store lock, one pass:
//!
//! - **Nodes**: each of `nodes` exists and is Ready, with its heartbeat (the `Ready`
//!   condition's `lastHeartbeatTime` and the Lease in `kube-node-lease`) renewed every 10 s.
//! - **Binding**: a pod without `spec.nodeName` that is not being deleted goes to the node its
//!   required affinity names (`matchFields metadata.name In [<node>]`, as daemon pods have),
//!   else to the next of `nodes` in turn. Nothing else of scheduling is looked at.
//! - **Running**: a Pending pod bound to one of `nodes` becomes Running and Ready, with an IP
//!   from its node's `spec.podCIDR` (else from 10.88.<node>.0/24) and its node's IP. A pod that
//!   may not restart (`restartPolicy` `Never` or `OnFailure`) runs for `run_for`, then
//!   Succeeds with every container exited 0.
//! - **Deletion**: a pod of `nodes` with a `deletionTimestamp` is deleted with
//!   `gracePeriodSeconds: 0`, as a kubelet does once the containers stopped.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::meta::{is_deleting, name_of, namespace_of, now_rfc3339};
use super::store::{DeleteOpts, State, WriteMode};
use super::{Sandbox, Shared};
use edgekcm::api::resources::{Kind, LEASES, NAMESPACES, NODES, PODS};
use edgekcm::obj::At as _;

/// The nodes and how the stand-in behaves.
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    pub nodes: Vec<String>,
    /// Time between passes.
    pub interval: Duration,
    /// How long a pod that may not restart runs before it Succeeds.
    pub run_for: Duration,
}

impl Default for KubeletOptions {
    fn default() -> Self {
        KubeletOptions {
            nodes: vec!["node-a".into(), "node-b".into()],
            interval: Duration::from_millis(50),
            run_for: Duration::from_secs(1),
        }
    }
}

const HEARTBEAT: Duration = Duration::from_secs(10);
const LEASE_NS: &str = "kube-node-lease";

/// What the stand-in remembers between passes.
struct Node {
    heartbeat: Option<Instant>,
    /// Pod uid -> when it started running (pods that may not restart only).
    started: HashMap<String, Instant>,
    last_ip: u32,
}

struct KubeletState {
    opts: KubeletOptions,
    nodes: Vec<Node>,
    /// Pods bound in turn so far.
    bound: usize,
}

/// The running stand-in; dropping it stops it.
pub struct Kubelet {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Sandbox {
    /// Start the scheduler and kubelet stand-in for `opts.nodes` (see `sandbox/kubelet.rs`).
    pub fn start_kubelet(&self, opts: KubeletOptions) -> Kubelet {
        let shared: Arc<Shared> = self.shared.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let stop = stop.clone();
            let mut k = KubeletState::new(opts);
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) && !shared.stopped.load(Ordering::SeqCst) {
                    k.pass(&mut shared.lock_state());
                    thread::sleep(k.opts.interval);
                }
            })
        };
        Kubelet {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn update(st: &mut State, kind: &Kind, obj: Value, mode: WriteMode) {
    let (ns, name) = (namespace_of(&obj).to_string(), name_of(&obj).to_string());
    if let Err(e) = st.update(kind, &ns, &name, obj, mode) {
        log::debug!("sandbox kubelet: {} {ns}/{name}: {}", kind.kind, e.message);
    }
}

fn true_conditions(types: &[&str], now: &str) -> Value {
    let list: Vec<Value> = types
        .iter()
        .map(|t| json!({"type": t, "status": "True", "lastTransitionTime": now}))
        .collect();
    Value::Array(list)
}

impl KubeletState {
    fn new(opts: KubeletOptions) -> KubeletState {
        let nodes = opts
            .nodes
            .iter()
            .map(|_| Node {
                heartbeat: None,
                started: HashMap::new(),
                last_ip: 1,
            })
            .collect();
        KubeletState {
            opts,
            nodes,
            bound: 0,
        }
    }

    /// One pass over nodes and pods.
    fn pass(&mut self, st: &mut State) {
        for i in 0..self.nodes.len() {
            self.node(st, i);
        }
        let pods: Vec<Value> = st.iter_kind(&PODS, None).map(|p| (**p).clone()).collect();
        for p in pods {
            let node = p.at("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
            if node.is_empty() {
                if !is_deleting(&p) {
                    self.bind(st, p);
                }
                continue;
            }
            let Some(i) = self.opts.nodes.iter().position(|n| n == node) else {
                continue;
            };
            if is_deleting(&p) {
                let (ns, name) = (namespace_of(&p), name_of(&p));
                let now = DeleteOpts {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                };
                let _ = st.delete(&PODS, ns, name, &now);
                continue;
            }
            self.run(st, i, p);
        }
    }

    /// Register node `i` and renew its heartbeat when due.
    fn node(&mut self, st: &mut State, i: usize) {
        let name = self.opts.nodes[i].clone();
        if self.nodes[i]
            .heartbeat
            .is_some_and(|t| t.elapsed() < HEARTBEAT)
            && st.get(&NODES, "", &name).is_some()
        {
            return;
        }
        let now = now_rfc3339();
        let mut since = now.clone();
        let mut n = match st.get(&NODES, "", &name) {
            Some(n) => {
                // A node that stays Ready keeps the time it became Ready.
                if let Some(t) = n.at("/status/conditions/0/lastTransitionTime") {
                    since = t.as_str().unwrap_or(&now).to_string();
                }
                (*n).clone()
            }
            None => {
                // Volumes are attached by the controller, as kubelets do by default.
                let n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
                    "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
                    "annotations": {
                        "volumes.kubernetes.io/controller-managed-attach-detach": "true"}}});
                match st.create(&NODES, None, n) {
                    Ok(n) => (*n).clone(),
                    Err(_) => return,
                }
            }
        };
        let capacity = json!({"cpu": "4", "memory": "8Gi", "pods": "110"});
        n["status"] = json!({"capacity": capacity, "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": format!("192.168.0.{}", i + 10)},
                {"type": "Hostname", "address": name}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status (sandbox stand-in)",
                "lastHeartbeatTime": now, "lastTransitionTime": since}]});
        update(st, &NODES, n, WriteMode::Status);
        self.renew_lease(st, &name, &now);
        self.nodes[i].heartbeat = Some(Instant::now());
    }

    fn renew_lease(&self, st: &mut State, node: &str, now: &str) {
        if st.get(&NAMESPACES, "", LEASE_NS).is_none() {
            let ns =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NS}});
            let _ = st.create(&NAMESPACES, None, ns);
        }
        let micro = now.replace('Z', ".000000Z");
        match st.get(&LEASES, LEASE_NS, node) {
            Some(l) => {
                let mut l = (*l).clone();
                l["spec"]["renewTime"] = json!(micro);
                update(st, &LEASES, l, WriteMode::Main);
            }
            None => {
                let l = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": node, "namespace": LEASE_NS},
                    "spec": {"holderIdentity": node, "leaseDurationSeconds": 40,
                        "renewTime": micro}});
                let _ = st.create(&LEASES, Some(LEASE_NS), l);
            }
        }
    }

    /// Bind a pod to the node its affinity names, else to the next node in turn.
    fn bind(&mut self, st: &mut State, mut p: Value) {
        if self.nodes.is_empty() {
            return;
        }
        let terms = p
            .at("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let wanted = terms
            .iter()
            .filter_map(|t| t.get("matchFields").and_then(Value::as_array))
            .flatten()
            .filter(|f| f["key"] == "metadata.name" && f["operator"] == "In")
            .filter_map(|f| f.at("/values/0").and_then(Value::as_str))
            .find_map(|n| self.opts.nodes.iter().position(|m| m == n));
        let i = wanted.unwrap_or_else(|| {
            self.bound += 1;
            (self.bound - 1) % self.nodes.len()
        });
        p["spec"]["nodeName"] = json!(self.opts.nodes[i]);
        update(st, &PODS, p, WriteMode::Main);
    }

    /// Start a Pending pod on node `i`; finish one that may not restart once it ran long
    /// enough.
    fn run(&mut self, st: &mut State, i: usize, mut p: Value) {
        let phase = p.at("/status/phase").and_then(Value::as_str).unwrap_or("");
        let uid = p
            .at("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let restarts = p.at("/spec/restartPolicy").and_then(Value::as_str) == Some("Always");
        let now = now_rfc3339();
        let containers: Vec<String> = p
            .at("/spec/containers")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .map(|c| name_of_container(c).to_string())
                    .collect()
            })
            .unwrap_or_default();
        match phase {
            "" | "Pending" => {
                let ip = self.pod_ip(st, i);
                let statuses: Vec<Value> = containers
                    .iter()
                    .map(|c| {
                        json!({"name": c, "ready": true, "restartCount": 0,
                        "started": true, "state": {"running": {"startedAt": now}}})
                    })
                    .collect();
                p["status"] = json!({"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                    "hostIP": format!("192.168.0.{}", i + 10), "startTime": now,
                    "conditions": true_conditions(
                        &["PodScheduled", "Initialized", "ContainersReady", "Ready"], &now),
                    "containerStatuses": statuses});
                if !restarts {
                    self.nodes[i].started.insert(uid, Instant::now());
                }
                update(st, &PODS, p, WriteMode::Status);
            }
            "Running" if !restarts => {
                let done = self.nodes[i]
                    .started
                    .get(&uid)
                    .is_none_or(|t| t.elapsed() >= self.opts.run_for);
                if !done {
                    return;
                }
                self.nodes[i].started.remove(&uid);
                p["status"]["phase"] = json!("Succeeded");
                p["status"]["conditions"] = true_conditions(&["PodScheduled", "Initialized"], &now);
                p["status"]["containerStatuses"] = containers
                    .iter()
                    .map(|c| {
                        json!({"name": c, "ready": false, "restartCount": 0,
                        "started": false, "state": {"terminated": {"exitCode": 0,
                        "reason": "Completed", "startedAt": now, "finishedAt": now}}})
                    })
                    .collect();
                update(st, &PODS, p, WriteMode::Status);
            }
            _ => {}
        }
    }

    /// The next pod IP of node `i`: from its podCIDR when it has one.
    fn pod_ip(&mut self, st: &State, i: usize) -> String {
        let n = &mut self.nodes[i];
        n.last_ip = if n.last_ip >= 254 { 2 } else { n.last_ip + 1 };
        let cidr = st.get(&NODES, "", &self.opts.nodes[i]).and_then(|n| {
            n.at("/spec/podCIDR")
                .and_then(Value::as_str)
                .map(String::from)
        });
        let base = cidr
            .as_deref()
            .and_then(|c| c.split('/').next())
            .and_then(|a| a.rsplit_once('.'))
            .map(|(net, _)| net.to_string())
            .unwrap_or_else(|| format!("10.88.{i}"));
        format!("{base}.{}", n.last_ip)
    }
}

fn name_of_container(c: &Value) -> &str {
    c.get("name").and_then(Value::as_str).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SandboxOptions;

    fn pod(name: &str, restart: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "i"}]}})
    }

    #[test]
    fn binds_runs_finishes_and_removes_pods() {
        let sb = Sandbox::start(SandboxOptions::default()).unwrap();
        let mut k = KubeletState::new(KubeletOptions {
            run_for: Duration::ZERO,
            ..Default::default()
        });
        sb.create(&PODS, pod("web", "Always")).unwrap();
        sb.create(&PODS, pod("job", "Never")).unwrap();
        let mut daemon = pod("daemon", "Always");
        daemon["spec"]["affinity"] = json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In",
                    "values": ["node-b"]}]}]}}});
        sb.create(&PODS, daemon).unwrap();
        k.pass(&mut sb.shared.lock_state()); // nodes, binding
        k.pass(&mut sb.shared.lock_state()); // running
        let get = |n: &str| sb.get(&PODS, Some("default"), n);
        for n in ["node-a", "node-b"] {
            let node = sb.get(&NODES, None, n).unwrap();
            assert_eq!(node.at("/status/conditions/0/status"), Some(&json!("True")));
            assert!(sb.get(&LEASES, Some(LEASE_NS), n).is_some());
        }
        assert_eq!(get("daemon").unwrap()["spec"]["nodeName"], "node-b");
        let web = get("web").unwrap();
        assert_eq!(web["status"]["phase"], "Running");
        assert!(web["status"]["podIP"]
            .as_str()
            .unwrap()
            .starts_with("10.88."));
        let ready = &web["status"]["conditions"].as_array().unwrap()[3];
        assert_eq!(
            (&ready["type"], &ready["status"]),
            (&json!("Ready"), &json!("True"))
        );
        assert_eq!(get("job").unwrap()["status"]["phase"], "Running");
        k.pass(&mut sb.shared.lock_state());
        let job = get("job").unwrap();
        assert_eq!(job["status"]["phase"], "Succeeded");
        assert_eq!(
            job.at("/status/containerStatuses/0/state/terminated/exitCode"),
            Some(&json!(0))
        );

        sb.delete(&PODS, Some("default"), "web").unwrap();
        assert!(get("web").unwrap()["metadata"]["deletionTimestamp"].is_string());
        k.pass(&mut sb.shared.lock_state());
        assert!(get("web").is_none());
        drop(sb.start_kubelet(KubeletOptions::default()));
    }
}
