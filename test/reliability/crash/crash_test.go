// Package crash is a proof run of the local cloud's crash consistency: the
// real `portside cloud serve` binary is killed with SIGKILL many times while
// several goroutines create, update and delete load balancers, instances,
// routes and volumes through pkg/localcloud/client; after each restart the
// stored state is checked against the log of the operations the cloud
// acknowledged, and every stored load balancer must serve again.
//
//	go test ./test/reliability/crash/                                  # short: 5 kills
//	PORTSIDE_RELIABILITY=long go test -v ./test/reliability/crash/      # long: 50 kills
//	go test -v ./test/reliability/crash/ -crash.kills=200               # any number
//
// See docs/reliability.md for what is checked and the figures.
package crash

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/portside-io/portside/internal/testbin"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

var (
	flagKills = flag.Int("crash.kills", 0, "number of kill -9 of the local cloud (default 5; 50 with PORTSIDE_RELIABILITY=long)")
	flagSeed  = flag.Uint64("crash.seed", 0, "random seed (default: time-based; printed)")
)

// longMode reports whether PORTSIDE_RELIABILITY=long asks for the long runs.
func longMode() bool { return os.Getenv("PORTSIDE_RELIABILITY") == "long" }

func kills() int {
	switch {
	case *flagKills > 0:
		return *flagKills
	case longMode():
		return 50
	default:
		return 5
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// cloud is the cloud process across restarts.
type cloud struct {
	t        *testing.T
	bin, dir string
	args     []string
	token    string
	p        *proc.Process
	cur      atomic.Pointer[client.Client]
	starts   int
}

// start runs `portside cloud serve` and waits until its API answers; it
// returns how long that took.
func (c *cloud) start() time.Duration {
	c.t.Helper()
	// A killed cloud leaves its endpoint file: remove it so that the new
	// one's is read.
	_ = os.Remove(filepath.Join(c.dir, "endpoint"))
	c.starts++
	begin := time.Now()
	p, err := proc.Start("cloud", c.bin, c.args, nil, filepath.Join(c.dir, "cloud.log"))
	if err != nil {
		c.t.Fatal(err)
	}
	c.p = p
	c.t.Cleanup(func() { p.Stop(5 * time.Second) })
	deadline := begin.Add(60 * time.Second)
	var endpoint string
	for endpoint == "" {
		if data, err := os.ReadFile(filepath.Join(c.dir, "endpoint")); err == nil && strings.HasSuffix(string(data), "\n") {
			endpoint = strings.TrimSpace(string(data))
			break
		}
		c.checkAlive(deadline)
		time.Sleep(5 * time.Millisecond)
	}
	if c.token == "" {
		data, err := os.ReadFile(filepath.Join(c.dir, "token"))
		if err != nil {
			c.t.Fatal(err)
		}
		c.token = strings.TrimSpace(string(data))
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(endpoint + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		c.checkAlive(deadline)
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(begin)
	c.cur.Store(client.New(endpoint, c.token).WithUserAgent("crash-test"))
	return took
}

func (c *cloud) checkAlive(deadline time.Time) {
	c.t.Helper()
	select {
	case <-c.p.Done():
		c.t.Fatalf("the cloud exited (start %d): %v\n%s", c.starts, c.p.ExitErr(), c.p.LogTail(30))
	default:
	}
	if time.Now().After(deadline) {
		c.t.Fatalf("the cloud is not serving after 60s (start %d):\n%s", c.starts, c.p.LogTail(30))
	}
}

// outcome of one operation as the client saw it.
type outcome int

const (
	acked     outcome = iota // 2xx: applied, and must survive
	rejected                 // an API error: not applied
	notSent                  // connection refused: never reached a cloud
	uncertain                // the connection broke: may or may not have applied
)

func classify(err error) outcome {
	var se *client.StatusError
	switch {
	case err == nil:
		return acked
	case errors.As(err, &se):
		return rejected
	case errors.Is(err, syscall.ECONNREFUSED):
		return notSent
	default:
		return uncertain
	}
}

// objState is what the test knows of one named object.
type objState struct {
	present bool
	id      string // instances, volumes: the ID ("" when not known)
	gen     int    // load balancers: the spec generation
}

func (s objState) String() string {
	if !s.present {
		return "absent"
	}
	return fmt.Sprintf("present(id=%q gen=%d)", s.id, s.gen)
}

// model is one object's history since the last check: the state after the
// last acknowledged operation (or the last check), and the states of the
// operations issued after it whose outcome is unknown. After a crash the
// object must be in one of these states, each whole.
type model struct {
	known objState
	maybe []objState
}

func (m *model) ack(s objState)       { m.known, m.maybe = s, nil }
func (m *model) uncertain(s objState) { m.maybe = append(m.maybe, s) }

func (m *model) allowed(got objState) bool {
	match := func(want objState) bool {
		if want.present != got.present {
			return false
		}
		if !want.present {
			return true
		}
		return (want.id == "" || want.id == got.id) && want.gen == got.gen
	}
	return match(m.known) || slices.ContainsFunc(m.maybe, match)
}

// stats are the run's figures.
type stats struct {
	mu                               sync.Mutex
	acked, rejected, notSent, uncert int
	byKind                           map[string]int
}

func (s *stats) count(kind string, o outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch o {
	case acked:
		s.acked++
		s.byKind[kind]++
	case rejected:
		s.rejected++
	case notSent:
		s.notSent++
	case uncertain:
		s.uncert++
	}
}

// run is the shared state of the workers and the checker.
type run struct {
	t       *testing.T
	c       *cloud
	gate    sync.RWMutex // workers hold it for reading per operation; the checker for writing
	stats   *stats
	models  map[string]map[string]*model // kind → name → model (each name has one owner goroutine)
	modelMu sync.Mutex

	anchorAddr  string // the backend's address (an instance address)
	backendPort int
	portBase    int
	routeTarget string

	control       bool // the negative control runs: violations are expected
	vipMu         sync.Mutex
	vips          map[string]*vipEvent
	bindConflicts int

	// Figures of the checks.
	served, servedTotal             int // load balancers that served after the last restart, after all
	uncertainApplied, uncertainLost int // objects with unacknowledged operations: changed by them, or not
}

func (r *run) model(kind, name string) *model {
	r.modelMu.Lock()
	defer r.modelMu.Unlock()
	m := r.models[kind][name]
	if m == nil {
		m = &model{}
		r.models[kind][name] = m
	}
	return m
}

// lbSpec is the spec of generation gen: every field depends on gen, so a
// mix of two generations (not applied wholly) is seen.
func (r *run) lbSpec(gen int) api.LoadBalancerSpec {
	return api.LoadBalancerSpec{
		Cluster:   "crash",
		Tags:      map[string]string{"gen": strconv.Itoa(gen), "gen-copy": strconv.Itoa(gen)},
		Listeners: []api.Listener{{Name: "tcp-" + strconv.Itoa(gen), Protocol: api.ProtocolTCP, Port: r.portBase + gen%5, BackendPort: r.backendPort}},
		Backends:  []api.Backend{{Name: "anchor-" + strconv.Itoa(gen), Address: r.anchorAddr}},
	}
}

func specGen(lb api.LoadBalancer) (int, error) {
	gen, err := strconv.Atoi(lb.Tags["gen"])
	if err != nil {
		return 0, fmt.Errorf("tag gen %q", lb.Tags["gen"])
	}
	return gen, nil
}

// negativeControl shows that the check is not blind: it changes the
// cloud behind the models' back (a load balancer back to a stale spec, an
// acknowledged instance and route gone, an object never asked for) and
// expects the check to report each. The workers are stopped.
func (r *run) negativeControl() {
	t := r.t
	c := r.c.cur.Load()
	ctx, cancel := ctx20()
	defer cancel()
	want := 0
	r.modelMu.Lock()
	models := map[string]map[string]*model{}
	for kind, names := range r.models {
		models[kind] = map[string]*model{}
		for name, m := range names {
			models[kind][name] = m
		}
	}
	r.modelMu.Unlock()
	for name, m := range models["lb"] {
		if m.known.present && m.known.gen > 1 {
			if _, err := c.PutLoadBalancer(ctx, name, r.lbSpec(m.known.gen-1)); err != nil {
				t.Fatal(err)
			}
			want++
			break
		}
	}
	for name, m := range models["instance"] {
		if m.known.present {
			if err := c.DeleteInstance(ctx, m.known.id); err != nil {
				t.Fatal(err)
			}
			_ = name
			want++
			break
		}
	}
	for name, m := range models["route"] {
		if m.known.present {
			if err := c.DeleteRoute(ctx, name); err != nil {
				t.Fatal(err)
			}
			want++
			break
		}
	}
	if _, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "volume-never-asked", Zones: []string{"zone-a"}, SizeGiB: 1}); err != nil {
		t.Fatal(err)
	}
	want++
	r.control = true
	got, _ := r.check(0)
	r.control = false
	t.Logf("negative control: %d changes behind the test's back, %d detected", want, got)
	if got < want {
		t.Errorf("negative control: the check found %d of %d planted inconsistencies", got, want)
	}
}

// vipEvent is the last acknowledged owner of a VIP, and when a delete of
// that owner was last sent and answered.
type vipEvent struct {
	owner                    string
	deleteSent, deleteAnswer time.Time
}

func (r *run) ownVIPs(name string, vips []string) {
	r.vipMu.Lock()
	defer r.vipMu.Unlock()
	for _, v := range vips {
		r.vips[v] = &vipEvent{owner: name}
	}
}

func (r *run) deleting(name string) {
	r.vipMu.Lock()
	defer r.vipMu.Unlock()
	for _, e := range r.vips {
		if e.owner == name {
			e.deleteSent, e.deleteAnswer = time.Now(), time.Time{}
		}
	}
}

func (r *run) deleted(name string) {
	r.vipMu.Lock()
	defer r.vipMu.Unlock()
	for _, e := range r.vips {
		if e.owner == name {
			e.deleteAnswer = time.Now()
		}
	}
}

// bindConflict records an acknowledged put whose listener could not bind,
// with the evidence: the VIP's previous owner and its delete.
func (r *run) bindConflict(name string, gen int, lb *api.LoadBalancer) {
	now := time.Now()
	r.vipMu.Lock()
	defer r.vipMu.Unlock()
	r.bindConflicts++
	evidence := "no earlier owner of the VIP seen"
	if len(lb.VIPs) > 0 {
		if e := r.vips[lb.VIPs[0]]; e != nil && e.owner != name && e.deleteAnswer.IsZero() {
			evidence = fmt.Sprintf("VIP %s was load balancer %s's; its DELETE was sent %v before this PUT was answered, and is not answered yet",
				lb.VIPs[0], e.owner, now.Sub(e.deleteSent).Round(time.Microsecond))
		} else if e != nil && e.owner != name {
			evidence = fmt.Sprintf("VIP %s was load balancer %s's; its DELETE was sent %v and answered %v before this PUT was answered",
				lb.VIPs[0], e.owner, now.Sub(e.deleteSent).Round(time.Microsecond), now.Sub(e.deleteAnswer).Round(time.Microsecond))
		} else if e != nil {
			evidence = fmt.Sprintf("VIP %s is this load balancer's own", lb.VIPs[0])
		}
	}
	// An acknowledged load balancer that does not serve. Seen before commit
	// 521b8d1, when a DELETE released its VIP before its listeners closed
	// and a concurrent PUT of another name got the VIP (docs/reliability.md).
	r.t.Errorf("VIOLATION: acknowledged put of %s gen %d answered state %s: %s; %s", name, gen, lb.State, lb.Message, evidence)
}

// loop runs step until stop, each under the gate: a check sees no
// operation half-recorded (done, but its outcome not yet in the model).
func (r *run) loop(stop <-chan struct{}, step func() outcome) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		r.gate.RLock()
		o := step()
		r.gate.RUnlock()
		r.pause(o)
	}
}

