//! service-cidr-controller (upstream's `servicecidrs`; alpha in 1.29, GA in 1.33 with
//! `networking.k8s.io/v1`, gate MultiCIDRServiceAllocator locked on since 1.34): every
//! ServiceCIDR gets the `networking.k8s.io/service-cidr-finalizer` finalizer and a `Ready`
//! condition; one being deleted keeps the finalizer, with `Ready=False` reason `Terminating`,
//! while IPAddresses the API server's allocator made (label
//! `ipaddress.kubernetes.io/managed-by: ipallocator.k8s.io`) fall in its ranges and in no
//! other ServiceCIDR's; once none does, the finalizer goes 10 s after the deletion began
//! (the grace period for the API servers' allocators to stop using the range).
//!
//! - Queue `ipaddresses`, five workers, 15 retries; Events as `service-cidr-controller`, the
//!   client's identity `service-cidrs-controller`.
//! - Finalizer added and removed by strategic merge patches (`$deleteFromPrimitiveList`);
//!   the condition by a server-side apply of `status` as field manager
//!   `service-cidr-controller`, only when its status, reason or message differ.
//! - A ServiceCIDR is queued on its own changes and, when added, with every ServiceCIDR
//!   overlapping it; an IPAddress of the allocator, added or deleted, queues the
//!   ServiceCIDRs that contain it.

mod net;

use crate::api::client::PatchType;
use crate::api::resources::{IPADDRESSES, SERVICECIDRS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controllers::{Action, Applied, Controller, Cx, Outcome, Watch};
use crate::error::Result;
use crate::events::{EventSpec, EventType, ObjectRef};
use crate::obj::{self, At as _};
pub use net::{Addr, Prefix};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashSet};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

pub const NAME: &str = "service-cidr-controller";
pub const FINALIZER: &str = "networking.k8s.io/service-cidr-finalizer";
/// How long after its deletion began a ServiceCIDR keeps the finalizer, at least.
pub const DELETION_GRACE: Duration = Duration::from_secs(10);
pub const MANAGED_BY: &str = "ipaddress.kubernetes.io/managed-by";
pub const IP_FAMILY: &str = "ipaddress.kubernetes.io/ip-family";
/// The API server's allocator, the only manager whose IPAddresses count.
pub const ALLOCATOR: &str = "ipallocator.k8s.io";
pub const READY_MESSAGE: &str = "Kubernetes Service CIDR is ready";
pub const TERMINATING_MESSAGE: &str = "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR";

/// ServiceCIDRs, whole (their status is compared).
pub const CIDR_WATCH: Watch = Watch::full(SERVICECIDRS);
/// IPAddresses: the name and labels.
pub const IP_WATCH: Watch = Watch::fields(IPADDRESSES, &[]);

/// Its row in the controller table. Off, with one line, when the API server does not serve
/// `networking.k8s.io/v1` servicecidrs (kube-apiserver before 1.33).
pub fn build(
    cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controllers::Runnable>> {
    if crate::controllers::kit::served::served(
        cx.rest,
        "/apis/networking.k8s.io/v1",
        "servicecidrs",
    ) == Some(false)
    {
        log::info!(
            "{NAME}: the API server does not serve networking.k8s.io/v1 servicecidrs; not starting it"
        );
        return Ok(None);
    }
    Ok(Some(crate::controllers::Runnable::reconciles(
        ServiceCidrs::default(),
    )))
}

/// The ranges of a ServiceCIDR's `spec.cidrs` that parse.
pub fn prefixes(sc: &Value) -> Vec<Prefix> {
    sc.at("/spec/cidrs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str()?.parse().ok())
        .collect()
}

/// `OverlapsPrefix`: the names of the ServiceCIDRs with a range overlapping `p`.
fn overlapping(all: &[obj::Obj], p: &Prefix) -> BTreeSet<String> {
    all.iter()
        .filter(|sc| prefixes(sc).iter().any(|q| q.overlaps(p)))
        .map(|sc| obj::name(sc).to_string())
        .collect()
}

/// `ContainsPrefix`: the ServiceCIDRs (once per range) with a range that holds all of `p`.
fn containing_prefix<'a>(all: &'a [obj::Obj], p: &Prefix) -> Vec<&'a str> {
    let mut out = vec![];
    for sc in all {
        for q in prefixes(sc) {
            if q.overlaps(p) && q.bits <= p.bits {
                out.push(obj::name(sc));
            }
        }
    }
    out
}

