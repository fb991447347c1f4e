//! selinux-warning-controller scenarios, against the sandbox always and a real
//! kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`). Nothing binds or runs pods: the test
//! binds its claims to CSI volumes itself. Its SELinuxChangePolicy gate is locked on in
//! v1.37, so the apiserver needs no flags.

use crate::common::*;
use crate::e2e_attachdetach::{events_about, Pvs};
use edgekcm::api::client::Client;
use edgekcm::api::resources::{CSIDRIVERS, PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, PODS};
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);
const TAIL: &str = "If both pods land on the same node, only one of them may access the volume.";

/// Cluster-scoped objects a test made, deleted on drop: the CSIDriver, then the volumes.
struct Made {
    admin: Client,
    pvs: Pvs,
    driver: String,
}

impl Drop for Made {
    fn drop(&mut self) {
        let _ = self
            .admin
            .delete(&CSIDRIVERS, None, &self.driver, &Default::default());
    }
}

/// A claim `name` in `ns` bound to a new CSI volume `pv` with handle `handle`.
fn bound_claim(admin: &Client, ns: &str, name: &str, pv: &str, handle: &str, made: &mut Made) {
    let src = json!({"csi": {"driver": made.driver, "volumeHandle": handle}});
    bound_claim_to(admin, ns, name, pv, src, made);
}

/// A claim `name` in `ns` bound to a new volume `pv` with the source `src`.
fn bound_claim_to(admin: &Client, ns: &str, name: &str, pv: &str, src: Value, made: &mut Made) {
    let c = admin
        .create(
            &PERSISTENTVOLUMECLAIMS,
            Some(ns),
            &json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": name},
                "spec": {"accessModes": ["ReadWriteMany"], "volumeName": pv,
                    "storageClassName": "",
                    "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .expect("create claim");
    made.pvs.names.push(pv.to_string());
    let mut v = json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": ns, "name": name,
                "uid": c["metadata"]["uid"]}}});
    for (k, x) in src.as_object().into_iter().flatten() {
        v["spec"][k] = x.clone();
    }
    admin
        .create(&PERSISTENTVOLUMES, None, &v)
        .expect("create volume");
    let mut c = admin
        .get(&PERSISTENTVOLUMECLAIMS, Some(ns), name)
        .expect("get claim");
    c["status"] = json!({"phase": "Bound", "accessModes": ["ReadWriteMany"],
        "capacity": {"storage": "1Gi"}});
    admin
        .update_status(&PERSISTENTVOLUMECLAIMS, &c)
        .expect("claim Bound");
}

fn pod(admin: &Client, ns: &str, name: &str, claim: &str, level: &str, policy: Option<&str>) {
    let mut sc = json!({"seLinuxOptions": {"level": level}});
    if let Some(p) = policy {
        sc["seLinuxChangePolicy"] = json!(p);
    }
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"securityContext": sc,
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}});
    admin.create(&PODS, Some(ns), &p).expect("create pod");
}

fn wait_events(
    admin: &Client,
    ns: &str,
    name: &str,
    n: usize,
) -> Vec<(String, String, String, String)> {
    eventually(LIMIT, &format!("{n} Events about {name}"), || {
        let e = events_about(admin, ns, name);
        (e.len() >= n).then_some(e)
    })
}

fn ev(reason: &str, message: String) -> (String, String, String, String) {
    (
        "Normal".into(),
        reason.into(),
        message,
        "selinux_warning".into(),
    )
}

fn same_ns(prop: &str, v: &str, other: &str, ov: &str) -> String {
    format!("{prop} \"{v}\" conflicts with pod {other} that uses the same volume as this pod with {prop} \"{ov}\". {TAIL}")
}

/// The controller's metric, as its secure port serves it: the series lines.
fn conflict_series(base: &str) -> Vec<String> {
    let a = insecure_https_agent(None);
    let Ok(mut r) = a.get(&format!("{base}/metrics")).call() else {
        return Vec::new();
    };
    let body = r.body_mut().read_to_string().unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with("selinux_warning_controller_selinux_volume_conflict{"))
        .map(str::to_string)
        .collect()
}