// do runs one operation against the current cloud.
func (r *run) do(fn func(c *client.Client) error) outcome {
	return classify(fn(r.c.cur.Load()))
}

func ctx20() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 20*time.Second)
}

// lbWorker puts (creates or updates) and deletes its load balancers.
func (r *run) lbWorker(stop <-chan struct{}, w int, rng *rand.Rand) {
	gens := map[string]int{}
	r.loop(stop, func() outcome {
		name := fmt.Sprintf("lb-w%d-%d", w, rng.IntN(4))
		m := r.model("lb", name)
		var o outcome
		if rng.IntN(5) == 0 {
			var err error
			r.deleting(name)
			o = r.do(func(c *client.Client) error {
				ctx, cancel := ctx20()
				defer cancel()
				err = c.DeleteLoadBalancer(ctx, name)
				return err
			})
			r.deleted(name)
			switch {
			case o == acked, client.IsNotFound(err):
				m.ack(objState{})
			case o == uncertain:
				m.uncertain(objState{})
			}
		} else {
			gens[name]++
			gen := gens[name]
			spec := r.lbSpec(gen)
			var lb *api.LoadBalancer
			o = r.do(func(c *client.Client) (err error) {
				ctx, cancel := ctx20()
				defer cancel()
				lb, err = c.PutLoadBalancer(ctx, name, spec)
				return err
			})
			switch o {
			case acked:
				if lb.State != api.LoadBalancerActive {
					r.bindConflict(name, gen, lb)
				}
				r.ownVIPs(name, lb.VIPs)
				m.ack(objState{present: true, gen: gen})
			case uncertain:
				m.uncertain(objState{present: true, gen: gen})
			}
		}
		r.stats.count("lb", o)
		return o
	})
}

