// Package upstreammanifest reads the command line of the cloud controller
// manager container in an upstream manifest (Deployment, DaemonSet or Pod),
// so tests can run `portside ccm` with exactly the flags a stock manifest
// gives upstream's.
package upstreammanifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Args returns the flags the CCM container of the manifest at path runs
// with: command and args, $(VAR) expanded from the container's env as the
// kubelet does, the binary (leading words that are not flags) dropped.
func Args(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var containers []corev1.Container
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var spec *corev1.PodSpec
		var obj any
		switch meta.Kind {
		case "Deployment":
			d := &appsv1.Deployment{}
			obj, spec = d, &d.Spec.Template.Spec
		case "DaemonSet":
			d := &appsv1.DaemonSet{}
			obj, spec = d, &d.Spec.Template.Spec
		case "Pod":
			p := &corev1.Pod{}
			obj, spec = p, &p.Spec
		default:
			continue
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, meta.Kind, err)
		}
		containers = append(containers, spec.Containers...)
	}
	if len(containers) != 1 {
		return nil, fmt.Errorf("%s: want one CCM container, got %d", path, len(containers))
	}
	c := containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	var argv []string
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		argv = append(argv, expandEnv(a, env))
	}
	for len(argv) > 0 && !strings.HasPrefix(argv[0], "-") {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("%s: no flags", path)
	}
	return argv, nil
}

var envRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandEnv expands $(VAR) as the kubelet does: defined variables only,
// $$ for a literal $.
func expandEnv(s string, env map[string]string) string {
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// StandIns replaces the values of the flags in replace (name without
// dashes → value), in both --flag=value and --flag value forms, and adds
// those the manifest lacks: what the pod gets from its cluster (provider,
// its config, the in-cluster client) becomes the test's.
func StandIns(argv []string, replace map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		v, ok := replace[name]
		if !ok {
			out = append(out, a)
			continue
		}
		seen[name] = true
		out = append(out, "--"+name+"="+v)
		if !hasValue && i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
			i++ // --flag value
		}
	}
	names := make([]string, 0, len(replace))
	for name := range replace {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !seen[name] {
			out = append(out, "--"+name+"="+replace[name])
		}
	}
	return out
}
