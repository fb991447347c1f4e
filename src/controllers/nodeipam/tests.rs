use super::cidrset::{CidrSet, Net, SetError};
use super::params::Params;
use super::*;
use crate::config::Config;
use crate::controllers::testing::Harness;
use serde_json::{json, Value};

fn net(s: &str) -> Net {
    Net::parse(s).unwrap()
}

fn set(cluster: &str, mask: u8) -> CidrSet {
    CidrSet::new(net(cluster), mask).unwrap()
}

fn next(s: &mut CidrSet) -> String {
    s.allocate_next().unwrap().to_string()
}

#[test]
fn ipv4_hands_out_in_order_wraps_and_runs_out() {
    let mut s = set("127.123.234.0/28", 30);
    assert_eq!(s.max_cidrs(), 4);
    let got: Vec<String> = (0..4).map(|_| next(&mut s)).collect();
    assert_eq!(
        got,
        [
            "127.123.234.0/30",
            "127.123.234.4/30",
            "127.123.234.8/30",
            "127.123.234.12/30"
        ]
    );
    assert_eq!(s.allocate_next(), Err(SetError::NoneRemaining));
    assert_eq!(
        SetError::NoneRemaining.to_string(),
        "CIDR allocation failed; there are no remaining CIDRs left to allocate in the accepted range"
    );
    // Freed: the next one after the last handed out, wrapping (not the lowest free).
    s.release(&net("127.123.234.4/30")).unwrap();
    s.release(&net("127.123.234.8/30")).unwrap();
    assert_eq!(next(&mut s), "127.123.234.4/30");
    assert_eq!(next(&mut s), "127.123.234.8/30");
    s.release(&net("127.123.234.0/30")).unwrap();
    s.release(&net("127.123.234.12/30")).unwrap();
    assert_eq!(next(&mut s), "127.123.234.12/30");
    assert_eq!(next(&mut s), "127.123.234.0/30");
    assert_eq!(s.allocated(), 4);
}

#[test]
fn cluster_address_is_masked_and_node_bits_shift_into_place() {
    let mut s = set("10.244.3.7/16", 24);
    assert_eq!(next(&mut s), "10.244.0.0/24");
    assert_eq!(next(&mut s), "10.244.1.0/24");
    assert_eq!(s.block(255).to_string(), "10.244.255.0/24");
    // A node CIDR as big as the cluster: one CIDR.
    let mut one = set("192.168.0.0/24", 24);
    assert_eq!(next(&mut one), "192.168.0.0/24");
    assert!(one.allocate_next().is_err());
    // /32 nodes.
    let mut hosts = set("10.0.0.0/30", 32);
    let got: Vec<String> = (0..4).map(|_| next(&mut hosts)).collect();
    assert_eq!(got[3], "10.0.0.3/32");
}

#[test]
fn ipv6_blocks_across_the_64_bit_halves() {
    let mut s = set("2001:db8::/48", 64);
    assert_eq!(s.max_cidrs(), 65536);
    assert_eq!(next(&mut s), "2001:db8::/64");
    assert_eq!(next(&mut s), "2001:db8:0:1::/64");
    assert_eq!(s.block(65535).to_string(), "2001:db8:0:ffff::/64");
    // Node CIDRs longer than 64 bits, cluster shorter: the index spans both halves.
    let s = set("2001:db8:1234::/60", 72);
    assert_eq!(s.block(0x101).to_string(), "2001:db8:1234:1:100::/72");
    let s = set("fd00:10:244::/112", 120);
    assert_eq!(s.block(3).to_string(), "fd00:10:244::300/120");
    // More than 16 bits over the cluster mask: refused, as upstream.
    assert_eq!(
        CidrSet::new(net("2001:db8::/48"), 65).unwrap_err(),
        SetError::SubNetTooBig
    );
    assert_eq!(
        SetError::SubNetTooBig.to_string(),
        "New CIDR set failed; the node CIDR size is too big"
    );
    // IPv4 has no such limit.
    assert!(CidrSet::new(net("10.0.0.0/8"), 32).is_ok());
}

