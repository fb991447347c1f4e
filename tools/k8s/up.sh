#!/usr/bin/env bash
# Starts a real single-node control plane on loopback for the real_* scenarios:
# etcd and kube-apiserver (built by tools/k8s/build.sh) with the certificates
# `edgekcm certs` writes, bootstrap RBAC and --authorization-mode=Node,RBAC,
# bootstrap tokens (the CSR and join scenarios) and the aggregation layer
# (a front-proxy CA and client made with openssl; the autoscaler scenarios).
#
# Usage: tools/k8s/up.sh STATE_DIR [VERSION]      VERSION: 1.37 (default) or 1.34
#
# Everything goes into STATE_DIR:
#   pki/                  `edgekcm certs` output and front-proxy-ca/-client
#   admin.conf            admin kubeconfig (system:masters)
#   controller-manager.conf
#   etcd/, etcd.log, kube-apiserver.log, *.pid
#   apiserver-start.sh, apiserver-stop.sh, apiserver-restart.sh
#   e2e.env               the environment for `just e2e`: `. STATE_DIR/e2e.env`
# tools/k8s/down.sh STATE_DIR stops both processes. Run again on the same
# STATE_DIR, up.sh keeps the files that still fit and the processes still
# running (stop kube-apiserver first for changed flags to take effect).
#
# Environment:
#   KUBE_BIN      directory with kube-apiserver and etcd (default
#                 tools/k8s/bin/<the module's Kubernetes version>)
#   EDGEKCM       edgekcm binary (default target/release/edgekcm, then
#                 target/debug/edgekcm, else `cargo build --release --bin edgekcm`)
#   API_PORT      kube-apiserver's secure port (6443)
#   ETCD_PORT     etcd's client port (2379; the peer port is ETCD_PORT+1)
#   METRICS_NETNS 1 (default when root): a veth pair into a network namespace
#                 `edgekcm-e2e` whose host end (METRICS_HOST, 198.18.0.1) is
#                 KCM_E2E_METRICS_HOST and the --advertise-address; 0: none
#                 (the autoscaler scenarios then fail naming the variable)
#   API_EXTRA_ARGS more kube-apiserver flags, split at spaces (gated APIs:
#                 --feature-gates=..., --runtime-config=...)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
state="${1:?usage: $0 STATE_DIR [VERSION]}"
minor="${2:-1.37}"
minor="${minor#v}"
mkdir -p "$state"
state="$(cd "$state" && pwd)"

api_port="${API_PORT:-6443}"
etcd_port="${ETCD_PORT:-2379}"
etcd_peer=$((etcd_port + 1))
server="https://127.0.0.1:$api_port"

if [ -z "${KUBE_BIN:-}" ]; then
	kver="$(cd "$here/../k8s-v$minor" && GOTOOLCHAIN=local go list -m -f '{{.Version}}' k8s.io/kubernetes)"
	KUBE_BIN="$here/bin/$kver"
fi
for b in kube-apiserver etcd; do
	[ -x "$KUBE_BIN/$b" ] || { echo "no $KUBE_BIN/$b: run tools/k8s/build.sh $minor" >&2; exit 1; }
done

if [ -z "${EDGEKCM:-}" ]; then
	for c in "$repo/target/release/edgekcm" "$repo/target/debug/edgekcm"; do
		[ -x "$c" ] && { EDGEKCM="$c"; break; }
	done
fi
if [ -z "${EDGEKCM:-}" ]; then
	(cd "$repo" && cargo build --release --bin edgekcm)
	EDGEKCM="$repo/target/release/edgekcm"
fi

# The network namespace for the aggregated metrics server (Endpoints refuse
# loopback addresses, so it needs another address of this host).
metrics_host="${METRICS_HOST:-198.18.0.1}"
netns="${METRICS_NETNS:-$([ "$(id -u)" = 0 ] && echo 1 || echo 0)}"
if [ "$netns" = 1 ]; then
	if ! ip netns list | grep -qw edgekcm-e2e; then
		ip netns add edgekcm-e2e
		ip link add ekcm-e2e0 type veth peer name ekcm-e2e1
		ip link set ekcm-e2e1 netns edgekcm-e2e
		ip addr add "$metrics_host/30" dev ekcm-e2e0
		ip link set ekcm-e2e0 up
		ip -n edgekcm-e2e addr add "${metrics_host%.*}.$((${metrics_host##*.} + 1))/30" dev ekcm-e2e1
		ip -n edgekcm-e2e link set ekcm-e2e1 up
		ip -n edgekcm-e2e link set lo up
	fi
	advertise="$metrics_host"
