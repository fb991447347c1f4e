//! storage-version-migrator-controller (`svm`; upstream's `storageversionmigrator`, GA in
//! v1.37 with `storagemigration.k8s.io/v1`, gates StorageVersionMigrator and client-go's
//! InformerResourceVersion): runs StorageVersionMigrations, rewriting every object of a
//! resource so that kube-apiserver stores it again in its current storage version.
//!
//! Upstream runs three loops on the migrations; here one reconcile of a migration takes the
//! next step of the three, and its own status write brings the step after:
//! 1. the runner (`migration-runner-controller`), per resource: a migration that is Running
//!    and has ended (Succeeded or Failed) gets Running False `MigrationCompleted` (and a
//!    CustomResourceDefinition of the resource its `StorageMigrating` condition False and, on
//!    success when the condition's generation is current, `storedVersions` = the storage
//!    version); else, when none is running, the oldest waiting one (creation time, then name)
//!    gets Running True `MigrationRunning` "The migration is running" (and the CRD
//!    `StorageMigrating` True "Migration <name> is running");
//! 2. the resource version (`resource-version-controller`): a running migration without
//!    `status.resourceVersion` gets the resource's current one, from a list of at most one
//!    object (in a namespace that cannot exist, for a namespaced resource); a resource
//!    discovery does not serve is retried for a minute after the migration's creation, then
//!    the migration Failed; one without the update, patch and list verbs Failed at once;
//! 3. the migration: once the garbage collector's monitor of the resource has listed up to
//!    that resource version, every object it holds at or below it gets a JSON merge patch of
//!    its `apiVersion`, `kind` and `metadata.resourceVersion` (a no-op the server stores
//!    again), as field manager `storage-version-migrator-controller`; a conflict or a gone
//!    object counts as migrated; throttling and server errors are retried with the count in
//!    the Running message; any other error fails the migration. Then Running True "The
//!    migration is running, <n> objects verified migrated" and Succeeded True
//!    `StorageVersionMigrationSucceeded` "Migration completed".
//!
//! It needs the garbage collector (`--enable-garbage-collector`, as upstream) and stays off
//! with one line when the API server does not serve the API.

use crate::api::client::ListOptions;
use crate::api::discovery::{Resource, Verbs};
use crate::api::resources::{CRDS, STORAGEVERSIONMIGRATIONS};
use crate::cache::{Cache, Delta};
use crate::controllers::kit::conditions::{self, Condition};
use crate::controllers::{Action, Controller, Cx, Outcome, Watch};
use crate::error::{Error, Result};
use crate::obj::{self, At as _};
use serde_json::{json, Value};
use std::time::Duration;

mod steps;
#[cfg(test)]
mod tests;

pub const NAME: &str = "storage-version-migrator-controller";
/// The CRD writes' field manager (upstream's runner loop).
pub const RUNNER: &str = "migration-runner-controller";
pub const RUNNING: &str = "Running";
pub const SUCCEEDED: &str = "Succeeded";
pub const FAILED: &str = "Failed";
const RUNNING_REASON: &str = "MigrationRunning";
const SUCCEEDED_REASON: &str = "StorageVersionMigrationSucceeded";
const FAILED_REASON: &str = "StorageVersionMigrationFailed";
/// A resource discovery or the garbage collector does not know yet gets this long.
const GRACE: Duration = Duration::from_secs(60);

/// Migrations, whole (their status is written back).
pub const SVM_WATCH: Watch = Watch::full(STORAGEVERSIONMIGRATIONS);

