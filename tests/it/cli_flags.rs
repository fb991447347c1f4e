//! Real kube-controller-manager command lines must parse unchanged.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use edgekcm::cli::{parse, Command};
use edgekcm::config::Config;

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn run(s: &str) -> Config {
    match parse(&args(s)) {
        Ok(Command::Run(c)) => *c,
        other => panic!("{s}: expected Run, got {other:?}"),
    }
}

fn err(s: &str) -> String {
    match parse(&args(s)) {
        Err(e) => e.to_string(),
        Ok(other) => panic!("{s}: expected an error, got {other:?}"),
    }
}

fn p(s: &str) -> Option<PathBuf> {
    Some(PathBuf::from(s))
}

const H: u64 = 3600;

#[test]
fn kubeadm_v1_28() {
    let c = run("--allocate-node-cidrs=true \
        --authentication-kubeconfig=/etc/kubernetes/controller-manager.conf \
        --authorization-kubeconfig=/etc/kubernetes/controller-manager.conf \
        --bind-address=127.0.0.1 \
        --client-ca-file=/etc/kubernetes/pki/ca.crt \
        --cluster-cidr=10.244.0.0/16 \
        --cluster-name=kubernetes \
        --cluster-signing-cert-file=/etc/kubernetes/pki/ca.crt \
        --cluster-signing-key-file=/etc/kubernetes/pki/ca.key \
        --controllers=*,bootstrapsigner,tokencleaner \
        --kubeconfig=/etc/kubernetes/controller-manager.conf \
        --leader-elect=true \
        --requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt \
        --root-ca-file=/etc/kubernetes/pki/ca.crt \
        --service-account-private-key-file=/etc/kubernetes/pki/sa.key \
        --service-cluster-ip-range=10.96.0.0/12 \
        --use-service-account-credentials=true");
    assert!(c.kube_cloud_shared.allocate_node_cidrs);
    assert_eq!(
        c.authentication_kubeconfig,
        p("/etc/kubernetes/controller-manager.conf")
    );
    assert_eq!(
        c.authorization_kubeconfig,
        p("/etc/kubernetes/controller-manager.conf")
    );
    assert_eq!(c.bind_address, "127.0.0.1".parse::<IpAddr>().unwrap());
    assert_eq!(c.client_ca_file, p("/etc/kubernetes/pki/ca.crt"));
    assert_eq!(c.kube_cloud_shared.cluster_cidrs.len(), 1);
    assert_eq!(
        c.kube_cloud_shared.cluster_cidrs[0].to_string(),
        "10.244.0.0/16"
    );
    assert_eq!(c.kube_cloud_shared.cluster_name, "kubernetes");
    assert_eq!(c.cluster_signing.cert_file, p("/etc/kubernetes/pki/ca.crt"));
    assert_eq!(c.cluster_signing.key_file, p("/etc/kubernetes/pki/ca.key"));
    assert!(c.cluster_signing.enabled());
    assert!(c.controllers.is_enabled("bootstrap-signer-controller"));
    assert!(c.controllers.is_enabled("token-cleaner-controller"));
    assert!(c.controllers.is_enabled("deployment-controller"));
    assert_eq!(c.kubeconfig, p("/etc/kubernetes/controller-manager.conf"));
    assert!(c.leader_election.enabled);
    assert_eq!(
        c.sa_controller.root_ca_file,
        p("/etc/kubernetes/pki/ca.crt")
    );
    assert_eq!(
        c.sa_controller.service_account_private_key_file,
        p("/etc/kubernetes/pki/sa.key")
    );
    assert_eq!(
        c.node_ipam.service_cluster_ip_ranges[0].to_string(),
        "10.96.0.0/12"
    );
    assert!(c.use_service_account_credentials);
    assert_eq!(c.secure_port, 10257);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(
        c.requestheader_client_ca_file,
        p("/etc/kubernetes/pki/front-proxy-ca.crt")
    );
}

