//! Emptying a namespace: discovery, then for each deletable resource a paged listing,
//! `deletecollection` pages (or single deletes) in parallel, and what remains judged.

use crate::api::client::{Client, DeleteOptions, ListOptions, ObjectList};
use crate::api::discovery::{Discovery, Resource, Verbs};
use crate::api::resources::{NAMESPACES, PODS};
use crate::api::Kind;
use crate::error::{Error, Result};
use crate::obj;
use crate::obj::At as _;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use super::conditions::Conditions;
use super::{error_text, Inner, Op, FINALIZER_ESTIMATE_SECONDS};

/// Resources emptied at the same time within one pass.
const PARALLEL_RESOURCES: usize = 4;
/// Objects per listed page; a collection of several pages is deleted a page per request.
/// Small, because the apiserver deletes the objects of one request one after another: the
/// pages in flight together are what makes a large collection go fast (1,500 pods: about
/// 10 s in pages of 250 four at a time, about 4 s in pages of 25 thirty-two at a time).
const PAGE: u32 = 25;
/// Requests in flight for the pages (or objects) of one resource. Each costs a thread and a
/// connection (about 40 KB together): 16 at a time (64 with four resources) keeps emptying
/// the benchmark's namespace at about 7 s where 32 took about 6 s, and its memory peak 2.5 MB
/// lower.
const PARALLEL_PAGES: usize = 16;
const METADATA_LIST_ACCEPT: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

/// What emptying one resource left behind (upstream's `gvrDeletionMetadata`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Leftover {
    /// Seconds to wait; 0 is no estimate (not "nothing remains").
    pub estimate: i64,
    pub remaining: usize,
    pub finalizers: BTreeMap<String, usize>,
}

/// What the resources emptied so far left behind, summed as upstream sums them.
#[derive(Debug, Default)]
struct Totals {
    estimate: i64,
    /// `<resource>.<group>` -> objects remaining.
    remaining: BTreeMap<String, usize>,
    finalizers: BTreeMap<String, usize>,
}

impl Totals {
    fn add(
        &mut self,
        results: Vec<(Kind, Leftover, Option<String>)>,
        conds: &mut Conditions,
        errors: &mut Vec<String>,
    ) {
        for (kind, left, err) in results {
            if let Some(e) = err {
                conds.delete_failed(e.clone());
                errors.push(e);
            }
            self.estimate = self.estimate.max(left.estimate);
            if left.remaining > 0 {
                self.remaining.insert(remaining_key(&kind), left.remaining);
                for (f, n) in left.finalizers {
                    if n > 0 {
                        *self.finalizers.entry(f).or_default() += n;
                    }
                }
            }
        }
    }
}

/// Decide from what a list after deletion returned (upstream's tail of
/// `deleteAllContentForGroupVersionResource`): `items` are the remaining objects.
pub fn judge_remaining(
    estimate: i64,
    items: &[Remnant],
    ns: &str,
    kind: &Kind,
) -> (Leftover, Option<String>) {
    if items.is_empty() {
        return (Leftover::default(), None);
    }
    let mut finalizers: BTreeMap<String, usize> = BTreeMap::new();
    for f in items.iter().flat_map(|it| &it.finalizers) {
        *finalizers.entry(f.clone()).or_default() += 1;
    }
    let left = |estimate| Leftover {
        estimate,
        remaining: items.len(),
        finalizers: finalizers.clone(),
    };
    if estimate != 0 {
        return (left(estimate), None);
    }
    if !finalizers.is_empty() {
        return (left(FINALIZER_ESTIMATE_SECONDS), None);
    }
    (
        left(0),
        Some(format!(
            "unexpected items still remain in namespace: {ns} for gvr: {}",
            gvr_string(kind)
        )),
    )
}

/// `schema.GroupVersionResource`'s String(): `/v1, Resource=pods`.
fn gvr_string(k: &Kind) -> String {
    format!("{}/{}, Resource={}", k.group, k.version, k.plural)
}

/// How upstream keys remaining resources in its message: `<resource>.<group>` (so `pods.`).
pub(super) fn remaining_key(k: &Kind) -> String {
    format!("{}.{}", k.plural, k.group)
}

/// Upstream's pod estimate: the longest grace period of pods not yet terminal, or 0 once the
/// namespace has been deleting for longer than that.
pub fn pod_estimate(pods: &[Remnant], deleting_for: Duration) -> i64 {
    let est = pods
        .iter()
        .filter(|p| !matches!(p.phase.as_deref(), Some("Succeeded" | "Failed")))
        .filter_map(|p| p.grace)
        .max()
        .unwrap_or(0)
        .max(0);
    if deleting_for >= Duration::from_secs(est as u64) {
        0
    } else {
        est
    }
}

