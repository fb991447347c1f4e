//! What each resource contributes to a quota (upstream's quota evaluators): pods (compute
//! requests and limits as `podres` reads them, scopes), services (node ports, load
//! balancers), persistent volume claims (storage, per storage class, the larger allocation
//! once expanded, the `VolumeAttributesClass` scope), DRA's resource claims (their count and the
//! devices they ask for per device class), and an object count `count/<resource>.<group>` for
//! every other resource discovery serves (with the legacy names `configmaps`, `secrets`,
//! `resourcequotas`, `replicationcontrollers`).

use super::podres::{self, pod_totals};
use crate::api::resources::{PERSISTENTVOLUMECLAIMS, PODS, RESOURCECLAIMS, SERVICES};
use crate::api::Kind;
use crate::cache::Cache;
use crate::compat::quantity::Quantity;
use crate::obj;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// Resource name -> quantity.
pub type ResourceList = BTreeMap<String, Quantity>;

const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";
const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
const POD_RESOURCES: &[&str] = &[
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];
const SERVICE_RESOURCES: &[&str] = &[
    "count/services",
    "services",
    "services.nodeports",
    "services.loadbalancers",
];
const PVC_RESOURCES: &[&str] = &["persistentvolumeclaims", "requests.storage"];

/// The parts of a pod the quota reads beyond metadata.
pub const POD_FIELDS: &[&str] = &[
    "/spec/containers/*/name",
    "/spec/containers/*/resources",
    "/spec/initContainers/*/name",
    "/spec/initContainers/*/resources",
    "/spec/initContainers/*/restartPolicy",
    "/spec/resources",
    "/spec/overhead",
    "/spec/activeDeadlineSeconds",
    "/spec/priorityClassName",
    "/spec/affinity/podAffinity",
    "/spec/affinity/podAntiAffinity",
    "/status/phase",
    "/status/qosClass",
    "/status/conditions",
    "/status/containerStatuses/*/name",
    "/status/containerStatuses/*/allocatedResources",
    "/status/containerStatuses/*/resources",
    "/status/initContainerStatuses/*/name",
    "/status/initContainerStatuses/*/allocatedResources",
    "/status/initContainerStatuses/*/resources",
    "/status/extendedResourceClaimStatus",
];
/// The parts of a service the quota reads beyond metadata.
pub const SERVICE_FIELDS: &[&str] = &[
    "/spec/type",
    "/spec/ports",
    "/spec/allocateLoadBalancerNodePorts",
];
/// The parts of a claim the quota reads beyond metadata.
pub const PVC_FIELDS: &[&str] = &[
    "/spec/resources",
    "/spec/storageClassName",
    "/spec/volumeAttributesClassName",
    "/status/allocatedResources",
    "/status/currentVolumeAttributesClassName",
    "/status/modifyVolumeStatus",
];

/// The parts of a DRA resource claim the quota reads beyond metadata.
pub const RESOURCECLAIM_FIELDS: &[&str] = &["/spec/devices/requests"];
/// `count/resourceclaims.resource.k8s.io`.
const CLAIM_COUNT: &str = "count/resourceclaims.resource.k8s.io";
/// `<device-class>.deviceclass.resource.k8s.io/devices`.
pub const DEVICES_PER_CLASS: &str = ".deviceclass.resource.k8s.io/devices";
/// The most devices one request with `allocationMode: All` may get (`AllocationResultsMaxSize`).
const ALL_DEVICES: i64 = 32;

/// Whether `k` is `resource.k8s.io` resourceclaims (any version).
pub fn is_resource_claims(k: &Kind) -> bool {
    k.group == RESOURCECLAIMS.group && k.plural == RESOURCECLAIMS.plural
}

/// `count/<resource>` (core group) or `count/<resource>.<group>`.
pub fn count_name(k: &Kind) -> String {
    if k.group.is_empty() {
        format!("count/{}", k.plural)
    } else {
        format!("count/{}.{}", k.plural, k.group)
    }
}

