package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	credv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"

	"github.com/portside-io/portside/deploy"
	"github.com/portside-io/portside/internal/credentialplugin/kubelettest"
	"github.com/portside-io/portside/internal/localcloud/registry"
	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// BenchmarkCredentialProvider: Portside's kubelet image credential provider
// against an in-process local cloud with its OCI registry (API and registry
// on loopback, the image seeded), as the kubelet runs it. Measured:
//
//   - cold exec: PORTSIDE_BENCH_CREDPROV_EXECS (default 300) execs of each
//     contender, interleaved in alternating order after a few warm-up execs
//     (page cache): lean (portside-credential-provider) and portside
//     (`portside credential-provider`), both --cloud-provider=local, the
//     request on stdin as the kubelet writes it; time from just before
//     cmd.Start to cmd.Wait returning (process start, cloud round trip,
//     response; stdout must be a response with an auth entry), p50, p99
//     and mean in ms. help is `portside-credential-provider --help` (no
//     cloud call), the process-start baseline: lean's p50 less help's is
//     the cloud round trip. RSS: the median max RSS (rusage) in MB of every
//     tenth round's extra exec through a small launcher. Not of the timed
//     execs: Go starts children with vfork, and exec records the parent's
//     peak RSS in the child's, so they would all show this process's; the
//     launcher's own peak (about 2.5 MB, logged) is the floor;
//   - cached pulls: the kubelet's own plugin client (kubelet-credential-
//     harness, `make tools`) with deploy/credential-provider's sample config
//     and the lean binary: one lookup (one exec), then
//     PORTSIDE_BENCH_CREDPROV_PULLS (200000) lookups, a new keyring per pull
//     as the kubelet; pulls/s, and execs and cloud calls during (must be 0);
//   - uncached pulls: the same against a second cloud whose credentials
//     live 1.1 s, so the plugin answers cacheDuration 0s (do not cache):
//     PORTSIDE_BENCH_CREDPROV_UNCACHED (200) lookups, each an exec and one
//     cloud call (both checked). 1.1 s, not less: the cloud truncates expiry
//     to whole seconds, so a TTL under 1 s can hand out an expired
//     credential, and one of 1.11 s or more can leave 1 s to cache.
//
// Binaries: built from this checkout, or from PORTSIDE_BENCH_CREDPROV_BIN_DIR.
// -short skips the package's kube-apiserver, which this does not use.
func BenchmarkCredentialProvider(b *testing.B) {
	r := runCredProvider(b, cpConfig{execs: envInt("PORTSIDE_BENCH_CREDPROV_EXECS", 300), warmup: 5,
		pulls: envInt("PORTSIDE_BENCH_CREDPROV_PULLS", 200000), uncached: envInt("PORTSIDE_BENCH_CREDPROV_UNCACHED", 200), upstreamECR: true})
	b.ReportMetric(0, "ns/op")
	var tbl strings.Builder
	fmt.Fprintf(&tbl, "cold exec, %d each, load %s → %s:\n%-13s %8s %8s %8s %8s %8s\n", r.cfg.execs, r.load0, r.load1, "", "p50 ms", "p99 ms", "mean ms", "min ms", "RSS MB")
	for _, k := range r.contenders {
		p50, p99, mean, lo := k.stats()
		rss := cpMedian(k.rss) / 1024
		fmt.Fprintf(&tbl, "%-13s %8.2f %8.2f %8.2f %8.2f %8.1f\n", k.name, p50, p99, mean, lo, rss)
		b.ReportMetric(p50, k.name+"-p50-ms")
		b.ReportMetric(p99, k.name+"-p99-ms")
		b.ReportMetric(mean, k.name+"-mean-ms")
		b.ReportMetric(rss, k.name+"-rss-MB")
	}
	leanP50, _, _, _ := r.contenders[0].stats()
	helpP50, _, _, _ := r.contenders[2].stats()
	fmt.Fprintf(&tbl, "lean p50 less help p50 (cloud round trip and response): %.2f ms\n", leanP50-helpP50)
	fmt.Fprintf(&tbl, "RSS of %d execs each through the launcher (its own peak %.1f MB); rusage of the timed execs says %.1f MB, this process's peak\n",
		len(r.contenders[0].rss), cpMedian(r.floor)/1024, cpMedian(r.contenders[0].direct)/1024)
	b.ReportMetric(leanP50-helpP50, "lean-cloud-ms")
	b.Logf("%s", tbl.String())
	b.ReportMetric(r.cached.LookupsPerSecond, "cached-pulls/s")
	b.ReportMetric(float64(r.cached.ExecsDuring), "cached-execs")
	b.ReportMetric(r.uncached.LookupsPerSecond, "uncached-pulls/s")
	b.ReportMetric(float64(r.uncached.ExecsDuring), "uncached-execs")
	b.Logf("kubelet plugin client: %d cached pulls %.0f/s (%d execs); %d uncached pulls %.1f/s (%d execs, %.2f ms each); load %s",
		r.cfg.pulls, r.cached.LookupsPerSecond, r.cached.ExecsDuring, r.cfg.uncached, r.uncached.LookupsPerSecond, r.uncached.ExecsDuring,
		1e3/r.uncached.LookupsPerSecond, loadAvg())
}

