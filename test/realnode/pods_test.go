package realnode_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
)

// TestPodsAcrossNodes runs agnhost on two real nodes and shows, with real
// traffic: the host reaches a pod through the VPC's route for its node's
// pod CIDR; a pod reaches the other node's pod only through that route
// (deleting it in the VPC breaks the traffic, putting it back restores
// it); kube-proxy serves a ClusterIP Service across nodes and a NodePort
// from the host; `kubectl exec` and `kubectl logs` reach the containers.
func TestPodsAcrossNodes(t *testing.T) {
	c := startCluster(t)
	n1, n2 := c.bootNode(t, 1), c.bootNode(t, 2)
	cidr1 := netip.PrefixFrom(c.ranges.Pods.Addr(), 24)
	cidr2 := netip.PrefixFrom(nthSubnet(c.ranges.Pods.Addr(), 1), 24)
	for _, x := range []struct {
		n    *node
		cidr netip.Prefix
	}{{n1, cidr1}, {n2, cidr2}} {
		c.waitNode(t, x.n, 2*time.Minute, "registered", func(*corev1.Node) bool { return true })
		setPodCIDR(t, c, x.n.name, x.cidr)
		if err := c.nw.SetRoute(x.cidr, x.n.addr); err != nil {
			t.Fatal(err)
		}
		c.importImages(t, x.n)
	}
	for _, n := range []*node{n1, n2} {
		c.waitNode(t, n, 2*time.Minute, "Ready", nodeReady)
	}
	p1, p2 := c.runAgnhost(t, "web-1", n1), c.runAgnhost(t, "web-2", n2)
	if !cidr1.Contains(netip.MustParseAddr(p1.Status.PodIP)) || !cidr2.Contains(netip.MustParseAddr(p2.Status.PodIP)) {
		t.Fatalf("pod IPs %s, %s not from their nodes' pod CIDRs %s, %s", p1.Status.PodIP, p2.Status.PodIP, cidr1, cidr2)
	}

	// The host reaches each pod (through the VPC router's routes).
	for _, p := range []*corev1.Pod{p1, p2} {
		if got := httpGet(t, "http://"+p.Status.PodIP+":8080/hostname"); got != p.Name {
			t.Errorf("GET %s/hostname = %q, want %q", p.Status.PodIP, got, p.Name)
		}
	}
	// Pod to pod across nodes, from inside pod 1 (kubectl exec).
	connect := func() error {
		return c.kubectl(t, "exec", p1.Name, "--", "/agnhost", "connect", "--timeout=3s", p2.Status.PodIP+":8080")
	}
	if err := connect(); err != nil {
		t.Fatalf("pod %s → pod %s (%s) across nodes: %v", p1.Name, p2.Name, p2.Status.PodIP, err)
	}
	// Only the cloud's route carries it.
	if err := c.nw.DeleteRoute(cidr2); err != nil {
		t.Fatal(err)
	}
	if err := connect(); err == nil {
		t.Fatalf("pod %s reached %s with the VPC route for %s deleted", p1.Name, p2.Status.PodIP, cidr2)
	}
	if err := c.nw.SetRoute(cidr2, n2.addr); err != nil {
		t.Fatal(err)
	}
	if err := connect(); err != nil {
		t.Fatalf("pod-to-pod after the route was put back: %v", err)
	}

	// kube-proxy: a ClusterIP Service from pod 1 to pod 2, and its
	// NodePort on node 1 from the host.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web-2", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web-2"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}
	svc, err := c.client.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "ClusterIP "+svc.Spec.ClusterIP+" answered from pod web-1", func() (bool, string) {
		err := c.kubectl(t, "exec", p1.Name, "--", "/agnhost", "connect", "--timeout=2s", svc.Spec.ClusterIP+":80")
		return err == nil, fmt.Sprint(err)
	})
	nodePort := fmt.Sprintf("http://%s:%d/hostname", n1.addr, svc.Spec.Ports[0].NodePort)
	testenv.Eventually(t, time.Minute, "NodePort "+nodePort, func() (bool, string) {
		got, err := tryGet(nodePort)
		return err == nil && got == "web-2", fmt.Sprintf("%q %v", got, err)
	})
	// kubectl logs: netexec logs each request it served.
	logs, err := c.client.CoreV1().Pods("default").GetLogs(p2.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil || !strings.Contains(string(logs), "/hostname") {
		t.Errorf("logs of %s: %v\n%s", p2.Name, err, logs)
	}
}

