//! The three steps of a migration (see the module docs).

use super::*;

/// The CRD's `StorageMigrating` condition (and stored versions), applied as the runner.
fn crd_apply(
    crd: &Value,
    status: &str,
    reason: &str,
    message: &str,
    stored: Option<&str>,
    now: &str,
) -> Action {
    let mut st = json!({"conditions": [{"type": "StorageMigrating", "status": status,
        "lastTransitionTime": now, "reason": reason, "message": message,
        "observedGeneration": crd["metadata"]["generation"]}]});
    if let Some(v) = stored {
        st["storedVersions"] = json!([v]);
    }
    Action::Apply {
        kind: CRDS,
        namespace: String::new(),
        name: obj::name(crd).to_string(),
        field_manager: RUNNER,
        object: json!({"apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": obj::name(crd),
                "resourceVersion": crd["metadata"]["resourceVersion"]},
            "status": st}),
        fallback: None,
        subresource: Some("status"),
    }
}

/// `finishCRDMigration` (the stored versions follow the generation check alone, on failure
/// too, as upstream's).
pub(super) fn crd_finished(crd: &Value, success: bool, now: &str) -> Action {
    let generation = crd["metadata"]["generation"].as_i64();
    let migrating = crd
        .at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|l| conditions::get(l, "StorageMigrating"));
    let current = migrating.is_some_and(|c| c["observedGeneration"].as_i64() == generation);
    let (reason, msg) = match (success, current) {
        (true, true) => (
            "MigrationSucceeded",
            "The migration has succeeded and the stored versions have been updated",
        ),
        (true, false) => ("MigrationSucceeded", "The migration has succeeded but the stored versions have not been updated due to a generation mismatch"),
        (false, _) => ("MigrationFailed", "The migration has failed"),
    };
    let storage = crd
        .at("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
        .and_then(|v| v["name"].as_str());
    crd_apply(crd, "False", reason, msg, storage.filter(|_| current), now)
}

/// Step 1, the runner: clean up ended migrations, start the next.
pub(super) fn run_runner(
    cx: &Cx,
    gr: (&str, &str),
    cleanup: &[&Value],
    promote: Option<&Value>,
    now: &str,
) -> Result<Outcome> {
    let crd = crd_of(cx, gr)?;
    let mut actions = Vec::new();
    for svm in cleanup {
        let mut next = (*svm).clone();
        let list = conditions::list_mut(&mut next["status"]);
        let c = Condition {
            type_: RUNNING,
            status: "False",
            reason: "MigrationCompleted",
            message: "Migration completed",
        };
        conditions::set_in_place(list, &c, now);
        if let Some(r) = list.iter_mut().find(|c| c["type"] == RUNNING) {
            r["observedGeneration"] = svm["metadata"]["generation"].clone();
        }
        if let Some(crd) = &crd {
            actions.push(crd_finished(crd, is_true(svm, SUCCEEDED), now));
        }
        actions.push(status_write(next));
    }
    if let Some(svm) = promote {
        if let Some(crd) = &crd {
            let msg = format!("Migration {} is running", obj::name(svm));
            actions.push(crd_apply(crd, "True", "MigrationRunning", &msg, None, now));
        }
        let c = Condition {
            type_: RUNNING,
            status: "True",
            reason: RUNNING_REASON,
            message: &running_message(None, None),
        };
        actions.push(status_write(with_new_condition(svm, &c, now)));
    }
    Ok(Outcome::with(actions))
}

/// The resource-version loop's failure: Failed True, set once.
fn failed_once(svm: &Value, message: &str, now: &str) -> Outcome {
    let c = Condition {
        type_: FAILED,
        status: "True",
        reason: FAILED_REASON,
        message,
    };
    Outcome::with(vec![status_write(with_new_condition(svm, &c, now))])
}

/// Step 2: the resource's current resource version.
pub(super) fn record_resource_version(cx: &Cx, svm: &Value, now: &str) -> Result<Outcome> {
    let (group, resource) = group_resource(svm);
    let Some(r) = discovered(group, resource) else {
        if young(svm, cx.now) {
            return retry(
                "resource does not exist in our rest mapper, requeuing to attempt again".into(),
            );
        }
        return Ok(failed_once(
            svm,
            "resource does not exist in discovery",
            now,
        ));
    };
    if !migratable(&r) {
        let msg = format!(
            "resource {:?} does not support discovery operations: [update patch list]",
            gvr_string(&r)
        );
        log::error!("{NAME}: {msg}; not retrying");
        return Ok(failed_once(svm, &msg, now));
    }
    let rv = list_one(cx, &r)?;
    if rv.parse::<u64>().is_err() {
        let msg = format!(
            "latest resourceVersion for {} is not valid: {rv:?} is not a valid resource version",
            gvr_string(&r)
        );
        return Ok(failed_once(svm, &msg, now));
    }
    let mut next = svm.clone();
    next["status"]["resourceVersion"] = json!(rv);
    Ok(Outcome::with(vec![status_write(next)]))
}

