package ccm

import (
	"context"
	"fmt"
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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
	"github.com/portside-io/portside/pkg/providers/local"
)

// callLog is a recording proxy in front of the test cloud: it tells which
// CCM made which cloud call, when, and what the cloud answered.
type callLog struct {
	mu    sync.Mutex
	calls []call
	srv   *httptest.Server
}

// call is one request through the proxy.
type call struct {
	at           time.Time // when it arrived
	took         time.Duration
	method, path string
	// status answered; 502 when the caller gave up (timed out) before the
	// cloud answered.
	status int
}

func (c call) String() string {
	return fmt.Sprintf("%s %s %d at %s (%v)", c.method, c.path, c.status, c.at.Format("15:04:05.000"), c.took.Round(time.Millisecond))
}

// statusWriter keeps the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (f *fixture) recordingProxy(t *testing.T) *callLog {
	t.Helper()
	target, _ := url.Parse(f.cloud.Endpoint)
	l := &callLog{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	// A caller that times out cancels its request: that is expected here,
	// not worth the proxy's log line.
	proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		proxy.ServeHTTP(sw, r)
		l.mu.Lock()
		l.calls = append(l.calls, call{at: start, took: time.Since(start), method: r.Method, path: r.URL.Path, status: sw.status})
		l.mu.Unlock()
	}))
	t.Cleanup(l.srv.Close)
	return l
}

// mentioning returns the calls ("METHOD path") whose path names the load
// balancer name.
func (l *callLog) mentioning(name string) []string {
	var out []string
	for _, c := range l.matching("", name) {
		out = append(out, c.method+" "+c.path)
	}
	return out
}

// matching returns the finished calls of method ("": any) whose path
// contains part, oldest first.
func (l *callLog) matching(method, part string) []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []call
	for _, c := range l.calls {
		if (method == "" || c.method == method) && strings.Contains(c.path, part) {
			out = append(out, c)
		}
	}
	// Recorded when they finish: order by arrival.
	slices.SortFunc(out, func(a, b call) int { return a.at.Compare(b.at) })
	return out
}

