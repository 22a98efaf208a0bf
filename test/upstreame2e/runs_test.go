package upstreame2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestSelects(t *testing.T) {
	r := Run{
		Focus: []string{`\[sig-network\] LoadBalancers`, `\[Feature:LoadBalancer\]`},
		Skip:  []Skip{{Pattern: `without NodePort`, Reason: "the local cloud lacks VIP-mode load balancers"}},
	}
	for _, tc := range []struct {
		spec        string
		focused     bool
		skipReason  string
		description string
	}{
		{"[sig-network] LoadBalancers [Feature:LoadBalancer] should handle load balancer cleanup finalizer for service [Slow]", true, "", "first focus"},
		{"[sig-network] Services should serve endpoints on same port and different protocol for internal traffic on Type LoadBalancer [Feature:LoadBalancer]", true, "", "second focus only"},
		{"[sig-network] LoadBalancers [Feature:LoadBalancer] should be able to create LoadBalancer Service without NodePort and change it [Slow]", true, "the local cloud lacks VIP-mode load balancers", "focused, then skipped with the file's reason"},
		{"[sig-network] Services should be able to create a functioning NodePort service [Conformance]", false, "", "no focus matches"},
		{"[sig-storage] something without NodePort", false, "", "a skip pattern alone does not focus"},
	} {
		t.Run(tc.description, func(t *testing.T) {
			focused, reason := r.Selects(tc.spec)
			if focused != tc.focused || reason != tc.skipReason {
				t.Errorf("Selects(%q) = %v, %q; want %v, %q", tc.spec, focused, reason, tc.focused, tc.skipReason)
			}
		})
	}
}

func TestGinkgoArgs(t *testing.T) {
	r := Run{Focus: []string{"a", "b"}, Skip: []Skip{{Pattern: "c", Reason: "x"}}}
	want := []string{"--focus=a", "--focus=b", "--skip=c"}
	if got := r.GinkgoArgs(); !slices.Equal(got, want) {
		t.Errorf("GinkgoArgs() = %q, want %q", got, want)
	}
}

func TestLoadChecks(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, wantErr string
	}{
		{"ok", "runs:\n- name: a\n  provider: local\n  focus: [x]\n  skip: [{pattern: y, reason: why}]\nimages:\n- {image: i, source: s, runs: [a]}\n", ""},
		{"a skip without a reason", "runs:\n- name: a\n  provider: local\n  focus: [x]\n  skip: [{pattern: y}]\n", "has no reason"},
		{"no focus", "runs:\n- name: a\n  provider: local\n", "no focus"},
		{"no provider", "runs:\n- name: a\n  focus: [x]\n", "no provider"},
		{"a repeated name", "runs:\n- {name: a, provider: local, focus: [x]}\n- {name: a, provider: local, focus: [x]}\n", "repeated"},
		{"a bad regexp", "runs:\n- {name: a, provider: local, focus: ['(']}\n", "focus"},
		{"an image of an unknown run", "runs:\n- {name: a, provider: local, focus: [x]}\nimages:\n- {image: i, runs: [b]}\n", "unknown run"},
		{"nodes and zones", "runs:\n- {name: a, provider: local, focus: [x], nodes: 6, zones: 3}\n", ""},
		{"zones alone (the runner's nodes)", "runs:\n- {name: a, provider: local, focus: [x], zones: 1}\n", ""},
		{"more zones than nodes", "runs:\n- {name: a, provider: local, focus: [x], nodes: 2, zones: 3}\n", "want zones 0 to nodes"},
		{"negative nodes", "runs:\n- {name: a, provider: local, focus: [x], nodes: -1}\n", "want zones 0 to nodes"},
		{"dual-stack", "runs:\n- {name: a, provider: local, focus: [x], ipFamily: dual}\n", ""},
		{"IPv6 only", "runs:\n- {name: a, provider: local, focus: [x], ipFamily: ipv6}\n", ""},
		{"unknown family", "runs:\n- {name: a, provider: local, focus: [x], ipFamily: IPv6}\n", `ipFamily "IPv6": want ipv4, dual or ipv6`},
		{"an unknown field", "runs:\n- {name: a, provider: local, focus: [x], skips: []}\n", "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "runs.yaml")
			if err := os.WriteFile(p, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(p)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Load: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Load: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// The repository's own runs file loads, and has the runs the Makefile and
// the subset test name.
func TestRunsFile(t *testing.T) {
	f, err := Load("runs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"loadbalancer", "subset", "cloud-provider-kind"} {
		if _, err := f.Find(n); err != nil {
			t.Error(err)
		}
	}
}

func TestUnlistedImages(t *testing.T) {
	f := File{Images: []Image{{Image: "a", Runs: []string{"x"}}, {Image: "b", Runs: []string{"y"}}}}
	for _, tc := range []struct {
		run  string
		used []string
		want []string
	}{
		{"x", []string{"a"}, nil},
		{"x", []string{"a", "b"}, []string{"b"}},
		{"y", []string{"a", "b", "c"}, []string{"a", "c"}},
		{"x", nil, nil},
	} {
		if got := f.UnlistedImages(tc.run, tc.used); !slices.Equal(got, tc.want) {
			t.Errorf("UnlistedImages(%s, %q) = %q, want %q", tc.run, tc.used, got, tc.want)
		}
	}
}

func TestCountSchedulable(t *testing.T) {
	node := func(unschedulable bool, effects ...corev1.TaintEffect) corev1.Node {
		n := corev1.Node{Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
		for _, e := range effects {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "k", Effect: e})
		}
		return n
	}
	for _, tc := range []struct {
		name  string
		nodes []corev1.Node
		want  int
	}{
		{"none", nil, 0},
		{"three plain", []corev1.Node{node(false), node(false), node(false)}, 3},
		{"cordoned", []corev1.Node{node(true), node(false)}, 1},
		{"NoSchedule and NoExecute taints", []corev1.Node{node(false, corev1.TaintEffectNoSchedule), node(false, corev1.TaintEffectNoExecute), node(false)}, 1},
		{"PreferNoSchedule still schedulable", []corev1.Node{node(false, corev1.TaintEffectPreferNoSchedule)}, 1},
	} {
		if got := CountSchedulable(tc.nodes); got != tc.want {
			t.Errorf("%s: CountSchedulable = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestImageSet(t *testing.T) {
	pod := func(ns string, images ...string) *corev1.Pod {
		p := &corev1.Pod{}
		p.Namespace = ns
		for i, im := range images {
			c := corev1.Container{Image: im}
			if i == 0 {
				p.Spec.InitContainers = append(p.Spec.InitContainers, c)
			} else {
				p.Spec.Containers = append(p.Spec.Containers, c)
			}
		}
		return p
	}
	s := &imageSet{seen: map[string]bool{}, ignore: map[string]bool{"kube-system": true, "demo": true}}
	s.add(pod("kube-system", "registry.k8s.io/coredns/coredns:v1.15.0"))
	s.add(pod("demo", "registry.k8s.io/e2e-test-images/agnhost:2.66.1"))
	s.add(pod("loadbalancers-1", "init:1", "registry.k8s.io/e2e-test-images/agnhost:2.66.1"))
	s.add(pod("esipp-2", "registry.k8s.io/e2e-test-images/agnhost:2.66.1", "b:2"))
	want := []string{"b:2", "init:1", "registry.k8s.io/e2e-test-images/agnhost:2.66.1"}
	if got := s.list(); !slices.Equal(got, want) {
		t.Errorf("images = %q, want %q (the suite's namespaces only, init containers too)", got, want)
	}
}
