package upstreame2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// JUnitFile is the name of ginkgo's report in the report directory.
const JUnitFile = "junit.xml"

// interruptGrace is how long ginkgo has after SIGINT to run the specs'
// clean-ups (namespace deletion waits for pods that shut down slowly) and
// write its report.
const interruptGrace = 3 * time.Minute

// SuiteOptions say how to run e2e.test.
type SuiteOptions struct {
	Ginkgo, E2ETest, Kubectl string
	Kubeconfig               string
	Run                      Run
	// ReportDir receives junit.xml, ginkgo.log and images.txt.
	ReportDir string
	// Nodes is ginkgo's --nodes: parallel suite processes.
	Nodes int
	// Timeout is ginkgo's --timeout for the whole suite.
	Timeout time.Duration
	// Out receives ginkgo's output as it runs (also in ginkgo.log).
	Out io.Writer
	// NumNodes is e2e.test's --num-nodes; 0: the cluster's schedulable
	// nodes, counted before the run (e2e.test's own default, -1, makes the
	// specs that need two nodes skip: "Requires at least 2 nodes (not -1)").
	NumNodes int
}

// Args are ginkgo's command line for o.
func (o SuiteOptions) Args() []string {
	args := []string{
		"--nodes=" + strconv.Itoa(o.Nodes),
		"--timeout=" + o.Timeout.String(),
		"--junit-report=" + JUnitFile, "--output-dir=" + o.ReportDir,
		"--no-color", "--silence-skips", "--poll-progress-after=5m",
	}
	args = append(args, o.Run.GinkgoArgs()...)
	return append(args, o.E2ETest, "--",
		"--kubeconfig="+o.Kubeconfig,
		"--provider="+o.Run.Provider,
		"--kubectl-path="+o.Kubectl,
		"--dump-logs-on-failure=false",
		"--report-dir="+o.ReportDir,
		"--num-nodes="+strconv.Itoa(o.NumNodes),
	)
}

// RunSuite runs ginkgo with e2e.test and returns the summary rows. While
// it runs it records every image a pod names (images.txt), which shows
// what the selected specs pull. err is set when ginkgo wrote no report;
// failed specs are in the results, not in err.
func RunSuite(ctx context.Context, o SuiteOptions) ([]Result, []string, error) {
	logger := klog.FromContext(ctx)
	if err := os.MkdirAll(o.ReportDir, 0o755); err != nil {
		return nil, nil, err
	}
	logf, err := os.Create(filepath.Join(o.ReportDir, "ginkgo.log"))
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = logf.Close() }()
	var w io.Writer = logf
	if o.Out != nil {
		w = io.MultiWriter(logf, o.Out)
	}

	if o.NumNodes == 0 {
		if o.NumNodes, err = schedulableNodes(ctx, o.Kubeconfig); err != nil {
			return nil, nil, err
		}
	}
	// The suite's own namespaces only: what runs in those already there
	// (kube-system's CoreDNS, up's demo) is the environment's, not the specs'.
	before, err := namespaces(ctx, o.Kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	images := &imageSet{seen: map[string]bool{}, ignore: before}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); images.watch(watchCtx, o.Kubeconfig) }()

	// Some specs leave files in the temporary directory (upstream's kuberc
	// spec writes test-kuberc*/kuberc.yaml and never removes it): the
	// suite gets a directory of its own, removed when it ends, so the
	// machine's /tmp is left as it was found.
	tmp, err := os.MkdirTemp("", "portside-e2e-tmp-")
	if err != nil {
		stopWatch()
		<-watched
		return nil, nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	args := o.Args()
	logger.Info("Running upstream e2e", "run", o.Run.Name, "ginkgo", o.Ginkgo, "args", args, "tmpdir", tmp)
	cmd := exec.CommandContext(ctx, o.Ginkgo, args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = w, w
	// ginkgo and its e2e.test processes are a process group of their own.
	// On Ctrl-C of the runner the group gets SIGINT, as from a terminal:
	// the specs stop, their clean-ups run and ginkgo still writes the
	// report. Whatever is left after the grace (ginkgo alone is killed by
	// WaitDelay) is killed with the group, so no e2e.test outlives the run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = interruptGrace
	began := time.Now()
	runErr := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	stopWatch()
	<-watched
	logger.Info("Upstream e2e finished", "run", o.Run.Name, "took", time.Since(began).Round(time.Second), "err", runErr)

	list := images.list()
	if err := os.WriteFile(filepath.Join(o.ReportDir, "images.txt"), []byte(joinLines(list)), 0o644); err != nil {
		return nil, list, err
	}
	results, err := ReadJUnit(filepath.Join(o.ReportDir, JUnitFile), o.Run)
	if err != nil {
		var ee *exec.ExitError
		if runErr != nil && !errors.As(runErr, &ee) {
			return nil, list, fmt.Errorf("ginkgo: %w", runErr)
		}
		return nil, list, fmt.Errorf("ginkgo wrote no report (%v): %w", runErr, err)
	}
	return results, list, nil
}

// schedulableNodes counts the cluster's nodes that pods can be scheduled on.
func schedulableNodes(ctx context.Context, kubeconfig string) (int, error) {
	cs, err := clientFor(kubeconfig)
	if err != nil {
		return 0, err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("counting nodes: %w", err)
	}
	return CountSchedulable(nodes.Items), nil
}

// CountSchedulable counts the nodes neither cordoned nor tainted NoSchedule
// or NoExecute, as e2e's own node listing does.
func CountSchedulable(nodes []corev1.Node) int {
	n := 0
	for _, node := range nodes {
		ok := !node.Spec.Unschedulable
		for _, t := range node.Spec.Taints {
			if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
				ok = false
			}
		}
		if ok {
			n++
		}
	}
	return n
}

func clientFor(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func namespaces(ctx context.Context, kubeconfig string) (map[string]bool, error) {
	cs, err := clientFor(kubeconfig)
	if err != nil {
		return nil, err
	}
	list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	out := map[string]bool{}
	for _, n := range list.Items {
		out[n.Name] = true
	}
	return out, nil
}

// imageSet collects the images of the pods the suite creates: those of
// namespaces not in ignore (the ones there before the run).
type imageSet struct {
	mu     sync.Mutex
	seen   map[string]bool
	ignore map[string]bool
}

func (s *imageSet) watch(ctx context.Context, kubeconfig string) {
	logger := klog.FromContext(ctx)
	cs, err := clientFor(kubeconfig)
	if err != nil {
		logger.Error(err, "Not recording images")
		return
	}
	for ctx.Err() == nil {
		wi, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
			continue
		}
		for ev := range wi.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				s.add(p)
			}
		}
		wi.Stop()
	}
}

func (s *imageSet) add(p *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ignore[p.Namespace] {
		return
	}
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		s.seen[c.Image] = true
	}
}

func (s *imageSet) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.seen))
	for im := range s.seen {
		out = append(out, im)
	}
	sort.Strings(out)
	return out
}

func joinLines(ss []string) string {
	var b []byte
	for _, s := range ss {
		b = append(b, s...)
		b = append(b, '\n')
	}
	return string(b)
}

// UnlistedImages are the images pods used that the runs file does not list
// for run (neither built from source nor skipped with a reason).
func (f File) UnlistedImages(run string, used []string) []string {
	listed := map[string]bool{}
	for _, im := range f.Images {
		for _, r := range im.Runs {
			if r == run {
				listed[im.Image] = true
			}
		}
	}
	var out []string
	for _, u := range used {
		if !listed[u] {
			out = append(out, u)
		}
	}
	return out
}
