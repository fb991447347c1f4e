# Daily tasks. `just --list` shows them. Install just with `cargo install just --locked`.

# List the recipes with what each does
default:
    @just --list

# Debug build
build:
    cargo build

# Release build (size-optimised, stripped)
release:
    cargo build --release -p edgekcm
    @ls -l target/release/edgekcm | awk '{print "target/release/edgekcm: " $5 " bytes"}'

# Unit and sandbox tests; the real_* scenarios show as ignored (just e2e runs them)
test:
    cargo test

# `just fuzz` runs each target for 120 s, `just fuzz 30` for 30 s; EDGEKCM_FUZZ_SEED=<seed>
# EDGEKCM_FUZZ_CASE=<n> reproduces an input.
# Fuzz and property targets (src/fuzz/) for longer, release build
fuzz secs="120":
    EDGEKCM_FUZZ_SECS={{secs}} cargo test --release --lib fuzz:: -- --nocapture

# Coverage-guided fuzzing (cargo-fuzz and libFuzzer, nightly toolchain; installs cargo-fuzz
# when missing): each target of fuzz/fuzz_targets for SECS seconds, from its seeds (fuzz/seeds)
# and what earlier runs kept (fuzz/corpus); crashes go to fuzz/artifacts. One line per target:
# executions, coverage (edges), corpus size. `just fuzz-cov 300 cron` runs one target.
fuzz-cov secs="60" *targets:
    #!/usr/bin/env bash
    set -euo pipefail
    command -v cargo-fuzz >/dev/null || cargo +nightly install cargo-fuzz --locked
    cd fuzz
    targets="{{targets}}"
    [ -n "$targets" ] || targets=$(ls fuzz_targets | sed 's/\.rs$//')
    mkdir -p target
    rc=0
    for t in $targets; do
        mkdir -p "corpus/$t"
        log="target/$t.log"
        if cargo +nightly fuzz run "$t" "corpus/$t" "seeds/$t" -- -max_total_time={{secs}} -print_final_stats=1 >"$log" 2>&1; then
            runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
            cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
            corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
            echo "$t: ${runs:-?} executions, ${cov:-?} edges covered, corpus ${corp:-?} inputs, no crash"
        else
            echo "$t: FAILED: crash or error, see fuzz/$log and fuzz/artifacts/$t"
            rc=1
        fi
    done
    exit $rc

# The same tests with cargo-nextest (cargo install cargo-nextest --locked)
nextest:
    cargo nextest run

# Format check and clippy with warnings as errors (all targets with the sandbox, then the product alone)
lint:
    cargo fmt --check
    cargo clippy --all-targets -- -D warnings
    cargo clippy -p edgekcm -- -D warnings

# The demo: all 35 controllers against the sandbox API server with a small workload, each write printed as it happens
demo:
    cargo run --example demo

# A standalone sandbox API server on loopback (writes ./sandbox.kubeconfig)
sandbox port="0":
    cargo run --example sandbox -- --port {{port}} --kubeconfig-out sandbox.kubeconfig

# KUBE_VERSION=1.37|1.34 (default 1.37) builds and starts that kube-apiserver for the run;
# KCM_E2E_KUBECONFIG (+ KCM_E2E_KCM_ARGS) with KUBE_VERSION unset uses a running cluster instead.
# The real_* scenarios against a real kube-apiserver (plain cargo test ignores them)
e2e:
    #!/usr/bin/env bash
    set -euo pipefail
    [ -n "${KCM_E2E_KUBECONFIG:-}" ] || export KUBE_VERSION="${KUBE_VERSION:-1.37}"
    tools/k8s/with-apiserver.sh cargo test --no-fail-fast --tests -- --ignored real_ --skip real_bench --nocapture --test-threads=1

# Builds kube-apiserver + etcd (tools/k8s/build.sh), starts them, runs every real scenario (or
# `--smoke`: tools/k8s/smoke.txt), stops them; VERSION 1.37 (default) or 1.34. CI runs this.
e2e-real *args:
    tools/k8s/e2e.sh {{args}}