/// Two pods of one namespace on one volume with different levels, a third pod elsewhere
/// on the same volume (another claim, another PersistentVolume, the same handle) with the
/// Recursive policy: the label conflict on both pods of the namespace, the policy and
/// label conflicts across namespaces without the other pod's name; the metric's series.
fn scenario_conflicts_are_told(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-selinux", &[PODS, PERSISTENTVOLUMECLAIMS]);
    let other = Ns::with_cleanup(t, "e2e-selinux-b", &[PODS, PERSISTENTVOLUMECLAIMS]);
    let (admin, n, o) = (&ns.admin, ns.name.as_str(), other.name.as_str());
    let mut made = Made {
        admin: admin.clone(),
        pvs: Pvs {
            admin: admin.clone(),
            names: Vec::new(),
        },
        driver: format!("{n}.csi.example.com"),
    };
    admin
        .create(
            &CSIDRIVERS,
            None,
            &json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": made.driver},
                "spec": {"attachRequired": false, "seLinuxMount": true}}),
        )
        .expect("create CSIDriver");
    let (pv1, pv2) = (format!("{n}-a"), format!("{n}-b"));
    bound_claim(admin, n, "shared", &pv1, "h1", &mut made);
    bound_claim(admin, o, "shared", &pv2, "h1", &mut made);
    let port = free_port();
    let kc = kubeconfig_arg(t);
    let args = [
        "--controllers=selinux-warning-controller".to_string(),
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".to_string(),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        "--authorization-always-allow-paths=/metrics".to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _kcm = Kcm::start(t, "selinux", &args);
    let base = format!("https://127.0.0.1:{port}");
    pod(admin, n, "pod1", "shared", "s0:c1,c2", None);
    std::thread::sleep(Duration::from_secs(1));
    pod(admin, n, "pod2", "shared", "s0:c98,c99", None);
    let (l1, l2) = (":::s0:c1,c2", ":::s0:c98,c99");
    let got = wait_events(admin, n, "pod1", 1);
    assert_eq!(
        got,
        [ev(
            "SELinuxLabelConflict",
            same_ns("SELinuxLabel", l1, "pod2", l2)
        )]
    );
    let got = wait_events(admin, n, "pod2", 1);
    assert_eq!(
        got,
        [ev(
            "SELinuxLabelConflict",
            same_ns("SELinuxLabel", l2, "pod1", l1)
        )]
    );
    let series = eventually(LIMIT, "the conflict metric", || {
        let s = conflict_series(&base);
        (s.len() == 2).then_some(s)
    });
    assert!(
        series.contains(&format!(
            "selinux_warning_controller_selinux_volume_conflict{{pod1_name=\"pod1\",pod1_namespace=\"{n}\",pod1_value=\"{l1}\",pod2_name=\"pod2\",pod2_namespace=\"{n}\",pod2_value=\"{l2}\",property=\"SELinuxLabel\"}} 1"
        )),
        "{series:?}"
    );

    // Across namespaces: the other pod is not named.
    pod(admin, o, "pod3", "shared", "s0:c1,c2", Some("Recursive"));
    // The same message about pod1 and pod2 is one Event, counted twice.
    let got = wait_events(admin, o, "pod3", 2);
    let cross = |prop: &str, v: &str| {
        format!("{prop}\"{v}\" conflicts with another pod that uses the same volume as this pod with a different {prop}. {TAIL}")
    };
    let want = [
        ev(
            "SELinuxChangePolicyConflict",
            cross("SELinuxChangePolicy", "Recursive"),
        ),
        ev("SELinuxLabelConflict", cross("SELinuxLabel", "")),
    ];
    assert_eq!(got, want);
    let got = wait_events(admin, n, "pod1", 3);
    assert!(
        got.contains(&ev(
            "SELinuxChangePolicyConflict",
            cross("SELinuxChangePolicy", "MountOption")
        )),
        "{got:?}"
    );
    assert!(
        got.contains(&ev("SELinuxLabelConflict", cross("SELinuxLabel", l1))),
        "{got:?}"
    );

    // pod3 goes: its conflicts leave the metric, the pair of the namespace stays.
    delete_pod_now(admin, o, "pod3").expect("delete pod3");
    eventually(LIMIT, "pod3's series gone", || {
        let s = conflict_series(&base);
        (s.len() == 2 && s.iter().all(|l| !l.contains("pod3"))).then_some(())
    });
    drop(made);
}

/// In-tree EBS volumes count as volumes of `ebs.csi.aws.com` (their plugin's migration is
/// complete): two volumes naming one disk (`aws://<zone>/vol-...` and `vol-...`) are one,
/// and conflict once that driver's CSIDriver says `seLinuxMount: true`.
fn scenario_migrated_volumes(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-selinux-m", &[PODS, PERSISTENTVOLUMECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let driver = "ebs.csi.aws.com";
    if admin.get(&CSIDRIVERS, None, driver).is_ok() {
        eprintln!("a CSIDriver {driver} exists already: not touching it");
        return;
    }
    let mut made = Made {
        admin: admin.clone(),
        pvs: Pvs {
            admin: admin.clone(),
            names: Vec::new(),
        },
        driver: driver.to_string(),
    };
    let disk = format!("vol-{}", &n[n.len() - 8..]);
    for (claim, id) in [
        ("a", disk.clone()),
        ("b", format!("aws://us-east-1a/{disk}")),
    ] {
        let src = json!({"awsElasticBlockStore": {"volumeID": id}});
        bound_claim_to(admin, n, claim, &format!("{n}-{claim}"), src, &mut made);
    }
    let _kcm = Kcm::start(
        t,
        "selinux-m",
        &["--controllers=selinux-warning-controller"],
    );
    pod(admin, n, "pod1", "a", "s0:c1", None);
    pod(admin, n, "pod2", "b", "s0:c2", None);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        events_about(admin, n, "pod2").is_empty(),
        "no CSIDriver: Recursive"
    );
    admin
        .create(
            &CSIDRIVERS,
            None,
            &json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": driver}, "spec": {"seLinuxMount": true}}),
        )
        .expect("create CSIDriver");
    // Both pods are looked at again; whichever comes first meets the other still cached as
    // Recursive without a label (more Events), and the second one the label conflict.
    for (p, v, other, ov) in [
        ("pod1", ":::s0:c1", "pod2", ":::s0:c2"),
        ("pod2", ":::s0:c2", "pod1", ":::s0:c1"),
    ] {
        let want = ev(
            "SELinuxLabelConflict",
            same_ns("SELinuxLabel", v, other, ov),
        );
        eventually(LIMIT, &format!("the label conflict on {p}"), || {
            events_about(admin, n, p).contains(&want).then_some(())
        });
    }
    drop(made);
}

crate::scenarios! {
    selinux_warning_conflicts => scenario_conflicts_are_told,
    selinux_warning_migrated_volumes => scenario_migrated_volumes,
}
