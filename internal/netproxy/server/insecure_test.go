package server

import (
	"strings"
	"testing"
)

func TestCheckSecurity(t *testing.T) {
	// Each case edits a copy of NewFlags(): upstream's defaults are a TCP
	// frontend and an agent port, both plaintext, which must be refused.
	tcpMTLS := func(f *Flags) {
		f.ServerCert, f.ServerKey, f.ServerCACert = "s.crt", "s.key", "ca.crt"
	}
	agentMTLS := func(f *Flags) {
		f.ClusterCert, f.ClusterKey, f.ClusterCACert = "c.crt", "c.key", "ca.crt"
	}
	agentTokens := func(f *Flags) {
		f.ClusterCert, f.ClusterKey = "c.crt", "c.key"
		f.AgentNamespace, f.AgentServiceAccount, f.AuthAudience = "kube-system", "konnectivity-agent", "system:konnectivity-server"
	}
	uds := func(f *Flags) { f.UDSName, f.ServerPort = "/run/konnectivity/socket", 0 }
	for _, tc := range []struct {
		name string
		set  []func(*Flags)
		want []string // substrings of the error; none: accepted
	}{
		{name: "upstream's defaults", want: []string{
			"TCP frontend (--server-port=8090) would serve without TLS", "--insecure-server-port",
			"agent port (--agent-port=8091) would serve without TLS", "--insecure-agent-port"}},
		{name: "uds and agent mTLS", set: []func(*Flags){uds, agentMTLS}},
		{name: "uds and agent tokens over TLS", set: []func(*Flags){uds, agentTokens}},
		{name: "tcp mTLS and agent mTLS", set: []func(*Flags){tcpMTLS, agentMTLS}},
		{name: "tcp plaintext frontend", set: []func(*Flags){agentMTLS},
			want: []string{"would serve without TLS", "set --server-cert, --server-key and --server-ca-cert", "--uds-name", "add --insecure-server-port"}},
		{name: "tcp plaintext frontend, allowed", set: []func(*Flags){agentMTLS, func(f *Flags) { f.InsecureServerPort = true }}},
		{name: "tcp TLS frontend without client CA", set: []func(*Flags){agentMTLS, tcpMTLS, func(f *Flags) { f.ServerCACert = "" }},
			want: []string{"without client certificates (no --server-ca-cert)", "--insecure-server-port"}},
		{name: "tcp frontend CA without cert", set: []func(*Flags){agentMTLS, func(f *Flags) { f.ServerCACert = "ca.crt" }},
			want: []string{"--server-ca-cert needs --server-cert and --server-key"}},
		{name: "server cert without key", set: []func(*Flags){agentMTLS, tcpMTLS, func(f *Flags) { f.ServerKey = "" }},
			want: []string{"--server-cert and --server-key go together"}},
		{name: "abstract socket", set: []func(*Flags){agentMTLS, uds, func(f *Flags) { f.UDSName = "@konnectivity" }},
			want: []string{"--uds-name=@konnectivity is an abstract socket", "--insecure-server-port"}},
		{name: "abstract socket, allowed", set: []func(*Flags){agentMTLS, uds, func(f *Flags) { f.UDSName, f.InsecureServerPort = "@konnectivity", true }}},
		{name: "plaintext agent port", set: []func(*Flags){uds},
			want: []string{"agent port (--agent-port=8091) would serve without TLS", "set --cluster-cert and --cluster-key", "add --insecure-agent-port"}},
		{name: "plaintext agent port with tokens", set: []func(*Flags){uds, agentTokens, func(f *Flags) { f.ClusterCert, f.ClusterKey = "", "" }},
			want: []string{"would serve without TLS", "--insecure-agent-port"}},
		{name: "plaintext agent port with tokens, allowed (TLS-terminating load balancer)",
			set: []func(*Flags){uds, agentTokens, func(f *Flags) { f.ClusterCert, f.ClusterKey, f.InsecureAgentPort = "", "", true }}},
		{name: "TLS agent port without client authentication", set: []func(*Flags){uds, agentMTLS, func(f *Flags) { f.ClusterCACert = "" }},
			want: []string{"would accept agents without authentication", "--cluster-ca-cert", "--agent-namespace, --agent-service-account and --authentication-audience", "add --insecure-agent-port"}},
		{name: "TLS agent port without client authentication, allowed", set: []func(*Flags){uds, agentMTLS, func(f *Flags) { f.ClusterCACert, f.InsecureAgentPort = "", true }}},
		{name: "agent CA without serving cert", set: []func(*Flags){uds, func(f *Flags) { f.ClusterCACert, f.InsecureAgentPort = "ca.crt", true }},
			want: []string{"--cluster-ca-cert needs --cluster-cert and --cluster-key"}},
		{name: "cluster key without cert", set: []func(*Flags){uds, agentMTLS, func(f *Flags) { f.ClusterCert = "" }},
			want: []string{"--cluster-cert and --cluster-key go together"}},
		{name: "insecure cipher suite", set: []func(*Flags){uds, agentMTLS, func(f *Flags) { f.CipherSuites = []string{"TLS_RSA_WITH_RC4_128_SHA"} }},
			want: []string{"--cipher-suites: TLS_RSA_WITH_RC4_128_SHA is insecure"}},
		{name: "insecure cipher suite with the insecure flags too", set: []func(*Flags){func(f *Flags) {
			f.InsecureServerPort, f.InsecureAgentPort, f.CipherSuites = true, true, []string{"TLS_ECDHE_RSA_WITH_RC4_128_SHA"}
		}}, want: []string{"is insecure"}},
		{name: "secure cipher suites", set: []func(*Flags){uds, agentMTLS, func(f *Flags) {
			f.CipherSuites = []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}
		}}},
		{name: "TLS 1.1", set: []func(*Flags){uds, agentMTLS, func(f *Flags) { f.TLSMinVersion = "VersionTLS11" }},
			want: []string{"--tls-min-version=VersionTLS11 is below TLS 1.2"}},
		{name: "TLS 1.3", set: []func(*Flags){uds, agentMTLS, func(f *Flags) { f.TLSMinVersion = "VersionTLS13" }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFlags()
			for _, set := range tc.set {
				set(f)
			}
			err := checkSecurity(f)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