/// `ContainsAddress`: the ServiceCIDRs (once per range) with a range that holds `a` (not as
/// its network address, nor as its IPv4 broadcast address).
pub fn containing_addr<'a>(all: &'a [obj::Obj], a: &Addr) -> Vec<&'a str> {
    let mut out = vec![];
    for sc in all {
        for q in prefixes(sc) {
            if q.holds_host(a) {
                out.push(obj::name(sc));
            }
        }
    }
    out
}

/// Whether an IPAddress was made by the API server's allocator.
fn allocated(ip: &Value) -> bool {
    obj::label(ip, MANAGED_BY) == Some(ALLOCATOR)
}

/// `canDeleteCIDR`: whether `sc` may lose its finalizer, given every ServiceCIDR and
/// IPAddress: yes when each of its ranges lies in another ServiceCIDR, else when no
/// allocator IPAddress of a range's family has `sc` as its only ServiceCIDR.
pub fn can_delete(sc: &Value, cidrs: &[obj::Obj], ips: &[obj::Obj]) -> bool {
    let name = obj::name(sc);
    let own = prefixes(sc);
    let has_parent = own.iter().all(|p| {
        let holders = containing_prefix(cidrs, p);
        !(holders.is_empty() || holders == [name])
    });
    if has_parent {
        log::info!("Deleting ServiceCIDR contained in other ServiceCIDR ServiceCIDR=\"{name}\"");
        return true;
    }
    // Ranges that do not parse have no family: no IPAddress carries an empty family label.
    let families: Vec<&str> = sc
        .at("/spec/cidrs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str())
        .map(family_of_cidr)
        .collect();
    for fam in families {
        for ip in ips {
            if !allocated(ip) || obj::label(ip, IP_FAMILY).unwrap_or("") != fam {
                continue;
            }
            let Ok(a) = obj::name(ip).parse::<Addr>() else {
                log::info!(
                    "[SHOULD NOT HAPPEN] unexpected error parsing IPAddress IPAddress=\"{}\"",
                    obj::name(ip)
                );
                continue;
            };
            if containing_addr(cidrs, &a) == [name] {
                log::info!("Deleting ServiceCIDR blocked by IP address IPAddress=\"{a}\"");
                return false;
            }
        }
    }
    log::info!("Deleting ServiceCIDR no longer have orphan IPs ServiceCIDR=\"{name}\"");
    true
}

/// `IPFamilyOfCIDRString` as a `v1.IPFamily`: "IPv4", "IPv6" or "" when it does not parse.
fn family_of_cidr(c: &str) -> &'static str {
    match c
        .split_once('/')
        .map(|(a, _)| a.parse::<std::net::IpAddr>())
    {
        Some(Ok(std::net::IpAddr::V4(_))) if c.parse::<Prefix>().is_ok() => "IPv4",
        Some(Ok(std::net::IpAddr::V6(_))) if c.parse::<Prefix>().is_ok() => "IPv6",
        _ => "",
    }
}

fn has_finalizer(o: &Value) -> bool {
    o.at("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

/// The `Ready` condition `sc` should have: (status, reason, message).
pub fn wanted_condition(deleting: bool) -> (&'static str, &'static str, &'static str) {
    if deleting {
        ("False", "Terminating", TERMINATING_MESSAGE)
    } else {
        ("True", "", READY_MESSAGE)
    }
}

/// `updateConditionIfNeeded`: the server-side apply of the condition, unless the current
/// one has the same status, reason and message.
pub fn condition_apply(sc: &Value, deleting: bool, now: SystemTime) -> Option<Action> {
    let (status, reason, message) = wanted_condition(deleting);
    let current = sc
        .at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    if let Some(c) = current {
        let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
        if s("status") == status && s("reason") == reason && s("message") == message {
            log::debug!(
                "ServiceCIDR condition already up to date ServiceCIDR=\"{}\" conditionType=\"Ready\"",
                obj::name(sc)
            );
            return None;
        }
    }
    let name = obj::name(sc);
    let object = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": name},
        "status": {"conditions": [{
            "type": "Ready", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": crate::compat::timefmt::rfc3339(now),
        }]},
    });
    Some(Action::Apply {
        kind: SERVICECIDRS,
        namespace: String::new(),
        name: name.to_string(),
        field_manager: NAME,
        object,
        fallback: None,
        subresource: Some("status"),
    })
}

