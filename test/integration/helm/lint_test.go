package helm

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// helmCLI builds the real helm command (helm.sh/helm/v3/cmd/helm) at the
// version this module pins, in a scratch module with this module's
// requirements (-mod=mod: the CLI needs a few modules the library does
// not, fetched from the module proxy), and returns its path.
func helmCLI(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	gomod = regexp.MustCompile(`(?m)^module .*$`).ReplaceAll(gomod, []byte("module portside.test/helmcli"))
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": gomod, "go.sum": gosum} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "helm")
	cmd := exec.Command("go", "build", "-mod=mod", "-trimpath", "-o", bin, "helm.sh/helm/v3/cmd/helm")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build helm: %v\n%s", err, out)
	}
	return bin
}

// TestHelmLint: the real helm CLI lints the chart clean, strictly, with
// the default values and with every optional part on; its only note is
// the missing icon (the project has no logo).
func TestHelmLint(t *testing.T) {
	helm := helmCLI(t)
	for name, sets := range map[string][]string{
		"defaults": nil,
		"everything on": {"webhook.enabled=true", "webhook.caBundle=eA==", "webhook.clientCA.configMapName=ca", "networkProxy.enabled=true",
			"nodeServingCSRApprover.enabled=true", "leaderMigration.enabled=true", "useServiceAccountCredentials=true"},
		"one replica": {"replicaCount=1", "leaderElection.enabled=false"},
	} {
		args := []string{"lint", chartDir(t), "--strict", "--namespace", "kube-system"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		out, err := exec.Command(helm, args...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: helm %s: %v\n%s", name, strings.Join(args, " "), err, out)
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "[") && !strings.Contains(line, "icon is recommended") {
				t.Errorf("%s: helm lint says %q", name, line)
			}
		}
		if !strings.Contains(string(out), "1 chart(s) linted, 0 chart(s) failed") {
			t.Errorf("%s: helm lint:\n%s", name, out)
		}
	}
	// It reports what the chart refuses (helm lint prints a template's
	// fail as a note; `helm install` refuses it: TestSingleReplicaWithout-
	// LeaderElection).
	out, err := exec.Command(helm, "lint", chartDir(t), "--strict", "--namespace", "kube-system", "--set", "replicaCount=3", "--set", "leaderElection.enabled=false").CombinedOutput()
	if !strings.Contains(string(out), "Fail: replicaCount 3 needs leaderElection.enabled") {
		t.Errorf("helm lint of 3 replicas without leader election: %v\n%s", err, out)
	}
	// And the schema's refusals fail it.
	out, err = exec.Command(helm, "lint", chartDir(t), "--strict", "--namespace", "kube-system", "--set", "replicaCount=zero").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "replicaCount") {
		t.Errorf("helm lint with replicaCount=zero passed: %v\n%s", err, out)
	}
}
