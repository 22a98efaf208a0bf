package realnode_test

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/portside-io/portside/internal/hostsnap"
	"github.com/portside-io/portside/internal/testbin"
	"github.com/portside-io/portside/internal/testenv"
)

// TestUpDualStack: `portside up --ip-family=dual` with real nodes. Each
// node has an InternalIP of each family (IPv4 first) and a pod CIDR of
// each; the cloud holds a route of each family per node, kernel routes in
// the VPC router via the node's address of that family; a pod has an
// address of each family; a pod reaches a pod on the other node over IPv6,
// which only the cloud's route carries there; a RequireDualStack
// LoadBalancer Service gets one ingress of each family, both answered by
// the pods from the host and from a pod; `portside down` leaves the host as
// it was found.
func TestUpDualStack(t *testing.T) {
	before, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	data, _, kube := upRealNodes(t, 2, "--ip-family=dual")
	ctx := context.Background()
	kubeconfig := filepath.Join(data, "controlplane", "kubeconfig")
	mine := testenv.EnvironmentMarks(t, data)

	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 2 {
		t.Fatalf("nodes: %v (%d)", err, len(nodes.Items))
	}
	nodeIP6 := map[string]netip.Addr{}
	for _, n := range nodes.Items {
		var ips []netip.Addr
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ips = append(ips, netip.MustParseAddr(a.Address))
			}
		}
		if len(ips) != 2 || !ips[0].Is4() || !ips[1].Is6() {
			t.Errorf("node %s: InternalIPs %v, want an IPv4 and then an IPv6 address", n.Name, ips)
			continue
		}
		nodeIP6[n.Name] = ips[1]
		if len(n.Spec.PodCIDRs) != 2 || !strings.Contains(n.Spec.PodCIDRs[1], ":") {
			t.Errorf("node %s: podCIDRs %v, want one of each family", n.Name, n.Spec.PodCIDRs)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The cloud's routes: one per node and family, each a kernel route in
	// the VPC router via the node's address of its family.
	cloud := cloudClient(t, filepath.Join(data, "cloud"))
	testenv.Eventually(t, time.Minute, "a cloud route of each family per node", func() (bool, string) {
		routes, err := cloud.ListRoutes(ctx, "")
		if err != nil {
			return false, err.Error()
		}
		v6 := 0
		for _, r := range routes {
			if strings.Contains(r.DestinationCIDR, ":") {
				v6++
			}
		}
		return len(routes) == 4 && v6 == 2, fmt.Sprint(routes)
	})
	router := ""
	for _, m := range mine {
		if strings.HasPrefix(m, "ps") && !strings.HasPrefix(m, "ps-") {
			router = m + "-router"
		}
	}
	kernel, err := exec.Command("ip", "-n", router, "-6", "route", "show", "proto", "static").CombinedOutput()
	if err != nil {
		t.Fatalf("the VPC router's IPv6 routes: %v\n%s", err, kernel)
	}
	for _, n := range nodes.Items {
		want := fmt.Sprintf("%s via %s ", n.Spec.PodCIDRs[1], nodeIP6[n.Name])
		if !strings.Contains(string(kernel), want) {
			t.Errorf("the VPC router has no route %q:\n%s", want, kernel)
		}
	}

	// Pods of both families, one per node, behind a RequireDualStack
	// LoadBalancer Service.
	ns := dnsNamespace(t, kube)
	labels := map[string]string{"app": "dual"}
	pods := spreadNetexec(t, kube, ns, "dual", "with an address of each family", func(p corev1.Pod) bool {
		return len(p.Status.PodIPs) == 2 && strings.Contains(p.Status.PodIPs[1].IP, ":")
	})
	kexec := func(pod string, args ...string) error {
		return kubectlAt(kubeconfig, append([]string{"-n", ns, "exec", pod, "--", "/agnhost"}, args...)...)
	}
	// Pod to pod across nodes over IPv6: only the VPC router's route for
	// the other node's IPv6 pod CIDR leads there.
	to := netip.AddrPortFrom(netip.MustParseAddr(pods[1].Status.PodIPs[1].IP), 8080)
	if err := kexec(pods[0].Name, "connect", to.String(), "--timeout=5s"); err != nil {
		t.Errorf("pod %s on %s cannot reach pod %s on %s at %s: %v", pods[0].Name, pods[0].Spec.NodeName, pods[1].Name, pods[1].Spec.NodeName, to, err)
	}

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "dual", Namespace: ns}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, IPFamilyPolicy: ptrTo(corev1.IPFamilyPolicyRequireDualStack),
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, Selector: labels,
		Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
	if _, err := kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var vips []netip.Addr
	testenv.Eventually(t, 2*time.Minute, "an ingress of each family", func() (bool, string) {
		cur, err := kube.CoreV1().Services(ns).Get(ctx, "dual", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		vips = nil
		for _, in := range cur.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				vips = append(vips, a)
			}
		}
		return len(vips) == 2 && vips[0].Is4() != vips[1].Is4(), fmt.Sprintf("ingress %v, clusterIPs %v", cur.Status.LoadBalancer.Ingress, cur.Spec.ClusterIPs)
	})
	names := []string{pods[0].Name, pods[1].Name}
	for _, vip := range vips {
		url := "http://" + netip.AddrPortFrom(vip, 8080).String() + "/hostname"
		answeredByAll(t, url, names)
		if err := kexec(pods[0].Name, "connect", netip.AddrPortFrom(vip, 8080).String(), "--timeout=5s"); err != nil {
			t.Errorf("pod %s cannot reach the VIP %s: %v", pods[0].Name, vip, err)
		}
	}
	t.Logf("RequireDualStack Service: VIPs %v answered by %v from the host and from a pod", vips, names)

	// Cluster DNS of both families: kube-dns has a ClusterIP of each
	// (PreferDualStack; the kubelets' clusterDNS is the IPv4 one, as
	// kubeadm's), and CoreDNS answers the Service's A and AAAA records
	// with its ClusterIPs, asked over either family.
	kubeDNS, err := kube.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := kube.CoreV1().Services(ns).Get(ctx, "dual", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(kubeDNS.Spec.ClusterIPs) != 2 || len(cur.Spec.ClusterIPs) != 2 {
		t.Fatalf("kube-dns ClusterIPs %v, Service dual's %v: want one of each family", kubeDNS.Spec.ClusterIPs, cur.Spec.ClusterIPs)
	}
	name := "dual." + ns + ".svc.cluster.local"
	for _, q := range []struct{ server, typ, want string }{
		{"", "AAAA", cur.Spec.ClusterIPs[1]}, // the pod's resolv.conf: kube-dns's IPv4 address
		{kubeDNS.Spec.ClusterIPs[1], "A", cur.Spec.ClusterIPs[0]},
		{kubeDNS.Spec.ClusterIPs[1], "AAAA", cur.Spec.ClusterIPs[1]},
	} {
		args := []string{"-n", ns, "exec", pods[0].Name, "--", "dig", "+short", "+time=3", "+tries=2", q.typ, name}
		if q.server != "" {
			args = append(args, "@"+q.server)
		}
		var out string
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%s %s from pod %s via %q answered %s", q.typ, name, pods[0].Name, q.server, q.want), func() (bool, string) {
			out, err = kubectlOutput(kubeconfig, args...)
			return err == nil && strings.TrimSpace(out) == q.want, fmt.Sprintf("%q %v", out, err)
		})
	}
	t.Logf("cluster DNS %v answers %s's A and AAAA (%v) over both families", kubeDNS.Spec.ClusterIPs, name, cur.Spec.ClusterIPs)

	// Portside's conformance suite: its dual-stack test runs (the provider
	// declares lb-dual-stack from up's cloud config) and passes, beside the
	// route and core load-balancer tests.
	conf := exec.Command(testbin.Portside(t), "conformance", "--kubeconfig", kubeconfig, "--cloud-provider=local",
		"--cloud-config", filepath.Join(data, "ccm", "cloud.yaml"), "--cloud-data-dir", filepath.Join(data, "cloud"), "--max-wait=60s",
		"--focus", `^(routes/|nodes/dual-stack-addresses$|load-balancers/(dual-stack|dual-stack-etp-local|ip-family-policies|ingress-and-traffic)$)`)
	report, err := conf.CombinedOutput()
	t.Logf("portside conformance:\n%s", report)
	if err != nil {
		t.Errorf("portside conformance: %v", err)
	}
	for _, name := range []string{"load-balancers/dual-stack", "load-balancers/dual-stack-etp-local", "load-balancers/ip-family-policies", "nodes/dual-stack-addresses", "routes/dual-stack"} {
		if !regexp.MustCompile(regexp.QuoteMeta(name) + `\s+passed`).Match(report) {
			t.Errorf("%s did not pass", name)
		}
	}

	if out, err := exec.Command(testbin.Portside(t), "down", "--data-dir", data).CombinedOutput(); err != nil {
		t.Fatalf("portside down: %v\n%s", err, out)
	}
	testenv.CheckHostAsFound(t, "after portside down", before, mine)
}
