package realnode_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// TestUpRoutedLoadBalancer: a LoadBalancer Service without NodePorts
// (allocateLoadBalancerNodePorts: false) on real nodes gets an ingress and
// is answered by its pods from the host: the cloud routes the VIP to the
// nodes and kube-proxy serves it (ipMode VIP). A port the Service lacks,
// a client outside its source ranges and a Service scaled to no pods are
// refused at once (ECONNREFUSED, not a timeout or an accept-then-close);
// the source range widened lets the host in again; NodePorts allocated
// later move it to the proxied load balancer with the same ingress.
func TestUpRoutedLoadBalancer(t *testing.T) {
	data, _, kube := upRealNodes(t, 2)
	cloud := cloudClient(t, filepath.Join(data, "cloud"))
	ctx := context.Background()
	ns := dnsNamespace(t, kube)

	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "routed", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "routed"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "routed"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "netexec", Image: nodeimages.AgnhostImage,
					Args:           []string{"netexec", "--http-port=8080"},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}}}}}}}
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "routed", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
			Selector: map[string]string{"app": "routed"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
	if _, err := kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var vip string
	testenv.Eventually(t, 3*time.Minute, "the Service without NodePorts to get an ingress", func() (bool, string) {
		cur, err := kube.CoreV1().Services(ns).Get(ctx, "routed", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if np := cur.Spec.Ports[0].NodePort; np != 0 {
			t.Fatalf("a NodePort (%d) was allocated for a Service with allocateLoadBalancerNodePorts false", np)
		}
		if len(cur.Status.LoadBalancer.Ingress) == 0 {
			return false, "no ingress yet"
		}
		vip = cur.Status.LoadBalancer.Ingress[0].IP
		return true, ""
	})
	lbName := "a" + strings.ReplaceAll(string(must(kube.CoreV1().Services(ns).Get(ctx, "routed", metav1.GetOptions{})).UID), "-", "")
	if len(lbName) > 32 {
		lbName = lbName[:32]
	}
	url := "http://" + net.JoinHostPort(vip, "80") + "/hostname"
	seen := map[string]bool{}
	testenv.Eventually(t, 2*time.Minute, "both pods to answer through the routed VIP "+vip, func() (bool, string) {
		name, err := getFresh(url)
		if err != nil {
			return false, err.Error()
		}
		seen[name] = true
		return len(seen) == 2, fmt.Sprintf("answered by %v", seen)
	})
	h, err := cloud.LoadBalancerHealth(ctx, lbName)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Serving || len(h.Listeners) != 1 || h.Listeners[0].Address != net.JoinHostPort(vip, "80") {
		t.Errorf("cloud's health of %s: serving %v, listeners %+v; want the routed VIP:80 serving", lbName, h.Serving, h.Listeners)
	}
	if n := healthyBackends(h); n != 2 {
		t.Errorf("cloud's health of %s: %d healthy backends (kube-proxy's /healthz), want both nodes: %+v", lbName, n, h.Backends)
	}

	// A port of the VIP no listener has: refused by the router.
	expectRefused(t, net.JoinHostPort(vip, "81"), "a port the Service does not have")

	// Source ranges: one that excludes the host refuses it at the cloud.
	update := func(what string, f func(*corev1.Service)) {
		t.Helper()
		cur, err := kube.CoreV1().Services(ns).Get(ctx, "routed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f(cur)
		if _, err := kube.CoreV1().Services(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	update("source ranges excluding the host", func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"} })
	waitRefused(t, net.JoinHostPort(vip, "80"), "a client outside loadBalancerSourceRanges")
	update("source ranges with the host", func(s *corev1.Service) {
		s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24", "198.19.255.0/24"}
	})
	testenv.Eventually(t, time.Minute, "the host let in again by its range", func() (bool, string) {
		_, err := tryGet(url)
		return err == nil, fmt.Sprint(err)
	})

	// No pods: refused, then answered again.
	scale := func(n int32) {
		t.Helper()
		s, err := kube.AppsV1().Deployments(ns).GetScale(ctx, "routed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.Replicas = n
		if _, err := kube.AppsV1().Deployments(ns).UpdateScale(ctx, "routed", s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	scale(0)
	waitRefused(t, net.JoinHostPort(vip, "80"), "the Service with no pods")
	scale(1)
	testenv.Eventually(t, 2*time.Minute, "the VIP answered again after scaling to 1", func() (bool, string) {
		_, err := tryGet(url)
		return err == nil, fmt.Sprint(err)
	})

	// NodePorts allocated: the proxied load balancer, the same ingress.
	update("allocating NodePorts", func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = ptr.To(true) })
	testenv.Eventually(t, 2*time.Minute, "the load balancer to forward to the new NodePort", func() (bool, string) {
		lb, err := cloud.GetLoadBalancer(ctx, lbName)
		if err != nil {
			return false, err.Error()
		}
		if lb.Listeners[0].BackendPort == 0 {
			return false, "still routed"
		}
		_, err = tryGet(url)
		return err == nil && len(lb.VIPs) == 1 && lb.VIPs[0] == vip, fmt.Sprintf("VIPs %v (want [%s]), get: %v", lb.VIPs, vip, err)
	})
}

// getFresh GETs url on a new connection: each one is a new flow, hashed
// to a node and balanced to a pod anew.
func getFresh(url string) (string, error) {
	cl := http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Get(url)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}

func healthyBackends(h *api.LoadBalancerHealth) int {
	n := 0
	for _, b := range h.Backends {
		if b.Healthy {
			n++
		}
	}
	return n
}

// expectRefused dials addr once: it must be refused within 2 s.
func expectRefused(t *testing.T, addr, what string) {
	t.Helper()
	if err := dialRefused(addr); err != nil {
		t.Errorf("%s (%s): %v", what, addr, err)
	}
}

func waitRefused(t *testing.T, addr, what string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, what+" to be refused at "+addr, func() (bool, string) {
		err := dialRefused(addr)
		return err == nil, fmt.Sprint(err)
	})
}

// dialRefused is nil when a TCP connection to addr is refused at once.
func dialRefused(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		_ = c.Close()
		return errors.New("connection accepted, want refused")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%v, want connection refused", err)
	}
	return nil
}
