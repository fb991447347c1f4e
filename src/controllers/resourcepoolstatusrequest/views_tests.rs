//! The partition and shareable views of a pool (upstream's `views_test.go` cases, in our
//! words).

use super::views::*;
use crate::compat::quantity::Quantity;
use serde_json::{json, Value};
use std::collections::BTreeMap;
fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

fn consumes(set: &str, counters: &[(&str, &str)]) -> Consumption {
    Consumption {
        set: set.into(),
        counters: counters
            .iter()
            .map(|(n, v)| (n.to_string(), q(v)))
            .collect(),
    }
}

fn part(name: &str, typ: &str, cost: Vec<Consumption>) -> Device {
    Device {
        name: name.into(),
        partition_attr: "gpu.example.com/profile".into(),
        partition_type: Some(typ.into()),
        consumes: cost,
        ..Device::default()
    }
}

fn pool_input(
    devices: Vec<Device>,
    counters: &[(&str, &[(&str, &str)])],
    used: &[&str],
) -> PoolInput {
    PoolInput {
        driver: "gpu.example.com".into(),
        pool: "pool-0".into(),
        devices,
        shared_counters: counters
            .iter()
            .map(|(s, c)| (s.to_string(), consumes(s, c).counters))
            .collect(),
        in_use: used.iter().map(|s| s.to_string()).collect(),
        consumed: BTreeMap::new(),
    }
}

/// (type, total, allocatable) of each partition summary entry.
fn summary(views: &(Option<Value>, Option<Value>, String)) -> Vec<(String, i64, i64)> {
    assert_eq!(views.2, "");
    views.0.as_ref().map_or(Vec::new(), |v| {
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().unwrap().to_string(),
                    e["total"].as_i64().unwrap(),
                    e["allocatable"].as_i64().unwrap(),
                )
            })
            .collect()
    })
}

#[test]
fn partition_summary_by_type() {
    let mem = |v: &str| vec![consumes("gpu-0", &[("memory", v)])];
    let three = || {
        vec![
            part("full-0", "Full", mem("80Gi")),
            part("half-0", "Half", mem("40Gi")),
            part("half-1", "Half", mem("40Gi")),
        ]
    };
    let set: &[(&str, &[(&str, &str)])] = &[("gpu-0", &[("memory", "80Gi")])];
    // Each type measured on its own against what is left.
    let v = pool_views(&pool_input(three(), set, &[]));
    assert_eq!(summary(&v), [("Full".into(), 1, 1), ("Half".into(), 2, 2)]);
    assert_eq!(v.0.unwrap()[0]["attribute"], "gpu.example.com/profile");
    let v = pool_views(&pool_input(three(), set, &["full-0"]));
    assert_eq!(summary(&v), [("Full".into(), 1, 0), ("Half".into(), 2, 0)]);
    // Room for ten, but three devices.
    let big = |n: &str| part(n, "Full", vec![consumes("gpu-1", &[("memory", "80Gi")])]);
    let v = pool_views(&pool_input(
        vec![big("f0"), big("f1"), big("f2")],
        &[("gpu-1", &[("memory", "800Gi")])],
        &[],
    ));
    assert_eq!(summary(&v), [("Full".into(), 3, 3)]);
    // Two counter sets: the tighter one decides.
    let two = |n: &str| {
        part(
            n,
            "Full",
            vec![
                consumes("mem", &[("memory", "80Gi")]),
                consumes("cores", &[("sm", "8")]),
            ],
        )
    };
    let v = pool_views(&pool_input(
        vec![two("f0"), two("f1")],
        &[("mem", &[("memory", "160Gi")]), ("cores", &[("sm", "8")])],
        &[],
    ));
    assert_eq!(summary(&v), [("Full".into(), 2, 1)]);
}

#[test]
fn partition_summary_errors() {
    let mem = |v: &str| vec![consumes("gpu-0", &[("memory", v)])];
    let set: &[(&str, &[(&str, &str)])] = &[("gpu-0", &[("memory", "80Gi")])];
    let mut mystery = part("mystery", "", mem("40Gi"));
    mystery.partition_type = None;
    let (p, _, e) = pool_views(&pool_input(
        vec![part("f", "Full", mem("80Gi")), mystery],
        set,
        &[],
    ));
    assert!(p.is_none());
    assert_eq!(
        e,
        "PartitionTypeMissing: device \"mystery\" in pool gpu.example.com/pool-0 does not carry partition type attribute \"gpu.example.com/profile\""
    );
    let (_, _, e) = pool_views(&pool_input(
        vec![
            part("h0", "Half", mem("40Gi")),
            part("h1", "Half", mem("50Gi")),
        ],
        set,
        &[],
    ));
    assert_eq!(
        e,
        "PartitionCostMismatch: devices of partition type \"Half\" in pool gpu.example.com/pool-0 consume different counters"
    );
    // Grouped devices without counter sets.
    let (_, _, e) = pool_views(&pool_input(vec![part("f", "Full", mem("80Gi"))], &[], &[]));
    assert_eq!(
        e,
        "PartitionTypeMissing: pool gpu.example.com/pool-0 declares partitionTypeAttribute but publishes no sharedCounters"
    );
    // More than 32 types.
    let many: Vec<Device> = (0..33)
        .map(|i| part(&format!("d{i}"), &format!("T{i:02}"), mem("1")))
        .collect();
    let (p, _, e) = pool_views(&pool_input(many, set, &[]));
    assert!(p.is_none());
    assert!(e.starts_with("PartitionSummaryOverCap: pool gpu.example.com/pool-0 has 33 partition types, exceeding the maximum of 32"), "{e}");
    // No grouping attribute: no partition view at all.
    let mut d = part("f", "Full", mem("80Gi"));
    d.partition_attr.clear();
    let (p, s, e) = pool_views(&pool_input(vec![d], set, &[]));
    assert_eq!((p, s, e), (None, None, String::new()));
}

