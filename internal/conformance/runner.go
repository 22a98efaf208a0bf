package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultTimeout bounds a test that sets no Timeout.
const DefaultTimeout = 3 * time.Minute

// exitGrace is how long the runner waits, after a test's context ends, for
// its goroutine to notice and return before it runs the clean-ups anyway.
var exitGrace = 10 * time.Second

// Statuses of a Result.
const (
	StatusPassed  = "passed"
	StatusFailed  = "failed"
	StatusSkipped = "skipped"
)

// RunOptions select and report the tests of a run.
type RunOptions struct {
	// Focus, when set, runs only the tests whose name it matches; Skip
	// leaves out those it matches. Tests left out are not reported.
	Focus, Skip *regexp.Regexp
	// Verbose also prints a line as each test starts, skip reasons, and
	// the tests' logs.
	Verbose bool
	// Out receives a progress line as each test ends; nil: none.
	Out io.Writer
}

// Result is the outcome of one test.
type Result struct {
	Name     string
	Status   string // StatusPassed, StatusFailed or StatusSkipped
	Duration time.Duration
	// Message is why the test failed or was skipped, one line per message.
	Message string
	// Logs are the test's t.Logf lines.
	Logs []string
}

// Selected reports whether o's Focus and Skip keep the test named name.
func (o RunOptions) Selected(name string) bool {
	if o.Focus != nil && !o.Focus.MatchString(name) {
		return false
	}
	return o.Skip == nil || !o.Skip.MatchString(name)
}

// NewRunID returns a short random run ID (8 hex digits).
func NewRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run runs the selected tests one after the other and returns their
// results, in order. It creates env.Namespace (labeled RunLabel=RunID;
// both are filled in when empty) first and deletes it at the end. When ctx
// ends (SIGINT), the running test's clean-ups run and the tests not yet
// run are skipped as "interrupted".
func Run(ctx context.Context, env *Env, tests []Test, o RunOptions) []Result {
	if env.RunID == "" {
		env.RunID = NewRunID()
	}
	if env.Namespace == "" {
		env.Namespace = "portside-conformance-" + env.RunID
	}
	var selected []Test
	for _, tc := range tests {
		if o.Selected(tc.Name) {
			selected = append(selected, tc)
		}
	}
	results := make([]Result, 0, len(selected))
	setupErr := createNamespace(ctx, env)
	if setupErr == nil {
		defer deleteNamespace(env)
	}
	for _, tc := range selected {
		var r Result
		switch {
		case ctx.Err() != nil:
			r = Result{Name: tc.Name, Status: StatusSkipped, Message: "interrupted"}
		case missingNeed(env, tc) != "":
			r = Result{Name: tc.Name, Status: StatusSkipped, Message: missingNeed(env, tc)}
		case setupErr != nil:
			r = Result{Name: tc.Name, Status: StatusFailed, Message: setupErr.Error()}
		default:
			if o.Verbose && o.Out != nil {
				fmt.Fprintf(o.Out, "=== RUN   %s\n", tc.Name)
			}
			r = runOne(ctx, env, tc)
		}
		results = append(results, r)
		progress(o, r)
	}
	return results
}

// missingNeed is the skip message of a test whose needs env lacks, or "".
func missingNeed(env *Env, tc Test) string {
	for _, c := range tc.Needs {
		if !env.Capabilities[c] {
			have := CapabilityList(env.Capabilities)
			if have == "" {
				have = "(none)"
			}
			return fmt.Sprintf("needs %s (not in --capabilities %s)", c, have)
		}
	}
	return ""
}

// CapabilityList is the names of the capabilities set in caps, comma
// separated, in documentation order.
func CapabilityList(caps map[Capability]bool) string {
	var names []string
	for _, c := range AllCapabilities {
		if caps[c] {
			names = append(names, string(c))
		}
	}
	return strings.Join(names, ",")
}

// runOne runs a test in its own goroutine, so that Fatalf and Skipf
// (runtime.Goexit) end only it, under its timeout; a panic fails it. Its
// clean-ups run in every case.
func runOne(ctx context.Context, env *Env, tc Test) Result {
	t := &T{Env: env, Name: tc.Name}
	timeout := tc.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("panic: %v\n%s", p, debug.Stack())
			}
		}()
		tc.Run(tctx, t)
	}()
	var ended string // why the test did not return by itself
	cutShort := func() string {
		if ctx.Err() != nil {
			return fmt.Sprintf("interrupted after %v", time.Since(start).Round(time.Millisecond))
		}
		return fmt.Sprintf("timed out after %v", timeout)
	}
	select {
	case <-done:
		// Returned, but maybe because its context ended (both may be
		// ready at once): that test was cut short too.
		if tctx.Err() != nil {
			ended = cutShort()
		}
	case <-tctx.Done():
		ended = cutShort()
		// Let the test see its context end and record where it was.
		select {
		case <-done:
		case <-time.After(exitGrace):
		}
	}
	if ended != "" {
		t.mu.Lock()
		t.failed = true
		t.messages = append([]string{ended}, t.messages...)
		t.mu.Unlock()
	}
	t.runCleanups()
	r := Result{Name: tc.Name, Duration: time.Since(start), Message: t.message()}
	t.mu.Lock()
	r.Logs = slices.Clone(t.logs)
	failed, skipped := t.failed, t.skipped
	t.mu.Unlock()
	switch {
	case failed:
		r.Status = StatusFailed
	case skipped:
		r.Status = StatusSkipped
	default:
		r.Status = StatusPassed
	}
	return r
}

