package server

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
)

// TestReviewFlags: the review limits reach TokenAuth and the stream caps
// reach Options, and the review client has its own QPS and burst, apart
// from --kubeconfig-qps.
func TestReviewFlags(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--agent-namespace=kube-system", "--agent-service-account=konnectivity-agent",
		"--authentication-audience=system:konnectivity-server", "--kubeconfig=" + kubeconfig, "--kubeconfig-qps=7", "--kubeconfig-burst=9"}
	for _, tc := range []struct {
		name                 string
		args                 []string
		inFlight             int
		timeout, ttl, denial time.Duration
		qps                  float32
		burst                int
		limits               StreamLimits
	}{
		{"defaults", nil, DefaultReviewMaxInFlight, DefaultReviewTimeout, DefaultReviewCacheTTL, DefaultReviewDenialTTL,
			DefaultReviewQPS, DefaultReviewBurst, StreamLimits{DefaultMaxStreamsPerConnection, DefaultMaxUnauthenticatedStreamsPerPeer}},
		{"set", []string{"--token-review-max-in-flight=3", "--token-review-timeout=2s", "--token-review-cache-ttl=1m",
			"--token-review-denial-ttl=-1s", "--token-review-qps=11", "--token-review-burst=12",
			"--max-agent-streams-per-connection=2", "--max-unauthenticated-streams-per-peer=-1"},
			3, 2 * time.Second, time.Minute, -time.Second, 11, 12, StreamLimits{2, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFlags()
			fs := pflag.NewFlagSet("proxy-server", pflag.ContinueOnError)
			f.AddFlags(fs)
			if err := fs.Parse(append(append([]string{}, base...), tc.args...)); err != nil {
				t.Fatal(err)
			}
			var o Options
			if err := f.identityOptions(&o, logr.Discard()); err != nil {
				t.Fatal(err)
			}
			a := o.TokenAuth
			if a.MaxInFlight != tc.inFlight || a.Timeout != tc.timeout || a.CacheTTL != tc.ttl || a.DenialTTL != tc.denial {
				t.Errorf("TokenAuth limits = %d %s %s %s", a.MaxInFlight, a.Timeout, a.CacheTTL, a.DenialTTL)
			}
			cfg, err := f.reviewConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.QPS != tc.qps || cfg.Burst != tc.burst {
				t.Errorf("review client QPS/burst = %v/%d, want %v/%d", cfg.QPS, cfg.Burst, tc.qps, tc.burst)
			}
			if other, _ := f.restConfig(); other.QPS != 7 || other.Burst != 9 {
				t.Errorf("other client QPS/burst = %v/%d, want --kubeconfig-qps/burst 7/9", other.QPS, other.Burst)
			}
			if l := f.streamLimits(); l != tc.limits {
				t.Errorf("StreamLimits = %+v, want %+v", l, tc.limits)
			}
		})
	}
}
