package realnode

import (
	"slices"
	"strings"
	"testing"
)

func withAgent(c *BootConfig) *BootConfig {
	c.ProxyAgent = &ProxyAgent{Bin: "/t/portside", Server: "198.18.0.1:8132", CAFile: "/d/ca.crt",
		CertFile: "/d/proxy-agent-node-1.crt", KeyFile: "/d/proxy-agent-node-1.key"}
	return c
}

func TestValidateProxyAgent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*ProxyAgent)
		want   string
	}{
		{"valid", func(*ProxyAgent) {}, ""},
		{"health port set", func(a *ProxyAgent) { a.HealthPort = 18093 }, ""},
		{"relative binary", func(a *ProxyAgent) { a.Bin = "portside" }, `proxyAgent.bin "portside": want an absolute path`},
		{"no CA", func(a *ProxyAgent) { a.CAFile = "" }, `proxyAgent.caFile "": want an absolute path`},
		{"no client certificate", func(a *ProxyAgent) { a.CertFile = "" }, `proxyAgent.certFile ""`},
		{"no client key", func(a *ProxyAgent) { a.KeyFile = "k.key" }, `proxyAgent.keyFile "k.key"`},
		{"server without port", func(a *ProxyAgent) { a.Server = "198.18.0.1" }, `proxyAgent.server "198.18.0.1"`},
		{"server port out of range", func(a *ProxyAgent) { a.Server = "198.18.0.1:70000" }, `proxyAgent.server "198.18.0.1:70000"`},
		{"server without host", func(a *ProxyAgent) { a.Server = ":8132" }, `proxyAgent.server ":8132"`},
		{"health port out of range", func(a *ProxyAgent) { a.HealthPort = 65536 }, "proxyAgent.healthPort 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := withAgent(validConfig())
			tc.mutate(c.ProxyAgent)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestAgentArgs: the agent's ID and identifiers are the node's own name
// and address (the only ones the server grants a system:node:<name>
// certificate), whatever the family of the address.
func TestAgentArgs(t *testing.T) {
	for _, tc := range []struct {
		name, nodeIP string
		health       int
		upstream     bool
		want         []string
	}{
		{"IPv4 node", "198.18.0.11", 0, false, []string{"--agent-id=node-1", "--agent-identifiers=host=node-1&ipv4=198.18.0.11",
			"--health-server-host=198.18.0.11", "--health-server-port=8093", "--admin-bind-address=127.0.0.1", "--admin-server-port=8094"}},
		{"IPv6 node", "fd12::11", 18093, false, []string{"--agent-identifiers=host=node-1&ipv6=fd12%3A%3A11",
			"--health-server-host=fd12::11", "--health-server-port=18093", "--admin-server-port=18094"}},
		// Upstream's agent (up --network-proxy-binaries): the same
		// identity and ports, no subcommand and no --drain-timeout,
		// which it would refuse.
		{"upstream's agent", "198.18.0.11", 0, true, []string{"--agent-id=node-1", "--agent-identifiers=host=node-1&ipv4=198.18.0.11",
			"--health-server-host=198.18.0.11", "--health-server-port=8093", "--admin-server-port=8094"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := withAgent(validConfig())
			c.NodeIP, c.ProxyAgent.HealthPort, c.ProxyAgent.Upstream = tc.nodeIP, tc.health, tc.upstream
			args := agentArgs(c)
			if got := args[0] == "proxy-agent"; got == tc.upstream {
				t.Errorf("args %q: the proxy-agent subcommand first is %v, want %v", args, got, !tc.upstream)
			}
			if got := slices.Contains(args, "--drain-timeout=1s"); got == tc.upstream {
				t.Errorf("args %q: --drain-timeout=1s is there %v, want %v", args, got, !tc.upstream)
			}
			for _, w := range append(tc.want, "--proxy-server-host=198.18.0.1", "--proxy-server-port=8132", "--ca-cert=/d/ca.crt",
				"--agent-cert=/d/proxy-agent-node-1.crt", "--agent-key=/d/proxy-agent-node-1.key") {
				if !slices.Contains(args, w) {
					t.Errorf("args %q lack %q", args, w)
				}
			}
		})
	}
}

// TestAgentPaths: the binary's and the credentials' directories stay
// visible inside the machine (a binary under /tmp would otherwise be
// hidden by the machine's own /tmp).
func TestAgentPaths(t *testing.T) {
	if p := (*ProxyAgent)(nil).paths(); p != nil {
		t.Errorf("no agent: paths %q, want none", p)
	}
	a := &ProxyAgent{Bin: "/tmp/x/portside", CAFile: "/d/ca.crt", CertFile: "/e/a.crt", KeyFile: "/e/a.key"}
	if got, want := a.paths(), []string{"/tmp/x", "/d", "/e", "/e"}; !slices.Equal(got, want) {
		t.Errorf("paths %q, want %q", got, want)
	}
}