fn finalizer_patch(sc: &Value, add: bool) -> Action {
    let patch = if add {
        json!({"metadata": {"finalizers": [FINALIZER]}})
    } else {
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}})
    };
    Action::Patch {
        kind: SERVICECIDRS,
        namespace: String::new(),
        name: obj::name(sc).to_string(),
        patch_type: PatchType::Strategic,
        patch,
        subresource: None,
    }
}

#[derive(Default)]
pub struct ServiceCidrs {
    /// ServiceCIDRs whose Ready=True apply failed: their Warning Event is recorded with the
    /// retry the failure queues.
    failed_ready: Mutex<HashSet<String>>,
}

impl ServiceCidrs {
    fn take_failed(&self, key: &str) -> bool {
        self.failed_ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key)
    }
}

impl Controller for ServiceCidrs {
    fn watches(&self) -> Vec<Watch> {
        vec![CIDR_WATCH, IP_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        let o = d.object();
        if w.kind == SERVICECIDRS {
            let mut keys = vec![obj::name(o).to_string()];
            if d.kind == DeltaKind::Added {
                let all = cache.store_for(&CIDR_WATCH).list();
                let mut more = BTreeSet::new();
                for p in prefixes(o) {
                    more.extend(overlapping(&all, &p));
                }
                keys.extend(more);
            }
            return keys;
        }
        // IPAddress updates queue nothing; only the allocator's addresses count.
        if d.kind == DeltaKind::Updated || !allocated(o) {
            return vec![];
        }
        let Ok(a) = obj::name(o).parse::<Addr>() else {
            return vec![];
        };
        let all = cache.store_for(&CIDR_WATCH).list();
        let names: BTreeSet<String> = containing_addr(&all, &a)
            .into_iter()
            .map(str::to_string)
            .collect();
        names.into_iter().collect()
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let failed = self.take_failed(key);
        let Some(sc) = cx.cache.store_for(&CIDR_WATCH).get(key) else {
            log::debug!("ServiceCIDR no longer exist ServiceCIDR=\"{key}\"");
            return Ok(Outcome::none());
        };
        if obj::is_deleting(&sc) {
            let cidrs = cx.cache.store_for(&CIDR_WATCH).list();
            let ips = cx.cache.store_for(&IP_WATCH).list();
            if !can_delete(&sc, &cidrs, &ips) {
                return Ok(Outcome::with(
                    condition_apply(&sc, true, cx.now).into_iter().collect(),
                ));
            }
            let since = sc
                .at("/metadata/deletionTimestamp")
                .and_then(Value::as_str)
                .and_then(crate::compat::timefmt::parse_rfc3339)
                .and_then(|t| cx.now.duration_since(t).ok())
                .unwrap_or_default();
            if since < DELETION_GRACE {
                return Ok(Outcome {
                    requeue_after: Some(DELETION_GRACE - since),
                    ..Outcome::none()
                });
            }
            if !has_finalizer(&sc) {
                return Ok(Outcome::none());
            }
            return Ok(Outcome::with(vec![finalizer_patch(&sc, false)]));
        }
        let mut actions = vec![];
        if failed {
            actions.push(Action::Event(EventSpec {
                involved: ObjectRef::of(&SERVICECIDRS, &sc),
                event_type: EventType::Warning,
                reason: "KubernetesServiceCIDRError".into(),
                message: "The ServiceCIDR Status can not be set to Ready=True".into(),
            }));
        }
        if !has_finalizer(&sc) {
            actions.push(finalizer_patch(&sc, true));
        }
        actions.extend(condition_apply(&sc, false, cx.now));
        Ok(Outcome::with(actions))
    }

    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        if let (Action::Apply { object, .. }, Applied::Failed(e)) = (action, result) {
            if object.at("/status/conditions/0/status") == Some(&json!("True")) {
                log::info!("error updating default ServiceCIDR status error=\"{e}\"");
                self.failed_ready
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.to_string());
            }
        }
    }

    fn on_error(&self, a: &Action, e: &crate::Error) -> crate::controller::OnError {
        // A finalizer patch of a ServiceCIDR that is gone is no error (upstream ignores
        // NotFound there, not for the status).
        if e.is_not_found() && matches!(a, Action::Patch { .. }) {
            crate::controller::OnError::Ignore
        } else {
            crate::controller::OnError::Retry
        }
    }
}

#[cfg(test)]
mod tests;
