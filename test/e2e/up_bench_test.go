package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/internal/testenv"
)

// BenchmarkUpPods: `portside up --nodes 200`, then a Deployment of 1,000
// replicas behind a LoadBalancer Service. Reports the seconds until every
// pod is Running (scheduled by kube-scheduler, run by the simulated
// kubelets), until the Service's EndpointSlices list all 1,000 as ready
// (what the kube-proxy stand-ins serve from), and until the load balancer
// has all 200 nodes as healthy backends.
func BenchmarkUpPods(b *testing.B) {
	for range b.N {
		r := runUpPods(b, 200, 1000)
		b.ReportMetric(r.upReady.Seconds(), "s-up-ready")
		b.ReportMetric(r.running.Seconds(), "s-pods-running")
		b.ReportMetric(r.ready.Seconds(), "s-endpoints-ready")
		b.ReportMetric(r.healthy.Seconds(), "s-backends-healthy")
	}
}

// TestUpPodsSmoke runs BenchmarkUpPods' harness small (3 nodes, 6 pods),
// for make test: every pod Running on one of the nodes with an address of
// its own, the EndpointSlices listing exactly those addresses as ready,
// and every node a healthy backend of the load balancer (the harness
// checks all of it). No timing is checked.
func TestUpPodsSmoke(t *testing.T) {
	r := runUpPods(t, 3, 6)
	if r.running <= 0 || r.ready <= 0 || r.healthy <= 0 {
		t.Errorf("pods running at %v, endpoints ready at %v, backends healthy at %v", r.running, r.ready, r.healthy)
	}
}

type upPodsResult struct {
	upReady, running, ready, healthy time.Duration
}

// runUpPods runs `portside up --nodes <nodes>` in a data directory of its
// own, measures the Deployment of pods (measurePods), and stops it.
func runUpPods(tb testing.TB, nodes, pods int) upPodsResult {
	bin, root := testenv.BuildPortside(tb)
	data := filepath.Join(tb.TempDir(), "up")
	began := time.Now()
	up, _, done := testenv.StartUp(tb, bin, root, "--nodes", strconv.Itoa(nodes), "--purge", "--data-dir", data)
	upReady := time.Since(began)
	stop := func() {
		_, _ = exec.Command(bin, "down", "--data-dir", data).CombinedOutput()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = up.Process.Kill()
		}
	}
	var r upPodsResult
	func() {
		defer stop()
		r = measurePods(tb, bin, data, nodes, pods)
	}()
	r.upReady = upReady
	testenv.AssertNoProcessesUsing(tb, data)
	return r
}

// measurePods creates the Service and Deployment and waits until every pod
// is Running, every endpoint ready and every node a healthy backend; then
// it checks that they are the right ones.
func measurePods(tb testing.TB, bin, data string, nodes, pods int) upPodsResult {
	ctx := context.Background()
	client := upClient(tb, data)
	labels := map[string]string{"app": "scale"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "scale"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(pods)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.com/web:1"}}}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "scale"},
		Spec: corev1.ServiceSpec{Selector: labels, Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	began := time.Now()
	if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	var r upPodsResult
	deadline := time.Now().Add(10 * time.Minute)
	for r.running == 0 || r.ready == 0 || r.healthy == 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("not done after 10 minutes: running %v, endpoints %v, backends %v", r.running, r.ready, r.healthy)
		}
		time.Sleep(500 * time.Millisecond)
		if r.running == 0 {
			if ips, err := runningPodIPs(ctx, client); err == nil && len(ips) == pods {
				r.running = time.Since(began)
			}
		}
		if r.ready == 0 {
			if ips, err := readyEndpoints(ctx, client); err == nil && len(ips) == pods {
				r.ready = time.Since(began)
			}
		}
		if r.healthy == 0 {
			if n, ok := healthyBackendsOf(bin, data, "default/scale"); ok && n == nodes {
				r.healthy = time.Since(began)
			}
		}
	}

	// The counts reached: now the contents. Every pod on one of the nodes,
	// each with an address of its own; the ready endpoints are exactly the
	// pods' addresses; the healthy backends are exactly the nodes.
	nodeList, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	var nodeNames []string
	for _, n := range nodeList.Items {
		nodeNames = append(nodeNames, n.Name)
	}
	slices.Sort(nodeNames)
	if len(nodeNames) != nodes {
		tb.Errorf("%d nodes %v, want %d", len(nodeNames), nodeNames, nodes)
	}
	podList, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=scale"})
	if err != nil {
		tb.Fatal(err)
	}
	var podIPs []string
	for _, p := range podList.Items {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || !slices.Contains(nodeNames, p.Spec.NodeName) {
			tb.Errorf("pod %s: %s on node %q, address %q: want Running on one of %v", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.PodIP, nodeNames)
		}
		podIPs = append(podIPs, p.Status.PodIP)
	}
	slices.Sort(podIPs)
	if len(podIPs) != pods || len(slices.Compact(slices.Clone(podIPs))) != pods {
		tb.Errorf("pod addresses %v: want %d, all different", podIPs, pods)
	}
	if eps, err := readyEndpoints(ctx, client); err != nil || !slices.Equal(eps, podIPs) {
		tb.Errorf("ready endpoints %v (%v), want the pods' addresses %v", eps, err, podIPs)
	}
	if backends, ok := healthyBackendNames(bin, data, "default/scale"); !ok || !slices.Equal(backends, nodeNames) {
		tb.Errorf("healthy backends %v, want the nodes %v", backends, nodeNames)
	}
	return r
}

// runningPodIPs are the addresses of the Running pods of the Deployment.
func runningPodIPs(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=scale", ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			ips = append(ips, p.Status.PodIP)
		}
	}
	return ips, nil
}

// readyEndpoints are the addresses the Service's EndpointSlices list as
// ready, sorted.
func readyEndpoints(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	list, err := client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=scale"})
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				ips = append(ips, e.Addresses...)
			}
		}
	}
	slices.Sort(ips)
	return ips, nil
}