#[test]
fn kubeadm_without_pod_subnet() {
    let c = run(
        "--authentication-kubeconfig=/etc/kubernetes/controller-manager.conf \
        --authorization-kubeconfig=/etc/kubernetes/controller-manager.conf \
        --bind-address=127.0.0.1 --client-ca-file=/etc/kubernetes/pki/ca.crt \
        --cluster-name=kubernetes --cluster-signing-cert-file=/etc/kubernetes/pki/ca.crt \
        --cluster-signing-key-file=/etc/kubernetes/pki/ca.key \
        --controllers=*,bootstrapsigner,tokencleaner \
        --kubeconfig=/etc/kubernetes/controller-manager.conf --leader-elect=true \
        --requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt \
        --root-ca-file=/etc/kubernetes/pki/ca.crt \
        --service-account-private-key-file=/etc/kubernetes/pki/sa.key \
        --use-service-account-credentials=true",
    );
    assert!(!c.kube_cloud_shared.allocate_node_cidrs);
    assert!(c.kube_cloud_shared.cluster_cidrs.is_empty());
}

const K3S_1_20: &str = "--kubeconfig=/var/lib/rancher/k3s/server/cred/controller.kubeconfig \
    --service-account-private-key-file=/var/lib/rancher/k3s/server/tls/service.key \
    --allocate-node-cidrs=true --cluster-cidr=10.42.0.0/16 \
    --root-ca-file=/var/lib/rancher/k3s/server/tls/server-ca.crt \
    --port=10252 --address=127.0.0.1 --bind-address=127.0.0.1 --secure-port=0 --profiling=false \
    --use-service-account-credentials=true \
    --cluster-signing-kube-apiserver-client-cert-file=/tls/client-ca.crt \
    --cluster-signing-kube-apiserver-client-key-file=/tls/client-ca.key \
    --cluster-signing-kubelet-client-cert-file=/tls/client-ca.crt \
    --cluster-signing-kubelet-client-key-file=/tls/client-ca.key \
    --cluster-signing-kubelet-serving-cert-file=/tls/server-ca.crt \
    --cluster-signing-kubelet-serving-key-file=/tls/server-ca.key \
    --cluster-signing-legacy-unknown-cert-file=/tls/client-ca.crt \
    --cluster-signing-legacy-unknown-key-file=/tls/client-ca.key \
    --leader-elect=false \
    --configure-cloud-routes=false --controllers=*,-ttl";

fn check_k3s(c: &Config) {
    assert_eq!(
        c.kubeconfig,
        p("/var/lib/rancher/k3s/server/cred/controller.kubeconfig")
    );
    assert!(c.kube_cloud_shared.allocate_node_cidrs);
    assert_eq!(
        c.kube_cloud_shared.cluster_cidrs[0].to_string(),
        "10.42.0.0/16"
    );
    assert_eq!(c.secure_port, 0);
    assert_eq!(c.bind_address, "127.0.0.1".parse::<IpAddr>().unwrap());
    assert!(c.use_service_account_credentials);
    assert!(!c.leader_election.enabled);
    let cs = &c.cluster_signing;
    assert_eq!(cs.cert_file, None);
    assert!(cs.enabled());
    let f = cs.files_for(&cs.kubelet_serving).unwrap();
    assert_eq!(f.cert_file, PathBuf::from("/tls/server-ca.crt"));
    assert_eq!(f.key_file, PathBuf::from("/tls/server-ca.key"));
    let f = cs.files_for(&cs.kube_apiserver_client).unwrap();
    assert_eq!(f.cert_file, PathBuf::from("/tls/client-ca.crt"));
    assert!(!c.controllers.is_enabled("ttl-controller"));
    assert!(c.controllers.is_enabled("node-ipam-controller"));
    assert!(!c.controllers.is_enabled("bootstrap-signer-controller"));
    assert_eq!(
        c.warnings,
        vec![
            "flag --port was removed upstream (kube-controller-manager 1.24) and is ignored",
            "flag --address was removed upstream (kube-controller-manager 1.24) and is ignored",
            "flag --profiling only turns /debug/flags/v on or off here; edgekcm does not serve /debug/pprof",
            "flag --configure-cloud-routes is accepted for compatibility; edgekcm does not act on it yet",
        ]
    );
}

#[test]
fn k3s_1_20_era() {
    check_k3s(&run(K3S_1_20));
    // Its original `--controllers` named the cloud controllers v1.37 no longer has: refused
    // as v1.37 refuses them.
    let e = err(&K3S_1_20.replace("*,-ttl", "*,-service,-route,-cloud-node-lifecycle"));
    assert!(
        e.starts_with("[\"service\" is not in the list of known controllers, \"route\" is not in the list of known controllers, \"cloud-node-lifecycle\" is not in the list of known controllers]\n"),
        "{e}"
    );
}

