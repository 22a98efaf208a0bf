package conformance

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func testEnv(caps ...Capability) *Env {
	env := &Env{Client: fake.NewClientset(), Capabilities: map[Capability]bool{}, RunID: "r1"}
	for _, c := range caps {
		env.Capabilities[c] = true
	}
	return env
}

func byName(rs []Result) map[string]Result {
	m := map[string]Result{}
	for _, r := range rs {
		m[r.Name] = r
	}
	return m
}

func TestRunOutcomes(t *testing.T) {
	old := exitGrace
	exitGrace = 2 * time.Second
	defer func() { exitGrace = old }()

	var reachedAfterFatal, cleanups atomic.Int32
	var timeoutCleanup, sawCancel atomic.Bool
	tests := []Test{
		{Name: "pass", Needs: []Capability{Instances}, Run: func(ctx context.Context, t *T) {
			t.Logf("hello %d", 1)
			t.Cleanup(func(context.Context) { cleanups.Add(1) })
		}},
		{Name: "errorf", Run: func(ctx context.Context, t *T) {
			t.Errorf("first")
			t.Errorf("second")
		}},
		{Name: "fatal", Run: func(ctx context.Context, t *T) {
			t.Cleanup(func(context.Context) { cleanups.Add(1) })
			t.Fatalf("stop %s", "here")
			reachedAfterFatal.Add(1)
		}},
		{Name: "skipf", Run: func(ctx context.Context, t *T) { t.Skipf("not today") }},
		{Name: "needs", Needs: []Capability{Instances, Routes}, Run: func(ctx context.Context, t *T) { panic("must not run") }},
		{Name: "panic", Run: func(ctx context.Context, t *T) { panic("boom") }},
		{Name: "timeout", Timeout: 100 * time.Millisecond, Run: func(ctx context.Context, t *T) {
			t.Cleanup(func(context.Context) { timeoutCleanup.Store(true) })
			<-ctx.Done()
			sawCancel.Store(true)
		}},
		{Name: "eventually", Timeout: 300 * time.Millisecond, Run: func(ctx context.Context, t *T) {
			t.Eventually(ctx, 50*time.Millisecond, "the impossible", func(context.Context) (bool, string) { return false, "not yet" })
			reachedAfterFatal.Add(1)
		}},
	}
	var out bytes.Buffer
	env := testEnv(Instances)
	rs := Run(context.Background(), env, tests, RunOptions{Out: &out, Verbose: true})
	if len(rs) != len(tests) {
		t.Fatalf("got %d results, want %d", len(rs), len(tests))
	}
	m := byName(rs)
	for _, c := range []struct{ name, status, msg string }{
		{"pass", StatusPassed, ""},
		{"errorf", StatusFailed, "first\nsecond"},
		{"fatal", StatusFailed, "stop here"},
		{"skipf", StatusSkipped, "not today"},
		{"needs", StatusSkipped, "needs routes (not in --capabilities instances)"},
		{"panic", StatusFailed, "panic: boom"},
		{"timeout", StatusFailed, "timed out after 100ms"},
		{"eventually", StatusFailed, "timed out after 50ms waiting for the impossible; last: not yet"},
	} {
		r := m[c.name]
		if r.Status != c.status || !strings.HasPrefix(r.Message, c.msg) {
			t.Errorf("%s: got %s %q, want %s %q", c.name, r.Status, r.Message, c.status, c.msg)
		}
	}
	if got := m["pass"].Logs; len(got) != 1 || got[0] != "hello 1" {
		t.Errorf("pass logs = %q", got)
	}
	if reachedAfterFatal.Load() != 0 {
		t.Errorf("code after Fatalf ran")
	}
	if cleanups.Load() != 2 || !timeoutCleanup.Load() {
		t.Errorf("clean-ups: %d of 2, timeout's ran: %v", cleanups.Load(), timeoutCleanup.Load())
	}
	if !sawCancel.Load() {
		t.Errorf("the timed-out test's context was not cancelled")
	}
	for _, want := range []string{"--- PASS: pass", "--- FAIL: fatal", "--- SKIP: needs", "=== RUN   pass", "log: hello 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("progress output lacks %q:\n%s", want, out.String())
		}
	}
	// The namespace was created labeled, then deleted.
	if _, err := env.Client.CoreV1().Namespaces().Get(context.Background(), env.Namespace, metav1.GetOptions{}); err == nil {
		t.Errorf("namespace %s not deleted", env.Namespace)
	}
}