// TestCredentialProviderSmoke runs BenchmarkCredentialProvider's harness
// small (3 cold execs of each contender, 50 cached and 3 uncached pulls
// through the kubelet's plugin client; upstream's ECR plugin left out: it
// needs its own build), for make test. Every validated exec answered with
// a credential for the cloud's registry that the registry accepts, and the
// kubelet's cache was used, or not, as cacheDuration says (checked by the
// harness). No timing is checked.
func TestCredentialProviderSmoke(t *testing.T) {
	r := runCredProvider(t, cpConfig{execs: 3, warmup: 1, pulls: 50, uncached: 3})
	for _, k := range r.contenders {
		if len(k.lat) != r.cfg.execs {
			t.Errorf("%s: %d timed execs, want %d", k.name, len(k.lat), r.cfg.execs)
		}
		if want := r.cfg.warmup + r.cfg.execs + len(k.rss); k.validate && k.pullable != want {
			t.Errorf("%s: %d of %d answers were credentials the registry accepts", k.name, k.pullable, want)
		}
	}
	if r.cached.N != r.cfg.pulls || r.uncached.N != r.cfg.uncached {
		t.Errorf("%d cached and %d uncached pulls, want %d and %d", r.cached.N, r.uncached.N, r.cfg.pulls, r.cfg.uncached)
	}
}

// cpConfig is one run of the credential provider harness.
type cpConfig struct {
	// execs timed cold execs of each contender, after warmup rounds;
	// pulls cached and uncached lookups through the kubelet's client.
	execs, warmup, pulls, uncached int
	// upstreamECR adds upstream's ECR plugin (built from hack/bench-tools).
	upstreamECR bool
}

type cpResult struct {
	cfg          cpConfig
	contenders   []*cpContender // lean, portside, help[, upstream-ecr]
	floor        []float64      // the launcher's own peak RSS, KiB
	load0, load1 string
	cached       kubelettest.BenchReply
	uncached     kubelettest.BenchReply
}

