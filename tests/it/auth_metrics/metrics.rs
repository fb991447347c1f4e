//! The /metrics exposition of the secure port, parsed back with a small Prometheus text parser
//! (HELP/TYPE, names, label syntax, histogram buckets cumulative with `+Inf` = count): served
//! in process behind the delegating chain, by edgekcm itself (`secure_port_scenario`), and the
//! leader election gauge.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::common::{free_port, insecure_https_agent, kubeconfig_arg, Kcm};
use edgekcm::api::resources::CLUSTERROLEBINDINGS;
use edgekcm::queue::WorkQueue;
use edgekcm::server::RunningServer;

/// Labels of one series, in order.
type Labels = Vec<(String, String)>;

// ---------------------------------------------------------------------------------------------
// Prometheus text parsing

#[derive(Debug, Default)]
struct Exposition {
    /// name -> (help, type)
    families: BTreeMap<String, (String, String)>,
    /// (name, labels, value)
    samples: Vec<(String, Labels, f64)>,
}

fn valid_name(n: &str) -> bool {
    let mut chars = n.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s.parse::<f64>().map_err(|e| format!("value {s:?}: {e}")),
    }
}

fn parse_labels(s: &str) -> Result<(Labels, &str), String> {
    // s starts after '{'
    let mut labels = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    loop {
        if b.get(i) == Some(&b'}') {
            return Ok((labels, &s[i + 1..]));
        }
        let eq = s[i..].find('=').ok_or("label without '='")? + i;
        let name = &s[i..eq];
        if !valid_name(name) || name.contains(':') {
            return Err(format!("bad label name {name:?}"));
        }
        if b.get(eq + 1) != Some(&b'"') {
            return Err(format!("label {name} value not quoted"));
        }
        let mut j = eq + 2;
        let mut value = String::new();
        loop {
            match b.get(j) {
                None => return Err("unterminated label value".into()),
                Some(b'"') => break,
                Some(b'\\') => {
                    match b.get(j + 1) {
                        Some(b'\\') => value.push('\\'),
                        Some(b'"') => value.push('"'),
                        Some(b'n') => value.push('\n'),
                        other => return Err(format!("bad escape {other:?}")),
                    }
                    j += 2;
                }
                Some(_) => {
                    let c = s[j..].chars().next().unwrap();
                    value.push(c);
                    j += c.len_utf8();
                }
            }
        }
        labels.push((name.to_string(), value));
        i = j + 1;
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => {}
            other => return Err(format!("unexpected {other:?} after label")),
        }
    }
}

fn parse_exposition(text: &str) -> Result<Exposition, String> {
    let mut e = Exposition::default();
    let mut current: Option<String> = None;
    let mut finished: BTreeSet<String> = BTreeSet::new();
    let mut pending_help: Option<(String, String)> = None;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("missing final newline".into());
    }
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            if !valid_name(name) {
                return Err(format!("bad family name {name:?}"));
            }
            if e.families.contains_key(name) || finished.contains(name) {
                return Err(format!("family {name} declared twice"));
            }
            pending_help = Some((name.to_string(), help.to_string()));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or("TYPE without type")?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(format!("bad type {kind}"));
            }
            let help = match pending_help.take() {
                Some((n, h)) if n == name => h,
                _ => return Err(format!("TYPE of {name} without HELP right before it")),
            };
            if let Some(prev) = current.replace(name.to_string()) {
                finished.insert(prev);
            }
            e.families
                .insert(name.to_string(), (help, kind.to_string()));
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            return Err(format!("unexpected line {line:?}"));
        }
        let name_end = line.find(['{', ' ']).ok_or("sample without value")?;
        let name = &line[..name_end];
        if !valid_name(name) {
            return Err(format!("bad metric name {name:?}"));
        }
        let (labels, rest) = if line.as_bytes()[name_end] == b'{' {
            parse_labels(&line[name_end + 1..])?
        } else {
            (Vec::new(), &line[name_end..])
        };
        let value = rest
            .strip_prefix(' ')
            .ok_or_else(|| format!("no space before value in {line:?}"))?;
        let value = parse_value(value)?;
        let fam = current.as_deref().ok_or("sample before any TYPE")?;
        let kind = &e.families[fam].1;
        let ok = if kind == "histogram" {
            [
                format!("{fam}_bucket"),
                format!("{fam}_sum"),
                format!("{fam}_count"),
            ]
            .contains(&name.to_string())
        } else {
            name == fam
        };
        if !ok {
            return Err(format!("sample {name} outside its family (current {fam})"));
        }
        e.samples.push((name.to_string(), labels, value));
    }
    Ok(e)
}