#[test]
fn occupy_and_release_ranges() {
    let mut s = set("10.0.0.0/16", 24);
    // A range of several node CIDRs.
    s.occupy(&net("10.0.16.0/20")).unwrap();
    assert_eq!(s.allocated(), 16);
    assert!(s.is_used(&net("10.0.31.0/24")));
    assert!(!s.is_used(&net("10.0.32.0/24")));
    // Smaller than a node CIDR: the node CIDR around it.
    s.occupy(&net("10.0.40.128/25")).unwrap();
    assert!(s.is_used(&net("10.0.40.0/24")));
    // Twice counts once.
    s.occupy(&net("10.0.40.0/24")).unwrap();
    assert_eq!(s.allocated(), 17);
    // Bigger than the cluster: all of it.
    let mut all = set("10.0.0.0/16", 24);
    all.occupy(&net("10.0.0.0/8")).unwrap();
    assert_eq!(all.allocated(), 256);
    assert!(all.allocate_next().is_err());
    all.release(&net("10.0.7.0/24")).unwrap();
    assert_eq!(next(&mut all), "10.0.7.0/24");
    // Releasing what is free changes nothing.
    s.release(&net("10.0.200.0/24")).unwrap();
    assert_eq!(s.allocated(), 17);
    // Outside the cluster, or the other family.
    let e = s.occupy(&net("10.1.0.0/24")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cidr 10.1.0.0/24 is out the range of cluster cidr 10.0.0.0/16"
    );
    assert!(s.occupy(&net("fd00::/64")).is_err());
    assert!(s.release(&net("10.1.0.0/24")).is_err());
    // Allocation skips what is occupied.
    let mut t = set("10.0.0.0/22", 24);
    t.occupy(&net("10.0.0.0/24")).unwrap();
    t.occupy(&net("10.0.2.0/24")).unwrap();
    assert_eq!(next(&mut t), "10.0.1.0/24");
    assert_eq!(next(&mut t), "10.0.3.0/24");
    assert!(t.allocate_next().is_err());
}

#[test]
fn ipv6_occupy() {
    let mut s = set("fd00:10:244::/56", 64);
    s.occupy(&net("fd00:10:244:10::/60")).unwrap();
    assert_eq!(s.allocated(), 16);
    assert!(s.is_used(&net("fd00:10:244:1f::/64")));
    assert!(s.occupy(&net("fd00:10:245::/64")).is_err());
    assert!(s.occupy(&net("10.0.0.0/8")).is_err());
}

fn cfg(flags: &[(&str, &str)]) -> Config {
    let mut c = Config::default();
    c.kube_cloud_shared.allocate_node_cidrs = true;
    for (k, v) in flags {
        match *k {
            "cluster-cidr" => {
                c.kube_cloud_shared.cluster_cidrs =
                    v.split(',').map(|p| p.parse().unwrap()).collect();
                c.given.insert("cluster-cidr", v.to_string());
            }
            "service" => {
                c.node_ipam.service_cluster_ip_ranges =
                    v.split(',').map(|p| p.parse().unwrap()).collect()
            }
            "mask" => c.node_ipam.node_cidr_mask_size = Some(v.parse().unwrap()),
            "mask4" => c.node_ipam.node_cidr_mask_size_ipv4 = Some(v.parse().unwrap()),
            "mask6" => c.node_ipam.node_cidr_mask_size_ipv6 = Some(v.parse().unwrap()),
            "type" => {
                c.given.insert("cidr-allocator-type", v.to_string());
            }
            _ => panic!("{k}"),
        }
    }
    c
}

fn params(flags: &[(&str, &str)]) -> std::result::Result<Option<Params>, String> {
    Params::from_config(&cfg(flags))
}

