//! garbage-collector-controller with a monitor that cannot sync (the sandbox fails its lists):
//! as upstream v1.37, the collector proceeds after one sync period and is never paused by a
//! later resource whose informer does not sync. Sandbox only: a real kube-apiserver cannot be
//! told to fail the lists of one resource.

use crate::common::*;
use crate::e2e_gc::{check_alive, configmap, create_crd, gone, owner_ref, widget};
use edgekcm::api::client::Client;
use edgekcm::api::resources::{CONFIGMAPS, CRDS};
use serde_json::json;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const CONTROLLERS: &str = "--controllers=garbage-collector-controller";
const TIMED_OUT: &str = "timed out waiting for the monitors to sync";

/// A ConfigMap whose only owner, a ConfigMap, never existed: garbage once the collector works.
fn orphaned_configmap(c: &Client, ns: &str, name: &str) {
    let never = json!({"metadata": {"name": "never-was",
        "uid": "00000000-0000-4000-8000-000000000001"}});
    configmap(
        c,
        ns,
        name,
        vec![owner_ref("ConfigMap", "v1", &never, false)],
    );
}

fn collected(c: &Client, ns: &str, name: &str) -> Option<()> {
    gone(c, &CONFIGMAPS, ns, name)
}

/// One resource's lists always fail: the first set never syncs, and after the sync period the
/// collector proceeds anyway, counting the error.
#[test]
fn first_set_unsynced_proceeds_after_the_period() {
    let t = sandbox();
    let sb = t.sandbox().expect("sandbox");
    sb.faults().fail_for(
        Duration::from_secs(600),
        500,
        Some("/apis/storage.k8s.io/v1/csidrivers"),
    );
    let admin = t.admin();
    let ns = unique("gc-unsynced");
    create_namespace(&admin, &ns);
    let mut kcm = Kcm::start(&t, "gc-unsynced", &[CONTROLLERS]);
    orphaned_configmap(&admin, &ns, "garbage");
    kcm.wait_for_line("the monitors start", "syncing monitors with discovery");
    eventually(LIMIT, "garbage collected after the sync period", || {
        check_alive(&mut kcm);
        collected(&admin, &ns, "garbage")
    });
    let log = kcm.log_text();
    let timed_out = log.find(TIMED_OUT).expect("a sync timeout logged");
    assert!(
        log[timed_out..].contains("csidrivers.storage.k8s.io"),
        "the unsynced resource is named:\n{log}"
    );
    assert!(log.contains("not all resource monitors could be synced, proceeding anyways"));
    assert!(log.contains("proceeding to collect garbage"));
}

/// A custom resource served after the collector started whose lists fail: its monitor never
/// syncs, and the collector goes on collecting meanwhile (upstream v1.37 no longer pauses the
/// collector's workers while a new set syncs).
#[test]
fn new_unsynced_resource_does_not_pause_the_workers() {
    let t = sandbox();
    let sb = t.sandbox().expect("sandbox");
    let admin = t.admin();
    let ns = unique("gc-new-unsynced");
    create_namespace(&admin, &ns);
    let mut kcm = Kcm::start(&t, "gc-new-unsynced", &[CONTROLLERS]);
    kcm.wait_for_line("the collector works", "proceeding to collect garbage");
    let group = format!("{}.example.com", unique("gcmon"));
    // The cluster-wide list and watch of the new resource (the monitor's) fail; its objects
    // can still be written in their namespace.
    sb.faults().fail_for(
        Duration::from_secs(600),
        500,
        Some(&format!("/apis/{group}/v1/widgets")),
    );
    let w = create_crd(&admin, &group);
    // A reference to the new kind brings discovery forward.
    let owner = widget(&admin, &w, &ns, "owner", vec![]);
    let r = owner_ref("Widget", &w.api_version(), &owner, false);
    configmap(&admin, &ns, "owned-by-widget", vec![r]);
    let adding = format!("widgets.{group}");
    eventually(LIMIT, "the new resource's monitor added", || {
        check_alive(&mut kcm);
        let log = kcm.log_text();
        let at = log.rfind("syncing monitors with discovery")?;
        log[at..].contains(&adding).then_some(())
    });
    orphaned_configmap(&admin, &ns, "garbage");
    eventually(
        LIMIT,
        "garbage collected while the new monitor syncs",
        || {
            check_alive(&mut kcm);
            collected(&admin, &ns, "garbage")
        },
    );
    assert!(
        !kcm.log_text().contains(TIMED_OUT),
        "collected only after the sync timed out:\n{}",
        kcm.log_text()
    );
    // The owner is there: its dependent is kept even though the owner's kind is unsynced.
    assert!(collected(&admin, &ns, "owned-by-widget").is_none());
    eventually(LIMIT, "the sync timeout logged", || {
        check_alive(&mut kcm);
        kcm.log_text().contains(TIMED_OUT).then_some(())
    });
    let _ = admin.delete(&CRDS, None, &adding, &Default::default());
}
