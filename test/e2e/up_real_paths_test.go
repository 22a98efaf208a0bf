package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/internal/nginxtest"
	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/pkg/providers/local"
)

// bulkPort is where each echo pod's second container sends zeros to
// whoever connects (socat, from agnhost's image): the throughput server.
const bulkPort = 9000

// pathTarget is one way to the echo pods: an address for HTTP requests
// and one for bulk reads.
type pathTarget struct{ name, http, bulk string }

// dataPlanePaths serves agnhost's netexec and a bulk sender from one pod
// per node behind three LoadBalancer Services: two with NodePorts, one on
// the cloud's default data path (the VPC router's kernel path: the VIP's
// flows rewritten to a node's NodePort) and one kept in the cloud's proxy
// (the data-path annotation "proxy": accept, dial the NodePort, copy),
// and one routed (allocateLoadBalancerNodePorts: false: the VPC router
// forwards the VIP's packets to a node and kube-proxy serves the VIP);
// and measures every path to them, interleaved: rounds of a tenth of
// the requests per path in turn, so a slow moment of the machine falls on
// all of them alike.
func dataPlanePaths(tb testing.TB, client kubernetes.Interface, cfg realBenchConfig) []pathResult {
	ctx := context.Background()
	labels := map[string]string{"bench": "echo"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "echo"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(cfg.nodes)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "echo", Image: nodeimages.AgnhostImage,
					Args:           []string{"netexec", "--http-port=8080"},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}},
					// -U: data flows from the second address to the first,
					// zeros to each accepted connection (a child each).
					{Name: "bulk", Image: nodeimages.AgnhostImage, Command: []string{"socat", "-U", "-b", "131072",
						"TCP-LISTEN:" + strconv.Itoa(bulkPort) + ",fork,reuseaddr", "OPEN:/dev/zero"}}}}}}}
	if _, err := client.AppsV1().Deployments("bench").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	ports := []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
		{Name: "bulk", Port: bulkPort, TargetPort: intstr.FromInt32(bulkPort), Protocol: corev1.ProtocolTCP}}
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "echo"},
			Spec: corev1.ServiceSpec{Selector: labels, Type: corev1.ServiceTypeLoadBalancer, Ports: ports}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "echo-proxy", Annotations: map[string]string{local.AnnotationDataPath: "proxy"}},
			Spec: corev1.ServiceSpec{Selector: labels, Type: corev1.ServiceTypeLoadBalancer, Ports: ports}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "echo-routed"},
			Spec: corev1.ServiceSpec{Selector: labels, Type: corev1.ServiceTypeLoadBalancer, Ports: ports, AllocateLoadBalancerNodePorts: ptr.To(false)}},
	} {
		if _, err := client.CoreV1().Services("bench").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	var targets []pathTarget
	var podNames []string
	waitUntil(tb, 3*time.Minute, "the echo pods ready and the Services' VIPs", func() bool {
		s, err := client.CoreV1().Services("bench").Get(ctx, "echo", metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false
		}
		rs, err := client.CoreV1().Services("bench").Get(ctx, "echo-routed", metav1.GetOptions{})
		if err != nil || len(rs.Status.LoadBalancer.Ingress) == 0 {
			return false
		}
		ps, err := client.CoreV1().Services("bench").Get(ctx, "echo-proxy", metav1.GetOptions{})
		if err != nil || len(ps.Status.LoadBalancer.Ingress) == 0 {
			return false
		}
		pods, err := client.CoreV1().Pods("bench").List(ctx, metav1.ListOptions{LabelSelector: "bench=echo"})
		if err != nil || len(pods.Items) != cfg.nodes {
			return false
		}
		podNames = podNames[:0]
		for _, p := range pods.Items {
			if !podReady(&p) {
				return false
			}
			podNames = append(podNames, p.Name)
		}
		node, err := client.CoreV1().Nodes().Get(ctx, pods.Items[0].Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		var nodeAddr string
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				nodeAddr = a.Address
			}
		}
		pod, vip, rvip := pods.Items[0].Status.PodIP, s.Status.LoadBalancer.Ingress[0].IP, rs.Status.LoadBalancer.Ingress[0].IP
		hp := func(h string, p int32) string { return net.JoinHostPort(h, strconv.Itoa(int(p))) }
		targets = []pathTarget{
			{"direct", hp(pod, 8080), hp(pod, bulkPort)},
			{"nodeport", hp(nodeAddr, s.Spec.Ports[0].NodePort), hp(nodeAddr, s.Spec.Ports[1].NodePort)},
			{"vip", hp(vip, 80), hp(vip, bulkPort)},
			{"vip-proxy", hp(ps.Status.LoadBalancer.Ingress[0].IP, 80), hp(ps.Status.LoadBalancer.Ingress[0].IP, bulkPort)},
			{"routed", hp(rvip, 80), hp(rvip, bulkPort)},
		}
		return nodeAddr != ""
	})
	if cfg.nginx {
		if nb := nginxtest.Find(true); nb.Missing != "" {
			tb.Logf("without nginx: %s", nb.Missing)
		} else {
			// nginx doing the data plane's hop: loopback → NodePort.
			httpListen, bulkListen := freeLoopback(tb), freeLoopback(tb)
			err := nginxtest.Start(tb, nb, httpListen, targets[1].http)
			if err == nil {
				err = nginxtest.Start(tb, nb, bulkListen, targets[1].bulk)
			}
			if err != nil {
				tb.Logf("without nginx: %v", err)
			} else {
				targets = append(targets, pathTarget{"nginx", httpListen, bulkListen})
			}
		}
	}
	// A VIP answers once the data plane (or the router) has a healthy
	// backend: wait for every path to answer before measuring.
	for _, t := range targets {
		waitUntil(tb, 2*time.Minute, "an answer from "+t.http, func() bool {
			_, err := hostnameFrom(http.DefaultClient, t.http, podNames)
			return err == nil
		})
		waitUntil(tb, 2*time.Minute, "bulk data from "+t.bulk, func() bool {
			_, err := bulkRead(t.bulk, 1<<10)
			return err == nil
		})
	}
	paths := make([]pathResult, len(targets))
	for i, t := range targets {
		paths[i].name = t.name
	}
	keep := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	fresh := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	rounds := min(10, cfg.requests)
	per := cfg.requests / rounds
	for round := 0; round < rounds; round++ {
		for i, t := range targets {
			for range per {
				began := time.Now()
				if _, err := hostnameFrom(keep, t.http, podNames); err != nil {
					tb.Fatalf("%s (%s): %v", t.name, t.http, err)
				}
				paths[i].roundTrips = append(paths[i].roundTrips, time.Since(began))
			}
			began := time.Now()
			for range per {
				if _, err := hostnameFrom(fresh, t.http, podNames); err != nil {
					tb.Fatalf("%s (%s), new connection: %v", t.name, t.http, err)
				}
			}
			// Running means over the rounds: this round's rate folded in.
			rate := float64(per) / time.Since(began).Seconds()
			paths[i].connsPerSec += (rate - paths[i].connsPerSec) / float64(round+1)
			took, err := bulkRead(t.bulk, cfg.bulkBytes)
			if err != nil {
				tb.Fatalf("%s (%s), bulk: %v", t.name, t.bulk, err)
			}
			mbps := float64(cfg.bulkBytes) / 1e6 / took.Seconds()
			paths[i].mbPerSec += (mbps - paths[i].mbPerSec) / float64(round+1)
		}
	}
	for i := range paths {
		slices.Sort(paths[i].roundTrips)
	}
	return paths
}

