use super::cache::{MOUNT_OPTION, RECURSIVE};
use super::*;
use crate::controllers::testing::Harness;
use serde_json::json;

const NS: &str = "ns1";

fn pod_with(name: &str, level: Option<&str>, policy: Option<&str>, volumes: Value) -> Value {
    let mut sc = json!({});
    if let Some(l) = level {
        sc["seLinuxOptions"] = json!({"level": l});
    }
    if let Some(p) = policy {
        sc["seLinuxChangePolicy"] = json!(p);
    }
    let mounts: Vec<Value> = volumes
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| json!({"name": v["name"], "mountPath": "/mnt"}))
        .collect();
    json!({"metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
            "resourceVersion": "1"},
        "spec": {"securityContext": sc, "volumes": volumes,
            "containers": [{"name": "c", "volumeMounts": mounts}]},
        "status": {"phase": "Pending"}})
}

fn claim_vol(claim: &str) -> Value {
    json!([{"name": "vol1", "persistentVolumeClaim": {"claimName": claim}}])
}

fn pod(name: &str, level: &str) -> Value {
    pod_with(name, Some(level), None, claim_vol("pvc1"))
}

fn pvc(name: &str, pv: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}")},
        "spec": {"volumeName": pv}, "status": {"phase": "Bound"}})
}

fn pv(name: &str, claim: &str) -> Value {
    json!({"metadata": {"name": name},
        "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": name},
            "claimRef": {"namespace": NS, "name": claim, "uid": format!("uid-{claim}")}}})
}

fn driver(mount: Option<bool>) -> Value {
    let mut d = json!({"metadata": {"name": "ebs.csi.aws.com"}, "spec": {}});
    if let Some(m) = mount {
        d["spec"]["seLinuxMount"] = json!(m);
    }
    d
}

/// A harness with the claim `pvc1` bound to the CSI volume `pv1` and its driver.
fn harness(mount: Option<bool>) -> Harness<SELinuxWarning> {
    let mut h = Harness::new(SELinuxWarning::new(true));
    h.add(CSIDRIVERS, driver(mount));
    h.add(PERSISTENTVOLUMECLAIMS, pvc("pvc1", "pv1"));
    h.add(PERSISTENTVOLUMES, pv("pv1", "pvc1"));
    h.take_queued();
    h
}

/// The Events of a sync: (involved pod, type, reason, message).
fn events(h: &Harness<SELinuxWarning>, key: &str) -> Vec<(String, String, String, String)> {
    h.outcome(key)
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Event(e) => Some((
                e.involved.name.clone(),
                format!("{:?}", e.event_type),
                e.reason.clone(),
                e.message.clone(),
            )),
            _ => None,
        })
        .collect()
}

const TAIL: &str = "If both pods land on the same node, only one of them may access the volume.";

#[test]
fn labels_from_options_and_their_conflicts() {
    assert_eq!(volume::file_label(&json!(null)), "");
    assert_eq!(volume::file_label(&json!({})), "");
    let all = json!({"user": "u", "role": "r", "type": "t", "level": "s0:c1,c2"});
    assert_eq!(volume::file_label(&all), "u:r:t:s0:c1,c2");
    assert_eq!(
        volume::file_label(&json!({"user": "u", "type": "t"})),
        "u::t:"
    );
    assert_eq!(volume::file_label(&json!({"level": "s0"})), ":::s0");
    assert_eq!(parse_label("a:b:c:s0:c1,c2"), ["a", "b", "c", "s0:c1,c2"]);
    assert_eq!(parse_label("a:b"), ["a", "b", "", ""]);
    for (a, b, conflict) in [
        ("", "", false),
        ("", "system_u:system_r:container_t", false),
        ("", "system_u:system_r:container_t:s0:c1,c2", true),
        (":::", "system_u:system_r:container_t", false),
        ("system_u:system_r:container_t:", "system_u:system_r", false),
        (
            "system_u:system_r:conflict_t:",
            "system_u:system_r:container_t",
            true,
        ),
        ("::conflict_t", "::container_t", true),
        ("system_u::container_t", ":system_r::", false),
        (
            ":::s0:c1,c2",
            "system_u:system_r:container_t:s0:c1,c2",
            false,
        ),
        (
            ":::s0:c98,c99",
            "system_u:system_r:container_t:s0:c1,c2",
            true,
        ),
        ("a:b:c:s0", "a:b:c:", true),
    ] {
        assert_eq!(labels_conflict(a, b), conflict, "{a:?} {b:?}");
        assert_eq!(labels_conflict(b, a), conflict, "{b:?} {a:?}");
    }
}