impl Inner {
    /// Upstream's `deleteAllContent`: returns the estimate, the errors met, and the namespace
    /// as last written.
    pub(super) fn delete_all_content(
        &self,
        client: &Client,
        ns: Value,
    ) -> (i64, Vec<String>, Value) {
        let name = obj::name(&ns).to_string();
        let deleted_at = ns
            .at("/metadata/deletionTimestamp")
            .and_then(Value::as_str)
            .and_then(crate::compat::timefmt::parse_rfc3339)
            .unwrap_or_else(SystemTime::now);
        let deleting_for = SystemTime::now()
            .duration_since(deleted_at)
            .unwrap_or_default();
        let mut conds = Conditions::default();
        let mut errors: Vec<String> = Vec::new();
        let resources = match Discovery::fetch(client) {
            Ok(d) => {
                if let Some(msg) = d.failure() {
                    conds.discovery_failed(&msg, Some(d.failed.len()));
                    errors.push(msg);
                }
                let unparsable = d.unparsable();
                if let Some(first) = unparsable.first() {
                    // As upstream: no resource list at all this pass.
                    conds.group_version_failed(first);
                    errors.push(first.clone());
                    Vec::new()
                } else {
                    d.preferred()
                        .into_iter()
                        .filter(|r| r.kind.namespaced && r.verbs.has(Verbs::DELETE))
                        .collect()
                }
            }
            Err(e) => {
                let msg = error_text(&e);
                conds.discovery_failed(&msg, None);
                errors.push(msg);
                Vec::new()
            }
        };

        // Pods first (ordered deletion, v1.33 on by default, always since v1.37): while any
        // remains, nothing else is deleted and the conditions say only what this pass met.
        let (pods, rest): (Vec<_>, Vec<_>) = resources.into_iter().partition(|r| r.kind == PODS);
        let mut totals = Totals::default();
        if !pods.is_empty() {
            let done = self.empty_all(client, &pods, &name, deleting_for);
            totals.add(done, &mut conds, &mut errors);
            if !totals.remaining.is_empty() {
                log::debug!("namespace-controller: {name}: pods remain, other content waits");
                let ns = self.write_conditions(client, ns, &conds, &name);
                return (totals.estimate, errors, ns);
            }
        }
        let done = self.empty_all(client, &rest, &name, deleting_for);
        totals.add(done, &mut conds, &mut errors);
        conds.content_totals(&totals.remaining, &totals.finalizers);
        let ns = self.write_conditions(client, ns, &conds, &name);
        log::debug!(
            "namespace-controller: deleteAllContent {name}: estimate {}, {} errors",
            totals.estimate,
            errors.len()
        );
        (totals.estimate, errors, ns)
    }

    /// Empties `resources`, a few at a time: per resource what is left and the error met.
    fn empty_all(
        &self,
        client: &Client,
        resources: &[Resource],
        name: &str,
        deleting_for: Duration,
    ) -> Vec<(Kind, Leftover, Option<String>)> {
        let results: Mutex<Vec<(Kind, Leftover, Option<String>)>> = Mutex::new(Vec::new());
        crate::runtime::pool::for_each_parallel(resources.len(), PARALLEL_RESOURCES, |i| {
            let r = &resources[i];
            let t0 = Instant::now();
            let (left, err) = self.empty_resource(client, &r.kind, r.verbs, name, deleting_for);
            log::debug!(
                "namespace-controller: {name}: {} emptied in {:?} ({} left)",
                r.kind,
                t0.elapsed(),
                left.remaining
            );
            results
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((r.kind, left, err));
            true
        });
        results.into_inner().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the namespace's conditions when they changed; the namespace as last written.
    fn write_conditions(
        &self,
        client: &Client,
        mut ns: Value,
        conds: &Conditions,
        name: &str,
    ) -> Value {
        let now = crate::compat::timefmt::rfc3339(SystemTime::now());
        let mut status = ns.get("status").cloned().unwrap_or(json!({}));
        if conds.apply(&mut status, &now) {
            ns["status"] = status;
            match client.update_status(&NAMESPACES, &ns) {
                Ok(v) => ns = v,
                Err(e) => log::warn!(
                    "namespace-controller: couldn't update status condition for namespace {name:?}: {e}"
                ),
            }
        }
        ns
    }

    fn supported(&self, kind: Kind, op: Op) -> bool {
        !self
            .not_supported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(kind, op))
    }

    fn set_not_supported(&self, kind: Kind, op: Op) {
        self.not_supported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((kind, op));
    }

