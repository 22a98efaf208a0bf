package realnode_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/deploy"
	"github.com/portside-io/portside/internal/devenv"
	"github.com/portside-io/portside/internal/helmrelease"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/migrate"
	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testbin"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
)

// TestLeaderMigrationToChart migrates a real-node cluster whose
// kube-controller-manager runs the cloud controllers (version N:
// test/kcmintree, upstream's controllers with the local provider in-tree,
// since no served Kubernetes has one) to the chart-installed CCM, following
// the plan `portside migrate check` prints, step by step, while a client
// sends requests through a LoadBalancer VIP without pause. `up
// --install=prepare` gives the cluster without a CCM and the chart's
// values. Checked at every moment: never two processes run one of route,
// service and cloud-node-lifecycle; at each step the one the plan names
// runs them; no request fails; the cloud's load balancers are adopted, none
// created twice or lost; a Service created at each step gets its ingress.
func TestLeaderMigrationToChart(t *testing.T) {
	data, out, kube := upRealNodes(t, 2, "--install="+devenv.InstallPrepare)
	ctx := context.Background()
	valuesFile := devenv.ChartValuesFile(data)
	for _, want := range []string{"no CCM runs (--install=prepare)", "install the chart with: helm install portside ", valuesFile} {
		if !strings.Contains(out, want) {
			t.Fatalf("up did not say %q:\n%s", want, out)
		}
	}
	var values map[string]any
	raw, err := os.ReadFile(valuesFile)
	if err == nil {
		err = yaml.Unmarshal(raw, &values)
	}
	if err != nil {
		t.Fatalf("the chart's values: %v", err)
	}
	clusterCIDR := ""
	for _, a := range values["extraArgs"].([]any) {
		if v, ok := strings.CutPrefix(a.(string), "--cluster-cidr="); ok {
			clusterCIDR = v
		}
	}
	kcmBin := buildKCMInTree(t)
	kubeconfig := filepath.Join(data, "controlplane", "kubeconfig")
	cloud := cloudClient(t, filepath.Join(data, "cloud"))
	dir := t.TempDir()
	files := filepath.Join(dir, "leader-migration")
	check := func() *migrate.Report { return testenv.MigrateCheck(t, testbin.Portside(t), kubeconfig, files) }
	holder := func(name string) string { return testenv.LeaseHolder(ctx, kube, name) }
	w := newRunnerWatch(t, kube)
	n := 0
	startN := func(extra ...string) (string, *proc.Process) {
		t.Helper()
		n++
		id := fmt.Sprintf("kcm-n-%d", n)
		p := testenv.StartProcess(t, id, kcmBin, append([]string{"--kubeconfig=" + kubeconfig, "--cloud-config=" + filepath.Join(data, "ccm", "cloud.yaml"),
			"--cluster-cidr=" + clusterCIDR, "--leader-elect-identity=" + id}, extra...), filepath.Join(dir, id+".log"), 20*time.Second)
		w.addHost(id, p)
		return id, p
	}
	// runsAll waits until who (a CCM pod: "ccm") alone runs the three
	// under lease.
	runsAll := func(step, who, lease string) {
		t.Helper()
		testenv.Eventually(t, 2*time.Minute, step+": "+who+" runs route, service and cloud-node-lifecycle under lease "+lease, func() (bool, string) {
			r := w.runners()
			var one string
			for _, c := range testenv.MigratedControllers {
				if len(r[c]) != 1 || (one != "" && r[c][0] != one) {
					return false, fmt.Sprint(r)
				}
				one = r[c][0]
			}
			name, l, _ := strings.Cut(one, "@")
			isCCM := strings.HasPrefix(name, "portside-")
			return l == lease && (name == who || (who == "ccm" && isCCM)), fmt.Sprint(r)
		})
	}
	// A CCM's identity is its node's hostname (hostNetwork) and a UUID.
	isCCM := func(id string) bool { return id != "" && !strings.HasPrefix(id, "kcm-n-") }
	var ingress []string
	newService := func(name string) {
		t.Helper()
		took := createLBService(t, kube, "demo", name)
		ingress = append(ingress, fmt.Sprintf("%s %v", name, took.Round(100*time.Millisecond)))
	}

	plan := check().LeaderMigrationPlan
	var traffic *traffic
	var lbsN map[string]string
	var nMigration *proc.Process
	hc, err := helmrelease.New(ctx, kubeconfig, devenv.ChartNamespace)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := helmrelease.LoadChart(deploy.Chart(), "")
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		title string
		do    func(t *testing.T, s migrate.PlanStep)
	}{
		{"Before you begin", func(t *testing.T, s migrate.PlanStep) {
			// Version N: kube-controller-manager with the in-tree provider.
			id, _ := startN()
			for _, nd := range listNodes(t, kube) {
				waitNodeObj(t, kube, nd, 4*time.Minute, "initialized by version N and Ready", func(n *corev1.Node) bool {
					return n.Spec.ProviderID != "" && nodeReady(n) && len(n.Spec.PodCIDRs) > 0 &&
						!slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "node.cloudprovider.kubernetes.io/uninitialized" })
				})
			}
			runsAll("before you begin", id, migrate.LeaseKCM)
			deployHello(t, kube)
			newService("hello")
			// The client starts once the new load balancer serves (its
			// health checks passed): what follows is the migration's.
			vip := serviceVIP(t, kube, "demo", "hello")
			testenv.Eventually(t, time.Minute, "the VIP "+vip+" to answer 10 requests in a row", func() (bool, string) {
				for i := range 10 {
					if _, err := getFresh("http://" + vip + ":8080/hostname"); err != nil {
						return false, fmt.Sprintf("request %d: %v", i+1, err)
					}
				}
				return true, ""
			})
			traffic = startTraffic(vip + ":8080")
			lbsN = cloudLBs(t, cloud)
		}},
		{"Grant access to the migration lease", func(t *testing.T, s migrate.PlanStep) {
			missing := map[string]bool{}
			for _, f := range check().Findings {
				for _, o := range f.Objects {
					if i := strings.Index(o, ": "); f.ID == "migration-lease-access" && i > 0 {
						missing[o[:i]] = true
					}
				}
			}
			t.Logf("missing before the grants: %v (the CCM's comes with the chart's RBAC)", missing)
			for _, a := range s.Actions {
				if cmd, ok := strings.CutPrefix(a, "kube-controller-manager: "); ok && strings.HasPrefix(cmd, "kubectl ") && missing[migrate.KCMUser] {
					binDir, err := tools.BinDir()
					if err != nil {
						t.Fatal(err)
					}
					c := exec.Command("sh", "-c", cmd)
					c.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+binDir+":"+os.Getenv("PATH"))
					if out, err := c.CombinedOutput(); err != nil {
						t.Fatalf("%s: %v\n%s", cmd, err, out)
					}
				}
			}
		}},
		{"Initial leader migration configuration", func(t *testing.T, s migrate.PlanStep) {
			// "restart kube-controller-manager on each node" with kcm.yaml.
			w.stopHost("kcm-n-1")
			var id string
			id, nMigration = startN("--enable-leader-migration", "--leader-migration-config="+filepath.Join(files, "kcm.yaml"))
			runsAll("initial leader migration configuration", id, migrate.LeaseMigration)
			newService("with-kcm-yaml")
		}},
		{"Deploy the cloud-controller-manager", func(t *testing.T, s migrate.PlanStep) {
			var lm manager.MigrationConfig
			raw, err := os.ReadFile(filepath.Join(files, "ccm.yaml"))
			if err == nil {
				err = yaml.Unmarshal(raw, &lm)
			}
			if err != nil {
				t.Fatal(err)
			}
			var leaders []any
			for _, l := range lm.ControllerLeaders {
				leaders = append(leaders, map[string]any{"name": l.Name, "component": l.Component})
			}
			values["leaderMigration"] = map[string]any{"enabled": true, "controllerLeaders": leaders}
			rel, err := hc.Install(ctx, devenv.ChartRelease, ch, values, 4*time.Minute)
			if err != nil {
				t.Fatalf("helm install with leader migration: %v", err)
			}
			t.Logf("release %s revision %d: the CCM with ccm.yaml", rel.Name, rel.Version)
			ccmPodImages(t, kube, 2)
			testenv.Eventually(t, time.Minute, "a CCM pod to lead its own lease", func() (bool, string) {
				h := holder(migrate.LeaseCCM)
				return isCCM(h), h
			})
			// Version N holds the migration lease: it still runs them all,
			// and the CCM's pods (their logs read) none.
			testenv.Eventually(t, time.Minute, "a sample that read both CCM pods' logs", func() (bool, string) {
				n := w.lastLogs()
				return n == 2, fmt.Sprintf("%d read", n)
			})
			newService("with-ccm-standing-by")
			runsAll("deploy the cloud-controller-manager", "kcm-n-2", migrate.LeaseMigration)
			for _, f := range check().Findings {
				if f.ID == "migration-lease-access" {
					t.Errorf("after the chart's install: %+v", f)
				}
			}
		}},
		{"Upgrade the control plane", func(t *testing.T, s migrate.PlanStep) {
			// The last node of version N goes: its kube-controller-manager
			// stops (its controllers first, then it releases the leases).
			began := time.Now()
			w.stopHost("kcm-n-2")
			select {
			case <-nMigration.Done():
			default:
				t.Fatalf("version N still runs")
			}
			var ccm string
			testenv.Eventually(t, time.Minute, "a CCM pod to take the migration lease", func() (bool, string) {
				ccm = holder(migrate.LeaseMigration)
				return isCCM(ccm), ccm
			})
			handover := time.Since(began)
			runsAll("upgrade the control plane", "ccm", migrate.LeaseMigration)
			t.Logf("hand-over: the CCM %s took the migration lease %v after version N began to stop, and runs the three", ccm, handover.Round(100*time.Millisecond))
			newService("after-version-n")
		}},
		{"Rollback", func(t *testing.T, s migrate.PlanStep) {
			t.Log("rollback: not needed")
		}},
		{"Disable leader migration", func(t *testing.T, s migrate.PlanStep) {
			// A rolling update of the CCM without the flags.
			if _, err := hc.Upgrade(ctx, devenv.ChartRelease, ch, map[string]any{"leaderMigration": map[string]any{"enabled": false}}, true, 4*time.Minute); err != nil {
				t.Fatalf("helm upgrade without leader migration: %v", err)
			}
			ccmPodImages(t, kube, 2)
			runsAll("disable leader migration", "ccm", migrate.LeaseCCM)
			newService("without-leader-migration")
		}},
		{"Default configuration", func(t *testing.T, s migrate.PlanStep) {
			t.Log("default configuration: the files were used instead")
		}},
	}
	if len(plan) != len(steps) {
		t.Fatalf("the printed plan has %d steps, the test follows %d", len(plan), len(steps))
	}
	for i, s := range plan {
		if !strings.HasPrefix(strings.TrimPrefix(s.Title, "(Optional) "), steps[i].title) {
			t.Fatalf("step %d of the printed plan is %q, the test expects %q", i+1, s.Title, steps[i].title)
		}
		t.Logf("step %d: %s", i+1, s.Title)
		steps[i].do(t, s)
		if t.Failed() {
			return
		}
	}
	ok, failed := traffic.stop()
	overlaps, samples, podLogs := w.stop()
	t.Logf("%d requests through the VIP during the migration, %d failed; %d samples of who runs what (%d CCM pod logs read); Services' ingress: %s", ok, len(failed), samples, podLogs, strings.Join(ingress, ", "))
	if len(failed) > 0 {
		t.Errorf("%d of %d requests failed, e.g. %v", len(failed), ok+len(failed), failed[:min(3, len(failed))])
	}
	if len(overlaps) > 0 {
		t.Errorf("two processes ran a migrated controller at once: %v", overlaps)
	}
	if samples < 20 || podLogs < 10 {
		t.Errorf("only %d samples of who runs the controllers, %d CCM pod logs read", samples, podLogs)
	}
	// Version N's load balancer adopted: same name, VIP and creation time.
	after := cloudLBs(t, cloud)
	for name, lb := range lbsN {
		if after[name] != lb {
			t.Errorf("version N's load balancer %s (%s) not adopted unchanged: now %q", name, lb, after[name])
		}
	}
	checkOneLBPerService(t, kube, cloud)
}

