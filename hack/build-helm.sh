#!/usr/bin/env bash
# Builds the helm CLI (helm.sh/helm/v3/cmd/helm) at the version go.mod pins
# into _output/tools/helm-<version>/helm, once: in a scratch module with
# this module's requirements (-mod=mod fetches the few modules the CLI
# needs beyond the library from the module proxy). docs/install.md's
# commands use it; test/integration/helm builds its own the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(go list -m -f '{{.Version}}' helm.sh/helm/v3)
out="_output/tools/helm-${version}"
if [[ -x "$out/helm" ]]; then
	echo "$out/helm"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed 's#^module .*#module portside.local/helmcli#' go.mod >"$tmp/go.mod"
cp go.sum "$tmp/go.sum"
mkdir -p "$out"
(cd "$tmp" && GOWORK=off GOFLAGS= CGO_ENABLED=0 go build -mod=mod -trimpath \
	-ldflags "-X helm.sh/helm/v3/internal/version.version=${version}" -o "$tmp/helm" helm.sh/helm/v3/cmd/helm)
mv "$tmp/helm" "$out/helm"
echo "$out/helm"