/// The names core resources were counted by before `count/`.
fn legacy_alias(k: &Kind) -> Option<&'static str> {
    if !k.group.is_empty() {
        return None;
    }
    match k.plural {
        "configmaps" => Some("configmaps"),
        "resourcequotas" => Some("resourcequotas"),
        "replicationcontrollers" => Some("replicationcontrollers"),
        "secrets" => Some("secrets"),
        _ => None,
    }
}

/// A native resource name: no domain, or a `kubernetes.io/` one.
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// An extended resource (`example.com/gpu`), or a device class's implicit one
/// (`deviceclass.resource.kubernetes.io/<class>`, DRA's `IsDRAExtendedResourceName`).
fn is_extended(name: &str) -> bool {
    (!is_native(name) && !name.starts_with("requests."))
        || name.starts_with(super::dra::CLASS_RESOURCE_PREFIX)
}

/// A quota name for an extended resource's requests (`requests.example.com/gpu`,
/// `requests.deviceclass.resource.kubernetes.io/<class>`).
pub fn is_extended_for_quota(name: &str) -> bool {
    let implicit = name
        .strip_prefix("requests.")
        .is_some_and(|r| r.starts_with(super::dra::CLASS_RESOURCE_PREFIX));
    (!is_native(name) || implicit) && name.starts_with("requests.")
}

/// One scope requirement of a quota (`spec.scopes` are `Exists` requirements).
#[derive(Debug, Clone, PartialEq)]
pub struct ScopeReq {
    pub scope: String,
    pub operator: String,
    pub values: Vec<String>,
}

/// A quota's scopes and scope selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scopes {
    pub scopes: Vec<ScopeReq>,
    pub selector: Vec<ScopeReq>,
}

impl Scopes {
    pub fn of(quota: &Value) -> Self {
        let spec = &quota["spec"];
        let exists = |s: &str| ScopeReq {
            scope: s.to_string(),
            operator: "Exists".into(),
            values: Vec::new(),
        };
        let scopes = spec["scopes"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).map(exists).collect())
            .unwrap_or_default();
        let selector = spec["scopeSelector"]["matchExpressions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| ScopeReq {
                        scope: e["scopeName"].as_str().unwrap_or_default().to_string(),
                        operator: e["operator"].as_str().unwrap_or_default().to_string(),
                        values: e["values"]
                            .as_array()
                            .map(|v| {
                                v.iter()
                                    .filter_map(Value::as_str)
                                    .map(String::from)
                                    .collect()
                            })
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Scopes { scopes, selector }
    }

    fn is_empty(&self) -> bool {
        self.scopes.is_empty() && self.selector.is_empty()
    }
}

/// What measures one resource.
#[derive(Debug, Clone, PartialEq)]
pub enum Evaluator {
    Pods,
    Services,
    Claims,
    /// DRA's ResourceClaims (with DynamicResourceAllocation on): their count and devices.
    DeviceClaims,
    /// Objects of a kind, by `count/...` and the legacy name if any.
    Count {
        kind: Kind,
        name: String,
    },
}

impl Evaluator {
    /// The evaluator for a served resource.
    pub fn for_kind(k: Kind) -> Self {
        if k == PODS {
            Evaluator::Pods
        } else if k == SERVICES {
            Evaluator::Services
        } else if k == PERSISTENTVOLUMECLAIMS {
            Evaluator::Claims
        } else if is_resource_claims(&k)
            && crate::config::gates::enabled("DynamicResourceAllocation")
        {
            Evaluator::DeviceClaims
        } else {
            Evaluator::Count {
                kind: k,
                name: count_name(&k),
            }
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Evaluator::Pods => PODS,
            Evaluator::Services => SERVICES,
            Evaluator::Claims => PERSISTENTVOLUMECLAIMS,
            Evaluator::DeviceClaims => RESOURCECLAIMS,
            Evaluator::Count { kind, .. } => *kind,
        }
    }