#[test]
fn k3s_1_20_era_space_separated() {
    // The same line with `--flag value` for every valued flag; booleans keep `=`.
    let spaced: Vec<String> = args(K3S_1_20)
        .into_iter()
        .flat_map(|a| {
            let bools = [
                "--allocate-node-cidrs",
                "--profiling",
                "--use-service-account-credentials",
                "--leader-elect",
                "--configure-cloud-routes",
            ];
            match a.split_once('=') {
                Some((n, v)) if !bools.contains(&n) => vec![n.to_string(), v.to_string()],
                _ => vec![a],
            }
        })
        .collect();
    match parse(&spaced) {
        Ok(Command::Run(c)) => check_k3s(&c),
        other => panic!("{other:?}"),
    }
}

#[test]
fn k3s_later_secure_port() {
    let c = run(
        "--kubeconfig=/var/lib/rancher/k3s/server/cred/controller.kubeconfig \
        --authentication-kubeconfig=/var/lib/rancher/k3s/server/cred/controller.kubeconfig \
        --authorization-kubeconfig=/var/lib/rancher/k3s/server/cred/controller.kubeconfig \
        --bind-address=127.0.0.1 --secure-port=10257 --profiling=false \
        --allocate-node-cidrs=true --cluster-cidr=10.42.0.0/16,2001:cafe:42::/56 \
        --node-cidr-mask-size-ipv4=24 --node-cidr-mask-size-ipv6=64 \
        --cluster-signing-kubelet-serving-cert-file=/tls/server-ca.crt \
        --cluster-signing-kubelet-serving-key-file=/tls/server-ca.key \
        --use-service-account-credentials=true --leader-elect=false \
        --controllers=*,tokencleaner",
    );
    assert_eq!(c.secure_port, 10257);
    assert_eq!(c.kube_cloud_shared.cluster_cidrs.len(), 2);
    assert_eq!(c.node_ipam.node_cidr_mask_size_ipv4, Some(24));
    assert_eq!(c.node_ipam.node_cidr_mask_size_ipv6, Some(64));
    assert!(c.controllers.is_enabled("token-cleaner-controller"));
    let cs = &c.cluster_signing;
    assert_eq!(cs.files_for(&cs.kubelet_client), None);
    assert_eq!(c.warnings.len(), 1);
}

#[test]
fn hand_written_systemd_unit() {
    let c = run("--address=0.0.0.0 --port=0 \
        --experimental-cluster-signing-duration=87600h \
        --horizontal-pod-autoscaler-use-rest-clients=true \
        --cluster-signing-cert-file=ca.pem --cluster-signing-key-file=ca-key.pem \
        --service-account-private-key-file=service-account-key.pem --v=4 \
        --leader-elect=true --kubeconfig=/etc/kubernetes/kube-controller-manager.kubeconfig \
        --root-ca-file=ca.pem --allocate-node-cidrs=true --cluster-cidr=10.200.0.0/16 \
        --service-cluster-ip-range=10.32.0.0/24 --cluster-name=kubernetes \
        --logtostderr=true --alsologtostderr --log-dir=/var/log/kubernetes");
    assert_eq!(c.cluster_signing.duration, Duration::from_secs(87600 * H));
    assert_eq!(c.verbosity, 4);
    assert_eq!(c.cluster_signing.cert_file, p("ca.pem"));
    assert_eq!(
        c.sa_controller.service_account_private_key_file,
        p("service-account-key.pem")
    );
    assert_eq!(
        c.kubeconfig,
        p("/etc/kubernetes/kube-controller-manager.kubeconfig")
    );
    assert_eq!(
        c.warnings,
        vec![
            "flag --address was removed upstream (kube-controller-manager 1.24) and is ignored",
            "flag --port was removed upstream (kube-controller-manager 1.24) and is ignored",
            "flag --experimental-cluster-signing-duration was removed upstream; its value is used for --cluster-signing-duration",
            "flag --horizontal-pod-autoscaler-use-rest-clients was removed upstream and is ignored",
            "flag --logtostderr was removed upstream (kube-controller-manager 1.26) and is ignored",
            "flag --alsologtostderr was removed upstream (kube-controller-manager 1.26) and is ignored",
            "flag --log-dir was removed upstream (kube-controller-manager 1.26) and is ignored",
        ]
    );
}

