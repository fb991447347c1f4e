//! What the controllers that list a Service's pods share (endpoints, endpointslice): an index
//! of the Services' selectors and of the pods' labels, so that a pod event finds its Services
//! and a sync finds its pods without decoding a namespace's objects, and upstream's
//! `GetServicesToUpdateOnPodChange` (which Services a pod change concerns). Also the pod
//! predicates both use (`ShouldPodBeInEndpoints`, `ShouldSetHostname`, `FindPort`, address
//! families).

use crate::cache::{Cache, Delta, DeltaKind};
use crate::obj::{self, At as _, Obj};
use serde_json::{Map, Value};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long pod changes gather at least before their Service's sync, whatever the batch
/// period flag (`--endpoint-updates-batch-period`, `--endpointslice-updates-batch-period`)
/// says below it (upstream: 0 by default). A pod's deletion, its stopped containers and its
/// removal, or a rollout's pods of one Service, come milliseconds apart; synced one by one
/// they make a write each (and each sync decodes the Service's pods), and every slice write
/// goes to each node's kube-proxy, which applies changes at most once a second
/// (`--iptables-min-sync-period`). In the 300 x 5 rolling update this window takes the slice
/// writes from 1.2x upstream's to 0.84-0.95x.
pub const POD_CHANGE_WINDOW: Duration = Duration::from_millis(100);

/// How long pod changes wait before their Service's sync: the batch period, at least
/// `POD_CHANGE_WINDOW`.
pub fn pod_change_delay(batch_period: Duration) -> Duration {
    batch_period.max(POD_CHANGE_WINDOW)
}

/// What the two Service controllers read of a pod beyond its metadata: the pod index
/// (`PodInfo`), the predicates below and the endpoints and slices built from them. Their pod
/// watch keeps these (`endpoints::POD_WATCH`), and a sync decodes only these: what other
/// controllers have the cache keep of a pod (its containers' statuses, say) is skipped by the
/// parser, where decoding whole pods was a sixth of the CPU of a rolling update behind
/// Services.
pub const SYNC_FIELDS: &[&str] = &[
    "/spec/nodeName",
    "/spec/hostname",
    "/spec/subdomain",
    "/spec/containers/*/ports",
    "/status/phase",
    "/status/podIP",
    "/status/podIPs",
    "/status/conditions",
];

/// A Service's selector as a string map; None for no selector (or an empty one, which the
/// apiserver never stores: it selects nothing).
pub fn selector(svc: &Value) -> Option<&Map<String, Value>> {
    svc.at("/spec/selector")
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
}

/// What the pod index keeps of a pod: its labels (for the selectors) and fingerprints of
/// what upstream's `podEndpointsChanged` compares.
struct PodInfo {
    labels: obj::Labels,
    /// `label_pair` of each string-valued label: the pod's entries in `Index::by_label`.
    pairs: Box<[u64]>,
    deleting: bool,
    /// Readiness and pod IPs.
    state: u64,
    /// Hostname and subdomain.
    host: u64,
}

impl PodInfo {
    fn of(p: &Value) -> PodInfo {
        let mut h = DefaultHasher::new();
        is_ready(p).hash(&mut h);
        if let Some(ips) = p.at("/status/podIPs").and_then(Value::as_array) {
            ips.len().hash(&mut h);
            for ip in ips {
                ip.get("ip").and_then(Value::as_str).hash(&mut h);
            }
        }
        let mut host = DefaultHasher::new();
        p.at("/spec/hostname")
            .and_then(Value::as_str)
            .hash(&mut host);
        p.at("/spec/subdomain")
            .and_then(Value::as_str)
            .hash(&mut host);
        let pairs = obj::labels(p)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some(label_pair(k, v.as_str()?)))
            .collect();
        PodInfo {
            labels: obj::Labels::of(p),
            pairs,
            deleting: obj::is_deleting(p),
            state: h.finish(),
            host: host.finish(),
        }
    }
}

/// A label `key=value` as a number: the key of the pods' label index (two pairs sharing one
/// only make a candidate set larger; the selector is checked in full on each candidate).
fn label_pair(key: &str, value: &str) -> u64 {
    let mut h = DefaultHasher::new();
    (key, value).hash(&mut h);
    h.finish()
}

/// The Services' selectors, each filed under its first label pair: the Services of a pod are
/// among those filed under one of the pod's own pairs (a selector takes only pods carrying
/// all of its pairs), so a pod event reads a few selectors, not every one of the namespace
/// (matching each pod change against the namespace's 300 selectors was a tenth of the CPU
/// of a rolling update behind 300 Services).
#[derive(Default)]
struct Selectors {
    /// Service key -> its selector, and the pair it is filed under.
    by_key: HashMap<String, (obj::Labels, u64)>,
    /// Namespace -> pair -> keys of the Services filed under it.
    by_pair: HashMap<String, HashMap<u64, BTreeSet<String>>>,
}

