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

// TestUpIPv6Only: `portside up --ip-family=ipv6` with real nodes, an
// IPv6-only cluster on the cloud's dual-stack VPC. Each node's one
// InternalIP and pod CIDR are IPv6, as are the pods', the Services' and
// the kubernetes Service's (pods reach kube-apiserver at the VPC's IPv6
// gateway); cluster DNS answers over IPv6; a pod reaches a pod on the
// other node over the cloud's IPv6 route; up's demo and a LoadBalancer
// Service get IPv6 ingress only, answered from the host and from a pod;
// the conformance suite's route, node and core load-balancer tests pass;
// `portside down` leaves the host as found.
func TestUpIPv6Only(t *testing.T) {
	before, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	data, out, kube := upRealNodes(t, 2, "--ip-family=ipv6")
	ctx := context.Background()
	kubeconfig := filepath.Join(data, "controlplane", "kubeconfig")
	mine := testenv.EnvironmentMarks(t, data)
	if m := regexp.MustCompile(`http://\[[0-9a-f:]+\]:\d+/`).FindString(out); m == "" {
		t.Errorf("up printed no demo URL of an IPv6 VIP:\n%s", out)
	}

	is6 := func(s string) bool { a, err := netip.ParseAddr(s); return err == nil && a.Is6() && !a.Is4In6() }
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 2 {
		t.Fatalf("nodes: %v (%d)", err, len(nodes.Items))
	}
	for _, n := range nodes.Items {
		var ips []string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ips = append(ips, a.Address)
			}
		}
		if len(ips) != 1 || !is6(ips[0]) {
			t.Errorf("node %s: InternalIPs %v, want one IPv6 address", n.Name, ips)
		}
		if len(n.Spec.PodCIDRs) != 1 || !strings.Contains(n.Spec.PodCIDRs[0], ":") {
			t.Errorf("node %s: podCIDRs %v, want one IPv6 CIDR", n.Name, n.Spec.PodCIDRs)
		}
	}
	k8s, err := kube.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || !is6(k8s.Spec.ClusterIP) {
		t.Fatalf("the kubernetes Service: %v, ClusterIPs %v, want IPv6", err, k8s.Spec.ClusterIPs)
	}
	if t.Failed() {
		t.FailNow()
	}

	ns := dnsNamespace(t, kube)
	// In-cluster clients reach kube-apiserver by the IPv6 ClusterIP.
	inClusterClientWorks(t, kube, ns)

	labels := map[string]string{"app": "six"}
	pods := spreadNetexec(t, kube, ns, "six", "with one IPv6 address each", func(p corev1.Pod) bool {
		return len(p.Status.PodIPs) == 1 && is6(p.Status.PodIPs[0].IP)
	})
	kexec := func(pod string, args ...string) (string, error) {
		return kubectlOutput(kubeconfig, append([]string{"-n", ns, "exec", pod, "--"}, args...)...)
	}
	to := netip.AddrPortFrom(netip.MustParseAddr(pods[1].Status.PodIP), 8080)
	if _, err := kexec(pods[0].Name, "/agnhost", "connect", to.String(), "--timeout=5s"); err != nil {
		t.Errorf("pod %s on %s cannot reach pod %s on %s at %s: %v", pods[0].Name, pods[0].Spec.NodeName, pods[1].Name, pods[1].Spec.NodeName, to, err)
	}

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "six", Namespace: ns}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Selector: labels,
		Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
	if _, err := kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var vip netip.Addr
	testenv.Eventually(t, 2*time.Minute, "one IPv6 ingress", func() (bool, string) {
		cur, err := kube.CoreV1().Services(ns).Get(ctx, "six", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		in := cur.Status.LoadBalancer.Ingress
		if len(in) == 1 && is6(in[0].IP) {
			vip = netip.MustParseAddr(in[0].IP)
			return true, ""
		}
		return false, fmt.Sprintf("ingress %v, clusterIPs %v", in, cur.Spec.ClusterIPs)
	})
	names := []string{pods[0].Name, pods[1].Name}
	url := "http://" + netip.AddrPortFrom(vip, 8080).String() + "/hostname"
	answeredByAll(t, url, names)
	if _, err := kexec(pods[0].Name, "/agnhost", "connect", netip.AddrPortFrom(vip, 8080).String(), "--timeout=5s"); err != nil {
		t.Errorf("pod %s cannot reach the VIP %s: %v", pods[0].Name, vip, err)
	}
	// Cluster DNS: the pod's resolver (kube-dns's IPv6 ClusterIP) answers
	// the Service's AAAA record.
	cur, err := kube.CoreV1().Services(ns).Get(ctx, "six", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := "six." + ns + ".svc.cluster.local"
	testenv.Eventually(t, 30*time.Second, "AAAA "+name+" answered "+cur.Spec.ClusterIP, func() (bool, string) {
		out, err := kexec(pods[0].Name, "dig", "+short", "+time=3", "+tries=2", "AAAA", name)
		return err == nil && strings.TrimSpace(out) == cur.Spec.ClusterIP, fmt.Sprintf("%q %v", out, err)
	})
	t.Logf("IPv6-only: VIP %s answered by %v from the host and a pod; %s resolves to %s", vip, names, name, cur.Spec.ClusterIP)

	conf := exec.Command(testbin.Portside(t), "conformance", "--kubeconfig", kubeconfig, "--cloud-provider=local",
		"--cloud-config", filepath.Join(data, "ccm", "cloud.yaml"), "--cloud-data-dir", filepath.Join(data, "cloud"), "--max-wait=60s",
		"--focus", `^(routes/pod-cidrs|nodes/(initialized|dual-stack-addresses)|load-balancers/(ingress-and-traffic|etp-local|ip-family-policies))$`)
	report, err := conf.CombinedOutput()
	t.Logf("portside conformance:\n%s", report)
	if err != nil {
		t.Errorf("portside conformance: %v", err)
	}
	if m := regexp.MustCompile(`(\d+) passed, (\d+) failed`).FindStringSubmatch(string(report)); m == nil || m[1] == "0" || m[2] != "0" {
		t.Errorf("portside conformance summary %q, want passes and no failure", m)
	}

	if out, err := exec.Command(testbin.Portside(t), "down", "--data-dir", data).CombinedOutput(); err != nil {
		t.Fatalf("portside down: %v\n%s", err, out)
	}
	testenv.CheckHostAsFound(t, "after portside down", before, mine)
}