func runCredProvider(tb testing.TB, cfg cpConfig) cpResult {
	binDir := os.Getenv("PORTSIDE_BENCH_CREDPROV_BIN_DIR")
	if binDir == "" {
		binDir = tb.TempDir()
		if err := kubelettest.Build(binDir); err != nil {
			tb.Fatal(err)
		}
	}
	lean, full := filepath.Join(binDir, "portside-credential-provider"), filepath.Join(binDir, "portside")
	launcher := cpBuildLauncher(tb)
	c := cpStartCloud(tb, time.Hour)
	image := c.registry + "/portside/hello:1.0"
	req := []byte(`{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"` + image + `"}`)
	flags := []string{"--cloud-provider=local", "--cloud-config=" + c.config}

	// Cold exec latency, interleaved.
	contenders := []*cpContender{
		{name: "lean", argv: append([]string{lean}, flags...), validate: true},
		{name: "portside", argv: append([]string{full, "credential-provider"}, flags...), validate: true},
		{name: "help", argv: []string{lean, "--help"}},
	}
	if ecr := ""; cfg.upstreamECR {
		if ecr = cpUpstreamECR(tb); ecr != "" {
			// For scale (P6): upstream's plugin starting and failing fast
			// without AWS (instance metadata disabled), as measured in the brief.
			contenders = append(contenders, &cpContender{name: "upstream-ecr", argv: []string{ecr, "get-credentials"}, failing: true,
				req: []byte(`{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"123456789012.dkr.ecr.us-east-1.amazonaws.com/app:1"}`),
				env: []string{"AWS_EC2_METADATA_DISABLED=true", "AWS_REGION=us-east-1"}})
		}
	}
	r := cpResult{cfg: cfg, contenders: contenders, load0: loadAvg()}
	for range cfg.warmup {
		for _, k := range contenders {
			cpExec(tb, k, req, c.registry, "")
		}
	}
	for _, k := range contenders {
		k.lat, k.direct = k.lat[:0], k.direct[:0]
	}
	for i := range cfg.execs {
		for j := range contenders {
			if i%2 == 1 {
				j = len(contenders) - 1 - j
			}
			cpExec(tb, contenders[j], req, c.registry, "")
			if i%10 == 0 {
				r.floor = append(r.floor, cpExec(tb, contenders[j], req, c.registry, launcher))
			}
		}
	}
	r.load1 = loadAvg()

	// Pulls through the kubelet's cache.
	pod := kubelettest.Pod{}
	k := kubelettest.Start(tb, cpSampleConfig(tb, c.registry, c.config), binDir, "")
	if l := k.Lookup(tb, image, pod); !l.Found || len(l.Auths) != 1 || l.Execs != 1 {
		tb.Fatalf("first lookup = %+v, want one credential from one exec", l)
	} else if err := cpPull(c.registry, l.Auths[0].Username, l.Auths[0].Password); err != nil {
		tb.Fatalf("the kubelet's credential: %v", err)
	}
	calls := c.calls.Load()
	r.cached = k.Bench(tb, image, cfg.pulls, pod)
	if r.cached.ExecsDuring != 0 || c.calls.Load() != calls {
		tb.Fatalf("%d cached pulls exec'd the plugin %d times (%d cloud calls): want none", cfg.pulls, r.cached.ExecsDuring, c.calls.Load()-calls)
	}

	// Uncached: a cloud whose credentials are too short-lived to cache.
	short := cpStartCloud(tb, 1100*time.Millisecond)
	shortImage := short.registry + "/portside/hello:1.0"
	shortReq := bytes.ReplaceAll(req, []byte(c.registry), []byte(short.registry))
	sk := &cpContender{name: "lean", argv: []string{lean, "--cloud-provider=local", "--cloud-config=" + short.config}, validate: true}
	if cpExec(tb, sk, shortReq, short.registry, ""); sk.resp.CacheDuration == nil || sk.resp.CacheDuration.Duration != 0 {
		tb.Fatalf("a 1.1 s credential: cacheDuration %v, want 0s", sk.resp.CacheDuration)
	}
	ku := kubelettest.Start(tb, cpSampleConfig(tb, short.registry, short.config), binDir, "")
	first := ku.Lookup(tb, shortImage, pod)
	if !first.Found || first.Execs != 1 {
		tb.Fatalf("first lookup = %+v, want one credential from one exec", first)
	}
	calls = short.calls.Load()
	r.uncached = ku.Bench(tb, shortImage, cfg.uncached, pod)
	if r.uncached.ExecsDuring != cfg.uncached || short.calls.Load()-calls != int64(cfg.uncached) {
		tb.Fatalf("%d uncached pulls: %d execs, %d cloud calls; want %d of each", cfg.uncached, r.uncached.ExecsDuring, short.calls.Load()-calls, cfg.uncached)
	}
	if last := ku.Lookup(tb, shortImage, pod); !last.Found || last.Execs != cfg.uncached+2 {
		tb.Fatalf("lookup after the uncached pulls = %+v, want a credential from exec %d", last, cfg.uncached+2)
	}
	return r
}

