//! EndpointSlices as the reconcilers hold them: `discovery/v1` endpoints and ports, read from
//! and written as JSON the way Go's encoding/json writes the upstream types (pointer fields
//! present when set, `omitempty` strings left out), the endpoint identity upstream hashes
//! (`hashEndpoint`), `EndpointsEqualBeyondHash`, and the port-map key.

use crate::obj::{self, At as _, Obj};
use serde_json::{json, Map, Value};

pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// `discovery.Endpoint`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Endpoint {
    pub addresses: Vec<String>,
    pub ready: Option<bool>,
    pub serving: Option<bool>,
    pub terminating: Option<bool>,
    pub hostname: Option<String>,
    /// The target reference as it came (or as written: kind, namespace, name, uid).
    pub target: Option<Map<String, Value>>,
    pub node_name: Option<String>,
    pub zone: Option<String>,
    /// `hints.forZones[*].name`; None: no zone hints.
    pub hints: Option<Vec<String>>,
    /// `hints.forNodes[*].name` (v1.33 and later); None: no node hints.
    pub node_hints: Option<Vec<String>>,
}

/// The `name`s of a list of `forZones` / `forNodes` entries.
fn hint_names(v: Option<&Value>) -> Option<Vec<String>> {
    v.and_then(Value::as_array).map(|a| {
        a.iter()
            .map(|z| {
                z.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    })
}

fn opt_str(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_string)
}

fn target_field<'a>(t: &'a Option<Map<String, Value>>, f: &str) -> &'a str {
    t.as_ref()
        .and_then(|m| m.get(f))
        .and_then(Value::as_str)
        .unwrap_or("")
}

impl Endpoint {
    pub fn from_json(v: &Value) -> Endpoint {
        let cond = |c: &str| {
            v.at("/conditions")
                .and_then(|m| m.get(c))
                .and_then(Value::as_bool)
        };
        Endpoint {
            addresses: v
                .get("addresses")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            ready: cond("ready"),
            serving: cond("serving"),
            terminating: cond("terminating"),
            hostname: opt_str(v.get("hostname")),
            target: v.get("targetRef").and_then(Value::as_object).cloned(),
            node_name: opt_str(v.get("nodeName")),
            zone: opt_str(v.get("zone")),
            hints: hint_names(v.at("/hints/forZones")),
            node_hints: hint_names(v.at("/hints/forNodes")),
        }
    }

    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("addresses".into(), json!(self.addresses));
        let mut c = Map::new();
        for (k, v) in [
            ("ready", self.ready),
            ("serving", self.serving),
            ("terminating", self.terminating),
        ] {
            if let Some(b) = v {
                c.insert(k.into(), json!(b));
            }
        }
        m.insert("conditions".into(), Value::Object(c));
        if let Some(h) = &self.hostname {
            m.insert("hostname".into(), json!(h));
        }
        if let Some(t) = &self.target {
            m.insert("targetRef".into(), Value::Object(t.clone()));
        }
        if let Some(n) = &self.node_name {
            m.insert("nodeName".into(), json!(n));
        }
        if let Some(z) = &self.zone {
            m.insert("zone".into(), json!(z));
        }
        if self.has_hints() {
            // Go's `omitempty`: an empty list is not written.
            let mut h = Map::new();
            for (k, names) in [("forZones", &self.hints), ("forNodes", &self.node_hints)] {
                if let Some(n) = names.as_ref().filter(|n| !n.is_empty()) {
                    let list: Vec<Value> = n.iter().map(|z| json!({ "name": z })).collect();
                    h.insert(k.into(), Value::Array(list));
                }
            }
            m.insert("hints".into(), Value::Object(h));
        }
        Value::Object(m)
    }

    /// What upstream's `hashEndpoint` covers: the sorted addresses, the hostname and the
    /// target's namespace and name.
    pub fn identity(&self) -> String {
        let mut a = self.addresses.clone();
        crate::sort::sort(&mut a[..]);
        format!(
            "{}\u{0}{}\u{0}{}\u{0}{}",
            a.join(","),
            self.hostname.as_deref().unwrap_or(""),
            target_field(&self.target, "namespace"),
            target_field(&self.target, "name")
        )
    }

    /// `EndpointsEqualBeyondHash`: node, zone, conditions and the target (resourceVersion
    /// aside) are the same.
    pub fn equal_beyond_hash(&self, o: &Endpoint) -> bool {
        let strip = |t: &Option<Map<String, Value>>| {
            t.as_ref().map(|m| {
                let mut m = m.clone();
                m.remove("resourceVersion");
                m.retain(|_, v| v.as_str() != Some(""));
                m
            })
        };
        self.node_name == o.node_name
            && self.zone == o.zone
            && self.ready == o.ready
            && self.serving == o.serving
            && self.terminating == o.terminating
            && strip(&self.target) == strip(&o.target)
    }

    pub fn is_ready(&self) -> bool {
        self.ready == Some(true)
    }

    /// Whether the endpoint has a `hints` object at all.
    pub fn has_hints(&self) -> bool {
        self.hints.is_some() || self.node_hints.is_some()
    }

    /// No `hints` (upstream sets the whole pointer to nil).
    pub fn clear_hints(&mut self) {
        self.hints = None;
        self.node_hints = None;
    }

    /// `hints: {forZones: [zone]}`, as the topology cache writes it (no node hints).
    pub fn set_zone_hint(&mut self, zone: String) {
        self.hints = Some(vec![zone]);
        self.node_hints = None;
    }
}