    /// Which of `names` this evaluator measures (`MatchingResources`).
    pub fn matching<'a>(&self, names: impl IntoIterator<Item = &'a String>) -> Vec<String> {
        names
            .into_iter()
            .filter(|n| self.measures(n))
            .cloned()
            .collect()
    }

    fn measures(&self, n: &str) -> bool {
        match self {
            Evaluator::Pods => {
                POD_RESOURCES.contains(&n)
                    || n.starts_with("hugepages-")
                    || n.starts_with("requests.hugepages-")
                    || is_extended_for_quota(n)
            }
            Evaluator::Services => SERVICE_RESOURCES.contains(&n),
            Evaluator::Claims => {
                n == "count/persistentvolumeclaims"
                    || PVC_RESOURCES.contains(&n)
                    || PVC_RESOURCES
                        .iter()
                        .any(|r| n.ends_with(&format!("{STORAGE_CLASS_SUFFIX}{r}")))
            }
            Evaluator::DeviceClaims => {
                n == CLAIM_COUNT || n.ends_with(DEVICES_PER_CLASS) || super::dra::measures(n)
            }
            Evaluator::Count { kind, name } => n == name || legacy_alias(kind) == Some(n),
        }
    }

    /// Usage of the objects of namespace `ns` that match `scopes`, for `resources` (each
    /// reported, zero when nothing uses it), as `CalculateUsageStats`.
    pub fn usage_stats(
        &self,
        cache: &Cache,
        ns: &str,
        scopes: &Scopes,
        resources: &[String],
        now: SystemTime,
        memo: Option<&super::podmemo::PodMemo>,
    ) -> ResourceList {
        if let (Evaluator::Pods, Some(memo), true) = (self, memo, scopes.is_empty()) {
            return memo.usage(&cache.store(PODS), ns, resources, now);
        }
        let mut used: ResourceList = resources
            .iter()
            .map(|r| (r.clone(), Quantity::ZERO))
            .collect();
        if let Evaluator::Count { kind, name } = self {
            // Object counts match no scope.
            if scopes.is_empty() {
                let n = cache.store(*kind).count_namespace(ns) as i64;
                let q = Quantity::from_int(n);
                let mut one = ResourceList::new();
                one.insert(name.clone(), q);
                if let Some(a) = legacy_alias(kind) {
                    one.insert(a.to_string(), q);
                }
                add(&mut used, &one);
            }
            return used;
        }
        for item in cache.store(self.kind()).list_namespace(ns) {
            let matches = scopes
                .scopes
                .iter()
                .chain(scopes.selector.iter())
                .all(|s| self.matches_scope(s, &item));
            if !matches {
                continue;
            }
            let mut u = self.usage(&item, now);
            if let Evaluator::DeviceClaims = self {
                super::dra::add_extended(&mut u, &item, cache, now);
            }
            add(&mut used, &u);
        }
        used
    }

    fn matches_scope(&self, s: &ScopeReq, item: &Value) -> bool {
        match self {
            Evaluator::Pods => pod_matches_scope(s, item),
            Evaluator::Claims => claim_matches_scope(s, item),
            _ => false,
        }
    }

    /// One object's usage.
    pub fn usage(&self, item: &Value, now: SystemTime) -> ResourceList {
        match self {
            Evaluator::Pods => pod_usage(item, now),
            Evaluator::Services => service_usage(item),
            Evaluator::Claims => claim_usage(item),
            Evaluator::DeviceClaims => device_claim_usage(item),
            Evaluator::Count { kind, name } => {
                let mut r = ResourceList::new();
                r.insert(name.clone(), Quantity::from_int(1));
                if let Some(a) = legacy_alias(kind) {
                    r.insert(a.to_string(), Quantity::from_int(1));
                }
                r
            }
        }
    }
}

