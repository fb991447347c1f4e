//! Tests of Go's number format, the exposition's sorting and escaping, `/proc` parsing and
//! the recorded series.

use super::*;
use std::time::Duration;

#[test]
fn go_float_format() {
    let cases: &[(f64, &str)] = &[
        (0.0, "0"),
        (1.0, "1"),
        (-1.0, "-1"),
        (11.0, "11"),
        (20000.0, "20000"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (67764224.0, "6.7764224e+07"),
        (1.79526508126e9, "1.79526508126e+09"),
        (0.98, "0.98"),
        (0.005, "0.005"),
        (0.0001, "0.0001"),
        (1e-5, "1e-05"),
        (9.999999999999999e-06, "9.999999999999999e-06"),
        (1e-8, "1e-08"),
        (2.592e6, "2.592e+06"),
        (0.102573786, "0.102573786"),
        (u64::MAX as f64, "1.8446744073709552e+19"),
        (-0.5, "-0.5"),
        (f64::INFINITY, "+Inf"),
        (f64::NEG_INFINITY, "-Inf"),
        (f64::NAN, "NaN"),
        (12.5, "12.5"),
        (100.0, "100"),
    ];
    for (v, want) in cases {
        assert_eq!(format_float(*v), *want, "{v:e}");
    }
}

#[test]
fn host_label() {
    assert_eq!(host_of("https://127.0.0.1:6443"), "127.0.0.1:6443");
    assert_eq!(host_of("https://k8s.example/base/"), "k8s.example");
    assert_eq!(host_of("http://u:p@h:1/x"), "h:1");
    assert_eq!(host_of("h:2"), "h:2");
}

#[test]
fn proc_parsing() {
    let stat = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 \
                7 0 12345 1048576 300 18446744073709551615";
    let p = parse_proc_stat(stat, Some(1_700_000_000.0)).unwrap();
    assert_eq!(p.cpu_seconds, 3.0);
    assert_eq!(p.virtual_bytes, 1048576.0);
    assert_eq!(p.start_time_seconds, Some(1_700_000_123.45));
    assert!(parse_proc_stat("garbage", None).is_none());
    let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                  Max open files            1024                 1048576              files     \n\
                  Max address space         unlimited            unlimited            bytes     \n";
    assert_eq!(parse_limit(limits, "Max open files"), Some(1024.0));
    assert_eq!(
        parse_limit(limits, "Max address space"),
        Some(u64::MAX as f64)
    );
    assert_eq!(parse_limit(limits, "Max nothing"), None);
}

#[test]
fn encoding_sorts_and_escapes() {
    let mut g = Family::new("b_gauge", "Help with \\ and\nnewline.", MetricType::Gauge);
    g.push(&[("z", "2"), ("a", "x\"y")], 1.5);
    g.push(&[("z", "1"), ("a", "x\"y")], 2.0);
    g.push(&[("a", "a\\b\nc"), ("z", "0")], 0.0);
    let mut h = Family::new("a_hist", "H.", MetricType::Histogram);
    let mut hist = Histogram::new(&[0.1, 1.0]);
    hist.observe(0.05);
    hist.observe(0.5);
    hist.observe(5.0);
    h.push_histogram(&[("name", "q")], hist);
    let empty = Family::new("c_empty", "nothing", MetricType::Counter);
    let text = encode(&[g, h, empty]);
    assert_eq!(
        text,
        "# HELP a_hist H.\n# TYPE a_hist histogram\n\
         a_hist_bucket{name=\"q\",le=\"0.1\"} 1\n\
         a_hist_bucket{name=\"q\",le=\"1\"} 2\n\
         a_hist_bucket{name=\"q\",le=\"+Inf\"} 3\n\
         a_hist_sum{name=\"q\"} 5.55\n\
         a_hist_count{name=\"q\"} 3\n\
         # HELP b_gauge Help with \\\\ and\\nnewline.\n# TYPE b_gauge gauge\n\
         b_gauge{a=\"a\\\\b\\nc\",z=\"0\"} 0\n\
         b_gauge{a=\"x\\\"y\",z=\"1\"} 2\n\
         b_gauge{a=\"x\\\"y\",z=\"2\"} 1.5\n"
    );
}

#[test]
fn rest_and_leader_series() {
    rest_request_result("https://unit-test-host:1", "GET", Some(200));
    rest_request_result("https://unit-test-host:1", "GET", Some(200));
    rest_request_result("https://unit-test-host:1", "POST", None);
    rest_request_latency("https://unit-test-host:1", "GET", Duration::from_millis(30));
    set_leader("unit-test-lease", true);
    let text = render();
    assert!(text.contains(
        "rest_client_requests_total{code=\"200\",host=\"unit-test-host:1\",method=\"GET\"} 2\n"
    ));
    assert!(text.contains(
        "rest_client_requests_total{code=\"<error>\",host=\"unit-test-host:1\",method=\"POST\"} 1\n"
    ));
    assert!(text.contains(
        "rest_client_request_duration_seconds_bucket{host=\"unit-test-host:1\",verb=\"GET\",le=\"0.025\"} 0\n\
         rest_client_request_duration_seconds_bucket{host=\"unit-test-host:1\",verb=\"GET\",le=\"0.1\"} 1\n"
    ));
    assert!(text.contains("leader_election_master_status{name=\"unit-test-lease\"} 1\n"));
    assert!(text.contains("# TYPE process_cpu_seconds_total counter\n"));
    assert!(
        text.contains(
            "# HELP workqueue_adds_total [ALPHA] Total number of adds handled by workqueue\n"
        ) || !text.contains("workqueue_adds_total{")
    );
}
