// Package e2e runs the portside binary as a user would.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/portside-io/portside/internal/devenv"
	"github.com/portside-io/portside/internal/syncbuf"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
)

// syncBuffer is what a child process writes while the test reads.
type syncBuffer = syncbuf.Buffer

// TestUpOnce is `make demo DEMO_FLAGS=--once` from a fresh data directory:
// the whole stack comes up, a request through a LoadBalancer VIP is answered
// by a simulated node, and everything stops and is removed.
func TestUpOnce(t *testing.T) {
	bin, root := testenv.BuildPortside(t)
	data := filepath.Join(t.TempDir(), "up")
	cmd := exec.Command(bin, "up", "--node-mode=simulated", "--once", "--purge", "--data-dir", data)
	cmd.Dir = root
	began := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("portside up --once (%v):\n%s", time.Since(began).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("portside up --once: %v", err)
	}
	for _, want := range []string{
		"Kubernetes v1.37.2 ready at https://127.0.0.1:",
		"local cloud    serving at http://127.0.0.1:",
		"3 registered like kubelets with --cloud-provider=external (3 new, 0 from an earlier run)",
		"3/3 initialized by the ccm",
		"export KUBECONFIG=",
		"stopping ccm (pid", "stopping simulated nodes", "stopping local cloud (pid", "stopping kube-apiserver (pid",
		"kube-controller-manager acting (pid", "stopping kube-controller-manager (pid",
		// The network proxy carries kube-apiserver's cluster egress: the
		// demo reads a pod's log through it.
		"proxy-server serving (pid", "agent-zone-a connected (pid", "agent-zone-b connected (pid",
		"through proxy-server and agent-zone-", "stopping proxy-server (pid",
		// The CCM serves persistent-volume-label to the apiserver.
		"persistent-volume-label webhook registered",
		"got topology.kubernetes.io/zone=zone-a__zone-b, topology.kubernetes.io/region=region-1 and node affinity topology.kubernetes.io/zone In [zone-a zone-b], topology.kubernetes.io/region In [region-1] from the ccm's persistent-volume-label webhook",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`GET http://127\.25[01]\.\d+\.\d+:8080/ → 200 OK from (node-\d)`).FindSubmatch(out); m == nil {
		t.Errorf("output shows no request through the VIP answered by a node")
	}
	testenv.AssertNoProcessesUsing(t, data)
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("--purge left %s behind (%v)", data, err)
	}
}

