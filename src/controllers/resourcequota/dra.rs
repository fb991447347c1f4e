//! DRA extended resources in quotas (gate DRAExtendedResource, GA in 1.37): a DeviceClass
//! with `spec.extendedResourceName` lets pods ask for its devices as an extended resource
//! (every class also as `deviceclass.resource.kubernetes.io/<class>`); the scheduler then
//! makes a ResourceClaim for the pod, annotated `resource.kubernetes.io/extended-resource-claim`.
//! Such a claim is charged `requests.<extended resource>` and
//! `requests.deviceclass.resource.kubernetes.io/<class>` for the devices it asks for, less
//! what its pod is already charged for those names (upstream's `ExtendedResourceCache` and
//! the claim evaluator's `addExtendedResourceQuota`).

use super::usage::{self, ResourceList, DEVICES_PER_CLASS};
use crate::api::resources::{PODS, RESOURCECLAIMS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::compat::quantity::Quantity;
use crate::obj::{self, At as _};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{OnceLock, RwLock};
use std::time::SystemTime;

/// The prefix of every class's implicit extended resource name.
pub const CLASS_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";
const EXTENDED_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/extended-resource-claim";

/// The device classes: name -> (extended resource name, creation time).
#[derive(Default)]
pub struct Classes {
    by_name: BTreeMap<String, (Option<String>, String)>,
}

impl Classes {
    /// A DeviceClass as its watch shows it.
    pub fn apply(&mut self, d: &Delta) {
        let o = d.object();
        let name = obj::name(o).to_string();
        if d.kind == DeltaKind::Deleted {
            self.by_name.remove(&name);
            return;
        }
        let ext = o
            .at("/spec/extendedResourceName")
            .and_then(Value::as_str)
            .map(str::to_string);
        let created = obj::creation_timestamp(o).to_string();
        self.by_name.insert(name, (ext, created));
    }

    /// `GetExtendedResource`: a class's extended resource name, if it has one.
    pub fn extended_resource(&self, class: &str) -> Option<&str> {
        self.by_name.get(class).and_then(|(e, _)| e.as_deref())
    }

    /// `GetDeviceClass`: the class an extended resource name stands for: the class itself
    /// for its implicit name, else the oldest class naming it (by name on a tie).
    pub fn class_for(&self, resource: &str) -> Option<&str> {
        if let Some(c) = resource.strip_prefix(CLASS_RESOURCE_PREFIX) {
            if let Some((k, _)) = self.by_name.get_key_value(c) {
                return Some(k);
            }
        }
        self.by_name
            .iter()
            .filter(|(_, (e, _))| e.as_deref() == Some(resource))
            .min_by(|a, b| (&a.1 .1, a.0).cmp(&(&b.1 .1, b.0)))
            .map(|(k, _)| k.as_str())
    }
}

/// The device classes the quota controller's DeviceClass watch keeps.
pub fn classes() -> &'static RwLock<Classes> {
    static C: OnceLock<RwLock<Classes>> = OnceLock::new();
    C.get_or_init(Default::default)
}

/// Whether the claim evaluator measures `n` through the extended resources.
pub fn measures(n: &str) -> bool {
    if !crate::config::gates::enabled("DRAExtendedResource") {
        return false;
    }
    let c = classes().read().unwrap_or_else(|p| p.into_inner());
    if let Some(class) = n.strip_prefix(&format!("requests.{CLASS_RESOURCE_PREFIX}")) {
        if c.extended_resource(class).is_some() {
            return true;
        }
    }
    usage::is_extended_for_quota(n) && c.class_for(&n["requests.".len()..]).is_some()
}

/// The usage of the pod a scheduler-made claim is for, when the claim is that pod's
/// (`getVerifiedPodUsage`): its controller, the claim its status names, or without one the
/// oldest such claim it owns.
fn verified_pod_usage(claim: &Value, cache: &Cache, now: SystemTime) -> Option<ResourceList> {
    if obj::annotation(claim, EXTENDED_CLAIM_ANNOTATION) != Some("true") {
        return None;
    }
    let owner = obj::controller_ref(claim).filter(|r| r.kind == "Pod" && r.api_version == "v1")?;
    let ns = obj::namespace(claim);
    let pod = cache.store(PODS).get_in(ns, owner.name)?;
    if obj::uid(&pod) != owner.uid {
        return None;
    }
    let status = &pod["status"]["extendedResourceClaimStatus"];
    if status.is_object() {
        if status["resourceClaimName"].as_str() != Some(obj::name(claim)) {
            return None;
        }
    } else {
        let mine = (obj::creation_timestamp(claim), obj::name(claim));
        let older = cache
            .store(RESOURCECLAIMS)
            .by_owner(owner.uid)
            .iter()
            .any(|c| {
                obj::annotation(c, EXTENDED_CLAIM_ANNOTATION) == Some("true")
                    && obj::controller_ref(c).is_some_and(|r| r.kind == "Pod" && r.uid == owner.uid)
                    && (obj::creation_timestamp(c), obj::name(c)) < mine
            });
        if older {
            return None;
        }
    }
    Some(usage::pod_usage(&pod, now))
}

/// `addExtendedResourceQuota`: the extended resource names of the devices `used` asks for
/// per class, less the pod's usage of them, where positive.
pub fn add_extended(used: &mut ResourceList, claim: &Value, cache: &Cache, now: SystemTime) {
    if !crate::config::gates::enabled("DRAExtendedResource") {
        return;
    }
    let pod = verified_pod_usage(claim, cache, now).unwrap_or_default();
    let mut extended = ResourceList::new();
    {
        let c = classes().read().unwrap_or_else(|p| p.into_inner());
        for (name, q) in used.iter() {
            let Some(class) = name
                .strip_suffix(DEVICES_PER_CLASS)
                .filter(|c| !c.is_empty())
            else {
                continue;
            };
            extended.insert(format!("requests.{CLASS_RESOURCE_PREFIX}{class}"), *q);
            if let Some(ext) = c.extended_resource(class) {
                extended.insert(format!("requests.{ext}"), *q);
            }
        }
    }
    for (name, mut q) in extended {
        if let Some(p) = pod.get(&name) {
            q.sub(p);
        }
        if q.cmp_value(&Quantity::ZERO).is_gt() {
            used.insert(name, q);
        }
    }
}
