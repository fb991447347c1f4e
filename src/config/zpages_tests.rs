use super::*;

const K: &str = "/tmp/k8s-lead";

/// The command line the fixtures were recorded with (tests/fixtures/flagz/README.md).
fn fixture_config() -> Config {
    let args: Vec<String> = [
        format!("--kubeconfig={K}/controller-manager.conf"),
        "--secure-port=10357".into(),
        "--leader-elect=false".into(),
        "--controllers=serviceaccount-controller,-ttl-controller".into(),
        format!("--authentication-kubeconfig={K}/admin.conf"),
        format!("--authorization-kubeconfig={K}/admin.conf"),
        "--node-monitor-grace-period=90s".into(),
        "--kube-api-qps=25.5".into(),
        "--feature-gates=HPAScaleToZero=false,AllAlpha=false".into(),
        "--v=2".into(),
        "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".into(),
        "--min-resync-period=90m".into(),
    ]
    .into();
    match crate::cli::parse(&args).expect("parse") {
        crate::cli::Command::Run(c) => *c,
        _ => panic!("not a run"),
    }
}

fn fixture(name: &str) -> String {
    let p = format!("{}/tests/fixtures/flagz/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn get(accept: Option<&str>) -> Request {
    let mut r = Request {
        method: "GET".into(),
        path: FLAGZ_PATH.into(),
        ..Default::default()
    };
    if let Some(a) = accept {
        r.headers.push(("accept".into(), a.into()));
    }
    r
}

fn body(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

#[test]
fn flagz_json_is_upstreams_for_the_same_command_line() {
    let mut flags = flag_values(&fixture_config());
    // edgekcm's own flag, not in upstream's page.
    assert_eq!(
        flags.remove("node-autonomy-duration").as_deref(),
        Some("0s")
    );
    let r = flagz(
        &flags,
        &get(Some("application/json;as=Flagz;v=v1alpha1;g=config.k8s.io")),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.content_type,
        "application/json;g=config.k8s.io;v=v1alpha1;as=Flagz"
    );
    assert!(r.headers.iter().any(|(k, v)| k == "Warning"
        && v == "299 - \"This version of the flagz endpoint is deprecated. Please use a newer version.\""));
    assert_eq!(body(&r), fixture("flagz-v1alpha1.json"));
}

#[test]
fn every_flag_of_the_tables_is_on_the_page_with_its_default() {
    let page: BTreeMap<&str, &str> = defaults().collect();
    assert_eq!(page.len(), 150);
    let known = crate::cli::current_flags();
    for (name, default) in &known {
        if *name == "node-autonomy-duration" {
            continue;
        }
        let Some(want) = page.get(name) else {
            panic!("--{name} is not among v1.37's flags");
        };
        if let Some(d) = default {
            assert_eq!(&render(name, want, &[d.to_string()]), want, "--{name}");
        }
    }
    for name in page.keys() {
        assert!(
            known.iter().any(|(n, _)| n == name),
            "--{name} of v1.37 is not in the flag tables"
        );
    }
}

#[test]
fn values_print_as_pflag_prints_them() {
    let r = |name: &str, default: &str, given: &[&str]| {
        let g: Vec<String> = given.iter().map(|s| s.to_string()).collect();
        render(name, default, &g)
    };
    assert_eq!(r("x", "50s", &["90s"]), "1m30s");
    assert_eq!(r("x", "12h0m0s", &["90m"]), "1h30m0s");
    assert_eq!(r("x", "0s", &["-5s"]), "-5s");
    assert_eq!(r("x", "20", &["25.5"]), "25.5");
    assert_eq!(r("x", "0.1", &["2"]), "2");
    assert_eq!(r("x", "0.1", &["1e7"]), "1e+07");
    assert_eq!(r("x", "5", &["0x10"]), "16");
    assert_eq!(r("x", "false", &["1"]), "true");
    assert_eq!(r("x", "[]", &["a,b", "c"]), "[a,b,c]");
    assert_eq!(r("x", "0", &["1Mi"]), "1Mi");
    assert_eq!(
        r("feature-gates", "", &["A=true,B=false"]),
        ":A=true,:B=false"
    );
}

#[test]
fn negotiation_as_upstream() {
    use Wanted::*;
    let n = |a: &str| negotiate(Some(a), "Flagz");
    assert_eq!(negotiate(None, "Flagz"), Text);
    assert_eq!(n(" "), Text);
    assert_eq!(n("text/plain"), Text);
    assert_eq!(n("*/*"), Text);
    assert_eq!(n("application/json"), NotAcceptable);
    assert_eq!(n("text/html"), NotAcceptable);
    assert_eq!(n("application/yaml"), NotAcceptable);
    assert_eq!(
        n("application/json;as=Flagz;v=v1;g=config.k8s.io"),
        NotAcceptable
    );
    assert_eq!(
        n("application/json;as=Statusz;v=v1beta1;g=config.k8s.io"),
        NotAcceptable
    );
    assert_eq!(
        n("application/json;g=config.k8s.io;v=v1alpha1;as=Flagz"),
        Json("v1alpha1")
    );
    assert_eq!(
        n("application/yaml;as=Flagz;v=v1beta1;g=config.k8s.io"),
        Yaml("v1beta1")
    );
    assert_eq!(
        n("application/json;as=Flagz;v=v1alpha1;g=config.k8s.io, text/plain"),
        Json("v1alpha1")
    );
    assert_eq!(
        n("text/plain;q=0.5, application/json;as=Flagz;v=v1beta1;g=config.k8s.io"),
        Json("v1beta1")
    );
    let r = flagz(&BTreeMap::new(), &get(Some("text/html")));
    assert_eq!(
        (r.status, r.content_type.as_str()),
        (406, "application/json")
    );
    assert_eq!(r.body.len(), 237, "upstream's Content-Length");
}

#[test]
fn the_text_page_has_upstreams_layout_with_one_of_its_delimiters() {
    let mut flags = BTreeMap::new();
    flags.insert("a", "1".to_string());
    flags.insert("b", String::new());
    for _ in 0..20 {
        let t = body(&flagz(&flags, &get(None)));
        let head = format!("\nkube-controller-manager flagz\n{WARNING}\n");
        let rest = t.strip_prefix(&head).expect("header");
        assert!(
            DELIMITERS.iter().any(|d| rest == format!("a{d}1\nb{d}\n")),
            "{rest:?}"
        );
    }
}

#[test]
fn statusz_matches_upstreams_documents() {
    let started = crate::compat::timefmt::parse_rfc3339("2026-11-29T17:52:27Z").unwrap();
    let s = Status {
        started,
        now: started + std::time::Duration::from_secs(9),
        emulated: Some("1.37".into()),
        paths: vec!["/configz", "/flagz", "/healthz", "/metrics"],
    };
    let json = statusz(
        &s,
        &get(Some(
            "application/json;as=Statusz;v=v1alpha1;g=config.k8s.io",
        )),
    );
    // Upstream's, but for the Go version and the binary version.
    let want = fixture("statusz-v1alpha1.json")
        .replace("\"goVersion\": \"go1.26.8\"", "\"goVersion\": \"\"")
        .replace(
            "\"binaryVersion\": \"1.37.2\"",
            "\"binaryVersion\": \"1.37\"",
        );
    assert_eq!(body(&json), want);
    // The recorded text page used ": " as its delimiter.
    let recorded = fixture("statusz.txt")
        .replace("go1.26.8", "")
        .replace("1.37.2", "1.37");
    let text = body(&statusz(&s, &get(None)));
    let normalised = DELIMITERS.iter().find_map(|d| {
        let t = text
            .replace(&format!("Started{d} "), "Started:  ")
            .replace(&format!("Up{d} "), "Up:  ")
            .replace(&format!("Go version{d} "), "Go version:  ")
            .replace(&format!("Binary version{d} "), "Binary version:  ")
            .replace(&format!("Emulation version{d} "), "Emulation version:  ")
            .replace(&format!("Paths{d} "), "Paths:  ");
        (t == recorded).then_some(t)
    });
    assert!(normalised.is_some(), "{text:?}\nvs\n{recorded:?}");
}

#[test]
fn flagz_yaml_is_upstreams_for_the_same_command_line() {
    let mut flags = flag_values(&fixture_config());
    flags.remove("node-autonomy-duration");
    let r = flagz(
        &flags,
        &get(Some("application/yaml;as=Flagz;v=v1beta1;g=config.k8s.io")),
    );
    assert_eq!(
        r.content_type,
        "application/yaml;g=config.k8s.io;v=v1beta1;as=Flagz"
    );
    let want = fixture("flagz-v1beta1.yaml");
    for (a, b) in body(&r).lines().zip(want.lines()) {
        assert_eq!(a, b);
    }
    assert_eq!(body(&r), want);
}
