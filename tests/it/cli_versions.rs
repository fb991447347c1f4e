//! `--emulated-version`, `--min-compatibility-version` and `--feature-gates` on the command
//! line, read and refused as kube-controller-manager v1.37 reads and refuses them.

use edgekcm::cli::{parse, Command};
use edgekcm::config::Config;

fn run(s: &str) -> Config {
    match parse(&s.split_whitespace().map(str::to_string).collect::<Vec<_>>()) {
        Ok(Command::Run(c)) => *c,
        other => panic!("{s}: expected Run, got {other:?}"),
    }
}

fn err(s: &str) -> String {
    match parse(&s.split_whitespace().map(str::to_string).collect::<Vec<_>>()) {
        Err(e) => e.to_string(),
        Ok(other) => panic!("{s}: expected an error, got {other:?}"),
    }
}

#[test]
fn emulated_version_as_v1_37_reads_it() {
    use edgekcm::config::version::MajorMinor;
    let c = run("--emulated-version=1.35");
    assert_eq!(c.version_flags.emulated, Some(MajorMinor::kube(35)));
    assert_eq!(c.emulation.version, MajorMinor::kube(35));
    assert_eq!(c.gates.emulated, MajorMinor::kube(35));
    let c = run("--emulated-version kube=1.34 --min-compatibility-version=1.34");
    assert_eq!(c.emulation.min_compatibility, MajorMinor::kube(34));
    // Not given: v1.37 until the API server's version decides.
    assert_eq!(run("").emulation.version, MajorMinor::kube(37));
    for (line, want) in [
        (
            "--emulated-version=1.33",
            "[emulation version 1.33 is not between [1.34, 1.37.0], minCompatibilityVersion version 1.34 is not between [1.34, 1.33]]",
        ),
        ("--emulated-version=1.38", "emulation version 1.38 is not between [1.34, 1.37.0]"),
        ("--emulated-version=kube=1.35.1", "patch version not allowed, got: kube=1.35.1"),
        ("--emulated-version=foo=1.35", "component not registered: foo"),
        ("--emulated-version=1.35,1.36", "duplicate version flag, kube=1.35 and kube=1.36"),
        (
            "--emulated-version=kube=1.35 --emulated-version=kube=1.36",
            "duplicate version flag, kube=1.35 and kube=1.36",
        ),
        ("--emulated-version=abc", "could not parse \"abc\" as version"),
        (
            "--emulated-version=1.35 --min-compatibility-version=1.36",
            "minCompatibilityVersion version 1.36 is not between [1.34, 1.35]",
        ),
    ] {
        assert_eq!(err(line), want, "{line}");
    }
}

#[test]
fn feature_gates_as_v1_37_reads_them() {
    let c = run("--feature-gates=StorageVersionMigrator=false");
    assert!(!c.gates.enabled("StorageVersionMigrator"));
    assert!(run("").gates.enabled("StorageVersionMigrator"));
    assert!(!run("--emulated-version=1.36")
        .gates
        .enabled("StorageVersionMigrator"));
    for (line, want) in [
        ("--feature-gates=Foo=true", "unrecognized feature gate: Foo"),
        ("--feature-gates=kube:Foo=true", "unrecognized feature gate: Foo"),
        ("--feature-gates=wardle:Foo=true", "component not registered: wardle"),
        ("--feature-gates=Foo", "missing bool value for Foo"),
        (
            "--feature-gates=JobManagedBy=maybe",
            "invalid value of JobManagedBy=maybe, err: strconv.ParseBool: parsing \"maybe\": invalid syntax",
        ),
        (
            "--feature-gates=Foo=true,kube:Bar=false",
            "set kube feature gates with default empty prefix or kube: prefix consistently, do not mix use",
        ),
        (
            "--emulated-version=1.37 --feature-gates=JobManagedBy=false",
            "cannot set feature gate JobManagedBy to false, feature is locked to true",
        ),
        (
            "--emulated-version=1.35 --feature-gates=APIServerWebhookAuthenticationToken=true",
            "cannot set feature gate APIServerWebhookAuthenticationToken to true, feature is PreAlpha at emulated version 1.35, min compatibility version 1.34",
        ),
    ] {
        assert_eq!(err(line), want, "{line}");
    }
    // Locked from 1.35 on: without --emulated-version the API server's version decides at
    // start, so the command line is taken.
    assert!(!run("--feature-gates=JobManagedBy=false")
        .gates
        .enabled("JobManagedBy"));
    assert!(
        !run("--emulated-version=1.34 --feature-gates=JobManagedBy=false")
            .gates
            .enabled("JobManagedBy")
    );
}
