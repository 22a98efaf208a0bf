package ccm

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

const finalizer = "service.kubernetes.io/load-balancer-cleanup"

// node creates an instance and a simulated node (with kube-proxy stand-in)
// and waits until the node is initialized.
func (f *fixture) node(t *testing.T, name string) {
	t.Helper()
	inst := f.instance(t, api.CreateInstanceRequest{Name: name, Zone: "zone-a"})
	f.register(t, nodesim.NodeSpec{Name: name})
	f.proxy.AddNode(name, netip.MustParseAddr(inst.Addresses[0].Address))
	t.Cleanup(func() { f.proxy.RemoveNode(name) })
	f.waitNode(t, name, 20*time.Second, "initialization", initialized)
}

func (f *fixture) removeNode(t *testing.T, name string) {
	t.Helper()
	f.proxy.RemoveNode(name)
	if err := f.sim.Delete(context.Background(), []string{name}); err != nil {
		t.Fatal(err)
	}
}

func lbSvc(name string, mut func(*corev1.Service)) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}}},
	}
	if mut != nil {
		mut(svc)
	}
	return svc
}

// createSvc creates a Service of the package's cluster; when the test
// ends, it is deleted (if the test did not) and its events too.
func (f *fixture) createSvc(t *testing.T, svc *corev1.Service) *corev1.Service {
	t.Helper()
	f.forgetEvents(t, svc.Name)
	created, err := f.client.CoreV1().Services(svc.Namespace).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := f.client.CoreV1().Services(svc.Namespace).Delete(context.Background(), svc.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &created.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) { // conflict: a Service of the same name the test made again
			t.Errorf("delete Service %s: %v", svc.Name, err)
		}
	})
	return created
}

// endpoints publishes an EndpointSlice for Service name with a ready pod
// on each of nodes (KCM does not run here): the kube-proxy stand-ins serve
// from EndpointSlices, as kube-proxy does.
func (f *fixture) endpoints(t *testing.T, name string, nodes ...string) {
	t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-test",
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "portside-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for i, node := range nodes {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.99.0.%d", i+1)}, NodeName: ptr.To(node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: fmt.Sprintf("%s-%d", name, i)}})
	}
	if _, err := f.client.DiscoveryV1().EndpointSlices("default").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.client.DiscoveryV1().EndpointSlices("default").Delete(context.Background(), s.Name, metav1.DeleteOptions{})
	})
}

