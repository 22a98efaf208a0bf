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
	if err != nil || len(parsed) != 1 || parsed[0].Token != tok || strings.Join(parsed[0].Scopes, ",") != server.ScopeRegistryPullCredentials {
		t.Fatalf("scoped-token file %q: %+v %v, want the node token with %s only", data, parsed, err, server.ScopeRegistryPullCredentials)
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
}