impl Selectors {
    fn remove(&mut self, key: &str) {
        let Some((_, pair)) = self.by_key.remove(key) else {
            return;
        };
        let (ns, _) = obj::split_key(key);
        let Some(m) = self.by_pair.get_mut(ns) else {
            return;
        };
        if let Some(set) = m.get_mut(&pair) {
            set.remove(key);
            if set.is_empty() {
                m.remove(&pair);
            }
        }
        if m.is_empty() {
            self.by_pair.remove(ns);
        }
    }
}

/// The pods of every namespace, and which of them carry each label pair.
#[derive(Default)]
struct Index {
    /// Namespace -> pod name -> what is kept of it.
    pods: HashMap<String, BTreeMap<Arc<str>, PodInfo>>,
    /// Namespace -> `label_pair` -> the names of the pods carrying it. A sync starts from its
    /// selector's rarest pair instead of matching every pod of the namespace (that scan was
    /// a fifth of the CPU of a rolling update of 300 Deployments x 5 behind 300 Services).
    /// The names are shared with `pods`.
    by_label: HashMap<String, HashMap<u64, BTreeSet<Arc<str>>>>,
}

impl Index {
    fn unlink(&mut self, ns: &str, name: &str, pairs: &[u64]) {
        let Some(m) = self.by_label.get_mut(ns) else {
            return;
        };
        for pair in pairs {
            if let Some(set) = m.get_mut(pair) {
                set.remove(name);
                if set.is_empty() {
                    m.remove(pair);
                }
            }
        }
        if m.is_empty() {
            self.by_label.remove(ns);
        }
    }

    fn link(&mut self, ns: &str, name: &Arc<str>, pairs: &[u64]) {
        if pairs.is_empty() {
            return;
        }
        let m = self.by_label.entry(ns.to_string()).or_default();
        for pair in pairs {
            m.entry(*pair).or_default().insert(name.clone());
        }
    }
}

/// The Services' selectors and the pods' labels, kept in step with both watches.
#[derive(Default)]
pub struct ServicePods {
    /// Services' selectors (as `matchLabels`), by key.
    services: Mutex<Selectors>,
    pods: Mutex<Index>,
}

impl ServicePods {
    fn pods(&self) -> std::sync::MutexGuard<'_, Index> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follow one delta of the Services' watch.
    pub fn observe_service(&self, d: &Delta) {
        let key = obj::key(d.object());
        let mut g = self.services.lock().unwrap_or_else(|p| p.into_inner());
        g.remove(&key);
        let Some(svc) = d.new.as_deref().filter(|_| d.kind != DeltaKind::Deleted) else {
            return;
        };
        let Some(sel) = selector(svc) else {
            return;
        };
        // A value that is not a string matches no pod (as in `selected`).
        let Some(first) = sel
            .iter()
            .next()
            .and_then(|(k, v)| Some(label_pair(k, v.as_str()?)))
        else {
            return;
        };
        if sel.values().all(Value::is_string) {
            g.by_pair
                .entry(obj::namespace(svc).to_string())
                .or_default()
                .entry(first)
                .or_default()
                .insert(key.clone());
            g.by_key.insert(key, (obj::Labels::from_map(sel), first));
        }
    }

    /// Keys of the Services in the pod's namespace whose selector matches it, in key order.
    fn matching(&self, pod: &Value) -> Vec<String> {
        let Some(labels) = obj::labels(pod) else {
            return vec![];
        };
        let g = self.services.lock().unwrap_or_else(|p| p.into_inner());
        let Some(filed) = g.by_pair.get(obj::namespace(pod)) else {
            return vec![];
        };
        let mut out: Vec<String> = labels
            .iter()
            .filter_map(|(k, v)| filed.get(&label_pair(k, v.as_str()?)))
            .flatten()
            .filter(|key| g.by_key.get(*key).is_some_and(|(sel, _)| sel.all_in(pod)))
            .cloned()
            .collect();
        crate::sort::sort(&mut out[..]);
        out.dedup();
        out
    }