#[test]
fn effective_labels_per_mounted_volume() {
    let p = json!({"spec": {"securityContext": {"seLinuxOptions": {"level": "s0:c1"}},
        "initContainers": [{"volumeMounts": [{"name": "a"}]}],
        "containers": [
            {"volumeMounts": [{"name": "a"}, {"name": "b"}]},
            {"securityContext": {"seLinuxOptions": {"type": "t"}}, "volumeMounts": [{"name": "b"}]},
        ],
        "ephemeralContainers": [{"securityContext": {}, "volumeMounts": [{"name": "c"}]}]}});
    let m = volume::mount_labels(&p);
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(m["a"], set(&[":::s0:c1"]));
    // A container's own options replace the pod's whole.
    assert_eq!(m["b"], set(&[":::s0:c1", "::t:"]));
    assert_eq!(m["c"], set(&[":::s0:c1"]));
    // No options anywhere: mounted, without labels.
    let p = json!({"spec": {"containers": [{"volumeMounts": [{"name": "a"}]}]}});
    assert_eq!(volume::mount_labels(&p)["a"], set(&[]));
}

#[test]
fn label_and_policy_follow_the_plugin_and_the_pod() {
    let p = |policy: Option<&str>| {
        let mut p = json!({"spec": {"securityContext": {}}});
        if let Some(x) = policy {
            p["spec"]["securityContext"]["seLinuxChangePolicy"] = json!(x);
        }
        p
    };
    let lp = |pod: &Value, l: Option<&str>, s: bool, g: bool| {
        let (a, b) = volume::label_and_policy(pod, l, s, g);
        (a, b)
    };
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        lp(&p(None), Some(":::s0"), true, true),
        s(":::s0", MOUNT_OPTION)
    );
    assert_eq!(
        lp(&p(Some("Recursive")), Some(":::s0"), true, true),
        s("", RECURSIVE)
    );
    // The plugin cannot mount with a context; no label; the gate off.
    assert_eq!(lp(&p(None), Some(":::s0"), false, true), s("", RECURSIVE));
    assert_eq!(lp(&p(None), None, true, true), s("", RECURSIVE));
    assert_eq!(lp(&p(None), Some(":::s0"), true, false), s("", RECURSIVE));
    assert_eq!(
        lp(&p(Some("MountOption")), Some("x"), true, true),
        s("x", MOUNT_OPTION)
    );
}