func TestRunNamespaceLabeled(t *testing.T) {
	env := testEnv()
	var labels map[string]string
	Run(context.Background(), env, []Test{{Name: "look", Run: func(ctx context.Context, t *T) {
		ns, err := t.Env.Client.CoreV1().Namespaces().Get(ctx, t.Env.Namespace, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%v", err)
		}
		labels = ns.Labels
	}}}, RunOptions{})
	if env.Namespace != "portside-conformance-r1" || labels[RunLabel] != "r1" {
		t.Errorf("namespace %s labels %v", env.Namespace, labels)
	}
}

func TestRunFocusSkip(t *testing.T) {
	run := func(ctx context.Context, t *T) {}
	tests := []Test{{Name: "nodes/a", Run: run}, {Name: "nodes/b", Run: run}, {Name: "routes/a", Run: run}}
	rs := Run(context.Background(), testEnv(), tests, RunOptions{Focus: regexp.MustCompile("^nodes/"), Skip: regexp.MustCompile("/b$")})
	if len(rs) != 1 || rs[0].Name != "nodes/a" {
		t.Errorf("got %v, want only nodes/a", rs)
	}
}

func TestRunInterrupted(t *testing.T) {
	old := exitGrace
	exitGrace = 2 * time.Second
	defer func() { exitGrace = old }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cleaned atomic.Bool
	env := testEnv()
	tests := []Test{
		{Name: "first", Run: func(ctx context.Context, t *T) {
			t.Cleanup(func(context.Context) { cleaned.Store(true) })
			cancel() // SIGINT
			<-ctx.Done()
		}},
		{Name: "second", Run: func(ctx context.Context, t *T) { panic("must not run") }},
	}
	rs := Run(ctx, env, tests, RunOptions{})
	if rs[0].Status != StatusFailed || !strings.HasPrefix(rs[0].Message, "interrupted after") {
		t.Errorf("first: %s %q", rs[0].Status, rs[0].Message)
	}
	if rs[1].Status != StatusSkipped || rs[1].Message != "interrupted" {
		t.Errorf("second: %s %q", rs[1].Status, rs[1].Message)
	}
	if !cleaned.Load() {
		t.Errorf("the interrupted test's clean-ups did not run")
	}
	if _, err := env.Client.CoreV1().Namespaces().Get(context.Background(), env.Namespace, metav1.GetOptions{}); err == nil {
		t.Errorf("namespace %s not deleted after the interrupt", env.Namespace)
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	err := WriteTable(&b, []Result{
		{Name: "a", Status: StatusPassed, Duration: time.Second},
		{Name: "b", Status: StatusFailed, Duration: 2 * time.Second, Message: "line one\nline two"},
		{Name: "c", Status: StatusSkipped, Message: "needs routes"},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{"NAME", "MESSAGE", "line one …", "1 passed, 1 failed, 1 skipped in 3s"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "line two") {
		t.Errorf("table shows more than the first line:\n%s", s)
	}
}

func TestLeftoverVolume(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inUse  bool
		delete bool
	}{
		{"conformance-0a1b2c3d-pv", false, true},
		{"conformance-0a1b2c3d-pv", true, false}, // a PV not of a run uses it
		{"conformance-data-pv", false, false},    // not a run ID
		{"conformance-0A1B2C3D-pv", false, false},
		{"my-conformance-0a1b2c3d-pv", false, false},
		{"conformance-0a1b2c3d-pv-backup", false, false},
		{"demo-data", false, false},
	} {
		if got := leftoverVolume(tc.name, tc.inUse); got != tc.delete {
			t.Errorf("leftoverVolume(%q, in use %v) = %v, want %v", tc.name, tc.inUse, got, tc.delete)
		}
	}
}