#[test]
fn configuration_checks_are_upstreams() {
    let mut off = cfg(&[("cluster-cidr", "10.244.0.0/16")]);
    off.kube_cloud_shared.allocate_node_cidrs = false;
    assert_eq!(Params::from_config(&off), Ok(None));
    let p = params(&[("cluster-cidr", "10.244.0.0/16")])
        .unwrap()
        .unwrap();
    assert_eq!(p.node_mask_sizes, [24]);
    let p = params(&[("cluster-cidr", "fd00::/48")]).unwrap().unwrap();
    assert_eq!(p.node_mask_sizes, [64]);
    let p = params(&[("cluster-cidr", "fd00::/48,10.0.0.0/8"), ("mask4", "20")])
        .unwrap()
        .unwrap();
    assert_eq!(p.node_mask_sizes, [64, 20]);
    let p = params(&[("cluster-cidr", "10.0.0.0/8"), ("mask", "26")])
        .unwrap()
        .unwrap();
    assert_eq!(p.node_mask_sizes, [26]);

    let err = |f: &[(&str, &str)]| params(f).unwrap_err();
    assert_eq!(err(&[]), "invalid CIDR[0]: <nil> (invalid CIDR address: )");
    assert_eq!(
        err(&[("cluster-cidr", "10.0.0.0/8,10.1.0.0/16")]),
        "len of ClusterCIDRs==2 and they are not configured as dual stack (at least one from each IPFamily"
    );
    assert_eq!(
        err(&[("cluster-cidr", "10.0.0.0/8,fd00::/48,10.1.0.0/16")]),
        "length of clusterCIDRs is:3 more than max allowed of 2"
    );
    assert_eq!(
        err(&[("cluster-cidr", "10.0.0.0/8,fd00::/48"), ("mask", "24")]),
        "usage of --node-cidr-mask-size is not allowed with dual-stack clusters"
    );
    assert!(err(&[("cluster-cidr", "10.0.0.0/8"), ("mask", "24"), ("mask4", "24")])
        .starts_with("usage of --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6 is not allowed if --node-cidr-mask-size is set"));
    assert_eq!(
        err(&[("cluster-cidr", "fd00::/48"), ("mask4", "24")]),
        "usage of --node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 cluster"
    );
    assert_eq!(
        err(&[("cluster-cidr", "10.0.0.0/8"), ("mask6", "64")]),
        "usage of --node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster"
    );
    // A node CIDR bigger than its cluster CIDR.
    assert_eq!(
        err(&[("cluster-cidr", "10.244.0.0/25")]),
        "Controller: Invalid --cluster-cidr, mask size of cluster CIDR must be less than or equal to --node-cidr-mask-size configured for CIDR family"
    );
    // Too many IPv6 node CIDRs for upstream's bitmap.
    assert_eq!(
        err(&[("cluster-cidr", "fd00::/32")]),
        "New CIDR set failed; the node CIDR size is too big"
    );
    assert_eq!(
        err(&[
            ("cluster-cidr", "10.0.0.0/8"),
            ("service", "10.0.0.0/16,10.1.0.0/16")
        ]),
        "serviceCIDR and secondaryServiceCIDR are not dualstack (from different IPfamiles)"
    );
    assert_eq!(
        err(&[("cluster-cidr", "10.0.0.0/8"), ("type", "CloudAllocator")]),
        "--cidr-allocator-type is set to 'CloudAllocator' but cloud provider is not configured"
    );
    assert_eq!(
        err(&[("cluster-cidr", "10.0.0.0/8"), ("type", "Bogus")]),
        "invalid CIDR allocator type: Bogus"
    );
}

fn node(name: &str, cidrs: &[&str]) -> Value {
    static RV: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let rv = RV
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        .to_string();
    let mut n =
        json!({"metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": rv}});
    if !cidrs.is_empty() {
        n["spec"] = json!({"podCIDR": cidrs[0], "podCIDRs": cidrs});
    }
    n
}

fn ctrl(flags: &[(&str, &str)]) -> NodeIpamController {
    NodeIpamController::new(&params(flags).unwrap().unwrap()).unwrap()
}