// cpPull fetches the seeded image's manifest from the registry with the
// credential: a credential for another registry, or a made-up one, is
// refused there.
func cpPull(registryHost, user, pass string) error {
	req, err := http.NewRequest(http.MethodGet, "http://"+registryHost+"/v2/portside/hello/manifests/1.0", nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth(user, pass)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET the manifest from %s with the credential: %s", registryHost, resp.Status)
	}
	return nil
}

type cpContender struct {
	name     string
	argv     []string
	validate bool
	// req and env replace the shared request and add to the environment;
	// failing: the exec is expected to fail (upstream's ECR plugin, which
	// has no AWS to ask here).
	req     []byte
	env     []string
	failing bool
	lat     []time.Duration
	rss     []float64 // max RSS per exec through the launcher, KiB
	direct  []float64 // max RSS per timed exec, KiB: the parent's peak
	resp    *credv1.CredentialProviderResponse
	// pullable counts the answers whose credential the registry accepted.
	pullable int
}

// stats returns p50, p99, mean and min in ms.
func (k *cpContender) stats() (p50, p99, mean, lo float64) {
	ms := make([]float64, len(k.lat))
	var sum float64
	for i, d := range k.lat {
		ms[i] = float64(d.Nanoseconds()) / 1e6
		sum += ms[i]
	}
	slices.Sort(ms)
	pct := func(p float64) float64 { return ms[max(0, int(float64(len(ms))*p+0.999999)-1)] }
	return pct(0.50), pct(0.99), sum / float64(len(ms)), ms[0]
}

func cpMedian(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[(len(s)-1)/2]
}

// cpExec execs k once as the kubelet does; validated contenders must answer
// with a credential. Direct, it records the latency (start to exit); through
// launcher, the max RSS, and returns the launcher's own peak RSS (KiB).
func cpExec(b testing.TB, k *cpContender, req []byte, registryHost, launcher string) float64 {
	argv := k.argv
	if launcher != "" {
		argv = append([]string{launcher}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if k.req != nil {
		req = k.req
	}
	cmd.Stdin = bytes.NewReader(req)
	if k.env != nil {
		cmd.Env = append(os.Environ(), k.env...)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	err := cmd.Wait()
	elapsed := time.Since(start)
	if (err != nil) != k.failing {
		b.Fatalf("%s: %v (expected to fail: %v)\nstdout %q\nstderr %q", k.name, err, k.failing, out.String(), errOut.String())
	}
	if k.validate {
		k.resp = &credv1.CredentialProviderResponse{}
		if err := json.Unmarshal(out.Bytes(), k.resp); err != nil || k.resp.Kind != "CredentialProviderResponse" {
			b.Fatalf("%s: stdout %q is not a CredentialProviderResponse (%v); stderr %q", k.name, out.String(), err, errOut.String())
		}
		a, ok := k.resp.Auth[registryHost]
		if !ok || a.Username == "" || a.Password == "" || len(k.resp.Auth) != 1 {
			b.Fatalf("%s: response has no credential for %s alone: %s", k.name, registryHost, out.String())
		}
		// Outside the timed part: the credential must open the registry.
		if err := cpPull(registryHost, a.Username, a.Password); err != nil {
			b.Fatalf("%s: %v", k.name, err)
		}
		k.pullable++
	}
	if launcher == "" {
		k.lat = append(k.lat, elapsed)
		k.direct = append(k.direct, float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss))
		return 0
	}
	var rss, floor float64
	_, line, _ := strings.Cut(errOut.String(), "\nmaxrss-kib ")
	if _, err := fmt.Sscanf(line, "%g floor-kib %g", &rss, &floor); err != nil {
		b.Fatalf("launcher: %q: %v", errOut.String(), err)
	}
	k.rss = append(k.rss, rss)
	return floor
}

// cpLauncher runs its arguments as a child and reports the child's max RSS
// and its own peak: a small parent, so the child's figure is its own.
const cpLauncher = `package main

import ("bytes"; "fmt"; "os"; "os/exec"; "syscall")

func main() {
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run() // a child that did not start: ProcessState is nil, a panic
	status, _ := os.ReadFile("/proc/self/status")
	_, hwm, _ := bytes.Cut(status, []byte("VmHWM:"))
	fmt.Fprintf(os.Stderr, "\nmaxrss-kib %d floor-kib %s\n", cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss, bytes.Fields(hwm)[0])
	if err != nil {
		os.Exit(1)
	}
}
`

func cpBuildLauncher(b testing.TB) string {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(cpLauncher), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", "launcher", "main.go")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the RSS launcher: %v\n%s", err, out)
	}
	return filepath.Join(dir, "launcher")
}