#[test]
fn plugins_and_their_unique_names() {
    let yes = |_: &str| true;
    let p = volume::plugin_of(&json!({"hostPath": {"path": "/d"}}), false, yes).unwrap();
    assert_eq!(
        (p.unique, p.supports_mount),
        (Ok("kubernetes.io/host-path//d".into()), false)
    );
    let p = volume::plugin_of(&json!({"nfs": {"server": "s", "path": "/e"}}), true, yes).unwrap();
    assert_eq!(p.unique, Ok("kubernetes.io/nfs/s//e".into()));
    let fc = json!({"fc": {"targetWWNs": ["a", "b"], "lun": 2}});
    let p = volume::plugin_of(&fc, true, yes).unwrap();
    assert_eq!(
        (p.unique, p.supports_mount),
        (Ok("kubernetes.io/fc/[a b]:2".into()), true)
    );
    let p = volume::plugin_of(&json!({"fc": {"wwids": ["w"]}}), true, yes).unwrap();
    assert_eq!(p.unique, Ok("kubernetes.io/fc/[w]".into()));
    assert!(volume::plugin_of(&json!({"fc": {}}), true, yes)
        .unwrap()
        .unique
        .is_err());
    let i = json!({"iscsi": {"targetPortal": "1.2.3.4:3260", "iqn": "iqn.x", "lun": 0}});
    let p = volume::plugin_of(&i, true, yes).unwrap();
    assert_eq!(
        p.unique,
        Ok("kubernetes.io/iscsi/1.2.3.4:3260:iqn.x:0".into())
    );
    let c = json!({"csi": {"driver": "d", "volumeHandle": "h"}});
    let p = volume::plugin_of(&c, true, |d| d == "d").unwrap();
    assert_eq!(
        (p.unique, p.supports_mount, p.csi_driver.as_str()),
        (Ok("kubernetes.io/csi/d^h".into()), true, "d")
    );
    assert!(
        volume::plugin_of(&c, false, yes).unwrap().unique.is_err(),
        "inline CSI"
    );
    assert!(volume::plugin_of(&json!({"emptyDir": {}}), false, yes).is_none());
}

#[test]
fn the_cache_reports_both_sides_of_each_conflict() {
    let mut c = VolumeCache::default();
    let (a, b, x) = (
        "ns1/a".to_string(),
        "ns1/b".to_string(),
        "other/x".to_string(),
    );
    assert!(
        c.add_volume("v", &a, ":::s0:c1", MOUNT_OPTION, "d")
            .is_empty(),
        "new volume"
    );
    assert!(
        c.add_volume("v", &b, ":::s0:c1", MOUNT_OPTION, "d")
            .is_empty(),
        "same label"
    );
    assert!(
        c.add_volume("v", &b, ":::s0:c1", MOUNT_OPTION, "d")
            .is_empty(),
        "nothing new"
    );
    let found = c.add_volume("v", &x, ":::s0:c9", RECURSIVE, "d");
    // Policy and label, with a and with b, both sides: 8.
    assert_eq!(found.len(), 8, "{found:?}");
    assert_eq!(c.conflicts().len(), 8);
    let msg = &found
        .iter()
        .find(|f| f.pod == x && f.property == "SELinuxLabel")
        .unwrap();
    assert_eq!(
        msg.message(),
        format!("SELinuxLabel\":::s0:c9\" conflicts with another pod that uses the same volume as this pod with a different SELinuxLabel. {TAIL}")
    );
    // Incomparable parts do not conflict; missing categories do.
    assert!(c
        .add_volume(
            "w",
            &a,
            "system_u:system_r:container_t:s0:c1",
            MOUNT_OPTION,
            ""
        )
        .is_empty());
    assert!(c
        .add_volume("w", &b, ":::s0:c1", MOUNT_OPTION, "")
        .is_empty());
    assert_eq!(
        c.add_volume(
            "w",
            &x,
            "system_u:system_r:container_t:s0",
            MOUNT_OPTION,
            ""
        )
        .len(),
        4
    );
    assert_eq!(
        c.pods_for_driver("d"),
        vec![a.clone(), b.clone(), x.clone()]
    );
    assert!(c.pods_for_driver("").len() == 3 && c.pods_for_driver("e").is_empty());
    // x is replaced with a label and policy that fit: its conflicts on v go.
    assert!(c
        .add_volume("v", &x, ":::s0:c1", MOUNT_OPTION, "d")
        .is_empty());
    assert_eq!(c.conflicts().len(), 4, "those on w stand");
    c.delete_pod(&a);
    assert_eq!(c.conflicts().len(), 2, "b and x on w");
    c.delete_pod(&x);
    c.delete_pod(&x);
    assert!(c.conflicts().is_empty());
    assert_eq!(c.sizes(), (2, 1));
    c.delete_pod(&b);
    assert_eq!(c.sizes(), (0, 0));
}