# Upstream's own e2e specs for the controllers ([sig-apps], garbage collector, namespaces, quota,
# endpoints, service accounts, certificates, bootstrap tokens, pod GC) against a fresh control
# plane with kube-scheduler and the kubelet stand-in (examples/kubelet); MANAGER: upstream | edgekcm
e2e-upstream manager="edgekcm" *focus:
    tools/k8s/e2e-upstream.sh {{manager}} "{{focus}}"

# Every bench: a sandbox API server by default; KUBE_VERSION=1.37|1.34 builds and starts that
# kube-apiserver for the run (KUBE_UPSTREAM=1: upstream kube-controller-manager of the same
# minor side by side); KCM_E2E_KUBECONFIG a running one (see tools/k8s/with-apiserver.sh).
# Sandbox API server by default; KCM_E2E_KUBECONFIG for a real one (see examples/bench.rs).
# The binary is built first: the bench starts target/release/edgekcm.
# Benchmark: 300 Deployments x 5, then their namespace deleted; wall, CPU and RSS
bench *args:
    cargo build --release --bin edgekcm
    cargo build --release --example bench
    tools/k8s/with-apiserver.sh target/release/examples/bench {{args}}

# KCM_E2E_KUBECONFIG + KCM_BENCH_UPSTREAM for edgekcm vs kube-controller-manager on a real apiserver
# Benchmark: node CIDRs for 200 nodes created at once (--cluster-cidr=10.244.0.0/16); wall, CPU and RSS
bench-node-ipam *args:
    cargo build --release --bin edgekcm
    cargo build --release --example bench_node_ipam
    tools/k8s/with-apiserver.sh target/release/examples/bench_node_ipam {{args}}

# Benchmark: 20 namespaces with a quota, 300 Deployments x 5 with requests spread over them, then
# deleted; time until every quota's usage is right, CPU and RSS (KCM_BENCH_UPSTREAM and
# KCM_E2E_KUBECONFIG: upstream on the same server; --floor: also a bare API client making the
# same requests, the floor of their cost)
bench-quota *args:
    cargo build --release --bin edgekcm
    cargo build --release --example bench_quota
    tools/k8s/with-apiserver.sh target/release/examples/bench_quota {{args}}

# Benchmark: kube-apiserver stopped and started 20 times (etcd kept; outages of 1 to 40 s) under
# a running manager; from /readyz's first 200, time until every reflector is served again (the
# apiserver's audit log) and until a new ReplicaSet has a pod, and the requests sent meanwhile.
# Starts its own kube-apiserver (KUBE_VERSION, default 1.37; KUBE_UPSTREAM=1: upstream after
# edgekcm); a running one (KCM_E2E_KUBECONFIG) needs KCM_BENCH_AUDIT_LOG (see the example).
bench-recovery *args:
    #!/usr/bin/env bash
    set -euo pipefail
    cargo build --release --bin edgekcm
    cargo build --release --example bench_recovery
    if [ -z "${KCM_E2E_KUBECONFIG:-}" ]; then
        export KUBE_VERSION="${KUBE_VERSION:-1.37}"
        audit="$(mktemp -d "${TMPDIR:-/tmp}/edgekcm-audit.XXXXXX")"
        printf '%s\n' 'apiVersion: audit.k8s.io/v1' 'kind: Policy' 'omitStages: ["RequestReceived"]' \
            'rules:' '- level: Metadata' '  users: ["system:kube-controller-manager"]' \
            '  verbs: ["list", "watch"]' '- level: None' > "$audit/policy.yaml"
        export API_EXTRA_ARGS="${API_EXTRA_ARGS:-} --audit-policy-file=$audit/policy.yaml --audit-log-path=$audit/audit.log"
        export KCM_BENCH_AUDIT_LOG="$audit/audit.log"
    fi
    tools/k8s/with-apiserver.sh target/release/examples/bench_recovery {{args}}