fn shareable(name: &str, caps: &[(&str, &str)]) -> Device {
    Device {
        name: name.into(),
        allow_multiple: true,
        capacity: caps.iter().map(|(k, v)| (k.to_string(), q(v))).collect(),
        ..Device::default()
    }
}

#[test]
fn shareable_summary() {
    let mut p = pool_input(
        vec![
            shareable("s0", &[("memory", "40Gi"), ("cores", "8")]),
            shareable("s1", &[("memory", "40Gi")]),
            Device {
                name: "plain".into(),
                ..Device::default()
            },
        ],
        &[],
        &["s0"],
    );
    p.consumed.insert("memory".into(), q("10Gi"));
    let (_, s, e) = pool_views(&p);
    assert_eq!(e, "");
    assert_eq!(
        s.unwrap(),
        json!({"fullyAvailableDevices": 1, "partiallyAvailableDevices": 1, "capacity": [
            {"name": "cores", "total": "8", "consumed": "0", "available": "8"},
            {"name": "memory", "total": "80Gi", "consumed": "10Gi", "available": "70Gi"}]})
    );
    // Over-consumed: available stays at zero.
    p.consumed.insert("cores".into(), q("9"));
    let (_, s, _) = pool_views(&p);
    assert_eq!(s.unwrap()["capacity"][0]["available"], "0");
    // No shareable device: no summary.
    let (_, s, _) = pool_views(&pool_input(vec![Device::default()], &[], &[]));
    assert!(s.is_none());
    // A device both partitionable and shareable is in both views.
    let mut hybrid = part(
        "full-0",
        "Full",
        vec![consumes("gpu-0", &[("memory", "80Gi")])],
    );
    hybrid.allow_multiple = true;
    hybrid.capacity.insert("memory".into(), q("80Gi"));
    let v = pool_views(&pool_input(
        vec![hybrid],
        &[("gpu-0", &[("memory", "80Gi")])],
        &[],
    ));
    assert_eq!(summary(&v), [("Full".into(), 1, 1)]);
    assert_eq!(v.1.unwrap()["fullyAvailableDevices"], 1);
}

#[test]
fn partition_attributes_resolve() {
    let attrs: BTreeMap<String, String> = [
        ("gpu.example.com/profile".to_string(), "Full".to_string()),
        ("shape".to_string(), "Wide".to_string()),
    ]
    .into();
    let dev = |attr: &str| Device {
        name: "d".into(),
        partition_attr: attr.into(),
        attributes: attrs.clone(),
        ..Device::default()
    };
    let resolved = |req: Option<&str>, devs: Vec<Device>| {
        let mut p = pool_input(devs, &[], &[]);
        resolve_partitions(req, &mut p);
        p.devices
            .into_iter()
            .map(|d| (d.partition_attr, d.partition_type))
            .collect::<Vec<_>>()
    };
    let full = || Some("Full".to_string());
    // The slice's own attribute.
    assert_eq!(
        resolved(None, vec![dev("gpu.example.com/profile")]),
        [("gpu.example.com/profile".into(), full())]
    );
    // The request's default when the pool names none; nothing when neither does.
    assert_eq!(
        resolved(Some("gpu.example.com/profile"), vec![dev("")]),
        [("gpu.example.com/profile".into(), full())]
    );
    assert_eq!(resolved(None, vec![dev("")]), [(String::new(), None)]);
    // A pool naming one: devices of slices naming none stay ungrouped.
    assert_eq!(
        resolved(
            Some("gpu.example.com/profile"),
            vec![dev("gpu.example.com/profile"), dev("")]
        ),
        [
            ("gpu.example.com/profile".into(), full()),
            (String::new(), None)
        ]
    );
    // Bare attribute names are the driver's domain; other domains must match in full.
    assert_eq!(
        partition_type("gpu.example.com", &attrs, "gpu.example.com/shape"),
        Some("Wide".into())
    );
    assert_eq!(
        partition_type("gpu.example.com", &attrs, "other.io/shape"),
        None
    );
    assert_eq!(
        partition_type("gpu.example.com", &attrs, "gpu.example.com/missing"),
        None
    );
}
