//! Endpoints subsets as upstream's types hold them, the address and ports a pod gives a
//! Service (`podToEndpointAddressForService`, `podutil.FindPort`, `ShouldPodBeInEndpoints`,
//! `ShouldSetHostname`), and the JSON they are read from and written as.

use crate::obj;
use crate::obj::At as _;
use serde_json::{json, Map, Value};

/// `v1.ObjectReference` (every field a string; empty is unset).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub api_version: String,
    pub resource_version: String,
    pub field_path: String,
}

impl TargetRef {
    /// As an `ObjectReference` is written: the fields that are set.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut r = Map::new();
        for (k, v) in [
            ("kind", &self.kind),
            ("namespace", &self.namespace),
            ("name", &self.name),
            ("uid", &self.uid),
            ("apiVersion", &self.api_version),
            ("resourceVersion", &self.resource_version),
            ("fieldPath", &self.field_path),
        ] {
            if !v.is_empty() {
                r.insert(k.into(), json!(v));
            }
        }
        r
    }
}

/// `v1.EndpointAddress`. `node_name` is a pointer upstream: `Some("")` (a pod not
/// scheduled) is written as `"nodeName": ""`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Address {
    pub ip: String,
    pub hostname: String,
    pub node_name: Option<String>,
    pub target: Option<TargetRef>,
}

/// `v1.EndpointPort`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Port {
    pub name: String,
    pub port: i32,
    pub protocol: String,
    pub app_protocol: Option<String>,
}

/// `v1.EndpointSubset`; an empty list stands for both nil and empty (upstream compares them
/// semantically, where the two are equal).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subset {
    pub addresses: Vec<Address>,
    pub not_ready: Vec<Address>,
    pub ports: Vec<Port>,
}

fn s(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or("").to_string()
}

impl Address {
    fn from_json(v: &Value) -> Address {
        let target = v
            .get("targetRef")
            .filter(|t| t.is_object())
            .map(|t| TargetRef {
                kind: s(t.get("kind")),
                namespace: s(t.get("namespace")),
                name: s(t.get("name")),
                uid: s(t.get("uid")),
                api_version: s(t.get("apiVersion")),
                resource_version: s(t.get("resourceVersion")),
                field_path: s(t.get("fieldPath")),
            });
        Address {
            ip: s(v.get("ip")),
            hostname: s(v.get("hostname")),
            node_name: v
                .get("nodeName")
                .and_then(Value::as_str)
                .map(str::to_string),
            target,
        }
    }

    /// As Go's encoding/json writes it (`omitempty` strings, the pointer `nodeName`).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("ip".into(), json!(self.ip));
        if !self.hostname.is_empty() {
            m.insert("hostname".into(), json!(self.hostname));
        }
        if let Some(n) = &self.node_name {
            m.insert("nodeName".into(), json!(n));
        }
        if let Some(t) = &self.target {
            m.insert("targetRef".into(), Value::Object(t.to_json()));
        }
        Value::Object(m)
    }
}

impl Port {
    fn from_json(v: &Value) -> Port {
        Port {
            name: s(v.get("name")),
            port: v
                .get("port")
                .and_then(Value::as_i64)
                .and_then(|p| i32::try_from(p).ok())
                .unwrap_or(0),
            protocol: s(v.get("protocol")),
            app_protocol: v
                .get("appProtocol")
                .and_then(Value::as_str)
                .map(str::to_string),
        }
    }

    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        if !self.name.is_empty() {
            m.insert("name".into(), json!(self.name));
        }
        m.insert("port".into(), json!(self.port));
        if !self.protocol.is_empty() {
            m.insert("protocol".into(), json!(self.protocol));
        }
        if let Some(a) = &self.app_protocol {
            m.insert("appProtocol".into(), json!(a));
        }
        Value::Object(m)
    }
}

fn list<T>(v: &Value, key: &str, f: impl Fn(&Value) -> T) -> Vec<T> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(f).collect())
        .unwrap_or_default()
}

