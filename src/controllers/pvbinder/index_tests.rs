//! The class-and-claim filing of [`VolumeIndex`] gives the answers of upstream's whole scan.

use super::index::{Summary, VolumeIndex, Wanted};
use serde_json::{json, Value};

/// Upstream's walk over every volume, as the index did it before volumes were filed: the
/// access-mode groups that offer the claim's modes, fewest modes first, and in each, by name,
/// a usable pre-bound volume at once or else the smallest Available one of the claim's class.
fn whole_scan(vols: &[Summary], names: &[String], w: &Wanted<'_>, delay: bool) -> Option<String> {
    let mut groups: Vec<u8> = vols.iter().map(|s| s.modes).collect();
    groups.sort();
    groups.dedup();
    groups.retain(|g| g & w.modes == w.modes);
    groups.sort_by_key(|g| g.count_ones());
    let mut order: Vec<usize> = (0..vols.len()).collect();
    order.sort_by(|a, b| names[*a].cmp(&names[*b]));
    for g in groups {
        let mut smallest: Option<(usize, i128)> = None;
        for &i in order.iter().filter(|&&i| vols[i].modes == g) {
            let s = &vols[i];
            if s.claim.is_some() && !s.bound_to(w.namespace, w.name, w.uid) {
                continue;
            }
            if s.capacity < w.request
                || s.volume_mode != w.volume_mode
                || s.vac != w.vac
                || s.deleting
            {
                continue;
            }
            if s.bound_to(w.namespace, w.name, w.uid) {
                return Some(names[i].clone());
            }
            if delay || s.phase != "Available" {
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
                smallest = Some((i, s.capacity));
            }
        }
        if let Some((i, _)) = smallest {
            return Some(names[i].clone());
        }
    }
    None
}

const MODE_SETS: [&[&str]; 5] = [
    &["ReadWriteOnce"],
    &["ReadWriteMany"],
    &["ReadWriteOnce", "ReadOnlyMany"],
    &["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany"],
    &["ReadWriteOncePod"],
];
const CLASSES: [&str; 3] = ["", "gold", "silver"];
const CLAIMS: [&str; 3] = ["a", "b", "c"];

/// A small deterministic generator (xorshift) so every run walks the same cases.
struct Rng(u64);

impl Rng {
    fn pick(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn volume(r: &mut Rng, name: &str) -> Value {
    let phase = ["Available", "Available", "Pending", "Bound"][r.pick(4)];
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": format!("{}Gi", 1 + r.pick(4))},
                 "accessModes": MODE_SETS[r.pick(MODE_SETS.len())],
                 "storageClassName": CLASSES[r.pick(CLASSES.len())],
                 "volumeMode": if r.pick(6) == 0 { "Block" } else { "Filesystem" }},
        "status": {"phase": phase}});
    if r.pick(3) == 0 {
        let claim = CLAIMS[r.pick(CLAIMS.len())];
        let uid = ["", "uid-a", "uid-b", "other"][r.pick(4)];
        v["spec"]["claimRef"] = json!({"namespace": "ns", "name": claim, "uid": uid});
    }
    if r.pick(5) == 0 {
        v["spec"]["volumeAttributesClassName"] = ["fast-io", "slow-io"][r.pick(2)].into();
    }
    if r.pick(8) == 0 {
        v["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z".into();
    }
    if r.pick(2) == 0 {
        let tier = ["fast", "slow"][r.pick(2)];
        v["metadata"]["labels"] = json!({ "tier": tier });
    }
    v
}

fn claim(r: &mut Rng) -> Value {
    let name = CLAIMS[r.pick(CLAIMS.len())];
    let mut c = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": {"resources": {"requests": {"storage": format!("{}Gi", 1 + r.pick(4))}},
                 "accessModes": MODE_SETS[r.pick(3)],
                 "storageClassName": CLASSES[r.pick(CLASSES.len())],
                 "volumeMode": if r.pick(6) == 0 { "Block" } else { "Filesystem" }}});
    if r.pick(6) == 0 {
        c["spec"]["volumeAttributesClassName"] = "fast-io".into();
    }
    if r.pick(4) == 0 {
        c["spec"]["selector"] = json!({"matchLabels": {"tier": "fast"}});
    }
    c
}

