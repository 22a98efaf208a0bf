package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/internal/hostsnap"
	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// TestUpRealNodes runs `portside up --node-mode=real` as a user would: two
// real machines of the local cloud join, the CCM initializes them, the
// demo's ETP=Local load balancer is answered by real pods through the VIP
// and follows a scale-down; `kubectl logs` of a real container goes through
// the network proxy to a kubelet serving a certificate of the cluster CA
// (its CSR approved against the cloud's instance). A running up's instance
// stopped through the cloud's API goes NotReady and is tainted shut down by
// the CCM, and comes back Ready, untainted, when started. It then shows the machine is left as found:
// after --once, and after a kill -9 of a running `up` followed by
// `portside down` (links, addresses, routes of every table, rules, network
// namespaces, mounts, cgroups and firewall rulesets of this environment;
// host sysctls and firewall rulesets as a whole).
func TestUpRealNodes(t *testing.T) {
	vpctest.RequireRoot(t)
	bin, root := testenv.BuildPortside(t)
	data := filepath.Join(t.TempDir(), "up")
	// Whatever fails, nothing of this environment outlives the test.
	t.Cleanup(func() {
		if out, err := exec.Command(bin, "down", "--data-dir", data).CombinedOutput(); err != nil {
			t.Errorf("portside down: %v\n%s", err, out)
		}
	})
	before, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "up", "--node-mode=real", "--nodes=2", "--once", "--data-dir", data)
	cmd.Dir = root
	began := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("portside up --node-mode=real --once (%v):\n%s", time.Since(began).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("portside up: %v", err)
	}
	for _, want := range []string{
		"pushed to the cloud's registry: registry.k8s.io/pause:",
		"2 real machines booting in the cloud's VPC",
		"2 kubelets TLS-bootstrapped and registered",
		"2/2 initialized by the ccm",
		"1 pod ready on node-",
		// kube-apiserver → proxy-server → agent → a real kubelet, whose
		// serving certificate the CCM's approver let the cluster CA sign.
		"agent on node-1 connected (in the machine",
		// kubectl logs of the demo: through the agent in the pod's machine.
		"through proxy-server and the agent on node-",
		"stopping local cloud (pid",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`GET http://\S+:8080/hostname → 200 OK from (node-\d): "hello-`).FindSubmatch(out); m == nil {
		t.Errorf("output shows no request through the VIP answered by a real pod")
	}
	mine := testenv.EnvironmentMarks(t, data)
	testenv.CheckHostAsFound(t, "after up --once", before, mine)

	// A running up killed with -9: its machines are left; down removes them.
	up, upOut, done := testenv.StartUp(t, bin, root, "--node-mode=real", "--nodes=1", "--data-dir", data)
	if !strings.Contains(upOut.String(), "1 kubelets TLS-bootstrapped and registered") {
		t.Errorf("second run: no kubelet registered:\n%s", upOut.String())
	}
	kernelPathServes(t, data)
	if st, err := exec.Command(bin, "status", "--data-dir", data).CombinedOutput(); err != nil || !regexp.MustCompile(`8080/TCP\s+active \(kernel path\)`).Match(st) {
		t.Errorf("portside status does not show the demo's load balancer on the kernel path (%v):\n%s", err, st)
	}
	throughTheProxy(t, data)
	proxyServerNotAdmin(t, data)
	powerCycle(t, data, "node-1")
	_ = up.Process.Signal(syscall.SIGKILL)
	<-done
	downOut, err := exec.Command(bin, "down", "--data-dir", data).CombinedOutput()
	if err != nil {
		t.Fatalf("portside down after kill -9: %v\n%s", err, downOut)
	}
	testenv.CheckHostAsFound(t, "after kill -9 of up and portside down", before, mine)
	testenv.AssertNoProcessesUsing(t, data)
}

// powerCycle stops node's instance through the cloud's API, as `portside
// cloud instances stop` does: its Node goes NotReady and the CCM's
// lifecycle controller taints it shut down (the cloud says it is stopped);
// started again it boots, becomes Ready and loses the taint.
func powerCycle(t *testing.T, data, node string) {
	t.Helper()
	cc := upCloudClient(t, data)
	insts, err := cc.ListInstances(context.Background(), node)
	if err != nil || len(insts) != 1 {
		t.Fatalf("instance %s: %v %v", node, insts, err)
	}
	kube := upClient(t, data)
	state := func() (ready, tainted bool, err error) {
		n, err := kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, false, err
		}
		for _, c := range n.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		for _, tt := range n.Spec.Taints {
			tainted = tainted || tt.Key == "node.cloudprovider.kubernetes.io/shutdown"
		}
		return ready, tainted, nil
	}
	if _, err := cc.StopInstance(context.Background(), insts[0].ID); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 90*time.Second, node+" NotReady and tainted shut down after its instance stopped", func() bool {
		ready, tainted, err := state()
		return err == nil && !ready && tainted
	})
	if _, err := cc.StartInstance(context.Background(), insts[0].ID); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 90*time.Second, node+" Ready again and the shutdown taint gone after its instance started", func() bool {
		ready, tainted, err := state()
		return err == nil && ready && !tainted
	})
}

