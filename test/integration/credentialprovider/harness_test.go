package credentialprovider

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/tools"
)

var bins struct {
	once sync.Once
	dir  string
	err  error
}

// binaries builds portside and portside-credential-provider once per test
// binary run and returns the directory holding them.
func binaries(t testing.TB) string {
	t.Helper()
	bins.once.Do(func() {
		root, err := tools.RepoRoot()
		if err != nil {
			bins.err = err
			return
		}
		if bins.dir, err = os.MkdirTemp("", "credprov-bin-"); err != nil {
			bins.err = err
			return
		}
		cmd := exec.Command("go", "build", "-trimpath", "-o", bins.dir+"/", "./cmd/portside", "./cmd/portside-credential-provider")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			bins.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.dir
}

// installPlugin copies the lean plugin into a fresh kubelet plugin
// directory under name, as an operator would.
func installPlugin(t testing.TB, name string) string {
	t.Helper()
	src := filepath.Join(binaries(t), "portside-credential-provider")
	dir := t.TempDir()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// kubelet drives the kubelet's own credential-provider plugin client
// (hack/tools/kubelet-credential-harness, built from k8s.io/kubernetes by
// `make tools`) over its JSON-lines protocol.
type kubelet struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *strings.Builder
}

type pod struct {
	Namespace, Name, UID, ServiceAccount string
}

type auth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

type lookupReply struct {
	Image string `json:"image"`
	Found bool   `json:"found"`
	Auths []auth `json:"auths"`
	Execs int    `json:"execs"`
	Error string `json:"error"`
}

type benchReply struct {
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

// startKubelet registers the plugins of config from binDir exactly as the
// kubelet does; it is stopped when the test ends.
func startKubelet(t testing.TB, config, binDir, kubeconfig string) *kubelet {
	t.Helper()
	args := []string{"--config", config, "--bin-dir", binDir}
	if kubeconfig != "" {
		args = append(args, "--kubeconfig", kubeconfig)
	}
	k := &kubelet{cmd: exec.Command(harnessPath(t), args...), stderr: &strings.Builder{}}
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
		_ = k.in.Close()
		done := make(chan error, 1)
		go func() { done <- k.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = k.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("kubelet harness stderr:\n%s", k.stderr.String())
		}
	})
	return k
}

func (k *kubelet) call(t testing.TB, req map[string]any, reply any) {
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

// lookup is one image pull's credential lookup for a pod.
func (k *kubelet) lookup(t testing.TB, image string, p pod) lookupReply {
	t.Helper()
	var r lookupReply
	k.call(t, map[string]any{"op": "lookup", "image": image, "podNamespace": p.Namespace, "podName": p.Name,
		"podUID": p.UID, "serviceAccountName": p.ServiceAccount}, &r)
	if r.Error != "" {
		t.Fatalf("lookup %s: %s", image, r.Error)
	}
	return r
}

func (k *kubelet) match(t testing.TB, pattern, image string) bool {
	t.Helper()
	var r matchReply
	k.call(t, map[string]any{"op": "match", "pattern": pattern, "image": image}, &r)
	if r.Error != "" {
		t.Fatalf("match %s %s: %s", pattern, image, r.Error)
	}
	return r.Matched
}
