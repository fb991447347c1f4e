#!/usr/bin/env bash
# Never two writers, shown by the apiserver (issue 44, section 2).
#
# Two controller managers with --leader-elect, each in its own network namespace joined to
# the host by a veth pair, against a kube-apiserver whose audit log records every write
# (create, update, patch, delete, deletecollection at level Metadata). A driver on the host
# scales Deployments up and down all the time, so the leader's ReplicaSet, pod and Event
# writes never stop. Mid-workload the leader's link is cut (a `blackhole` qdisc on both ends
# of its veth pair: packets vanish without a reset, so TCP hangs), the standby's is not; the
# link heals after a chosen delay or not at all. From the audit log, keyed by source address
# (each namespace has its own), each run records the leader's last write and the standby's
# first write: the gap must be positive in every run.
#
# Each manager is started again 2 s after it exits, as the systemd unit does (Restart=always).
# The table has a row per run, times in seconds from the cut: the old leader's last write, the
# standby's first write, the gap between them (must be > 0), the old leader's writes after the
# cut, after the heal and from the standby's first write on (must be 0), when it first exited,
# its status and how often it exited, and what the standby's first write was.
#
# Every run gets fresh namespaces and a fresh Lease; afterwards both managers are killed and
# the namespaces deleted, so that nothing the old leader left in its sockets can arrive in a
# later run.
#
# Usage: tools/k8s/two-writers.sh STATE_DIR [RUNS]             (root: ip netns, tc)
#
# Environment:
#   KCM        the manager (default target/release/edgekcm, then target/debug/edgekcm); for
#              upstream: KCM=tools/k8s/bin/v1.37.2/kube-controller-manager
#   KUBE_BIN, API_PORT, ETCD_PORT   as tools/k8s/up.sh; a control plane already running in
#              STATE_DIR must have been started by this script (it needs the audit flags)
#   HEALS      heal delays after the cut in seconds, cycled over the runs; `never`: the link
#              stays cut and the old leader's namespace is deleted at the end of the run
#              (default: "11 14 never 20 30 11.5 13.5 17 25 14.5")
#   TW_NET     the first three octets of the addresses used (10.231.0: .1/.2 and .5/.6)
#   TW_NS      the namespace prefix (ekcm-tw; -a is the first leader, -b the standby)
#   OUT        the table (default STATE_DIR/two-writers-<manager>.tsv)
#   KEEP       1: leave the control plane running at the end
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
	echo "two-writers: skipped: needs root (network namespaces, veth pairs and tc)"
	exit 0
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
state="${1:?usage: $0 STATE_DIR [RUNS]}"
runs="${2:-20}"
mkdir -p "$state"
state="$(cd "$state" && pwd)"
api_port="${API_PORT:-6443}"
server="https://127.0.0.1:$api_port"
net="${TW_NET:-10.231.0}"
nsp="${TW_NS:-ekcm-tw}"
read -ra heals <<< "${HEALS:-11 14 never 20 30 11.5 13.5 17 25 14.5}"

if [ -z "${KCM:-}" ]; then
	for c in "$repo/target/release/edgekcm" "$repo/target/debug/edgekcm"; do
		[ -x "$c" ] && { KCM="$c"; break; }
	done
fi
[ -x "${KCM:-}" ] || { echo "no manager binary: set KCM or build edgekcm" >&2; exit 1; }
name="$(basename "$KCM")"
out="${OUT:-$state/two-writers-$name.tsv}"
rundir="$state/two-writers-$name"
mkdir -p "$rundir"

# The control plane, with the audit policy.
audit="$state/audit.log"
cat > "$state/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
EOF
started_cp=0
if ! { [ -f "$state/kube-apiserver.pid" ] && kill -0 "$(cat "$state/kube-apiserver.pid")" 2>/dev/null; }; then
	API_EXTRA_ARGS="--bind-address=0.0.0.0 --audit-policy-file=$state/audit-policy.yaml --audit-log-path=$audit --audit-log-maxsize=0" \
		METRICS_NETNS=0 "$here/up.sh" "$state" > "$state/up.log" 2>&1 ||
		{ cat "$state/up.log" >&2; exit 1; }
	started_cp=1
fi
[ -f "$audit" ] || { echo "$state has a kube-apiserver without the audit log: stop it first (tools/k8s/down.sh $state)" >&2; exit 1; }

# The admin's client certificate for curl (the driver's writes come from 127.0.0.1).
kc_field() { sed -n "s/^ *$1: *//p" "$state/admin.conf" | head -1 | tr -d '"' | base64 -d; }
kc_field client-certificate-data > "$state/admin.crt"
kc_field client-key-data > "$state/admin.key"
chmod 600 "$state/admin.key"
api() { # METHOD PATH [BODY [CONTENT-TYPE]]
	curl -s --max-time 5 --cacert "$state/pki/ca.crt" --cert "$state/admin.crt" --key "$state/admin.key" \
		-X "$1" -H "Content-Type: ${4:-application/json}" ${3:+--data "$3"} "$server$2"
}