    /// Keep the pod index in step; returns what it held before.
    fn note_pod(&self, d: &Delta) -> Option<PodInfo> {
        let p = d.object();
        let (ns, name) = (obj::namespace(p), obj::name(p));
        let mut all = self.pods();
        if d.kind == DeltaKind::Deleted {
            let set = all.pods.get_mut(ns)?;
            let old = set.remove(name);
            if set.is_empty() {
                all.pods.remove(ns);
            }
            if let Some(o) = &old {
                all.unlink(ns, name, &o.pairs);
            }
            return old;
        }
        let now = PodInfo::of(p);
        let pairs = now.pairs.clone();
        let set = all.pods.entry(ns.to_string()).or_default();
        let key: Arc<str> = set
            .get_key_value(name)
            .map_or_else(|| name.into(), |(k, _)| k.clone());
        let old = set.insert(key.clone(), now);
        if old.as_ref().is_none_or(|o| o.pairs != pairs) {
            if let Some(o) = &old {
                all.unlink(ns, name, &o.pairs);
            }
            all.link(ns, &key, &pairs);
        }
        old
    }

    /// Follow one delta of the pods' watch and return the Services to sync (upstream's
    /// `addPod`, `updatePod`, `deletePod` with `GetServicesToUpdateOnPodChange`).
    pub fn pod_keys(&self, d: &Delta) -> Vec<String> {
        let before = self.note_pod(d);
        let (Some(old), Some(cur), DeltaKind::Updated) = (&d.old, &d.new, d.kind) else {
            return self.matching(d.object());
        };
        if obj::resource_version(old) == obj::resource_version(cur) {
            return vec![];
        }
        let now = PodInfo::of(cur);
        // Upstream compares deletion timestamps as pointers: any set one is a change.
        let pod_changed = before
            .as_ref()
            .is_none_or(|b| b.deleting || now.deleting || b.state != now.state);
        let labels_changed = obj::labels(old) != obj::labels(cur)
            || before.as_ref().is_none_or(|b| b.host != now.host);
        if !pod_changed && !labels_changed {
            return vec![];
        }
        let mut keys = self.matching(cur);
        if labels_changed {
            let was = self.matching(old);
            if pod_changed {
                keys.extend(was);
            } else {
                // Only membership changed: the Services it joined or left.
                let both: Vec<String> = keys.iter().filter(|k| was.contains(k)).cloned().collect();
                keys.extend(was);
                keys.retain(|k| !both.contains(k));
            }
            crate::sort::sort(&mut keys[..]);
            keys.dedup();
        }
        keys
    }

    /// The pods of `ns` whose labels the selector's all match, in name order, as far as
    /// `SYNC_FIELDS` goes.
    pub fn selected(&self, cache: &Cache, ns: &str, sel: &Map<String, Value>) -> Vec<Obj> {
        let names: Vec<String> = {
            let all = self.pods();
            let (Some(pods), Some(by_label)) = (all.pods.get(ns), all.by_label.get(ns)) else {
                return vec![];
            };
            // The rarest of the selector's pairs; a pair no pod carries selects nothing.
            let mut rarest: Option<&BTreeSet<Arc<str>>> = None;
            for (k, v) in sel {
                let Some(v) = v.as_str() else {
                    return vec![];
                };
                let Some(set) = by_label.get(&label_pair(k, v)) else {
                    return vec![];
                };
                if rarest.is_none_or(|r| set.len() < r.len()) {
                    rarest = Some(set);
                }
            }
            rarest
                .into_iter()
                .flatten()
                .filter(|n| {
                    pods.get(&***n).is_some_and(|info| {
                        sel.iter()
                            .all(|(k, v)| v.as_str().is_some_and(|v| info.labels.get(k) == Some(v)))
                    })
                })
                .map(|n| n.to_string())
                .collect()
        };
        let store = cache.store(crate::api::resources::PODS);
        names
            .iter()
            .filter_map(|n| store.get_fields_shared(&obj::make_key(ns, n), SYNC_FIELDS))
            .collect()
    }
}

// ---- what a pod gives a Service ----------------------------------------------------------

pub fn str_at<'a>(v: &'a Value, p: &str) -> &'a str {
    v.at(p).and_then(Value::as_str).unwrap_or("")
}

/// utilnet's `IsIPv6String`: an address that parses and is not an IPv4 (or IPv4-mapped) one.
pub fn is_ipv6(s: &str) -> bool {
    match s.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(a)) => a.to_ipv4_mapped().is_none(),
        _ => false,
    }
}

/// `ShouldPodBeInEndpoints`: not terminal, has an IP, and (unless terminating pods are
/// included) not being deleted.
pub fn should_be_in_endpoints(pod: &Value, include_terminating: bool) -> bool {
    let phase = str_at(pod, "/status/phase");
    if phase == "Failed" || phase == "Succeeded" {
        return false;
    }
    let no_ips = pod
        .at("/status/podIPs")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if str_at(pod, "/status/podIP").is_empty() && no_ips {
        return false;
    }
    include_terminating || !obj::is_deleting(pod)
}

