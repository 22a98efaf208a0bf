package devenv

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// TestNodeTokenIsPullOnly: the files `up` writes for the nodes' credential
// plugin are 0600 (a stale group-readable scoped-token file is replaced),
// the token survives a rerun, and the real cloud serving with them gives
// that token pull credentials and nothing else.
func TestNodeTokenIsPullOnly(t *testing.T) {
	dir := t.TempDir()
	scopedPath := filepath.Join(dir, server.ScopedTokenFile)
	if err := os.WriteFile(scopedPath, []byte("# stale\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile, scoped, err := writeNodeToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{tokenFile, scoped} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v %v, want 0600", p, fi.Mode(), err)
		}
	}
	tok, err := client.ReadTokenFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if again, _, err := writeNodeToken(dir); err != nil {
		t.Fatal(err)
	} else if tok2, _ := client.ReadTokenFile(again); tok2 != tok {
		t.Fatalf("rerun changed the node token")
	}
	data, _ := os.ReadFile(scoped)
	parsed, err := server.ParseScopedTokens(scoped, string(data))
	if err != nil || len(parsed) != 2 || parsed[0].Token != tok || strings.Join(parsed[0].Scopes, ",") != server.ScopeRegistryPullCredentials {
		t.Fatalf("scoped-token file %q: %+v %v, want the node token with %s only, then the CCM's", data, parsed, err, server.ScopeRegistryPullCredentials)
	}
	if ccmTok, _ := client.ReadTokenFile(filepath.Join(dir, clusterCCMTokenFile)); parsed[1].Token != ccmTok || ccmTok == tok ||
		strings.Join(parsed[1].Scopes, ",") != "read,load-balancers,routes" {
		t.Fatalf("the in-cluster CCM's line %+v: want its own token (%s) with read, load-balancers and routes", parsed[1], clusterCCMTokenFile)
	}

	ctx, cancel := context.WithCancel(context.Background())
	endpoint := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.RunOptions{DataDir: filepath.Join(dir, "cloud"), Listen: "127.0.0.1:0", ScopedTokenFile: scoped,
			Ready: func(e string) { endpoint <- e }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cloud: %v", err)
		}
	})
	var e string
	select {
	case e = <-endpoint:
	case err := <-done:
		t.Fatalf("cloud did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("cloud not serving after 30s")
	}
	adminTok, err := client.ReadTokenFile(filepath.Join(dir, "cloud", server.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	admin, node := client.New(e, adminTok), client.New(e, tok)
	if _, err := admin.CreateRegistry(ctx, "registry.example.com"); err != nil {
		t.Fatal(err)
	}
	if c, err := node.Credential(ctx, api.CredentialRequest{Image: "registry.example.com/app:1"}); err != nil || c.Push {
		t.Fatalf("node pull credential: %+v %v", c, err)
	}
	for name, call := range map[string]func() error{
		"delete a load balancer": func() error { return node.DeleteLoadBalancer(ctx, "lb-1") },
		"push credentials": func() error {
			_, err := node.Credential(ctx, api.CredentialRequest{Image: "registry.example.com/app:1", Push: true})
			return err
		},
		"set faults": func() error { return node.SetFaults(ctx, api.Faults{}) },
	} {
		var se *client.StatusError
		if err := call(); !errors.As(err, &se) || se.Status != http.StatusForbidden || !strings.Contains(se.Message, "lacks scope") {
			t.Errorf("%s with the node token: %v, want 403 naming the missing scope", name, err)
		}
	}
	ccmTok, _ := client.ReadTokenFile(filepath.Join(dir, clusterCCMTokenFile))
	ccm := client.New(e, ccmTok)
	if _, err := ccm.ListInstances(ctx, ""); err != nil {
		t.Errorf("the in-cluster CCM's token cannot list instances: %v", err)
	}
	if err := ccm.DeleteLoadBalancer(ctx, "lb-1"); err != nil && !strings.Contains(err.Error(), "404") && !strings.Contains(err.Error(), "not found") {
		t.Errorf("the in-cluster CCM's token cannot delete a load balancer: %v", err)
	}
	for name, call := range map[string]func() error{
		"create an instance": func() error {
			_, err := ccm.CreateInstance(ctx, api.CreateInstanceRequest{Name: "x", Zone: "zone-a"})
			return err
		},
		"pull credentials": func() error {
			_, err := ccm.Credential(ctx, api.CredentialRequest{Image: "registry.example.com/app:1"})
			return err
		},
		"set faults": func() error { return ccm.SetFaults(ctx, api.Faults{}) },
	} {
		var se *client.StatusError
		if err := call(); !errors.As(err, &se) || se.Status != http.StatusForbidden || !strings.Contains(se.Message, "lacks scope") {
			t.Errorf("%s with the in-cluster CCM's token: %v, want 403 naming the missing scope", name, err)
		}
	}
}
