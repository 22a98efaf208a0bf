#!/usr/bin/env bash
# Builds the pinned tools from Go module sources into
# _output/tools/<versions>/bin. A quick no-op when they are already built
# from the same pins and sources.
#   control plane: kube-apiserver, kube-controller-manager, kube-scheduler,
#     kubectl, etcd, upstream apiserver-network-proxy's proxy-server and
#     proxy-agent, and kubelet-credential-harness (the kubelet's credential
#     provider plugin client at KUBE_VERSION, for tests);
#   a real node: kubelet, kube-proxy and agnhost (in the control plane's
#     go build); containerd, containerd-shim-runc-v2, ctr, crictl and the
#     CNI plugins in bin/cni (hack/tools/node, one go build); our own pause
#     (cmd/portside-pause); CoreDNS for the cluster's DNS
#     (hack/tools/coredns, its own go build). All static but etcd.
# runc and nft are Debian's (hack/ensure-node-packages.sh).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
out="$root/_output/tools/kube-${KUBE_VERSION}_etcd-${ETCD_VERSION}/bin"
bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd proxy-server proxy-agent kubelet-credential-harness
  kubelet kube-proxy agnhost containerd containerd-shim-runc-v2 ctr crictl pause coredns)
cni_plugins=(ptp host-local loopback portmap bridge)