#[test]
fn hand_written_unit_with_spaces() {
    let c = run(
        "--address 0.0.0.0 --port 0 --experimental-cluster-signing-duration 87600h \
        --horizontal-pod-autoscaler-use-rest-clients --kubeconfig /k --v 4 --leader-elect",
    );
    assert_eq!(c.cluster_signing.duration, Duration::from_secs(87600 * H));
    assert_eq!(c.kubeconfig, p("/k"));
    assert_eq!(c.verbosity, 4);
    assert!(c.leader_election.enabled);
}

#[test]
fn defaults() {
    let c = run("");
    assert_eq!(c, Config::default());
    assert_eq!(c.concurrency("concurrent-gc-syncs"), 20);
    assert_eq!(c.concurrency("concurrent-namespace-syncs"), 10);
    assert_eq!(c.concurrency("concurrent-serviceaccount-token-syncs"), 5);
    assert_eq!(c.concurrency("concurrent-rc-syncs"), 5);
    assert_eq!(c.kube_api_qps, 20.0);
    assert_eq!(c.kube_api_burst, 30);
    assert_eq!(c.leader_election.lease_duration, Duration::from_secs(15));
    assert_eq!(c.leader_election.renew_deadline, Duration::from_secs(10));
    assert_eq!(c.leader_election.retry_period, Duration::from_secs(2));
    assert_eq!(c.leader_election.resource_lock, "leases");
    assert_eq!(c.leader_election.resource_name, "kube-controller-manager");
    assert_eq!(c.leader_election.resource_namespace, "kube-system");
    assert_eq!(c.cluster_signing.duration, Duration::from_secs(8760 * H));
    assert_eq!(c.min_resync_period, Duration::from_secs(12 * H));
    assert_eq!(
        c.namespace_controller.namespace_sync_period,
        Duration::from_secs(300)
    );
    assert_eq!(
        c.node_lifecycle.node_monitor_grace_period,
        Duration::from_secs(50)
    );
    assert_eq!(
        c.node_lifecycle.node_startup_grace_period,
        Duration::from_secs(60)
    );
    assert_eq!(c.pod_gc.terminated_pod_gc_threshold, 12500);
    assert_eq!(c.secure_port, 10257);
    assert_eq!(
        c.authorization_always_allow_paths,
        vec!["/healthz", "/readyz", "/livez"]
    );
    assert!(c.garbage_collector.enable_garbage_collector);
    assert!(c.controllers.is_enabled("deployment"));
    assert!(!c.controllers.is_enabled("bootstrapsigner"));
    assert!(c.warnings.is_empty());
}

#[test]
fn underscore_names_and_concurrency() {
    let c = run(
        "--concurrent_rc_syncs=7 --concurrent-gc-syncs 3 --leader_elect=false \
        --concurrent-serviceaccount-token-syncs=9 --kube_api_qps=50.5 --kube-api-burst=100",
    );
    assert_eq!(c.concurrency("concurrent-rc-syncs"), 7);
    assert_eq!(c.concurrency("concurrent-gc-syncs"), 3);
    assert_eq!(c.concurrency("concurrent-serviceaccount-token-syncs"), 9);
    assert!(!c.leader_election.enabled);
    assert_eq!(c.kube_api_qps, 50.5);
    assert_eq!(c.kube_api_burst, 100);
    let c = run("--concurrent-rc-syncs=8");
    assert_eq!(c.concurrency("concurrent-rc-syncs"), 8);
}

#[test]
fn bool_forms() {
    assert!(run("--use-service-account-credentials").use_service_account_credentials);
    assert!(run("--use-service-account-credentials=true").use_service_account_credentials);
    assert!(run("--use-service-account-credentials=T").use_service_account_credentials);
    assert!(!run("--use-service-account-credentials=false").use_service_account_credentials);
    assert!(!run("--leader-elect=0").leader_election.enabled);
    // A boolean never consumes the next argument.
    assert_eq!(
        err("--leader-elect false"),
        "\"edgekcm\" does not take any arguments, got [\"false\"]"
    );
    let c = run("--profiling --kubeconfig /k --enable-hostpath-provisioner --master http://m:8080");
    assert_eq!(c.kubeconfig, p("/k"));
    assert_eq!(c.master.as_deref(), Some("http://m:8080"));
    assert_eq!(
        err("--leader-elect=yes"),
        "invalid argument \"yes\" for \"--leader-elect\" flag: strconv.ParseBool: parsing \"yes\": invalid syntax"
    );
    assert_eq!(
        err("--profiling=maybe"),
        "invalid argument \"maybe\" for \"--profiling\" flag: strconv.ParseBool: parsing \"maybe\": invalid syntax"
    );
}

