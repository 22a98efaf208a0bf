package netproxy

import (
	"net/http"
	"testing"
	"time"
)

// TestDeprecatedReadyPath: upstream's server serves its readiness on the
// deprecated /ready as on /readyz (probes written for old releases use
// it); each server answers both alike, before an agent connects (not
// ready: 5xx) and after (200 ok), and /healthz is 200 throughout.
func TestDeprecatedReadyPath(t *testing.T) {
	for _, kind := range []proxyKind{kindANP, kindPortside} {
		t.Run(string(kind), func(t *testing.T) {
			e := newFaultEnv(t, proxyCombo{kind, kind})
			cfg := e.serverConfig("h-"+string(kind), 1)
			server := e.startServer(cfg)
			same := func(wantReady bool) {
				t.Helper()
				body, code, err := httpGet(server.health + "/readyz")
				if err != nil {
					t.Fatal(err)
				}
				oldBody, oldCode, err := httpGet(server.health + "/ready")
				if err != nil {
					t.Fatal(err)
				}
				if oldCode != code || oldBody != body {
					t.Errorf("/ready = %d %q; /readyz = %d %q: want the same answer", oldCode, oldBody, code, body)
				}
				if ready := code == http.StatusOK; ready != wantReady || (!ready && code < 500) {
					t.Errorf("/readyz = %d %q; want ready=%v (200, or 5xx when not)", code, body, wantReady)
				}
				if _, hc, err := httpGet(server.health + "/healthz"); err != nil || hc != http.StatusOK {
					t.Errorf("/healthz = %d %v; want 200", hc, err)
				}
			}
			same(false)
			e.startAgent("a1", cfg.AgentPort)
			server.waitReady(t, 15*time.Second)
			same(true)
		})
	}
}