# The stamp is a hash of everything that decides the binaries' content.
stamp=$(cat "$here/versions.env" "$here/build.sh" "$here/go.mod" "$here/go.sum" \
  "$here/etcd/go.mod" "$here/etcd/go.sum" "$here/etcd/main.go" \
  "$here"/kubelet-credential-harness/*.go "$here/node/go.mod" "$here/node/go.sum" \
  "$here/coredns/go.mod" "$here/coredns/go.sum" "$here/coredns/main.go" \
  "$root/cmd/portside-pause/main.go" | sha256sum | cut -c1-16)

have_all() {
  for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done
  for b in "${cni_plugins[@]}"; do [ -x "$out/cni/$b" ] || return 1; done
  [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]
}
if have_all; then
  echo "tools: up to date in ${out#"$root"/}"
  exit 0
fi

require() { # module file, module path, version, versions.env name
  grep -Eq "$2 $3( |$)" "$1" || {
    echo "tools: ${1#"$root"/} does not require $2 $3 ($4 in versions.env); update one of them" >&2; exit 1; }
}
require "$here/go.mod" k8s.io/kubernetes "$KUBE_VERSION" KUBE_VERSION
require "$here/go.mod" sigs.k8s.io/apiserver-network-proxy "$ANP_VERSION" ANP_VERSION
require "$here/etcd/go.mod" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" ETCD_VERSION
require "$here/node/go.mod" github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" CONTAINERD_VERSION
require "$here/node/go.mod" github.com/containernetworking/plugins "$CNI_PLUGINS_VERSION" CNI_PLUGINS_VERSION
require "$here/node/go.mod" sigs.k8s.io/cri-tools "$CRI_TOOLS_VERSION" CRI_TOOLS_VERSION
require "$here/coredns/go.mod" github.com/coredns/coredns "$COREDNS_VERSION" COREDNS_VERSION

export GOWORK=off GOFLAGS=-mod=readonly
# A module's directory, downloaded first: on a fresh machine the module
# cache is empty and `go list -m` would give no directory.
mod_dir() { # module dir, module path
  (cd "$1" && go mod download -json "$2") | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}
# The image tags are upstream's, read from the sources at the pins: a
# version bump that moves them fails here, not in a pod that cannot pull.
kube_dir=$(mod_dir "$here" k8s.io/kubernetes)
got=$(tr -d '[:space:]' <"$kube_dir/test/images/agnhost/VERSION")
[ "$got" = "$AGNHOST_VERSION" ] || {
  echo "tools: k8s.io/kubernetes ${KUBE_VERSION} builds agnhost $got, versions.env says AGNHOST_VERSION=${AGNHOST_VERSION}; update versions.env" >&2; exit 1; }
grep -q "CoreDNSVersion = \"${COREDNS_VERSION}\"" "$kube_dir/cmd/kubeadm/app/constants/constants.go" || {
  echo "tools: kubeadm ${KUBE_VERSION} deploys another CoreDNS than COREDNS_VERSION=${COREDNS_VERSION} (see CoreDNSVersion in $kube_dir/cmd/kubeadm/app/constants/constants.go); update versions.env and hack/tools/coredns/go.mod" >&2; exit 1; }
ctrd_dir=$(mod_dir "$here/node" github.com/containerd/containerd/v2)
grep -q "DefaultSandboxImage = \"registry.k8s.io/pause:${PAUSE_VERSION}\"" "$ctrd_dir/internal/cri/config/config.go" || {
  echo "tools: containerd ${CONTAINERD_VERSION}'s default sandbox image is not registry.k8s.io/pause:${PAUSE_VERSION} (PAUSE_VERSION in versions.env); see DefaultSandboxImage in $ctrd_dir/internal/cri/config/config.go" >&2; exit 1; }

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
total_start=$SECONDS

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
# ANP's two commands, kubelet-credential-harness, kubelet, kube-proxy and
# agnhost share the module (and most compiled packages) with Kubernetes, so
# they build in one go build. All static (CGO_ENABLED=0), as upstream builds
# every one of them but kubelet: agnhost must be (it runs in images without
# a libc), and cgo changes every package above net, so one cgo binary would
# compile about 1,300 packages twice (about 3 CPU-minutes cold). kubelet's
# only cgo packages are net and os/user; it uses Go's own resolver and user
# lookup instead, which is all a node here needs. agnhost's Makefile stamps
# main.Version (no other of these mains has one, so -X leaves them be).
# ANP's are named after their directories (server, agent); renamed below.
run_step "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy, kubelet-credential-harness ${KUBE_VERSION}; agnhost ${AGNHOST_VERSION}; proxy-server, proxy-agent (apiserver-network-proxy ${ANP_VERSION}) (static)" "10-14 min cold on 2 cores" \
  bash -c "cd '$here' && CGO_ENABLED=0 go build -trimpath -ldflags '$kube_ldflags -X main.Version=${AGNHOST_VERSION}' -o '$tmp/' \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/test/images/agnhost \
    sigs.k8s.io/apiserver-network-proxy/cmd/server sigs.k8s.io/apiserver-network-proxy/cmd/agent \
    ./kubelet-credential-harness"
mv "$tmp/server" "$tmp/proxy-server"
mv "$tmp/agent" "$tmp/proxy-agent"

# Static binaries for nodes, in their own modules (other versions of shared
# dependencies).
# containerd's storage drivers btrfs, devmapper and zfs need cgo or tools a
# node here never has; overlayfs and native remain.
ctrd_ldflags="-s -w \
 -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION} \
 -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2 \
 -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=${CNI_PLUGINS_VERSION} \
 -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRI_TOOLS_VERSION}"
cni_pkgs=(plugins/main/ptp plugins/ipam/host-local plugins/main/loopback plugins/meta/portmap plugins/main/bridge)
mkdir -p "$tmp/node"
run_step "containerd, containerd-shim-runc-v2, ctr ${CONTAINERD_VERSION}; CNI plugins ${CNI_PLUGINS_VERSION}; crictl ${CRI_TOOLS_VERSION} (static)" "about 1.5-2 min cold" \
  bash -c "cd '$here/node' && CGO_ENABLED=0 go build -trimpath -tags no_btrfs,no_devmapper,no_zfs -ldflags '$ctrd_ldflags' -o '$tmp/node/' \
    github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr \
    sigs.k8s.io/cri-tools/cmd/crictl ${cni_pkgs[*]/#/github.com/containernetworking/plugins/}"
mkdir -p "$tmp/cni"
for b in "${cni_plugins[@]}"; do mv "$tmp/node/$b" "$tmp/cni/$b"; done
mv "$tmp/node/"* "$tmp/"
# -buildvcs=false: inside the checkout Go would stamp the commit into it,
# and the pause image's digest would change with every commit.
run_step "pause (cmd/portside-pause, static)" "seconds" \
  bash -c "cd '$root' && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags '-s -w' -o '$tmp/pause' ./cmd/portside-pause"

# Its own module: CoreDNS's requirements (k8s.io at its own patch, ...)
# must not move what hack/tools and hack/tools/node build. Static, as the
# others in images. It shares almost no compiled package with them (other
# versions, or cgo): about 3 CPU-minutes cold.
run_step "coredns ${COREDNS_VERSION} (static)" "about 2-4 min cold" \
  bash -c "cd '$here/coredns' && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o '$tmp/coredns' ."

got=$("$tmp/kube-apiserver" --version)
[ "$got" = "Kubernetes ${KUBE_VERSION}" ] || { echo "tools: kube-apiserver --version says '$got', want 'Kubernetes ${KUBE_VERSION}'" >&2; exit 1; }
for b in kubelet kube-proxy; do
  v=$("$tmp/$b" --version)
  [ "$v" = "Kubernetes ${KUBE_VERSION}" ] || { echo "tools: $b --version says '$v', want 'Kubernetes ${KUBE_VERSION}'" >&2; exit 1; }
done
v=$("$tmp/containerd" --version)
[[ "$v" == *" ${CONTAINERD_VERSION} "* || "$v" == *" ${CONTAINERD_VERSION}" ]] || { echo "tools: containerd --version says '$v', want ${CONTAINERD_VERSION}" >&2; exit 1; }
for b in proxy-server proxy-agent; do
  "$tmp/$b" --help >/dev/null 2>&1 || { echo "tools: $b --help failed" >&2; exit 1; }
done
v=$("$tmp/coredns" -version); v=${v%%$'\n'*} # its first line
[ "$v" = "CoreDNS-${COREDNS_VERSION#v}" ] || { echo "tools: coredns -version says '$v', want CoreDNS-${COREDNS_VERSION#v}" >&2; exit 1; }
for f in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy proxy-server proxy-agent \
  agnhost pause coredns containerd containerd-shim-runc-v2 ctr crictl "${cni_plugins[@]/#/cni/}"; do
  go version -m "$tmp/$f" | grep -q 'CGO_ENABLED=0' || { echo "tools: $f is not static (CGO_ENABLED=0)" >&2; exit 1; }
done
# One rename per file: processes running the old binaries keep them.
mkdir -p "$out/cni"
for b in "${bins[@]}"; do mv -f "$tmp/$b" "$out/$b"; done
for b in "${cni_plugins[@]}"; do mv -f "$tmp/cni/$b" "$out/cni/$b"; done
echo "$stamp" > "$out/.stamp"
echo "tools: ready in ${out#"$root"/} after $((SECONDS - total_start))s: $got, etcd ${ETCD_VERSION}, apiserver-network-proxy ${ANP_VERSION}, containerd ${CONTAINERD_VERSION}, CNI plugins ${CNI_PLUGINS_VERSION}, crictl ${CRI_TOOLS_VERSION}, agnhost ${AGNHOST_VERSION}, coredns ${COREDNS_VERSION}"