# A network namespace and its veth pair: host end $net.<h>, namespace end $net.<h+1>.
ns_up() { # a|b host-octet
	local ns="$nsp-$1" host="$net.$2" peer="$net.$(($2 + 1))"
	ip netns add "$ns"
	ip link add "$ns-h" type veth peer name "$ns-n"
	ip link set "$ns-n" netns "$ns"
	ip addr add "$host/30" dev "$ns-h"
	ip link set "$ns-h" up
	ip -n "$ns" addr add "$peer/30" dev "$ns-n"
	ip -n "$ns" link set "$ns-n" up
	ip -n "$ns" link set lo up
	# The manager's kubeconfig: the host end of its pair, the certificate checked for the
	# name it carries.
	sed "s#server: \"\{0,1\}https://127.0.0.1:$api_port\"\{0,1\}#server: \"https://$host:$api_port\"\n    tls-server-name: \"kubernetes\"#" \
		"$state/controller-manager.conf" > "$state/$ns.conf"
}
ns_down() { # a|b
	local ns="$nsp-$1" pid w="wrapper_$1"
	[ -z "${!w:-}" ] || kill "${!w}" 2>/dev/null || true
	for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
	ip link del "$ns-h" 2>/dev/null || true
	ip netns del "$ns" 2>/dev/null || true
}
cut_link() { # a: both ends of the pair drop every packet
	tc qdisc replace dev "$nsp-$1-h" root blackhole
	ip netns exec "$nsp-$1" tc qdisc replace dev "$nsp-$1-n" root blackhole
}
heal_link() {
	tc qdisc del dev "$nsp-$1-h" root 2>/dev/null || true
	ip netns exec "$nsp-$1" tc qdisc del dev "$nsp-$1-n" root 2>/dev/null || true
}
now() { date +%s.%N; }

# The manager in namespace $1, started again 2 s after it exits (as the systemd unit's
# Restart=always, RestartSec=2s); each exit's status and time go to $rundir/<run>-$1.exit.
# Its wrapper's process id goes to wrapper_$1.
start_manager() { # a|b run
	local ns="$nsp-$1"
	(
		set +e
		while :; do
			ip netns exec "$ns" "$KCM" --kubeconfig="$state/$ns.conf" --root-ca-file="$state/pki/ca.crt" \
				--use-service-account-credentials=true --service-account-private-key-file="$state/pki/sa.key" \
				--leader-elect=true --secure-port=0 --v=2 >> "$rundir/$2-$1.log" 2>&1
			echo "$? $(now)" >> "$rundir/$2-$1.exit"
			sleep 2
		done
	) &
	eval "wrapper_$1=$!"
}

driver_pid=""
cleanup() {
	[ -z "$driver_pid" ] || kill "$driver_pid" 2>/dev/null || true
	ns_down a
	ns_down b
	if [ "$started_cp" = 1 ] && [ "${KEEP:-0}" != 1 ]; then "$here/down.sh" "$state" > /dev/null; fi
}
trap cleanup EXIT
ns_down a
ns_down b

# The workload: Deployments in namespace tw scaled between 0 and 6 replicas, one every 0.2 s.
deployments=8
api POST /api/v1/namespaces '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"tw"}}' > /dev/null
for i in $(seq 0 $((deployments - 1))); do
	api POST /apis/apps/v1/namespaces/tw/deployments "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",
		\"metadata\":{\"name\":\"d$i\"},\"spec\":{\"replicas\":2,\"selector\":{\"matchLabels\":{\"app\":\"d$i\"}},
		\"template\":{\"metadata\":{\"labels\":{\"app\":\"d$i\"}},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"registry.k8s.io/pause:3.10\"}]}}}}" > /dev/null
done
(
	while :; do
		api PATCH "/apis/apps/v1/namespaces/tw/deployments/d$((RANDOM % deployments))" \
			"{\"spec\":{\"replicas\":$((RANDOM % 7))}}" application/merge-patch+json > /dev/null || true
		sleep 0.2
	done
) &
driver_pid=$!

lease=/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager
holder() { api GET "$lease" | jq -r '.spec.holderIdentity // empty' 2>/dev/null || true; }