/// The Service is headless (`IsServiceIPSet` false): no cluster IP, or `None`.
pub fn is_headless(svc: &Value) -> bool {
    let ip = str_at(svc, "/spec/clusterIP");
    ip.is_empty() || ip == "None"
}

/// `ShouldSetHostname`: the pod names a hostname and this Service as its subdomain.
pub fn hostname_for<'a>(svc: &Value, pod: &'a Value) -> Option<&'a str> {
    let host = str_at(pod, "/spec/hostname");
    (!host.is_empty()
        && str_at(pod, "/spec/subdomain") == obj::name(svc)
        && obj::namespace(svc) == obj::namespace(pod))
    .then_some(host)
}

/// `podutil.FindPort`: a number target port as it is; a named one looked up among the pod's
/// containers' ports with the Service port's protocol. None when nothing fits.
pub fn find_port(pod: &Value, svc_port: &Value) -> Option<i32> {
    match svc_port.get("targetPort") {
        Some(Value::String(name)) => {
            let protocol = str_at(svc_port, "/protocol");
            pod.at("/spec/containers")
                .and_then(Value::as_array)?
                .iter()
                .filter_map(|c| c.get("ports").and_then(Value::as_array))
                .flatten()
                .find(|p| str_at(p, "/name") == name && str_at(p, "/protocol") == protocol)
                .and_then(|p| p.get("containerPort").and_then(Value::as_i64))
                .map(|n| n as i32)
        }
        // intstr's IntValue of an int (a missing one is 0).
        Some(Value::Number(n)) => n.as_i64().map(|n| n as i32),
        None | Some(Value::Null) => Some(0),
        Some(_) => None,
    }
}

