package tools

import "path/filepath"

// Names of Kubernetes' own e2e suite and its runner, built at KUBE_VERSION
// by `make e2e-tools` (hack/build-e2e.sh) only when asked: they are large.
const (
	// E2ETest is k8s.io/kubernetes/test/e2e compiled with go test -c.
	E2ETest = "e2e.test"
	// Ginkgo is the ginkgo v2 CLI at the version kubernetes requires.
	Ginkgo = "ginkgo"
)

// E2EDir is where `make e2e-tools` puts E2ETest and Ginkgo: e2e beside the
// bin directory binDir of the same versions.
func E2EDir(binDir string) string {
	return filepath.Join(filepath.Dir(binDir), "e2e")
}