// TestUpStatusDownAndRerun: a running `portside up` shows initialized nodes
// with zones and the demo load balancer in `portside status`; `portside
// down` stops it and keeps state; a second run reuses the machines and
// Nodes, and removes those beyond a smaller --nodes.
func TestUpStatusDownAndRerun(t *testing.T) {
	bin, root := testenv.BuildPortside(t)
	data := filepath.Join(t.TempDir(), "up")
	up, out, done := testenv.StartUp(t, bin, root, "--data-dir", data)
	defer func() {
		_ = up.Process.Kill()
	}()
	vip := regexp.MustCompile(`the ccm gave it VIP (\S+);`).FindStringSubmatch(out.String())
	if vip == nil {
		t.Fatalf("no VIP in the output:\n%s", out.String())
	}

	table, err := exec.Command(bin, "status", "--data-dir", data).CombinedOutput()
	t.Logf("portside status:\n%s", table)
	if err != nil {
		t.Fatalf("portside status: %v", err)
	}
	for _, re := range []string{
		`node-1\s+zone-a\s+127\.\S+\s+local://i-\S+\s+10\.244\.\d+\.0/24\s+routed\s+yes`,
		`node-2\s+zone-b\s+127\.\S+\s+local://i-\S+\s+10\.244\.\d+\.0/24\s+routed\s+yes`,
		`node-3\s+zone-a\s+127\.\S+\s+local://i-\S+\s+10\.244\.\d+\.0/24\s+routed\s+yes`,
		`demo/hello\s+` + regexp.QuoteMeta(vip[1]) + `\s+8080/TCP\s+active\s+3/3 healthy`,
		`proxy-server-1\s+server\s+cluster egress\s+\S+\s+yes`,
		`agent-zone-a\s+agent\s+zone-a \(2 nodes\)\s+127\.0\.0\.1:\d+\s+yes`,
		`agent-zone-b\s+agent\s+zone-b \(1 node\)\s+127\.0\.0\.1:\d+\s+yes`,
	} {
		if !regexp.MustCompile(re).Match(table) {
			t.Errorf("status lacks %s", re)
		}
	}
	var rep devenv.Report
	js, err := exec.Command(bin, "status", "--data-dir", data, "-o", "json").Output()
	if err != nil || json.Unmarshal(js, &rep) != nil {
		t.Fatalf("portside status -o json: %v\n%s", err, js)
	}
	if len(rep.Nodes) != 3 || len(rep.LoadBalancers) != 1 || len(rep.LoadBalancers[0].Backends) != 3 || !rep.LoadBalancers[0].Backends[0].Healthy {
		t.Errorf("status -o json = %s", js)
	}

	registryServesKubelets(t, out, data)
	deleteNamespaceWithLoadBalancers(t, bin, data)
	deploymentPodsRun(t, bin, data)
	ccmKilledIsRestarted(t, out, data)
	cloudKilledIsRestarted(t, out, vip[1])
	// The restarted cloud serves its registry on the same address, with
	// the images pushed before.
	registryServesKubelets(t, out, data)

	// A second `up` on the same data directory is refused with a clear message.
	second, _ := exec.Command(bin, "up", "--node-mode=simulated", "--once", "--data-dir", data).CombinedOutput()
	if !strings.Contains(string(second), "already running") || !strings.Contains(string(second), "portside down") {
		t.Errorf("second up: %s", second)
	}
	downOut, err := exec.Command(bin, "down", "--data-dir", data).CombinedOutput()
	if err != nil {
		t.Fatalf("portside down: %v\n%s", err, downOut)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("portside up exit: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("portside up did not exit after portside down")
	}
	if !strings.Contains(out.String(), "state kept in") {
		t.Errorf("up output lacks the state message:\n%s", out.String())
	}
	testenv.AssertNoProcessesUsing(t, data)
	if _, err := os.Stat(filepath.Join(data, "controlplane", "etcd")); err != nil {
		t.Errorf("state not kept: %v", err)
	}

	// Again with the kept state and fewer nodes: the machines, Nodes and the
	// load balancer's VIP are reused, the surplus node is removed.
	rerun := exec.Command(bin, "up", "--node-mode=simulated", "--once", "--nodes", "2", "--data-dir", data)
	rerun.Dir = root
	again, err := rerun.CombinedOutput()
	t.Logf("portside up --once --nodes 2 (state kept):\n%s", again)
	if err != nil {
		t.Fatalf("rerun: %v", err)
	}
	for _, want := range []string{"removed 1 surplus nodes", "(0 new, 2 from an earlier run)", "2/2 initialized", "the ccm gave it VIP " + vip[1] + ";", "200 OK from node-",
		"got topology.kubernetes.io/zone=zone-a__zone-b"} {
		if !strings.Contains(string(again), want) {
			t.Errorf("rerun output lacks %q", want)
		}
	}
	testenv.AssertNoProcessesUsing(t, data)
}

// TestUpFailingPartStopsEverything: when a part fails to start, what was
// started before it is stopped, and the error names the part and the cause.
func TestUpFailingPartStopsEverything(t *testing.T) {
	bin, root := testenv.BuildPortside(t)

	// The local cloud fails after the control plane is up: an empty token
	// file is a damaged state it refuses to serve with.
	data := filepath.Join(t.TempDir(), "up")
	if err := os.MkdirAll(filepath.Join(data, "cloud"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "cloud", "token"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory of an earlier `portside up` (its marker), whose cloud
	// state was then damaged.
	if err := os.WriteFile(filepath.Join(data, ".portside-up"), []byte("format 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "up", "--node-mode=simulated", "--once", "--data-dir", data)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	t.Logf("portside up with a damaged cloud state:\n%s", out)
	if err == nil {
		t.Fatal("portside up succeeded with an empty cloud token file")
	}
	for _, want := range []string{
		"Kubernetes v1.37.2 ready", "local cloud did not start; stopping everything started so far",
		"stopping local cloud (pid", "stopping kube-apiserver (pid",
		"portside: error: local cloud: exited during start-up", "is empty",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	testenv.AssertNoProcessesUsing(t, data)

	// No control-plane binaries: the first part fails, naming `make tools`.
	data = filepath.Join(t.TempDir(), "up")
	cmd = exec.Command(bin, "up", "--node-mode=simulated", "--once", "--data-dir", data)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), tools.EnvBinDir+"="+t.TempDir())
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "portside: error: control plane: etcd not found") || !strings.Contains(string(out), "make tools") {
		t.Errorf("up without tools: %v\n%s", err, out)
	}
	testenv.AssertNoProcessesUsing(t, data)
}

// deleteNamespaceWithLoadBalancers: on a running `up`, a namespace with 5
// LoadBalancer Services is deleted: kube-controller-manager's namespace
// controller deletes the Services, the CCM deletes their load balancers and
// releases them, and the namespace is gone, all within 30 s.
func deleteNamespaceWithLoadBalancers(t *testing.T, bin, data string) {
	t.Helper()
	ctx := context.Background()
	client := upClient(t, data)
	const ns = "ns-deletion"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("lb-%d", i)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
		if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	inNamespace := func() (int, error) {
		js, err := exec.Command(bin, "status", "--data-dir", data, "-o", "json").Output()
		if err != nil {
			return 0, err
		}
		var rep devenv.Report
		if err := json.Unmarshal(js, &rep); err != nil {
			return 0, err
		}
		n := 0
		for _, lb := range rep.LoadBalancers {
			if strings.HasPrefix(lb.Service, ns+"/") {
				n++
			}
		}
		return n, nil
	}
	waitUntil(t, 30*time.Second, "5 load balancers in the cloud", func() bool { n, err := inNamespace(); return err == nil && n == 5 })
	began := time.Now()
	if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the namespace gone", func() bool {
		_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if n, err := inNamespace(); err != nil || n != 0 {
		t.Fatalf("after the namespace is gone, the cloud still has %d of its load balancers (%v)", n, err)
	}
	t.Logf("namespace with 5 LoadBalancer Services deleted, load balancers included, in %v", time.Since(began).Round(100*time.Millisecond))
}

func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ccmKilledIsRestarted: `kill -9` of the CCM → `up` restarts it (and says
// so), and a LoadBalancer Service created meanwhile gets its VIP.
func ccmKilledIsRestarted(t *testing.T, out *syncBuffer, data string) {
	t.Helper()
	m := regexp.MustCompile(`ccm\s+ready, all controllers running \(pid (\d+);`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no ccm pid in the output:\n%s", out.String())
	}
	var pid int
	if _, err := fmt.Sscan(m[1], &pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	ctx := context.Background()
	client := upClient(t, data)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "after-crash"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the ccm restarted", func() bool {
		return regexp.MustCompile(`ccm\s+ccm restarted \(pid \d+\)`).MatchString(out.String())
	})
	waitUntil(t, 30*time.Second, "a VIP for the Service created while the ccm was down", func() bool {
		s, err := client.CoreV1().Services("default").Get(ctx, "after-crash", metav1.GetOptions{})
		return err == nil && len(s.Status.LoadBalancer.Ingress) > 0
	})
	if !strings.Contains(out.String(), fmt.Sprintf("ccm pid %d exited on its own", pid)) {
		t.Errorf("up did not say why it restarted the ccm:\n%s", out.String())
	}
	_ = client.CoreV1().Services("default").Delete(ctx, "after-crash", metav1.DeleteOptions{})
}

// cloudKilledIsRestarted: `kill -9` of the local cloud → `up` restarts it
// on the same address, and the demo's VIP serves again (the cloud restores
// its load balancers from its state).
func cloudKilledIsRestarted(t *testing.T, out *syncBuffer, vip string) {
	t.Helper()
	m := regexp.MustCompile(`local cloud\s+serving at \S+ \(pid (\d+);`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no local cloud pid in the output:\n%s", out.String())
	}
	var pid int
	if _, err := fmt.Sscan(m[1], &pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	waitUntil(t, 30*time.Second, "the local cloud restarted", func() bool {
		return regexp.MustCompile(`local cloud\s+local cloud restarted \(pid \d+\)`).MatchString(out.String())
	})
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	waitUntil(t, 30*time.Second, "the demo VIP answering after the cloud's restart", func() bool {
		resp, err := hc.Get("http://" + net.JoinHostPort(vip, "8080") + "/")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK && resp.Header.Get("X-Pod") != ""
	})
}

// upClient is an admin client of a running `up`'s cluster.
func upClient(t testing.TB, data string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(data, "controlplane", "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// TestUpCCMReplicas: `up --ccm-replicas 2` runs two CCMs that elect a
// leader; `portside status` names it; after `kill -9` of the leader another
// process leads within the lease duration + 5 s, and the dead one is
// restarted. The bound is the lease duration, plus the follower's retry
// period with its jitter (1.2 s), plus slack for a loaded 2-core machine
// running other test packages at the same time.
func TestUpCCMReplicas(t *testing.T) {
	bin, root := testenv.BuildPortside(t)
	data := filepath.Join(t.TempDir(), "up")
	up, out, done := testenv.StartUp(t, bin, root, "--ccm-replicas", "2", "--nodes", "2", "--purge", "--data-dir", data)
	defer testenv.StopUp(t, bin, data, up, done)
	leader := func() string {
		js, err := exec.Command(bin, "status", "--data-dir", data, "-o", "json").Output()
		var rep devenv.Report
		if err != nil || json.Unmarshal(js, &rep) != nil {
			return ""
		}
		return rep.CCMLeader
	}
	var first string
	waitUntil(t, 30*time.Second, "a CCM leader in portside status", func() bool { first = leader(); return first != "" })
	m := regexp.MustCompile(regexp.QuoteMeta(first) + ` ready \(pid (\d+);`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no pid for leader %s in the output:\n%s", first, out.String())
	}
	var pid int
	if _, err := fmt.Sscan(m[1], &pid); err != nil {
		t.Fatal(err)
	}
	identity := func() string {
		l, err := upClient(t, data).CoordinationV1().Leases("kube-system").Get(context.Background(), "cloud-controller-manager", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	killed := identity()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	waitUntil(t, devenv.CCMLeaseDuration+5*time.Second, "another CCM process to lead", func() bool {
		id := identity()
		return id != "" && id != killed
	})
	t.Logf("leader %s (%s) killed; %s (%s) leads after %v", first, killed, leader(), identity(), time.Since(began).Round(100*time.Millisecond))
	waitUntil(t, 30*time.Second, "the killed CCM restarted", func() bool {
		return strings.Contains(out.String(), fmt.Sprintf("%s restarted (pid", first))
	})

	// etcd dying is not repaired: `up` stops everything and says why.
	m = regexp.MustCompile(`etcd pid (\d+)\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no etcd pid in the output:\n%s", out.String())
	}
	if _, err := fmt.Sscan(m[1], &pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("up exited 0 after etcd died")
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("up still running 30 s after etcd died:\n%s", out.String())
	}
	for _, want := range []string{fmt.Sprintf("etcd (pid %d) exited", pid), "the control plane is not restarted", "stopping ccm-1 (pid", "stopping local cloud (pid"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// deploymentPodsRun: on a running `up`, kube-scheduler places a
// Deployment's 3 pods on the simulated nodes, which run them (Running and
// Ready, with an IP of their node's pod CIDR), so the Service's
// EndpointSlice has 3 ready endpoints; the Service is a LoadBalancer with
// externalTrafficPolicy Local, so the load balancer's healthy backends are
// exactly the nodes with its pods (the kube-proxy stand-ins answer the
// health-check node port from EndpointSlices). Scaled to 1, the other
// pods are deleted for good and the healthy backends follow.
func deploymentPodsRun(t *testing.T, bin, data string) {
	t.Helper()
	ctx := context.Background()
	client := upClient(t, data)
	labels := map[string]string{"app": "web"}
	replicas := int32(3)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.com/web:1"}}}}}}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Selector: labels, Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = client.AppsV1().Deployments("default").Delete(context.Background(), "web", metav1.DeleteOptions{})
		_ = client.CoreV1().Services("default").Delete(context.Background(), "web", metav1.DeleteOptions{})
	}()
	running := func() []corev1.Pod {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return nil
		}
		var out []corev1.Pod
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
		return out
	}
	waitUntil(t, 60*time.Second, "3 pods running", func() bool { return len(running()) == 3 })
	ips := map[string]string{}
	for _, p := range running() {
		if other, dup := ips[p.Status.PodIP]; dup {
			t.Errorf("pods %s and %s share IP %s", other, p.Name, p.Status.PodIP)
		}
		ips[p.Status.PodIP] = p.Name
		n, err := client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil || !cidr.Contains(netip.MustParseAddr(p.Status.PodIP)) {
			t.Errorf("pod %s on %s has IP %s, outside the node's pod CIDR %q", p.Name, n.Name, p.Status.PodIP, n.Spec.PodCIDR)
		}
	}
	readyEndpoints := func() int {
		list, err := client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
		if err != nil {
			return -1
		}
		n := 0
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					n++
				}
			}
		}
		return n
	}
	waitUntil(t, 30*time.Second, "3 ready endpoints in the Service's EndpointSlice", func() bool { return readyEndpoints() == 3 })
	backendsFollowPods(t, bin, data, running)
	patch := []byte(`{"spec":{"replicas":1}}`)
	if _, err := client.AppsV1().Deployments("default").Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "scaled to 1: the other pods gone", func() bool {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		return err == nil && len(list.Items) == 1
	})
	waitUntil(t, 30*time.Second, "1 ready endpoint", func() bool { return readyEndpoints() == 1 })
	backendsFollowPods(t, bin, data, running)
}

// backendsFollowPods waits until the healthy backends of default/web's load
// balancer, as `portside status` shows them, are the nodes of its pods.
func backendsFollowPods(t *testing.T, bin, data string, running func() []corev1.Pod) {
	t.Helper()
	var last string
	healthy := func() []string {
		nodes, _ := healthyBackendNames(bin, data, "default/web")
		return nodes
	}
	withPods := func() []string {
		var nodes []string
		for _, p := range running() {
			if !slices.Contains(nodes, p.Spec.NodeName) {
				nodes = append(nodes, p.Spec.NodeName)
			}
		}
		slices.Sort(nodes)
		return nodes
	}
	waitUntil(t, 30*time.Second, "healthy backends = nodes with pods", func() bool {
		h, w := healthy(), withPods()
		last = fmt.Sprintf("healthy %v, nodes with pods %v", h, w)
		return len(w) > 0 && slices.Equal(h, w)
	})
	t.Logf("load balancer of default/web: %s", last)
}

// healthyBackendNames are the backends of service's load balancer that the
// data plane has checked and found healthy, from `portside status`.
func healthyBackendNames(bin, data, service string) ([]string, bool) {
	js, err := exec.Command(bin, "status", "--data-dir", data, "-o", "json").Output()
	var rep devenv.Report
	if err != nil || json.Unmarshal(js, &rep) != nil {
		return nil, false
	}
	var nodes []string
	for _, lb := range rep.LoadBalancers {
		if lb.Service != service {
			continue
		}
		for _, b := range lb.Backends {
			if b.Healthy && !b.LastChecked.IsZero() {
				nodes = append(nodes, b.Name)
			}
		}
	}
	slices.Sort(nodes)
	return nodes, true
}

func healthyBackendsOf(bin, data, service string) (int, bool) {
	nodes, ok := healthyBackendNames(bin, data, service)
	return len(nodes), ok
}