# The writes of one run from the audit log: "<received epoch> <ip> <verb> <resource> <code>".
writes() { # from to
	jq -r --arg from "$1" --arg to "$2" --arg a "$net.2" --arg b "$net.6" '
		def epoch: (.[0:19] + "Z" | fromdate) + ((.[19:-1] | if . == "" then "0" else "0" + . end) | tonumber);
		select(.sourceIPs[0] == $a or .sourceIPs[0] == $b)
		| (.requestReceivedTimestamp | epoch) as $t
		| select($t >= ($from | tonumber) and $t <= ($to | tonumber))
		| "\($t) \(.sourceIPs[0]) \(.verb) \(.objectRef.resource // "-")\(if .objectRef.subresource then "/" + .objectRef.subresource else "" end) \(.responseStatus.code // 0)"
	' "$audit" | sort -n
}

printf 'run\theal_s\tcut_after_lead_s\tleader_last_write_s\tstandby_first_write_s\tgap_s\tleader_writes_after_cut\tleader_writes_after_heal\tleader_writes_from_standby_first\tleader_exit_s\tleader_rc\tleader_exits\tstandby_first\n' > "$out"
echo "two-writers: $runs runs of $KCM; the table goes to $out"
violations=0
for run in $(seq 1 "$runs"); do
	h="${heals[$(((run - 1) % ${#heals[@]}))]}"
	rm -f "$rundir/$run-"*
	ns_up a 1
	ns_up b 5
	api DELETE "$lease" > /dev/null || true
	t_start="$(now)"
	start_manager a "$run"
	for _ in $(seq 600); do [ -n "$(holder)" ] && break; sleep 0.1; done
	[ -n "$(holder)" ] || { echo "run $run: the first manager never took the lease (see $rundir/$run-a.log)" >&2; exit 1; }
	t_lead="$(now)"
	start_manager b "$run"
	# Some work with both running, then the cut at a varied moment.
	sleep "$(printf '%d.%03d' $((6 + RANDOM % 6)) $((RANDOM % 1000)))"
	t_cut="$(now)"
	cut_link a
	t_heal=""
	if [ "$h" = never ]; then
		sleep 35
	else
		sleep "$(echo "$t_cut + $h - $(now)" | bc)"
		heal_link a
		t_heal="$(now)"
		# Long enough for a segment held back since the cut to be retransmitted after the heal
		# (the retransmission timeout doubles from 0.2 s: 12.6, 25.4, 51 s after sending).
		sleep "$(echo "if ($h < 23) 50 - $h else 55 - $h + 10" | bc)"
	fi
	t_end="$(now)"
	ns_down a
	ns_down b
	sleep 1

	w="$(writes "$t_start" "$t_end")"
	rel() { [ -n "$1" ] && echo "$1 - $t_cut" | bc | xargs printf '%.3f' || echo -; }
	a_last="$(awk -v ip="$net.2" '$2 == ip {t = $1} END {print t}' <<< "$w")"
	b_first_line="$(awk -v ip="$net.6" '$2 == ip {print; exit}' <<< "$w")"
	b_first="${b_first_line%% *}"
	a_after_cut="$(awk -v ip="$net.2" -v c="$t_cut" '$2 == ip && $1 > c' <<< "$w" | wc -l)"
	a_after_b="-"
	gap="-"
	if [ -n "$b_first" ]; then
		a_after_b="$(awk -v ip="$net.2" -v c="$b_first" '$2 == ip && $1 >= c' <<< "$w" | wc -l)"
		gap="$(echo "$b_first - ${a_last:-$t_start}" | bc | xargs printf '%.3f')"
		[ "$a_after_b" = 0 ] || violations=$((violations + 1))
		awk -v ip="$net.2" -v c="$b_first" '$2 == ip && $1 >= c' <<< "$w" > "$rundir/$run-violations.txt"
	fi
	a_after_heal="-"
	[ -z "$t_heal" ] || a_after_heal="$(awk -v ip="$net.2" -v c="$t_heal" '$2 == ip && $1 > c' <<< "$w" | wc -l)"
	exit_line="$(head -1 "$rundir/$run-a.exit" 2>/dev/null || true)"
	exits="$(grep -c . "$rundir/$run-a.exit" 2>/dev/null || true)"
	a_rc="-"
	a_exit="-"
	if [ -n "$exit_line" ]; then
		a_rc="${exit_line%% *}"
		a_exit="$(rel "${exit_line##* }")"
	fi
	b_what="-"
	[ -z "$b_first_line" ] || b_what="$(awk '{print $3 " " $4 " " $5}' <<< "$b_first_line")"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$h" \
		"$(echo "$t_cut - $t_lead" | bc | xargs printf '%.1f')" "$(rel "$a_last")" "$(rel "$b_first")" \
		"$gap" "$a_after_cut" "$a_after_heal" "$a_after_b" "$a_exit" "$a_rc" "${exits:-0}" "$b_what" |
		tee -a "$out"
	echo "$w" > "$rundir/$run-writes.txt"
done
echo "two-writers: $runs runs, $violations with a write of the old leader at or after the standby's first"
[ "$violations" = 0 ]