func nodeReady(nd *corev1.Node) bool {
	for _, cond := range nd.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nthSubnet is the n-th /24 after a.
func nthSubnet(a netip.Addr, n int) netip.Addr {
	b := a.As4()
	b[2] += byte(n)
	return netip.AddrFrom4(b)
}

func setPodCIDR(t *testing.T, c *cluster, node string, cidr netip.Prefix) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, cidr, cidr))
	if _, err := c.client.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// importImages loads pause and agnhost into the node's containerd (the
// registry path is `up`'s; here the images go in directly).
func (c *cluster) importImages(t *testing.T, n *node) {
	t.Helper()
	dir, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := tools.Path(dir, tools.Ctr)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(c.dir, "images.tar")
	if _, err := exec.Command("test", "-f", archive).CombinedOutput(); err != nil {
		imgs, _, err := nodeimages.Cached(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := nodeimages.WriteArchive(archive, imgs); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(n.dir, "run", "containerd", "containerd.sock")
	testenv.Eventually(t, time.Minute, n.name+": images imported into containerd", func() (bool, string) {
		out, err := exec.Command(ctr, "--address", sock, "-n", "k8s.io", "images", "import", "--all-platforms", archive).CombinedOutput()
		return err == nil, fmt.Sprintf("%v: %s", err, out)
	})
}

// runAgnhost runs agnhost netexec on node n and waits until it is Running.
func (c *cluster) runAgnhost(t *testing.T, name string, n *node) *corev1.Pod {
	t.Helper()
	return runPod(t, c, name, n.name, corev1.PullNever)
}

// runPod runs agnhost netexec on a node and waits until it is Running.
func runPod(t *testing.T, c *cluster, name, nodeName string, pull corev1.PullPolicy) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName: nodeName,
			// No CCM here: the nodes keep the uninitialized taint.
			Tolerations: []corev1.Toleration{{Key: "node.cloudprovider.kubernetes.io/uninitialized", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "agnhost", Image: nodeimages.AgnhostImage, ImagePullPolicy: pull,
				Args: []string{"netexec", "--http-port=8080"}, Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				// Ready once it answers: Running alone is before it listens.
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/hostname", Port: intstr.FromInt32(8080)}}}}},
		},
	}
	if _, err := c.client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	testenv.Eventually(t, 2*time.Minute, "pod "+name+" ready", func() (bool, string) {
		p, err := c.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = p
		ready := false
		for _, cond := range p.Status.Conditions {
			ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
		}
		return ready && p.Status.PodIP != "", fmt.Sprintf("phase %s ready %v %v", p.Status.Phase, ready, p.Status.ContainerStatuses)
	})
	return got
}

// kubectl runs the pinned kubectl against the cluster.
func (c *cluster) kubectl(t *testing.T, args ...string) error {
	return kubectlAt(c.cp.KubeconfigPath, args...)
}

// kubectlAt runs the pinned kubectl with a kubeconfig, in namespace default.
func kubectlAt(kubeconfig string, args ...string) error {
	_, err := kubectlOutput(kubeconfig, args...)
	return err
}

// kubectlOutput is kubectlAt returning what kubectl printed.
func kubectlOutput(kubeconfig string, args ...string) (string, error) {
	dir, err := tools.BinDir()
	if err != nil {
		return "", err
	}
	bin, err := tools.Path(dir, tools.Kubectl)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig, "-n", "default"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

func tryGet(url string) (string, error) {
	cl := http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	got, err := tryGet(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return got
}
