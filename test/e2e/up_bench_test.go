package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// BenchmarkUpPods: `portside up --nodes 200`, then a Deployment of 1,000
// replicas behind a LoadBalancer Service. Reports the seconds until every
// pod is Running (scheduled by kube-scheduler, run by the simulated
// kubelets), until the Service's EndpointSlices list all 1,000 as ready
// (what the kube-proxy stand-ins serve from), and until the load balancer
// has all 200 nodes as healthy backends.
func BenchmarkUpPods(b *testing.B) {
	const nodes, pods = 200, 1000
	bin, root := buildPortside(b)
	for range b.N {
		data := filepath.Join(b.TempDir(), "up")
		began := time.Now()
		up, _, done := startUp(b, bin, root, "--nodes", strconv.Itoa(nodes), "--purge", "--data-dir", data)
		b.ReportMetric(time.Since(began).Seconds(), "s-up-ready")
		stop := func() {
			_, _ = exec.Command(bin, "down", "--data-dir", data).CombinedOutput()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				_ = up.Process.Kill()
			}
		}
		func() {
			defer stop()
			measurePods(b, bin, data, nodes, pods)
		}()
		assertNoProcessesUsing(b, data)
	}
}

func measurePods(b *testing.B, bin, data string, nodes, pods int) {
	ctx := context.Background()
	client := upClient(b, data)
	labels := map[string]string{"app": "scale"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "scale"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(pods)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.com/web:1"}}}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "scale"},
		Spec: corev1.ServiceSpec{Selector: labels, Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	began := time.Now()
	if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var running, ready, healthy time.Duration
	deadline := time.Now().Add(10 * time.Minute)
	for running == 0 || ready == 0 || healthy == 0 {
		if time.Now().After(deadline) {
			b.Fatalf("not done after 10 minutes: running %v, endpoints %v, backends %v", running, ready, healthy)
		}
		time.Sleep(500 * time.Millisecond)
		if running == 0 {
			list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=scale", ResourceVersion: "0"})
			n := 0
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
					n++
				}
			}
			if err == nil && n == pods {
				running = time.Since(began)
			}
		}
		if ready == 0 {
			list, err := client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=scale"})
			n := 0
			for _, s := range list.Items {
				for _, e := range s.Endpoints {
					if e.Conditions.Ready != nil && *e.Conditions.Ready {
						n++
					}
				}
			}
			if err == nil && n == pods {
				ready = time.Since(began)
			}
		}
		if healthy == 0 {
			if n, ok := healthyBackendsOf(bin, data, "default/scale"); ok && n == nodes {
				healthy = time.Since(began)
			}
		}
	}
	b.ReportMetric(running.Seconds(), "s-pods-running")
	b.ReportMetric(ready.Seconds(), "s-endpoints-ready")
	b.ReportMetric(healthy.Seconds(), "s-backends-healthy")
}