/// How many devices one (sub)request asks for: its count (`ExactCount`, the default, with
/// the default count 1), or the most a request may get (`All`).
fn devices_asked(r: &Value) -> i64 {
    match r["allocationMode"].as_str().unwrap_or("ExactCount") {
        "ExactCount" => r["count"].as_i64().unwrap_or(1),
        "All" => ALL_DEVICES,
        _ => 0,
    }
}

/// A DRA claim's usage (upstream's claim evaluator): `count/resourceclaims.resource.k8s.io`,
/// and per device class the devices its requests ask for; a request with a prioritized list
/// (`firstAvailable`) counts, per class, the largest of its subrequests.
pub fn device_claim_usage(claim: &Value) -> ResourceList {
    let mut r = ResourceList::new();
    r.insert(CLAIM_COUNT.into(), Quantity::from_int(1));
    let requests = claim["spec"]["devices"]["requests"].as_array();
    for req in requests.into_iter().flatten() {
        let mut per_class: BTreeMap<String, i64> = BTreeMap::new();
        match req["firstAvailable"].as_array().filter(|a| !a.is_empty()) {
            Some(subs) => {
                for s in subs {
                    let n = devices_asked(s);
                    let class = s["deviceClassName"].as_str().unwrap_or_default();
                    let e = per_class
                        .entry(format!("{class}{DEVICES_PER_CLASS}"))
                        .or_default();
                    *e = (*e).max(n);
                }
            }
            None if req["exactly"].is_object() => {
                let e = &req["exactly"];
                let class = e["deviceClassName"].as_str().unwrap_or_default();
                per_class.insert(format!("{class}{DEVICES_PER_CLASS}"), devices_asked(e));
            }
            None => {}
        }
        let more = per_class
            .into_iter()
            .map(|(k, n)| (k, Quantity::from_int(n)))
            .collect();
        add(&mut r, &more);
    }
    r
}

/// `quota.Add`: sums, a missing name taken as it is.
pub fn add(into: &mut ResourceList, more: &ResourceList) {
    for (k, v) in more {
        match into.get_mut(k) {
            Some(q) => q.add(v),
            None => {
                into.insert(k.clone(), *v);
            }
        }
    }
}

/// A resource list as written in an object (`{"cpu": "100m"}`); unreadable quantities are
/// left out.
pub fn read_list(v: &Value) -> ResourceList {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, q)| Some((k.clone(), Quantity::parse(q.as_str()?)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a pod still counts against compute quota (`QuotaV1Pod`): not finished, and not
/// past its deletion grace period.
pub fn pod_counts(pod: &Value, now: SystemTime) -> bool {
    let phase = pod["status"]["phase"].as_str().unwrap_or_default();
    if phase == "Failed" || phase == "Succeeded" {
        return false;
    }
    pod_deletion_end(pod).is_none_or(|end| now <= end)
}

/// Whether the kubelet reports the pod's containers' resources (in-place resize): an update of
/// such a pod may change its usage. The previous version is not kept, so every update of
/// such a pod requeues (upstream: only when they changed).
pub fn pod_reports_resources(pod: &Value) -> bool {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|l| pod["status"][l].as_array())
        .flatten()
        .any(|c| c["resources"].is_object() || c["allocatedResources"].is_object())
}

/// The end of a pod's deletion grace period, when it is being deleted (and both its
/// deletion time and grace period read).
pub fn pod_deletion_end(pod: &Value) -> Option<SystemTime> {
    let meta = &pod["metadata"];
    let grace = meta["deletionGracePeriodSeconds"].as_i64()?;
    let at = crate::compat::timefmt::parse_rfc3339(meta["deletionTimestamp"].as_str()?)?;
    Some(if grace >= 0 {
        at + std::time::Duration::from_secs(grace as u64)
    } else {
        at - std::time::Duration::from_secs(grace.unsigned_abs())
    })
}

pub fn pod_usage(pod: &Value, now: SystemTime) -> ResourceList {
    let mut r = ResourceList::new();
    r.insert("count/pods".into(), Quantity::from_int(1));
    if !pod_counts(pod, now) {
        return r;
    }
    add(&mut r, &pod_compute_usage(pod));
    r
}

/// What a pod that counts adds besides `count/pods`: `pods`, its requests and limits of cpu,
/// memory and ephemeral storage (and their bare names), hugepages and extended resources.
pub fn pod_compute_usage(pod: &Value) -> ResourceList {
    let requests = pod_totals(pod, "requests");
    let limits = pod_totals(pod, "limits");
    let mut c = ResourceList::new();
    c.insert("pods".into(), Quantity::from_int(1));
    for res in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(res) {
            c.insert(res.into(), *q);
            c.insert(format!("requests.{res}"), *q);
        }
        if let Some(q) = limits.get(res) {
            c.insert(format!("limits.{res}"), *q);
        }
    }
    for (res, q) in &requests {
        if res.starts_with("hugepages-") {
            c.insert(res.clone(), *q);
            c.insert(format!("requests.{res}"), *q);
        }
        if is_extended(res) {
            c.insert(format!("requests.{res}"), *q);
        }
    }
    c
}

