package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testenv"
)

// migratedControllers are the CCM's names (upstream's, v1.31 on) of the
// controllers leader migration hands over.
var migratedControllers = testenv.MigratedControllers

func runningControllers(log string) map[string]string { return testenv.RunningControllers(log) }

// controllerWatch samples, every 100 ms, which CCM process runs each
// migrated controller (from its log; kube-controller-manager v1.37 has
// none of them, the test shows) and who holds the migration lease, and
// records any moment two processes ran the same controller.
type controllerWatch struct {
	client kubernetes.Interface
	lease  string

	mu       sync.Mutex
	procs    map[string]*watched
	overlaps []string
	holders  map[string]bool
	stop     chan struct{}
	done     chan struct{}
}

type watched struct {
	p *proc.Process
	// stopping: SIGTERM sent. The CCM's controllers run on the leader
	// context, which the signal cancels before any lease is released, so
	// from then on the process runs no controller (its log says so only
	// after the release).
	stopping bool
}

func newControllerWatch(t *testing.T, client kubernetes.Interface, lease string) *controllerWatch {
	w := &controllerWatch{client: client, lease: lease, procs: map[string]*watched{}, holders: map[string]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	t.Cleanup(func() {
		close(w.stop)
		<-w.done
	})
	return w
}

// add watches a CCM process under name.
func (w *controllerWatch) add(name string, p *proc.Process) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.procs[name] = &watched{p: p}
}

// stopProc stops a watched process gracefully (SIGTERM), as a rolling
// update does.
func (w *controllerWatch) stopProc(name string) {
	w.mu.Lock()
	wp := w.procs[name]
	wp.stopping = true
	w.mu.Unlock()
	wp.p.Stop(10 * time.Second)
}

// runners returns, per migrated controller, the processes running it now.
func (w *controllerWatch) runners() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]string{}
	for name, wp := range w.procs {
		select {
		case <-wp.p.Done():
			continue
		default:
		}
		if wp.stopping {
			continue
		}
		data, _ := os.ReadFile(wp.p.LogPath)
		for c := range runningControllers(string(data)) {
			out[c] = append(out[c], name)
		}
	}
	for _, names := range out {
		sort.Strings(names)
	}
	return out
}

func (w *controllerWatch) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		r := w.runners()
		holder := ""
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if l, err := w.client.CoordinationV1().Leases("kube-system").Get(ctx, w.lease, metav1.GetOptions{}); err == nil && l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		cancel()
		w.mu.Lock()
		for _, c := range migratedControllers {
			if len(r[c]) > 1 {
				w.overlaps = append(w.overlaps, fmt.Sprintf("%s: %s run by %v", time.Now().Format("15:04:05.000"), c, r[c]))
			}
		}
		if holder != "" {
			w.holders[holder] = true
		}
		w.mu.Unlock()
	}
}

// check fails the test if two processes ever ran a migrated controller at
// once, or if now the controllers are not run by exactly want ("" for
// none).
func (w *controllerWatch) check(t *testing.T, step, want string) {
	t.Helper()
	w.mu.Lock()
	overlaps := slices.Clone(w.overlaps)
	w.mu.Unlock()
	if len(overlaps) > 0 {
		t.Fatalf("%s: a migrated controller ran in two processes at once:\n%s", step, strings.Join(overlaps, "\n"))
	}
	r := w.runners()
	for _, c := range migratedControllers {
		got := strings.Join(r[c], ",")
		if got != want {
			t.Fatalf("%s: %s runs in %q, want %q", step, c, got, want)
		}
	}
	if want == "" {
		t.Logf("%s: no process runs %v", step, migratedControllers)
	} else {
		t.Logf("%s: %s alone runs %v", step, want, migratedControllers)
	}
}

// migrationHolders are the identities seen holding the migration lease.
func (w *controllerWatch) migrationHolders() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for h := range w.holders {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}
