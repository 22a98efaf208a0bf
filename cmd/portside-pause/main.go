// Command portside-pause is the first process of a real node's pod sandbox
// (the image registry.k8s.io/pause that containerd runs for each pod, built
// by make tools). It holds the pod's namespaces open by doing nothing;
// as PID 1 of a shared PID namespace it reaps the zombies orphaned to it,
// and it exits 0 on SIGINT or SIGTERM, as upstream's pause.c does.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "-v" {
		_, _ = fmt.Fprintln(stdout, "portside-pause")
		return 0
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	// A child that exited before Notify sent its SIGCHLD to no one.
	reap()
	for s := range sigs {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		_, _ = fmt.Fprintf(stderr, "pause: shutting down, got signal %v\n", s)
		return 0
	}
	return 0
}

// reap collects every exited child; signals coalesce, so one SIGCHLD may
// stand for many.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