/// QoS class BestEffort (`qos.GetPodQOS`): the status's class when it has one; else, with
/// pod-level resources, none of them asks for or limits CPU or memory; else no container does.
fn best_effort(pod: &Value) -> bool {
    if let Some(class) = pod["status"]["qosClass"].as_str().filter(|c| !c.is_empty()) {
        return class == "BestEffort";
    }
    let spec = &pod["spec"];
    if podres::pod_level_set(pod, &["requests", "limits"]) {
        return ["requests", "limits"].iter().all(|part| {
            let l = read_list(&spec["resources"][part]);
            ["cpu", "memory"]
                .iter()
                .all(|r| l.get(*r).is_none_or(|q| q.is_zero()))
        });
    }
    let containers = spec["containers"]
        .as_array()
        .into_iter()
        .chain(spec["initContainers"].as_array())
        .flatten();
    for c in containers {
        for part in ["requests", "limits"] {
            let l = read_list(&c["resources"][part]);
            for res in ["cpu", "memory"] {
                if l.get(res)
                    .is_some_and(|q| q.cmp_value(&Quantity::ZERO).is_gt())
                {
                    return false;
                }
            }
        }
    }
    true
}

fn terminating(pod: &Value) -> bool {
    pod["spec"]["activeDeadlineSeconds"]
        .as_i64()
        .is_some_and(|s| s >= 0)
}

