package realnode_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/deploy"
	"github.com/portside-io/portside/internal/devenv"
	"github.com/portside-io/portside/internal/helmrelease"
	"github.com/portside-io/portside/internal/image"
	"github.com/portside-io/portside/internal/testbin"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// TestUpInstallChart: `up --install=chart` runs the CCM as the chart's
// pods on real nodes (image pushed to the cloud's registry, pulled by the
// kubelets), which initialize the nodes and serve the demo's load
// balancer; then, while a client sends requests through the VIP without
// pause, `helm upgrade` to a newly built image (another version stamp)
// rolls both replicas and `helm rollback` rolls them back: no request
// fails, no cloud load balancer is lost or duplicated, a Service created
// during the roll gets its ingress; `helm uninstall` leaves the cloud's
// load balancers serving, and a new install adopts them unchanged.
func TestUpInstallChart(t *testing.T) {
	data, out, kube := upRealNodes(t, 2, "--install=chart")
	ctx := context.Background()
	for _, want := range []string{"installing the Helm chart deploy/helm/portside as release kube-system/portside", "release portside revision 1 deployed"} {
		if !strings.Contains(out, want) {
			t.Fatalf("up did not say %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "logs", "ccm.log")); err == nil {
		t.Errorf("a host-process CCM ran (logs/ccm.log exists) with --install=chart")
	}
	m := regexp.MustCompile(`registry\s+serving (\S+) with`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no registry line in up's output:\n%s", out)
	}
	registryHost := m[1]
	firstImage := ccmPodImages(t, kube, 2)
	if img := podImages(t, kube, agentSelector, 2); img != firstImage {
		t.Errorf("the network proxy agents run %s, not the CCM's image %s", img, firstImage)
	}
	if !strings.Contains(out, "the chart's agents serve all 2 nodes") {
		t.Errorf("up did not wait for the chart's agents:\n%s", out)
	}
	if !strings.HasPrefix(firstImage, registryHost+"/"+image.DefaultRepository+":") {
		t.Fatalf("the CCM pods run %s, not an image of the cloud's registry %s", firstImage, registryHost)
	}
	cloud := cloudClient(t, filepath.Join(data, "cloud"))
	kubeconfig := filepath.Join(data, "controlplane", "kubeconfig")
	hc, err := helmrelease.New(ctx, kubeconfig, devenv.ChartNamespace)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := helmrelease.LoadChart(deploy.Chart(), "")
	if err != nil {
		t.Fatal(err)
	}
	rel1, err := hc.Status(devenv.ChartRelease)
	if err != nil {
		t.Fatal(err)
	}
	vip := serviceVIP(t, kube, "demo", "hello")
	lbsBefore := cloudLBs(t, cloud)

	// A newly built image: this checkout's portside with another version.
	newVersion := fmt.Sprintf("v0.0.0-upgrade.%d", time.Now().Unix())
	newRef := pushBuiltImage(t, cloud, registryHost, newVersion)
	newTag := newRef[strings.LastIndex(newRef, ":")+1:]

	// nodes is how many nodes the agents' DaemonSet covers; join names a
	// node that joins while the roll runs.
	nodes := 2
	roll := func(what string, do func() error, wantImage, join string) {
		t.Helper()
		traffic := startTraffic(vip + ":8080")
		leases := watchLeader(kube)
		began := time.Now()
		svcDone := make(chan time.Duration, 1)
		svc := "during-" + strings.Fields(what)[1]
		go func() { svcDone <- createLBService(t, kube, "demo", svc) }()
		var joined func() time.Duration
		if join != "" {
			joined = joinNode(t, out, join, kube, cloud, true)
			nodes++
		}
		if err := do(); err != nil {
			t.Fatalf("%s: %v\nwhat the roll left in %s:\n%s", what, err, devenv.ChartNamespace, chartState(kube, devenv.ChartNamespace))
		}
		took := time.Since(began)
		ingress := <-svcDone
		if joined != nil {
			t.Logf("%s: node %s joined during the roll: Ready, initialized, a backend of every load balancer and served by an agent %v after its create",
				what, join, joined().Round(100*time.Millisecond))
		}
		// helm's --wait ends when the new pods are ready; the old leader
		// may still be shutting down. Traffic and the Lease are watched
		// until only new pods are left and one of them leads.
		if img := ccmPodImages(t, kube, 2); img != wantImage {
			t.Errorf("after %s the CCM pods run %s, want %s", what, img, wantImage)
		}
		waitLeaderRenewing(t, kube)
		// The network proxy's agents (the chart's DaemonSet) rolled too,
		// and kube-apiserver reaches the kubelets through the new ones.
		if img := podImages(t, kube, agentSelector, nodes); img != wantImage {
			t.Errorf("after %s the network proxy agents run %s, want %s", what, img, wantImage)
		}
		checkLogsThroughAgents(t, kube)
		ok, failed := traffic.stop()
		handover := leases.stop()
		t.Logf("%s: %v; %d requests through %s, %d failed; leader hand-overs %v; Service %s got its ingress in %v",
			what, took.Round(100*time.Millisecond), ok, vip, len(failed), handover, svc, ingress.Round(100*time.Millisecond))
		if len(failed) > 0 {
			t.Errorf("%s: %d of %d requests through the VIP failed, e.g. %v", what, len(failed), ok+len(failed), failed[:min(3, len(failed))])
		}
		if ok < 20 {
			t.Errorf("%s: only %d requests answered: the traffic did not run through the roll", what, ok)
		}
		checkOneLBPerService(t, kube, cloud)
	}
	roll("helm upgrade to "+newTag, func() error {
		_, err := hc.Upgrade(ctx, devenv.ChartRelease, ch, map[string]any{"image": map[string]any{"tag": newTag}}, true, 4*time.Minute)
		return err
	}, newRef, "joined-1")
	roll("helm rollback to revision 1", func() error { return hc.Rollback(devenv.ChartRelease, 1, 4*time.Minute) }, firstImage, "")

	// Uninstall: the cloud's load balancers stay (as upstream's), serving.
	lbsInstalled := cloudLBs(t, cloud)
	if err := hc.Uninstall(devenv.ChartRelease, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	// The Deployment is gone at once; its pods go with the garbage collector.
	testenv.Eventually(t, time.Minute, "the CCM pods gone after helm uninstall", func() (bool, string) {
		var names []string
		for _, p := range ccmPods(t, kube) {
			names = append(names, p.Name)
		}
		return len(names) == 0, fmt.Sprint(names)
	})
	if got := cloudLBs(t, cloud); !sameLBs(got, lbsInstalled) {
		t.Errorf("helm uninstall changed the cloud's load balancers:\n got %v\nwant %v", got, lbsInstalled)
	}
	if _, err := getFresh("http://" + vip + ":8080/hostname"); err != nil {
		t.Errorf("the VIP stopped answering after helm uninstall: %v", err)
	}
	// A new install adopts them: same names, VIPs and creation times.
	if _, err := hc.Install(ctx, devenv.ChartRelease, ch, rel1.Config, 4*time.Minute); err != nil {
		t.Fatal(err)
	}
	svc := createLBService(t, kube, "demo", "after-reinstall")
	t.Logf("after the new install a new Service got its ingress in %v", svc.Round(100*time.Millisecond))
	after := cloudLBs(t, cloud)
	for n, lb := range lbsInstalled {
		if a, ok := after[n]; !ok || a != lb {
			t.Errorf("load balancer %s (%s) not adopted unchanged by the new install: now %q", n, lb, a)
		}
	}
	if len(lbsBefore) == 0 {
		t.Errorf("no cloud load balancer before the upgrade: the demo's Service was not served")
	}
	checkOneLBPerService(t, kube, cloud)

	// Portside's conformance suite against the reinstalled CCM: its node,
	// route, volume, network-proxy and core load-balancer tests (the full
	// suite's run is in docs/conformance.md).
	conf := exec.Command(testbin.Portside(t), "conformance", "--kubeconfig", kubeconfig, "--cloud-provider=local",
		"--cloud-config", filepath.Join(data, "ccm", "cloud.yaml"), "--cloud-data-dir", filepath.Join(data, "cloud"), "--max-wait=60s",
		"--focus", `^(nodes/|routes/|volumes/|network-proxy/|load-balancers/(ingress-and-traffic|udp|etp-local|deletion)$)`)
	report, err := conf.CombinedOutput()
	t.Logf("portside conformance against the installed CCM:\n%s", report)
	if err != nil {
		t.Errorf("portside conformance against the installed CCM failed: %v", err)
	}
	if m := regexp.MustCompile(`(\d+) passed, (\d+) failed`).FindStringSubmatch(string(report)); m == nil || m[1] == "0" || m[2] != "0" {
		t.Errorf("portside conformance summary %q, want passes and no failure", m)
	}
}

const (
	ccmSelector   = "app.kubernetes.io/name=portside-ccm"
	agentSelector = "k8s-app=konnectivity-agent"
)

func ccmPods(t *testing.T, kube kubernetes.Interface) []corev1.Pod {
	return podsOf(t, kube, ccmSelector)
}

func podsOf(t *testing.T, kube kubernetes.Interface, selector string) []corev1.Pod {
	t.Helper()
	list, err := kube.CoreV1().Pods(devenv.ChartNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// ccmPodImages waits until exactly n CCM pods run, ready, all one image,
// and returns it.
func ccmPodImages(t *testing.T, kube kubernetes.Interface, n int) string {
	return podImages(t, kube, ccmSelector, n)
}

// podImages waits until exactly n pods of selector run, ready, all one
// image, and returns it.
func podImages(t *testing.T, kube kubernetes.Interface, selector string, n int) string {
	t.Helper()
	var img string
	testenv.Eventually(t, 3*time.Minute, fmt.Sprintf("%d ready pods %s of one image", n, selector), func() (bool, string) {
		pods := podsOf(t, kube, selector)
		var states []string
		images := map[string]bool{}
		ready := 0
		for _, p := range pods {
			images[p.Spec.Containers[0].Image] = true
			img = p.Spec.Containers[0].Image
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready++
				}
			}
			states = append(states, fmt.Sprintf("%s on %s %s", p.Name, p.Spec.NodeName, p.Status.Phase))
		}
		return len(pods) == n && ready == n && len(images) == 1, fmt.Sprintf("%v, images %v", states, images)
	})
	return img
}

// checkLogsThroughAgents reads a log of a demo pod on each node through
// kube-apiserver (its cluster egress: the network proxy's agents).
func checkLogsThroughAgents(t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	pods, err := kube.CoreV1().Pods("demo").List(context.Background(), metav1.ListOptions{LabelSelector: "app=hello"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range pods.Items {
		if seen[p.Spec.NodeName] || p.Status.Phase != corev1.PodRunning {
			continue
		}
		seen[p.Spec.NodeName] = true
		testenv.Eventually(t, time.Minute, "the log of "+p.Name+" on "+p.Spec.NodeName+" through the network proxy", func() (bool, string) {
			_, err := kube.CoreV1().Pods("demo").GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptrTo[int64](1)}).DoRaw(context.Background())
			return err == nil, fmt.Sprint(err)
		})
	}
	if len(seen) == 0 {
		t.Errorf("no running demo pod to read a log of")
	}
}

func ptrTo[T any](v T) *T { return &v }

func serviceVIP(t *testing.T, kube kubernetes.Interface, ns, name string) string {
	t.Helper()
	svc, err := kube.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || len(svc.Status.LoadBalancer.Ingress) == 0 {
		t.Fatalf("Service %s/%s has no ingress: %v", ns, name, err)
	}
	return svc.Status.LoadBalancer.Ingress[0].IP
}

// createLBService creates a LoadBalancer Service for the demo's pods and
// returns how long it took to get its ingress.
func createLBService(t *testing.T, kube kubernetes.Interface, ns, name string) time.Duration {
	ctx := context.Background()
	began := time.Now()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "hello"},
			Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
	if _, err := kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Errorf("create Service %s/%s: %v", ns, name, err)
		return 0
	}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		cur, err := kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && len(cur.Status.LoadBalancer.Ingress) > 0 {
			return time.Since(began)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("Service %s/%s got no ingress in 3 min", ns, name)
	return time.Since(began)
}

// cloudLBs maps each cloud load balancer's name to "VIP created-at".
func cloudLBs(t *testing.T, cloud *client.Client) map[string]string {
	t.Helper()
	lbs, err := cloud.ListLoadBalancers(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, lb := range lbs {
		out[lb.Name] = strings.Join(lb.VIPs, ",") + " " + lb.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	return out
}

func sameLBs(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkOneLBPerService: every LoadBalancer Service has exactly one cloud
// load balancer, with the VIP of its ingress, and there is no other.
func checkOneLBPerService(t *testing.T, kube kubernetes.Interface, cloud *client.Client) {
	t.Helper()
	lbs, err := cloud.ListLoadBalancers(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	svcs, err := kube.CoreV1().Services("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var vips []string
	for _, s := range svcs.Items {
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer && len(s.Status.LoadBalancer.Ingress) > 0 {
			vips = append(vips, s.Status.LoadBalancer.Ingress[0].IP)
		}
	}
	var cloudVIPs []string
	for _, lb := range lbs {
		cloudVIPs = append(cloudVIPs, lb.VIPs...)
	}
	slices.Sort(vips)
	slices.Sort(cloudVIPs)
	if !slices.Equal(vips, cloudVIPs) {
		t.Errorf("the cloud's load balancers' VIPs %v are not one per Service ingress %v", cloudVIPs, vips)
	}
}

// pushBuiltImage builds this checkout's portside, static, stamped with
// version, makes Portside's image of it and pushes it to the cloud's
// registry with a push credential, as `make image` with
// --local-cloud-data-dir does. It returns the reference.
func pushBuiltImage(t *testing.T, cloud *client.Client, registryHost, version string) string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "portside")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X github.com/portside-io/portside/internal/version.Version="+version, "-o", bin, "./cmd/portside")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	idx, err := image.Build(context.Background(), image.Options{Version: version, Commit: "test", Binaries: map[image.Platform]string{image.LinuxAMD64: bin}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(registryHost + "/" + image.DefaultRepository + ":" + image.Tag(version))
	if err != nil {
		t.Fatal(err)
	}
	cred, err := cloud.Credential(context.Background(), api.CredentialRequest{Image: ref.Context().Name(), Push: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := image.Push(context.Background(), idx, ref, &authn.Basic{Username: cred.Username, Password: cred.Password}); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}

// traffic sends GET /hostname to addr on a fresh connection every 20 ms.
type traffic struct {
	stopc  chan struct{}
	done   chan struct{}
	ok     atomic.Int64
	mu     sync.Mutex
	failed []string
}

func startTraffic(addr string) *traffic {
	tr := &traffic{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tr.stopc:
				return
			case <-tick.C:
			}
			if _, err := getFresh("http://" + addr + "/hostname"); err != nil {
				tr.mu.Lock()
				tr.failed = append(tr.failed, time.Now().Format("15:04:05.000")+" "+err.Error())
				tr.mu.Unlock()
				continue
			}
			tr.ok.Add(1)
		}
	}()
	return tr
}

func (tr *traffic) stop() (int, []string) {
	close(tr.stopc)
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return int(tr.ok.Load()), tr.failed
}

// leaderWatch records the CCM's Lease holder every 100 ms; a hand-over is
// the time from the last renewal seen by the old holder to the new
// holder's first.
type leaderWatch struct {
	stopc chan struct{}
	done  chan []time.Duration
}

func watchLeader(kube kubernetes.Interface) *leaderWatch {
	w := &leaderWatch{stopc: make(chan struct{}), done: make(chan []time.Duration, 1)}
	go func() {
		var out []time.Duration
		holder, lastRenew := "", time.Time{}
		for {
			select {
			case <-w.stopc:
				w.done <- out
				return
			case <-time.After(100 * time.Millisecond):
			}
			l, err := kube.CoordinationV1().Leases(devenv.ChartNamespace).Get(context.Background(), "cloud-controller-manager", metav1.GetOptions{})
			if err != nil || l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
				continue
			}
			h := *l.Spec.HolderIdentity
			if h == "" {
				continue // released: the next holder's acquisition ends the hand-over
			}
			if holder != "" && h != holder {
				acquired := l.Spec.RenewTime.Time
				if l.Spec.AcquireTime != nil {
					acquired = l.Spec.AcquireTime.Time
				}
				out = append(out, acquired.Sub(lastRenew).Round(10*time.Millisecond))
			}
			holder, lastRenew = h, l.Spec.RenewTime.Time
		}
	}()
	return w
}

// waitLeaderRenewing waits until the CCM's Lease has a holder that renewed
// it within the last 3 s.
func waitLeaderRenewing(t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "a CCM holding and renewing its Lease", func() (bool, string) {
		l, err := kube.CoordinationV1().Leases(devenv.ChartNamespace).Get(context.Background(), "cloud-controller-manager", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil {
			return false, fmt.Sprint("no holder: ", err)
		}
		age := time.Since(l.Spec.RenewTime.Time)
		return age < 3*time.Second, fmt.Sprintf("holder %s renewed %v ago", *l.Spec.HolderIdentity, age)
	})
}

func (w *leaderWatch) stop() []time.Duration {
	close(w.stopc)
	return <-w.done
}

// TestUpInstallManifests: `up --install=manifests` applies deploy/ccm's
// manifests with kubectl (the image, replicas, flags and the webhook's CA
// bundle edited as an operator would); the CCM's pods, from the cloud's
// registry, initialize the nodes and serve the demo, its load balancer
// and its volume's labels (up is ready only after all of them).
func TestUpInstallManifests(t *testing.T) {
	data, out, kube := upRealNodes(t, 2, "--install=manifests")
	for _, want := range []string{"kubectl apply -f " + filepath.Join(data, "manifests", "ccm"), "2 CCM pods ready on the nodes",
		"2/2 initialized by the ccm", "from the ccm's persistent-volume-label webhook"} {
		if !strings.Contains(out, want) {
			t.Errorf("up did not say %q:\n%s", want, out)
		}
	}
	m := regexp.MustCompile(`registry\s+serving (\S+) with`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no registry line in up's output:\n%s", out)
	}
	img := ccmPodImages(t, kube, 2)
	if !strings.HasPrefix(img, m[1]+"/"+image.DefaultRepository+":") {
		t.Errorf("the CCM pods run %s, not an image of the cloud's registry %s", img, m[1])
	}
	// deploy/network-proxy's agents, the same image: kube-apiserver reaches
	// the kubelets through them.
	if !strings.Contains(out, "deploy/network-proxy's agents serve all 2 nodes") {
		t.Errorf("up did not wait for deploy/network-proxy's agents:\n%s", out)
	}
	if got := podImages(t, kube, agentSelector, 2); got != img {
		t.Errorf("the network proxy agents run %s, not the CCM's image %s", got, img)
	}
	checkLogsThroughAgents(t, kube)
	// No Helm release: the plain manifests' objects only.
	secrets, err := kube.CoreV1().Secrets(devenv.ChartNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil || len(secrets.Items) != 0 {
		t.Errorf("Helm release Secrets with --install=manifests: %v %v", len(secrets.Items), err)
	}
	if _, err := os.Stat(filepath.Join(data, "logs", "ccm.log")); err == nil {
		t.Errorf("a host-process CCM ran (logs/ccm.log exists) with --install=manifests")
	}
}