/// The migration loop's failure (`failMigration`), with the count when objects were left.
fn failed(svm: &Value, err: &str, left: Option<(usize, usize)>, now: &str) -> Outcome {
    let mut next = svm.clone();
    let list = conditions::list_mut(&mut next["status"]);
    let msg = match left {
        Some((left, total)) => {
            let running = running_message(Some((left, total)), None);
            let c = Condition {
                type_: RUNNING,
                status: "True",
                reason: RUNNING_REASON,
                message: &running,
            };
            conditions::set_in_place(list, &c, now);
            format!("{left}/{total} not yet migrated. migration encountered unhandled error: {err}")
        }
        None => format!("migration encountered unhandled error: {err}"),
    };
    let c = Condition {
        type_: FAILED,
        status: "True",
        reason: FAILED_REASON,
        message: &msg,
    };
    conditions::set_in_place(list, &c, now);
    Outcome::with(vec![status_write(next)])
}

/// Errors that retry the migration (throttling, server errors, timeouts, a lost connection).
fn retriable(e: &Error) -> bool {
    matches!(e, Error::Transport(_)) || matches!(e.code(), Some(429 | 500 | 503 | 504))
}

/// Step 3: rewrite every object up to the recorded resource version.
pub(super) fn migrate(cx: &Cx, svm: &Value, target: &str, now: &str) -> Result<Outcome> {
    let (group, resource) = group_resource(svm);
    let Some(r) = discovered(group, resource) else {
        if young(svm, cx.now) {
            return retry(
                "resource does not exist in rest mapper, requeuing to attempt again".into(),
            );
        }
        return Ok(failed(
            svm,
            "unable to obtain GVR from discovery",
            None,
            now,
        ));
    };
    let Some(monitors) = super::super::garbagecollector::shared_monitors() else {
        return retry(format!("no monitor found for resource {}", gvr_string(&r)));
    };
    let Some((informer, synced)) = monitors.informer_of(group, resource) else {
        return retry(format!("no monitor found for resource {}", gvr_string(&r)));
    };
    if !synced {
        if young(svm, cx.now) {
            return retry("resource does not exist in GC, requeuing to attempt again".into());
        }
        return Ok(failed(
            svm,
            "resource does not exist in GC: %!w(<nil>)",
            None,
            now,
        ));
    }
    let (Ok(want), Ok(have)) = (
        target.parse::<u64>(),
        informer.store.resource_version().parse::<u64>(),
    ) else {
        let msg = "error comparing resource versions between GC and SVM resource: not a valid resource version";
        return Ok(failed(svm, msg, None, now));
    };
    if have < want {
        return retry(format!("GC cache is not up to date, requeuing to attempt again. gcListResourceVersion: {have}, listResourceVersion: {want}"));
    }
    let all = informer.store.list();
    let total = all.len();
    let candidates: Vec<(String, String, String)> = all
        .iter()
        .filter_map(|o| {
            let rv = obj::resource_version(o);
            (rv.parse::<u64>().ok()? <= want).then(|| {
                (
                    obj::namespace(o).to_string(),
                    obj::name(o).to_string(),
                    rv.to_string(),
                )
            })
        })
        .collect();
    let mut left = candidates.len();
    for (ns, name, rv) in &candidates {
        let ns = (!ns.is_empty()).then_some(ns.as_str());
        match cx
            .client
            .merge_patch_as(&r.kind, ns, name, &merge_patch_of(&r, rv), NAME)
        {
            Ok(_) => left -= 1,
            Err(e) if e.is_conflict() || e.is_not_found() => left -= 1,
            Err(e) if retriable(&e) => {
                let c = Condition {
                    type_: RUNNING,
                    status: "True",
                    reason: RUNNING_REASON,
                    message: &running_message(Some((left, total)), Some(&e.message())),
                };
                let mut o = Outcome::none();
                if let Some(next) = with_condition(svm, &c, now) {
                    o.actions.push(status_write(next));
                }
                o.requeue_after = Some(Duration::from_secs(1));
                return Ok(o);
            }
            Err(e) => {
                log::error!("{NAME}: migrating {}: {e}", gvr_string(&r));
                return Ok(failed(svm, &e.message(), Some((left, total)), now));
            }
        }
    }
    let mut next = svm.clone();
    let list = conditions::list_mut(&mut next["status"]);
    let running = running_message(Some((left, total)), None);
    for (type_, reason, message) in [
        (RUNNING, RUNNING_REASON, running.as_str()),
        (SUCCEEDED, SUCCEEDED_REASON, "Migration completed"),
    ] {
        let c = Condition {
            type_,
            status: "True",
            reason,
            message,
        };
        conditions::set_in_place(list, &c, now);
    }
    Ok(Outcome::with(vec![status_write(next)]))
}