func buildKCMInTree(t *testing.T) string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "kcmintree")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "test", "kcmintree")).CombinedOutput(); err != nil {
		t.Fatalf("build test/kcmintree: %v\n%s", err, out)
	}
	return bin
}

func listNodes(t *testing.T, kube kubernetes.Interface) []string {
	t.Helper()
	list, err := kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("nodes: %v (%d)", err, len(list.Items))
	}
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	return names
}

// deployHello runs two agnhost netexec pods labelled app=hello in
// namespace demo, one per node, the backends of createLBService's Services.
func deployHello(t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "hello"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "demo"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptrTo[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
				WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
			Containers: []corev1.Container{{Name: "netexec", Image: nodeimages.AgnhostImage, Args: []string{"netexec", "--http-port=8080"},
				Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}}},
		}},
	}}
	if _, err := kube.AppsV1().Deployments("demo").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, "2 ready hello pods", func() (bool, string) {
		cur, err := kube.AppsV1().Deployments("demo").Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return cur.Status.ReadyReplicas == 2, fmt.Sprintf("%d ready", cur.Status.ReadyReplicas)
	})
}

// runnerWatch samples, every 500 ms, which process runs each migrated
// controller: the CCM pods by their logs (read first), then version N's
// processes by theirs. A CCM's controllers start only after version N
// logged its own stopped, so reading in that order never sees a hand-over
// as two runners.
type runnerWatch struct {
	kube     kubernetes.Interface
	mu       sync.Mutex
	hosts    map[string]*proc.Process
	stopping map[string]bool
	last     map[string][]string
	lastRead int
	overlaps []string
	samples  int
	podLogs  int // CCM pod logs read: a pod whose log cannot be read is not seen
	stopc    chan struct{}
	done     chan struct{}
}