// namedWorker creates and deletes instances or volumes (named objects with
// a cloud-assigned ID and a unique name).
func (r *run) namedWorker(stop <-chan struct{}, kind string, w int, rng *rand.Rand) {
	r.loop(stop, func() outcome {
		name := fmt.Sprintf("%s-w%d-%d", kind, w, rng.IntN(6))
		m := r.model(kind, name)
		var o outcome
		switch {
		case len(m.maybe) > 0:
			// Unknown: look it up (only this goroutine changes it).
			var found []string
			o = r.do(func(c *client.Client) error {
				ctx, cancel := ctx20()
				defer cancel()
				ids, err := r.lookup(ctx, c, kind, name)
				found = ids
				return err
			})
			if o == acked {
				switch len(found) {
				case 0:
					m.ack(objState{})
				case 1:
					m.ack(objState{present: true, id: found[0]})
				default:
					r.t.Errorf("VIOLATION: %d %ss named %s: %v", len(found), kind, name, found)
				}
			}
			return o
		case m.known.present && m.known.id != "":
			id := m.known.id
			o = r.do(func(c *client.Client) error {
				ctx, cancel := ctx20()
				defer cancel()
				if kind == "instance" {
					return c.DeleteInstance(ctx, id)
				}
				return c.DeleteVolume(ctx, id)
			})
			switch {
			case o == acked:
				m.ack(objState{})
			case o == uncertain:
				m.uncertain(objState{})
			}
		case m.known.present:
			// Present, ID unknown (a 409): look it up next time.
			m.uncertain(m.known)
			return acked
		default:
			var id string
			var err error
			o = r.do(func(c *client.Client) error {
				ctx, cancel := ctx20()
				defer cancel()
				if kind == "instance" {
					var inst *api.Instance
					if inst, err = c.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Zone: "zone-a"}); err == nil {
						id = inst.ID
					}
				} else {
					var vol *api.Volume
					if vol, err = c.CreateVolume(ctx, api.CreateVolumeRequest{Name: name, Zones: []string{"zone-a"}, SizeGiB: 1 + rng.IntN(10)}); err == nil {
						id = vol.ID
					}
				}
				return err
			})
			switch {
			case o == acked:
				m.ack(objState{present: true, id: id})
			case o == uncertain:
				m.uncertain(objState{present: true})
			case client.IsConflict(err):
				// It exists: an earlier uncertain create applied.
				m.ack(objState{present: true})
			}
		}
		r.stats.count(kind, o)
		return o
	})
}

