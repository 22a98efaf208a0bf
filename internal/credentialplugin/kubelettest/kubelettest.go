// Package kubelettest drives the kubelet's own image credential provider
// client (k8s.io/kubernetes/pkg/credentialprovider/plugin, built by `make
// tools` as hack/tools/kubelet-credential-harness) from tests and
// benchmarks, over the harness's JSON-lines protocol.
package kubelettest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/portside-io/portside/internal/tools"
)

// Kubelet is a running harness: one kubelet's registered plugins and cache.
type Kubelet struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *strings.Builder
	stop   sync.Once
}

// Pod says whose pull it is (service-account-token mode).
type Pod struct {
	Namespace, Name, UID, ServiceAccount string
}

// Auth is a credential the kubelet would hand the runtime.
type Auth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// LookupReply is the keyring's answer and the execs so far.
type LookupReply struct {
	Image string `json:"image"`
	Found bool   `json:"found"`
	Auths []Auth `json:"auths"`
	Execs int    `json:"execs"`
	Error string `json:"error"`
}

// BenchReply is the result of n lookups in a loop.
type BenchReply struct {
	N                int     `json:"n"`
	Seconds          float64 `json:"seconds"`
	LookupsPerSecond float64 `json:"lookupsPerSecond"`
	Execs            int     `json:"execs"`
	ExecsDuring      int     `json:"execsDuring"`
	Error            string  `json:"error"`
}

type matchReply struct {
	Matched bool   `json:"matched"`
	Error   string `json:"error"`
}

func harnessPath(t testing.TB) string {
	t.Helper()
	dir, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	path, err := tools.Path(dir, tools.KubeletCredentialHarness)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Start registers the plugins of config from binDir exactly as the
// kubelet does; it is stopped when the test ends.
func Start(t testing.TB, config, binDir, kubeconfig string) *Kubelet {
	t.Helper()
	args := []string{"--config", config, "--bin-dir", binDir}
	if kubeconfig != "" {
		args = append(args, "--kubeconfig", kubeconfig)
	}
	k := &Kubelet{cmd: exec.Command(harnessPath(t), args...), stderr: &strings.Builder{}}
	k.cmd.Stderr = k.stderr
	var err error
	if k.in, err = k.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := k.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	k.out = bufio.NewScanner(stdout)
	k.out.Buffer(make([]byte, 1<<20), 1<<20)
	if err := k.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.Stop()
		if t.Failed() {
			t.Logf("kubelet harness stderr:\n%s", k.stderr.String())
		}
	})
	return k
}

// Stop ends the harness (closing its stdin, then killing it after 10 s)
// and waits for it; also done when the test ends.
func (k *Kubelet) Stop() {
	k.stop.Do(func() {
		_ = k.in.Close()
		done := make(chan error, 1)
		go func() { done <- k.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = k.cmd.Process.Kill()
			<-done
		}
	})
}

func (k *Kubelet) call(t testing.TB, req map[string]any, reply any) {
	t.Helper()
	data, _ := json.Marshal(req)
	if _, err := k.in.Write(append(data, '\n')); err != nil {
		t.Fatalf("harness: %v\n%s", err, k.stderr.String())
	}
	if !k.out.Scan() {
		t.Fatalf("harness ended: %v\n%s", k.out.Err(), k.stderr.String())
	}
	if err := json.Unmarshal(k.out.Bytes(), reply); err != nil {
		t.Fatalf("harness reply %q: %v", k.out.Text(), err)
	}
}

// Lookup is one image pull's credential lookup for a pod.
func (k *Kubelet) Lookup(t testing.TB, image string, p Pod) LookupReply {
	t.Helper()
	var r LookupReply
	k.call(t, map[string]any{"op": "lookup", "image": image, "podNamespace": p.Namespace, "podName": p.Name,
		"podUID": p.UID, "serviceAccountName": p.ServiceAccount}, &r)
	if r.Error != "" {
		t.Fatalf("lookup %s: %s", image, r.Error)
	}
	return r
}

// Match says whether the kubelet applies pattern (a matchImages entry) to image.
func (k *Kubelet) Match(t testing.TB, pattern, image string) bool {
	t.Helper()
	var r matchReply
	k.call(t, map[string]any{"op": "match", "pattern": pattern, "image": image}, &r)
	if r.Error != "" {
		t.Fatalf("match %s %s: %s", pattern, image, r.Error)
	}
	return r.Matched
}

// Bench runs n lookups of image for p in the harness (a new keyring per
// pull, as the kubelet) and reports the rate and the execs during them.
func (k *Kubelet) Bench(t testing.TB, image string, n int, p Pod) BenchReply {
	t.Helper()
	var r BenchReply
	k.call(t, map[string]any{"op": "bench", "image": image, "n": n, "podNamespace": p.Namespace, "podName": p.Name,
		"podUID": p.UID, "serviceAccountName": p.ServiceAccount}, &r)
	if r.Error != "" {
		t.Fatalf("bench %s: %s", image, r.Error)
	}
	return r
}

// Build builds portside and the lean portside-credential-provider into
// dir, the plugin as `make build` does (static, stripped).
func Build(dir string) error {
	root, err := tools.RepoRoot()
	if err != nil {
		return err
	}
	for _, b := range []struct {
		pkg, cgo string
		flags    []string
	}{
		{"./cmd/portside", "", nil},
		{"./cmd/portside-credential-provider", "CGO_ENABLED=0", []string{"-ldflags", "-s -w"}},
	} {
		cmd := exec.Command("go", append(append([]string{"build", "-trimpath"}, b.flags...), "-o", dir+"/", b.pkg)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if b.cgo != "" {
			cmd.Env = append(cmd.Env, b.cgo)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return nil
}

// Validate loads config as the kubelet does at start (decoding, validation,
// the plugin binaries in binDir) and returns its error.
func Validate(t testing.TB, config, binDir string) error {
	t.Helper()
	out, err := exec.Command(harnessPath(t), "--config", config, "--bin-dir", binDir, "--validate-only").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Pull fetches the manifest of ref (a plain-HTTP registry on loopback) with
// a standard registry client, go-containerregistry's, as a runtime would
// with a, or anonymously when a is nil; it returns the manifest's digest.
func Pull(ref string, a *Auth) (string, error) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return "", err
	}
	var auth authn.Authenticator = authn.Anonymous
	if a != nil {
		auth = &authn.Basic{Username: a.Username, Password: a.Password}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	desc, err := remote.Get(r, remote.WithAuth(auth), remote.WithContext(ctx))
	if err != nil {
		return "", err
	}
	return desc.Digest.String(), nil
}