func (f *fixture) waitSvc(t *testing.T, name string, timeout time.Duration, what string, cond func(*corev1.Service) bool) *corev1.Service {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		svc, err := f.client.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && cond(svc) {
			return svc
		}
		if time.Now().After(deadline) {
			t.Fatalf("service %s: timed out waiting for %s; last: %+v %v", name, what, svc, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func hasIngress(svc *corev1.Service) bool { return len(svc.Status.LoadBalancer.Ingress) > 0 }

// get sends an HTTP request to the VIP and returns the node that answered.
func get(vip string, port int32) (string, error) {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(fmt.Sprintf("http://%s/", net.JoinHostPort(vip, fmt.Sprint(port))))
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Header.Get("X-Node"), nil
}

// answering collects which nodes answer n requests through the VIP.
func answering(vip string, port int32, n int) map[string]int {
	seen := map[string]int{}
	for range n {
		if node, err := get(vip, port); err == nil {
			seen[node]++
		}
	}
	return seen
}

// eventually retries cond for up to timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

func TestLoadBalancerServiceServesTrafficAndFollowsNodes(t *testing.T) {
	f := env(t)
	f.node(t, "svc-a")
	f.node(t, "svc-b")
	f.createSvc(t, lbSvc("web", nil))
	f.endpoints(t, "web", "svc-a") // Cluster policy: every node forwards to it
	svc := f.waitSvc(t, "web", 20*time.Second, "ingress", hasIngress)
	ing := svc.Status.LoadBalancer.Ingress[0]
	if !f.cloud.VIPPool.Contains(netip.MustParseAddr(ing.IP)) || ing.IPMode == nil || *ing.IPMode != corev1.LoadBalancerIPModeVIP {
		t.Fatalf("ingress = %+v", ing)
	}
	if !HasFinalizerOn(svc) {
		t.Fatalf("finalizer missing: %v", svc.Finalizers)
	}
	if c := meta.FindStatusCondition(svc.Status.Conditions, "LoadBalancerReady"); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("condition = %+v", c)
	}
	eventually(t, 10*time.Second, "both nodes answer through the VIP", func() (bool, string) {
		seen := answering(ing.IP, 8080, 12)
		return seen["svc-a"] > 0 && seen["svc-b"] > 0, fmt.Sprint(seen)
	})

	// A node joins: it gets traffic. A node leaves: it gets none.
	f.node(t, "svc-c")
	eventually(t, 10*time.Second, "the new node answers", func() (bool, string) {
		seen := answering(ing.IP, 8080, 12)
		return seen["svc-c"] > 0, fmt.Sprint(seen)
	})
	f.removeNode(t, "svc-b")
	eventually(t, 10*time.Second, "the removed node gets no traffic", func() (bool, string) {
		seen := answering(ing.IP, 8080, 12)
		return seen["svc-b"] == 0 && seen["svc-a"] > 0 && seen["svc-c"] > 0, fmt.Sprint(seen)
	})
	// Traffic can leave svc-b before the CCM's change does: its proxy is
	// gone, so the health check fails first. The backend itself must go.
	eventually(t, 10*time.Second, "svc-b removed from the load balancer's backends", func() (bool, string) {
		lb, err := f.cloud.Client.GetLoadBalancer(context.Background(), cloud.LoadBalancerName(svc.UID))
		if err != nil {
			return false, err.Error()
		}
		return !slices.ContainsFunc(lb.Backends, func(b api.Backend) bool { return b.Name == "svc-b" }), fmt.Sprintf("%+v", lb.Backends)
	})
	// The local provider changes hosts incrementally: joins and leaves are
	// PATCHes of the changed backends, not the whole set.
	if n := f.cloud.Server.Calls()["PATCH /v1/load-balancers/*/backends"]; n == 0 {
		t.Errorf("no incremental backend change was sent: %v", f.cloud.Server.Calls())
	}

	// Deleted: the load balancer goes, then the finalizer, then the Service.
	if err := f.client.CoreV1().Services("default").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the Service is gone", func() (bool, string) {
		_, err := f.client.CoreV1().Services("default").Get(context.Background(), "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if _, err := f.cloud.Client.GetLoadBalancer(context.Background(), cloud.LoadBalancerName(svc.UID)); err == nil {
		t.Fatal("load balancer leaked")
	}
	if _, err := get(ing.IP, 8080); err == nil {
		t.Fatal("VIP still serves")
	}
}

func HasFinalizerOn(svc *corev1.Service) bool {
	for _, f := range svc.Finalizers {
		if f == finalizer {
			return true
		}
	}
	return false
}

func TestExternalTrafficPolicyLocal(t *testing.T) {
	f := env(t)
	f.node(t, "etp-a")
	f.node(t, "etp-b")
	f.createSvc(t, lbSvc("local", func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}))
	f.endpoints(t, "local", "etp-b")
	svc := f.waitSvc(t, "local", 20*time.Second, "ingress", hasIngress)
	if svc.Spec.HealthCheckNodePort == 0 {
		t.Fatal("no healthCheckNodePort allocated")
	}
	vip := svc.Status.LoadBalancer.Ingress[0].IP
	eventually(t, 10*time.Second, "only the node with local endpoints answers", func() (bool, string) {
		seen := answering(vip, 8080, 12)
		return len(seen) == 1 && seen["etp-b"] == 12, fmt.Sprint(seen)
	})
	_ = f.client.CoreV1().Services("default").Delete(context.Background(), "local", metav1.DeleteOptions{})
}

// TestServiceThatCannotGetALoadBalancer: an unsupported protocol gets an
// event and the condition (the apiserver itself rejects malformed source
// ranges), and fixing the Service gets it a load balancer.
func TestServiceThatCannotGetALoadBalancer(t *testing.T) {
	f := env(t)
	f.createSvc(t, lbSvc("sctp", func(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolSCTP }))
	svc := f.waitSvc(t, "sctp", 20*time.Second, "condition False", func(s *corev1.Service) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, "LoadBalancerReady")
		return c != nil && c.Status == metav1.ConditionFalse
	})
	c := meta.FindStatusCondition(svc.Status.Conditions, "LoadBalancerReady")
	if c.Reason != "UnsupportedService" || !strings.Contains(c.Message, "SCTP") {
		t.Errorf("condition = %+v", c)
	}
	if ev := f.events(t, "sctp"); !strings.Contains(ev["SyncLoadBalancerFailed"], "SCTP") {
		t.Errorf("event %q lacks SCTP", ev["SyncLoadBalancerFailed"])
	}
	if hasIngress(svc) || HasFinalizerOn(svc) {
		t.Errorf("an unsupported Service got an ingress or a finalizer: %+v", svc)
	}
	svc.Spec.Ports[0].Protocol = corev1.ProtocolTCP
	if _, err := f.client.CoreV1().Services("default").Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc = f.waitSvc(t, "sctp", 20*time.Second, "ingress after the fix", hasIngress)
	if c := meta.FindStatusCondition(svc.Status.Conditions, "LoadBalancerReady"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("condition after the fix = %+v", c)
	}
	_ = f.client.CoreV1().Services("default").Delete(context.Background(), "sctp", metav1.DeleteOptions{})
}

