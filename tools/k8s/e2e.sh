#!/usr/bin/env bash
# Runs the real_* scenarios against a real control plane that it builds and
# starts itself, then stops it:
#   1. tools/k8s/build.sh VERSION kube-apiserver etcd (skipped when built);
#   2. tools/k8s/up.sh in a fresh state directory (bootstrap RBAC, the
#      scenarios run edgekcm with --use-service-account-credentials=true);
#   3. the scenarios, one at a time: all of them, or with --smoke the set in
#      tools/k8s/smoke.txt (each controller at least once);
#   4. tools/k8s/down.sh, also when a step fails or the run is interrupted.
# Exits non-zero when a scenario fails.
#
# Usage: tools/k8s/e2e.sh [--smoke] [VERSION]      VERSION: 1.37 (default) or 1.34
# Environment:
#   E2E_STATE     state directory (default: a new one under ${TMPDIR:-/tmp})
#   E2E_KEEP=1    leave the control plane running afterwards
#   E2E_FILTER    extra arguments for the test harness (e.g. a name filter)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
smoke=0
if [ "${1:-}" = --smoke ]; then smoke=1; shift; fi
minor="${1:-1.37}"
minor="${minor#v}"

state="${E2E_STATE:-$(mktemp -d "${TMPDIR:-/tmp}/edgekcm-e2e.XXXXXX")}"
stop() {
	[ "${E2E_KEEP:-0}" = 1 ] || "$here/down.sh" "$state" >/dev/null 2>&1 || true
}
trap stop EXIT

echo "== kube-apiserver $minor and etcd (tools/k8s/build.sh)"
t0=$SECONDS
"$here/build.sh" "$minor" kube-apiserver etcd
echo "built or found in $((SECONDS - t0)) s"

echo "== control plane in $state"
"$here/up.sh" "$state" "$minor" >"$state.up.log" 2>&1 || {
	cat "$state.up.log" >&2
	echo "tools/k8s/up.sh failed (log above)" >&2
	exit 1
}
# shellcheck disable=SC1091
. "$state/e2e.env"
kver="$("$EDGEKCM_E2E_APISERVER" --version 2>/dev/null | awk '{print $2}')"
echo "kube-apiserver $kver at $(grep -o 'https://[^ ]*' "$state/admin.conf" | head -1)"

cd "$repo"
args=(--no-fail-fast --test it -- --ignored --test-threads=1)
if [ "$smoke" = 1 ]; then
	mapfile -t names < <(grep -v '^\s*\(#\|$\)' "$here/smoke.txt")
	echo "== ${#names[@]} real scenarios (the smoke set, tools/k8s/smoke.txt) against $kver"
	args+=(--exact "${names[@]}")
else
	echo "== every real scenario against $kver"
	args+=(real_ --skip real_bench)
fi
# shellcheck disable=SC2206
args+=(${E2E_FILTER:-})
t0=$SECONDS
rc=0
cargo test "${args[@]}" || rc=$?
echo "real scenarios against $kver: $((SECONDS - t0)) s, exit $rc"
exit "$rc"