fn patched(h: &Harness<NodeIpamController>, key: &str) -> Vec<String> {
    let w = h.sync(key);
    assert_eq!(w.patches.len(), 1, "{key}: {:?}", w.patches);
    w.patches[0].2["spec"]["podCIDRs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// What the manager does after a patch went through: the answer, and the watch's event.
fn landed(h: &mut Harness<NodeIpamController>, key: &str, cidrs: &[String]) {
    let refs: Vec<&str> = cidrs.iter().map(String::as_str).collect();
    let a = patch(key, &refs.iter().map(|c| net(c)).collect::<Vec<_>>());
    let n = node(key, &refs);
    h.ctrl.applied(key, &a, Applied::Done(Some(&n)));
    h.update(NODES, n);
}

#[test]
fn nodes_get_the_next_cidr_in_watch_order_and_existing_ones_are_kept() {
    let mut h = Harness::new(ctrl(&[("cluster-cidr", "10.244.0.0/16")]));
    // The first list: the store holds every node before the first is handed over, and the
    // CIDRs already there are taken before anyone gets a new one, even a node seen first.
    let store = h.cache.store_for(&NODE_WATCH);
    store.apply(DeltaKind::Added, node("z", &["10.244.0.0/24"]));
    store.apply(DeltaKind::Added, node("b", &["10.244.1.0/24"]));
    h.add(NODES, node("a", &[]));
    assert_eq!(h.take_queued(), ["a"]);
    assert_eq!(patched(&h, "a"), ["10.244.2.0/24"]);
    // Syncing again before the answer: the same reservation.
    assert_eq!(patched(&h, "a"), ["10.244.2.0/24"]);
    landed(&mut h, "a", &["10.244.2.0/24".into()]);
    assert!(h.sync("a").patches.is_empty());
    h.add(NODES, node("c", &[]));
    h.add(NODES, node("d", &[]));
    assert_eq!(patched(&h, "d"), ["10.244.4.0/24"]);
    assert_eq!(patched(&h, "c"), ["10.244.3.0/24"]);
    assert_eq!(h.ctrl.usage(), [(5, 256)]);
}

#[test]
fn service_range_and_dual_stack() {
    let mut h = Harness::new(ctrl(&[
        ("cluster-cidr", "10.0.0.0/22,fd00:10:244::/56"),
        ("service", "10.0.1.0/24,fd00:10:244::/64"),
    ]));
    h.add(NODES, node("a", &[]));
    h.add(NODES, node("b", &[]));
    assert_eq!(patched(&h, "a"), ["10.0.0.0/24", "fd00:10:244:1::/64"]);
    assert_eq!(patched(&h, "b"), ["10.0.2.0/24", "fd00:10:244:2::/64"]);
    let w = h.sync("a");
    assert_eq!(
        w.patches[0].2,
        json!({"spec": {"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24", "fd00:10:244:1::/64"]}})
    );
    assert_eq!(w.patches[0].1, "a");
}

#[test]
fn exhaustion_is_an_event_and_a_retry_at_the_next_change() {
    let mut h = Harness::new(ctrl(&[("cluster-cidr", "10.0.0.0/23")]));
    h.add(NODES, node("a", &[]));
    h.add(NODES, node("b", &[]));
    let (a, b) = (patched(&h, "a"), patched(&h, "b"));
    landed(&mut h, "a", &a);
    landed(&mut h, "b", &b);
    h.take_queued();
    h.add(NODES, node("c", &[]));
    assert_eq!(h.take_queued(), ["c"]);
    let w = h.sync("c");
    assert!(w.patches.is_empty());
    assert_eq!(
        w.events,
        [(
            EventType::Normal,
            "CIDRNotAvailable".to_string(),
            "Node c status is now: CIDRNotAvailable".to_string()
        )]
    );
    let o = h.outcome("c");
    match &o.actions[0] {
        Action::Event(e) => {
            assert_eq!(e.involved, node_ref("c", "uid-c"));
            assert_eq!(e.involved.kind, "Node");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        crate::controllers::testing::row("nodeipam").event_component,
        "cidrAllocator"
    );
    // Deleting a node frees its CIDR; c gets it at its next change.
    h.delete(
        NODES,
        node("a", &a.iter().map(String::as_str).collect::<Vec<_>>()),
    );
    assert_eq!(h.ctrl.usage(), [(1, 2)]);
    h.update(NODES, node("c", &[]));
    assert_eq!(h.take_queued(), ["c"]);
    assert_eq!(patched(&h, "c"), ["10.0.0.0/24"]);
}

#[test]
fn dual_stack_exhaustion_gives_the_first_family_back() {
    let mut h = Harness::new(ctrl(&[
        ("cluster-cidr", "10.0.0.0/16,fd00::/120"),
        ("mask6", "120"),
    ]));
    h.add(NODES, node("a", &[]));
    assert_eq!(patched(&h, "a"), ["10.0.0.0/24", "fd00::/120"]);
    h.add(NODES, node("b", &[]));
    assert_eq!(h.sync("b").events[0].1, "CIDRNotAvailable");
    assert_eq!(h.ctrl.usage(), [(1, 256), (1, 1)]);
}

#[test]
fn unusable_cidrs_are_logged_and_left_alone() {
    let mut h = Harness::new(ctrl(&[("cluster-cidr", "10.244.0.0/16")]));
    h.add(NODES, node("out", &["10.99.0.0/24"]));
    h.add(NODES, node("junk", &["not-a-cidr"]));
    h.add(NODES, node("two", &["10.244.5.0/24", "fd00::/64"]));
    assert!(h.take_queued().is_empty());
    assert!(h.sync("out").is_empty());
    // The first of "two" was taken before the second failed (as upstream).
    assert_eq!(h.ctrl.usage(), [(1, 256)]);
    h.add(NODES, node("n", &[]));
    assert_eq!(patched(&h, "n"), ["10.244.0.0/24"]);
}

#[test]
fn failed_patches_are_retried_then_released_with_an_event() {
    let mut h = Harness::new(ctrl(&[("cluster-cidr", "10.244.0.0/16")]));
    h.add(NODES, node("a", &[]));
    let first = patched(&h, "a");
    let a = patch("a", &[net(&first[0])]);
    let e = crate::Error::api(422, "Invalid", "nope");
    for _ in 0..2 {
        h.ctrl.applied("a", &a, Applied::Failed(&e));
        assert_eq!(patched(&h, "a"), first);
    }
    h.ctrl.applied("a", &a, Applied::Failed(&e));
    let w = h.sync("a");
    assert_eq!(w.events[0].1, "CIDRAssignmentFailed");
    assert_eq!(w.events[0].2, "Node a status is now: CIDRAssignmentFailed");
    // Released, and a new reservation: the next one after the last handed out.
    assert_eq!(w.patches.len(), 1);
    assert_eq!(w.patches[0].2["spec"]["podCIDR"], "10.244.1.0/24");
    assert_eq!(h.ctrl.usage(), [(1, 256)]);
    // A timeout keeps the CIDRs taken: the write may have been done.
    let b = patch("a", &[net("10.244.1.0/24")]);
    let t = crate::Error::Transport("timed out".into());
    for _ in 0..3 {
        h.ctrl.applied("a", &b, Applied::Failed(&t));
    }
    assert_eq!(h.ctrl.usage(), [(1, 256)]);
    let w = h.sync("a");
    assert_eq!(w.patches[0].2["spec"]["podCIDR"], "10.244.2.0/24");
    assert_eq!(h.ctrl.usage(), [(2, 256)]);
}

#[test]
fn a_node_deleted_before_its_patch_gives_its_reservation_back() {
    let mut h = Harness::new(ctrl(&[("cluster-cidr", "10.244.0.0/16")]));
    h.add(NODES, node("a", &[]));
    assert_eq!(h.ctrl.usage(), [(1, 256)]);
    h.delete(NODES, node("a", &[]));
    assert_eq!(h.ctrl.usage(), [(0, 256)]);
    assert!(h.sync("a").is_empty());
    // Someone else set the CIDRs before our patch: ours go back.
    h.add(NODES, node("b", &[]));
    assert_eq!(patched(&h, "b"), ["10.244.1.0/24"]);
    h.update(NODES, node("b", &["10.244.9.0/24"]));
    assert!(h.sync("b").is_empty());
    assert_eq!(h.ctrl.usage(), [(1, 256)]);
}

#[test]
fn a_node_showing_up_with_a_reserved_cidr_keeps_it() {
    let mut h = Harness::new(ctrl(&[("cluster-cidr", "10.244.0.0/16")]));
    h.add(NODES, node("a", &[]));
    h.take_queued();
    // After a re-list, "b" arrives with the CIDR "a" holds unwritten.
    h.add(NODES, node("b", &["10.244.0.0/24"]));
    assert_eq!(h.take_queued(), ["a"]);
    assert_eq!(patched(&h, "a"), ["10.244.1.0/24"]);
    assert_eq!(h.ctrl.usage(), [(2, 256)]);
}

#[test]
fn upstream_has_no_queue() {
    let row = crate::controllers::testing::row("nodeipam");
    assert_eq!(row.queue, "");
    assert_eq!(row.workers, 4);
    assert_eq!(row.name, "node-ipam-controller");
}

#[test]
fn cidrset_families_count_allocations_releases_and_tries() {
    let mut s = set("10.244.0.0/16", 24);
    let fams = metrics::families(std::slice::from_ref(&s));
    let text = crate::metrics::encode(&fams);
    assert!(
        text.contains("node_ipam_controller_cirdset_max_cidrs{clusterCIDR=\"10.244.0.0/16\"} 256")
    );
    assert!(
        !text.contains("node_ipam_controller_cidrset_usage_cidrs{"),
        "{text}"
    );
    s.occupy(&net("10.244.0.0/24")).unwrap();
    let b = s.allocate_next().unwrap();
    assert_eq!(b.to_string(), "10.244.1.0/24");
    s.release(&b).unwrap();
    let text = crate::metrics::encode(&metrics::families(std::slice::from_ref(&s)));
    for line in [
        "node_ipam_controller_cidrset_cidrs_allocations_total{clusterCIDR=\"10.244.0.0/16\"} 2",
        "node_ipam_controller_cidrset_cidrs_releases_total{clusterCIDR=\"10.244.0.0/16\"} 1",
        "node_ipam_controller_cidrset_usage_cidrs{clusterCIDR=\"10.244.0.0/16\"} 0.00390625",
        "node_ipam_controller_cidrset_allocation_tries_per_request_bucket{clusterCIDR=\"10.244.0.0/16\",le=\"1\"} 1",
        "node_ipam_controller_cidrset_allocation_tries_per_request_sum{clusterCIDR=\"10.244.0.0/16\"} 1",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}
