#!/usr/bin/env bash
# Upstream's own e2e specs for the controllers, as the judge of behaviour: runs
# the e2e.test of tools/k8s-v<minor>/e2e_test.go with ginkgo against a fresh
# control plane (tools/k8s/up.sh), kube-scheduler, the kubelet stand-in
# (examples/kubelet) and one controller manager:
#   upstream   kube-controller-manager of the same version
#   edgekcm    target/release/edgekcm
# both with the same flags (every default controller plus the bootstrap signer
# and token cleaner, per-controller ServiceAccount credentials, CSR signing by
# the cluster CA). Writes STATE/report.json (ginkgo's JSON report) and
# STATE/summary.txt (one line per spec: passed/failed/skipped and its name).
#
# Usage: tools/k8s/e2e-upstream.sh MANAGER [FOCUS]
#   MANAGER  upstream | edgekcm
#   FOCUS    a ginkgo focus regex (default: the suites for kube-controller-manager's
#            controllers: [sig-apps], the garbage collector, namespaces, resource
#            quota, Endpoints/EndpointSlice/mirroring, ServiceAccounts,
#            Certificates, bootstrap tokens, taint eviction, pod GC)
# Environment:
#   E2E_STATE   state directory (default: a new one under ${TMPDIR:-/tmp})
#   E2E_VERSION 1.37 (default)
#   E2E_PROCS   parallel ginkgo processes (default 6)
#   E2E_SKIP    skip regex (default: [Serial], [Disruptive], [Flaky], and
#               [Feature:OffByDefault]: gates this control plane does not enable)
#   E2E_KEEP=1  leave everything running afterwards
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
manager="${1:?usage: $0 upstream|edgekcm [FOCUS]}"
default_focus='\[sig-apps\]|\[sig-api-machinery\] (Garbage collector|Namespaces|ResourceQuota)|\[sig-network\] (Endpoints|EndpointSlice|EndpointSliceMirroring) |\[sig-auth\] (ServiceAccounts|Certificates|\[Feature:BootstrapTokens\])|NoExecuteTaintManager|Pod garbage collector'
focus="${2:-$default_focus}"
skip="${E2E_SKIP:-\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Feature:OffByDefault\]}"
minor="${E2E_VERSION:-1.37}"
procs="${E2E_PROCS:-6}"
case "$manager" in upstream | edgekcm) ;; *) echo "MANAGER is upstream or edgekcm" >&2; exit 2 ;; esac

"$here/build.sh" "$minor" kube-apiserver etcd kube-scheduler kube-controller-manager e2e.test ginkgo
kver="$(cd "$here/../k8s-v$minor" && GOTOOLCHAIN=local go list -m -f '{{.Version}}' k8s.io/kubernetes)"
bin="$here/bin/$kver"
(cd "$repo" && cargo build --release --bin edgekcm --example kubelet)

state="${E2E_STATE:-$(mktemp -d "${TMPDIR:-/tmp}/edgekcm-e2e-upstream.XXXXXX")}"
mkdir -p "$state"
pids=()
stop() {
	[ "${E2E_KEEP:-0}" = 1 ] && return
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	"$here/down.sh" "$state" >/dev/null 2>&1 || true
}
trap stop EXIT

METRICS_NETNS=0 KUBE_BIN="$bin" "$here/up.sh" "$state" "$minor" >"$state/up.log" 2>&1 || {
	cat "$state/up.log" >&2
	exit 1
}
pki="$state/pki"

# kube-scheduler (with the admin credentials: edgekcm certs writes no scheduler kubeconfig).
"$bin/kube-scheduler" --kubeconfig="$state/admin.conf" --leader-elect=false \
	--secure-port=0 --v=1 >"$state/kube-scheduler.log" 2>&1 &
pids+=($!)
"$repo/target/release/examples/kubelet" --kubeconfig "$state/admin.conf" --nodes 3 \
	>"$state/kubelet.log" 2>&1 &
pids+=($!)

flags=(
	--kubeconfig="$state/controller-manager.conf"
	--root-ca-file="$pki/ca.crt"
	--service-account-private-key-file="$pki/sa.key"
	--use-service-account-credentials=true
	--cluster-signing-cert-file="$pki/ca.crt"
	--cluster-signing-key-file="$pki/ca.key"
	--controllers='*,bootstrapsigner,tokencleaner'
	--leader-elect=false
)
case "$manager" in
upstream) cmd=("$bin/kube-controller-manager" "${flags[@]}" --secure-port=0 --v=1) ;;
edgekcm) cmd=("$repo/target/release/edgekcm" "${flags[@]}" --secure-port=0) ;;
esac
"${cmd[@]}" >"$state/manager.log" 2>&1 &
pids+=($!)

echo "== $manager against kube-apiserver $kver ($state), focus: $focus"
cd "$state"
rc=0
"$bin/ginkgo" --procs="$procs" --timeout=3h --json-report=report.json --no-color \
	--focus="$focus" --skip="$skip" "$bin/e2e.test" -- \
	--kubeconfig="$state/admin.conf" --provider=skeleton --report-dir="$state" \
	--e2e-output-dir="$state" --allowed-not-ready-nodes=0 --node-schedulable-timeout=1m \
	>"$state/ginkgo.log" 2>&1 || rc=$?

python3 - "$state/report.json" >"$state/summary.txt" <<'EOF'
import json, sys
for suite in json.load(open(sys.argv[1])):
    for s in suite.get("SpecReports") or []:
        if s.get("LeafNodeType") != "It":
            continue
        name = " ".join(s.get("ContainerHierarchyTexts") or []) + " " + s.get("LeafNodeText", "")
        print(f'{s.get("State")}\t{name.strip()}')
EOF
sort "$state/summary.txt" | cut -f1 | uniq -c
echo "report: $state/summary.txt, ginkgo log $state/ginkgo.log (exit $rc)"
