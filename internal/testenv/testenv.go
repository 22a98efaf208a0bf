// Package testenv gives integration tests a real control plane (etcd +
// kube-apiserver built by `make tools`), started once per test package from
// TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// Tests then take clients with Config, Client or Kubeconfig. The control
// plane is skipped only when asked with `go test -short`; `make test` never
// asks. Missing binaries fail the package with a message to run `make tools`.
package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/proc"
)

var (
	current *controlplane.ControlPlane
	skipped bool
)

// Main starts the control plane, runs the package's tests, stops the control
// plane (also on SIGINT/SIGTERM) and exits with the tests' status.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main for a TestMain with clean-up of its own: it returns the exit
// code instead of exiting.
func Run(m *testing.M) int {
	flag.Parse()
	return run(m)
}

func run(m *testing.M) int {
	if testing.Short() {
		skipped = true
		fmt.Fprintln(os.Stderr, "testenv: -short given: tests that need a control plane are skipped")
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "portside-testenv-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	start := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: dir})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv: cannot start the control plane:", err)
		return 1
	}
	current = cp
	defer cp.Stop()
	fmt.Fprintf(os.Stderr, "testenv: kube-apiserver %s ready in %v (pids %v)\n", cp.URL, time.Since(start).Round(time.Millisecond), cp.PIDs())

	// A test binary interrupted by Ctrl-C or killed by a go test timeout
	// signal still stops its children (Pdeathsig covers SIGKILL).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		cp.Stop()
		_ = os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "testenv: stopped the control plane on", s)
		os.Exit(2)
	}()
	return m.Run()
}

// ControlPlane returns the package's control plane, skipping the test under
// -short and failing it when TestMain did not call Main.
func ControlPlane(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	if skipped {
		t.Skip("needs a real control plane; skipped because -short was given")
	}
	if current == nil {
		t.Fatal("testenv: no control plane: call testenv.Main(m) from TestMain")
	}
	return current
}

// Config returns an admin REST config for the control plane.
func Config(t testing.TB) *rest.Config { return ControlPlane(t).RESTConfig() }

// Client returns an admin clientset for the control plane.
func Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(Config(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Kubeconfig returns the path of an admin kubeconfig for the control plane.
func Kubeconfig(t testing.TB) string { return ControlPlane(t).KubeconfigPath }

// Eventually polls cond every 100 ms until it holds, and fails the test
// with what and cond's last word after timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StartControlPlane starts a control plane of the test's own, configured by
// opts (Dir defaults to a temporary directory), and stops it when the test
// ends. Use it for flags the package's shared control plane lacks, such as
// an egress selector. It skips under -short like ControlPlane.
func StartControlPlane(t testing.TB, opts controlplane.Options) *controlplane.ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real control plane; skipped because -short was given")
	}
	if opts.Dir == "" {
		// Not t.TempDir: its long name would push unix sockets made here
		// past the 108-byte limit.
		dir, err := os.MkdirTemp("", "portside-cp-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("keeping the control plane's directory %s (logs/) because the test failed", dir)
				return
			}
			_ = os.RemoveAll(dir)
		})
		opts.Dir = dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		t.Fatalf("cannot start the control plane: %v", err)
	}
	t.Cleanup(cp.Stop)
	t.Logf("kube-apiserver %s ready in %v (pids %v)", cp.URL, time.Since(start).Round(time.Millisecond), cp.PIDs())
	return cp
}

// StartProcess starts bin as proc.Start does, logging to logPath, and
// stops it (grace, then SIGKILL) when the test ends, printing its log's
// tail if the test failed.
func StartProcess(t testing.TB, name, bin string, args []string, logPath string, grace time.Duration) *proc.Process {
	t.Helper()
	p, err := proc.Start(name, bin, args, nil, logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(grace)
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, p.LogTail(60))
		}
	})
	return p
}