func (r *run) lookup(ctx context.Context, c *client.Client, kind, name string) ([]string, error) {
	var ids []string
	if kind == "instance" {
		all, err := c.ListInstances(ctx, "")
		for _, i := range all {
			if i.Name == name {
				ids = append(ids, i.ID)
			}
		}
		return ids, err
	}
	all, err := c.ListVolumes(ctx)
	for _, v := range all {
		if v.Name == name {
			ids = append(ids, v.ID)
		}
	}
	return ids, err
}

// routeWorker creates and deletes routes to an anchor instance; each route
// name has its own CIDR.
func (r *run) routeWorker(stop <-chan struct{}, w int, rng *rand.Rand) {
	r.loop(stop, func() outcome {
		n := rng.IntN(8)
		name := fmt.Sprintf("route-w%d-%d", w, n)
		m := r.model("route", name)
		var o outcome
		if m.known.present && len(m.maybe) == 0 || rng.IntN(3) == 0 {
			var err error
			o = r.do(func(c *client.Client) error {
				ctx, cancel := ctx20()
				defer cancel()
				err = c.DeleteRoute(ctx, name)
				return err
			})
			switch {
			case o == acked, client.IsNotFound(err):
				m.ack(objState{})
			case o == uncertain:
				m.uncertain(objState{})
			}
		} else {
			var err error
			o = r.do(func(c *client.Client) error {
				ctx, cancel := ctx20()
				defer cancel()
				_, err = c.CreateRoute(ctx, api.Route{Name: name, Cluster: "crash", TargetNode: r.routeTarget,
					DestinationCIDR: fmt.Sprintf("10.%d.%d.0/24", 100+w, n)})
				return err
			})
			switch {
			case o == acked, client.IsConflict(err):
				m.ack(objState{present: true})
			case o == uncertain:
				m.uncertain(objState{present: true})
			}
		}
		r.stats.count("route", o)
		return o
	})
}

