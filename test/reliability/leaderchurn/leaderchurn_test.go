// Package leaderchurn is a proof run of the CCM's leader election: two
// `portside ccm` replicas run against a real kube-apiserver (internal/testenv)
// and a local cloud; the current leader is killed with SIGKILL again and
// again, and restarted each time. The run checks that two replicas never act
// at once, from the Lease and from the replicas' own calls to the cloud, and
// measures the take-over time.
//
//	go test ./test/reliability/leaderchurn/                                 # short: 5 kills
//	PORTSIDE_RELIABILITY=long go test -v -timeout 60m ./test/reliability/leaderchurn/  # long: 100 kills
//	go test -v ./test/reliability/leaderchurn/ -leaderchurn.kills=20         # any number
//
// See docs/reliability.md for the method and the figures.
package leaderchurn

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"github.com/portside-io/portside/internal/testbin"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

var (
	flagKills = flag.Int("leaderchurn.kills", 0, "number of kill -9 of the leader (default 5; 100 with PORTSIDE_RELIABILITY=long)")
)

// The leader-election settings of the run (the flags of internal/manager).
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
	// The node controller syncs every node's addresses from the cloud this
	// often: a leader calls the cloud at least this often.
	statusFrequency = 500 * time.Millisecond
	lockName        = "cloud-controller-manager"
)

func kills() int {
	switch {
	case *flagKills > 0:
		return *flagKills
	case os.Getenv("PORTSIDE_RELIABILITY") == "long":
		return 100
	default:
		return 5
	}
}

func TestMain(m *testing.M) {
	code := testenv.Run(m)
	testbin.Cleanup()
	os.Exit(code)
}

// call is one request of a replica to the cloud, as its own proxy saw it.
type call struct {
	replica      string
	at           time.Time
	method, path string
}

// recorder logs the calls of all replicas.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (r *recorder) add(c call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// firstAfter returns the first call of replica at or after t.
func (r *recorder) firstAfter(replica string, t time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if c.replica == replica && !c.at.Before(t) {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// leaseEvent is one observed version of the Lease.
type leaseEvent struct {
	at          time.Time
	holder      string
	transitions int32
}

// leaseWatch records every version of the leader Lease.
type leaseWatch struct {
	mu     sync.Mutex
	events []leaseEvent
}

func (w *leaseWatch) run(ctx context.Context, client kubernetes.Interface) {
	sel := fields.OneTermEqualSelector("metadata.name", lockName).String()
	rv := ""
	for ctx.Err() == nil {
		wi, err := client.CoordinationV1().Leases("kube-system").Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range wi.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || ev.Type == watch.Error {
				rv = "" // e.g. too old: start again from now
				continue
			}
			rv = l.ResourceVersion
			e := leaseEvent{at: time.Now()}
			if l.Spec.HolderIdentity != nil {
				e.holder = *l.Spec.HolderIdentity
			}
			if l.Spec.LeaseTransitions != nil {
				e.transitions = *l.Spec.LeaseTransitions
			}
			w.mu.Lock()
			w.events = append(w.events, e)
			w.mu.Unlock()
		}
		wi.Stop()
	}
}

func (w *leaseWatch) holder() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.events) == 0 {
		return ""
	}
	return w.events[len(w.events)-1].holder
}

func (w *leaseWatch) snapshot() []leaseEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events)
}