#[test]
fn filed_volumes_give_the_whole_scans_answer() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let mut matched = 0;
    for round in 0..400 {
        let index = VolumeIndex::default();
        let mut pvs: Vec<Value> = (0..1 + r.pick(24))
            .map(|i| volume(&mut r, &format!("pv-{:02}", (i * 7 + round) % 31)))
            .collect();
        // Later versions of some volumes replace earlier ones, moving them between shelves.
        for _ in 0..r.pick(6) {
            let i = r.pick(pvs.len());
            let name = crate::obj::name(&pvs[i]).to_string();
            pvs.push(volume(&mut r, &name));
        }
        let mut latest: std::collections::BTreeMap<String, Value> = Default::default();
        for pv in &pvs {
            index.set(pv);
            latest.insert(crate::obj::name(pv).to_string(), pv.clone());
        }
        if r.pick(3) == 0 {
            let gone = latest.keys().next().cloned().unwrap_or_default();
            index.remove(&gone);
            latest.remove(&gone);
        }
        let names: Vec<String> = latest.keys().cloned().collect();
        let sums: Vec<Summary> = latest.values().map(Summary::of).collect();
        for _ in 0..6 {
            let c = claim(&mut r);
            let w = Wanted::of(&c);
            for delay in [false, true] {
                let want = whole_scan(&sums, &names, &w, delay);
                matched += usize::from(want.is_some());
                assert_eq!(
                    index.best_match(&w, delay),
                    want,
                    "round {round}: {c} over {pvs:?}"
                );
            }
        }
    }
    // The cases reach both answers, not only "no volume".
    assert!(matched > 300, "{matched}");
}

fn pv(name: &str, gi: u32, class: &str, modes: &[&str]) -> Value {
    json!({"metadata": {"name": name},
           "spec": {"capacity": {"storage": format!("{gi}Gi")}, "accessModes": modes,
                    "storageClassName": class, "volumeMode": "Filesystem"},
           "status": {"phase": "Available"}})
}

fn pvc(class: &str, gi: u32) -> Value {
    json!({"metadata": {"name": "a", "namespace": "ns", "uid": "uid-a"},
           "spec": {"resources": {"requests": {"storage": format!("{gi}Gi")}},
                    "accessModes": ["ReadWriteOnce"], "storageClassName": class,
                    "volumeMode": "Filesystem"}})
}

#[test]
fn a_claim_takes_the_smallest_of_its_class_in_the_fewest_modes_group() {
    let index = VolumeIndex::default();
    index.set(&pv("big", 5, "gold", &["ReadWriteOnce"]));
    index.set(&pv("small-other-class", 1, "silver", &["ReadWriteOnce"]));
    index.set(&pv(
        "small-two-modes",
        1,
        "gold",
        &["ReadWriteOnce", "ReadOnlyMany"],
    ));
    index.set(&pv("b-mid", 3, "gold", &["ReadWriteOnce"]));
    index.set(&pv("a-mid", 3, "gold", &["ReadWriteOnce"]));
    let c = pvc("gold", 2);
    // One-mode volumes are tried before two-mode ones; of equal sizes the first by name.
    assert_eq!(
        index.best_match(&Wanted::of(&c), false).as_deref(),
        Some("a-mid")
    );
    index.remove("a-mid");
    index.remove("b-mid");
    index.remove("big");
    // 1Gi does not fit a 2Gi claim, nor does a volume of another class.
    assert_eq!(index.best_match(&Wanted::of(&c), false), None);
    index.set(&pv(
        "small-two-modes",
        2,
        "gold",
        &["ReadWriteOnce", "ReadOnlyMany"],
    ));
    assert_eq!(
        index.best_match(&Wanted::of(&c), false).as_deref(),
        Some("small-two-modes")
    );
    // Waiting for the first consumer: only a pre-bound volume may be taken.
    assert_eq!(index.best_match(&Wanted::of(&c), true), None);
}

#[test]
fn a_volume_pre_bound_to_the_claim_wins_whatever_its_class_and_moves_when_released() {
    let index = VolumeIndex::default();
    index.set(&pv("fits", 2, "gold", &["ReadWriteOnce"]));
    let mut pre = pv("pre", 9, "other", &["ReadWriteOnce"]);
    pre["spec"]["claimRef"] = json!({"namespace": "ns", "name": "a"});
    pre["status"]["phase"] = "Pending".into();
    index.set(&pre);
    let c = pvc("gold", 2);
    assert_eq!(
        index.best_match(&Wanted::of(&c), true).as_deref(),
        Some("pre")
    );
    assert_eq!(
        index.best_match(&Wanted::of(&c), false).as_deref(),
        Some("pre")
    );
    // Bound to another claim's UID: neither pre-bound nor free.
    pre["spec"]["claimRef"]["uid"] = "someone-else".into();
    index.set(&pre);
    assert_eq!(
        index.best_match(&Wanted::of(&c), false).as_deref(),
        Some("fits")
    );
    // Released into the claim's class: a free volume like the others, the smaller one wins.
    pre["spec"]["claimRef"] = Value::Null;
    pre["spec"]["storageClassName"] = "gold".into();
    pre["spec"]["capacity"]["storage"] = "2Gi".into();
    pre["status"]["phase"] = "Available".into();
    index.set(&pre);
    index.remove("fits");
    assert_eq!(
        index.best_match(&Wanted::of(&c), false).as_deref(),
        Some("pre")
    );
    index.remove("pre");
    assert_eq!(index.best_match(&Wanted::of(&c), false), None);
}
