package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
)

func TestIdentityFlags(t *testing.T) {
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
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, o Options)
	}{
		// As upstream's proxy-server: token authentication needs the audience.
		{"token auth without audience", []string{"--agent-namespace=kube-system", "--agent-service-account=konnectivity-agent", "--kubeconfig=" + kubeconfig},
			"missing --authentication-audience", nil},
		{"audience alone turns token auth on", []string{"--authentication-audience=system:konnectivity-server"},
			"missing --agent-namespace, --agent-service-account", nil},
		{"empty route-claims entry", []string{"--kubeconfig=" + kubeconfig, "--allow-route-claims=a,,b"}, "--allow-route-claims has an empty entry", nil},
		{"token auth: reviews with their own client, Nodes with the other", []string{"--agent-namespace=kube-system", "--agent-service-account=konnectivity-agent",
			"--authentication-audience=system:konnectivity-server", "--kubeconfig=" + kubeconfig, "--allow-route-claims=system:node:gw,gateways"}, "",
			func(t *testing.T, o Options) {
				if o.TokenAuth == nil || o.TokenAuth.Audience != "system:konnectivity-server" || o.NodeClient == nil || o.TokenAuth.Client == nil || o.NodeClient == o.TokenAuth.Client {
					t.Errorf("options %+v", o)
				}
				if strings.Join(o.RouteClaims, ",") != "system:node:gw,gateways" {
					t.Errorf("RouteClaims = %q", o.RouteClaims)
				}
			}},
		{"certificates: Nodes read with --kubeconfig", []string{"--kubeconfig=" + kubeconfig}, "",
			func(t *testing.T, o Options) {
				if o.TokenAuth != nil || o.NodeClient == nil {
					t.Errorf("options %+v", o)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFlags()
			fs := pflag.NewFlagSet("proxy-server", pflag.ContinueOnError)
			f.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var o Options
			err := f.identityOptions(&o, logr.Discard())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}
