package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// TestEveryRouteHasAScope enumerates the routes Handler registers: each
// must have a scope (a new route without one fails here), and every scope
// mapping must name a route (a removed route leaves none behind).
func TestEveryRouteHasAScope(t *testing.T) {
	routes := (&Server{}).v1Routes()
	registered := map[string]bool{"": true} // "" is the mux's redirects
	for _, rt := range routes {
		registered[rt.pattern] = true
		scope, ok := requiredScope(rt.pattern)
		if !ok {
			t.Errorf("route %q has no scope: add it to routeScopes", rt.pattern)
			continue
		}
		if scope != scopeNone && !slices.Contains(AllScopes, scope) {
			t.Errorf("route %q needs scope %q, which is not in AllScopes", rt.pattern, scope)
		}
	}
	for pattern := range routeScopes {
		if !registered[pattern] {
			t.Errorf("routeScopes maps %q, which is no route", pattern)
		}
	}
}

// TestScopeDecisions: for every route, a token holding exactly the route's
// scope may call it, one holding every other scope may not (unless the
// route needs none), and the admin token may call everything.
func TestScopeDecisions(t *testing.T) {
	for _, rt := range (&Server{}).v1Routes() {
		need, _ := requiredScope(rt.pattern)
		others := map[string]bool{}
		for _, sc := range AllScopes {
			others[sc] = sc != need
		}
		if need == ScopeRegistryPullCredentials {
			others[ScopeRegistryPushCredentials] = false // push implies pull
		}
		cases := []struct {
			name string
			g    grant
			want bool
		}{
			{"admin", grant{admin: true}, true},
			{"exact scope", grant{scopes: map[string]bool{need: true}}, true},
			{"every other scope", grant{scopes: others}, need == scopeNone},
			{"no scope", grant{}, need == scopeNone},
		}
		for _, c := range cases {
			if got := c.g.allows(need); got != c.want {
				t.Errorf("%s with %s: allowed %v, want %v", rt.pattern, c.name, got, c.want)
			}
		}
	}
	if credentialScope(false) != ScopeRegistryPullCredentials || credentialScope(true) != ScopeRegistryPushCredentials {
		t.Errorf("credential scopes: pull %q, push %q", credentialScope(false), credentialScope(true))
	}
}

func TestParseScopedTokens(t *testing.T) {
	tok := strings.Repeat("a", 24)
	cases := []struct {
		name, data, wantErr string
		wantScopes          map[string]bool
	}{
		{"pull only", "# nodes\n\n" + tok + " registry-pull-credentials\n", "", map[string]bool{ScopeRegistryPullCredentials: true}},
		{"push implies pull", tok + " read,registry-push-credentials", "",
			map[string]bool{ScopeRead: true, ScopeRegistryPullCredentials: true, ScopeRegistryPushCredentials: true}},
		{"no scopes", tok, "line 1: want `<token> <scope>", nil},
		{"unknown scope", "\n" + tok + " read,delete-everything", `line 2: unknown scope "delete-everything": want one of read,`, nil},
		{"short token", "abc read", "line 1: the token is 3 characters", nil},
		{"twice", tok + " read\n" + tok + " faults", "line 2: the token is listed twice", nil},
		{"empty scope", tok + " read,", `line 1: unknown scope ""`, nil},
	}
	for _, c := range cases {
		got, err := ParseScopedTokens("F", c.data)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), "F "+c.wantErr) {
				t.Errorf("%s: error %v, want one containing %q", c.name, err, "F "+c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		compiled, err := compileScoped(got)
		if err != nil || len(compiled) != 1 || compiled[0].token != tok || len(compiled[0].grant.scopes) != len(c.wantScopes) {
			t.Errorf("%s: compiled %+v %v, want scopes %v", c.name, compiled, err, c.wantScopes)
			continue
		}
		for sc := range c.wantScopes {
			if !compiled[0].grant.scopes[sc] {
				t.Errorf("%s: scope %s missing from %v", c.name, sc, compiled[0].grant.scopes)
			}
		}
	}
	if _, err := compileScoped([]ScopedToken{{Token: testToken + strings.Repeat("x", 16), Scopes: []string{ScopeRead}}}, testToken+strings.Repeat("x", 16)); err == nil || !strings.Contains(err.Error(), "admin or viewer token") {
		t.Errorf("a scoped token equal to the admin token: %v, want a refusal", err)
	}
}