// pause slows a worker down while the cloud is down.
func (r *run) pause(o outcome) {
	if o == notSent || o == uncertain {
		time.Sleep(20 * time.Millisecond)
	}
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

func loadavg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// TestCrashConsistency kills the local cloud with SIGKILL under concurrent
// writes and checks each restart's state against the acknowledged writes.
func TestCrashConsistency(t *testing.T) {
	bin := portside(t)
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	// Own loopback ranges (as localcloudtest): VIPs in a /20 of the lower
	// half of 127.<o>.0.0/16, instances in the upper half.
	octet := 10 + rng.IntN(240)
	vipPool := fmt.Sprintf("127.%d.%d.0/20", octet, rng.IntN(8)*16)
	nodePool := fmt.Sprintf("127.%d.128.0/17", octet)
	c := &cloud{t: t, bin: bin, dir: dir, args: []string{"cloud", "serve", "--data-dir", dir,
		"--listen", "127.0.0.1:0", "--registry-listen=", "--vip-pool", vipPool, "--node-pool", nodePool,
		"--health-interval", "100ms", "--drain-timeout", "1s"}}
	n := kills()
	t.Logf("seed %d, %d kills, VIP pool %s, node pool %s, load average %s", seed, n, vipPool, nodePool, loadavg())
	first := c.start()
	t.Logf("first start: %v", first)

	ctx := context.Background()
	cl := c.cur.Load()
	// Anchors: an instance whose address the backend listens on, and a
	// route target. They are never deleted.
	anchor, err := cl.CreateInstance(ctx, api.CreateInstanceRequest{Name: "anchor-backend", Zone: "zone-a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateInstance(ctx, api.CreateInstanceRequest{Name: "anchor-route", Zone: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	r := &run{t: t, c: c, stats: &stats{byKind: map[string]int{}}, routeTarget: "anchor-route", vips: map[string]*vipEvent{},
		models:   map[string]map[string]*model{"lb": {}, "instance": {}, "volume": {}, "route": {}},
		portBase: 20000 + rng.IntN(12000)} // below the ephemeral range (32768-): no :0 listener of another process takes it
	for _, a := range anchor.Addresses {
		if a.Type == api.AddressInternalIP {
			r.anchorAddr = a.Address
		}
	}
	// The backend: on the anchor instance's address, it answers every
	// connection with a banner.
	const banner = "portside-crash-backend"
	ln, err := net.Listen("tcp", net.JoinHostPort(r.anchorAddr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	r.backendPort = ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = conn.Write([]byte(banner + "\n"))
				_ = conn.Close()
			}()
		}
	}()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	workers := []func(rng *rand.Rand){
		func(rng *rand.Rand) { r.lbWorker(stop, 0, rng) },
		func(rng *rand.Rand) { r.lbWorker(stop, 1, rng) },
		func(rng *rand.Rand) { r.namedWorker(stop, "instance", 0, rng) },
		func(rng *rand.Rand) { r.namedWorker(stop, "instance", 1, rng) },
		func(rng *rand.Rand) { r.namedWorker(stop, "volume", 0, rng) },
		func(rng *rand.Rand) { r.routeWorker(stop, 0, rng) },
	}
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w(rand.New(rand.NewPCG(seed, uint64(100+i))))
		}()
	}
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopWorkers)

	var restarts, serveTimes []time.Duration
	violations, prev := 0, r.stats.snapshot()
	begin := time.Now()
	for k := 1; k <= n; k++ {
		// Let the writers run, then crash the cloud in the middle of them.
		time.Sleep(time.Duration(150+rng.IntN(450)) * time.Millisecond)
		killedAt := time.Now()
		c.p.Kill()
		c.start()
		took := time.Since(killedAt) // SIGKILL → the new process answers /healthz
		restarts = append(restarts, took)
		// Stop the writers (in-flight calls to the new cloud finish), check,
		// and let them go on.
		r.gate.Lock()
		v, serve := r.check(k)
		r.gate.Unlock()
		violations += v
		serveTimes = append(serveTimes, serve)
		if testing.Verbose() && (n <= 10 || k%10 == 0) {
			t.Logf("kill %d: restart %v, checked and %d load balancers served %v after it; %d ops acknowledged since the last kill; violations %d",
				k, took.Round(time.Millisecond), r.served, serve.Round(time.Millisecond), r.stats.snapshot()-prev, violations)
		}
		prev = r.stats.snapshot()
		if t.Failed() && violations > 20 {
			break
		}
	}
	stopWorkers()
	violations += r.bindConflicts
	s := r.stats
	t.Logf("FIGURES crash: kills %d in %v; ops acknowledged %d (lb %d, instance %d, volume %d, route %d), rejected %d, uncertain %d (found applied after restart %d, not applied %d), refused while down %d; load balancers served after restarts %d; acknowledged puts answered not serving (bind conflict) %d; "+
		"restart (kill → API answering) p50 %v p99 %v max %v; all LBs serving after restart p50 %v p99 %v; violations %d; load average %s",
		len(restarts), time.Since(begin).Round(time.Millisecond), s.acked, s.byKind["lb"], s.byKind["instance"], s.byKind["volume"], s.byKind["route"],
		s.rejected, s.uncert, r.uncertainApplied, r.uncertainLost, s.notSent, r.servedTotal, r.bindConflicts,
		percentile(restarts, .5).Round(time.Millisecond), percentile(restarts, .99).Round(time.Millisecond), percentile(restarts, 1).Round(time.Millisecond),
		percentile(serveTimes, .5).Round(time.Millisecond), percentile(serveTimes, .99).Round(time.Millisecond), violations, loadavg())
	if violations > 0 {
		t.Errorf("%d violations", violations)
	}
	r.negativeControl()
	if s.acked == 0 {
		t.Error("no operation was acknowledged: the run proves nothing")
	}
	c.p.Stop(10 * time.Second)
}