// TestCloudThrottlingAndErrorsConverge: a cloud that throttles with
// Retry-After is asked again no sooner than it said (and not parked much
// longer), one that answers 500s gets the error in the Service's condition,
// and once the cloud recovers the Service gets its load balancer. The
// Service lives on a control plane of the test's own, served by a CCM of
// the test's own through a recording proxy: every call for its load
// balancer, and what the cloud answered, is this CCM's.
func TestCloudThrottlingAndErrorsConverge(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	cp := testenv.StartControlPlane(t, controlplane.Options{})
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Created with its finalizer, as after an earlier sync: the first sync
	// then makes no Service write of its own that would queue it again.
	svc, err := client.CoreV1().Services("default").Create(ctx, lbSvc("flaky", withCleanupFinalizer), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lbPath := "/v1/load-balancers/" + cloud.LoadBalancerName(svc.UID)
	t.Cleanup(func() {
		if err := f.cloud.Client.SetFaults(context.Background(), api.Faults{}); err != nil {
			t.Errorf("clear faults: %v", err)
		}
	})
	const retryAfter = 3 * time.Second // above the queue's first backoffs (1 s, 2 s): ignoring it shows
	if err := f.cloud.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{
		{Method: "PUT", PathPrefix: lbPath, ThrottleRate: 1, RetryAfterSeconds: int(retryAfter / time.Second)},
	}}); err != nil {
		t.Fatal(err)
	}
	calls := f.recordingProxy(t)
	f.serviceCCM(t, cp.KubeconfigPath, f.cloudConfig(t, calls.srv.URL), func(o *manager.Options) {
		o.ClusterName = fmt.Sprintf("throttle-%d", time.Now().UnixNano()%1_000_000)
	})
	puts := func() []call { return calls.matching("PUT", lbPath) }
	noIngress := func(phase string) {
		t.Helper()
		got, err := client.CoreV1().Services("default").Get(ctx, "flaky", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if hasIngress(got) {
			t.Fatalf("got an ingress while the cloud %s every call: %+v", phase, got.Status.LoadBalancer)
		}
	}

	// Throttled: four calls, each answered 429.
	eventually(t, 40*time.Second, "four throttled calls", func() (bool, string) { return len(puts()) >= 4, fmt.Sprint(puts()) })
	throttled := puts()
	for _, c := range throttled {
		if c.status != http.StatusTooManyRequests {
			t.Fatalf("a call was not throttled (%d): %v", c.status, throttled)
		}
	}
	noIngress("throttled")
	// Retry-After honoured: from the second call on (the first may be
	// repeated at once, queued again by the CCM's start-up), each retry
	// comes Retry-After after the one before: not sooner (an ordinary
	// backoff of 1 s, 2 s), and not much later.
	for i := 2; i < len(throttled); i++ {
		gap := throttled[i].at.Sub(throttled[i-1].at)
		if gap < retryAfter-100*time.Millisecond || gap > 2*retryAfter {
			t.Errorf("retry %d came %v after the one before, want Retry-After (%v): %v", i, gap.Round(time.Millisecond), retryAfter, throttled)
		}
	}

	// Failing: the 500s are served, and the Service says so.
	if err := f.cloud.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "PUT", PathPrefix: lbPath, ErrorRate: 1}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "two calls answered 500", func() (bool, string) {
		n := 0
		for _, c := range puts() {
			if c.status == http.StatusInternalServerError {
				n++
			}
		}
		return n >= 2, fmt.Sprint(puts()[len(throttled):])
	})
	eventually(t, 10*time.Second, "condition LoadBalancerReady False for the cloud error", func() (bool, string) {
		got, err := client.CoreV1().Services("default").Get(ctx, "flaky", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, "LoadBalancerReady")
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "injected fault"), fmt.Sprintf("%+v", c)
	})
	noIngress("failed")

	// Recovered: the next call succeeds and the Service gets its ingress.
	if err := f.cloud.Client.SetFaults(ctx, api.Faults{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "ingress once the cloud recovers", func() (bool, string) {
		got, err := client.CoreV1().Services("default").Get(ctx, "flaky", metav1.GetOptions{})
		return err == nil && hasIngress(got), fmt.Sprint(err)
	})
	if last := puts()[len(puts())-1]; last.status/100 != 2 {
		t.Errorf("the last call was answered %d, want 2xx: %v", last.status, puts())
	}

	// Its load balancer goes with it (the cloud is shared).
	if err := client.CoreV1().Services("default").Delete(ctx, "flaky", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the load balancer deleted", func() (bool, string) { return !f.lbExists(t, svc.UID), "still there" })
}

// TestRestartConvergesWithoutLeaks: while the CCM is down a Service is
// deleted (its finalizer holds it), another has its finalizer removed by
// hand and is deleted, and a new one is created. After the restart the
// first two load balancers are gone and the new Service has one.
func TestRestartConvergesWithoutLeaks(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	f.createSvc(t, lbSvc("r-held", nil))
	f.createSvc(t, lbSvc("r-orphan", nil))
	held := f.waitSvc(t, "r-held", 20*time.Second, "ingress", hasIngress)
	orphan := f.waitSvc(t, "r-orphan", 20*time.Second, "ingress", hasIngress)
	f.restartCCM(t, func() {
		if err := f.client.CoreV1().Services("default").Delete(ctx, "r-held", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		if _, err := f.client.CoreV1().Services("default").Patch(ctx, "r-orphan", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := f.client.CoreV1().Services("default").Delete(ctx, "r-orphan", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		f.createSvc(t, lbSvc("r-new", nil))
	})
	f.waitSvc(t, "r-new", 20*time.Second, "ingress after restart", hasIngress)
	for _, uid := range []types.UID{held.UID, orphan.UID} {
		eventually(t, 20*time.Second, "load balancer of a deleted Service collected", func() (bool, string) {
			_, err := f.cloud.Client.GetLoadBalancer(ctx, cloud.LoadBalancerName(uid))
			return err != nil && strings.Contains(err.Error(), "404"), fmt.Sprint(err)
		})
	}
	eventually(t, 10*time.Second, "the held Service released", func() (bool, string) {
		_, err := f.client.CoreV1().Services("default").Get(ctx, "r-held", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// Nothing else was deleted: the live Service keeps its load balancer.
	live := f.waitSvc(t, "r-new", time.Second, "still there", hasIngress)
	if _, err := f.cloud.Client.GetLoadBalancer(ctx, cloud.LoadBalancerName(live.UID)); err != nil {
		t.Fatalf("live Service lost its load balancer: %v", err)
	}
	_ = f.client.CoreV1().Services("default").Delete(ctx, "r-new", metav1.DeleteOptions{})
}