#[test]
fn conflicting_labels_tell_both_pods() {
    let mut h = harness(Some(true));
    h.add(PODS, pod("pod2", "s0:c98,c99"));
    h.add(PODS, pod("pod1", "s0:c1,c2"));
    assert_eq!(h.take_queued(), ["ns1/pod1", "ns1/pod2"]);
    assert!(
        events(&h, "ns1/pod2").is_empty(),
        "the first pod of a volume"
    );
    let got = events(&h, "ns1/pod1");
    let ev = |who: &str, v: &str, other: &str, ov: &str| {
        (who.to_string(), "Normal".to_string(), "SELinuxLabelConflict".to_string(),
            format!("SELinuxLabel \"{v}\" conflicts with pod {other} that uses the same volume as this pod with SELinuxLabel \"{ov}\". {TAIL}"))
    };
    assert_eq!(
        got,
        [
            ev("pod1", ":::s0:c1,c2", "pod2", ":::s0:c98,c99"),
            ev("pod2", ":::s0:c98,c99", "pod1", ":::s0:c1,c2"),
        ]
    );
    assert!(events(&h, "ns1/pod1").is_empty(), "already told");
    let fams = metrics::families(&lock(&h.ctrl.labels));
    assert_eq!(fams[0].name, metrics::CONFLICT);
    assert_eq!(fams[0].samples.len(), 2);
    // pod1 ends: it leaves the cache, and the metric goes.
    let mut done = pod("pod1", "s0:c1,c2");
    done["status"]["phase"] = json!("Succeeded");
    done["metadata"]["resourceVersion"] = json!("2");
    h.update(PODS, done.clone());
    assert_eq!(h.take_queued(), ["ns1/pod1"]);
    h.update(PODS, done);
    assert!(h.take_queued().is_empty(), "ended before");
    assert!(events(&h, "ns1/pod1").is_empty());
    assert!(h.ctrl.conflicts().is_empty(), "{:?}", h.ctrl.conflicts());
    assert!(metrics::families(&lock(&h.ctrl.labels)).is_empty());
}

#[test]
fn policies_conflict_and_recursive_pods_have_no_label() {
    let mut h = harness(Some(true));
    h.add(
        PODS,
        pod_with(
            "pod1",
            Some("s0:c1,c2"),
            Some("Recursive"),
            claim_vol("pvc1"),
        ),
    );
    h.add(
        PODS,
        pod_with("pod2", Some("s0:c1,c2"), None, claim_vol("pvc1")),
    );
    assert!(events(&h, "ns1/pod1").is_empty());
    let got = events(&h, "ns1/pod2");
    // Recursive: no mount label, which conflicts with the other's level as well.
    let reasons: Vec<&str> = got.iter().map(|e| e.2.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "SELinuxChangePolicyConflict",
            "SELinuxChangePolicyConflict",
            "SELinuxLabelConflict",
            "SELinuxLabelConflict"
        ]
    );
    assert_eq!(got[0].0, "pod2");
    assert_eq!(
        got[0].3,
        format!("SELinuxChangePolicy \"MountOption\" conflicts with pod pod1 that uses the same volume as this pod with SELinuxChangePolicy \"Recursive\". {TAIL}")
    );
    // Two Recursive pods without labels never conflict.
    h.add(
        PODS,
        pod_with("pod3", None, Some("Recursive"), claim_vol("pvc1")),
    );
    let got = events(&h, "ns1/pod3");
    assert!(
        got.iter().all(|e| e.0 == "pod3" || e.0 == "pod2"),
        "{got:?}"
    );
    assert!(!got.iter().any(|e| e.3.contains("pod1")), "{got:?}");
}