# Benchmark: 200 pods with CSI claims on 20 managed nodes (attach/detach, expander and
# ephemeral-volume controllers); time until every VolumeAttachment and node volumesAttached is
# right, then until all are detached after the pods go; wall, CPU and RSS
bench-volumes *args:
    cargo build --release --bin edgekcm
    cargo build --release --example bench_volumes
    tools/k8s/with-apiserver.sh target/release/examples/bench_volumes {{args}}

# Benchmark: 300 Jobs x 3 completions (parallelism 3), the bench playing kubelet; time to all
# Complete, CPU and RSS (KCM_BENCH_UPSTREAM and KCM_E2E_KUBECONFIG: upstream on the same server;
# --floor: also a bare API client making the same requests, the floor of their cost)
bench-jobs *args:
    cargo build --release --bin edgekcm
    cargo build --release --example bench_jobs
    tools/k8s/with-apiserver.sh target/release/examples/bench_jobs {{args}}

# Benchmark: 300 Services over 300 Deployments x 5, the bench playing kubelet, then a rolling
# update of every Deployment; time until Endpoints and EndpointSlices list the ready pods, CPU,
# peak RSS and EndpointSlice and Endpoints writes (KCM_BENCH_CONTROLLERS: another controller set;
# --kubelet-stop=1: pods not ready a second before the kubelet removes them, as a real kubelet)
bench-endpoints *args:
    cargo build --release --bin edgekcm
    cargo build --release --example bench_endpoints
    tools/k8s/with-apiserver.sh target/release/examples/bench_endpoints {{args}}

# Benchmark: 100 Deployments x 5 Ready pods, a PodDisruptionBudget (maxUnavailable 20%) each,
# the bench playing the workload controllers and kubelet; time until every budget's status is
# right, CPU and RSS (KCM_BENCH_UPSTREAM and KCM_E2E_KUBECONFIG: upstream on the same server)
bench-disruption *args:
    cargo build --release --bin edgekcm
    cargo build --release --example bench_disruption
    tools/k8s/with-apiserver.sh target/release/examples/bench_disruption {{args}}

# Benchmark: 100 StatefulSets x 3 (a claim each) and 20 DaemonSets on 20 nodes, the bench
# playing scheduler, kubelet and node heartbeats; time to all ready, CPU, peak RSS
# (`--daemonsets=0` while edgekcm has no daemonset-controller). Environment as for the others.
bench-workloads *args:
    cargo build --release --bin edgekcm
    cargo build --release --example bench_workloads
    tools/k8s/with-apiserver.sh target/release/examples/bench_workloads {{args}}

# Benchmark: 500 PersistentVolumeClaims bound to 500 PersistentVolumes (binder and the PVC/PV
# protection controllers); time to all Bound, CPU, RSS and, on a real server, the writes it
# counted (KCM_BENCH_UPSTREAM and KCM_E2E_KUBECONFIG: upstream on the same server;
# --qps=N: --kube-api-qps and --kube-api-burst for both; --floor: also a bare API client
# making the same requests, the floor of their cost)
bench-pv *args:
    cargo build --release --bin edgekcm
    cargo build --release --example bench_pv
    tools/k8s/with-apiserver.sh target/release/examples/bench_pv {{args}}

# Benchmark: one scale point with every controller on: 500 nodes kept Ready by their Leases and
# 4,000 Deployments x 5 (20,000 pods) in 20 namespaces, the bench playing scheduler and kubelet;
# RSS once ready, peak and settled, CPU per phase, bytes per cached pod, then the namespaces
# deleted. One manager per fresh control plane for comparable numbers (`--skip-edgekcm` with
# KCM_BENCH_UPSTREAM for upstream); KCM_BENCH_SERVER_PIDS: the apiserver's and etcd's CPU
bench-scale *args:
    cargo build --release --bin edgekcm
    cargo build --release --example bench_scale
    tools/k8s/with-apiserver.sh target/release/examples/bench_scale {{args}}

