# Daily tasks. `just --list` shows them.

default:
    @just --list

# Debug build
build:
    cargo build

# Release build (size-optimised, stripped)
release:
    cargo build --release
    @ls -l target/release/edgekcm | awk '{print "target/release/edgekcm: " $5 " bytes"}'

# Unit, sandbox and (with KCM_E2E_KUBECONFIG) e2e tests — the README's test command
test:
    cargo test

# Faster runner, same tests
nextest:
    cargo nextest run

# Format check and clippy with warnings as errors
lint:
    cargo fmt --check
    cargo clippy --all-targets -- -D warnings

# The demo: sandbox API server + edgekcm, a namespace gets its ServiceAccount and ConfigMap
demo:
    cargo run --example demo

# A standalone sandbox API server on loopback (writes ./sandbox.kubeconfig)
sandbox port="0":
    cargo run --example sandbox -- --port {{port}} --kubeconfig-out sandbox.kubeconfig

# e2e scenarios against a real kube-apiserver: KCM_E2E_KUBECONFIG=/path/admin.kubeconfig just e2e
e2e:
    cargo test --test 'e2e*' -- --nocapture --test-threads=1

# Benchmark: 300 Deployments x 5 replicas, then the namespace deleted; prints wall, CPU, RSS.
# Sandbox API server by default; KCM_E2E_KUBECONFIG for a real one (see examples/bench.rs).
bench *args:
    cargo build --release --bin edgekcm --example bench
    target/release/examples/bench {{args}}
