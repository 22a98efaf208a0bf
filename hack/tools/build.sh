#!/usr/bin/env bash
# Builds the pinned control-plane binaries (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, etcd, and the upstream
# apiserver-network-proxy proxy-server and proxy-agent) from Go module sources into
# _output/tools/<versions>/bin, together with kubelet-credential-harness
# (./kubelet-credential-harness: the kubelet's credential provider plugin
# client at KUBE_VERSION, for tests). A quick no-op when they are already
# built from the same pins and sources.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
out="$root/_output/tools/kube-${KUBE_VERSION}_etcd-${ETCD_VERSION}/bin"
bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd proxy-server proxy-agent kubelet-credential-harness)

# The stamp is a hash of everything that decides the binaries' content.
stamp=$(cat "$here/versions.env" "$here/build.sh" "$here/go.mod" "$here/go.sum" \
  "$here/etcd/go.mod" "$here/etcd/go.sum" "$here/etcd/main.go" \
  "$here"/kubelet-credential-harness/*.go | sha256sum | cut -c1-16)

have_all() {
  for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done
  [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]
}
if have_all; then
  echo "tools: up to date in ${out#"$root"/}"
  exit 0
fi

grep -Eq "k8s.io/kubernetes ${KUBE_VERSION}( |$)" "$here/go.mod" || {
  echo "tools: hack/tools/go.mod does not require k8s.io/kubernetes ${KUBE_VERSION} (versions.env); update one of them" >&2; exit 1; }
grep -Eq "sigs.k8s.io/apiserver-network-proxy ${ANP_VERSION}( |$)" "$here/go.mod" || {
  echo "tools: hack/tools/go.mod does not require sigs.k8s.io/apiserver-network-proxy ${ANP_VERSION} (versions.env); update one of them" >&2; exit 1; }
grep -Eq "go.etcd.io/etcd/server/v3 ${ETCD_VERSION}( |$)" "$here/etcd/go.mod" || {
  echo "tools: hack/tools/etcd/go.mod does not require etcd ${ETCD_VERSION} (versions.env); update one of them" >&2; exit 1; }

export GOWORK=off GOFLAGS=-mod=readonly
mkdir -p "$out"
tmp=$(mktemp -d "$out/.build.XXXXXX")
ticker_pid=
cleanup() {
  [ -n "$ticker_pid" ] && kill "$ticker_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# go build is silent for minutes on a cold cache; say that it is still going.
progress() { # label
  local start=$SECONDS
  while sleep 30; do echo "tools:   ... still building $1 ($((SECONDS - start))s)"; done
}
run_step() { # label, estimate, command...
  local label=$1 estimate=$2; shift 2
  local start=$SECONDS
  echo "tools: building $label ($estimate)"
  progress "$label" & ticker_pid=$!
  "$@"
  kill "$ticker_pid" 2>/dev/null || true; wait "$ticker_pid" 2>/dev/null || true; ticker_pid=
  echo "tools: built $label in $((SECONDS - start))s"
}

minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
kube_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION} \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=${minor}"

run_step "etcd ${ETCD_VERSION}" "about 1 min cold" \
  bash -c "cd '$here/etcd' && go build -trimpath -ldflags '-s -w' -o '$tmp/etcd' ."
# ANP's two commands and kubelet-credential-harness share the module (and
# most compiled packages) with Kubernetes, so they build in the same go build.
# ANP's are named after their directories (server, agent); they are renamed
# below.
run_step "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet-credential-harness ${KUBE_VERSION}; proxy-server, proxy-agent (apiserver-network-proxy ${ANP_VERSION})" "10-15 min cold on 2 cores" \
  bash -c "cd '$here' && go build -trimpath -ldflags '$kube_ldflags' -o '$tmp/' \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl \
    sigs.k8s.io/apiserver-network-proxy/cmd/server sigs.k8s.io/apiserver-network-proxy/cmd/agent \
    ./kubelet-credential-harness"
mv "$tmp/server" "$tmp/proxy-server"
mv "$tmp/agent" "$tmp/proxy-agent"

got=$("$tmp/kube-apiserver" --version)
[ "$got" = "Kubernetes ${KUBE_VERSION}" ] || { echo "tools: kube-apiserver --version says '$got', want 'Kubernetes ${KUBE_VERSION}'" >&2; exit 1; }
for b in proxy-server proxy-agent; do
  "$tmp/$b" --help >/dev/null 2>&1 || { echo "tools: $b --help failed" >&2; exit 1; }
done
for b in "${bins[@]}"; do mv -f "$tmp/$b" "$out/$b"; done
echo "$stamp" > "$out/.stamp"
echo "tools: ready in ${out#"$root"/}: $got, etcd ${ETCD_VERSION}, apiserver-network-proxy ${ANP_VERSION}"
