#!/usr/bin/env bash
# Builds reference Kubernetes control-plane binaries from the Go module proxy:
#
#   kube-apiserver, kube-controller-manager, kube-scheduler
#       from k8s.io/kubernetes as pinned by tools/k8s/v<VERSION>/go.mod
#       (v1.37 -> v1.37.2, v1.34 -> v1.34.4), its staging modules replaced
#       by their matching published k8s.io/* v0.<minor>.<patch> tags;
#   etcd
#       from go.etcd.io/etcd/server/v3 as pinned by tools/etcd/go.mod (3.6).
#
# into tools/k8s/bin/v<kubernetes version>/ (git-ignored), e.g.
# tools/k8s/bin/v1.37.2/kube-apiserver. A binary already there is skipped;
# delete it to build it again.
#
# Built like the release binaries: static (CGO_ENABLED=0), -trimpath,
# -tags selinux,notest,grpcnotrace, stripped, with the version stamped into
# k8s.io/component-base/version and k8s.io/client-go/pkg/version so that
# /version and --version report the real version instead of v0.0.0.
#
# Usage: tools/k8s/build.sh [VERSION]     VERSION: 1.37 (default) or 1.34
#        tools/k8s/build.sh 1.37 kube-apiserver   (only the binaries named)
#        tools/k8s/build.sh 1.37 e2e.test ginkgo  (upstream's e2e suites and their runner;
#                                                  not by default)
# Environment: NICE (default 19) is the niceness every go build runs at.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
minor="${1:-1.37}"
minor="${minor#v}"
shift || true
mod="$here/../k8s-v$minor"
etcd_mod="$here/../etcd"
[ -f "$mod/go.mod" ] || { echo "no module for Kubernetes $minor at $mod" >&2; exit 2; }

# The module needs no newer Go than the local one; never fetch a toolchain
# unless the caller asks for one.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
nice_level="${NICE:-19}"

kver="$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
# The release date of the tag, so the stamp is the same on every build.
kdate="$(cd "$mod" && go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)"
kdate="${kdate:-1970-01-01T00:00:00Z}"
major="${kver#v}"; major="${major%%.*}"
kminor="${kver#v*.}"; kminor="${kminor%%.*}"

out="$here/bin/$kver"
mkdir -p "$out"

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X '$pkg.gitVersion=$kver'"
	ldflags+=" -X '$pkg.gitMajor=$major'"
	ldflags+=" -X '$pkg.gitMinor=$kminor'"
	ldflags+=" -X '$pkg.gitTreeState=clean'"
	ldflags+=" -X '$pkg.buildDate=$kdate'"
done

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(kube-apiserver kube-controller-manager kube-scheduler etcd)

build() { # name module-dir package ldflags
	local name="$1" dir="$2" pkg="$3" flags="$4" start
	if [ -x "$out/$name" ]; then
		echo "$name: already built ($out/$name)"
		return
	fi
	echo "$name: building $pkg"
	start=$(date +%s)
	(cd "$dir" && nice -n "$nice_level" go build -trimpath \
		-tags selinux,notest,grpcnotrace \
		-ldflags "$flags" -o "$out/$name.tmp" "$pkg")
	mv "$out/$name.tmp" "$out/$name"
	echo "$name: built in $(($(date +%s) - start))s -> $out/$name"
}

# Upstream's e2e suites for the controllers (tools/k8s-v<minor>/e2e_test.go):
# go test -c of that file, the same version stamp.
build_e2e() {
	if [ -x "$out/e2e.test" ]; then
		echo "e2e.test: already built ($out/e2e.test)"
		return
	fi
	[ -f "$mod/e2e_test.go" ] || { echo "no e2e_test.go in $mod" >&2; exit 2; }
	echo "e2e.test: building $mod/e2e_test.go"
	local start
	start=$(date +%s)
	(cd "$mod" && nice -n "$nice_level" go test -c -trimpath -tags selinux,grpcnotrace \
		-ldflags "$ldflags" -o "$out/e2e.test.tmp" .)
	mv "$out/e2e.test.tmp" "$out/e2e.test"
	echo "e2e.test: built in $(($(date +%s) - start))s -> $out/e2e.test"
}

for name in "${wanted[@]}"; do
	case "$name" in
	kube-apiserver | kube-controller-manager | kube-scheduler)
		build "$name" "$mod" "k8s.io/kubernetes/cmd/$name" "$ldflags" ;;
	etcd)
		build etcd "$etcd_mod" . "-s -w" ;;
	e2e.test)
		build_e2e ;;
	ginkgo)
		build ginkgo "$mod" github.com/onsi/ginkgo/v2/ginkgo "-s -w" ;;
	*)
		echo "unknown binary $name" >&2; exit 2 ;;
	esac
done

"$out/kube-apiserver" --version 2>/dev/null || true
"$out/etcd" --version 2>/dev/null | head -1 || true
