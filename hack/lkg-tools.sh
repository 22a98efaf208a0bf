#!/usr/bin/env bash
# Builds one Kubernetes release's parts for the last-known-good matrix
# (`make lkg`, test/lkg) from module sources: kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy and
# agnhost into _output/tools/lkg/kube-<version>/bin, and e2e.test with the
# ginkgo CLI it was compiled against into .../e2e. What does not follow the
# Kubernetes release (etcd, containerd, the CNI plugins, crictl, pause,
# CoreDNS, upstream's proxy-server and proxy-agent, the credential harness)
# is the pinned build's (`make tools`), linked: the matrix varies Kubernetes
# alone. A quick no-op when already built from the same inputs; prints the
# bin directory last (PORTSIDE_TOOLS_BIN for `portside up`).
#
# The module is generated per version: k8s.io/kubernetes at <version> with
# its staging modules (those its own go.mod replaces with ./staging)
# replaced by the matching v0.<minor>.<patch> releases, as any module that
# imports Kubernetes must; the rest of the build list is Kubernetes' own
# requirements (MVS), so each release builds with what it was tested with.
#
# Image tags differ per release (agnhost 2.59 in v1.35, pause 3.10.1):
# bin/image-aliases lists the release's tags, and `portside up` pushes the
# images under those names too (internal/nodeimages).
set -euo pipefail

usage="usage: hack/lkg-tools.sh v1.<minor>.<patch>"
version=${1:?$usage}
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "lkg-tools: '$version' is not a Kubernetes release (want v1.<minor>.<patch>, e.g. v1.36.3)" >&2; exit 2; }
minor=${BASH_REMATCH[1]}
staging="v0.${minor}.${BASH_REMATCH[2]}"

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=tools/versions.env
source "$here/tools/versions.env"
pinned="$root/_output/tools/kube-${KUBE_VERSION}_etcd-${ETCD_VERSION}"
if [ "$version" = "$KUBE_VERSION" ]; then
  # The pinned release is `make tools` and `make e2e-tools` themselves.
  [ -x "$pinned/bin/kube-apiserver" ] && [ -x "$pinned/e2e/e2e.test" ] || {
    echo "lkg-tools: $version is the pinned release: run make tools e2e-tools" >&2; exit 1; }
  echo "$pinned/bin"
  exit 0
fi
shared=(etcd proxy-server proxy-agent kubelet-credential-harness containerd containerd-shim-runc-v2 ctr crictl pause coredns cni)
for b in "${shared[@]}"; do
  [ -e "$pinned/bin/$b" ] || { echo "lkg-tools: $pinned/bin/$b is missing: run make tools first (the matrix shares the pinned etcd, containerd, CNI plugins, ...)" >&2; exit 1; }
done

out="$root/_output/tools/lkg/kube-${version}"
bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy agnhost)
stamp=$( (cat "$here/tools/versions.env" "$0"; echo "$version") | sha256sum | cut -c1-16)
have_all() {
  for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || return 1; done
  [ -x "$out/e2e/e2e.test" ] && [ -x "$out/e2e/ginkgo" ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]
}
if have_all; then
  echo "lkg-tools: $version up to date in ${out#"$root"/}" >&2
  echo "$out/bin"
  exit 0
fi

