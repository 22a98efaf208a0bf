package ccm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/internal/controllers/nodelifecycle"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/providers/local"
)

const shutdownTaint = "node.cloudprovider.kubernetes.io/shutdown"

func (f *fixture) waitGone(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, err := f.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not deleted: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestInstanceDeletedNodeDeleted(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	inst := f.instance(t, api.CreateInstanceRequest{Name: "lc-deleted", Zone: "zone-a"})
	f.register(t, nodesim.NodeSpec{Name: "lc-deleted"})
	f.waitNode(t, "lc-deleted", 20*time.Second, "initialization", initialized)
	if err := f.cloud.Client.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	// A Ready node is never deleted: the kubelet says it is alive. Proof
	// that the controller had its chances: two of its passes over the
	// nodes completed after the instance was deleted.
	passes := f.lifecyclePasses(t)
	f.keepsNode(t, "lc-deleted", 20*time.Second, "two node-monitor passes", func() (bool, string) {
		n := f.lifecyclePasses(t)
		return n >= passes+2, fmt.Sprintf("%d passes, %d before", n, passes)
	})
	// Its kubelet stops: NotReady, then deleted.
	if err := f.sim.SetReady(ctx, "lc-deleted", false); err != nil {
		t.Fatal(err)
	}
	f.waitGone(t, "lc-deleted", 10*time.Second)
}

func TestNodeWithoutProviderIDDeletedByName(t *testing.T) {
	f := env(t)
	// Registered NotReady and never initialized (no instance): the instance is
	// looked up by name, found missing, and the node deleted (upstream leaves
	// such nodes forever: cloud-provider-aws#1471).
	f.register(t, nodesim.NodeSpec{Name: "lc-no-providerid", NotReady: true})
	f.waitGone(t, "lc-no-providerid", 10*time.Second)
}

func TestShutdownTaint(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	inst := f.instance(t, api.CreateInstanceRequest{Name: "lc-stopped", Zone: "zone-a"})
	f.register(t, nodesim.NodeSpec{Name: "lc-stopped"})
	f.waitNode(t, "lc-stopped", 20*time.Second, "initialization", initialized)
	if _, err := f.cloud.Client.StopInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.SetReady(ctx, "lc-stopped", false); err != nil {
		t.Fatal(err)
	}
	f.waitNode(t, "lc-stopped", 10*time.Second, "shutdown taint", func(n *corev1.Node) bool { return tainted(n, shutdownTaint) })
	if _, err := f.cloud.Client.StartInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.SetReady(ctx, "lc-stopped", true); err != nil {
		t.Fatal(err)
	}
	n := f.waitNode(t, "lc-stopped", 10*time.Second, "shutdown taint removed", func(n *corev1.Node) bool { return !tainted(n, shutdownTaint) })
	if n.Spec.ProviderID == "" {
		t.Fatal("node lost its providerID")
	}
}

// TestFailingCloudDeletesNothing: a NotReady node whose cloud calls fail
// (500s, throttling, calls that time out) is never deleted: only the cloud
// positively saying the instance is gone deletes a node. A CCM of the
// test's own runs only the lifecycle controller, through a recording proxy
// and with a short per-call timeout (timeoutProviderName), so the test
// sees each failure served to it, and several timeouts in seconds instead
// of one per 30 s client timeout.
func TestFailingCloudDeletesNothing(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	// Names of this run's own: cloud instances and nodes outlive a run (-count=N).
	name := fmt.Sprintf("lc-flaky-%d", time.Now().UnixNano()%1_000_000)
	inst := f.instance(t, api.CreateInstanceRequest{Name: name, Zone: "zone-a"})
	f.register(t, nodesim.NodeSpec{Name: name})
	t.Cleanup(func() {
		// Before the node and instance go: the cloud is shared with the
		// tests after this one.
		if err := f.cloud.Client.SetFaults(context.Background(), api.Faults{}); err != nil {
			t.Errorf("clear faults: %v", err)
		}
	})
	f.waitNode(t, name, 20*time.Second, "initialization", initialized)

	proxy := f.recordingProxy(t)
	f.extraCCM(t, f.opts.Kubeconfig, f.cloudConfig(t, proxy.srv.URL), func(o *manager.Options) {
		o.CloudProvider = timeoutProviderName
		o.Controllers = []string{nodelifecycle.Alias}
		o.NodeMonitorPeriod = 300 * time.Millisecond
	})
	if err := f.sim.SetReady(ctx, name, false); err != nil {
		t.Fatal(err)
	}
	f.waitNode(t, name, 10*time.Second, "NotReady", func(n *corev1.Node) bool { return !ready(n) })
	// Negative control: with the cloud healthy the CCM checks this node
	// and the cloud answers, so what changes below is only the fault.
	f.keepsNode(t, name, 10*time.Second, "a successful cloud check", func() (bool, string) {
		n := instanceOutcomes.count(name, outcomeOK)
		return n >= 1, fmt.Sprintf("%d successful checks", n)
	})

	instancePath := "/v1/instances/" + inst.ID
	for _, phase := range []struct {
		rule    api.FaultRule
		outcome string // what the controller must be served
		want    int    // how many times, at least
		status  int    // what the proxy saw the cloud answer
	}{
		{api.FaultRule{Method: "GET", PathPrefix: instancePath, ErrorRate: 1}, outcomeInjected, 2, http.StatusInternalServerError},
		{api.FaultRule{Method: "GET", PathPrefix: instancePath, ThrottleRate: 1, RetryAfterSeconds: 1}, outcomeThrottled, 2, http.StatusTooManyRequests},
		// Five times the per-call timeout: every call of the test's CCM
		// times out, and the watch covers several of them. (The package
		// CCM, with the client's 30 s timeout, gets slow answers instead,
		// which do not hold its node-monitor passes for long.)
		{api.FaultRule{Method: "GET", PathPrefix: instancePath, LatencyMillis: 5 * int(callTimeout/time.Millisecond)}, outcomeTimeout, 3, http.StatusBadGateway},
	} {
		before := instanceOutcomes.count(name, phase.outcome)
		since := time.Now()
		if err := f.cloud.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{phase.rule}}); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("%d %s answers with %+v", phase.want, phase.outcome, phase.rule)
		f.keepsNode(t, name, 30*time.Second, what, func() (bool, string) {
			n := instanceOutcomes.count(name, phase.outcome) - before
			return n >= phase.want, fmt.Sprintf("%d so far; outcomes %v", n, instanceOutcomes.summary(name))
		})
		// The cloud really was called and answered with the fault (the
		// proxy sits between the CCM and the cloud; it records a call
		// once the call is over, which for a timed-out one is a moment
		// after the CCM gave up).
		f.keepsNode(t, name, 10*time.Second, fmt.Sprintf("the cloud to answer %d calls with %d", phase.want, phase.status), func() (bool, string) {
			served := 0
			for _, c := range proxy.matching("GET", instancePath) {
				if c.at.After(since) && c.status == phase.status {
					served++
				}
			}
			return served >= phase.want, fmt.Sprint(proxy.matching("GET", instancePath))
		})
	}
	if err := f.cloud.Client.SetFaults(ctx, api.Faults{}); err != nil {
		t.Fatal(err)
	}
	// Recovered: the checks succeed again, and the node is still there.
	okBefore := instanceOutcomes.count(name, outcomeOK)
	f.keepsNode(t, name, 20*time.Second, "a successful check after the faults", func() (bool, string) {
		n := instanceOutcomes.count(name, outcomeOK) - okBefore
		return n >= 1, fmt.Sprint(instanceOutcomes.summary(name))
	})
	if err := f.sim.SetReady(ctx, name, true); err != nil {
		t.Fatal(err)
	}
}