#[test]
fn without_selinux_mount_every_pod_is_recursive() {
    for mount in [None, Some(false)] {
        let mut h = harness(mount);
        h.add(PODS, pod("pod1", "s0:c1,c2"));
        h.add(PODS, pod("pod2", "s0:c98,c99"));
        assert!(events(&h, "ns1/pod1").is_empty());
        assert!(events(&h, "ns1/pod2").is_empty(), "{mount:?}");
    }
    // The driver turns seLinuxMount on: the pods using it are queued, and now conflict.
    let mut h = harness(Some(false));
    h.add(PODS, pod("pod1", "s0:c1,c2"));
    h.add(PODS, pod("pod2", "s0:c98,c99"));
    h.take_queued();
    assert!(events(&h, "ns1/pod1").is_empty() && events(&h, "ns1/pod2").is_empty());
    h.update(CSIDRIVERS, driver(Some(false)));
    assert!(h.take_queued().is_empty(), "unchanged");
    h.update(CSIDRIVERS, driver(Some(true)));
    assert_eq!(h.take_queued(), ["ns1/pod1", "ns1/pod2"]);
    // pod1 now mounts with its label, against pod2 still cached as Recursive: 4 Events;
    // then pod2 with its own label: only the labels differ.
    assert_eq!(events(&h, "ns1/pod1").len(), 4);
    assert_eq!(events(&h, "ns1/pod2").len(), 2);
    h.delete(CSIDRIVERS, driver(Some(true)));
    assert_eq!(h.take_queued(), ["ns1/pod1", "ns1/pod2"]);
}

#[test]
fn unbound_claims_retry_and_binding_queues_the_pods() {
    let mut h = Harness::new(SELinuxWarning::new(true));
    h.add(PODS, pod("pod1", "s0:c1"));
    h.take_queued();
    let o = h.outcome("ns1/pod1");
    assert!(
        o.retry_quietly
            .as_deref()
            .is_some_and(|w| w.contains("failed to find PVC")),
        "{o:?}"
    );
    let mut c = pvc("pvc1", "");
    c["status"]["phase"] = json!("Pending");
    h.add(PERSISTENTVOLUMECLAIMS, c);
    assert!(h.take_queued().is_empty(), "unbound");
    let o = h.outcome("ns1/pod1");
    assert!(
        o.retry_quietly
            .as_deref()
            .is_some_and(|w| w.contains("non-bound phase")),
        "{o:?}"
    );
    h.update(PERSISTENTVOLUMECLAIMS, pvc("pvc1", "pv1"));
    assert_eq!(h.take_queued(), ["ns1/pod1"]);
    h.update(PERSISTENTVOLUMECLAIMS, pvc("pvc1", "pv1"));
    assert!(h.take_queued().is_empty(), "same volume");
    let mut v = pv("pv1", "pvc1");
    v["spec"]["claimRef"]["uid"] = json!("");
    h.add(PERSISTENTVOLUMES, v);
    assert!(h.take_queued().is_empty(), "incomplete binding");
    h.update(PERSISTENTVOLUMES, pv("pv1", "pvc1"));
    assert_eq!(h.take_queued(), ["ns1/pod1"]);
    assert_eq!(h.outcome("ns1/pod1"), Outcome::none());
    h.delete(PODS, pod("pod1", "s0:c1"));
    assert_eq!(h.take_queued(), ["ns1/pod1"]);
    assert_eq!(h.outcome("ns1/pod1"), Outcome::none());
    assert_eq!(lock(&h.ctrl.labels).sizes(), (0, 0));
}

