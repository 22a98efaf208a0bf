package realnode_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/internal/testbin"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
)

// TestUpClusterDNS runs `portside up --node-mode=real` (the harness of
// this package starts no CoreDNS: cluster DNS is up's) and shows, from a
// real pod's own resolver (its resolv.conf, the kubelet's clusterDNS):
// kubernetes.default.svc.cluster.local and a Service's name (full and by
// the search path) resolve to their ClusterIPs, a headless Service's name
// to its pods' IPs (each of them, as loadbalance shuffles the answers), a
// missing Service to NXDOMAIN, and a name outside the cluster is refused,
// not sent anywhere.
func TestUpClusterDNS(t *testing.T) {
	_, out, client := upRealNodes(t, 2)
	m := regexp.MustCompile(`cluster DNS +ready in \S+: 2/2 CoreDNS pods \(` + regexp.QuoteMeta(nodeimages.CoreDNSImage) + `\) ready behind Service kube-system/kube-dns (\S+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("up printed no cluster DNS ready line:\n%s", out)
	}
	ctx := context.Background()
	dnsSvc, err := client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dnsSvc.Spec.ClusterIP != m[1] {
		t.Errorf("kube-dns ClusterIP %s, up said %s", dnsSvc.Spec.ClusterIP, m[1])
	}

	ns := dnsNamespace(t, client)
	pods := make([]*corev1.Pod, 2)
	for i := range pods {
		pods[i] = netexecPod(t, client, ns, fmt.Sprintf("peer-%d", i))
	}
	for i, p := range pods {
		pods[i] = waitPodReady(t, client, p)
	}
	web := dnsTestService(t, client, ns, "web", "")
	dnsTestService(t, client, ns, "peers", corev1.ClusterIPNone)
	kube, err := client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	from := pods[0]
	if got := resolveIn(t, from, "kubernetes.default.svc.cluster.local"); got != kube.Spec.ClusterIP {
		t.Errorf("kubernetes.default.svc.cluster.local resolved to %q in pod %s, want the ClusterIP %s", got, from.Name, kube.Spec.ClusterIP)
	}
	for _, name := range []string{"web." + ns + ".svc.cluster.local", "web"} {
		if got := resolveIn(t, from, name); got != web.Spec.ClusterIP {
			t.Errorf("%s resolved to %q in pod %s, want the ClusterIP %s", name, got, from.Name, web.Spec.ClusterIP)
		}
	}
	podIPs := []string{pods[0].Status.PodIP, pods[1].Status.PodIP}
	// A headless name has records once the EndpointSlice controller has
	// listed the pods and CoreDNS has seen the slice: NXDOMAIN until then.
	testenv.Eventually(t, time.Minute, "the headless Service's name to resolve", func() (bool, string) {
		code, body := dialFrom(t, from, "peers."+ns+".svc.cluster.local")
		return code == http.StatusOK, body
	})
	seen := map[string]bool{}
	for i := 0; i < 30 && len(seen) < len(podIPs); i++ {
		got := resolveIn(t, from, "peers."+ns+".svc.cluster.local")
		if !slices.Contains(podIPs, got) {
			t.Fatalf("the headless peers.%s.svc.cluster.local resolved to %q, want one of its pods' IPs %v", ns, got, podIPs)
		}
		seen[got] = true
	}
	if len(seen) != len(podIPs) {
		t.Errorf("the headless Service's name resolved only to %v of its pods' IPs %v", seen, podIPs)
	}
	if got := lookupError(t, from, "nope."+ns+".svc.cluster.local"); !strings.Contains(got, "no such host") {
		t.Errorf("a missing Service: %q, want no such host (NXDOMAIN)", got)
	}
	// REFUSED ("server misbehaving" to Go's resolver): CoreDNS answers only
	// the cluster's zones and forwards nothing off the machine.
	if got := lookupError(t, from, "example.com"); !strings.Contains(got, "server misbehaving") {
		t.Errorf("a name outside the cluster: %q, want it refused (server misbehaving)", got)
	}

	inClusterClientWorks(t, client, ns)
}

// inClusterClientWorks runs what rest.InClusterConfig does in a pod: the
// kubernetes Service's ClusterIP and port from the environment, TLS
// verified with the ServiceAccount's CA; the pod's output must be
// kube-apiserver's version.
func inClusterClientWorks(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "in-cluster"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "curl", Image: nodeimages.AgnhostImage,
			// As net.JoinHostPort: an IPv6-only cluster's host in brackets.
			Command: []string{"/bin/sh", "-c", `h=$KUBERNETES_SERVICE_HOST; case $h in *:*) h="[$h]";; esac; ` +
				`curl -sS --max-time 20 --cacert /var/run/secrets/kubernetes.io/serviceaccount/ca.crt ` +
				`-H "Authorization: Bearer $(cat /var/run/secrets/kubernetes.io/serviceaccount/token)" ` +
				`https://$h:$KUBERNETES_SERVICE_PORT/version`}}}}}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	testenv.Eventually(t, 3*time.Minute, "the in-cluster client pod to finish", func() (bool, string) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, string(phase)
	})
	logs, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if phase != corev1.PodSucceeded || !strings.Contains(string(logs), `"gitVersion": "v1.37`) {
		t.Errorf("a pod's in-cluster request to kube-apiserver by the kubernetes Service: %s, output %q", phase, logs)
	}
}