// TestPullOnlyToken runs the real server: a token scoped to pull
// credentials gets them, and every other operation a node must not do
// (delete a load balancer, push credentials, set faults) is 403 naming the
// scope it lacks, while the admin token may still do all of them.
func TestPullOnlyToken(t *testing.T) {
	pullTok := strings.Repeat("p", 32)
	opts := testPools()
	opts.ScopedTokens = []ScopedToken{{Token: pullTok, Scopes: []string{ScopeRegistryPullCredentials}}}
	srv, err := New(context.Background(), filepath.Join(t.TempDir(), StateFile), opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); srv.Close() })
	ctx := context.Background()
	admin, node := client.New(hs.URL, testToken), client.New(hs.URL, pullTok)
	if _, err := admin.CreateRegistry(ctx, "registry.example.com"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PutLoadBalancer(ctx, "lb-1", api.LoadBalancerSpec{Cluster: "c1", Listeners: []api.Listener{{Protocol: "TCP", Port: 80, BackendPort: 30080}}}); err != nil {
		t.Fatal(err)
	}

	cred, err := node.Credential(ctx, api.CredentialRequest{Image: "registry.example.com/app:1"})
	if err != nil || cred.Push || cred.Username == "" {
		t.Fatalf("pull credential with the pull-only token: %+v %v, want one", cred, err)
	}
	for _, c := range []struct {
		name, scope string
		call        func(*client.Client) error
	}{
		{"delete a load balancer", ScopeLoadBalancers, func(c *client.Client) error { return c.DeleteLoadBalancer(ctx, "lb-1") }},
		{"push credentials", ScopeRegistryPushCredentials, func(c *client.Client) error {
			_, err := c.Credential(ctx, api.CredentialRequest{Image: "registry.example.com/app:1", Push: true})
			return err
		}},
		{"set faults", ScopeFaults, func(c *client.Client) error { return c.SetFaults(ctx, api.Faults{}) }},
		{"list load balancers", ScopeRead, func(c *client.Client) error { _, err := c.ListLoadBalancers(ctx, ""); return err }},
		{"mint a console ticket", ScopeConsoleTickets, func(c *client.Client) error { _, _, err := c.ConsoleTicket(ctx, false); return err }},
	} {
		err := c.call(node)
		var se *client.StatusError
		if !errors.As(err, &se) || se.Status != http.StatusForbidden || !strings.Contains(se.Message, `scope "`+c.scope+`"`) {
			t.Errorf("%s with the pull-only token: %v, want 403 naming scope %q", c.name, err, c.scope)
		}
		if err := c.call(admin); err != nil {
			t.Errorf("%s with the admin token: %v", c.name, err)
		}
	}
	if lbs, _ := admin.ListLoadBalancers(ctx, ""); len(lbs) != 0 {
		t.Errorf("load balancers after the admin's delete: %v", lbs)
	}
}

// TestReadScopedTokens: the default file is optional, an explicit one is
// not, and one group or others may read is refused with the fix.
func TestReadScopedTokens(t *testing.T) {
	dir := t.TempDir()
	def := filepath.Join(dir, ScopedTokenFile)
	if got, err := readScopedTokens("", def); err != nil || got != nil {
		t.Fatalf("missing default: %v %v, want none", got, err)
	}
	if _, err := readScopedTokens(def, def); err == nil || !strings.Contains(err.Error(), "--scoped-token-file") {
		t.Fatalf("missing explicit file: %v, want an error naming the flag", err)
	}
	if err := os.WriteFile(def, []byte(strings.Repeat("q", 24)+" registry-pull-credentials\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := readScopedTokens("", def); err == nil || !strings.Contains(err.Error(), "chmod 600 "+def) {
		t.Fatalf("0640 file: %v, want a refusal with `chmod 600`", err)
	}
	if err := os.Chmod(def, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := readScopedTokens("", def); err != nil || len(got) != 1 || got[0].Scopes[0] != ScopeRegistryPullCredentials {
		t.Fatalf("0600 file: %+v %v", got, err)
	}
}