// lifecyclePasses scrapes the package CCM for how many node-monitor passes
// its lifecycle controller completed (upstream's MonitorNodes loops).
func (f *fixture) lifecyclePasses(t *testing.T) int {
	t.Helper()
	scrapeOnce.Do(func() { scrapeToken = testenv.ServiceAccountToken(t, "lifecycle-scraper", "/metrics") })
	req, err := http.NewRequest(http.MethodGet, f.metrics, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+scrapeToken)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v %.200s", resp.StatusCode, err, body)
	}
	const metric = "cloud_node_lifecycle_controller_monitor_nodes_duration_seconds_count "
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, metric); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return int(n)
		}
	}
	t.Fatalf("/metrics lacks %s", metric)
	return 0
}

var (
	scrapeOnce  sync.Once
	scrapeToken string
)

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// keepsNode polls until done holds, failing the test at once when the node
// is deleted (or unreadable) meanwhile, and on timeout.
func (f *fixture) keepsNode(t *testing.T, name string, timeout time.Duration, what string, done func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if _, err := f.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Fatalf("node %s deleted (or unreadable) while waiting for %s: %v", name, what, err)
		}
		ok, last := done()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// timeoutProviderName is the local provider with each instance call bounded
// by callTimeout and its outcome recorded in instanceOutcomes.
const timeoutProviderName = "local-test-call-timeout"

