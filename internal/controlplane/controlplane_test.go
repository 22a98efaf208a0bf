package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/tools"
)

func TestStartWithoutBinariesSaysRunMakeTools(t *testing.T) {
	_, err := Start(context.Background(), Options{Dir: t.TempDir(), BinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "run `make tools`") {
		t.Fatalf("want an error telling to run make tools, got %v", err)
	}
}

// processesUsing lists live processes whose command line mentions dir.
func processesUsing(t *testing.T, dir string) []string {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue
		}
		if stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); strings.Contains(string(stat), ") Z ") {
			continue // a zombie waiting for its reaper holds nothing
		}
		found = append(found, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return found
}

func binDir(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real control plane; skipped with -short")
	}
	dir, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tools.Path(dir, tools.KubeAPIServer); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestFailedAPIServerStopsEtcdAndNamesTheCause(t *testing.T) {
	bins := binDir(t)
	dir := t.TempDir()
	_, err := Start(context.Background(), Options{Dir: dir, BinDir: bins, ExtraAPIServerArgs: []string{"--no-such-flag=1"}})
	if err == nil {
		t.Fatal("want a start error")
	}
	if !strings.Contains(err.Error(), "kube-apiserver failed to start") || !strings.Contains(err.Error(), "no-such-flag") {
		t.Fatalf("error must name the part and the cause, got: %v", err)
	}
	if left := processesUsing(t, dir); len(left) > 0 {
		t.Fatalf("processes left running after a failed start: %v", left)
	}
}

func TestStartServeStop(t *testing.T) {
	bins := binDir(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Options{Dir: dir, BinDir: bins})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			cp.Stop()
		}
	}()
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	v, err := client.Discovery().ServerVersion()
	if err != nil || !strings.HasPrefix(v.GitVersion, "v1.37.") {
		t.Fatalf("server version %v, %v", v, err)
	}
	if _, err := os.Stat(cp.KubeconfigPath); err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	if len(cp.PIDs()) != 2 {
		t.Fatalf("PIDs = %v", cp.PIDs())
	}
	cp.Stop()
	stopped = true
	if left := processesUsing(t, dir); len(left) > 0 {
		t.Fatalf("processes left running after Stop: %v", left)
	}
}
