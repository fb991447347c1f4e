//! The volumes a claim may bind to, as upstream's `persistentVolumeOrderedIndex` finds them:
//! volumes grouped by their access modes, the groups that offer every mode the claim asks
//! for tried from the fewest modes up, and in each the smallest volume that fits
//! (`FindMatchingVolume` without a node: capacity, volume mode, not being deleted, a volume
//! pre-bound to the claim first, then phase Available, the claim's selector, the class).
//!
//! The index keeps a small summary of each volume, updated from the watch and from the
//! answers of the controller's own writes; a match is checked again against the cached
//! volume before it is bound, so a summary that is behind costs a retry, never a wrong bind.

use crate::controllers::kit::volume as kv;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// Access modes in upstream's canonical order (`GetAccessModesAsString`).
const MODES: [&str; 4] = [
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];

/// A volume's access modes as a bit set in [`MODES`] order (unknown modes are ignored).
pub fn mode_bits(modes: &[&str]) -> u8 {
    modes
        .iter()
        .filter_map(|m| MODES.iter().position(|k| k == m))
        .fold(0, |b, i| b | (1 << i))
}

/// What matching reads of one volume.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub modes: u8,
    pub capacity: i128,
    pub class: String,
    pub volume_mode: String,
    pub phase: String,
    /// `spec.claimRef` as (namespace, name, uid).
    pub claim: Option<(String, String, String)>,
    pub deleting: bool,
    /// Labels, kept only when the volume has any (claims with selectors read them).
    pub labels: Option<serde_json::Map<String, Value>>,
}

impl Summary {
    pub fn of(pv: &Value) -> Summary {
        let cr = &pv["spec"]["claimRef"];
        Summary {
            modes: mode_bits(&kv::access_modes(pv)),
            capacity: kv::capacity_bytes(pv),
            class: kv::volume_class(pv).to_string(),
            volume_mode: kv::volume_mode(pv).to_string(),
            phase: pv["status"]["phase"].as_str().unwrap_or("").to_string(),
            claim: cr.is_object().then(|| {
                let s = |k: &str| cr[k].as_str().unwrap_or("").to_string();
                (s("namespace"), s("name"), s("uid"))
            }),
            deleting: crate::obj::is_deleting(pv),
            labels: crate::obj::labels(pv).filter(|l| !l.is_empty()).cloned(),
        }
    }

    /// Upstream's `IsVolumeBoundToClaim`.
    pub fn bound_to(&self, ns: &str, name: &str, uid: &str) -> bool {
        match &self.claim {
            None => false,
            Some((cns, cname, cuid)) => {
                cns == ns && cname == name && (cuid.is_empty() || cuid == uid)
            }
        }
    }
}

/// The summaries of every volume, by name.
#[derive(Default)]
pub struct VolumeIndex {
    volumes: Mutex<BTreeMap<String, Summary>>,
}

/// What a claim asks for, as matching reads it.
pub struct Wanted<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub modes: u8,
    pub request: i128,
    pub class: &'a str,
    pub volume_mode: &'a str,
    pub selector: Option<&'a Value>,
}

impl<'a> Wanted<'a> {
    pub fn of(pvc: &'a Value) -> Wanted<'a> {
        let sel = &pvc["spec"]["selector"];
        Wanted {
            namespace: crate::obj::namespace(pvc),
            name: crate::obj::name(pvc),
            uid: crate::obj::uid(pvc),
            modes: mode_bits(&kv::access_modes(pvc)),
            request: kv::requested_bytes(pvc),
            class: kv::claim_class(pvc),
            volume_mode: kv::volume_mode(pvc),
            selector: sel.is_object().then_some(sel),
        }
    }
}

impl VolumeIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Summary>> {
        self.volumes.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set(&self, pv: &Value) {
        self.lock()
            .insert(crate::obj::name(pv).to_string(), Summary::of(pv));
    }

    pub fn remove(&self, name: &str) {
        self.lock().remove(name);
    }

    /// The summaries rebuilt from `volumes` when they do not count as many volumes (the
    /// watch handlers had not run for all of them yet, as at start-up).
    pub fn catch_up(&self, volumes: &crate::cache::Store) {
        if self.lock().len() == volumes.len() {
            return;
        }
        let all: BTreeMap<String, Summary> = volumes
            .list()
            .iter()
            .map(|v| (crate::obj::name(v).to_string(), Summary::of(v)))
            .collect();
        *self.lock() = all;
    }

    /// The best volume for the claim (upstream's `findBestMatchForClaim`), by name.
    pub fn best_match(&self, w: &Wanted<'_>, delay_binding: bool) -> Option<String> {
        let vols = self.lock();
        // The access-mode groups that offer all the claim asks for, fewest modes first.
        let mut groups: Vec<u8> = vols
            .values()
            .map(|s| s.modes)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|g| g & w.modes == w.modes)
            .collect();
        groups.sort_by_key(|g| g.count_ones());
        for g in groups {
            let mut smallest: Option<(&String, i128)> = None;
            for (name, s) in vols.iter().filter(|(_, s)| s.modes == g) {
                if s.claim.is_some() && !s.bound_to(w.namespace, w.name, w.uid) {
                    continue;
                }
                if s.capacity < w.request || s.volume_mode != w.volume_mode || s.deleting {
                    continue;
                }
                if s.bound_to(w.namespace, w.name, w.uid) {
                    return Some(name.clone());
                }
                if delay_binding || s.phase != "Available" {
                    continue;
                }
                if let Some(sel) = w.selector {
                    let empty = serde_json::Map::new();
                    let labels = s.labels.as_ref().unwrap_or(&empty);
                    if !crate::obj::selector_matches_with(sel, |k| {
                        labels.get(k).and_then(Value::as_str)
                    }) {
                        continue;
                    }
                }
                if s.class != w.class {
                    continue;
                }
                if smallest.is_none_or(|(_, q)| q > s.capacity) {
                    smallest = Some((name, s.capacity));
                }
            }
            if let Some((name, _)) = smallest {
                return Some(name.clone());
            }
        }
        None
    }
}