/// A slice being decided: the cached object it came from (None for a new one), its name
/// (empty for a new one), and what the reconciler sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Slice {
    pub name: String,
    pub from: Option<Obj>,
    pub address_type: String,
    pub ports: Vec<Value>,
    pub endpoints: Vec<Endpoint>,
    pub labels: Map<String, Value>,
    pub annotations: Map<String, Value>,
    pub owner_refs: Vec<Value>,
}

impl Slice {
    pub fn from_cached(o: &Obj) -> Slice {
        Slice {
            name: obj::name(o).to_string(),
            from: Some(o.clone()),
            address_type: o
                .get("addressType")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            ports: o
                .get("ports")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            endpoints: o
                .get("endpoints")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(Endpoint::from_json).collect())
                .unwrap_or_default(),
            labels: obj::string_map(o.at("/metadata/labels")),
            annotations: obj::string_map(o.at("/metadata/annotations")),
            owner_refs: o
                .at("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        }
    }

    pub fn port_key(&self) -> String {
        port_key(&self.ports)
    }

    pub fn label(&self, k: &str) -> &str {
        self.labels.get(k).and_then(Value::as_str).unwrap_or("")
    }

    /// Owned by the object with `uid`, a `kind` of `api_version` (upstream's `ownedBy`).
    pub fn owned_by(&self, uid: &str, kind: &str, api_version: &str) -> bool {
        self.owner_refs.iter().any(|r| {
            r.get("uid").and_then(Value::as_str) == Some(uid)
                && r.get("kind").and_then(Value::as_str) == Some(kind)
                && r.get("apiVersion").and_then(Value::as_str) == Some(api_version)
        })
    }

    /// The object to write: the cached one with this slice's parts, or a new one named by
    /// `generate_name` in `namespace`.
    pub fn to_object(&self, namespace: &str, generate_name: &str) -> Value {
        let mut out = match &self.from {
            Some(o) => (**o).clone(),
            None => json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"generateName": generate_name, "namespace": namespace}}),
        };
        if !out.is_object() {
            out = json!({});
        }
        let o = out.as_object_mut().expect("an object");
        o.insert("apiVersion".into(), json!("discovery.k8s.io/v1"));
        o.insert("kind".into(), json!("EndpointSlice"));
        let meta = o.entry("metadata").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        let meta = meta.as_object_mut().expect("an object");
        if !self.name.is_empty() {
            meta.insert("name".into(), json!(self.name));
        }
        for (k, m) in [("labels", &self.labels), ("annotations", &self.annotations)] {
            if m.is_empty() {
                meta.remove(k);
            } else {
                meta.insert(k.into(), Value::Object(m.clone()));
            }
        }
        if self.owner_refs.is_empty() {
            meta.remove("ownerReferences");
        } else {
            meta.insert(
                "ownerReferences".into(),
                Value::Array(self.owner_refs.clone()),
            );
        }
        o.insert("addressType".into(), json!(self.address_type));
        o.insert(
            "endpoints".into(),
            Value::Array(self.endpoints.iter().map(Endpoint::to_json).collect()),
        );
        o.insert("ports".into(), Value::Array(self.ports.clone()));
        out
    }
}

/// Ports in one order whatever order they came in, as text: slices of a Service are grouped
/// by it (upstream's `PortMapKey`).
pub fn port_key(ports: &[Value]) -> String {
    let mut each: Vec<String> = ports
        .iter()
        .map(|p| canonical_port(p).to_string())
        .collect();
    crate::sort::sort(&mut each[..]);
    each.join("|")
}

/// A port with only the fields upstream's type has, in a fixed key order.
fn canonical_port(p: &Value) -> Value {
    json!([
        p.get("name"),
        p.get("port"),
        p.get("protocol"),
        p.get("appProtocol")
    ])
}

/// Ports in upstream's order (`NewPortMapKey` sorts them in place by the MD5 of go-spew's
/// dump of each `discovery/v1.EndpointPort`), the order a slice is written with.
pub fn sort_ports(ports: &mut [Value]) {
    crate::sort::sort_by_cached_key(&mut ports[..], |p| {
        crate::controllers::endpoints::gohash::md5(port_text(p).as_bytes())
    });
}

/// go-spew's `%#v` of a `discovery/v1.EndpointPort` (its pointer fields in declaration order).
pub fn port_text(p: &Value) -> String {
    let field = |out: &mut String, name: &str, ty: &str, v: Option<String>| {
        out.push_str(name);
        out.push_str(":(*");
        out.push_str(ty);
        out.push(')');
        out.push_str(v.as_deref().unwrap_or("<nil>"));
    };
    let s = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_string);
    let mut out = String::from("(v1.EndpointPort){");
    field(&mut out, "Name", "string", s("name"));
    out.push(' ');
    field(&mut out, "Protocol", "v1.Protocol", s("protocol"));
    out.push(' ');
    let port = p.get("port").and_then(Value::as_i64).map(|n| n.to_string());
    field(&mut out, "Port", "int32", port);
    out.push(' ');
    field(&mut out, "AppProtocol", "string", s("appProtocol"));
    out.push('}');
    out
}
