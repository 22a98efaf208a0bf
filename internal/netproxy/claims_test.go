package netproxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
)

// TestUnprovenAgentClaimsIgnored: an agent with no identity (plaintext,
// or a certificate that names no node) claims to serve 127.0.0.1, every
// address (cidr=0.0.0.0/0) and the default route. Nothing proves any of
// it, so under strategies that route by those claims no dial may reach
// it; with the default strategy (any agent) the same agent serves the
// dial, so the refusal is the claims' doing. Node-bound agents are
// re-decided when they attach and covered by test/integration/netproxy
// TestImpostorAgent; this is the path without a Node.
func TestUnprovenAgentClaimsIgnored(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	claims := func(o *agent.Options) {
		o.AgentIdentifiers = "ipv4=127.0.0.1&host=127.0.0.1&cidr=0.0.0.0%2F0&default-route=true"
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			for _, tc := range []struct {
				strategies string
				reach      bool
			}{
				{"destHost,portsideDestCIDR,defaultRoute", false},
				{"destHost,default", true},
			} {
				strategies, err := server.ParseStrategies(tc.strategies)
				if err != nil {
					t.Fatal(err)
				}
				st := startStackFor(t, m, server.Options{Strategies: strategies}, claims)
				// The tunnel lives as long as the dial's context.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				c, err := dialUDS(ctx, st.uds, echo)
				if tc.reach {
					if err != nil {
						t.Fatalf("%s: dial through the agent: %v", tc.strategies, err)
					}
					if err := roundTrip(c, 1024); err != nil {
						t.Fatalf("%s: %v", tc.strategies, err)
					}
					_ = c.Close()
				} else if err == nil {
					_ = c.Close()
					t.Fatalf("%s: a dial of %s reached an agent by its unproven claims", tc.strategies, echo)
				} else if !strings.Contains(err.Error(), "No agent available") {
					t.Errorf("%s: refused with %v, want no agent available", tc.strategies, err)
				}
				cancel()
				st.stop()
			}
		})
	}
}
