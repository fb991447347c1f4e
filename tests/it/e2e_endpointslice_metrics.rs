//! The endpointslice-controller's `endpoint_slice_controller_*` series on `/metrics`, read
//! from the manager's secure port after it synced two Services: one with three pods (two
//! slices of at most two endpoints, `trafficDistribution: PreferClose`) and one selecting
//! nothing (its placeholder). With `KCM_E2E_KCM_BINARY` naming upstream's
//! kube-controller-manager the same scenario passes against it: the values asserted are those
//! both give (the series are printed for a side-by-side look).

use crate::common::*;
use edgekcm::api::resources::{ENDPOINTS, ENDPOINTSLICES, NODES, PODS, SERVICES};
use serde_json::json;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const SINCE: &str = "2024-05-01T10:00:00Z";
const P: &str = "endpoint_slice_controller_";

fn run_pod(admin: &edgekcm::api::client::Client, ns: &str, name: &str, node: &str, ip: &str) {
    let p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "c",
            "image": "registry.k8s.io/pause:3.9",
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]}]}});
    admin.create(&PODS, Some(ns), &p).expect("create pod");
    eventually(LIMIT, "pod status update", || {
        let mut p = admin.get(&PODS, Some(ns), name).ok()?;
        p["status"]["phase"] = json!("Running");
        p["status"]["podIP"] = json!(ip);
        p["status"]["podIPs"] = json!([{"ip": ip}]);
        p["status"]["conditions"] = json!([
            {"type": "Ready", "status": "True", "lastTransitionTime": SINCE},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": SINCE},
        ]);
        admin.update_subresource(&PODS, &p, "status").ok()
    });
}

/// The exposition's lines of the endpointslice-controller's families.
fn scrape(base: &str) -> Option<Vec<String>> {
    let agent = insecure_https_agent(None);
    let mut r = agent.get(&format!("{base}/metrics")).call().ok()?;
    let body = r.body_mut().read_to_string().ok()?;
    Some(
        body.lines()
            .filter(|l| l.contains(P))
            .map(str::to_string)
            .collect(),
    )
}

/// The value of one series, written as the exposition writes it (`name{labels}`).
fn value(lines: &[String], series: &str) -> Option<f64> {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The manager running `controllers` with `flag`, serving /metrics to anyone; its base URL.
fn start_scraped(t: &Target, controllers: &str, flag: &str) -> (Kcm, String) {
    let port = free_port();
    let kc = kubeconfig_arg(t);
    let args = [
        format!("--controllers={controllers}"),
        flag.to_string(),
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".to_string(),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let kcm = Kcm::start(t, controllers, &args);
    (kcm, format!("https://127.0.0.1:{port}"))
}

fn slice_metrics(t: &Target) {
    let ns = Ns::with_cleanup(
        t,
        "es-metrics",
        &[SERVICES, PODS, ENDPOINTS, ENDPOINTSLICES],
    );
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let node = format!("{n}-node");
    let _ = admin.create(
        &NODES,
        None,
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
    );
    let svc = |name: &str, app: &str, extra: serde_json::Value| {
        let mut spec = json!({"selector": {"app": app},
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}]});
        if let Some(o) = extra.as_object() {
            for (k, v) in o {
                spec[k] = v.clone();
            }
        }
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
    };
    let web = svc("web", "web", json!({"trafficDistribution": "PreferClose"}));
    admin.create(&SERVICES, Some(n), &web).expect("service");
    let empty = svc("empty", "nothing", json!({}));
    admin.create(&SERVICES, Some(n), &empty).expect("service");
    for (i, p) in ["a", "b", "c"].iter().enumerate() {
        run_pod(admin, n, p, &node, &format!("10.7.0.{}", i + 1));
    }
    let (_kcm, base) = start_scraped(t, "endpointslice", "--max-endpoints-per-slice=2");
    let g = |name: &str| format!("{P}{name}");
    // Both Services synced: three slices for three endpoints, as packing wants them.
    let lines = eventually(LIMIT, "the slices' gauges", || {
        let l = scrape(&base)?;
        (value(&l, &g("num_endpoint_slices")) == Some(3.0)
            && value(&l, &g("changes{operation=\"create\"}")) == Some(3.0))
        .then_some(l)
    });
    eprintln!("---- after the first syncs ----\n{}", lines.join("\n"));
    for (series, want) in [
        ("endpoints_desired", 3.0),
        ("desired_endpoint_slices", 3.0),
        ("endpoints_added_per_sync_sum", 3.0),
        ("endpoints_removed_per_sync_sum", 0.0),
        (
            "services_count_by_traffic_distribution{traffic_distribution=\"PreferClose\"}",
            1.0,
        ),
        (
            "endpointslices_changed_per_sync_sum{topology=\"Disabled\",traffic_distribution=\"PreferClose\"}",
            2.0,
        ),
        (
            "endpointslices_changed_per_sync_sum{topology=\"Disabled\",traffic_distribution=\"\"}",
            1.0,
        ),
    ] {
        assert_eq!(value(&lines, &g(series)), Some(want), "{series}");
    }
    assert!(value(&lines, &g("syncs{result=\"success\"}")).unwrap_or(0.0) >= 2.0);
    assert_eq!(value(&lines, &g("syncs{result=\"error\"}")), None);
    for (family, kind) in [
        ("endpoints_added_per_sync", "histogram"),
        ("endpointslices_changed_per_sync", "histogram"),
        ("num_endpoint_slices", "gauge"),
        ("changes", "counter"),
        ("syncs", "counter"),
    ] {
        let ty = format!("# TYPE {P}{family} {kind}");
        assert!(lines.contains(&ty), "{ty}");
    }
    assert!(lines.contains(&format!(
        "# HELP {P}desired_endpoint_slices [BETA] Number of EndpointSlices that would exist with perfect endpoint allocation"
    )));
    assert_eq!(
        value(&lines, &g("endpoints_added_per_sync_bucket{le=\"2\"}")),
        value(&lines, &g("endpoints_added_per_sync_count")).map(|c| c - 1.0),
        "one sync added 3, the others none"
    );
    // No classic buckets for the histogram that names none (native histograms are on).
    let inf = "endpointslices_changed_per_sync_bucket{topology=\"Disabled\",traffic_distribution=\"\",le=\"+Inf\"}";
    let count =
        "endpointslices_changed_per_sync_count{topology=\"Disabled\",traffic_distribution=\"\"}";
    assert!(value(&lines, &g(inf)).unwrap_or(0.0) >= 1.0);
    assert_eq!(value(&lines, &g(inf)), value(&lines, &g(count)));
    let one = "endpointslices_changed_per_sync_bucket{topology=\"Disabled\",traffic_distribution=\"\",le=\"1\"}";
    assert_eq!(value(&lines, &g(one)), None);
    // A pod goes: one endpoint removed; the empty Service goes: its placeholder leaves the
    // gauges, and no Service is left without a traffic distribution's count.
    delete_pod_now(admin, n, "a").expect("delete pod");
    let _ = admin.delete(&SERVICES, Some(n), "empty", &Default::default());
    let lines = eventually(LIMIT, "the gauges after the deletes", || {
        let l = scrape(&base)?;
        (value(&l, &g("endpoints_desired")) == Some(2.0)
            && value(&l, &g("desired_endpoint_slices")) == Some(1.0))
        .then_some(l)
    });
    eprintln!("---- after the deletes ----\n{}", lines.join("\n"));
    assert_eq!(
        value(&lines, &g("endpoints_removed_per_sync_sum")),
        Some(1.0)
    );
    let _ = admin.delete(&NODES, None, &node, &Default::default());
}