// bulkRead connects to addr and reads n bytes of zeros, returning the
// time from the dial to the last byte.
func bulkRead(addr string, n int64) (time.Duration, error) {
	began := time.Now()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 256<<10)
	for got := int64(0); got < n; {
		k, err := c.Read(buf[:min(int64(len(buf)), n-got)])
		// The first read proves the sender (checking every byte would
		// bound the client, not the path).
		if got == 0 {
			if i := slices.IndexFunc(buf[:k], func(b byte) bool { return b != 0 }); i >= 0 {
				return 0, fmt.Errorf("%s: byte %d is %#x, want the bulk sender's zeros", addr, i, buf[i])
			}
		}
		got += int64(k)
		if err != nil {
			return 0, fmt.Errorf("%s: %d of %d bytes: %w", addr, got, n, err)
		}
	}
	return time.Since(began), nil
}

// hostnameFrom asks netexec at addr for its hostname, which must be one of
// the echo pods' names: a path answered by anything else is not measured.
func hostnameFrom(c *http.Client, addr string, pods []string) (string, error) {
	resp, err := c.Get("http://" + addr + "/hostname")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	name := strings.TrimSpace(string(b))
	if resp.StatusCode != http.StatusOK || !slices.Contains(pods, name) {
		return "", fmt.Errorf("%s: %s %q, want 200 and one of %v", addr, resp.Status, name, pods)
	}
	return name, nil
}

// freeLoopback is a loopback address with a port that was free a moment
// ago (bound, then closed), away from 127.0.0.1 where other tests pick.
func freeLoopback(tb testing.TB) string {
	ip := netip.AddrFrom4([4]byte{127, 90, byte(os.Getpid() >> 8), byte(os.Getpid())})
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
