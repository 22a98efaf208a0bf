#!/usr/bin/env bash
# Builds Kubernetes' own end-to-end suite, e2e.test (k8s.io/kubernetes/test/e2e
# at KUBE_VERSION), and the ginkgo v2 CLI at the version kubernetes requires,
# into _output/tools/<versions>/e2e. They are large (e2e.test is ~150 MB and
# takes minutes), so only `make e2e-tools` (and what needs them: `make
# e2e-upstream`, `make test`'s subset) builds them; a quick no-op when they
# are already built from the same pins.
#
# The module is test/upstreame2e/tools: hack/tools/go.mod's requirements plus
# ginkgo's CLI, with a go.sum complete for both (-mod=readonly), kept apart
# from hack/tools so the control plane's module never grows e2e's deps.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=tools/versions.env
source "$here/tools/versions.env"
mod="$root/test/upstreame2e/tools"
out="$root/_output/tools/kube-${KUBE_VERSION}_etcd-${ETCD_VERSION}/e2e"
stamp=$(cat "$here/tools/versions.env" "$here/build-e2e.sh" "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)

if [ -x "$out/e2e.test" ] && [ -x "$out/ginkgo" ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "e2e-tools: up to date in ${out#"$root"/}"
  exit 0
fi

# The suite must be the cluster's version, and ginkgo the version the suite
# was compiled with (the CLI refuses a mismatched suite).
export GOWORK=off GOFLAGS=-mod=readonly
cd "$mod"
got=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
[ "$got" = "$KUBE_VERSION" ] || {
  echo "e2e-tools: test/upstreame2e/tools/go.mod has k8s.io/kubernetes $got, versions.env KUBE_VERSION=$KUBE_VERSION; update the go.mod (copy hack/tools/go.mod, then go list -mod=mod -deps -test k8s.io/kubernetes/test/e2e github.com/onsi/ginkgo/v2/ginkgo)" >&2; exit 1; }
# Downloaded first: on a fresh machine `go list -m` would give no directory.
kube_dir=$(go mod download -json k8s.io/kubernetes | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
want_ginkgo=$(awk '$1 == "github.com/onsi/ginkgo/v2" {print $2; exit}' "$kube_dir/go.mod")
got_ginkgo=$(go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
[ "$got_ginkgo" = "$want_ginkgo" ] || {
  echo "e2e-tools: test/upstreame2e/tools/go.mod has ginkgo $got_ginkgo, k8s.io/kubernetes $KUBE_VERSION requires $want_ginkgo" >&2; exit 1; }

mkdir -p "$out"
tmp=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
# The suite logs and checks its own version against the server's; stamp it
# as kubernetes' own build does. -trimpath as hack/tools/build.sh, so the
# packages both compile (client-go, apimachinery, ...) are shared in the
# build cache.
ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION}"
start=$SECONDS
echo "e2e-tools: building e2e.test ${KUBE_VERSION} and ginkgo ${got_ginkgo} (about 2.5 min with a warm build cache, 10+ min cold on 2 cores)"
( while sleep 60; do echo "e2e-tools:   ... still building ($((SECONDS - start))s)"; done ) & ticker=$!
trap 'kill $ticker 2>/dev/null || true; rm -rf "$tmp"' EXIT
go test -c -trimpath -ldflags "$ldflags" -o "$tmp/e2e.test" k8s.io/kubernetes/test/e2e
go build -trimpath -ldflags '-s -w' -o "$tmp/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
kill $ticker 2>/dev/null || true

"$tmp/ginkgo" version | grep -q "${got_ginkgo#v}" || { echo "e2e-tools: ginkgo version says '$("$tmp/ginkgo" version)', want ${got_ginkgo}" >&2; exit 1; }
"$tmp/e2e.test" --help >/dev/null 2>&1 || true
# One rename per file: a run still using the old binaries keeps them.
mv -f "$tmp/e2e.test" "$out/e2e.test"
mv -f "$tmp/ginkgo" "$out/ginkgo"
echo "$stamp" >"$out/.stamp"
echo "e2e-tools: ready in ${out#"$root"/} after $((SECONDS - start))s: e2e.test ${KUBE_VERSION}, ginkgo ${got_ginkgo}"
