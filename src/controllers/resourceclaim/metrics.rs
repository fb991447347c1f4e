//! The controller's metrics, as v1.37 names them (v1.34 called them
//! `resourceclaim_controller_creates_total` and `resourceclaim_controller_resource_claims`):
//! `dynamic_resource_allocation_resourceclaim_creates_total` (the creates it sent, by
//! outcome, admin access and owner) and `dynamic_resource_allocation_resource_claims` (the
//! claims the watch has shown, by allocation, admin access and source: upstream counts its
//! lister's claims at each scrape; here the watch handler keeps each claim's labels).

use super::decide;
use crate::metrics::{Family, MetricType};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// (allocated, admin_access, source).
type Labels = (&'static str, &'static str, &'static str);

fn claims() -> MutexGuard<'static, HashMap<String, Labels>> {
    static V: OnceLock<Mutex<HashMap<String, Labels>>> = OnceLock::new();
    V.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A claim as the watch shows it now; None: deleted.
pub fn claim_seen(key: &str, claim: Option<&Value>) {
    let mut m = claims();
    match claim {
        Some(c) => {
            let allocated = if decide::is_allocated(c) {
                "true"
            } else {
                "false"
            };
            let labels = (
                allocated,
                decide::admin_access_label(c),
                decide::source_label(c),
            );
            m.insert(key.to_string(), labels);
        }
        None => {
            m.remove(key);
        }
    }
}

/// (status, admin_access, owner_api_group, owner_api_kind) -> creates.
type Creates = BTreeMap<(&'static str, &'static str, String, String), u64>;

fn creates() -> MutexGuard<'static, Creates> {
    static V: OnceLock<Mutex<Creates>> = OnceLock::new();
    V.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A create of `claim` went (`ok`) or failed.
pub fn created(claim: &Value, ok: bool) {
    let (group, kind) = match crate::obj::controller_ref(claim) {
        Some(r) => (
            r.api_version
                .split_once('/')
                .map_or("", |(g, _)| g)
                .to_string(),
            r.kind.to_string(),
        ),
        None => (String::new(), String::new()),
    };
    let status = if ok { "success" } else { "failure" };
    *creates()
        .entry((status, decide::admin_access_label(claim), group, kind))
        .or_default() += 1;
}

/// Both families.
pub fn families() -> Vec<Family> {
    let mut total = Family::alpha(
        "dynamic_resource_allocation_resourceclaim_creates_total",
        "Number of ResourceClaims creation requests, categorized by creation status, admin access, and owning API group and kind (either Pod or scheduling.k8s.io/PodGroup)",
        MetricType::Counter,
    );
    for ((status, admin, group, kind), n) in creates().iter() {
        total.push(
            &[
                ("status", status),
                ("admin_access", admin),
                ("owner_api_group", group),
                ("owner_api_kind", kind),
            ],
            *n as f64,
        );
    }
    let mut claims_family = Family::alpha(
        "dynamic_resource_allocation_resource_claims",
        "Number of ResourceClaims, categorized by allocation status, admin access, and source. Source can be 'resource_claim_template' (created from a template), 'extended_resource' (extended resources), or empty (manually created by a user).",
        MetricType::Gauge,
    );
    let mut counts: BTreeMap<Labels, u64> = BTreeMap::new();
    for l in claims().values() {
        *counts.entry(*l).or_default() += 1;
    }
    for ((allocated, admin, source), n) in counts {
        claims_family.push(
            &[
                ("allocated", allocated),
                ("admin_access", admin),
                ("source", source),
            ],
            n as f64,
        );
    }
    vec![claims_family, total]
}