/// Every histogram: buckets in increasing `le`, counts non-decreasing, `+Inf` = `_count`,
/// a `_sum`; no duplicate series anywhere.
fn check_exposition(e: &Exposition) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for (n, l, _) in &e.samples {
        if !seen.insert((n.clone(), l.clone())) {
            return Err(format!("duplicate series {n}{l:?}"));
        }
    }
    for (fam, (_, kind)) in &e.families {
        if kind != "histogram" {
            continue;
        }
        let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
        for (n, l, v) in &e.samples {
            if *n != format!("{fam}_bucket") {
                continue;
            }
            let le = l
                .iter()
                .find(|(k, _)| k == "le")
                .ok_or(format!("{fam} bucket without le"))?;
            let le = parse_value(&le.1)?;
            let rest: Vec<_> = l.iter().filter(|(k, _)| k != "le").cloned().collect();
            series.entry(rest).or_default().push((le, *v));
        }
        for (labels, buckets) in series {
            for w in buckets.windows(2) {
                if w[0].0 >= w[1].0 || w[0].1 > w[1].1 {
                    return Err(format!("{fam}{labels:?}: buckets not cumulative: {w:?}"));
                }
            }
            let last = buckets.last().unwrap();
            if last.0 != f64::INFINITY {
                return Err(format!("{fam}{labels:?}: no +Inf bucket"));
            }
            let find = |suffix: &str| {
                e.samples
                    .iter()
                    .find(|(n, l, _)| *n == format!("{fam}{suffix}") && *l == labels)
                    .map(|s| s.2)
            };
            let count = find("_count").ok_or(format!("{fam}{labels:?}: no _count"))?;
            if count != last.1 {
                return Err(format!("{fam}{labels:?}: +Inf {} != count {count}", last.1));
            }
            find("_sum").ok_or(format!("{fam}{labels:?}: no _sum"))?;
        }
    }
    Ok(())
}

fn value_of(e: &Exposition, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    e.samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|s| s.2)
}

#[test]
fn parser_rejects_broken_expositions() {
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 2\n";
    assert!(parse_exposition(good).is_ok());
    for bad in [
        "a_total 1\n",
        "# TYPE a_total counter\na_total 1\n",
        "# HELP a_total A.\n# TYPE a_total counter\na_total{x=1} 2\n",
        "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\" 2\n",
        "# HELP a_total A.\n# TYPE a_total counter\nb_total 2\n",
        "# HELP a_total A.\n# TYPE a_total counter\na_total 2",
    ] {
        assert!(parse_exposition(bad).is_err(), "{bad:?}");
    }
    let hist = "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n";
    assert!(check_exposition(&parse_exposition(hist).unwrap()).is_err());
    let hist = "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n";
    assert!(check_exposition(&parse_exposition(hist).unwrap()).is_err());
}

// ---------------------------------------------------------------------------------------------
// /metrics over HTTPS, in process

fn start_server(d: &Arc<Delegating>) -> RunningServer {
    let mut s = crate::common::loopback_server();
    s.set_filter(d.filter());
    s.route("/metrics", edgekcm::server::metrics_handler());
    s.start().unwrap()
}

struct Answer {
    status: u16,
    content_type: String,
    cache_control: String,
    body: String,
}

fn fetch(agent: &ureq::Agent, url: &str, token: Option<&str>) -> Answer {
    let mut rb = agent.get(url);
    if let Some(t) = token {
        rb = rb.header("Authorization", &format!("Bearer {t}"));
    }
    let mut r = rb.call().expect("request");
    let h = |n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let (content_type, cache_control) = (h("content-type"), h("cache-control"));
    Answer {
        status: r.status().as_u16(),
        content_type,
        cache_control,
        body: r.body_mut().read_to_string().unwrap_or_default(),
    }
}