func (s *stats) snapshot() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// check compares the restarted cloud's state with the models, checks that
// every stored load balancer serves, and resets the models to what it saw.
// It returns the number of violations and how long until all served.
func (r *run) check(k int) (violations int, serveTook time.Duration) {
	t := r.t
	begin := time.Now()
	c := r.c.cur.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	violate := func(format string, args ...any) {
		violations++
		if r.control {
			t.Logf("control: detected: "+format, args...)
			return
		}
		t.Errorf("VIOLATION after kill %d: "+format, append([]any{k}, args...)...)
	}
	observed := map[string]map[string]objState{"lb": {}, "instance": {}, "volume": {}, "route": {}}

	insts, err := c.ListInstances(ctx, "")
	if err != nil {
		t.Fatalf("after kill %d: list instances: %v", k, err)
	}
	addrs := map[string]string{}
	for _, i := range insts {
		if prev, dup := observed["instance"][i.Name]; dup {
			violate("two instances named %s: %s and %s", i.Name, prev.id, i.ID)
		}
		observed["instance"][i.Name] = objState{present: true, id: i.ID}
		for _, a := range i.Addresses {
			if a.Type == api.AddressInternalIP {
				if other, dup := addrs[a.Address]; dup {
					violate("instances %s and %s have the same address %s", other, i.ID, a.Address)
				}
				addrs[a.Address] = i.ID
			}
		}
		// The name index agrees with the records.
		byName, err := c.ListInstances(ctx, i.Name)
		if err != nil {
			t.Fatalf("after kill %d: %v", k, err)
		}
		if len(byName) != 1 || byName[0].ID != i.ID {
			violate("instance %s (%s): the name index gives %v", i.Name, i.ID, byName)
		}
	}
	for _, a := range []string{"anchor-backend", "anchor-route"} {
		if !observed["instance"][a].present {
			violate("anchor instance %s is gone", a)
		}
	}
	vols, err := c.ListVolumes(ctx)
	if err != nil {
		t.Fatalf("after kill %d: list volumes: %v", k, err)
	}
	for _, v := range vols {
		if prev, dup := observed["volume"][v.Name]; dup {
			violate("two volumes named %s: %s and %s", v.Name, prev.id, v.ID)
		}
		observed["volume"][v.Name] = objState{present: true, id: v.ID}
	}
	routes, err := c.ListRoutes(ctx, "")
	if err != nil {
		t.Fatalf("after kill %d: list routes: %v", k, err)
	}
	for _, rt := range routes {
		if _, dup := observed["route"][rt.Name]; dup {
			violate("two routes named %s", rt.Name)
		}
		observed["route"][rt.Name] = objState{present: true}
		var w, n int
		if _, err := fmt.Sscanf(rt.Name, "route-w%d-%d", &w, &n); err != nil || rt.DestinationCIDR != fmt.Sprintf("10.%d.%d.0/24", 100+w, n) ||
			rt.TargetNode != r.routeTarget || rt.Blackhole {
			violate("route %s is not what was created: %+v", rt.Name, rt)
		}
	}
	lbs, err := c.ListLoadBalancers(ctx, "")
	if err != nil {
		t.Fatalf("after kill %d: list load balancers: %v", k, err)
	}
	vips := map[string]string{}
	for _, lb := range lbs {
		gen, err := specGen(lb)
		if err != nil {
			violate("load balancer %s: %v", lb.Name, err)
			continue
		}
		if _, dup := observed["lb"][lb.Name]; dup {
			violate("two load balancers named %s", lb.Name)
		}
		observed["lb"][lb.Name] = objState{present: true, gen: gen}
		want := r.lbSpec(gen)
		want.IPFamilies = []string{"IPv4"}
		if fmt.Sprint(want.Tags) != fmt.Sprint(lb.Tags) || !slices.Equal(want.Listeners, lb.Listeners) ||
			!slices.Equal(want.Backends, lb.Backends) || !slices.Equal(want.IPFamilies, lb.IPFamilies) || lb.Cluster != want.Cluster {
			violate("load balancer %s is not wholly generation %d: %+v", lb.Name, gen, lb)
		}
		if lb.State != api.LoadBalancerActive {
			violate("load balancer %s is %s: %s", lb.Name, lb.State, lb.Message)
		}
		if len(lb.VIPs) != 1 {
			violate("load balancer %s has VIPs %v", lb.Name, lb.VIPs)
			continue
		}
		if other, dup := vips[lb.VIPs[0]]; dup {
			violate("load balancers %s and %s share VIP %s", other, lb.Name, lb.VIPs[0])
		}
		vips[lb.VIPs[0]] = lb.Name
	}

	// Every model against what is stored.
	r.modelMu.Lock()
	for kind, names := range r.models {
		for name, m := range names {
			got := observed[kind][name]
			if !m.allowed(got) {
				violate("%s %s is %v; acknowledged state %v, unacknowledged candidates %v", kind, name, got, m.known, m.maybe)
			} else if len(m.maybe) > 0 {
				if (&model{known: m.known}).allowed(got) {
					r.uncertainLost++
				} else {
					r.uncertainApplied++
				}
			}
			m.known, m.maybe = got, nil
		}
	}
	// Objects the test never asked for (or not under these names).
	for kind, names := range observed {
		for name := range names {
			if _, ok := r.models[kind][name]; !ok && !strings.HasPrefix(name, "anchor-") {
				violate("%s %s exists but was never created", kind, name)
			}
		}
	}
	r.modelMu.Unlock()

	// Every stored load balancer serves again: its listener is up (health)
	// and a connection through its VIP reaches the backend.
	for _, lb := range lbs {
		if len(lb.VIPs) != 1 || len(lb.Listeners) != 1 {
			continue
		}
		addr := net.JoinHostPort(lb.VIPs[0], strconv.Itoa(lb.Listeners[0].Port))
		deadline := time.Now().Add(10 * time.Second)
		var lastErr error
		for {
			lastErr = probe(ctx, c, lb.Name, addr, banner())
			if lastErr == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if lastErr != nil {
			violate("load balancer %s does not serve at %s: %v", lb.Name, addr, lastErr)
		}
	}
	r.served = len(lbs)
	r.servedTotal += len(lbs)
	serveTook = time.Since(begin)
	// Deleted load balancers are not served.
	for name, m := range r.models["lb"] {
		if m.known.present {
			continue
		}
		if _, err := c.LoadBalancerHealth(ctx, name); !client.IsNotFound(err) {
			violate("deleted load balancer %s: health answers %v, want 404", name, err)
		}
	}
	return violations, serveTook
}

func banner() string { return "portside-crash-backend" }

// probe checks the load balancer's health report and a real connection.
func probe(ctx context.Context, c *client.Client, name, addr, want string) error {
	h, err := c.LoadBalancerHealth(ctx, name)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	if len(h.Listeners) == 0 {
		return fmt.Errorf("health lists no listener: %+v", h)
	}
	for _, l := range h.Listeners {
		if !l.Serving {
			return fmt.Errorf("listener %s not serving: %s", l.Address, l.LastError)
		}
	}
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read through %s: %w", addr, err)
	}
	if strings.TrimSpace(line) != want {
		return fmt.Errorf("read %q through %s", line, addr)
	}
	return nil
}

// portside is the portside binary (internal/testbin).
func portside(t *testing.T) string { return testbin.Portside(t) }