// cpCloud is a local cloud with its registry, seeded with the small image;
// calls counts its credential requests.
type cpCloud struct {
	registry string // host:port
	config   string // the local provider's cloud config file
	calls    *atomic.Int64
}

// cpStartCloud runs a local cloud whose credentials live ttl, its API and
// registry on free loopback ports, until the benchmark ends.
func cpStartCloud(b testing.TB, ttl time.Duration) *cpCloud {
	b.Helper()
	dir := b.TempDir()
	token := fmt.Sprintf("bench-%d", rand.Int64())
	srv, err := server.New(context.Background(), filepath.Join(dir, server.StateFile), server.Options{Token: token, CredentialTTL: ttl})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	rs := httptest.NewUnstartedServer(nil)
	host := rs.Listener.Addr().String()
	if rs.Config.Handler, err = srv.ServeRegistry(host); err != nil {
		b.Fatal(err)
	}
	rs.Start()
	calls := &atomic.Int64{}
	h := srv.Handler()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/credentials" {
			calls.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	b.Cleanup(func() { api.Close(); rs.Close() })

	c := &cpCloud{registry: host, config: filepath.Join(dir, "cloud.yaml"), calls: calls}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(c.config, []byte("endpoint: "+api.URL+"\ntokenFile: "+tokenFile+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	if _, err := registry.SeedServed(context.Background(), client.New(api.URL, token), ""); err != nil {
		b.Fatal(err)
	}
	return c
}

// cpSampleConfig is deploy/credential-provider/credential-provider-config.yaml
// as written, with only the registry address and cloud config path made
// this benchmark's.
// cpUpstreamECR builds upstream's ecr-credential-provider (k8s.io/cloud-
// provider-aws v1.37.1, pinned in hack/bench-tools) once into
// _output/bench-tools; "" when it cannot be built (then it is left out).
func cpUpstreamECR(b testing.TB) string {
	root, err := tools.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(root, "_output", "bench-tools", "ecr-credential-provider-v1.37.1")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "k8s.io/cloud-provider-aws/cmd/ecr-credential-provider")
	cmd.Dir = filepath.Join(root, "hack", "bench-tools", "ecr-credential-provider")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Logf("upstream ecr-credential-provider left out: go build: %v\n%s", err, msg)
		return ""
	}
	return out
}

func cpSampleConfig(b testing.TB, registryHost, cloudConfig string) string {
	b.Helper()
	data, err := deploy.CredentialProviderConfig(false, registryHost, "portside-credential-provider", cloudConfig)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "credential-provider-config.yaml")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}
