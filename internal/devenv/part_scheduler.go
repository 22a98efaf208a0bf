package devenv

import (
	"context"
	"path/filepath"
	"time"

	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/tools"
)

// schedulerArgs: kube-scheduler with its defaults (pods spread over zones
// and nodes by the topology labels the CCM sets), no serving port and no
// leader election (one replica).
func schedulerArgs(kubeconfig string) []string {
	return []string{"--kubeconfig=" + kubeconfig, "--secure-port=0", "--leader-elect=false", "--kube-api-qps=200", "--kube-api-burst=400"}
}

// startScheduler runs kube-scheduler from `make tools`, supervised, so pods
// are scheduled onto the simulated nodes (which run them).
func startScheduler(_ context.Context, s *stack, env *environment) error {
	binDir, err := tools.BinDir()
	if err != nil {
		return err
	}
	bin, err := tools.Path(binDir, tools.KubeScheduler)
	if err != nil {
		return err
	}
	logPath := filepath.Join(env.logs(), "kube-scheduler.log")
	run := func() (*proc.Process, error) {
		return proc.Start("kube-scheduler", bin, schedulerArgs(env.kubeconfig()), nil, logPath)
	}
	p, err := run()
	if err != nil {
		return err
	}
	s.pushSupervised(supervise(s.p, "controllers", "kube-scheduler", p, 10*time.Second, run))
	s.p.step("controllers", "kube-scheduler started (pid %d; log %s)", p.PID(), logPath)
	return nil
}