/// Its row in the controller table.
pub fn build(
    cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controllers::Runnable>> {
    if !cx.cfg.garbage_collector.enable_garbage_collector {
        return Err(Error::Config(
            "storage version migrator requires garbage collector".into(),
        ));
    }
    let path = "/apis/storagemigration.k8s.io/v1";
    if super::kit::served::served(cx.rest, path, "storageversionmigrations") == Some(false) {
        log::info!(
            "{NAME}: the API server does not serve storagemigration.k8s.io/v1 storageversionmigrations; not starting it"
        );
        return Ok(None);
    }
    Ok(Some(crate::controllers::Runnable::reconciles(Svm)))
}

/// The `group` and `resource` a migration names.
pub fn group_resource(svm: &Value) -> (&str, &str) {
    let s = |p: &str| svm.at(p).and_then(Value::as_str).unwrap_or("");
    (s("/spec/resource/group"), s("/spec/resource/resource"))
}

fn conds(svm: &Value) -> &[Value] {
    svm.at("/status/conditions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

pub fn is_true(svm: &Value, type_: &str) -> bool {
    conditions::status(conds(svm), type_) == "True"
}

pub fn terminal(svm: &Value) -> bool {
    is_true(svm, SUCCEEDED) || is_true(svm, FAILED)
}

/// Upstream's `getSVMsForResource`: the running migrations that ended (to clean up) and, when
/// none of the resource's is running, the oldest waiting one (to start).
pub fn runner_plan(same_resource: &[Value]) -> (Vec<&Value>, Option<&Value>) {
    let cleanup: Vec<&Value> = same_resource
        .iter()
        .filter(|s| is_true(s, RUNNING) && terminal(s))
        .collect();
    if same_resource
        .iter()
        .any(|s| is_true(s, RUNNING) && !terminal(s))
    {
        return (cleanup, None);
    }
    let created = |s: &Value| {
        (
            s.at("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            obj::name(s).to_string(),
        )
    };
    let promote = same_resource
        .iter()
        .filter(|s| !is_true(s, RUNNING) && !terminal(s))
        .min_by_key(|s| created(s));
    (cleanup, promote)
}

/// `migrationRunningMessage`.
pub fn running_message(left: Option<(usize, usize)>, transient: Option<&str>) -> String {
    let mut m = "The migration is running".to_string();
    if let Some((left, total)) = left.filter(|(_, t)| *t > 0) {
        if left > 0 {
            m.push_str(&format!(", {left}/{total} objects not yet migrated"));
        } else {
            m.push_str(&format!(", {total} objects verified migrated"));
        }
    }
    if let Some(e) = transient {
        m.push_str(&format!("; transient error: {e}"));
    }
    m
}

/// `schema.GroupVersionResource.String()`.
pub fn gvr_string(r: &Resource) -> String {
    format!(
        "{}/{}, Resource={}",
        r.kind.group, r.kind.version, r.kind.plural
    )
}

/// Whether discovery gives the verbs a migration needs.
pub fn migratable(r: &Resource) -> bool {
    r.verbs.has(Verbs::UPDATE) && r.verbs.has(Verbs::PATCH) && r.verbs.has(Verbs::LIST)
}

/// The migration's status with `c` set as `meta.SetStatusCondition` does; None when nothing
/// changed.
fn with_condition(svm: &Value, c: &Condition, now: &str) -> Option<Value> {
    let mut next = svm.clone();
    conditions::set_in_place(conditions::list_mut(&mut next["status"]), c, now).then_some(next)
}

/// `setStatusConditions`: a condition of that type is never set twice.
fn with_new_condition(svm: &Value, c: &Condition, now: &str) -> Value {
    let mut next = svm.clone();
    let list = conditions::list_mut(&mut next["status"]);
    if conditions::get(list, c.type_).is_none() {
        conditions::set_in_place(list, c, now);
    }
    next
}

fn status_write(object: Value) -> Action {
    Action::UpdateSubresource {
        kind: STORAGEVERSIONMIGRATIONS,
        object,
        subresource: "status",
    }
}

/// A retry of the whole reconcile with the queue's backoff (upstream's `AddRateLimited` on a
/// sync error), without a failed write to report: waiting for discovery or for the garbage
/// collector's monitor is the normal course of a migration.
fn retry(msg: String) -> Result<Outcome> {
    Ok(Outcome {
        retry_quietly: Some(msg),
        ..Outcome::none()
    })
}

pub struct Svm;

impl Controller for Svm {
    fn watches(&self) -> Vec<Watch> {
        vec![SVM_WATCH]
    }

    /// The migration itself and every other one of its resource (the runner's key is the
    /// resource).
    fn keys_for(&self, _: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        let gr = group_resource(d.object());
        let mut keys: Vec<String> = cache
            .store_for(&SVM_WATCH)
            .list()
            .iter()
            .filter(|s| group_resource(s) == gr)
            .map(|s| obj::name(s).to_string())
            .collect();
        keys.sort();
        keys
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let store = cx.cache.store_for(&SVM_WATCH);
        let Some(svm) = store.get(key) else {
            return Ok(Outcome::none());
        };
        let now = crate::compat::timefmt::rfc3339(cx.now);
        let gr = group_resource(&svm);
        let same: Vec<Value> = store
            .list()
            .iter()
            .filter(|s| group_resource(s) == gr)
            .map(|s| (**s).clone())
            .collect();
        let (cleanup, promote) = runner_plan(&same);
        if !cleanup.is_empty() || promote.is_some() {
            return steps::run_runner(cx, gr, &cleanup, promote, &now);
        }
        if !is_true(&svm, RUNNING) || terminal(&svm) {
            return Ok(Outcome::none());
        }
        let target = svm
            .at("/status/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if target.is_empty() {
            steps::record_resource_version(cx, &svm, &now)
        } else {
            steps::migrate(cx, &svm, target, &now)
        }
    }
}

/// The CRD of a resource, if it is a custom one (`<resource>.<group>`).
fn crd_of(cx: &Cx, (group, resource): (&str, &str)) -> Result<Option<Value>> {
    if group.is_empty() {
        return Ok(None);
    }
    match cx.client.get(&CRDS, None, &format!("{resource}.{group}")) {
        Ok(c) => Ok(Some(c)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The resource as discovery serves it (its preferred version).
fn discovered(group: &str, resource: &str) -> Option<Resource> {
    let m = super::garbagecollector::shared_monitors()?;
    let found = m
        .discovery()
        .preferred()
        .into_iter()
        .find(|r| r.kind.group == group && r.kind.plural == resource);
    if found.is_none() {
        m.request_discovery();
    }
    found
}

/// Within a minute of the migration's creation (then a missing resource is waited for).
fn young(svm: &Value, now: std::time::SystemTime) -> bool {
    svm.at("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(crate::compat::timefmt::parse_rfc3339)
        .is_some_and(|c| c + GRACE > now)
}

fn list_one(cx: &Cx, r: &Resource) -> Result<String> {
    let ns = r.kind.namespaced.then_some("@fake:svm_ns!");
    let opts = ListOptions {
        limit: Some(1),
        metadata_only: true,
        ..ListOptions::default()
    };
    Ok(cx.client.list(&r.kind, ns, &opts)?.resource_version)
}

fn merge_patch_of(r: &Resource, rv: &str) -> Value {
    let api_version = if r.kind.group.is_empty() {
        r.kind.version.to_string()
    } else {
        format!("{}/{}", r.kind.group, r.kind.version)
    };
    json!({"apiVersion": api_version, "kind": r.kind.kind, "metadata": {"resourceVersion": rv}})
}
