package upstreame2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/syncbuf"
)

// Up is a `portside up --node-mode=real` this run started.
type Up struct {
	bin, dataDir string
	cmd          *exec.Cmd
	out          *syncbuf.Buffer
	done         chan error
}

// Kubeconfig is the environment's admin kubeconfig.
func (u *Up) Kubeconfig() string {
	return filepath.Join(u.dataDir, "controlplane", "kubeconfig")
}

// Output is what up printed so far.
func (u *Up) Output() string { return u.out.String() }

// StartUp runs `bin up --node-mode=real --nodes=N --data-dir dataDir
// extra...` from dir (the checkout: up finds the tools from there) and
// waits until it says it is ready. If this process dies, up gets SIGTERM
// and stops what it started.
//
// Each real-node environment takes ranges nothing on the host uses and
// claims them while it runs, so two starting at once pick different ones.
// A reused data directory keeps its ranges, which another environment may
// hold or route by now: up then refuses to start ("chosen when data
// directory", or the local cloud's "overlaps the host's route"), and
// StartUp forgets the choice and starts again, up to busyWait.
func StartUp(ctx context.Context, bin, dir, dataDir string, nodes int, extra ...string) (*Up, error) {
	return StartUpEnv(ctx, bin, dir, dataDir, nodes, nil, extra...)
}

// StartUpEnv is StartUp with env added to up's environment (e.g.
// PORTSIDE_TOOLS_BIN: another release's tools, for the last-known-good
// matrix).
func StartUpEnv(ctx context.Context, bin, dir, dataDir string, nodes int, env []string, extra ...string) (*Up, error) {
	logger := klog.FromContext(ctx)
	deadline := time.Now().Add(busyWait)
	for {
		u, err := startUp(ctx, bin, dir, dataDir, nodes, env, extra...)
		if err == nil || !RangesBusy(u.Output()) || time.Now().After(deadline) {
			return u, err
		}
		logger.Info("Another real-node environment holds the cluster's ranges; waiting for it", "retryIn", busyRetry)
		// up stopped what it started; down clears the rest before the
		// retry, which chooses the ranges again.
		_ = u.Stop(ctx)
		_ = os.Remove(filepath.Join(dataDir, "real-network.json"))
		_ = os.Remove(filepath.Join(dataDir, "network.json"))
		select {
		case <-ctx.Done():
			return u, ctx.Err()
		case <-time.After(busyRetry):
		}
	}
}

// busyWait bounds the retries.
var busyWait, busyRetry = 5 * time.Minute, 5 * time.Second

// RangesBusy reports whether up's output says another environment holds
// the ranges it needs: its claim (devenv's heldError), or a host route
// the local cloud refuses a VPC over.
func RangesBusy(upOutput string) bool {
	return strings.Contains(upOutput, "overlaps the host's route") ||
		strings.Contains(upOutput, "was first used, is in use by")
}

func startUp(ctx context.Context, bin, dir, dataDir string, nodes int, env []string, extra ...string) (*Up, error) {
	args := append([]string{"up", "--node-mode=real", fmt.Sprintf("--nodes=%d", nodes), "--data-dir", dataDir}, extra...)
	klog.FromContext(ctx).Info("Starting portside up", "args", args)
	u := &Up{bin: bin, dataDir: dataDir, out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	u.cmd = exec.Command(bin, args...)
	u.cmd.Dir = dir
	if env != nil {
		u.cmd.Env = append(os.Environ(), env...)
	}
	u.cmd.Stdout, u.cmd.Stderr = u.out, u.out
	u.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := u.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { u.done <- u.cmd.Wait() }()
	// Real nodes boot, TLS-bootstrap and get initialized by the CCM in
	// about 10 s; a loaded 2-core machine takes several times that.
	deadline := time.After(5 * time.Minute)
	for !strings.Contains(u.out.String(), "press Ctrl-C") {
		select {
		case err := <-u.done:
			u.done <- err
			return u, fmt.Errorf("portside up exited early: %v\n%s", err, u.out.String())
		case <-deadline:
			return u, fmt.Errorf("portside up not ready after 5 min:\n%s", u.out.String())
		case <-ctx.Done():
			return u, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return u, nil
}

// Stop signals up (SIGINT, as Ctrl-C), waits for it, and runs `portside
// down` in any case, so nothing of the environment outlives the run even
// if up was killed.
func (u *Up) Stop(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if u.cmd.Process != nil {
		_ = u.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-u.done:
		case <-time.After(90 * time.Second):
			logger.Info("portside up did not stop within 90 s after SIGINT; killing it", "pid", u.cmd.Process.Pid)
			_ = u.cmd.Process.Kill()
			<-u.done
		}
	}
	out, err := exec.Command(u.bin, "down", "--data-dir", u.dataDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("portside down --data-dir %s: %v\n%s", u.dataDir, err, out)
	}
	return nil
}

// Purge keeps the environment's logs at logsTo and removes the rest of
// its data directory (`portside down --purge`; up left its marker there),
// after Stop.
func (u *Up) Purge(logsTo string) error {
	if err := os.Rename(filepath.Join(u.dataDir, "logs"), logsTo); err != nil && !os.IsNotExist(err) {
		return err
	}
	out, err := exec.Command(u.bin, "down", "--purge", "--data-dir", u.dataDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("portside down --purge --data-dir %s: %v\n%s", u.dataDir, err, out)
	}
	return nil
}

// WriteFile saves up's output beside the reports.
func (u *Up) WriteFile(path string) error {
	return os.WriteFile(path, []byte(u.out.String()), 0o644)
}