// progress prints a result as it comes.
func progress(o RunOptions, r Result) {
	if o.Out == nil {
		return
	}
	word := map[string]string{StatusPassed: "PASS", StatusFailed: "FAIL", StatusSkipped: "SKIP"}[r.Status]
	fmt.Fprintf(o.Out, "--- %s: %s (%v)\n", word, r.Name, r.Duration.Round(time.Millisecond))
	if r.Message != "" && (r.Status == StatusFailed || o.Verbose) {
		for _, l := range strings.Split(r.Message, "\n") {
			fmt.Fprintf(o.Out, "    %s\n", l)
		}
	}
	if o.Verbose {
		for _, l := range r.Logs {
			fmt.Fprintf(o.Out, "    log: %s\n", l)
		}
	}
}

func createNamespace(ctx context.Context, env *Env) error {
	if env.Client == nil {
		return nil
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: env.Namespace, Labels: map[string]string{RunLabel: env.RunID}}}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the run's namespace %s: %w", env.Namespace, err)
	}
	return nil
}

// deleteNamespace deletes the run's namespace, also after an interrupt.
func deleteNamespace(env *Env) {
	if env.Client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = env.Client.CoreV1().Namespaces().Delete(ctx, env.Namespace, metav1.DeleteOptions{})
}

// Cleanup deletes what interrupted runs left: namespaces, Nodes and
// persistent volumes labeled RunLabel, and, with env.Cloud, the instances
// and volumes the suite made. It returns what it deleted.
func Cleanup(ctx context.Context, env *Env) ([]string, error) {
	var removed []string
	var errs []error
	sel := metav1.ListOptions{LabelSelector: RunLabel}
	core := env.Client.CoreV1()
	if nss, err := core.Namespaces().List(ctx, sel); err != nil {
		errs = append(errs, err)
	} else {
		for _, ns := range nss.Items {
			if err := core.Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			} else {
				removed = append(removed, "namespace "+ns.Name)
			}
		}
	}
	if nodes, err := core.Nodes().List(ctx, sel); err != nil {
		errs = append(errs, err)
	} else {
		for _, n := range nodes.Items {
			if err := core.Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			} else {
				removed = append(removed, "node "+n.Name)
			}
		}
	}
	if pvs, err := core.PersistentVolumes().List(ctx, sel); err != nil {
		errs = append(errs, err)
	} else {
		for _, pv := range pvs.Items {
			if err := core.PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			} else {
				removed = append(removed, "persistent volume "+pv.Name)
			}
		}
	}
	if c := env.Cloud; c != nil {
		if insts, err := c.ListInstances(ctx, ""); err != nil {
			errs = append(errs, err)
		} else {
			for _, inst := range insts {
				if _, ours := inst.Labels[RunLabel]; !ours {
					continue
				}
				if err := c.DeleteInstance(ctx, inst.ID); err != nil {
					errs = append(errs, err)
				} else {
					removed = append(removed, "instance "+inst.Name)
				}
			}
		}
		inUse, err := volumesInUse(ctx, env)
		if err != nil {
			errs = append(errs, err)
		} else if vols, err := c.ListVolumes(ctx); err != nil {
			errs = append(errs, err)
		} else {
			for _, v := range vols {
				if !leftoverVolume(v.Name, inUse[v.ID]) {
					continue
				}
				if err := c.DeleteVolume(ctx, v.ID); err != nil {
					errs = append(errs, err)
				} else {
					removed = append(removed, "volume "+v.Name)
				}
			}
		}
	}
	return removed, errors.Join(errs...)
}

// runVolumeName is the name volumes/pv-labels gives its volume
// ("conformance-<run id>-pv"); local-cloud volumes carry no labels.
var runVolumeName = regexp.MustCompile(`^conformance-[0-9a-f]{8}-pv$`)

// leftoverVolume decides whether --cleanup deletes a local-cloud volume:
// only one named as a run names it and used by no PV but a run's.
func leftoverVolume(name string, usedByOthers bool) bool {
	return runVolumeName.MatchString(name) && !usedByOthers
}

// volumesInUse maps the volume IDs that PVs not created by a run refer to.
func volumesInUse(ctx context.Context, env *Env) (map[string]bool, error) {
	pvs, err := env.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list persistent volumes: %w", err)
	}
	used := map[string]bool{}
	for _, pv := range pvs.Items {
		if _, ours := pv.Labels[RunLabel]; !ours && pv.Spec.CSI != nil {
			used[pv.Spec.CSI.VolumeHandle] = true
		}
	}
	return used, nil
}