// holderSince returns when the Lease was first seen held by id at or after t.
func (w *leaseWatch) holderSince(id string, t time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.events {
		if e.holder == id && !e.at.Before(t) {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// runInfo is one process of a replica.
type runInfo struct {
	id        string
	n         int
	p         *proc.Process
	started   time.Time
	ended     time.Time // killed by the test or exited
	killed    bool      // by the test
	unplanned bool      // exited by itself
}

type cluster struct {
	t      *testing.T
	bin    string
	dir    string
	kube   string
	cfgs   map[string]string
	mu     sync.Mutex
	runs   []*runInfo
	cur    map[string]*runInfo
	counts map[string]int
	// control: verify runs on planted evidence, violations are expected.
	control bool
}

func (c *cluster) start(id string) *runInfo {
	c.t.Helper()
	c.mu.Lock()
	c.counts[id]++
	n := c.counts[id]
	c.mu.Unlock()
	log := filepath.Join(c.dir, fmt.Sprintf("%s-%03d.log", id, n))
	p, err := proc.Start(id, c.bin, []string{"ccm", "--cloud-provider=local", "--cloud-config=" + c.cfgs[id],
		"--kubeconfig=" + c.kube, "--secure-port=0", "--bind-address=127.0.0.1",
		"--leader-elect=true", "--leader-elect-identity=" + id,
		"--leader-elect-lease-duration=" + leaseDuration.String(),
		"--leader-elect-renew-deadline=" + renewDeadline.String(),
		"--leader-elect-retry-period=" + retryPeriod.String(),
		"--node-status-update-frequency=" + statusFrequency.String(),
		"--node-monitor-period=1s"}, nil, log)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { p.Stop(5 * time.Second) })
	r := &runInfo{id: id, n: n, p: p, started: time.Now()}
	c.mu.Lock()
	c.runs = append(c.runs, r)
	c.cur[id] = r
	c.mu.Unlock()
	go func() {
		<-p.Done()
		c.mu.Lock()
		defer c.mu.Unlock()
		if !r.killed {
			r.ended, r.unplanned = time.Now(), true
		}
	}()
	return r
}

func (c *cluster) kill(id string) (*runInfo, time.Time) {
	c.mu.Lock()
	r := c.cur[id]
	r.killed = true
	c.mu.Unlock()
	// Take-over times count from just before the signal; the process ends
	// when it has been reaped (Kill waits for it): it can send nothing
	// after that.
	at := time.Now()
	r.p.Kill()
	c.mu.Lock()
	if r.ended.IsZero() {
		r.ended = time.Now()
	}
	c.mu.Unlock()
	return r, at
}

// inFlight is how long after a process was reaped its proxy may still
// read a request it sent before it died (buffered in the socket).
const inFlight = time.Second

func (c *cluster) exitedByItself(r *runInfo) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return r.unplanned
}

// snapshot copies the runs.
func (c *cluster) snapshot() []*runInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*runInfo, len(c.runs))
	for i, r := range c.runs {
		cp := *r
		out[i] = &cp
	}
	return out
}

// becameLeader returns the time of the run's "Became leader" log line, if any.
func becameLeader(r *runInfo) (time.Time, int) {
	f, err := os.Open(r.p.LogPath)
	if err != nil {
		return time.Time{}, 0
	}
	defer func() { _ = f.Close() }()
	var first time.Time
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "Became leader") {
			continue
		}
		n++
		if n == 1 {
			first = klogTime(line, r.started)
		}
	}
	return first, n
}

// klogTime parses the header of a klog line ("I1130 20:05:13.123456 ...")
// in the local time zone, in the year of ref.
func klogTime(line string, ref time.Time) time.Time {
	if len(line) < 21 {
		return time.Time{}
	}
	ts, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
	if err != nil {
		return time.Time{}
	}
	return ts.AddDate(ref.Year(), 0, 0)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	i = max(0, min(i, len(s)-1))
	return s[i]
}

func dist(ds []time.Duration) string {
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("p50 %v p90 %v p99 %v max %v (n=%d)", r(percentile(ds, .5)), r(percentile(ds, .9)), r(percentile(ds, .99)), r(percentile(ds, 1)), len(ds))
}