#[test]
fn unknown_flags_and_missing_values() {
    assert_eq!(err("--foo=bar"), "unknown flag: --foo");
    assert_eq!(err("--no_such_flag"), "unknown flag: --no_such_flag");
    assert_eq!(err("--kubeconfig"), "flag needs an argument: --kubeconfig");
    assert_eq!(
        err("--leader-elect --cloud-config"),
        "flag needs an argument: --cloud-config"
    );
    assert_eq!(err("-v"), "flag needs an argument: 'v' in -v");
    assert_eq!(
        err("-kubeconfig=/x"),
        "unknown shorthand flag: 'k' in -kubeconfig=/x"
    );
    assert_eq!(err("---kubeconfig=/x"), "bad flag syntax: ---kubeconfig=/x");
    assert_eq!(
        err("--kubeconfig=/x extra"),
        "\"edgekcm\" does not take any arguments, got [\"extra\"]"
    );
}

#[test]
fn bad_values_name_the_flag() {
    assert_eq!(
        err("--leader-elect-lease-duration=abc"),
        "invalid argument \"abc\" for \"--leader-elect-lease-duration\" flag: time: invalid duration \"abc\""
    );
    assert_eq!(
        err("--min-resync-period 12"),
        "invalid argument \"12\" for \"--min-resync-period\" flag: time: missing unit in duration \"12\""
    );
    assert_eq!(
        err("--kube-api-qps=abc"),
        "invalid argument \"abc\" for \"--kube-api-qps\" flag: strconv.ParseFloat: parsing \"abc\": invalid syntax"
    );
    assert_eq!(
        err("--concurrent-gc-syncs=x"),
        "invalid argument \"x\" for \"--concurrent-gc-syncs\" flag: strconv.ParseInt: parsing \"x\": invalid syntax"
    );
    assert_eq!(
        err("--bind-address=localhost"),
        "invalid argument \"localhost\" for \"--bind-address\" flag: failed to parse IP: \"localhost\""
    );
    assert_eq!(
        err("--secure-port=70000"),
        "--secure-port 70000 must be between 0 and 65535, inclusive. 0 for turning off secure port"
    );
    assert!(err("--allocate-node-cidrs --cluster-cidr=10.0.0.0").contains("--cluster-cidr"));
    // Without allocation a bad CIDR only warns.
    let c = run("--cluster-cidr=bogus");
    assert!(c.kube_cloud_shared.cluster_cidrs.is_empty());
    assert_eq!(c.warnings.len(), 1);
}

#[test]
fn durations_in_go_syntax() {
    let c = run(
        "--leader-elect-lease-duration=1m30s --leader-elect-renew-deadline=1m \
        --leader-elect-retry-period=500ms --node-monitor-grace-period=1.5m \
        --controller-start-interval=0 --cluster-signing-duration=8760h",
    );
    assert_eq!(c.leader_election.lease_duration, Duration::from_secs(90));
    assert_eq!(c.leader_election.renew_deadline, Duration::from_secs(60));
    assert_eq!(c.leader_election.retry_period, Duration::from_millis(500));
    assert_eq!(
        c.node_lifecycle.node_monitor_grace_period,
        Duration::from_secs(90)
    );
    assert_eq!(c.controller_start_interval, Duration::ZERO);
}

