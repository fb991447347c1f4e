#!/usr/bin/env bash
# Runs a command against the API server the environment names, and says which:
#   KUBE_VERSION=1.37|1.34   build (tools/k8s/build.sh, skipped when built) and start a fresh
#                            kube-apiserver + etcd of that minor (tools/k8s/up.sh), export its
#                            e2e.env (KCM_E2E_KUBECONFIG, KCM_E2E_KCM_ARGS, ...), run the
#                            command, stop them (also on failure);
#                            with KUBE_UPSTREAM=1 also kube-controller-manager of that
#                            minor, as KCM_BENCH_UPSTREAM with the same flags edgekcm gets;
#   else KCM_E2E_KUBECONFIG  the cluster it names (already running);
#   else                     the command's own choice (the benches: a sandbox API server).
# The Justfile's e2e and bench recipes run through it.
#
# Usage: tools/k8s/with-apiserver.sh COMMAND [ARGS...]
# Environment: KUBE_VERSION, KUBE_UPSTREAM, and up.sh's API_PORT, ETCD_PORT, METRICS_NETNS.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -z "${KUBE_VERSION:-}" ]; then
	if [ -n "${KCM_E2E_KUBECONFIG:-}" ]; then
		echo "API server: the cluster of KCM_E2E_KUBECONFIG=$KCM_E2E_KUBECONFIG (KUBE_VERSION unset)"
	else
		echo "API server: none started (KUBE_VERSION and KCM_E2E_KUBECONFIG unset)"
	fi
	exec "$@"
fi

minor="${KUBE_VERSION#v}"
case "$minor" in
1.3[4-7]) ;;
*)
	echo "KUBE_VERSION=$KUBE_VERSION: edgekcm serves kube-apiserver v1.34 to v1.37; tools/k8s builds 1.37 and 1.34" >&2
	exit 2
	;;
esac
names=(kube-apiserver etcd)
[ "${KUBE_UPSTREAM:-0}" = 1 ] && names+=(kube-controller-manager)
"$here/build.sh" "$minor" "${names[@]}"

state="$(mktemp -d "${TMPDIR:-/tmp}/edgekcm-api.XXXXXX")"
trap '"$here/down.sh" "$state" >/dev/null 2>&1 || true' EXIT
"$here/up.sh" "$state" "$minor" >"$state.up.log" 2>&1 || {
	cat "$state.up.log" >&2
	echo "tools/k8s/up.sh failed (log above)" >&2
	exit 1
}
# shellcheck disable=SC1091
. "$state/e2e.env"
kver="$("$EDGEKCM_E2E_APISERVER" --version 2>/dev/null | awk '{print $2}')"
echo "API server: kube-apiserver $kver (KUBE_VERSION=$KUBE_VERSION), state in $state"
if [ "${KUBE_UPSTREAM:-0}" = 1 ]; then
	kcm="$(dirname "$EDGEKCM_E2E_APISERVER")/kube-controller-manager"
	export KCM_BENCH_UPSTREAM="$kcm $KCM_E2E_KCM_ARGS"
	echo "upstream: $("$kcm" --version 2>/dev/null | awk '{print $2}') with edgekcm's flags"
fi
rc=0
"$@" || rc=$?
exit "$rc"