    /// Upstream's `deleteAllContentForGroupVersionResource`, with two shortcuts: what is
    /// listed first (in pages) tells whether there is anything to delete at all, and a
    /// collection of several pages is deleted page by page in parallel (`deletecollection` with
    /// `limit` and `continue`), since the apiserver deletes one collection request with one
    /// worker.
    fn empty_resource(
        &self,
        client: &Client,
        kind: &Kind,
        verbs: Verbs,
        ns: &str,
        deleting_for: Duration,
    ) -> (Leftover, Option<String>) {
        let is_pods = *kind == PODS;
        let can_list = verbs.has(Verbs::LIST) && self.supported(*kind, Op::List);
        // Pods are listed whole: their grace periods make the estimate.
        let listed = if can_list {
            match self.list_pages(client, kind, ns, !is_pods) {
                Ok(l) => l,
                Err(e) => return (Leftover::default(), Some(error_text(&e))),
            }
        } else {
            None
        };
        let estimate = match &listed {
            Some((items, _)) if is_pods => pod_estimate(items, deleting_for),
            _ => 0,
        };
        if listed.as_ref().is_some_and(|(items, _)| items.is_empty()) {
            return (Leftover::default(), None);
        }
        let with = |err: Option<String>| {
            (
                Leftover {
                    estimate,
                    ..Default::default()
                },
                err,
            )
        };
        let pages: Vec<Option<String>> = listed
            .as_ref()
            .map(|(_, t)| t.clone())
            .unwrap_or_else(|| vec![None]);
        let mut collection_done = false;
        if verbs.has(Verbs::DELETECOLLECTION) && self.supported(*kind, Op::DeleteCollection) {
            match self.delete_collection(client, kind, ns, &pages) {
                Ok(true) => collection_done = true,
                Ok(false) => self.set_not_supported(*kind, Op::DeleteCollection),
                Err(e) => return with(Some(error_text(&e))),
            }
        }
        if !collection_done {
            if let Some((items, _)) = &listed {
                if let Err(e) = delete_each(client, kind, ns, items) {
                    return with(Some(error_text(&e)));
                }
            }
        }
        // What is left?
        if !verbs.has(Verbs::LIST) {
            return with(None);
        }
        match self.list_pages(client, kind, ns, true) {
            Ok(Some((items, _))) => judge_remaining(estimate, &items, ns, kind),
            Ok(None) => with(None),
            Err(e) => with(Some(error_text(&e))),
        }
    }

    /// Delete the collection: one request, or one per page (in parallel) when `pages` holds
    /// the continue tokens of several. Ok(false) when the server does not support it.
    fn delete_collection(
        &self,
        client: &Client,
        kind: &Kind,
        ns: &str,
        pages: &[Option<String>],
    ) -> Result<bool> {
        let body = json!({"kind": "DeleteOptions", "apiVersion": "v1",
                          "propagationPolicy": "Background"})
        .to_string();
        let send = |query: String| -> Result<bool> {
            let path = format!("{}{query}", kind.collection_path(Some(ns)));
            // The answer lists every object deleted: not decoded.
            match client.request_bytes(
                "DELETE",
                &path,
                Some(("application/json", &body)),
                METADATA_LIST_ACCEPT,
            ) {
                Ok(_) => Ok(true),
                Err(e) if e.code() == Some(405) || e.is_not_found() => Ok(false),
                Err(e) => Err(e),
            }
        };
        if pages.len() <= 1 {
            return send(String::new());
        }
        let outcome: Mutex<Result<bool>> = Mutex::new(Ok(true));
        crate::runtime::pool::for_each_parallel(pages.len(), PARALLEL_PAGES, |i| {
            let mut q = format!("?limit={PAGE}");
            if let Some(t) = &pages[i] {
                q.push_str("&continue=");
                q.push_str(&crate::api::client::percent_encode(t));
            }
            let r = send(q);
            let mut o = outcome.lock().unwrap_or_else(|p| p.into_inner());
            match r {
                Ok(true) => {}
                Ok(false) if matches!(*o, Ok(true)) => *o = Ok(false),
                Ok(false) => {}
                Err(e) => *o = Err(e),
            }
            true
        });
        match outcome.into_inner().unwrap_or_else(|p| p.into_inner()) {
            // The listing's snapshot expired meanwhile: the whole collection at once.
            Err(e) if e.is_gone() => send(String::new()),
            other => other,
        }
    }

