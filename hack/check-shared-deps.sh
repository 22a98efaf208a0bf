#!/usr/bin/env bash
# Checks that the portside binary and the control-plane tools (hack/tools)
# compile every module they share at the same version. Built with the same
# flags (-trimpath), the tools' `go build` then leaves compiled packages in
# the Go build cache that the first `go build` of portside reuses: a fresh
# machine compiles client-go, apimachinery, grpc & co once, not twice.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export GOWORK=off GOFLAGS=-mod=readonly
# A module replaced by another version (hack/tools pins k8s.io/kubectl and
# others required as v0.0.0 by k8s.io/kubernetes) is compiled at the
# replacement's version.
fmt='{{with .Module}}{{if not .Main}}{{.Path}} {{if and .Replace .Replace.Version}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}{{end}}{{end}}'
ours=$(cd "$root" && go list -deps -f "$fmt" ./cmd/portside | sort -u)
theirs=$(cd "$root/hack/tools" && go list -deps -f "$fmt" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl | sort -u)
bad=$(join <(echo "$ours") <(echo "$theirs") | awk '$2 != $3 {printf "  %s: portside %s, hack/tools %s\n", $1, $2, $3}')
if [ -n "$bad" ]; then
  echo "modules compiled into both portside and the control-plane tools at different versions:"
  echo "$bad"
  echo "align them (go get MODULE@VERSION in the module with the older one), so the first build shares compiled packages"
  exit 1
fi
echo "shared modules: $(join <(echo "$ours") <(echo "$theirs") | wc -l), all at the same version"