# Never two writers (issue 44): two managers with --leader-elect in network namespaces of their
# own, the leader's link cut mid-workload and healed after varied delays, every write checked in
# kube-apiserver's audit log; the table in docs/benchmarks.md. Needs root (ip netns, tc): skips
# otherwise. MANAGER: edgekcm | upstream (kube-controller-manager v1.37.2); RUNS (default 20)
bench-two-writers manager="edgekcm" runs="20":
    #!/usr/bin/env bash
    set -euo pipefail
    if [ "$(id -u)" != 0 ]; then echo "bench-two-writers: skipped: needs root (network namespaces, veth pairs and tc)"; exit 0; fi
    export KUBE_BIN="${KUBE_BIN:-$PWD/tools/k8s/bin/v1.37.2}"
    if [ "{{manager}}" = upstream ]; then export KCM="$KUBE_BIN/kube-controller-manager"; else cargo build --release --bin edgekcm; export KCM="$PWD/target/release/edgekcm"; fi
    tools/k8s/two-writers.sh "${STATE_DIR:-/tmp/edgekcm-two-writers}" {{runs}}

# Bad links (issue 44): the manager in a network namespace whose only way to kube-apiserver is a
# userspace link emulator (tools/k8s/linkemu.py: 2 s each way, 30 % loss, a 60 s blackhole, a
# 10 s / 10 s flap for 5 min), during 100 Deployments x 5 and nodes kept alive by their Leases;
# the emulator is checked first (round trip, loss rate). Time to converge after the link heals,
# work lost, requests (audit log), peak RSS, log lines, nodes marked (tools/k8s/bad-links.py; the
# table in docs/benchmarks.md). Needs root (ip netns, /dev/net/tun): skips otherwise, and it is
# not part of `cargo test`. MANAGERS: edgekcm and/or upstream (run alternately); FAULTS: any of
# blackhole flap delay loss (default all); BLACKHOLE_SECS, FLAP_SECS, HOLD_SECS, DEPLOYMENTS.
e2e-links managers="edgekcm upstream" *faults:
    #!/usr/bin/env bash
    set -euo pipefail
    if [ "$(id -u)" != 0 ]; then echo "e2e-links: skipped: needs root (network namespaces, TUN devices)"; exit 0; fi
    python3 tools/k8s/linkemu.py --check
    export KUBE_BIN="${KUBE_BIN:-$PWD/tools/k8s/bin/v1.37.2}"
    state="${STATE_DIR:-/tmp/edgekcm-links}"
    mkdir -p "$state"
    args=()
    for m in {{managers}}; do
        case "$m" in
            edgekcm) cargo build --release --bin edgekcm; args+=("edgekcm=$PWD/target/release/edgekcm") ;;
            upstream) args+=("upstream=$KUBE_BIN/kube-controller-manager") ;;
            *) echo "e2e-links: unknown manager $m (edgekcm, upstream)" >&2; exit 1 ;;
        esac
    done
    # The managers' requests, by their identities (the bench's own are not logged).
    printf '%s\n' 'apiVersion: audit.k8s.io/v1' 'kind: Policy' 'omitStages: ["RequestReceived"]' 'rules:' \
        '- level: Metadata' '  users: ["system:kube-controller-manager"]' \
        '- level: Metadata' '  userGroups: ["system:serviceaccounts:kube-system"]' '- level: None' > "$state/audit-policy.yaml"
    API_EXTRA_ARGS="--bind-address=0.0.0.0 --audit-policy-file=$state/audit-policy.yaml --audit-log-path=$state/audit.log --audit-log-maxsize=0" \
        METRICS_NETNS=0 tools/k8s/up.sh "$state" > "$state/up.log" 2>&1 || { cat "$state/up.log" >&2; exit 1; }
    trap 'tools/k8s/down.sh "$state" > /dev/null' EXIT
    python3 tools/k8s/bad-links.py "$state" "${args[@]}" {{faults}}
    column -t -s "$(printf '\t')" "$state/bad-links.tsv"

