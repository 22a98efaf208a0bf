package controlplane

import (
	"fmt"

	"github.com/portside-io/portside/internal/proc"
)

// Exited returns a channel closed when etcd or kube-apiserver dies, and a
// function naming which (with its PID and exit status). A stopped control
// plane closes it too: watch it only while the control plane should run.
func (cp *ControlPlane) Exited() (<-chan struct{}, func() string) {
	done := make(chan struct{})
	which := make(chan string, 2)
	watch := func(p *proc.Process) {
		<-p.Done()
		which <- fmt.Sprintf("%s (pid %d) exited (%v)", p.Name, p.PID(), p.ExitErr())
	}
	n := 0
	for _, p := range []*proc.Process{cp.etcd, cp.apiserver} {
		if p != nil {
			n++
			go watch(p)
		}
	}
	var first string
	go func() {
		if n > 0 {
			first = <-which
		}
		close(done)
	}()
	return done, func() string { <-done; return first }
}