export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
mod="$out/mod"
mkdir -p "$mod" "$out/bin" "$out/e2e"
cd "$mod"
printf 'module github.com/portside-io/portside/lkg/kube-%s\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n' "$version" "$version" >go.mod
: >go.sum
kube_dir=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$kube_dir" ] || { echo "lkg-tools: the Go module proxy did not give k8s.io/kubernetes@$version" >&2; exit 1; }
mapfile -t staged < <(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#\1#p' "$kube_dir/go.mod")
[ "${#staged[@]}" -gt 10 ] || { echo "lkg-tools: found no staging modules in $kube_dir/go.mod" >&2; exit 1; }
{
  printf 'module github.com/portside-io/portside/lkg/kube-%s\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\n' "$version" "$version"
  echo "// k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them"
  echo "// with ./staging; a module importing it names their releases instead."
  echo "replace ("
  for m in "${staged[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "$staging"; done
  echo ")"
} >go.mod

agnhost_tag=$(tr -d '[:space:]' <"$kube_dir/test/images/agnhost/VERSION")
pause_tag=$(sed -n 's/.*configs\[Pause\] = Config{list.GcRegistry, "pause", "\([^"]*\)"}.*/\1/p' "$kube_dir/test/utils/image/manifest.go")
ginkgo_version=$(awk '$1 == "github.com/onsi/ginkgo/v2" {print $2; exit}' "$kube_dir/go.mod")
[ -n "$agnhost_tag" ] && [ -n "$pause_tag" ] && [ -n "$ginkgo_version" ] || {
  echo "lkg-tools: could not read agnhost's tag, pause's tag or ginkgo's version from $kube_dir" >&2; exit 1; }

tmp=$(mktemp -d "$out/.build.XXXXXX")
ticker=
trap '[ -n "$ticker" ] && kill $ticker 2>/dev/null; rm -rf "$tmp"' EXIT
start=$SECONDS
( while sleep 60; do echo "lkg-tools:   ... still building $version ($((SECONDS - start))s)" >&2; done ) & ticker=$!

ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=${version} \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=${version} \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=${minor}"
echo "lkg-tools: building Kubernetes $version (control plane, kubelet, kube-proxy, agnhost $agnhost_tag; 10-14 min cold on 2 cores)" >&2
go build -trimpath -ldflags "$ldflags -X main.Version=${agnhost_tag}" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/test/images/agnhost
echo "lkg-tools: building e2e.test $version and ginkgo $ginkgo_version (minutes)" >&2
go get "github.com/onsi/ginkgo/v2@$ginkgo_version" >/dev/null 2>&1 || go get "github.com/onsi/ginkgo/v2@$ginkgo_version"
# -vet=off: go test would vet all of e2e (minutes of CPU) for a binary.
go test -c -vet=off -trimpath -ldflags "$ldflags" -o "$tmp/e2e.test" k8s.io/kubernetes/test/e2e
go build -trimpath -ldflags '-s -w' -o "$tmp/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
kill $ticker 2>/dev/null || true; ticker=

for b in kube-apiserver kubelet kube-proxy; do
  got=$("$tmp/$b" --version)
  [ "$got" = "Kubernetes $version" ] || { echo "lkg-tools: $b --version says '$got', want 'Kubernetes $version'" >&2; exit 1; }
done
"$tmp/ginkgo" version | grep -q "${ginkgo_version#v}" || { echo "lkg-tools: ginkgo version says '$("$tmp/ginkgo" version)', want $ginkgo_version" >&2; exit 1; }

for b in "${bins[@]}"; do mv -f "$tmp/$b" "$out/bin/$b"; done
mv -f "$tmp/e2e.test" "$out/e2e/e2e.test"
mv -f "$tmp/ginkgo" "$out/e2e/ginkgo"
for b in "${shared[@]}"; do ln -sfn "$pinned/bin/$b" "$out/bin/$b"; done
# The release's own tags for the images up builds (name, then alias).
{
  echo "# Kubernetes $version's tags of the images portside up builds (internal/nodeimages): name alias"
  echo "registry.k8s.io/e2e-test-images/agnhost:${AGNHOST_VERSION} registry.k8s.io/e2e-test-images/agnhost:${agnhost_tag}"
  echo "registry.k8s.io/pause:${PAUSE_VERSION} registry.k8s.io/pause:${pause_tag}"
} >"$out/bin/image-aliases"
echo "$stamp" >"$out/.stamp"
echo "lkg-tools: Kubernetes $version ready in ${out#"$root"/} after $((SECONDS - start))s" >&2
echo "$out/bin"