#[test]
fn controllers_rules() {
    let c = run("--controllers=*");
    assert!(c.controllers.is_enabled("job-controller"));
    assert!(!c.controllers.is_enabled("token-cleaner-controller"));
    let c = run("--controllers=*,-job");
    assert!(!c.controllers.is_enabled("job-controller"));
    assert!(c.controllers.is_enabled("cronjob-controller"));
    let c = run("--controllers=deployment,replicaset-controller");
    assert!(c.controllers.is_enabled("deployment-controller"));
    assert!(c.controllers.is_enabled("replicaset-controller"));
    assert!(!c.controllers.is_enabled("job-controller"));
    assert!(!c.controllers.is_enabled("garbage-collector-controller"));
    // Later-release names are known too.
    let c = run("--controllers=*,-taint-eviction-controller,svm");
    assert!(!c.controllers.is_enabled("taint-eviction-controller"));
    assert!(c
        .controllers
        .is_enabled("storage-version-migrator-controller"));
    // Upstream's message, then the names that are accepted.
    let e = err("--controllers=*,foo");
    assert!(
        e.starts_with("\"foo\" is not in the list of known controllers\nknown controllers (short names in parentheses): bootstrap-signer-controller (bootstrapsigner),"),
        "{e}"
    );
    for name in [
        "deployment-controller (deployment)",
        "node-ipam-controller (nodeipam)",
        "ttl-controller (ttl)",
    ] {
        assert!(e.contains(name), "{name}: {e}");
    }
    assert!(err("--controllers=-nope")
        .starts_with("\"nope\" is not in the list of known controllers\n"));
    // A value may start with '-'.
    let c = run("--controllers -ttl,*");
    assert!(!c.controllers.is_enabled("ttl-controller"));
    assert!(c.controllers.is_enabled("deployment-controller"));
}

#[test]
fn repeats_last_wins_lists_append() {
    let c = run("--kubeconfig=/a --kubeconfig=/b --v=2 -v 5");
    assert_eq!(c.kubeconfig, p("/b"));
    assert_eq!(c.verbosity, 5);
    // pflag string slices append on repeat.
    let c = run("--controllers=deployment --controllers=job");
    assert!(c.controllers.is_enabled("deployment-controller"));
    assert!(c.controllers.is_enabled("job-controller"));
    assert!(!c.controllers.is_enabled("replicaset-controller"));
    let c = run(
        "--authorization-always-allow-paths=/healthz --authorization-always-allow-paths=/metrics",
    );
    assert_eq!(
        c.authorization_always_allow_paths,
        vec!["/healthz", "/metrics"]
    );
    // The old name and the new one: whichever comes last.
    let c = run("--cluster-signing-duration=1h --experimental-cluster-signing-duration=2h");
    assert_eq!(c.cluster_signing.duration, Duration::from_secs(2 * H));
    let c = run("--experimental-cluster-signing-duration=2h --cluster-signing-duration=1h");
    assert_eq!(c.cluster_signing.duration, Duration::from_secs(H));
    // One warning per ignored flag, however often it is given.
    let c = run("--profiling --profiling=false --cloud-provider=a --cloud-provider=b");
    assert_eq!(c.warnings.len(), 2);
    // --feature-gates appends too, later values winning.
    let c = run("--feature-gates=GenericWorkload=true --feature-gates=StorageVersionMigrator=false,GenericWorkload=false");
    assert!(!c.gates.enabled("GenericWorkload"));
    assert!(!c.gates.enabled("StorageVersionMigrator"));
    assert_eq!(c.gates.set.len(), 2);
}

#[test]
fn verbosity_spellings() {
    assert_eq!(run("-v=3").verbosity, 3);
    assert_eq!(run("-v 3").verbosity, 3);
    assert_eq!(run("-v3").verbosity, 3);
    assert_eq!(run("--v=3").verbosity, 3);
    assert_eq!(run("--v 3").verbosity, 3);
}