// cloudConfig writes a provider config for endpoint.
func (f *fixture) cloudConfig(t *testing.T, endpoint string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(p, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", endpoint, f.cloud.Token)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// serviceCCM starts a CCM running only the service controller, stopped at
// the end of the test.
func (f *fixture) serviceCCM(t *testing.T, kubeconfig, cloudConfig string, mut func(*manager.Options)) func() {
	t.Helper()
	return f.extraCCM(t, kubeconfig, cloudConfig, func(o *manager.Options) {
		o.Controllers = []string{"service"}
		if mut != nil {
			mut(o)
		}
	})
}

// extraCCM starts a CCM of the test's own beside the package's (mut picks
// its controllers), stopped at the end of the test or by the returned func.
func (f *fixture) extraCCM(t *testing.T, kubeconfig, cloudConfig string, mut func(*manager.Options)) func() {
	t.Helper()
	o := manager.NewOptions()
	o.CloudProvider, o.CloudConfig, o.Kubeconfig = "local", cloudConfig, kubeconfig
	o.LeaderElect, o.SecurePort, o.BindAddress = false, 0, "127.0.0.1"
	mut(o)
	_, stop := startCCM(t, o)
	var once sync.Once
	t.Cleanup(func() { once.Do(stop) })
	return func() { once.Do(stop) }
}

func (f *fixture) lbExists(t *testing.T, uid types.UID) bool {
	t.Helper()
	_, err := f.cloud.Client.GetLoadBalancer(context.Background(), cloud.LoadBalancerName(uid))
	if err != nil && !strings.Contains(err.Error(), "404") {
		t.Fatalf("get load balancer: %v", err)
	}
	return err == nil
}

func removeFinalizers(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := c.CoreV1().Services(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func withClassOf(class string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.LoadBalancerClass = &class }
}

func withCleanupFinalizer(s *corev1.Service) { s.Finalizers = append(s.Finalizers, finalizer) }

// TestAnotherClassIsNeverTouched: without --load-balancer-class, a Service
// of another class keeps the cleanup finalizer and gets no cloud call, even
// when deleted (upstream's controller would clean it up).
func TestAnotherClassIsNeverTouched(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	other := f.createSvc(t, lbSvc("other-class", func(s *corev1.Service) {
		withClassOf("example.com/other")(s)
		withCleanupFinalizer(s)
	}))
	t.Cleanup(func() { removeFinalizers(t, f.client, "default", "other-class") })
	if err := f.client.CoreV1().Services("default").Delete(ctx, "other-class", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Service of ours created and deleted after it: once that is done,
	// the controller has seen the other one's deletion too.
	f.createSvc(t, lbSvc("own-class", nil))
	f.waitSvc(t, "own-class", 20*time.Second, "ingress", hasIngress)
	if err := f.client.CoreV1().Services("default").Delete(ctx, "own-class", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "our Service cleaned up", func() (bool, string) {
		_, err := f.client.CoreV1().Services("default").Get(ctx, "own-class", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	time.Sleep(time.Second)
	got, err := f.client.CoreV1().Services("default").Get(ctx, "other-class", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("another class's Service was released by our controller: %v", err)
	}
	if !HasFinalizerOn(got) || hasIngress(got) {
		t.Fatalf("another class's Service was touched: finalizers %v, status %+v", got.Finalizers, got.Status)
	}
	if f.lbExists(t, other.UID) {
		t.Fatal("a load balancer was made for another class's Service")
	}
}

// TestClassModeServesOnlyItsClass: a CCM with --load-balancer-class serves
// that class only; class-less Services (another CCM's) never get a call
// from it, deleted or not. A type change away from LoadBalancer cleans up
// its own: load balancer deleted, ingress really cleared, finalizer removed.
func TestClassModeServesOnlyItsClass(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	const class = "example.com/portside"
	calls := f.recordingProxy(t)
	f.serviceCCM(t, f.opts.Kubeconfig, f.cloudConfig(t, calls.srv.URL), func(o *manager.Options) { o.LoadBalancerClass = class })

	plain := f.createSvc(t, lbSvc("cm-plain", nil)) // the package CCM's
	ours := f.createSvc(t, lbSvc("cm-ours", withClassOf(class)))
	f.waitSvc(t, "cm-plain", 20*time.Second, "ingress from the class-less CCM", hasIngress)
	f.waitSvc(t, "cm-ours", 20*time.Second, "ingress from the class CCM", hasIngress)
	if len(calls.mentioning(cloud.LoadBalancerName(ours.UID))) == 0 {
		t.Fatal("the class CCM made no call for its own Service")
	}

	// The class-less Service is deleted: the class CCM stays away from it.
	if err := f.client.CoreV1().Services("default").Delete(ctx, "cm-plain", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the class-less Service released by its own CCM", func() (bool, string) {
		_, err := f.client.CoreV1().Services("default").Get(ctx, "cm-plain", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	// Type change away from LoadBalancer: the class is dropped with it.
	svc, err := f.client.CoreV1().Services("default").Get(ctx, "cm-ours", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Type, svc.Spec.LoadBalancerClass = corev1.ServiceTypeClusterIP, nil
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].NodePort = 0
	}
	svc.Spec.ExternalTrafficPolicy = ""
	svc.Spec.AllocateLoadBalancerNodePorts = nil
	if _, err := f.client.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := f.waitSvc(t, "cm-ours", 20*time.Second, "cleanup after the type change", func(s *corev1.Service) bool { return !HasFinalizerOn(s) })
	if len(done.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("ingress not cleared on cleanup: %+v", done.Status.LoadBalancer)
	}
	if f.lbExists(t, ours.UID) {
		t.Error("load balancer not deleted after the type change")
	}
	if got := calls.mentioning(cloud.LoadBalancerName(plain.UID)); len(got) != 0 {
		t.Errorf("the class CCM made calls for a class-less Service: %v", got)
	}
	_ = f.client.CoreV1().Services("default").Delete(ctx, "cm-ours", metav1.DeleteOptions{})
}

// TestTwoClustersOnOneCloud: two clusters with the same --cluster-name on
// one cloud never delete each other's load balancers, whether the other's
// Service is absent here or exists here under the same name; load balancers
// without our cluster UID or Service UID tags are never collected. A load
// balancer that is provably ours and whose Service is gone is collected
// (the proof the collector ran).
func TestTwoClustersOnOneCloud(t *testing.T) {
	t.Run("same cluster name", func(t *testing.T) { twoClusters(t, "") })
	t.Run("different cluster names", func(t *testing.T) { twoClusters(t, "cluster-b") })
}

// twoClusters runs the scenario with cluster B named nameB ("": the same
// name as the package's cluster A).
func twoClusters(t *testing.T, nameB string) {
	f := env(t)
	named := func(o *manager.Options) {
		if nameB != "" {
			o.ClusterName = nameB
		}
	}
	ctx := context.Background()
	cpCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cpB, err := controlplane.Start(cpCtx, controlplane.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cpB.Stop)
	clientB, err := kubernetes.NewForConfig(cpB.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	stopB := f.serviceCCM(t, cpB.KubeconfigPath, f.cloudConfig(t, f.cloud.Endpoint), named)

	createIn := func(c kubernetes.Interface, name string) *corev1.Service {
		s, err := c.CoreV1().Services("default").Create(ctx, lbSvc(name, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	waitLB := func(uid types.UID) {
		eventually(t, 20*time.Second, "load balancer made", func() (bool, string) { return f.lbExists(t, uid), string(uid) })
	}
	onlyA, twinA := createIn(f.client, "twin-only-a"), createIn(f.client, "twin")
	onlyB, twinB, goneB := createIn(clientB, "twin-only-b"), createIn(clientB, "twin"), createIn(clientB, "twin-gone")
	for _, s := range []*corev1.Service{onlyA, twinA, onlyB, twinB, goneB} {
		waitLB(s.UID)
	}
	// Load balancers of the same cluster name but not provably anyone's.
	for name, tags := range map[string]map[string]string{
		"untagged-uid":     {"kubernetes.io/service-name": "default/nowhere"},
		"no-cluster-uid":   {"kubernetes.io/service-name": "default/nowhere", "kubernetes.io/service-uid": "0000"},
		"empty-uid-values": {"kubernetes.io/service-name": "default/nowhere", "kubernetes.io/service-uid": "", "kubernetes.io/cluster-uid": ""},
	} {
		if _, err := f.cloud.Client.PutLoadBalancer(ctx, name, api.LoadBalancerSpec{Cluster: f.opts.ClusterName, Tags: tags,
			Listeners: []api.Listener{{Protocol: "TCP", Port: 9, BackendPort: 30009}}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.cloud.Client.DeleteLoadBalancer(context.Background(), name) })
	}

	// Both CCMs restart (orphan collection runs at start); meanwhile B's
	// twin-gone loses its finalizer and is deleted: that one is B's orphan.
	stopB()
	removeFinalizers(t, clientB, "default", "twin-gone")
	if err := clientB.CoreV1().Services("default").Delete(ctx, "twin-gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// And one orphan each that is provably that cluster's (its cluster UID,
	// a Service that does not exist there), named to sort after every other
	// load balancer here: the cloud lists them by name and a collector
	// decides one after the other, so once it is gone that collector's pass
	// has looked at all the others.
	run := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	orphanA, orphanB := "zz-orphan-a-"+run, "zz-orphan-b-"+run
	clusterB := f.opts.ClusterName
	if nameB != "" {
		clusterB = nameB
	}
	f.plantOrphan(t, orphanA, f.opts.ClusterName, clusterUID(t, f.client))
	f.plantOrphan(t, orphanB, clusterB, clusterUID(t, clientB))
	f.serviceCCM(t, cpB.KubeconfigPath, f.cloudConfig(t, f.cloud.Endpoint), named)
	f.restartCCM(t, func() {})
	gone := func(name string) func() (bool, string) {
		return func() (bool, string) {
			_, err := f.cloud.Client.GetLoadBalancer(ctx, name)
			return client.IsNotFound(err), fmt.Sprint(err)
		}
	}
	eventually(t, 20*time.Second, "B's own orphan collected", func() (bool, string) { return !f.lbExists(t, goneB.UID), "still there" })
	eventually(t, 20*time.Second, "B's collector through its pass (its last orphan collected)", gone(orphanB))
	eventually(t, 20*time.Second, "A's collector through its pass (its last orphan collected)", gone(orphanA))
	for _, s := range []*corev1.Service{onlyA, twinA, onlyB, twinB} {
		if !f.lbExists(t, s.UID) {
			t.Errorf("the load balancer of %s (uid %s) was deleted by the other cluster's CCM", s.Name, s.UID)
		}
	}
	for _, name := range []string{"untagged-uid", "no-cluster-uid", "empty-uid-values"} {
		if _, err := f.cloud.Client.GetLoadBalancer(ctx, name); err != nil {
			t.Errorf("load balancer %s without proof of ownership was deleted: %v", name, err)
		}
	}
	for _, c := range []kubernetes.Interface{f.client, clientB} {
		list, err := c.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Items {
			if strings.HasPrefix(s.Name, "twin") {
				if err := c.CoreV1().Services("default").Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}
		}
	}
	eventually(t, 20*time.Second, "all twins cleaned up", func() (bool, string) {
		for _, s := range []*corev1.Service{onlyA, twinA, onlyB, twinB} {
			if f.lbExists(t, s.UID) {
				return false, s.Name
			}
		}
		return true, ""
	})
}

// clusterUID is a cluster's UID as its CCM tags load balancers with: the
// UID of namespace kube-system.
func clusterUID(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	ns, err := c.CoreV1().Namespaces().Get(context.Background(), metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(ns.UID)
}

// plantOrphan puts a load balancer that is provably cluster (clusterUID)'s,
// made for a Service that does not exist: its collector deletes it.
func (f *fixture) plantOrphan(t *testing.T, name, cluster, clusterUID string) {
	t.Helper()
	tags := map[string]string{local.TagServiceName: "default/" + name, local.TagServiceUID: "uid-" + name, local.TagClusterUID: clusterUID}
	if _, err := f.cloud.Client.PutLoadBalancer(context.Background(), name, api.LoadBalancerSpec{Cluster: cluster, Tags: tags,
		Listeners: []api.Listener{{Protocol: "TCP", Port: 9, BackendPort: 30009}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.cloud.Client.DeleteLoadBalancer(context.Background(), name) })
}

// TestRecreatedServiceReplacesItsLoadBalancer: a Service deleted without
// its finalizer and recreated at once under the same name gets a new load
// balancer, and the old UID's is deleted (not left for a later collection).
func TestRecreatedServiceReplacesItsLoadBalancer(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	old := f.createSvc(t, lbSvc("recreated", nil))
	f.waitSvc(t, "recreated", 20*time.Second, "ingress", hasIngress)
	removeFinalizers(t, f.client, "default", "recreated")
	if err := f.client.CoreV1().Services("default").Delete(ctx, "recreated", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	renewed := f.createSvc(t, lbSvc("recreated", nil))
	f.waitSvc(t, "recreated", 20*time.Second, "ingress of the new Service", func(s *corev1.Service) bool { return s.UID == renewed.UID && hasIngress(s) })
	eventually(t, 10*time.Second, "the old UID's load balancer deleted", func() (bool, string) { return !f.lbExists(t, old.UID), "still there" })
	if !f.lbExists(t, renewed.UID) {
		t.Fatal("the new Service has no load balancer")
	}
	_ = f.client.CoreV1().Services("default").Delete(ctx, "recreated", metav1.DeleteOptions{})
}

// TestAutoscalerTaintDoesNotPullTheNode: ToBeDeletedByClusterAutoscaler
// leaves the node a backend (kube-proxy's health check drains it); the
// node's deletion removes it.
func TestAutoscalerTaintDoesNotPullTheNode(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	// Names of this run's own: cloud instances outlive a run (-count=N).
	run := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	a, b, c := "ca-a-"+run, "ca-b-"+run, "ca-c-"+run
	f.node(t, a)
	f.node(t, b)
	svc := f.createSvc(t, lbSvc("ca-"+run, nil))
	f.waitSvc(t, "ca-"+run, 20*time.Second, "ingress", hasIngress)
	backends := func() map[string]bool {
		lb, err := f.cloud.Client.GetLoadBalancer(ctx, cloud.LoadBalancerName(svc.UID))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, b := range lb.Backends {
			out[b.Name] = true
		}
		return out
	}
	eventually(t, 10*time.Second, "both nodes backends", func() (bool, string) { got := backends(); return got[a] && got[b], fmt.Sprint(got) })
	patch := []byte(`{"spec":{"taints":[{"key":"ToBeDeletedByClusterAutoscaler","value":"1700000000","effect":"NoSchedule"}]}}`)
	if _, err := f.client.CoreV1().Nodes().Patch(ctx, b, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another node joins, so the host set really is recomputed.
	f.node(t, c)
	eventually(t, 10*time.Second, "the new node a backend", func() (bool, string) { got := backends(); return got[c], fmt.Sprint(got) })
	if got := backends(); !got[b] {
		t.Fatalf("the autoscaler's taint pulled the node out at once: %v", got)
	}
	f.removeNode(t, b)
	eventually(t, 10*time.Second, "the deleted node no backend", func() (bool, string) { got := backends(); return !got[b], fmt.Sprint(got) })
	_ = f.client.CoreV1().Services("default").Delete(ctx, "ca-"+run, metav1.DeleteOptions{})
	f.removeNode(t, a)
	f.removeNode(t, c)
}