# (cross/README.md: installs the rustup targets and Debian packages it needs when missing)
# Static musl release tarballs for x86_64 and aarch64, and SHA256SUMS, in dist/
dist:
    #!/usr/bin/env bash
    set -euo pipefail
    targets="x86_64-unknown-linux-musl aarch64-unknown-linux-musl"
    max_bytes=6500000
    version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
    epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

    # Tools: a command missing -> its Debian package.
    missing=""
    for pair in musl-gcc:musl-tools aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu qemu-aarch64:qemu-user file:file; do
        command -v "${pair%%:*}" >/dev/null || missing="$missing ${pair#*:}"
    done
    if [ -n "$missing" ]; then
        if ! command -v apt-get >/dev/null; then
            echo "dist: needs the packages$missing (or their equivalents); install them and rerun" >&2
            exit 1
        fi
        sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
        echo "dist: installing$missing"
        $sudo apt-get update -qq
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    fi
    installed=$(rustup target list --installed)
    for t in $targets; do
        echo "$installed" | grep -qx "$t" || rustup target add "$t"
    done

    # aarch64: Debian's glibc cross gcc compiles ring's C and links; rustc brings musl's crt.
    export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUNNER=qemu-aarch64
    # Both link with the toolchain's own lld (rustup ships it as gcc-ld/ld.lld), folding
    # identical functions (`--icf=all`; `safe` folds nothing here, rustc's objects carry no
    # address-significance tables): about 220 KB off the x86_64 binary (docs/benchmarks.md).
    gcc_ld="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/gcc-ld"
    if [ -x "$gcc_ld/ld.lld" ]; then
        lld="-C link-arg=-fuse-ld=lld -C link-arg=-B$gcc_ld -C link-arg=-Wl,--icf=all"
        export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="$lld"
        export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="$lld"
    else
        echo "dist: no lld in the Rust toolchain ($gcc_ld); linking with the system's ld" >&2
    fi

    rm -rf dist && mkdir -p dist
    for t in $targets; do
        cargo build --release --locked -p edgekcm --target "$t"
        bin="target/$t/release/edgekcm"
        info=$(file -b "$bin")
        size=$(stat -c %s "$bin")
        echo "dist: $t: $size bytes: $info"
        case "$info" in *"statically linked"*|*"static-pie linked"*) ;; *) echo "dist: $bin is not statically linked" >&2; exit 1;; esac
        case "$info" in *"not stripped"*) echo "dist: $bin is not stripped" >&2; exit 1;; esac
        [ "$size" -le "$max_bytes" ] || { echo "dist: $bin is larger than $max_bytes bytes" >&2; exit 1; }
        case "$t" in
            x86_64-*) run="" ;;
            aarch64-*) run="qemu-aarch64" ;;
        esac
        out=$($run "$bin" --version)
        echo "dist: $t --version: $out"
        case "$out" in "edgekcm $version "*) ;; *) echo "dist: unexpected --version output" >&2; exit 1;; esac
        name="edgekcm-$version-$t"
        mkdir "dist/$name"
        install -m 0755 "$bin" "dist/$name/edgekcm"
        install -m 0644 systemd/edgekcm.service systemd/edgekcm.env \
            systemd/kube-controller-manager.example.yaml README.md LICENSE "dist/$name/"
        tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
            -C dist -cf - "$name" | gzip -n -9 > "dist/$name.tar.gz"
        rm -rf "dist/$name"
    done
    (cd dist && sha256sum -- *.tar.gz > SHA256SUMS && cat SHA256SUMS)

# KCM_E2E_KUBECONFIG, KCM_BENCH_UPSTREAM, KCM_E2E_CA_CERT/KEY as for the other benches
# Benchmark: 500 kubelet client CSRs at once, approved and signed; wall, CPU and RSS
bench-csr *args:
    cargo build --release --bin edgekcm
    cargo build --release --example bench_csr
    tools/k8s/with-apiserver.sh target/release/examples/bench_csr {{args}}

# Benchmark: 20 DaemonSets on 20 nodes, the bench playing kubelet and node heartbeats, then a
# rolling update of each; time, CPU and RSS (KCM_BENCH_UPSTREAM and KCM_E2E_KUBECONFIG: upstream
# on the same server)
bench-daemonsets *args:
    cargo build --release --bin edgekcm
    cargo build --release --example bench_daemonsets
    tools/k8s/with-apiserver.sh target/release/examples/bench_daemonsets {{args}}