func newRunnerWatch(t *testing.T, kube kubernetes.Interface) *runnerWatch {
	w := &runnerWatch{kube: kube, hosts: map[string]*proc.Process{}, stopping: map[string]bool{}, stopc: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	t.Cleanup(func() { _, _, _ = w.stop() })
	return w
}

func (w *runnerWatch) addHost(id string, p *proc.Process) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hosts[id] = p
}

// stopHost stops one of version N's processes gracefully, as taking down
// its control-plane node does.
func (w *runnerWatch) stopHost(id string) {
	w.mu.Lock()
	p := w.hosts[id]
	w.mu.Unlock()
	p.Stop(20 * time.Second)
}

func (w *runnerWatch) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stopc:
			return
		case <-time.After(500 * time.Millisecond):
		}
		now, logs := w.sample()
		w.mu.Lock()
		w.samples++
		w.podLogs += logs
		w.lastRead = logs
		w.last = now
		for c, who := range now {
			if len(who) > 1 {
				w.overlaps = append(w.overlaps, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.0"), c, who))
			}
		}
		w.mu.Unlock()
	}
}

// sample returns, per migrated controller, its runners as <who>@<lease>,
// and how many CCM pod logs it read.
func (w *runnerWatch) sample() (map[string][]string, int) {
	ctx := context.Background()
	out := map[string][]string{}
	read := 0
	pods, err := w.kube.CoreV1().Pods(devenv.ChartNamespace).List(ctx, metav1.ListOptions{LabelSelector: ccmSelector})
	if err == nil {
		for _, p := range pods.Items {
			log, err := w.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "ccm"}).DoRaw(ctx)
			if err != nil {
				continue // gone, or not started: it runs nothing that counts
			}
			read++
			for c, lease := range testenv.RunningControllers(string(log)) {
				out[c] = append(out[c], p.Name+"@"+lease)
			}
		}
	}
	w.mu.Lock()
	hosts := make(map[string]*proc.Process, len(w.hosts))
	for id, p := range w.hosts {
		hosts[id] = p
	}
	w.mu.Unlock()
	for id, p := range hosts {
		log, err := os.ReadFile(p.LogPath)
		select {
		case <-p.Done():
			continue
		default:
		}
		if err != nil || strings.Contains(string(log), `"Controllers stopped"`) {
			continue
		}
		for c, lease := range testenv.RunningControllers(string(log)) {
			out[c] = append(out[c], id+"@"+lease)
		}
	}
	return out, read
}

func (w *runnerWatch) runners() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// lastLogs is how many CCM pod logs the last sample read.
func (w *runnerWatch) lastLogs() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastRead
}

func (w *runnerWatch) stop() ([]string, int, int) {
	select {
	case <-w.stopc:
	default:
		close(w.stopc)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.overlaps, w.samples, w.podLogs
}
