# Portside. `make help` lists the targets.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILDDATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
# The pinned tool versions (KUBE_VERSION, ETCD_VERSION): the binary records
# where this checkout's control-plane tools are, to run from any directory.
include hack/tools/versions.env
TOOLS_BIN := $(CURDIR)/_output/tools/kube-$(KUBE_VERSION)_etcd-$(ETCD_VERSION)/bin
LDFLAGS   := -X github.com/portside-io/portside/internal/tools.builtBinDir=$(TOOLS_BIN) \
             -X github.com/portside-io/portside/internal/version.Version=$(VERSION) \
             -X github.com/portside-io/portside/internal/version.Commit=$(COMMIT) \
             -X github.com/portside-io/portside/internal/version.BuildDate=$(BUILDDATE)
BIN       := _output/bin/portside
STATICCHECK_VERSION := v0.8.2
# Extra flags for `portside up` in `make demo`, e.g. DEMO_FLAGS=--once.
DEMO_FLAGS ?=
# Extra flags for go test, e.g. TEST_FLAGS='-run TestX -v'.
TEST_FLAGS ?=
BENCH     ?= .

export GOWORK := off

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
# -trimpath and CGO_ENABLED=0 as in hack/tools/build.sh: with the same flags
# and the same module versions (hack/check-shared-deps.sh), the first build
# reuses the packages the tools build compiled (portside has no cgo: static
# costs nothing and runs on any node).
# The credential plugin is installed on nodes and exec'd per pull: static
# (no libc, no dynamic loader at each start) and stripped.
build: ## Build the portside binary and the lean, static portside-credential-provider into _output/bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/portside
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o _output/bin/ ./cmd/portside-credential-provider

.PHONY: image
# No Docker engine: hack/image cross-compiles portside (static) for both
# platforms and builds the image with go-containerregistry. The build date
# is the HEAD commit's (or $SOURCE_DATE_EPOCH): same commit, same digest.
# IMAGE_FLAGS adds flags, e.g. IMAGE_FLAGS=--local-cloud-data-dir=<dir> to push
# to a local cloud's registry with a push credential it issues.
image: ## Build the OCI image of portside (linux/amd64, linux/arm64) into _output/image/oci; IMAGE_PUSH=<ref> pushes it
	$(GO) run ./hack/image --version '$(VERSION)' --commit '$(COMMIT)' --go '$(GO)' --out _output/image/oci $(if $(IMAGE_PUSH),--push '$(IMAGE_PUSH)') $(IMAGE_FLAGS)

.PHONY: tools
tools: ## Build the pinned control plane (etcd, kube-apiserver, KCM, kube-scheduler, kubectl, ANP proxy-server/agent, credential-provider harness) and real nodes' parts (kubelet, kube-proxy, containerd, CNI plugins, crictl, agnhost, pause, CoreDNS) (once)
	@hack/tools/build.sh

.PHONY: e2e-tools
e2e-tools: ## Build Kubernetes' own e2e suite (e2e.test) and ginkgo at KUBE_VERSION into _output/tools/<versions>/e2e (large: only when asked; once)
	@hack/build-e2e.sh

.PHONY: e2e-upstream
# RUN is a run of test/upstreame2e/runs.yaml; E2E_FLAGS adds flags, e.g.
# E2E_FLAGS=--kubeconfig=<file> (an existing cluster instead of portside up),
# E2E_FLAGS=--ccm-binary=<upstream's CCM> (the comparison run).
RUN ?= loadbalancer
E2E_FLAGS ?=
e2e-upstream: tools build node-packages e2e-tools ## Run Kubernetes' e2e suite (RUN=loadbalancer|loadbalancer-dual|loadbalancer-ipv6|dual-stack|cloud-provider-kind|traffic-distribution|subset) against portside up with real nodes: JUnit and summary in _output/e2e-upstream
	$(GO) run ./test/upstreame2e/cmd/e2e-upstream --run '$(RUN)' --portside $(CURDIR)/$(BIN) $(E2E_FLAGS)

.PHONY: lkg
# LKG_FLAGS adds flags, e.g. LKG_FLAGS=--versions=v1.36.3,v1.37.2,
# LKG_FLAGS='--providers=local,mine=<ccm binary>' (any CCM with upstream's
# flags), LKG_FLAGS=--e2e-run=none (conformance only).
LKG_FLAGS ?=
lkg: tools build node-packages e2e-tools ## Last known good: conformance + upstream e2e subset per provider (Portside's CCM, upstream's through the adapter, test/brokenccm) x Kubernetes release (the newest patch of the 3 newest minors), real nodes; report (JSON, Markdown, changes since the last) in _output/lkg
	$(GO) run ./test/lkg/cmd/lkg --portside $(CURDIR)/$(BIN) $(LKG_FLAGS)

.PHONY: helm
helm: ## Build the helm CLI at the version go.mod pins into _output/tools/helm-<version>/helm (docs/install.md uses it)
	@hack/build-helm.sh

.PHONY: browser
browser: ## Install Debian's chromium for the web console's browser tests (skipped, saying so, if it cannot)
	@hack/ensure-chromium.sh

.PHONY: node-packages
node-packages: ## Install Debian's runc, nftables and iptables for real nodes and the tools of the agnhost image (busybox-static, netcat-openbsd, curl, dnsutils, socat, ...) (says what is missing if it cannot; fails under CI=true)
	@hack/ensure-node-packages.sh

.PHONY: test
test: tools e2e-tools browser node-packages ## Run all tests, integration against a real kube-apiserver included
	$(GO) test -race -count=1 -timeout 30m $(TEST_FLAGS) ./...

.PHONY: demo
demo: tools build node-packages ## Run the local environment (portside up, real nodes where the machine allows it); Ctrl-C stops it
	$(BIN) up $(DEMO_FLAGS)

.PHONY: bench
bench: tools ## Run the benchmarks
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count=1 -timeout 150m ./...

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 60s), one at a time (make test runs their seed corpora)
	@hack/fuzz.sh

.PHONY: lint
lint: ## gofmt, go vet, staticcheck (pinned), shared module versions with hack/tools
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@hack/check-shared-deps.sh

.PHONY: clean
clean: ## Remove build output (keeps the built tools)
	rm -rf _output/bin _output/up
