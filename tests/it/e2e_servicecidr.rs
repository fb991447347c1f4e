//! service-cidr-controller scenarios, against the sandbox always and a real kube-apiserver
//! with `KCM_E2E_KUBECONFIG` (`real_*`, edgekcm with `--use-service-account-credentials`,
//! writing as `service-cidrs-controller`). On the real server a Service's cluster IP makes
//! the IPAddress (the API server's allocator); on the sandbox the test makes it.

use crate::common::*;
use edgekcm::api::client::Client;
use edgekcm::api::resources::{IPADDRESSES, SERVICECIDRS, SERVICES};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const FINALIZER: &str = "networking.k8s.io/service-cidr-finalizer";

fn get_cidr(admin: &Client, name: &str) -> Option<Value> {
    admin.get(&SERVICECIDRS, None, name).ok()
}

fn ready(sc: &Value) -> Option<(String, String, String)> {
    let c = sc["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    Some((s("status"), s("reason"), s("message")))
}

fn finalizers(o: &Value) -> Vec<String> {
    o["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

/// Removes the test's ServiceCIDR (its finalizer too) and address whatever happened.
struct Gone {
    admin: Client,
    cidr: String,
    ip: String,
}

impl Drop for Gone {
    fn drop(&mut self) {
        let _ = self
            .admin
            .delete(&IPADDRESSES, None, &self.ip, &Default::default());
        if let Some(mut o) = get_cidr(&self.admin, &self.cidr) {
            o["metadata"]["finalizers"] = json!([]);
            let _ = self.admin.update(&SERVICECIDRS, &o);
        }
        let _ = self
            .admin
            .delete(&SERVICECIDRS, None, &self.cidr, &Default::default());
    }
}

/// The address an allocator would make for a Service's cluster IP (the sandbox has none).
fn address(admin: &Client, ns: &str, ip: &str) {
    let o = json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress",
        "metadata": {"name": ip, "labels": {
            "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io",
            "ipaddress.kubernetes.io/ip-family": "IPv4"}},
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": ns,
            "name": "web"}}});
    admin
        .create(&IPADDRESSES, None, &o)
        .expect("create IPAddress");
}

/// A new ServiceCIDR gets the finalizer and Ready=True; deleted while an allocated address
/// lies only in it, it stays with Ready=False/Terminating; once the address is gone it goes,
/// not before 10 s after its deletion began.
fn scenario_finalizer_and_ready(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-scidr", &[SERVICES]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    // A range of its own per run: 10.2xx.yyy.0/24, outside the default 10.96.0.0/12.
    let salt = std::process::id() as u64
        ^ edgekcm::compat::timefmt::unix_seconds(std::time::SystemTime::now()) as u64;
    let range = format!("10.{}.{}.0/24", 200 + salt % 50, (salt / 50) % 250);
    let ip = range.replace(".0/24", ".10");
    let name = unique("extra");
    let _gone = Gone {
        admin: admin.clone(),
        cidr: name.clone(),
        ip: ip.clone(),
    };
    let _kcm = Kcm::start(t, "scidr", &["--controllers=service-cidr-controller"]);
    let sc = json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": name}, "spec": {"cidrs": [range]}});
    admin
        .create(&SERVICECIDRS, None, &sc)
        .expect("create ServiceCIDR");
    eventually(Duration::from_secs(20), "finalizer and Ready", || {
        let o = get_cidr(admin, &name)?;
        let r = ready(&o)?;
        (finalizers(&o) == [FINALIZER]
            && r == (
                "True".into(),
                String::new(),
                "Kubernetes Service CIDR is ready".into(),
            ))
            .then_some(())
    });
    if t.is_real() {
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"clusterIP": ip, "ports": [{"port": 80}]}});
        admin
            .create(&SERVICES, Some(n), &svc)
            .expect("a Service with an IP of the new range");
        eventually(Duration::from_secs(10), "the allocator's IPAddress", || {
            admin.get(&IPADDRESSES, None, &ip).ok()
        });
    } else {
        address(admin, n, &ip);
    }
    admin
        .delete(&SERVICECIDRS, None, &name, &Default::default())
        .expect("delete ServiceCIDR");
    let terminating = (
        "False".to_string(),
        "Terminating".to_string(),
        "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR".to_string(),
    );
    eventually(Duration::from_secs(20), "Ready=False Terminating", || {
        (ready(&get_cidr(admin, &name)?)? == terminating).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let o = get_cidr(admin, &name).expect("kept while the address is in it");
    assert_eq!(finalizers(&o), [FINALIZER]);
    let deleted_at = edgekcm::compat::timefmt::parse_rfc3339(
        o["metadata"]["deletionTimestamp"]
            .as_str()
            .expect("deleting"),
    )
    .expect("a time");
    if t.is_real() {
        admin
            .delete(&SERVICES, Some(n), "web", &Default::default())
            .expect("delete Service");
    } else {
        admin
            .delete(&IPADDRESSES, None, &ip, &Default::default())
            .expect("delete IPAddress");
    }
    let start = Instant::now();
    eventually(Duration::from_secs(40), "ServiceCIDR gone", || {
        get_cidr(admin, &name).is_none().then_some(())
    });
    // The finalizer went no sooner than 10 s after the deletion began (seconds resolution).
    let gone_at = std::time::SystemTime::now();
    let held = gone_at.duration_since(deleted_at).unwrap_or_default();
    assert!(held >= Duration::from_secs(9), "gone after {held:?}");
    assert!(start.elapsed() < Duration::from_secs(40));
}

/// A ServiceCIDR covered by another one goes once its grace period is over even with an
/// address in its range.
fn scenario_covered_cidr_goes(t: &Target) {
    let admin = t.admin();
    let salt = std::process::id() as u64
        ^ edgekcm::compat::timefmt::unix_seconds(std::time::SystemTime::now()) as u64;
    let a = 100 + salt % 50;
    let (big, small) = (unique("big"), unique("small"));
    let _g1 = Gone {
        admin: admin.clone(),
        cidr: big.clone(),
        ip: String::new(),
    };
    let _g2 = Gone {
        admin: admin.clone(),
        cidr: small.clone(),
        ip: format!("172.{}.1.5", a % 16 + 16),
    };
    let _kcm = Kcm::start(t, "scidr-cover", &["--controllers=service-cidr-controller"]);
    let octet = a % 16 + 16;
    for (n, r) in [
        (&big, format!("172.{octet}.0.0/16")),
        (&small, format!("172.{octet}.1.0/24")),
    ] {
        let sc = json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
            "metadata": {"name": n}, "spec": {"cidrs": [r]}});
        admin.create(&SERVICECIDRS, None, &sc).expect("create");
    }
    for n in [&big, &small] {
        eventually(Duration::from_secs(20), "Ready", || {
            (ready(&get_cidr(&admin, n)?)?.0 == "True").then_some(())
        });
    }
    if !t.is_real() {
        address(&admin, "default", &format!("172.{octet}.1.5"));
    }
    admin
        .delete(&SERVICECIDRS, None, &small, &Default::default())
        .expect("delete");
    eventually(Duration::from_secs(30), "covered ServiceCIDR gone", || {
        get_cidr(&admin, &small).is_none().then_some(())
    });
    let b = get_cidr(&admin, &big).expect("the big one stays");
    assert!(b["metadata"]["deletionTimestamp"].is_null());
}

scenarios! {
    finalizer_and_ready => scenario_finalizer_and_ready,
    covered_cidr_goes => scenario_covered_cidr_goes,
}
