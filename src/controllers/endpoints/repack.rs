//! Upstream's canonical layout of Endpoints subsets (`endpoints.RepackSubsets` and
//! `SortSubsets`) and the 1000-address cap (`truncateEndpoints`).
//!
//! Repacking maps every port to the addresses that offer it (an address is one IP and target
//! UID; not ready on any subset for a port makes it not ready for that port), groups the
//! ports offered by the same addresses with the same readiness into one subset, sorts each
//! subset's addresses by IP then target UID and its ports by the MD5 of their Go dump, and the
//! subsets by the MD5 of theirs ([`super::gohash`]): the order upstream writes.

use super::gohash;
use super::subsets::{Address, Port, Subset};
use std::collections::{BTreeMap, HashMap};

/// Addresses an Endpoints object holds at most (upstream's `maxCapacity`).
pub const MAX_CAPACITY: usize = 1000;

/// Ports standing for "no port" (a headless Service without ports): upstream's sentinel.
fn sentinel() -> Port {
    Port {
        port: -1,
        ..Port::default()
    }
}

/// `LessEndpointAddress`: by IP bytes, then target UID (none first).
fn less(a: &Address, b: &Address) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    a.ip.as_bytes()
        .cmp(b.ip.as_bytes())
        .then_with(|| match (&a.target, &b.target) {
            (None, None) => Ordering::Equal,
            (Some(_), None) => Ordering::Greater,
            (None, Some(_)) => Ordering::Less,
            (Some(x), Some(y)) => x.uid.as_bytes().cmp(y.uid.as_bytes()),
        })
}

fn addr_key(a: &Address) -> (String, String) {
    (
        a.ip.clone(),
        a.target.as_ref().map(|t| t.uid.clone()).unwrap_or_default(),
    )
}

/// `RepackSubsets` followed by `SortSubsets`.
pub fn repack(subsets: &[Subset]) -> Vec<Subset> {
    // Every distinct address (first copy kept), and per port: address index -> ready.
    let mut addrs: Vec<Address> = Vec::new();
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    let mut by_port: BTreeMap<Port, BTreeMap<usize, bool>> = BTreeMap::new();
    let sentinel_only = [sentinel()];
    for sub in subsets {
        let ports: &[Port] = if sub.ports.is_empty() {
            &sentinel_only
        } else {
            &sub.ports
        };
        for port in ports {
            for (list, ready) in [(&sub.addresses, true), (&sub.not_ready, false)] {
                for a in list {
                    let i = *index.entry(addr_key(a)).or_insert_with(|| {
                        addrs.push(a.clone());
                        addrs.len() - 1
                    });
                    let set = by_port.entry(port.clone()).or_default();
                    // Not ready always trumps ready.
                    let e = set.entry(i).or_insert(ready);
                    if *e {
                        *e = ready;
                    }
                }
            }
        }
    }
    // Ports offered by the same addresses with the same readiness share a subset.
    let mut groups: BTreeMap<Vec<(usize, bool)>, Vec<Port>> = BTreeMap::new();
    for (port, set) in by_port {
        let key: Vec<(usize, bool)> = set.into_iter().collect();
        let ports = groups.entry(key).or_default();
        if port.port > 0 {
            ports.push(port);
        }
    }
    let mut out: Vec<Subset> = groups
        .into_iter()
        .map(|(members, ports)| {
            let mut sub = Subset {
                ports,
                ..Subset::default()
            };
            for (i, ready) in members {
                if ready {
                    sub.addresses.push(addrs[i].clone());
                } else {
                    sub.not_ready.push(addrs[i].clone());
                }
            }
            sub
        })
        .collect();
    sort_subsets(&mut out);
    out
}

/// `SortSubsets`: addresses by IP and UID, ports by hash, then subsets by hash.
pub fn sort_subsets(subsets: &mut [Subset]) {
    for s in subsets.iter_mut() {
        crate::sort::sort_by(&mut s.addresses[..], less);
        crate::sort::sort_by(&mut s.not_ready[..], less);
        crate::sort::sort_by_cached_key(&mut s.ports[..], gohash::port_hash);
    }
    crate::sort::sort_by_cached_key(&mut subsets[..], gohash::subset_hash);
}

/// `truncateEndpoints`: at most [`MAX_CAPACITY`] addresses, ready ones first, shared among
/// the subsets in proportion to what each holds (rounded up, so the last ones may get
/// fewer). True when anything was cut.
pub fn truncate(subsets: &mut [Subset]) -> bool {
    let ready: usize = subsets.iter().map(|s| s.addresses.len()).sum();
    let not_ready: usize = subsets.iter().map(|s| s.not_ready.len()).sum();
    if ready + not_ready <= MAX_CAPACITY {
        return false;
    }
    let truncate_ready = ready > MAX_CAPACITY;
    let (max, total) = if truncate_ready {
        (MAX_CAPACITY, ready)
    } else {
        (MAX_CAPACITY - ready, not_ready)
    };
    let mut room = max;
    for s in subsets.iter_mut() {
        let here = if truncate_ready {
            s.addresses.len()
        } else {
            s.not_ready.len()
        };
        let share = ((here as f64 / total as f64) * max as f64).ceil() as usize;
        let n = share.min(room);
        if truncate_ready {
            s.addresses.truncate(n);
            s.not_ready.clear();
            room -= s.addresses.len();
        } else {
            s.not_ready.truncate(n);
            room -= s.not_ready.len();
        }
    }
    true
}
