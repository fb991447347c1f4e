//! Which pods use which volume with which SELinux label and change policy, and the
//! conflicts between them (upstream's `selinuxwarning/cache`): a volume's pods, each pod's
//! volumes (for its removal), and the conflicts still standing per volume, which the
//! metric reports.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The policy of a pod whose volumes are relabelled by the container runtime.
pub const RECURSIVE: &str = "Recursive";
/// The policy of a pod whose volumes are mounted with `-o context=<label>`.
pub const MOUNT_OPTION: &str = "MountOption";

/// A pod's `namespace/name` key (upstream's `cache.ObjectName`).
pub type PodName = String;

/// The namespace and name of a pod key.
pub fn split(pod: &str) -> (&str, &str) {
    crate::obj::split_key(pod)
}

/// One side of a conflict between two pods sharing a volume: the Event goes to `pod`.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// `SELinuxChangePolicy` or `SELinuxLabel` (the metric's `property` label).
    pub property: &'static str,
    /// `SELinuxChangePolicyConflict` or `SELinuxLabelConflict`.
    pub reason: &'static str,
    pub pod: PodName,
    pub value: String,
    pub other_pod: PodName,
    pub other_value: String,
}

impl Conflict {
    fn policy(pod: &str, value: &str, other: &str, other_value: &str) -> Self {
        Conflict {
            property: "SELinuxChangePolicy",
            reason: "SELinuxChangePolicyConflict",
            pod: pod.to_string(),
            value: value.to_string(),
            other_pod: other.to_string(),
            other_value: other_value.to_string(),
        }
    }

    fn label(pod: &str, value: &str, other: &str, other_value: &str) -> Self {
        Conflict {
            property: "SELinuxLabel",
            reason: "SELinuxLabelConflict",
            ..Conflict::policy(pod, value, other, other_value)
        }
    }

    /// The Event's message. Within one namespace it names the other pod; across namespaces
    /// it names neither the other pod nor its namespace, and (as upstream writes it) has no
    /// space between the property and its value.
    pub fn message(&self) -> String {
        let (p, v, ov) = (self.property, &self.value, &self.other_value);
        let tail = "If both pods land on the same node, only one of them may access the volume.";
        let (ns, _) = split(&self.pod);
        let (other_ns, other) = split(&self.other_pod);
        if ns == other_ns {
            format!(
                "{p} \"{v}\" conflicts with pod {other} that uses the same volume as this pod with {p} \"{ov}\". {tail}"
            )
        } else {
            format!(
                "{p}\"{v}\" conflicts with another pod that uses the same volume as this pod with a different {p}. {tail}"
            )
        }
    }
}

/// A label's four parts (user, role, type, level); missing ones are empty. The level keeps
/// its own colons (`s0:c1,c2`).
pub fn parse_label(label: &str) -> [&str; 4] {
    let mut parts = [""; 4];
    if label.is_empty() {
        return parts;
    }
    for (i, p) in label.splitn(4, ':').enumerate() {
        parts[i] = p;
    }
    parts
}

/// Whether two labels (as `label::file_label` makes them) conflict: the level must always be
/// equal; user, role and type only when both are given, since a node fills in a missing one
/// from its own defaults.
pub fn labels_conflict(a: &str, b: &str) -> bool {
    let (a, b) = (parse_label(a), parse_label(b));
    for i in 0..4 {
        if a[i] == b[i] {
            continue;
        }
        if i == 3 {
            return true;
        }
        if a[i].is_empty() || b[i].is_empty() {
            continue;
        }
        return true;
    }
    false
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PodInfo {
    label: String,
    policy: String,
}

#[derive(Debug, Default)]
struct UsedVolume {
    csi_driver: String,
    pods: BTreeMap<String, PodInfo>,
}

/// The volumes of every pod the controller has synced.
#[derive(Debug, Default)]
pub struct VolumeCache {
    volumes: HashMap<String, UsedVolume>,
    pod_volumes: HashMap<String, BTreeSet<String>>,
    conflicts: HashMap<String, Vec<Conflict>>,
}

impl VolumeCache {
    /// `pod` uses `volume` (its unique name) with `label` and `policy`: the conflicts this
    /// causes, both sides of each. A pod already known with the same label and policy causes
    /// none (they were reported when it came), nor does the first pod of a volume.
    pub fn add_volume(
        &mut self,
        volume: &str,
        pod: &str,
        label: &str,
        policy: &str,
        csi_driver: &str,
    ) -> Vec<Conflict> {
        let info = PodInfo {
            label: label.to_string(),
            policy: policy.to_string(),
        };
        self.pod_volumes
            .entry(pod.to_string())
            .or_default()
            .insert(volume.to_string());
        let Some(used) = self.volumes.get_mut(volume) else {
            let mut pods = BTreeMap::new();
            pods.insert(pod.to_string(), info);
            let csi_driver = csi_driver.to_string();
            self.volumes
                .insert(volume.to_string(), UsedVolume { csi_driver, pods });
            return Vec::new();
        };
        if used.pods.get(pod) == Some(&info) {
            return Vec::new();
        }
        used.pods.insert(pod.to_string(), info);
        let mut found = Vec::new();
        for (other, o) in &used.pods {
            if o.policy != policy {
                found.push(Conflict::policy(pod, policy, other, &o.policy));
                found.push(Conflict::policy(other, &o.policy, pod, policy));
            }
            if labels_conflict(&o.label, label) {
                found.push(Conflict::label(pod, label, other, &o.label));
                found.push(Conflict::label(other, &o.label, pod, label));
            }
        }
        let standing = self.conflicts.entry(volume.to_string()).or_default();
        standing.retain(|c| c.pod != pod && c.other_pod != pod);
        standing.extend(found.iter().cloned());
        if standing.is_empty() {
            self.conflicts.remove(volume);
        }
        found
    }

    /// `pod` is gone or has ended: its volumes and conflicts go; a volume no pod uses goes.
    pub fn delete_pod(&mut self, pod: &str) {
        let Some(volumes) = self.pod_volumes.remove(pod) else {
            return;
        };
        for v in &volumes {
            if let Some(standing) = self.conflicts.get_mut(v) {
                standing.retain(|c| c.pod != pod && c.other_pod != pod);
                if standing.is_empty() {
                    self.conflicts.remove(v);
                }
            }
            if let Some(used) = self.volumes.get_mut(v) {
                used.pods.remove(pod);
                if used.pods.is_empty() {
                    self.volumes.remove(v);
                }
            }
        }
    }

    /// The pods using volumes of CSI driver `driver` (looked at again when its CSIDriver's
    /// `seLinuxMount` changes).
    pub fn pods_for_driver(&self, driver: &str) -> Vec<PodName> {
        let mut out: BTreeSet<String> = BTreeSet::new();
        for used in self.volumes.values().filter(|u| u.csi_driver == driver) {
            out.extend(used.pods.keys().cloned());
        }
        out.into_iter().collect()
    }

    /// The conflicts standing now, each side once, sorted.
    pub fn conflicts(&self) -> Vec<Conflict> {
        let order = |c: &Conflict| {
            (
                c.pod.clone(),
                c.other_pod.clone(),
                c.property,
                c.value.clone(),
                c.other_value.clone(),
            )
        };
        let mut all: Vec<&Conflict> = self.conflicts.values().flatten().collect();
        crate::sort::sort_by_cached_key(&mut all[..], |c| order(c));
        all.dedup();
        all.into_iter().cloned().collect()
    }

    /// How many volumes and pods are known (for tests and logs).
    pub fn sizes(&self) -> (usize, usize) {
        (self.volumes.len(), self.pod_volumes.len())
    }
}