// runUp starts `portside up` and returns its output once it is ready.
// upRealNodes runs `portside up --node-mode=real` with n nodes until it is
// ready (down at cleanup) and returns its data directory, its output and a
// client of its cluster.
func upRealNodes(t *testing.T, n int, extra ...string) (string, string, *kubernetes.Clientset) {
	t.Helper()
	vpctest.RequireRoot(t)
	needBinaries(t)
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := testbin.Portside(t)
	data := filepath.Join(t.TempDir(), "up")
	t.Cleanup(func() {
		if out, err := exec.Command(bin, "down", "--data-dir", data).CombinedOutput(); err != nil {
			t.Errorf("portside down: %v\n%s", err, out)
		}
	})
	out := runUp(t, bin, root, append([]string{"--node-mode=real", fmt.Sprintf("--nodes=%d", n), "--data-dir", data}, extra...)...)
	kc := regexp.MustCompile(`export KUBECONFIG=(\S+)`).FindStringSubmatch(out)
	if kc == nil {
		t.Fatalf("up printed no kubeconfig:\n%s", out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc[1])
	if err != nil {
		t.Fatal(err)
	}
	return data, out, kubernetes.NewForConfigOrDie(cfg)
}

// runUp runs up until ready and stops it (SIGTERM: up removes what it
// started) when t ends.
func runUp(t *testing.T, bin, root string, args ...string) string {
	t.Helper()
	// Registered before the start, so it runs (last) even when StartUpWithin fails.
	var up *exec.Cmd
	var done <-chan error
	t.Cleanup(func() {
		if up == nil {
			return
		}
		_ = up.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(3 * time.Minute):
			_ = up.Process.Kill()
			<-done
		}
	})
	up, out, done := testenv.StartUpWithin(t, 8*time.Minute, bin, root, args...)
	t.Logf("portside up:\n%s", out.String())
	return out.String()
}

func dnsNamespace(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	var b [3]byte
	_, _ = rand.Read(b[:])
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dns-" + hex.EncodeToString(b[:])}}
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func netexecPod(t *testing.T, client kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "peer"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "netexec", Image: nodeimages.AgnhostImage,
			Args: []string{"netexec", "--http-port=8080"}, Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}},
	}
	p, err := client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func waitPodReady(t *testing.T, client kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got := p
	testenv.Eventually(t, 2*time.Minute, "pod "+p.Name+" ready", func() (bool, string) {
		cur, err := client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = cur
		for _, c := range cur.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("phase %s, conditions %v", cur.Status.Phase, cur.Status.Conditions)
	})
	return got
}

// dnsTestService selects the peer pods; clusterIP "" allocates one.
func dnsTestService(t *testing.T, client kubernetes.Interface, ns, name, clusterIP string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Selector: map[string]string{"app": "peer"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
	svc, err := client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// dialAddr finds the address netexec dialed in its error (the request
// goes to port 9, where nothing listens: "Get "http://<ip>:9/…").
var dialAddr = regexp.MustCompile(`"http://([0-9.]+):9/hostname"`)

// resolveIn has the pod's netexec resolve name (its /dial resolves with the
// pod's resolver, then dials: port 9, so the error names the address) and
// returns the address it resolved to ("" and the reply if none).
func resolveIn(t *testing.T, p *corev1.Pod, name string) string {
	t.Helper()
	code, body := dialFrom(t, p, name)
	if code != http.StatusOK {
		t.Errorf("pod %s could not resolve %s: %d %s", p.Name, name, code, body)
		return ""
	}
	var r struct{ Errors []string }
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Errors) != 1 {
		t.Errorf("pod %s: /dial %s: %s (%v)", p.Name, name, body, err)
		return ""
	}
	m := dialAddr.FindStringSubmatch(r.Errors[0])
	if m == nil {
		t.Errorf("pod %s: /dial %s: no address in %q", p.Name, name, r.Errors[0])
		return ""
	}
	return m[1]
}

// lookupError is netexec's answer when name does not resolve.
func lookupError(t *testing.T, p *corev1.Pod, name string) string {
	t.Helper()
	code, body := dialFrom(t, p, name)
	if code != http.StatusBadRequest {
		t.Errorf("pod %s resolved %s: %d %s", p.Name, name, code, body)
	}
	return body
}

// dialFrom asks the pod's netexec, from the host (through the VPC's route
// to its node's pod CIDR), to dial name.
func dialFrom(t *testing.T, p *corev1.Pod, name string) (int, string) {
	t.Helper()
	q := url.Values{"host": {name}, "port": {"9"}, "request": {"hostname"}, "protocol": {"http"}, "tries": {"1"}}
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Get("http://" + p.Status.PodIP + ":8080/dial?" + q.Encode())
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}
