#!/usr/bin/env bash
# Stops the kube-apiserver and etcd that tools/k8s/up.sh started in STATE_DIR
# (the state stays; up.sh STATE_DIR starts them on it again). --netns also
# removes the `edgekcm-e2e` network namespace and its veth pair.
# Usage: tools/k8s/down.sh STATE_DIR [--netns]
set -u
state="${1:?usage: $0 STATE_DIR [--netns]}"
stop() { # name
	local pid
	pid=$(cat "$state/$1.pid" 2>/dev/null) || return 0
	if kill "$pid" 2>/dev/null; then
		for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null
	fi
	rm -f "$state/$1.pid"
	echo "$1 stopped"
}
stop kube-apiserver
stop etcd
if [ "${2:-}" = --netns ]; then
	ip link del ekcm-e2e0 2>/dev/null
	ip netns del edgekcm-e2e 2>/dev/null
fi
exit 0