// upCloudClient is a client of up's local cloud, with its token.
func upCloudClient(t *testing.T, data string) *client.Client {
	t.Helper()
	cloud := filepath.Join(data, "cloud")
	ep, err := os.ReadFile(filepath.Join(cloud, server.EndpointFile))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := client.NewWithTokenFile(strings.TrimSpace(string(ep)), filepath.Join(cloud, server.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// throughTheProxy runs kubectl logs, exec, attach and port-forward against
// a real demo pod: kube-apiserver reaches the kubelet only through
// proxy-server and an agent (its egress selector sends all cluster traffic
// there), and each one must pass through the agent inside the pod's node:
// the packets the server sent that agent (its /metrics, read through the
// VPC at the address `portside status` probes) grow with each.
// proxyServerNotAdmin: up runs proxy-server as system:konnectivity-server
// with deploy/network-proxy/rbac.yaml's grants (it read the agents' Nodes
// for their claims, which throughTheProxy just used), never as admin, and
// nothing it asked was forbidden.
func proxyServerNotAdmin(t *testing.T, data string) {
	t.Helper()
	kc := string(mustRead(t, filepath.Join(data, "netproxy", "proxy-server.kubeconfig")))
	if !strings.Contains(kc, "system:konnectivity-server") || strings.Contains(kc, "client-certificate-data") {
		t.Errorf("proxy-server's kubeconfig is not system:konnectivity-server's own:\n%s", kc)
	}
	if log := string(mustRead(t, filepath.Join(data, "logs", "proxy-server.log"))); strings.Contains(log, "forbidden") {
		t.Errorf("proxy-server was forbidden something:\n%s", log)
	}
}

func throughTheProxy(t *testing.T, data string) {
	t.Helper()
	binDir, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(binDir, tools.Kubectl)
	kcfg := "--kubeconfig=" + filepath.Join(data, "controlplane", "kubeconfig")
	pods, err := upClient(t, data).CoreV1().Pods("demo").List(context.Background(), metav1.ListOptions{LabelSelector: "app=hello"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("demo pods: %v %v", pods, err)
	}
	pod := pods.Items[0].Name
	// The agent on the pod's node answers where `up`'s network-proxy state
	// says; viaNodeAgent reads the DIAL_REQ and DATA packets proxy-server
	// has sent it.
	node := pods.Items[0].Spec.NodeName
	_, health := proxyHealth(t, data, node)
	viaNodeAgent := func() int { return max(0, metricSum(t, health, agentDialOrData)) }
	through := func(what string, before int) {
		t.Helper()
		if after := viaNodeAgent(); after <= before {
			t.Errorf("%s: the agent on %s got no packets from proxy-server (%d before, %d after): not through the node's agent", what, node, before, after)
		}
	}
	before := viaNodeAgent()
	out, err := exec.Command(kubectl, kcfg, "-n", "demo", "logs", pod, "-c", "hello", "--tail=1").CombinedOutput()
	if err != nil {
		t.Errorf("kubectl logs %s: %v\n%s", pod, err, out)
	}
	through("kubectl logs", before)
	before = viaNodeAgent()
	out, err = exec.Command(kubectl, kcfg, "-n", "demo", "exec", pod, "--", "/agnhost", "connect", "--timeout=2s", "127.0.0.1:8080").CombinedOutput()
	if err != nil {
		t.Errorf("kubectl exec %s: %v\n%s", pod, err, out)
	}
	through("kubectl exec", before)
	// port-forward: a local port to the pod's 8080, answered by the pod.
	before = viaNodeAgent()
	pf := exec.Command(kubectl, kcfg, "-n", "demo", "port-forward", "pod/"+pod, ":8080")
	pfOut := &syncBuffer{}
	pf.Stdout, pf.Stderr = pfOut, pfOut
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pf.Process.Kill(); _ = pf.Wait() }()
	re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
	waitUntil(t, 30*time.Second, "kubectl port-forward listening", func() bool { return re.MatchString(pfOut.String()) })
	local := re.FindStringSubmatch(pfOut.String())[1]
	waitUntil(t, 30*time.Second, "GET through kubectl port-forward answered by "+pod, func() bool {
		resp, err := (&http.Client{Timeout: 3 * time.Second}).Get("http://127.0.0.1:" + local + "/hostname")
		if err != nil {
			return false
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		return err == nil && strings.TrimSpace(string(body)) == pod
	})
	through("kubectl port-forward", before)
	// attach: the container's output stream, live (netexec logs the request
	// made while attached).
	before = viaNodeAgent()
	at := exec.Command(kubectl, kcfg, "-n", "demo", "attach", pod, "-c", "hello")
	atOut := &syncBuffer{}
	at.Stdout, at.Stderr = atOut, atOut
	if err := at.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = at.Process.Kill(); _ = at.Wait() }()
	marker := fmt.Sprintf("/echo?msg=attached-%d", time.Now().UnixNano())
	waitUntil(t, 30*time.Second, "kubectl attach streaming the request made while attached", func() bool {
		resp, err := (&http.Client{Timeout: 3 * time.Second}).Get("http://127.0.0.1:" + local + marker)
		if err == nil {
			_ = resp.Body.Close()
		}
		return strings.Contains(atOut.String(), marker)
	})
	through("kubectl attach", before)
}