#[test]
fn sandbox_metrics_exposition_over_https() {
    let t = crate::common::sandbox();
    let admin = t.admin();
    let ca = make_ca("client-ca");
    publish_auth_configmap(&admin, json!({"client-ca-file": ca.pem}));
    let d = Delegating::new(AuthOptions {
        authentication: Some(reviewer(&admin)),
        authorization: Some(reviewer(&admin)),
        ..AuthOptions::default()
    })
    .unwrap();
    let srv = start_server(&d);
    let base = format!("https://127.0.0.1:{}", srv.addr().port());

    // Some work for the families to show.
    let q = WorkQueue::<String>::new("metrics-test-queue");
    for k in ["a", "b", "a", "c"] {
        q.add(k.to_string());
    }
    let k = q.get().unwrap();
    q.done(&k);
    q.add_after("z".into(), Duration::from_secs(3600));
    let _ = admin.get_path("/api/v1/namespaces/default");
    let _ = admin.get_path("/api/v1/namespaces/does-not-exist");

    // Anonymous: 403 (the sandbox denies nothing, so deny it here as RBAC would).
    t.sandbox()
        .unwrap()
        .deny_access("system:anonymous", "/metrics");
    let anon = insecure_https_agent(None);
    let a = fetch(&anon, &format!("{base}/metrics"), None);
    assert_eq!(a.status, 403, "{}", a.body);
    assert_eq!(a.cache_control, "no-cache, private");
    assert_eq!(fetch(&anon, &format!("{base}/healthz"), None).status, 200);
    assert_eq!(
        fetch(&anon, &format!("{base}/healthz"), Some("garbage")).status,
        401
    );

    // A client certificate over TLS, and the admin token: both get the exposition.
    let cert = leaf(&ca, "scraper", &["system:masters"], false);
    let a = fetch(
        &insecure_https_agent(Some((cert.pem.as_str(), cert.key_pem.as_str()))),
        &format!("{base}/metrics"),
        None,
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let a = fetch(&anon, &format!("{base}/metrics"), Some("sandbox-admin"));
    assert_eq!(a.status, 200);
    assert_eq!(a.content_type, "text/plain; version=0.0.4; charset=utf-8");

    let e = parse_exposition(&a.body).unwrap_or_else(|err| panic!("{err}\n{}", a.body));
    check_exposition(&e).unwrap_or_else(|err| panic!("{err}\n{}", a.body));
    let kinds = |n: &str| e.families.get(n).map(|(_, k)| k.as_str());
    for (name, kind) in [
        ("workqueue_adds_total", "counter"),
        ("workqueue_depth", "gauge"),
        ("workqueue_queue_duration_seconds", "histogram"),
        ("workqueue_work_duration_seconds", "histogram"),
        ("workqueue_retries_total", "counter"),
        ("workqueue_unfinished_work_seconds", "gauge"),
        ("workqueue_longest_running_processor_seconds", "gauge"),
        ("rest_client_requests_total", "counter"),
        ("rest_client_request_duration_seconds", "histogram"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_cpu_seconds_total", "counter"),
        ("process_start_time_seconds", "gauge"),
        ("process_open_fds", "gauge"),
    ] {
        assert_eq!(kinds(name), Some(kind), "{name}");
    }
    assert_eq!(
        e.families["workqueue_adds_total"].0,
        "[ALPHA] Total number of adds handled by workqueue"
    );
    let qn = [("name", "metrics-test-queue")];
    assert_eq!(value_of(&e, "workqueue_adds_total", &qn), Some(3.0));
    assert_eq!(value_of(&e, "workqueue_retries_total", &qn), Some(1.0));
    assert_eq!(
        value_of(&e, "workqueue_work_duration_seconds_count", &qn),
        Some(1.0)
    );
    assert!(value_of(
        &e,
        "workqueue_queue_duration_seconds_bucket",
        &[
            ("name", "metrics-test-queue"),
            ("le", "9.999999999999999e-06")
        ]
    )
    .is_some());
    let host = edgekcm::metrics::host_of(admin.base_url()).to_string();
    assert!(
        value_of(
            &e,
            "rest_client_requests_total",
            &[("code", "404"), ("method", "GET"), ("host", &host)]
        )
        .unwrap_or(0.0)
            >= 1.0
    );
    assert!(value_of(
        &e,
        "rest_client_request_duration_seconds_count",
        &[("verb", "GET"), ("host", &host)]
    )
    .is_some());
    let buckets: Vec<String> = e
        .samples
        .iter()
        .filter(|(n, l, _)| {
            n == "rest_client_request_duration_seconds_bucket"
                && l.iter().any(|(k, v)| k == "verb" && v == "GET")
                && l.iter().any(|(k, v)| k == "host" && *v == host)
        })
        .map(|(_, l, _)| l.iter().find(|(k, _)| k == "le").unwrap().1.clone())
        .collect();
    assert_eq!(
        buckets,
        ["0.005", "0.025", "0.1", "0.25", "0.5", "1", "2", "4", "8", "15", "30", "60", "+Inf"]
    );
    assert!(value_of(&e, "process_resident_memory_bytes", &[]).unwrap() > 0.0);
    drop(q);
}

// ---------------------------------------------------------------------------------------------
// edgekcm itself: sandbox and real kube-apiserver

fn secure_port_scenario(t: &Target) {
    let admin = t.admin();
    let ns = unique("secport");
    create_namespace(&admin, &ns);
    let binding = format!("{ns}-monitoring");
    let mon = service_account_token(&admin, &ns, "mon");
    let noperm = service_account_token(&admin, &ns, "noperm");
    match t.sandbox() {
        Some(sb) => {
            sb.deny_access(&format!("system:serviceaccount:{ns}:noperm"), "/metrics");
            sb.deny_access("system:anonymous", "/metrics");
        }
        None => {
            admin
                .create(
                    &CLUSTERROLEBINDINGS,
                    None,
                    &json!({"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",
                        "metadata":{"name":binding},
                        "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"system:monitoring"},
                        "subjects":[{"kind":"ServiceAccount","name":"mon","namespace":ns}]}),
                )
                .expect("create ClusterRoleBinding");
        }
    }

    let port = free_port();
    let kc = kubeconfig_arg(t);
    let mut extra = vec![
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".to_string(),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
    ];
    if !t.is_real() {
        extra.push(
            "--controllers=serviceaccount-controller,root-ca-certificate-publisher-controller"
                .into(),
        );
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut kcm = Kcm::start(t, "secure-port", &extra);
    let base = format!("https://127.0.0.1:{port}");
    let anon = insecure_https_agent(None);

    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        eventually(Duration::from_secs(30), "/healthz answers", || {
            assert!(
                kcm.exited().is_none(),
                "edgekcm exited:\n{}",
                kcm.log_text()
            );
            let mut r = anon.get(&format!("{base}/healthz")).call().ok()?;
            (r.status().as_u16() == 200 && r.body_mut().read_to_string().ok()? == "ok")
                .then_some(())
        });
        let a = fetch(&anon, &format!("{base}/metrics"), None);
        assert_eq!(a.status, 403, "anonymous /metrics: {}", a.body);
        assert!(a
            .body
            .contains("forbidden: User \\\"system:anonymous\\\" cannot get path \\\"/metrics\\\""));
        let a = fetch(&anon, &format!("{base}/metrics"), Some("not-a-token"));
        assert_eq!(a.status, 401, "bad token: {}", a.body);
        assert!(a.body.contains("\"reason\": \"Unauthorized\""));
        let a = fetch(&anon, &format!("{base}/metrics"), Some(&noperm));
        assert_eq!(a.status, 403, "ServiceAccount without rights: {}", a.body);
        assert!(a.body.contains(&format!(
            "User \\\"system:serviceaccount:{ns}:noperm\\\" cannot get path \\\"/metrics\\\""
        )));
        // RBAC is eventually consistent for the new binding.
        let a = eventually(Duration::from_secs(20), "monitoring access", || {
            let a = fetch(&anon, &format!("{base}/metrics"), Some(&mon));
            (a.status == 200).then_some(a)
        });
        assert_eq!(a.content_type, "text/plain; version=0.0.4; charset=utf-8");
        let e = parse_exposition(&a.body).unwrap_or_else(|err| panic!("{err}\n{}", a.body));
        check_exposition(&e).unwrap_or_else(|err| panic!("{err}\n{}", a.body));
        // Upstream's queue names, not the controllers' names.
        assert!(value_of(&e, "workqueue_adds_total", &[("name", "serviceaccount")]).is_some());
        assert!(value_of(
            &e,
            "workqueue_adds_total",
            &[("name", "serviceaccount-controller")]
        )
        .is_none());
        assert!(value_of(&e, "rest_client_requests_total", &[("code", "201")]).is_some());
        assert!(value_of(
            &e,
            "edgekcm_cache_objects",
            &[("resource", "serviceaccounts")]
        )
        .is_some());
        // client-go's informer families, with its resource names.
        let sa = [
            ("name", "kube-controller-manager"),
            ("resource", "serviceaccounts"),
        ];
        assert!(
            value_of(&e, "informer_processing_latency_seconds_count", &sa).unwrap_or(0.0) >= 1.0
        );
        assert!(value_of(&e, "informer_queued_items", &sa).is_some());
        // The root CA publisher's syncs by code (it published the new namespace's ConfigMap).
        eventually(Duration::from_secs(20), "root CA publisher syncs", || {
            let a = fetch(&anon, &format!("{base}/metrics"), Some(&mon));
            let e = parse_exposition(&a.body).ok()?;
            let family = "root_ca_cert_publisher_sync_duration_seconds";
            let histogram = e
                .families
                .get(family)
                .is_some_and(|(_, k)| k == "histogram");
            let ok = value_of(&e, "root_ca_cert_publisher_sync_total", &[("code", "200")])?;
            (histogram && ok >= 1.0).then_some(())
        });
        // Unknown paths are authorized first (system:monitoring does not cover them; the
        // sandbox allows them), then answered 404.
        let a = fetch(&anon, &format!("{base}/nonexistent"), Some(&mon));
        assert_eq!(a.status, if t.is_real() { 403 } else { 404 }, "{}", a.body);
    }));

    kcm.kill();
    if t.is_real() {
        let _ = admin.delete(&CLUSTERROLEBINDINGS, None, &binding, &Default::default());
    }
    delete_namespace(&admin, &ns);
    if let Err(p) = result {
        eprintln!("---- edgekcm log ----\n{}", kcm.log_text());
        std::panic::resume_unwind(p);
    }
}

