//! The command line (`cli`, `config`, `certs::parse_args`): random argv made of real flag
//! names in every spelling pflag allows, with garbage values. A command line gives a command
//! or an error with a message, the same one every time; flags set to their documented
//! defaults change nothing; Go durations parse without overflow and print back to
//! themselves.

use std::time::Duration;

use super::Gen;
use crate::cli::{self, Command};
use crate::compat::parse::{format_go_duration, parse_go_duration};
use crate::config::CONCURRENT_SYNCS;

const CERTS_FLAGS: &[&str] = &[
    "dir",
    "kubeconfig-dir",
    "server",
    "san",
    "apiserver-san",
    "ca-cert",
    "ca-key",
    "cluster-name",
    "days",
    "force",
    "help",
];

/// Values that parsers of numbers, durations, booleans, addresses and lists trip on.
const VALUES: &[&str] = &[
    "",
    " ",
    "0",
    "-0",
    "1",
    "-1",
    "+5",
    "007",
    "0x10",
    "2147483647",
    "2147483648",
    "-2147483649",
    "4294967296",
    "18446744073709551616",
    "99999999999999999999999999999999999999999",
    "1e39",
    "-1e39",
    "3.4028236e38",
    "1e-50",
    "NaN",
    "inf",
    "-inf",
    "0.5",
    "1.",
    ".5",
    "true",
    "false",
    "T",
    "yes",
    "raw",
    "0s",
    "1h",
    "1.5h",
    "-1s",
    "1h1h1h",
    "2562047h47m16.854775807s",
    "2562047h47m16.854775808s",
    "0.999999999999999999999999999999h",
    "9999999999999999999h",
    "1.9999999999999999999999999999999999999h",
    ".s",
    "1µs",
    "1μs",
    "5x",
    "10.0.0.0/8",
    "10.0.0.0/33",
    "10.0.0.0/-1",
    "10.0.0.1/8",
    "fd00::/48",
    "fd00::/129",
    "::/0",
    "10.0.0.0/8,fd00::/48",
    "10.0.0.0/8,10.1.0.0/16,fd00::/48",
    ",",
    ",,,",
    "\"a\",\"b\"",
    "0.0.0.0",
    "::",
    "::ffff:1.2.3.4",
    "300.1.1.1",
    "[::1]",
    "*",
    "-*",
    "*,-garbagecollector",
    "foo,-bar,*",
    "deployment,replicaset,-namespace",
    "leases",
    "endpoints",
    "https://10.0.0.1:6443",
    "https://",
    "https://[::1",
    "http://x y",
    "/tmp/x",
    "--",
    "--kubeconfig",
    "-v",
    "=",
    "a=b=c",
];

fn spelled(g: &mut Gen, name: &str) -> String {
    let mut n = name.to_string();
    if g.one_in(3) {
        n = n
            .chars()
            .map(|c| if c == '-' && g.one_in(2) { '_' } else { c })
            .collect();
    }
    n
}

fn value(g: &mut Gen) -> String {
    let v = g.pick(VALUES);
    match g.below(6) {
        0 => g.unicode(12),
        1 => g.mutate_str(v, &[b",", b"/", b".", b"h", b"s", b"-", b"="]),
        _ => v.to_string(),
    }
}

fn random_argv(g: &mut Gen, names: &[&'static str], bools: &[&'static str]) -> Vec<String> {
    let mut argv = Vec::new();
    match g.below(8) {
        0 => argv.push("run".to_string()),
        1 => argv.push(g.pick(&["certs", "nope", "", "-", "RUN"]).to_string()),
        _ => {}
    }
    let certs = argv.first().is_some_and(|a| a == "certs");
    for _ in 0..g.size(10) {
        let name = if certs && !g.one_in(4) {
            g.pick(CERTS_FLAGS)
        } else if g.one_in(12) {
            g.pick(&["no-such-flag", "kubeconfigx", "", "-", "h", "v"])
        } else if g.one_in(3) {
            g.pick(bools)
        } else {
            g.pick(names)
        };
        let name = spelled(g, name);
        match g.below(10) {
            0..=3 => argv.push(format!("--{name}={}", value(g))),
            4..=6 => {
                argv.push(format!("--{name}"));
                argv.push(value(g));
            }
            7 => argv.push(format!("--{name}")),
            8 => argv.push(
                g.pick(&[
                    "-v", "-v=3", "-v3", "-vx", "-h", "-h=false", "-x", "-", "--", "---v", "--=1",
                ])
                .to_string(),
            ),
            _ => argv.push(g.unicode(10)),
        }
    }
    argv
}