/// Ready as the endpoints see it: a `Ready` condition with status `True`.
pub fn is_ready(pod: &Value) -> bool {
    crate::controllers::kit::pod::is_pod_ready(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::PODS;
    use crate::controllers::testing::cx_with;
    use serde_json::json;

    fn service(ns: &str, name: &str, sel: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "uid": format!("s-{name}"),
                "resourceVersion": "1"},
            "spec": {"selector": sel}})
    }

    fn delta(kind: DeltaKind, o: &Value) -> Delta {
        let o = std::sync::Arc::new(o.clone());
        match kind {
            DeltaKind::Deleted => Delta {
                kind,
                old: Some(o),
                new: None,
            },
            _ => Delta {
                kind,
                old: None,
                new: Some(o),
            },
        }
    }

    #[test]
    fn a_pod_finds_its_services_through_their_filed_pairs() {
        let idx = ServicePods::default();
        let svcs = [
            service("ns", "web", json!({"app": "web"})),
            service("ns", "fe", json!({"app": "web", "tier": "fe"})),
            service("ns", "db", json!({"app": "db"})),
            service("ns", "odd", json!({"app": 7})),
            service("other", "web", json!({"app": "web"})),
        ];
        for s in &svcs {
            idx.observe_service(&delta(DeltaKind::Added, s));
        }
        let p = pod("a", json!({"app": "web", "tier": "fe", "x": "y"}));
        assert_eq!(idx.matching(&p), ["ns/fe", "ns/web"]);
        assert_eq!(
            idx.matching(&pod("b", json!({"tier": "fe"}))),
            Vec::<String>::new()
        );
        assert_eq!(idx.matching(&pod("c", json!({}))), Vec::<String>::new());
        // A changed selector is filed anew; a deleted Service is gone.
        let moved = service("ns", "fe", json!({"tier": "fe"}));
        idx.observe_service(&delta(DeltaKind::Updated, &moved));
        assert_eq!(idx.matching(&pod("b", json!({"tier": "fe"}))), ["ns/fe"]);
        idx.observe_service(&delta(DeltaKind::Deleted, &moved));
        idx.observe_service(&delta(DeltaKind::Deleted, &svcs[0]));
        assert!(idx.matching(&p).is_empty());
        let g = idx.services.lock().unwrap();
        assert_eq!(g.by_key.len(), 2, "db and other/web");
    }

    fn pod(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                "resourceVersion": "1", "labels": labels},
            "spec": {}, "status": {}})
    }

    fn names(v: &[Obj]) -> Vec<&str> {
        v.iter().map(|p| obj::name(p)).collect()
    }

    #[test]
    fn selected_follows_the_label_index() {
        let pods = [
            pod("a", json!({"app": "web", "tier": "fe"})),
            pod("b", json!({"app": "web", "tier": "be"})),
            pod("c", json!({"app": "db", "tier": "fe"})),
            pod("d", json!({})),
        ];
        let (cache, _) = cx_with(&pods.clone().map(|p| (PODS, p)));
        let idx = ServicePods::default();
        let feed = |kind, p: &Value| {
            let d = Delta {
                kind,
                old: None,
                new: Some(std::sync::Arc::new(p.clone())),
            };
            idx.note_pod(&d);
        };
        for p in &pods {
            feed(DeltaKind::Added, p);
        }
        let sel = |v: Value| v.as_object().cloned().expect("map");
        let web = sel(json!({"app": "web"}));
        assert_eq!(names(&idx.selected(&cache, "ns", &web)), ["a", "b"]);
        let fe = sel(json!({"app": "web", "tier": "fe"}));
        assert_eq!(names(&idx.selected(&cache, "ns", &fe)), ["a"]);
        let none = sel(json!({"app": "web", "tier": "x"}));
        assert!(idx.selected(&cache, "ns", &none).is_empty());
        assert!(idx.selected(&cache, "other", &web).is_empty());
        // Relabelled: out of its old pairs' sets, into the new ones.
        let moved = pod("b", json!({"app": "db", "tier": "be"}));
        feed(DeltaKind::Updated, &moved);
        assert_eq!(names(&idx.selected(&cache, "ns", &web)), ["a"]);
        assert_eq!(
            names(&idx.selected(&cache, "ns", &sel(json!({"app": "db"})))),
            ["b", "c"]
        );
        // Deleted: gone from every set; the last pod of a namespace takes its index along.
        for p in ["a", "b", "c", "d"] {
            feed(DeltaKind::Deleted, &pod(p, json!({})));
        }
        let all = idx.pods();
        assert!(all.pods.is_empty() && all.by_label.is_empty());
    }

    #[test]
    fn selected_pods_carry_what_a_sync_reads_and_no_more() {
        let mut full = pod("a", json!({"app": "web"}));
        full["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        full["spec"] = json!({"nodeName": "n1", "hostname": "h", "subdomain": "web",
            "containers": [{"name": "c", "image": "nginx", "env": [{"name": "A", "value": "1"}],
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]}],
            "volumes": [{"name": "v", "emptyDir": {}}]});
        full["status"] = json!({"phase": "Running", "podIP": "10.0.0.1",
            "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "ready": true, "image": "nginx"}]});
        let (cache, _) = cx_with(&[(PODS, full.clone())]);
        let idx = ServicePods::default();
        idx.note_pod(&delta(DeltaKind::Added, &full));
        let sel = json!({"app": "web"}).as_object().cloned().expect("map");
        let got = idx.selected(&cache, "ns", &sel);
        let p = &*got[0];
        assert!(p.at("/spec/volumes").is_none() && p.at("/status/containerStatuses").is_none());
        assert!(p.at("/spec/containers/0/image").is_none());
        assert_eq!(p["metadata"], full["metadata"]);
        let svc = service("ns", "web", json!({"app": "web"}));
        let port = json!({"name": "p", "port": 80, "targetPort": "http", "protocol": "TCP"});
        for v in [&full, p] {
            assert!(is_ready(v) && should_be_in_endpoints(v, true));
            assert!(!should_be_in_endpoints(v, false));
            assert_eq!(find_port(v, &port), Some(8080));
            assert_eq!(hostname_for(&svc, v), Some("h"));
            assert_eq!(str_at(v, "/spec/nodeName"), "n1");
            assert_eq!(v.at("/status/podIPs"), full.at("/status/podIPs"));
        }
    }

    #[test]
    fn pod_changes_gather_for_at_least_the_window() {
        let cfg = |args: &[&str]| crate::controllers::testing::config(args);
        let delays = |c: crate::config::Config| {
            (
                pod_change_delay(c.endpoint_controller.endpoint_updates_batch_period),
                pod_change_delay(c.endpoint_slice.endpoint_updates_batch_period),
            )
        };
        let w = POD_CHANGE_WINDOW;
        assert_eq!(delays(cfg(&[])), (w, w));
        assert_eq!(
            delays(cfg(&[
                "--endpoint-updates-batch-period=0s",
                "--endpointslice-updates-batch-period=0s"
            ])),
            (w, w)
        );
        assert_eq!(
            delays(cfg(&[
                "--endpoint-updates-batch-period=2s",
                "--endpointslice-updates-batch-period=3s"
            ])),
            (Duration::from_secs(2), Duration::from_secs(3))
        );
    }
}
