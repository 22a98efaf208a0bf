// Package devenv implements `portside up` and `portside down`: it starts the
// parts of a local Portside environment in order, reports progress, and stops
// everything it started, by PID, on exit or on any start-up failure.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/tools"
)

// Options configure `portside up`.
type Options struct {
	// DataDir keeps the environment's state between runs.
	DataDir string
	// Once verifies the environment and stops, for scripts and tests.
	Once bool
	// Purge removes DataDir when the environment stops.
	Purge bool
	// Out receives progress lines.
	Out io.Writer
}

const pidFileName = "portside-up.pid"

// Up starts the environment and blocks until ctx is done (or, with Once,
// until it has verified the environment).
func Up(ctx context.Context, opts Options) (err error) {
	if opts.DataDir == "" {
		return errors.New("--data-dir must not be empty")
	}
	dataDir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("data directory %s: %w", dataDir, err)
	}
	pidFile := filepath.Join(dataDir, pidFileName)
	if pid, alive := readPIDFile(pidFile); alive {
		return fmt.Errorf("portside up is already running with data directory %s (pid %d): run `portside down --data-dir %s` first", dataDir, pid, opts.DataDir)
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	defer func() { _ = os.Remove(pidFile) }()
	p := progress{w: opts.Out, start: time.Now()}

	binDir, err := tools.BinDir()
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	p.step("control plane", "starting etcd and kube-apiserver (state in %s)", dataDir)
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(dataDir, "controlplane"), BinDir: binDir, Durable: true})
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	defer func() {
		p.step("shutdown", "stopping kube-apiserver and etcd")
		cp.Stop()
		if opts.Purge {
			_ = os.RemoveAll(dataDir)
			p.step("shutdown", "removed %s", dataDir)
		} else {
			p.step("shutdown", "state kept in %s (remove it with `portside down --purge`)", dataDir)
		}
	}()
	pids := cp.PIDs()
	p.step("control plane", "kube-apiserver ready at %s (pid %d, etcd pid %d)", cp.URL, pids["kube-apiserver"], pids["etcd"])

	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return err
	}
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	p.step("control plane", "Kubernetes %s serving", v.GitVersion)

	kubectl, _ := tools.Path(binDir, tools.Kubectl)
	p.step("ready", "use the cluster with:\n\n    export KUBECONFIG=%s\n    %s get nodes\n", cp.KubeconfigPath, kubectlName(kubectl))
	if opts.Once {
		if kubectl != "" {
			out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.KubeconfigPath, "get", "namespaces").CombinedOutput()
			if err != nil {
				return fmt.Errorf("kubectl get namespaces: %v: %s", err, out)
			}
			p.step("verify", "kubectl get namespaces:\n%s", indent(string(out)))
		}
		return nil
	}
	p.step("ready", "press Ctrl-C or run `portside down` to stop")
	<-ctx.Done()
	return nil
}

// Down stops a running `portside up` that uses dataDir and waits for it to exit.
func Down(ctx context.Context, dataDir string, purge bool, out io.Writer) error {
	pidFile := filepath.Join(dataDir, pidFileName)
	pid, alive := readPIDFile(pidFile)
	if alive {
		fmt.Fprintf(out, "stopping portside up (pid %d)\n", pid)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return fmt.Errorf("signal pid %d: %w", pid, err)
		}
		for alive {
			select {
			case <-ctx.Done():
				return fmt.Errorf("portside up (pid %d) did not stop: %w", pid, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
			alive = syscall.Kill(pid, 0) == nil
		}
		fmt.Fprintln(out, "stopped")
	} else {
		fmt.Fprintf(out, "no portside up is running with data directory %s\n", dataDir)
	}
	if purge {
		if err := os.RemoveAll(dataDir); err != nil {
			return err
		}
		fmt.Fprintf(out, "removed %s\n", dataDir)
	}
	return nil
}

func readPIDFile(path string) (int, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, syscall.Kill(pid, 0) == nil
}

type progress struct {
	w     io.Writer
	start time.Time
}

func (p progress) step(part, format string, args ...any) {
	if p.w == nil {
		return
	}
	fmt.Fprintf(p.w, "[%6.1fs] %-14s %s\n", time.Since(p.start).Seconds(), part, fmt.Sprintf(format, args...))
}

func kubectlName(path string) string {
	if path == "" {
		return "kubectl"
	}
	return path
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
