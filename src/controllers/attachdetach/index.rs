//! What the attach/detach controller's watch handlers keep so that a change finds the nodes
//! to look at without a scan: the pods with claims on each node, the pods of each claim, and
//! the VolumeAttachments of each node and of each PersistentVolume.

use crate::obj;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

#[derive(Default)]
pub struct Index {
    /// Pod key -> its node and the claim keys its volumes name.
    pods: HashMap<String, (String, Vec<String>)>,
    node_pods: HashMap<String, BTreeSet<String>>,
    claim_pods: HashMap<String, BTreeSet<String>>,
    /// VolumeAttachment name -> its node and PersistentVolume.
    vas: HashMap<String, (String, String)>,
    node_vas: HashMap<String, BTreeSet<String>>,
    pv_vas: HashMap<String, BTreeSet<String>>,
}

/// The claims a pod's volumes name: `persistentVolumeClaim` ones and the `<pod>-<volume>`
/// claims of generic ephemeral volumes.
pub fn pod_claims(pod: &Value) -> Vec<String> {
    let ns = obj::namespace(pod);
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(c) = v["persistentVolumeClaim"]["claimName"].as_str() {
                Some(obj::make_key(ns, c))
            } else if v["ephemeral"].is_object() {
                let name = super::super::ephemeral::claim_name(
                    obj::name(pod),
                    v["name"].as_str().unwrap_or(""),
                );
                Some(obj::make_key(ns, &name))
            } else {
                None
            }
        })
        .collect()
}

fn unlink(m: &mut HashMap<String, BTreeSet<String>>, k: &str, v: &str) {
    if let Some(s) = m.get_mut(k) {
        s.remove(v);
        if s.is_empty() {
            m.remove(k);
        }
    }
}

impl Index {
    /// Record a pod as it is now (None: gone); the nodes it was and is on.
    pub fn pod(&mut self, key: &str, now: Option<&Value>) -> Vec<String> {
        let mut nodes = Vec::new();
        if let Some((node, claims)) = self.pods.remove(key) {
            unlink(&mut self.node_pods, &node, key);
            for c in claims {
                unlink(&mut self.claim_pods, &c, key);
            }
            nodes.push(node);
        }
        let Some(pod) = now else { return nodes };
        let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
        let claims = pod_claims(pod);
        if node.is_empty() || claims.is_empty() {
            return nodes;
        }
        self.node_pods
            .entry(node.to_string())
            .or_default()
            .insert(key.to_string());
        for c in &claims {
            self.claim_pods
                .entry(c.clone())
                .or_default()
                .insert(key.to_string());
        }
        self.pods
            .insert(key.to_string(), (node.to_string(), claims));
        if !nodes.iter().any(|n| n == node) {
            nodes.push(node.to_string());
        }
        nodes
    }

    /// Record a VolumeAttachment (None: gone); the nodes it was and is on.
    pub fn attachment(&mut self, name: &str, now: Option<&Value>) -> Vec<String> {
        let mut nodes = Vec::new();
        if let Some((node, pv)) = self.vas.remove(name) {
            unlink(&mut self.node_vas, &node, name);
            unlink(&mut self.pv_vas, &pv, name);
            nodes.push(node);
        }
        let Some(va) = now else { return nodes };
        let node = va["spec"]["nodeName"].as_str().unwrap_or("").to_string();
        let pv = va["spec"]["source"]["persistentVolumeName"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if node.is_empty() {
            return nodes;
        }
        self.node_vas
            .entry(node.clone())
            .or_default()
            .insert(name.to_string());
        if !pv.is_empty() {
            self.pv_vas
                .entry(pv.clone())
                .or_default()
                .insert(name.to_string());
        }
        if !nodes.contains(&node) {
            nodes.push(node.clone());
        }
        self.vas.insert(name.to_string(), (node, pv));
        nodes
    }

    pub fn pods_on(&self, node: &str) -> Vec<String> {
        self.node_pods
            .get(node)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn attachments_on(&self, node: &str) -> Vec<String> {
        self.node_vas
            .get(node)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn has_attachments(&self, node: &str) -> bool {
        self.node_vas.contains_key(node)
    }

    /// The attachments of a PersistentVolume: (name, node).
    pub fn attachments_of(&self, pv: &str) -> Vec<(String, String)> {
        self.pv_vas
            .get(pv)
            .into_iter()
            .flatten()
            .filter_map(|n| Some((n.clone(), self.vas.get(n)?.0.clone())))
            .collect()
    }

    /// The nodes of the pods that use a claim.
    pub fn claim_nodes(&self, claim: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .claim_pods
            .get(claim)
            .into_iter()
            .flatten()
            .filter_map(|p| Some(self.pods.get(p)?.0.clone()))
            .collect();
        crate::sort::sort(&mut out[..]);
        out.dedup();
        out
    }

    /// Every node with pods that use claims.
    pub fn nodes_with_pods(&self) -> Vec<String> {
        self.node_pods.keys().cloned().collect()
    }
}