/// The mirroring controller's `endpoint_slice_mirroring_controller_*` series after it
/// mirrored a selectorless Service's Endpoints of three addresses, one of them not an IP.
fn mirroring_metrics(t: &Target) {
    let ns = Ns::with_cleanup(t, "es-mmetrics", &[SERVICES, ENDPOINTS, ENDPOINTSLICES]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ext"},
        "spec": {"ports": [{"port": 80}]}});
    admin.create(&SERVICES, Some(n), &svc).expect("service");
    let ep = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "ext"},
        "subsets": [{"addresses": [{"ip": "192.0.2.1"}, {"ip": "192.0.2.2"}, {"ip": "192.0.2.3"}],
            "ports": [{"port": 8080, "protocol": "TCP"}]}]});
    admin.create(&ENDPOINTS, Some(n), &ep).expect("endpoints");
    let (_kcm, base) = start_scraped(
        t,
        "endpointslicemirroring",
        "--mirroring-max-endpoints-per-subset=2",
    );
    let m = |name: &str| format!("endpoint_slice_mirroring_controller_{name}");
    let scrape_m = || -> Option<Vec<String>> {
        let agent = insecure_https_agent(None);
        let mut r = agent.get(&format!("{base}/metrics")).call().ok()?;
        let body = r.body_mut().read_to_string().ok()?;
        Some(
            body.lines()
                .filter(|l| l.contains("endpoint_slice_mirroring_controller_"))
                .map(str::to_string)
                .collect(),
        )
    };
    let lines = eventually(LIMIT, "the mirrored slice counted", || {
        let l = scrape_m()?;
        (value(&l, &m("changes{operation=\"create\"}")) == Some(1.0)).then_some(l)
    });
    eprintln!("---- mirrored ----\n{}", lines.join("\n"));
    for (series, want) in [
        ("endpoints_desired", 2.0),
        ("num_endpoint_slices", 1.0),
        ("desired_endpoint_slices", 1.0),
        ("endpoints_added_per_sync_sum", 2.0),
        ("endpoints_removed_per_sync_sum", 0.0),
        ("endpoints_updated_per_sync_sum", 0.0),
    ] {
        assert_eq!(value(&lines, &m(series)), Some(want), "{series}");
    }
    // Every sync of the Endpoints skips its third address: once per sync, however many syncs
    // (the slice's own watch event may bring a second).
    let skipped = value(&lines, &m("addresses_skipped_per_sync_sum"));
    let syncs = value(&lines, &m("addresses_skipped_per_sync_count"));
    assert!(syncs.unwrap_or(0.0) >= 1.0, "no sync observed");
    assert_eq!(skipped, syncs, "one address skipped per sync");
    assert!(value(&lines, &m("endpoints_sync_duration_count")).unwrap_or(0.0) >= 1.0);
    assert!(lines.contains(
        &"# TYPE endpoint_slice_mirroring_controller_endpoints_sync_duration histogram".to_string()
    ));
    assert!(value(&lines, &m("endpoints_sync_duration_bucket{le=\"0.001\"}")).is_some());
    // The Endpoints goes: the gauges drop to nothing.
    let _ = admin.delete(&ENDPOINTS, Some(n), "ext", &Default::default());
    let lines = eventually(LIMIT, "the gauges after the delete", || {
        let l = scrape_m()?;
        (value(&l, &m("endpoints_desired")) == Some(0.0)).then_some(l)
    });
    eprintln!("---- after the delete ----\n{}", lines.join("\n"));
    assert_eq!(value(&lines, &m("num_endpoint_slices")), Some(0.0));
}

scenarios! {
    slice_metrics => slice_metrics,
    mirroring_metrics => mirroring_metrics,
}