fn check(args: &[String]) -> Result<Command, String> {
    let first = cli::parse(args).map_err(|e| e.to_string());
    // Deterministic, and a message in every error.
    let again = cli::parse(args).map_err(|e| e.to_string());
    assert_eq!(first, again);
    if let Err(msg) = &first {
        assert!(!msg.trim().is_empty());
        assert!(!msg.contains("internal flag table error"), "{msg}");
    }
    first
}

fn case(g: &mut Gen) {
    let flags = cli::known_flags();
    let names: Vec<&'static str> = flags.iter().map(|f| f.0).collect();
    let bools: Vec<&'static str> = flags.iter().filter(|f| f.1).map(|f| f.0).collect();
    match g.below(5) {
        0..=2 => {
            let argv = random_argv(g, &names, &bools);
            g.note(&argv);
            let _ = check(&argv);
        }
        3 => {
            // Acted-on flags given their documented defaults: the same configuration as none.
            let mut argv = Vec::new();
            let acted: Vec<_> = flags
                .iter()
                .filter_map(|f| Some((f.0, f.1, f.2?)))
                .collect();
            let mut given = Vec::new();
            for _ in 0..g.size(8) {
                let (name, boolean, default) = g.pick(&acted);
                // List flags append when repeated (as pflag's string slices): once each.
                if given.contains(&name) {
                    continue;
                }
                given.push(name);
                let name = spelled(g, name);
                if boolean && default == "true" && g.one_in(2) {
                    argv.push(format!("--{name}"));
                } else if boolean || g.one_in(2) {
                    argv.push(format!("--{name}={default}"));
                } else {
                    argv.push(format!("--{name}"));
                    argv.push(default.to_string());
                }
            }
            for _ in 0..g.below(3) {
                let (name, default) = g.pick(CONCURRENT_SYNCS);
                argv.push(format!("--{}={default}", spelled(g, name)));
            }
            g.note(&argv);
            let config = |c: Command| match c {
                Command::Run(c) => *c,
                other => panic!("not a run: {other:?}"),
            };
            let mut got = config(check(&argv).unwrap_or_else(|e| panic!("defaults refused: {e}")));
            let mut none = config(check(&[]).unwrap());
            // `/configz` shows the same, though the text of the flags given is kept.
            assert_eq!(
                crate::config::componentconfig::document(&got),
                crate::config::componentconfig::document(&none)
            );
            got.given.clear();
            none.given.clear();
            // As is the command line `/flagz` shows.
            got.command_line.clear();
            none.command_line.clear();
            let (got, none) = (format!("{got:#?}"), format!("{none:#?}"));
            let diff: Vec<_> = got
                .lines()
                .zip(none.lines())
                .filter(|(a, b)| a != b)
                .collect();
            assert!(
                diff.is_empty() && got == none,
                "with defaults / without: {diff:?}"
            );
        }
        _ => durations(g),
    }
}

fn durations(g: &mut Gen) {
    const PARTS: &[&str] = &[
        "0",
        "1",
        "9",
        "15",
        "00",
        ".",
        ".5",
        "5.",
        "999999999999999999999",
        "ns",
        "us",
        "µs",
        "μs",
        "ms",
        "s",
        "m",
        "h",
        "-",
        "+",
        "x",
        "9223372036854775807",
        "0.000000001",
        "999999999999999999999999999999",
    ];
    let text: String = if g.one_in(3) {
        g.unicode(16)
    } else {
        (0..g.size(8)).map(|_| g.pick(PARTS)).collect()
    };
    g.note(&text);
    match parse_go_duration(&text) {
        Ok(d) => {
            assert!(d.as_nanos() <= i64::MAX as u128, "{d:?}");
            let printed = format_go_duration(d);
            assert_eq!(parse_go_duration(&printed), Ok(d), "{printed}");
        }
        Err(e) => assert!(
            e.starts_with("time: ") || e.starts_with("negative duration"),
            "{e}"
        ),
    }
    // Every whole number of nanoseconds Go can hold prints back to itself.
    let d = Duration::from_nanos(g.rng.u64(..=i64::MAX as u64) >> g.below(64));
    assert_eq!(parse_go_duration(&format_go_duration(d)), Ok(d));
}

#[test]
fn fuzz_command_line() {
    super::run("command-line", 1000, case);
}