    /// The objects of one namespace, in pages of `PAGE` (metadata only unless `metadata_only`
    /// is false), with the continue token that starts each page (None for the first). None
    /// when the server does not support listing.
    fn list_pages(
        &self,
        client: &Client,
        kind: &Kind,
        ns: &str,
        metadata_only: bool,
    ) -> Result<Option<Listed>> {
        if !self.supported(*kind, Op::List) {
            return Ok(None);
        }
        let mut opts = ListOptions {
            metadata_only,
            limit: Some(PAGE),
            ..Default::default()
        };
        let mut items = Vec::new();
        let mut tokens: Vec<Option<String>> = vec![None];
        loop {
            match list_remnants(client, kind, ns, &opts) {
                Ok(mut page) => {
                    items.append(&mut page.items);
                    match page.continue_token {
                        Some(t) => {
                            tokens.push(Some(t.clone()));
                            opts.continue_token = Some(t);
                        }
                        None => return Ok(Some((items, tokens))),
                    }
                }
                Err(e) if e.code() == Some(405) || e.is_not_found() => {
                    self.set_not_supported(*kind, Op::List);
                    return Ok(None);
                }
                Err(e) if e.is_gone() && opts.continue_token.is_some() => {
                    // The snapshot expired: one whole list instead.
                    let whole = ListOptions {
                        metadata_only,
                        ..Default::default()
                    };
                    let l = list_remnants(client, kind, ns, &whole)?;
                    return Ok(Some((l.items, vec![None])));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// What this controller reads of a listed object: its name and finalizers, and for a pod its
/// phase and grace period. Lists are decoded straight into these, so emptying a namespace of
/// thousands of pods never holds them whole.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Remnant {
    pub name: String,
    pub finalizers: Vec<String>,
    pub grace: Option<i64>,
    pub phase: Option<String>,
}

#[derive(serde::Deserialize)]
pub(super) struct ListedMeta {
    #[serde(default)]
    pub(super) metadata: RemnantMeta,
}

#[derive(serde::Deserialize)]
pub(super) struct ListedPod {
    #[serde(default)]
    metadata: RemnantMeta,
    #[serde(default)]
    spec: Option<PodRemnantSpec>,
    #[serde(default)]
    status: Option<PodRemnantStatus>,
}

#[derive(serde::Deserialize, Default)]
pub(super) struct RemnantMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
}

#[derive(serde::Deserialize)]
struct PodRemnantSpec {
    #[serde(default, rename = "terminationGracePeriodSeconds")]
    grace: Option<i64>,
}

#[derive(serde::Deserialize)]
struct PodRemnantStatus {
    #[serde(default)]
    phase: Option<String>,
}

impl From<RemnantMeta> for Remnant {
    fn from(m: RemnantMeta) -> Remnant {
        Remnant {
            name: m.name,
            finalizers: m.finalizers.unwrap_or_default(),
            ..Remnant::default()
        }
    }
}

impl From<ListedPod> for Remnant {
    fn from(p: ListedPod) -> Remnant {
        Remnant {
            grace: p.spec.and_then(|s| s.grace),
            phase: p.status.and_then(|s| s.phase),
            ..p.metadata.into()
        }
    }
}

/// One page of `kind` in `ns`, each item reduced to a `Remnant`.
fn list_remnants(
    client: &Client,
    kind: &Kind,
    ns: &str,
    opts: &ListOptions,
) -> Result<ObjectList<Remnant>> {
    if *kind != PODS {
        let l = client.list_as::<ListedMeta>(kind, Some(ns), opts)?;
        return Ok(ObjectList {
            items: l.items.into_iter().map(|r| r.metadata.into()).collect(),
            resource_version: l.resource_version,
            continue_token: l.continue_token,
        });
    }
    let l = client.list_as::<ListedPod>(kind, Some(ns), opts)?;
    Ok(ObjectList {
        items: l.items.into_iter().map(Remnant::from).collect(),
        resource_version: l.resource_version,
        continue_token: l.continue_token,
    })
}

/// Listed objects, and the continue token that starts each page (None for the first).
type Listed = (Vec<Remnant>, Vec<Option<String>>);

/// Delete listed objects one by one (a few at a time), in the background; objects already
/// gone, or that cannot be deleted this way, are skipped.
fn delete_each(client: &Client, kind: &Kind, ns: &str, items: &[Remnant]) -> Result<()> {
    let background = DeleteOptions {
        propagation_policy: Some("Background"),
        ..Default::default()
    };
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    crate::runtime::pool::for_each_parallel(items.len(), PARALLEL_PAGES, |i| {
        match client.delete(kind, Some(ns), &items[i].name, &background) {
            Ok(()) => true,
            Err(e) if e.is_not_found() || e.code() == Some(405) => true,
            Err(e) => {
                *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                false
            }
        }
    });
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