else
	metrics_host=""
	# Any non-loopback address of this host: only written into the
	# `kubernetes` Endpoints, never connected to.
	advertise="$(ip -4 -o addr show scope global | awk '{sub(/\/.*/, "", $4); print $4; exit}')"
	advertise="${advertise:-192.0.2.10}"
fi

# Certificates: edgekcm's, then a front-proxy CA and client for the
# aggregation layer (edgekcm certs makes none).
pki="$state/pki"
"$EDGEKCM" certs --dir="$pki" --kubeconfig-dir="$state" --server="$server" > "$state/certs.txt"
cat "$state/certs.txt"
mapfile -t api_flags < <(sed -n '/^kube-apiserver flags/,$p' "$state/certs.txt" | sed -n 's/^  \(--[^ ]*\)\( \\\)\{0,1\}$/\1/p')
[ ${#api_flags[@]} -gt 0 ] || { echo "edgekcm certs printed no kube-apiserver flags" >&2; exit 1; }

if [ ! -f "$pki/front-proxy-client.crt" ]; then
	(
		cd "$pki"
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
			-subj /CN=front-proxy-ca -keyout front-proxy-ca.key -out front-proxy-ca.crt 2>/dev/null
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
			-subj /CN=front-proxy-client -keyout front-proxy-client.key -out front-proxy-client.csr 2>/dev/null
		printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n' > front-proxy-client.ext
		openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key \
			-CAcreateserial -days 365 -extfile front-proxy-client.ext -out front-proxy-client.crt 2>/dev/null
		rm -f front-proxy-client.csr front-proxy-client.ext front-proxy-ca.srl
		chmod 600 front-proxy-ca.key front-proxy-client.key
	)
fi

api_args=(
	--bind-address=127.0.0.1
	--secure-port="$api_port"
	--advertise-address="$advertise"
	--etcd-servers="http://127.0.0.1:$etcd_port"
	--allow-privileged=true
	--enable-admission-plugins=NodeRestriction
	"${api_flags[@]}"
	--enable-bootstrap-token-auth=true
	--requestheader-client-ca-file="$pki/front-proxy-ca.crt"
	--requestheader-allowed-names=front-proxy-client
	--requestheader-username-headers=X-Remote-User
	--requestheader-group-headers=X-Remote-Group
	--requestheader-extra-headers-prefix=X-Remote-Extra-
	--proxy-client-cert-file="$pki/front-proxy-client.crt"
	--proxy-client-key-file="$pki/front-proxy-client.key"
	--enable-aggregator-routing=true
	--profiling=false
	--v=1
)
if [ -n "${API_EXTRA_ARGS:-}" ]; then
	read -ra extra_args <<< "$API_EXTRA_ARGS"
	api_args+=("${extra_args[@]}")
fi

# Shell-quoted words, joined by spaces.
q() { local out; printf -v out '%q ' "$@"; printf '%s' "${out% }"; }

# Start, stop and restart scripts: the scenarios call them (KCM_E2E_APISERVER_*).
cat > "$state/apiserver-start.sh" <<EOF
#!/usr/bin/env bash
# Starts kube-apiserver in the background and waits for /readyz.
set -eu
cd $(q "$state")
setsid nohup $(q "$KUBE_BIN/kube-apiserver" "${api_args[@]}") >> kube-apiserver.log 2>&1 < /dev/null &
echo \$! > kube-apiserver.pid
for _ in \$(seq 1200); do
	if [ "\$(curl -s --max-time 2 --cacert pki/ca.crt $(q "$server/readyz"))" = ok ]; then exit 0; fi
	kill -0 "\$(cat kube-apiserver.pid)" 2>/dev/null || { echo "kube-apiserver exited: see $state/kube-apiserver.log" >&2; exit 1; }
	sleep 0.1
done
echo "kube-apiserver not ready after 120 s" >&2
exit 1
EOF
cat > "$state/apiserver-stop.sh" <<EOF
#!/usr/bin/env bash
# Stops kube-apiserver (SIGTERM, SIGKILL after 20 s) and waits until it is gone.
cd $(q "$state")
pid=\$(cat kube-apiserver.pid 2>/dev/null) || exit 0
kill "\$pid" 2>/dev/null || exit 0
for _ in \$(seq 200); do kill -0 "\$pid" 2>/dev/null || exit 0; sleep 0.1; done
kill -9 "\$pid" 2>/dev/null
while kill -0 "\$pid" 2>/dev/null; do sleep 0.1; done
EOF
cat > "$state/apiserver-restart.sh" <<EOF
#!/usr/bin/env bash
# Kills kube-apiserver with SIGKILL, waits, starts it again and returns once it
# answers /readyz.
cd $(q "$state")
pid=\$(cat kube-apiserver.pid 2>/dev/null) && kill -9 "\$pid" 2>/dev/null
while [ -n "\${pid:-}" ] && kill -0 "\$pid" 2>/dev/null; do sleep 0.1; done
sleep \${RESTART_PAUSE:-1}
exec $(q "$state/apiserver-start.sh")
EOF
chmod +x "$state"/apiserver-*.sh

# etcd
if ! { [ -f "$state/etcd.pid" ] && kill -0 "$(cat "$state/etcd.pid")" 2>/dev/null; }; then
	(
		cd "$state"
		setsid nohup "$KUBE_BIN/etcd" --name=edgekcm-e2e --data-dir="$state/etcd" \
			--listen-client-urls="http://127.0.0.1:$etcd_port" \
			--advertise-client-urls="http://127.0.0.1:$etcd_port" \
			--listen-peer-urls="http://127.0.0.1:$etcd_peer" \
			--initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer" \
			--initial-cluster="edgekcm-e2e=http://127.0.0.1:$etcd_peer" \
			--initial-cluster-state=new --unsafe-no-fsync=true \
			--quota-backend-bytes=4294967296 \
			>> etcd.log 2>&1 < /dev/null &
		echo $! > etcd.pid
	)
	for _ in $(seq 300); do
		curl -s --max-time 1 "http://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"' && break
		sleep 0.1
	done
	curl -s --max-time 1 "http://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"' ||
		{ echo "etcd did not come up: see $state/etcd.log" >&2; exit 1; }
fi

if ! { [ -f "$state/kube-apiserver.pid" ] && kill -0 "$(cat "$state/kube-apiserver.pid")" 2>/dev/null; }; then
	"$state/apiserver-start.sh"
fi

version="$(curl -s --cacert "$pki/ca.crt" "$server/version")"
echo "kube-apiserver $server: $(printf '%s' "$version" | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p')"

kcm_args="--kubeconfig=$state/controller-manager.conf --root-ca-file=$pki/ca.crt --use-service-account-credentials=true --service-account-private-key-file=$pki/sa.key"
{
	echo "# The environment for the real_* scenarios against $server."
	echo "export KCM_E2E_KUBECONFIG=$(q "$state/admin.conf")"
	echo "export KCM_E2E_KCM_ARGS=$(q "$kcm_args")"
	echo "export KCM_E2E_CA_CERT=$(q "$pki/ca.crt")"
	echo "export KCM_E2E_CA_KEY=$(q "$pki/ca.key")"
	echo "export KCM_E2E_APISERVER_STOP=$(q "$state/apiserver-stop.sh")"
	echo "export KCM_E2E_APISERVER_START=$(q "$state/apiserver-start.sh")"
	echo "export KCM_E2E_APISERVER_RESTART=$(q "$state/apiserver-restart.sh")"
	echo "export EDGEKCM_E2E_APISERVER=$(q "$KUBE_BIN/kube-apiserver")"
	echo "export EDGEKCM_E2E_ETCD=$(q "$KUBE_BIN/etcd")"
	[ -z "$metrics_host" ] || echo "export KCM_E2E_METRICS_HOST=$metrics_host"
} > "$state/e2e.env"
echo
echo "admin kubeconfig: $state/admin.conf"
echo "environment ($state/e2e.env):"
cat "$state/e2e.env"
