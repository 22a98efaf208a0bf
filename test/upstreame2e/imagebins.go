package upstreame2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/nodeimages"
)

// imageBinary is a program of an e2e image that `portside up` builds
// (internal/nodeimages) when it finds the binary in the e2e tools
// directory: only this suite's specs need it, so `make tools` does not
// build it.
type imageBinary struct {
	name, pkg string
}

// imageBinaries are built from the tools module (test/upstreame2e/tools,
// k8s.io/kubernetes at KUBE_VERSION, go.sum complete).
var imageBinaries = []imageBinary{
	// The Conntrack "invalid conntrack state bug" spec's server.
	{nodeimages.RegressionIssue74839, "k8s.io/kubernetes/test/images/regression-issue-74839"},
}

// BuildImageBinaries builds imageBinaries into e2eDir, static (the images
// have no libc), before `portside up` builds its images. Seconds from a
// warm build cache; go build leaves an up-to-date binary as it is.
func BuildImageBinaries(ctx context.Context, root, e2eDir string) error {
	for _, b := range imageBinaries {
		out := filepath.Join(e2eDir, b.name)
		cmd := exec.CommandContext(ctx, "go", "build", "-mod=readonly", "-trimpath", "-ldflags=-s -w", "-o", out, b.pkg)
		cmd.Dir = filepath.Join(root, "test", "upstreame2e", "tools")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s (%s): %v\n%s", b.name, b.pkg, err, msg)
		}
		klog.FromContext(ctx).V(2).Info("Built an e2e image's binary", "binary", out)
	}
	return nil
}