func loadavg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// TestLeaderChurn kills the leading replica again and again.
func TestLeaderChurn(t *testing.T) {
	kube := testenv.Client(t) // first: skips with -short (no control plane)
	bin := portside(t)
	lc := localcloudtest.Start(t)
	dir := t.TempDir()
	n := kills()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	t.Logf("%d kills; lease %v, renew deadline %v, retry period %v; load average %s", n, leaseDuration, renewDeadline, retryPeriod, loadavg())

	// Each replica reaches the cloud through its own recording proxy: a
	// call's proxy tells which replica made it.
	rec := &recorder{}
	target, _ := url.Parse(lc.Endpoint)
	c := &cluster{t: t, bin: bin, dir: dir, kube: testenv.Kubeconfig(t), cfgs: map[string]string{},
		cur: map[string]*runInfo{}, counts: map[string]int{}}
	ids := []string{"replica-a", "replica-b"}
	other := map[string]string{"replica-a": "replica-b", "replica-b": "replica-a"}
	for _, id := range ids {
		rp := httputil.NewSingleHostReverseProxy(target)
		ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec.add(call{replica: id, at: time.Now(), method: r.Method, path: r.URL.Path})
			rp.ServeHTTP(w, r)
		}))
		t.Cleanup(ps.Close)
		cfg := filepath.Join(dir, id+".yaml")
		if err := os.WriteFile(cfg, fmt.Appendf(nil, "endpoint: %s\ntoken: %s\n", ps.URL, lc.Token), 0o600); err != nil {
			t.Fatal(err)
		}
		c.cfgs[id] = cfg
	}

	// Nodes backed by instances: the leader's node controller reads their
	// addresses from the cloud every statusFrequency.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sim := nodesim.New(kube, 3)
	var specs []nodesim.NodeSpec
	for i := range 3 {
		name := fmt.Sprintf("churn-node-%d", i)
		if _, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Zone: "zone-a"}); err != nil {
			t.Fatal(err)
		}
		specs = append(specs, nodesim.NodeSpec{Name: name})
	}
	if err := sim.Register(ctx, specs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Delete(context.Background(), sim.Names()) })

	lw := &leaseWatch{}
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watchDone sync.WaitGroup
	watchDone.Add(1)
	go func() { defer watchDone.Done(); lw.run(watchCtx, kube) }()
	t.Cleanup(func() { stopWatch(); watchDone.Wait() })
	var startTransitions int32 = -1
	if l, err := kube.CoordinationV1().Leases("kube-system").Get(ctx, lockName, metav1.GetOptions{}); err == nil && l.Spec.LeaseTransitions != nil {
		startTransitions = *l.Spec.LeaseTransitions // a second -count run finds the Lease of the first
	}

	churnStart := time.Now()
	for _, id := range ids {
		c.start(id)
	}
	waitFor := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !cond() {
			if time.Now().After(deadline) {
				tails := ""
				for _, id := range ids {
					tails += fmt.Sprintf("\n--- %s:\n%s", id, c.cur[id].p.LogTail(15))
				}
				t.Fatalf("%s: not after %v%s", what, timeout, tails)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	standingBy := func(r *runInfo) bool {
		data, _ := os.ReadFile(r.p.LogPath)
		return strings.Contains(string(data), "Standing by") || strings.Contains(string(data), "Became leader")
	}
	waitFor("a leader acting", 60*time.Second, func() bool {
		h := lw.holder()
		if c.cur[h] == nil {
			return false
		}
		_, ok := rec.firstAfter(h, churnStart)
		return ok
	})
	waitFor("both replicas up", 30*time.Second, func() bool { return standingBy(c.cur[ids[0]]) && standingBy(c.cur[ids[1]]) })

	var takeLease, takeActing, takeLog []time.Duration
	unplannedSeen := 0
	for k := 1; k <= n; k++ {
		// A steady period, then the leader dies.
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		leader := lw.holder()
		if c.cur[leader] == nil {
			t.Fatalf("kill %d: the Lease holder %q is no replica", k, leader)
		}
		// Replicas that exited by themselves (a lost Lease) are restarted.
		for _, id := range ids {
			if r := c.cur[id]; c.exitedByItself(r) {
				select {
				case <-r.p.Done():
					unplannedSeen++
					t.Logf("kill %d: %s exited by itself: %v\n%s", k, id, r.p.ExitErr(), r.p.LogTail(8))
					c.start(id)
					waitFor("restarted replica standing by", 30*time.Second, func() bool { return standingBy(c.cur[id]) })
				default:
				}
			}
		}
		leader = lw.holder()
		survivor := other[leader]
		killed, at := c.kill(leader)
		waitFor(fmt.Sprintf("kill %d: %s acting after %s was killed", k, survivor, leader), leaseDuration+30*time.Second, func() bool {
			_, ok1 := lw.holderSince(survivor, at)
			_, ok2 := rec.firstAfter(survivor, at)
			return ok1 && ok2
		})
		hl, _ := lw.holderSince(survivor, at)
		ha, _ := rec.firstAfter(survivor, at)
		takeLease = append(takeLease, hl.Sub(at))
		takeActing = append(takeActing, ha.Sub(at))
		if b, _ := becameLeader(c.cur[survivor]); !b.IsZero() {
			takeLog = append(takeLog, b.Sub(at))
		}
		if testing.Verbose() && (n <= 10 || k%10 == 0) {
			t.Logf("kill %d of %s (run %d): %s holds the Lease after %v, calls the cloud after %v; load %s",
				k, leader, killed.n, survivor, hl.Sub(at).Round(time.Millisecond), ha.Sub(at).Round(time.Millisecond), loadavg())
		}
		c.start(leader)
		waitFor("restarted replica standing by", 30*time.Second, func() bool { return standingBy(c.cur[leader]) })
	}
	// Let the last leader act a little, then stop everything: the standby
	// first (Stop waits for it to exit), then the leader. The other order
	// lets the standby take the Lease the leader releases on SIGTERM before
	// its own SIGTERM, a change of holder no kill explains.
	time.Sleep(time.Second)
	end := time.Now()
	last := lw.holder()
	if c.cur[last] == nil {
		t.Fatalf("at the end the Lease holder %q is no replica", last)
	}
	c.cur[other[last]].p.Stop(10 * time.Second)
	c.cur[last].p.Stop(10 * time.Second)
	stopWatch()
	watchDone.Wait()

	violations := c.verify(rec.snapshot(), lw.snapshot(), end, startTransitions, n+unplannedSeen)
	calls := rec.snapshot()
	byReplica, byPath := map[string]int{}, map[string]int{}
	for _, cl := range calls {
		byReplica[cl.replica]++
		path := cl.path
		if parts := strings.SplitN(path, "/", 4); len(parts) == 4 {
			path = strings.Join(parts[:3], "/") + "/…"
		}
		byPath[cl.method+" "+path]++
	}
	t.Logf("cloud calls by kind: %v", byPath)
	// The resolution of the call check: the gaps between a leader's
	// consecutive calls (an overlap shorter than a gap could go unseen).
	var gaps []time.Duration
	runs := c.snapshot()
	slices.SortFunc(calls, func(a, b call) int { return a.at.Compare(b.at) })
	for i := 1; i < len(calls); i++ {
		a, b := calls[i-1], calls[i]
		if a.replica == b.replica && c.runAtLocked(runs, a.replica, a.at) == c.runAtLocked(runs, b.replica, b.at) {
			gaps = append(gaps, b.at.Sub(a.at))
		}
	}
	t.Logf("gaps between a leader's consecutive cloud calls: %s", dist(gaps))
	t.Logf("FIGURES leaderchurn: kills %d in %v (unplanned exits %d); take-over kill → new holder in the Lease %s; kill → new leader's first cloud call %s; kill → \"Became leader\" logged %s; "+
		"cloud calls %d (%v); violations %d; load average %s",
		n, time.Since(churnStart).Round(time.Second), unplannedSeen, dist(takeLease), dist(takeActing), dist(takeLog), len(calls), byReplica, violations, loadavg())
	if violations > 0 {
		t.Errorf("%d violations", violations)
	}

	// Negative control: the check is not blind. A call of the standby while
	// the other replica leads (both alive) must be reported.
	var standby *runInfo
	for _, r := range runs {
		if b, _ := becameLeader(r); b.IsZero() && !r.ended.IsZero() && r.ended.Sub(r.started) > 500*time.Millisecond {
			standby = r
		}
	}
	if standby == nil {
		t.Log("negative control skipped: no standby process lived long enough")
		return
	}
	planted := append(calls, call{replica: standby.id, at: standby.started.Add(standby.ended.Sub(standby.started) / 2), method: "PUT", path: "/v1/planted"})
	c.control = true
	got := c.verify(planted, lw.snapshot(), end, startTransitions, n+unplannedSeen)
	c.control = false
	t.Logf("negative control: a planted call of standby %s run %d: %d violations reported", standby.id, standby.n, got)
	if got == 0 {
		t.Error("negative control: a call of the standby went unnoticed")
	}
}

// verify checks, after the run, that two replicas never acted at once:
//
//   - Lease: every change of holder is a transition (leaseTransitions +1),
//     happens after the previous holder's process died, and there are as
//     many as leaders died;
//   - logs: the leading periods of the processes ("Became leader" until
//     death) do not overlap;
//   - cloud calls: every call is made by a process while it leads, and
//     the calls change replica only across the death of the one that made
//     the earlier calls.
func (c *cluster) verify(calls []call, events []leaseEvent, end time.Time, startTransitions int32, deaths int) int {
	t := c.t
	violations := 0
	violate := func(format string, args ...any) {
		violations++
		if c.control {
			t.Logf("control: detected: "+format, args...)
			return
		}
		if violations <= 30 {
			t.Errorf("VIOLATION: "+format, args...)
		}
	}
	runs := c.snapshot()
	type led struct {
		at time.Time
		n  int
	}
	leds := map[*runInfo]led{}
	leadsAt := func(r *runInfo) (time.Time, int) {
		l, ok := leds[r]
		if !ok {
			l.at, l.n = becameLeader(r)
			leds[r] = l
		}
		return l.at, l.n
	}

	// The Lease.
	changes := 0
	prev := leaseEvent{transitions: startTransitions}
	if startTransitions < 0 {
		prev.transitions = 0
	}
	for i, e := range events {
		if e.holder == "" {
			continue // released at the end (graceful stop)
		}
		if i > 0 && prev.holder != "" && e.holder != prev.holder {
			changes++
			if e.transitions != prev.transitions+1 {
				violate("Lease holder %s → %s at %s with leaseTransitions %d → %d", prev.holder, e.holder, e.at.Format(time.StampMicro), prev.transitions, e.transitions)
			}
			// The previous holder's process died before the change.
			for _, r := range runs {
				if r.id != prev.holder || !r.started.Before(prev.at) || !r.ended.IsZero() && r.ended.Before(e.at) {
					continue
				}
				violate("Lease moved %s → %s at %s while %s (run %d) was alive", prev.holder, e.holder, e.at.Format(time.StampMicro), prev.holder, r.n)
			}
		} else if prev.holder == e.holder && e.transitions != prev.transitions && i > 0 {
			violate("leaseTransitions %d → %d without a change of holder (%s)", prev.transitions, e.transitions, e.holder)
		}
		prev = e
	}
	if changes != deaths {
		violate("the Lease changed holder %d times; %d leaders died", changes, deaths)
	}

	// Leading periods from the logs.
	type period struct {
		r          *runInfo
		from, till time.Time
	}
	var periods []period
	for _, r := range runs {
		b, nb := leadsAt(r)
		if nb > 1 {
			violate("%s run %d logged \"Became leader\" %d times", r.id, r.n, nb)
		}
		if nb == 0 {
			continue
		}
		till := r.ended
		if till.IsZero() || till.After(end) {
			till = end
		}
		periods = append(periods, period{r, b, till})
	}
	slices.SortFunc(periods, func(a, b period) int { return a.from.Compare(b.from) })
	for i := 1; i < len(periods); i++ {
		if a, b := periods[i-1], periods[i]; b.from.Before(a.till) {
			violate("%s run %d leads from %s, but %s run %d led until %s", b.r.id, b.r.n, b.from.Format(time.StampMicro), a.r.id, a.r.n, a.till.Format(time.StampMicro))
		}
	}
	if len(periods) != deaths+1 {
		violate("%d processes became leader; %d leaders died (want one more)", len(periods), deaths)
	}

	// The cloud calls.
	slices.SortFunc(calls, func(a, b call) int { return a.at.Compare(b.at) })
	var last *call
	for i := range calls {
		cl := &calls[i]
		r := c.runAtLocked(runs, cl.replica, cl.at)
		if r == nil {
			violate("call %s %s from %s at %s: no process of it was alive", cl.method, cl.path, cl.replica, cl.at.Format(time.StampMicro))
			continue
		}
		if b, n := leadsAt(r); n == 0 || cl.at.Before(b) {
			violate("call %s %s from %s run %d at %s before it led (became leader %s)", cl.method, cl.path, cl.replica, r.n, cl.at.Format(time.StampMicro), b.Format(time.StampMicro))
		}
		if last != nil && last.replica != cl.replica {
			lr := c.runAtLocked(runs, last.replica, last.at)
			if lr == nil || lr.ended.IsZero() || lr.ended.After(cl.at) {
				violate("calls interleave: %s at %s, then %s at %s while the former was alive", last.replica, last.at.Format(time.StampMicro), cl.replica, cl.at.Format(time.StampMicro))
			}
		}
		last = cl
	}
	return violations
}

// runAtLocked returns the process of id that made a call seen at t: the
// one alive at t, or one reaped less than inFlight before t (a request it
// sent before it died).
func (c *cluster) runAtLocked(runs []*runInfo, id string, t time.Time) *runInfo {
	for _, r := range runs {
		if r.id == id && !t.Before(r.started) && (r.ended.IsZero() || !t.After(r.ended)) {
			return r
		}
	}
	for _, r := range runs {
		if r.id == id && !r.ended.IsZero() && t.After(r.ended) && t.Sub(r.ended) < inFlight {
			return r
		}
	}
	return nil
}

// portside is the portside binary (internal/testbin).
func portside(t *testing.T) string { return testbin.Portside(t) }