fn cross_namespace_affinity(pod: &Value) -> bool {
    let aff = &pod["spec"]["affinity"];
    let cross = |t: &Value| {
        t["namespaces"].as_array().is_some_and(|a| !a.is_empty())
            || !t["namespaceSelector"].is_null()
    };
    ["podAffinity", "podAntiAffinity"].iter().any(|a| {
        let a = &aff[a];
        a["requiredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .is_some_and(|ts| ts.iter().any(cross))
            || a["preferredDuringSchedulingIgnoredDuringExecution"]
                .as_array()
                .is_some_and(|ts| ts.iter().any(|w| cross(&w["podAffinityTerm"])))
    })
}

/// `podMatchesScopeFunc`.
pub fn pod_matches_scope(s: &ScopeReq, pod: &Value) -> bool {
    match s.scope.as_str() {
        "Terminating" => terminating(pod),
        "NotTerminating" => !terminating(pod),
        "BestEffort" => best_effort(pod),
        "NotBestEffort" => !best_effort(pod),
        "PriorityClass" => {
            let pc = pod["spec"]["priorityClassName"]
                .as_str()
                .unwrap_or_default();
            match s.operator.as_str() {
                "Exists" => !pc.is_empty(),
                "DoesNotExist" => pc.is_empty(),
                "In" => !pc.is_empty() && s.values.iter().any(|v| v == pc),
                "NotIn" => pc.is_empty() || !s.values.iter().any(|v| v == pc),
                _ => false,
            }
        }
        "CrossNamespacePodAffinity" => cross_namespace_affinity(pod),
        _ => false,
    }
}

fn service_usage(svc: &Value) -> ResourceList {
    let spec = &svc["spec"];
    let ports = spec["ports"].as_array().map(Vec::len).unwrap_or(0) as i64;
    let mut r = ResourceList::new();
    r.insert("count/services".into(), Quantity::from_int(1));
    r.insert("services".into(), Quantity::from_int(1));
    let mut lbs = Quantity::ZERO;
    let mut node_ports = Quantity::ZERO;
    match spec["type"].as_str() {
        Some("NodePort") => node_ports = Quantity::from_int(ports),
        Some("LoadBalancer") => {
            node_ports = if spec["allocateLoadBalancerNodePorts"] == false {
                let with = spec["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["nodePort"].as_i64().is_some_and(|n| n != 0))
                    .count();
                Quantity::from_int(with as i64)
            } else {
                Quantity::from_int(ports)
            };
            lbs = Quantity::from_int(1);
        }
        _ => {}
    }
    r.insert("services.loadbalancers".into(), lbs);
    r.insert("services.nodeports".into(), node_ports);
    r
}

/// The claim's class: the beta annotation first, then `spec.storageClassName`.
fn claim_class(pvc: &Value) -> String {
    if let Some(c) = obj::annotation(pvc, BETA_STORAGE_CLASS) {
        return c.to_string();
    }
    pvc["spec"]["storageClassName"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn claim_usage(pvc: &Value) -> ResourceList {
    let mut r = ResourceList::new();
    r.insert("persistentvolumeclaims".into(), Quantity::from_int(1));
    r.insert("count/persistentvolumeclaims".into(), Quantity::from_int(1));
    let class = claim_class(pvc);
    if !class.is_empty() {
        r.insert(
            format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
            Quantity::from_int(1),
        );
    }
    let storage = pvc["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .and_then(Quantity::parse)
        .map(|asked| {
            // RecoverVolumeExpansionFailure (GA in v1.34): a larger allocation counts.
            let allocated = pvc["status"]["allocatedResources"]["storage"]
                .as_str()
                .and_then(Quantity::parse)
                .filter(|a| a.cmp_value(&asked).is_gt());
            allocated.unwrap_or(asked).round_up_units()
        });
    if let Some(q) = storage {
        r.insert("requests.storage".into(), q);
        if !class.is_empty() {
            r.insert(format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"), q);
        }
    }
    r
}

/// The VolumeAttributesClasses a claim refers to: the one it asks for, the current one and
/// the target of a modification in progress (`getReferencedVolumeAttributesClassNames`).
pub fn claim_attribute_classes(pvc: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = [
        &pvc["spec"]["volumeAttributesClassName"],
        &pvc["status"]["currentVolumeAttributesClassName"],
        &pvc["status"]["modifyVolumeStatus"]["targetVolumeAttributesClassName"],
    ]
    .iter()
    .filter_map(|v| v.as_str())
    .filter(|n| !n.is_empty())
    .collect();
    crate::sort::sort(&mut names[..]);
    names.dedup();
    names
}

/// `pvcMatchesScopeFunc` (VolumeAttributesClass, GA in v1.34): only the
/// `VolumeAttributesClass` scope applies to claims; `Exists` needs a class, the other
/// operators match any of its classes (a claim without one matches as an empty label set).
pub fn claim_matches_scope(s: &ScopeReq, pvc: &Value) -> bool {
    if s.scope != "VolumeAttributesClass" {
        return false;
    }
    let names = claim_attribute_classes(pvc);
    let one = |name: Option<&str>| match s.operator.as_str() {
        "Exists" => name.is_some(),
        "DoesNotExist" => name.is_none(),
        "In" => name.is_some_and(|n| s.values.iter().any(|v| v == n)),
        "NotIn" => name.is_none_or(|n| !s.values.iter().any(|v| v == n)),
        _ => false,
    };
    if names.is_empty() {
        return one(None);
    }
    names.iter().any(|n| one(Some(n)))
}