impl Subset {
    /// The subsets of an Endpoints object (`subsets`); anything that is not a list is none.
    pub fn all_from(endpoints: &Value) -> Vec<Subset> {
        list(endpoints, "subsets", |v| Subset {
            addresses: list(v, "addresses", Address::from_json),
            not_ready: list(v, "notReadyAddresses", Address::from_json),
            ports: list(v, "ports", Port::from_json),
        })
    }

    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        let addrs = |l: &[Address]| Value::Array(l.iter().map(Address::to_json).collect());
        if !self.addresses.is_empty() {
            m.insert("addresses".into(), addrs(&self.addresses));
        }
        if !self.not_ready.is_empty() {
            m.insert("notReadyAddresses".into(), addrs(&self.not_ready));
        }
        if !self.ports.is_empty() {
            let ports = self.ports.iter().map(Port::to_json).collect();
            m.insert("ports".into(), Value::Array(ports));
        }
        Value::Object(m)
    }

    pub fn count(&self) -> usize {
        self.addresses.len() + self.not_ready.len()
    }
}

/// Upstream's `endpointSubsetsEqualIgnoreResourceVersion`: equal but for the target
/// references' resourceVersion.
pub fn equal_ignoring_resource_version(a: &[Subset], b: &[Subset]) -> bool {
    let addrs_eq = |x: &[Address], y: &[Address]| {
        x.len() == y.len()
            && x.iter().zip(y).all(|(p, q)| {
                p.ip == q.ip
                    && p.hostname == q.hostname
                    && p.node_name == q.node_name
                    && match (&p.target, &q.target) {
                        (None, None) => true,
                        (Some(r), Some(t)) => {
                            TargetRef {
                                resource_version: String::new(),
                                ..r.clone()
                            } == TargetRef {
                                resource_version: String::new(),
                                ..t.clone()
                            }
                        }
                        _ => false,
                    }
            })
    };
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            addrs_eq(&x.addresses, &y.addresses)
                && addrs_eq(&x.not_ready, &y.not_ready)
                && x.ports == y.ports
        })
}

// ---- what a pod gives a Service ----------------------------------------------------------

pub use crate::controllers::kit::servicepods::{
    find_port, hostname_for, is_headless, is_ipv6, is_ready, should_be_in_endpoints, str_at,
};

/// `podToEndpointAddressForService`: the pod's IP of the Service's family (its first
/// `ipFamilies` entry; without one, the family of the cluster IP, or for a headless Service
/// that of the pod's `podIP`), with the node name and a reference to the pod. None when the
/// pod has no IP of that family.
pub fn address_for(svc: &Value, pod: &Value) -> Option<Address> {
    let family_v6 = match svc
        .at("/spec/ipFamilies")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        Some(f) => f.as_str() == Some("IPv6"),
        None if !is_headless(svc) => is_ipv6(str_at(svc, "/spec/clusterIP")),
        None => is_ipv6(str_at(pod, "/status/podIP")),
    };
    let ip = pod
        .at("/status/podIPs")
        .and_then(Value::as_array)?
        .iter()
        .map(|p| str_at(p, "/ip"))
        .find(|ip| family_v6 == is_ipv6(ip))?;
    Some(Address {
        ip: ip.to_string(),
        hostname: String::new(),
        node_name: Some(str_at(pod, "/spec/nodeName").to_string()),
        target: Some(TargetRef {
            kind: "Pod".into(),
            namespace: obj::namespace(pod).into(),
            name: obj::name(pod).into(),
            uid: obj::uid(pod).into(),
            ..TargetRef::default()
        }),
    })
}

/// `endpointPortFromServicePort`.
pub fn endpoint_port(svc_port: &Value, number: i32) -> Port {
    Port {
        name: str_at(svc_port, "/name").to_string(),
        port: number,
        protocol: str_at(svc_port, "/protocol").to_string(),
        app_protocol: svc_port
            .get("appProtocol")
            .and_then(Value::as_str)
            .map(str::to_string),
    }
}
