package upstreame2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A report as ginkgo v2 writes it (--junit-report): suite nodes, the
// whole suite's specs with the unfocused ones "skipped", and ginkgo's
// label suffix after each name.
const sampleJUnit = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" disabled="3" errors="0" failures="1" time="100">
  <testsuite name="Kubernetes e2e suite" package="/x" tests="6" disabled="3" skipped="0" errors="0" failures="1" time="100">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="2.5"></testcase>
    <testcase name="[It] [sig-network] LoadBalancers [Feature:LoadBalancer] should handle load balancer cleanup finalizer for service [Slow] [sig-network, Feature:LoadBalancer, Slow]" classname="Kubernetes e2e suite" status="passed" time="61.4"></testcase>
    <testcase name="[It] [sig-network] LoadBalancers [Feature:LoadBalancer] should be able to create LoadBalancer Service without NodePort and change it [Slow] [sig-network, Feature:LoadBalancer, Slow]" classname="Kubernetes e2e suite" status="failed" time="30">
      <failure message="wait for service to have ingress: timed out&#xA;more detail" type="failed">[FAILED] wait for service ...</failure>
    </testcase>
    <testcase name="[It] [sig-network] LoadBalancers ExternalTrafficPolicy: Local [Feature:LoadBalancer] should target all nodes with endpoints [Slow] [sig-network, Feature:LoadBalancer, Slow]" classname="Kubernetes e2e suite" status="skipped" time="0.2">
      <skipped message="skipped - Test requires multiple schedulable nodes"></skipped>
    </testcase>
    <testcase name="[It] [sig-network] LoadBalancers [Feature:LoadBalancer] should only allow access from service loadbalancer source ranges [Slow] [sig-network, Feature:LoadBalancer, Slow]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-network] LoadBalancers [Feature:LoadBalancer] should handle load balancer cleanup finalizer for service again [Slow] [sig-network, Feature:LoadBalancer, Slow]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-storage] In-tree Volumes [Driver: nfs] should do something [Slow] [sig-storage, Driver: nfs, Slow]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-network] LoadBalancers [Feature:LoadBalancer] should be able to change the type and ports of a UDP service [Slow] [sig-network, Feature:LoadBalancer, Slow]" classname="Kubernetes e2e suite" status="timedout" time="900">
      <error message="Timedout" type="timedout">context deadline exceeded</error>
    </testcase>
    <testcase name="[SynchronizedAfterSuite]" classname="Kubernetes e2e suite" status="failed" time="1">
      <failure message="" type="failed">namespace left</failure>
    </testcase>
  </testsuite>
</testsuites>`

func TestReadJUnit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "junit.xml")
	if err := os.WriteFile(p, []byte(sampleJUnit), 0o644); err != nil {
		t.Fatal(err)
	}
	r := Run{
		Focus: []string{`\[sig-network\] LoadBalancers`},
		Skip:  []Skip{{Pattern: "source ranges", Reason: "the local cloud lacks source ranges"}},
	}
	got, err := ReadJUnit(p, r)
	if err != nil {
		t.Fatal(err)
	}
	const lb = "[sig-network] LoadBalancers [Feature:LoadBalancer] "
	want := []Result{
		// Sorted by spec; the sig-storage spec is not focused, the passed
		// suite node is no row, the failed one is.
		{Spec: "[SynchronizedAfterSuite]", Outcome: Failed, Duration: time.Second, Reason: "failed: namespace left"},
		{Spec: "[sig-network] LoadBalancers ExternalTrafficPolicy: Local [Feature:LoadBalancer] should target all nodes with endpoints [Slow]", Outcome: Skipped, Duration: 200 * time.Millisecond, Reason: "Test requires multiple schedulable nodes"},
		{Spec: lb + "should be able to change the type and ports of a UDP service [Slow]", Outcome: Failed, Duration: 900 * time.Second, Reason: "timedout: Timedout"},
		{Spec: lb + "should be able to create LoadBalancer Service without NodePort and change it [Slow]", Outcome: Failed, Duration: 30 * time.Second, Reason: "failed: wait for service to have ingress: timed out"},
		{Spec: lb + "should handle load balancer cleanup finalizer for service [Slow]", Outcome: Passed, Duration: 61400 * time.Millisecond},
		// Focused, no skip names it, bare "skipped": never ran.
		{Spec: lb + "should handle load balancer cleanup finalizer for service again [Slow]", Outcome: Skipped, Reason: notRun},
		{Spec: lb + "should only allow access from service loadbalancer source ranges [Slow]", Outcome: Skipped, Reason: "the local cloud lacks source ranges"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d:\n%+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
	if c := Count(got); c != (Counts{Passed: 1, Failed: 3, Skipped: 3}) {
		t.Errorf("Count = %+v", c)
	}
	var b strings.Builder
	if err := WriteTable(&b, got); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "1 passed, 3 failed, 3 skipped\n") || !strings.Contains(b.String(), "the local cloud lacks source ranges") {
		t.Errorf("table:\n%s", b.String())
	}
}

func TestRangesBusy(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want bool
	}{
		{"portside: error: local cloud: exited during start-up (exit status 1) (log x; last lines: portside: error: real machines: --vpc-cover 10.244.0.0/16 overlaps the host's route 10.244.0.0/16 on psd03971up: choose another range with --vpc-cover)", true},
		{"portside: error: VPC 198.18.180.0/22, chosen when data directory /d/c was first used, is in use by the environment with data directory /d/a: stop that one first, or start this one afresh (`portside down --purge --data-dir /d/c`)", true},
		{"portside: error: portside up is already running with data directory /d/a (it holds VPC 198.18.180.0/22): run `portside down --data-dir /d/a` first", false},
		{"portside: error: local cloud: exited during start-up: bind: address already in use", false},
		{"", false},
	} {
		if got := RangesBusy(tc.out); got != tc.want {
			t.Errorf("RangesBusy(%q) = %v, want %v", tc.out, got, tc.want)
		}
	}
}
