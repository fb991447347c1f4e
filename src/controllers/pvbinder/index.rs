//! The volumes a claim may bind to, as upstream's `persistentVolumeOrderedIndex` finds them:
//! volumes grouped by their access modes, the groups that offer every mode the claim asks
//! for tried from the fewest modes up, and in each the smallest volume that fits
//! (`FindMatchingVolume` without a node: capacity, volume mode, not being deleted, a volume
//! pre-bound to the claim first, then phase Available, the claim's selector, the class).
//!
//! The index keeps a small summary of each volume, updated from the watch and from the
//! answers of the controller's own writes, filed by class (volumes without a `claimRef`) or by
//! the claim a `claimRef` names, so a claim reads only the volumes it could take; a match is checked again against the cached
//! volume before it is bound, so a summary that is behind costs a retry, never a wrong bind.

use crate::controllers::kit::volume as kv;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
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
    /// `spec.volumeAttributesClassName` ("" for none).
    pub vac: String,
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
            vac: kv::attributes_class(pv).to_string(),
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

/// Where a volume's summary is filed: volumes without a `claimRef` under their class (a
/// claim only ever takes those of its own class), the others under the claim they name (only
/// that claim may take them, whatever their class).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Shelf {
    Class(String),
    Claim(String, String),
}

impl Shelf {
    fn of(s: &Summary) -> Shelf {
        match &s.claim {
            None => Shelf::Class(s.class.clone()),
            Some((ns, name, _)) => Shelf::Claim(ns.clone(), name.clone()),
        }
    }
}

#[derive(Default)]
struct Shelves {
    /// Each volume's shelf, by volume name.
    at: HashMap<String, Shelf>,
    /// The summaries on each shelf, by volume name (name order is upstream's list order).
    shelves: HashMap<Shelf, BTreeMap<String, Summary>>,
}

impl Shelves {
    fn insert(&mut self, name: String, s: Summary) {
        let shelf = Shelf::of(&s);
        if let Some(old) = self.at.get(&name) {
            if *old != shelf {
                let old = old.clone();
                self.take(&old, &name);
            }
        }
        self.at.insert(name.clone(), shelf.clone());
        self.shelves.entry(shelf).or_default().insert(name, s);
    }

    fn remove(&mut self, name: &str) {
        if let Some(shelf) = self.at.remove(name) {
            self.take(&shelf, name);
        }
    }

    fn take(&mut self, shelf: &Shelf, name: &str) {
        if let Some(m) = self.shelves.get_mut(shelf) {
            m.remove(name);
            if m.is_empty() {
                self.shelves.remove(shelf);
            }
        }
    }
}

/// The summaries of every volume, filed by class or by the claim they name.
#[derive(Default)]
pub struct VolumeIndex {
    volumes: Mutex<Shelves>,
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
    pub vac: &'a str,
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
            vac: kv::attributes_class(pvc),
            selector: sel.is_object().then_some(sel),
        }
    }
}

impl VolumeIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shelves> {
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
        if self.lock().at.len() == volumes.len() {
            return;
        }
        let mut all = Shelves::default();
        for v in volumes.list().iter() {
            all.insert(crate::obj::name(v).to_string(), Summary::of(v));
        }
        *self.lock() = all;
    }

    /// The best volume for the claim (upstream's `findBestMatchForClaim`), by name.
    ///
    /// Upstream walks the access-mode groups that offer all the claim asks for, fewest modes
    /// first (then in the order of [`MODES`] bits), and in each group every volume in name
    /// order: a usable volume pre-bound to the claim is taken at once, else the smallest
    /// Available one of the claim's class (the first of equal sizes). Only the claim's own
    /// shelves can hold either, so only they are read, with the same outcome.
    pub fn best_match(&self, w: &Wanted<'_>, delay_binding: bool) -> Option<String> {
        let vols = self.lock();
        // VolumeAttributesClass (GA in v1.34): both without one, or the same.
        let usable = |s: &Summary| {
            s.capacity >= w.request
                && s.volume_mode == w.volume_mode
                && s.vac == w.vac
                && !s.deleting
        };
        // Per access-mode group: the first usable volume pre-bound to the claim.
        let mut prebound: BTreeMap<u8, &String> = BTreeMap::new();
        let claim_shelf = Shelf::Claim(w.namespace.to_string(), w.name.to_string());
        for (name, s) in vols.shelves.get(&claim_shelf).into_iter().flatten() {
            if s.modes & w.modes == w.modes && s.bound_to(w.namespace, w.name, w.uid) && usable(s) {
                prebound.entry(s.modes).or_insert(name);
            }
        }
        // Per group: the smallest Available volume of the class the claim may take.
        let mut smallest: BTreeMap<u8, (&String, i128)> = BTreeMap::new();
        if !delay_binding {
            let class_shelf = Shelf::Class(w.class.to_string());
            let empty = serde_json::Map::new();
            for (name, s) in vols.shelves.get(&class_shelf).into_iter().flatten() {
                if s.modes & w.modes != w.modes || !usable(s) || s.phase != "Available" {
                    continue;
                }
                if smallest
                    .get(&s.modes)
                    .is_some_and(|&(_, q)| q <= s.capacity)
                {
                    continue;
                }
                if let Some(sel) = w.selector {
                    let labels = s.labels.as_ref().unwrap_or(&empty);
                    if !crate::obj::selector_matches_with(sel, |k| {
                        labels.get(k).and_then(Value::as_str)
                    }) {
                        continue;
                    }
                }
                smallest.insert(s.modes, (name, s.capacity));
            }
        }
        let mut groups: Vec<u8> = prebound.keys().chain(smallest.keys()).copied().collect();
        crate::sort::sort_by_key(&mut groups[..], |g| (g.count_ones(), *g));
        groups.dedup();
        groups.into_iter().find_map(|g| {
            prebound
                .get(&g)
                .map(|n| (*n).clone())
                .or_else(|| smallest.get(&g).map(|(n, _)| (*n).clone()))
        })
    }
}