// callTimeout stands in for the client's 30 s timeout: far below the
// injected latency, and long enough for a loaded machine's healthy calls.
const callTimeout = time.Second

// Outcomes of instance calls, as the controller was served them.
const (
	outcomeOK        = "ok"
	outcomeInjected  = "injected" // the cloud's injected 500
	outcomeThrottled = "throttled"
	outcomeTimeout   = "timeout"
	outcomeOther     = "other"
)

var instanceOutcomes = &outcomeLog{byNode: map[string]map[string]int{}}

func init() {
	cloud.MustRegister(timeoutProviderName, func(_ context.Context, config io.Reader) (cloud.Provider, error) {
		p, err := local.NewFromReader(config)
		if err != nil {
			return nil, err
		}
		return timeoutProvider{p}, nil
	})
}

type timeoutProvider struct{ cloud.Provider }

func (p timeoutProvider) Instances() (cloud.Instances, bool) {
	in, ok := p.Provider.Instances()
	return timeoutInstances{in}, ok
}

type timeoutInstances struct{ cloud.Instances }

func (i timeoutInstances) InstanceMetadata(ctx context.Context, n cloud.Node) (*cloud.InstanceMetadata, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	md, err := i.Instances.InstanceMetadata(ctx, n)
	instanceOutcomes.add(n.Name, err)
	return md, err
}

func (i timeoutInstances) InstanceExists(ctx context.Context, n cloud.Node) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	ok, err := i.Instances.InstanceExists(ctx, n)
	instanceOutcomes.add(n.Name, err)
	return ok, err
}

func (i timeoutInstances) InstanceShutdown(ctx context.Context, n cloud.Node) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	ok, err := i.Instances.InstanceShutdown(ctx, n)
	instanceOutcomes.add(n.Name, err)
	return ok, err
}

// outcomeLog counts instance-call outcomes by node.
type outcomeLog struct {
	mu     sync.Mutex
	byNode map[string]map[string]int
}

func (l *outcomeLog) add(node string, err error) {
	outcome := outcomeOther
	switch _, throttled := cloud.IsRetryAfter(err); {
	case err == nil:
		outcome = outcomeOK
	case errors.Is(err, context.DeadlineExceeded):
		outcome = outcomeTimeout
	case throttled:
		outcome = outcomeThrottled
	case strings.Contains(err.Error(), "InjectedFault"):
		outcome = outcomeInjected
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byNode[node] == nil {
		l.byNode[node] = map[string]int{}
	}
	l.byNode[node][outcome]++
}

func (l *outcomeLog) count(node, outcome string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byNode[node][outcome]
}

func (l *outcomeLog) summary(node string) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.byNode[node])
}