#[test]
fn sandbox_secure_port_authn_authz_and_metrics() {
    secure_port_scenario(&crate::common::sandbox());
}

#[test]
#[ignore = "needs a real kube-apiserver: KCM_E2E_KUBECONFIG=... just e2e"]
fn real_secure_port_authn_authz_and_metrics() {
    let t = crate::common::real("secure port authn/authz and metrics");
    secure_port_scenario(&t);
}

// ---------------------------------------------------------------------------------------------
// leader_election_master_status

struct OneLease(std::sync::Mutex<Option<Value>>);

impl edgekcm::leader::LeaseApi for OneLease {
    fn get(&self) -> edgekcm::Result<Option<Value>> {
        Ok(self.0.lock().unwrap().clone())
    }
    fn create(&self, lease: &Value) -> edgekcm::Result<Value> {
        *self.0.lock().unwrap() = Some(lease.clone());
        Ok(lease.clone())
    }
    fn update(&self, lease: &Value) -> edgekcm::Result<Value> {
        *self.0.lock().unwrap() = Some(lease.clone());
        Ok(lease.clone())
    }
}

#[test]
fn leader_gauge_follows_the_lease() {
    use edgekcm::leader::{LeaderElectionConfig, LeaderElector};
    use std::sync::atomic::{AtomicBool, Ordering};
    let name = unique("gauge-lease");
    let series = |v: &str| format!("leader_election_master_status{{name=\"{name}\"}} {v}\n");
    let le = LeaderElector::new(
        LeaderElectionConfig {
            lock_namespace: "kube-system".into(),
            lock_name: name.clone(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_millis(100),
        },
        Arc::new(OneLease(std::sync::Mutex::new(None))),
    );
    // A standby reports 0 from the start, as client-go's elector.
    assert!(edgekcm::metrics::render().contains(&series("0")));
    let stop = Arc::new(AtomicBool::new(false));
    let (le2, stop2) = (le.clone(), stop.clone());
    let t = std::thread::spawn(move || le2.run(|| {}, &stop2));
    eventually(Duration::from_secs(10), "leading", || {
        edgekcm::metrics::render()
            .contains(&series("1"))
            .then_some(())
    });
    stop.store(true, Ordering::SeqCst);
    t.join().unwrap();
    assert!(edgekcm::metrics::render().contains(&series("0")));
    let e = parse_exposition(&edgekcm::metrics::render()).unwrap();
    assert_eq!(
        e.families["leader_election_master_status"].1,
        "gauge".to_string()
    );
}