#[test]
fn help_and_version() {
    match parse(&args("--help")).unwrap() {
        Command::Help(t) => {
            assert!(t.contains("--leader-elect-lease-duration"));
            assert!(t.contains("(default 15s)"));
            assert!(t.contains("--concurrent-gc-syncs int (default 20)"));
            assert!(t.contains("accepted with a warning"));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(parse(&args("-h")).unwrap(), Command::Help(_)));
    assert!(matches!(
        parse(&args("--kubeconfig=/x --help")).unwrap(),
        Command::Help(_)
    ));
    match parse(&args("--version")).unwrap() {
        Command::Version(v) => {
            assert!(v.starts_with("edgekcm "));
            assert!(v.ends_with(
                "(kube-controller-manager v1.37 compatible, for kube-apiserver v1.34 to v1.37)"
            ));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parse(&args("--version=raw")).unwrap(),
        Command::Version(_)
    ));
    // `edgekcm help`, `edgekcm help certs` and `-V` as well.
    assert_eq!(
        parse(&args("help")).unwrap(),
        parse(&args("--help")).unwrap()
    );
    assert_eq!(
        parse(&args("help certs")).unwrap(),
        parse(&args("certs --help")).unwrap()
    );
    assert_eq!(
        parse(&args("-V")).unwrap(),
        parse(&args("--version")).unwrap()
    );
    assert!(matches!(
        parse(&args("--version=false")).unwrap(),
        Command::Run(_)
    ));
}

#[test]
fn help_lists_the_controller_names() {
    let Command::Help(t) = parse(&args("--help")).unwrap() else {
        panic!("no help")
    };
    let block: Vec<&str> = t
        .lines()
        .skip_while(|l| !l.contains("--controllers strings"))
        .take_while(|l| !l.contains("--controller-start-interval"))
        .collect();
    let block = block.join("\n");
    for want in [
        "All controllers (short names in parentheses): bootstrap-signer-controller (bootstrapsigner),",
        "certificatesigningrequest-signing-controller (csrsigning),",
        "Disabled-by-default controllers: bootstrap-signer-controller, selinux-warning-controller,",
        "In edgekcm today: bootstrap-signer-controller,",
    ] {
        assert!(block.contains(want), "{want}:\n{block}");
    }
    // Every controller of v1.37 is in edgekcm: no empty "not in edgekcm yet" list.
    assert!(!block.contains("not in edgekcm yet"), "{block}");
    // The lists are wrapped.
    assert!(
        block
            .lines()
            .filter(|l| !l.contains("Controllers to run"))
            .all(|l| l.len() <= 100),
        "{block}"
    );
}

#[test]
fn help_marks_what_is_not_acted_on_yet() {
    let Command::Help(t) = parse(&args("--help")).unwrap() else {
        panic!("no help")
    };
    let note = |flag: &str| -> Option<String> {
        let mut lines = t.lines();
        lines.find(|l| {
            l.trim_start().starts_with(&format!("--{flag} ")) || l.trim() == format!("--{flag}")
        })?;
        lines.next().map(str::to_string)
    };
    for (flag, why) in [
        (
            "cluster-name",
            "the controllers that use it (cloud, volumes) are not in edgekcm yet",
        ),
        (
            "min-resync-period",
            "edgekcm's caches do not resync on a timer",
        ),
    ] {
        let n = note(flag).unwrap_or_else(|| panic!("--{flag} not in help"));
        assert!(
            n.contains(&format!("Not acted on yet: {why}.")),
            "--{flag}: {n}"
        );
    }
    for flag in [
        "root-ca-file",
        "cluster-signing-cert-file",
        "cluster-signing-duration",
        "kubeconfig",
        "leader-elect",
        "use-service-account-credentials",
        "terminated-pod-gc-threshold",
        "allocate-node-cidrs",
        "cluster-cidr",
        "node-cidr-mask-size-ipv6",
        "node-monitor-grace-period",
    ] {
        let n = note(flag).unwrap_or_else(|| panic!("--{flag} not in help"));
        assert!(!n.contains("Not acted on yet"), "--{flag}: {n}");
    }
    assert!(t.contains(
        "Also acted on, with upstream's types and defaults:\n\
         --attach-detach-reconcile-sync-period, --disable-attach-detach-reconcile-sync,\n\
         --cidr-allocator-type, --node-eviction-rate,"
    ));
    assert!(t.contains("--concurrent-validating-admission-policy-status-syncs int (default 5)\n"));
    assert!(t.contains("--concurrent-horizontal-pod-autoscaler-syncs int (default 5)\n"));
    assert!(t.contains("--concurrent-statefulset-syncs int (default 5)\n"));
    assert!(t.contains("--concurrent-job-syncs int (default 5)\n"));
    assert!(t.contains("--concurrent-deployment-syncs int (default 5)\n"));
}

#[test]
fn subcommands() {
    let c = run("run --kubeconfig=/x");
    assert_eq!(c.kubeconfig, p("/x"));
    assert_eq!(
        err("certs --x"),
        "unknown flag: --x (see edgekcm certs --help)"
    );
    assert_eq!(err("bogus"), "unknown command \"bogus\" for \"edgekcm\"");
}

#[test]
fn leader_election_validation() {
    assert_eq!(
        err("--leader-elect-lease-duration=10s --leader-elect-renew-deadline=10s"),
        "leaseDuration must be greater than renewDeadline"
    );
    assert_eq!(
        err("--leader-elect-retry-period=9s"),
        "renewDeadline must be greater than retryPeriod*JitterFactor"
    );
    assert_eq!(
        err("--leader-elect-resource-lock=endpointsleases"),
        "resourceLock value must be \"leases\""
    );
    // Not checked when leader election is off.
    let c = run("--leader-elect=false --leader-elect-resource-lock=configmapsleases");
    assert_eq!(c.leader_election.resource_lock, "configmapsleases");
}

#[test]
fn signing_and_serving_validation() {
    assert_eq!(
        err("--cluster-signing-cert-file=a --cluster-signing-key-file=b \
            --cluster-signing-kubelet-serving-cert-file=c --cluster-signing-kubelet-serving-key-file=d"),
        "cannot specify --cluster-signing-{cert,key}-file and other --cluster-signing-*-file flags at the same time"
    );
    // Each signer's pair whole; every problem named at once, as upstream aggregates them.
    assert_eq!(
        err("--cluster-signing-kubelet-serving-cert-file=a"),
        "\"cluster-signing-kubelet-serving\": cannot specify cert without key"
    );
    assert_eq!(
        err("--cluster-signing-cert-file=a --cluster-signing-kubelet-serving-cert-file=x \
            --cluster-signing-legacy-unknown-key-file=y"),
        "[\"cluster-signing-kubelet-serving\": cannot specify cert without key, \
         \"cluster-signing-legacy-unknown\": cannot specify key without cert, \
         cannot specify --cluster-signing-{cert,key}-file and other --cluster-signing-*-file flags at the same time]"
    );
    assert!(err("--tls-cert-file=/s.crt").contains("missing filename for serving cert"));
    // With serving off the pair is not needed.
    run("--tls-cert-file=/s.crt --secure-port=0");
    let c = run("--tls-cert-file=/s.crt --tls-private-key-file=/s.key --cert-dir=/var/run/kcm");
    assert_eq!(c.tls_cert_file, p("/s.crt"));
    assert_eq!(c.tls_private_key_file, p("/s.key"));
    assert_eq!(c.cert_dir, p("/var/run/kcm"));
}

#[test]
fn every_upstream_flag_spelling_is_consumed_correctly() {
    // Each accepted valued flag consumes exactly one following argument, each boolean none.
    for (flag, value) in [
        ("--feature-gates", "RotateKubeletServerCertificate=true"),
        ("--cloud-provider", "external"),
        ("--horizontal-pod-autoscaler-sync-period", "30s"),
        ("--node-eviction-rate", "0.2"),
        ("--tls-cipher-suites", "TLS_AES_128_GCM_SHA256"),
        ("--requestheader-allowed-names", "front-proxy-client"),
        ("--stderrthreshold", "2"),
        ("--log-file", "/var/log/kcm.log"),
        ("--pod-eviction-timeout", "5m0s"),
    ] {
        let line = format!("{flag} {value} --kubeconfig /k");
        assert_eq!(run(&line).kubeconfig, p("/k"), "{line}");
    }
    for flag in [
        "--profiling",
        "--enable-dynamic-provisioning",
        "--allow-untagged-cloud",
        "--skip-headers",
        "--enable-taint-manager",
        "--logtostderr",
    ] {
        let line = format!("{flag} --kubeconfig /k");
        assert_eq!(run(&line).kubeconfig, p("/k"), "{line}");
    }
}

#[test]
fn flag_table_sizes() {
    let (acted, accepted, removed) = edgekcm::cli::flag_counts();
    // kube-controller-manager's (with --concurrent-resourceclaim-syncs and
    // --concurrent-device-taint-eviction-syncs now acted on) and edgekcm's own
    // --node-autonomy-duration.
    assert_eq!(acted, 92);
    assert!(accepted >= 57, "{accepted}");
    // --node-sync-period is deprecated in 1.28, not removed: it is among the accepted ones.
    assert!(removed >= 24, "{removed}");
}