#[test]
fn inline_volumes_and_two_labels_in_one_pod() {
    let mut h = Harness::new(SELinuxWarning::new(true));
    let iscsi = json!([{"name": "vol1", "iscsi": {"targetPortal": "p", "iqn": "q", "lun": 1}},
        {"name": "scratch", "emptyDir": {}}]);
    h.add(PODS, pod_with("pod1", Some("s0:c1"), None, iscsi.clone()));
    h.add(PODS, pod_with("pod2", Some("s0:c2"), None, iscsi));
    assert!(events(&h, "ns1/pod1").is_empty());
    assert_eq!(
        events(&h, "ns1/pod2").len(),
        2,
        "iSCSI mounts with a context"
    );
    let mut p = pod_with(
        "pod3",
        Some("s0:c3"),
        None,
        json!([{"name": "scratch", "emptyDir": {}}]),
    );
    p["spec"]["containers"].as_array_mut().unwrap().push(
        json!({"name": "d", "securityContext": {"seLinuxOptions": {"level": "s0:c4"}},
            "volumeMounts": [{"name": "scratch"}]}),
    );
    h.add(PODS, p);
    let o = h.outcome("ns1/pod3");
    assert!(o.retry_quietly.is_some());
    assert_eq!(
        events(&h, "ns1/pod3"),
        [(
            "pod3".to_string(),
            "Warning".to_string(),
            "MultipleSELinuxLabels".to_string(),
            "Volume \"scratch\" is mounted twice with different SELinux labels inside this pod"
                .to_string()
        )]
    );
    // An inline CSI volume cannot be named: retried.
    let csi = json!([{"name": "c", "csi": {"driver": "d"}}]);
    h.add(PODS, pod_with("pod4", Some("s0:c3"), None, csi));
    let o = h.outcome("ns1/pod4");
    assert!(
        o.retry_quietly
            .as_deref()
            .is_some_and(|w| w.contains("unique volume name")),
        "{o:?}"
    );
}

#[test]
fn ephemeral_claims_must_belong_to_the_pod() {
    let mut h = harness(Some(true));
    let vols = json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]);
    h.add(PODS, pod_with("pod1", Some("s0:c1"), None, vols));
    h.take_queued();
    let mut c = pvc("pod1-scratch", "pv2");
    h.add(PERSISTENTVOLUMECLAIMS, c.clone());
    assert_eq!(h.take_queued(), ["ns1/pod1"], "a bound claim of the pod's");
    let o = h.outcome("ns1/pod1");
    assert!(
        o.retry_quietly
            .as_deref()
            .is_some_and(|w| w.contains("not owner")),
        "{o:?}"
    );
    c["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "pod1",
        "uid": "uid-pod1", "controller": true}]);
    h.update(PERSISTENTVOLUMECLAIMS, c);
    h.add(PERSISTENTVOLUMES, pv("pv2", "pod1-scratch"));
    assert_eq!(h.take_queued(), ["ns1/pod1"]);
    assert_eq!(h.outcome("ns1/pod1"), Outcome::none());
    assert_eq!(lock(&h.ctrl.labels).sizes(), (1, 1));
}

#[test]
fn migrated_in_tree_volumes_are_their_csi_drivers_volumes() {
    let mut h = harness(Some(true));
    // Two claims bound to two in-tree EBS volumes naming one disk, the CSIDriver of
    // ebs.csi.aws.com saying seLinuxMount: true.
    for (claim, vol, id) in [
        ("a", "pva", "vol-1"),
        ("b", "pvb", "aws://us-east-1a/vol-1"),
    ] {
        h.add(PERSISTENTVOLUMECLAIMS, pvc(claim, vol));
        let mut v = pv(vol, claim);
        v["spec"]["csi"] = Value::Null;
        v["spec"]["awsElasticBlockStore"] = json!({"volumeID": id});
        h.add(PERSISTENTVOLUMES, v);
    }
    h.add(PODS, pod_with("pod1", Some("s0:c1"), None, claim_vol("a")));
    h.add(PODS, pod_with("pod2", Some("s0:c2"), None, claim_vol("b")));
    assert!(events(&h, "ns1/pod1").is_empty());
    assert_eq!(events(&h, "ns1/pod2").len(), 2);
    assert_eq!(
        lock(&h.ctrl.labels).pods_for_driver("ebs.csi.aws.com"),
        ["ns1/pod1", "ns1/pod2"]
    );
    // A source that does not translate is an error, retried.
    let vols = json!([{"name": "vol1", "awsElasticBlockStore": {"volumeID": "aws://z/x/y"}}]);
    h.add(PODS, pod_with("pod3", Some("s0:c2"), None, vols));
    let o = h.outcome("ns1/pod3");
    assert!(
        o.retry_quietly
            .as_deref()
            .is_some_and(|w| w.contains("CSI migration")),
        "{o:?}"
    );
}
