package server

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Scopes name the operations a scoped token may perform. The admin token
// (--token-file) may perform all of them; a scoped token (a line of
// --scoped-token-file) only those it lists, so a credential handed to
// something less trusted than the operator — a node's credential plugin —
// cannot delete load balancers, mint push credentials or inject faults.
const (
	ScopeRead                    = "read" // every GET
	ScopeInstances               = "instances"
	ScopeLoadBalancers           = "load-balancers"
	ScopeRoutes                  = "routes"
	ScopeVolumes                 = "volumes"
	ScopeRegistries              = "registries"
	ScopeRegistryPullCredentials = "registry-pull-credentials"
	// ScopeRegistryPushCredentials implies ScopeRegistryPullCredentials: a
	// push credential also pulls.
	ScopeRegistryPushCredentials = "registry-push-credentials"
	ScopeTokenIssuers            = "token-issuers"
	ScopeFaults                  = "faults"
	// ScopeConsoleTickets mints console logins, read-write ones included:
	// as strong as the admin token, named so it can be granted apart.
	ScopeConsoleTickets = "console-tickets"
)

// AllScopes lists every scope, in the order messages name them.
var AllScopes = []string{ScopeRead, ScopeInstances, ScopeLoadBalancers, ScopeRoutes, ScopeVolumes, ScopeRegistries,
	ScopeRegistryPullCredentials, ScopeRegistryPushCredentials, ScopeTokenIssuers, ScopeFaults, ScopeConsoleTickets}

// scopeNone marks a pattern any authenticated token may reach: the
// catch-all that answers 404 (and "" for the mux's own redirects, which
// carry no operation).
const scopeNone = "-"

// routeScopes maps every v1 route pattern to the scope it needs. A route
// missing here is refused to scoped tokens (fail closed) and fails
// TestEveryRouteHasAScope.
var routeScopes = map[string]string{
	"GET /v1/regions":                          ScopeRead,
	"GET /v1/instance-types":                   ScopeRead,
	"GET /v1/instances":                        ScopeRead,
	"POST /v1/instances":                       ScopeInstances,
	"GET /v1/instances/{id}":                   ScopeRead,
	"DELETE /v1/instances/{id}":                ScopeInstances,
	"POST /v1/instances/{id}/stop":             ScopeInstances,
	"POST /v1/instances/{id}/start":            ScopeInstances,
	"GET /v1/load-balancers":                   ScopeRead,
	"GET /v1/load-balancers/{name}":            ScopeRead,
	"PUT /v1/load-balancers/{name}":            ScopeLoadBalancers,
	"PUT /v1/load-balancers/{name}/backends":   ScopeLoadBalancers,
	"PATCH /v1/load-balancers/{name}/backends": ScopeLoadBalancers,
	"GET /v1/load-balancers/{name}/health":     ScopeRead,
	"DELETE /v1/load-balancers/{name}":         ScopeLoadBalancers,
	"GET /v1/routes":                           ScopeRead,
	"POST /v1/routes":                          ScopeRoutes,
	"DELETE /v1/routes/{name}":                 ScopeRoutes,
	"GET /v1/volumes":                          ScopeRead,
	"POST /v1/volumes":                         ScopeVolumes,
	"GET /v1/volumes/{id}":                     ScopeRead,
	"DELETE /v1/volumes/{id}":                  ScopeVolumes,
	"GET /v1/registries":                       ScopeRead,
	"POST /v1/registries":                      ScopeRegistries,
	"DELETE /v1/registries/{host}":             ScopeRegistries,
	// The body's push flag further needs ScopeRegistryPushCredentials
	// (credentialScope), checked once the body is read.
	"POST /v1/credentials":     ScopeRegistryPullCredentials,
	"GET /v1/token-issuers":    ScopeRead,
	"POST /v1/token-issuers":   ScopeTokenIssuers,
	"DELETE /v1/token-issuers": ScopeTokenIssuers,
	"GET /v1/faults":           ScopeRead,
	"PUT /v1/faults":           ScopeFaults,
	"POST /v1/console/tickets": ScopeConsoleTickets,
	"/v1/":                     scopeNone,
	"":                         scopeNone,
}

// requiredScope is the scope a request matched to pattern needs; ok is
// false for a pattern no scope was assigned to.
func requiredScope(pattern string) (scope string, ok bool) {
	scope, ok = routeScopes[pattern]
	return scope, ok
}

// credentialScope is the scope a credential request needs.
func credentialScope(push bool) string {
	if push {
		return ScopeRegistryPushCredentials
	}
	return ScopeRegistryPullCredentials
}

// grant is what an authenticated token may do.
type grant struct {
	admin  bool
	scopes map[string]bool
}

// allows decides whether g may perform an operation needing scope.
func (g grant) allows(scope string) bool {
	return g.admin || scope == scopeNone || g.scopes[scope]
}

// ScopedToken is a bearer token limited to the operations its scopes name.
type ScopedToken struct {
	Token  string
	Scopes []string
}

// scopedToken is a ScopedToken checked and compiled.
type scopedToken struct {
	token string
	grant grant
}

// ParseScopedTokens reads a scoped-token file: one
// `<token> <scope>[,<scope>…]` per line, blank lines and lines starting with
// # ignored. Errors name the line and what to write instead.
func ParseScopedTokens(path, data string) ([]ScopedToken, error) {
	var out []ScopedToken
	for i, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s line %d: want `<token> <scope>[,<scope>...]` (scopes: %s)", path, i+1, strings.Join(AllScopes, ", "))
		}
		st := ScopedToken{Token: fields[0], Scopes: strings.Split(fields[1], ",")}
		if _, err := compileScoped(append(slices.Clone(out), st)); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// compileScoped checks scoped tokens and builds their grants. A token may
// not repeat, nor equal one of the reserved tokens (the admin and viewer
// tokens), since it would then mean two things; the error is about the
// last bad token, without its value.
func compileScoped(tokens []ScopedToken, reserved ...string) ([]scopedToken, error) {
	out := make([]scopedToken, 0, len(tokens))
	for _, st := range tokens {
		if len(st.Token) < 16 {
			return nil, fmt.Errorf("the token is %d characters: use at least 16 random ones (e.g. `openssl rand -hex 24`)", len(st.Token))
		}
		for _, r := range reserved {
			if r != "" && st.Token == r {
				return nil, errors.New("the token equals the cloud's admin or viewer token: give the scoped token its own value")
			}
		}
		if slices.ContainsFunc(out, func(c scopedToken) bool { return c.token == st.Token }) {
			return nil, errors.New("the token is listed twice: give each token one line with all its scopes")
		}
		if len(st.Scopes) == 0 {
			return nil, fmt.Errorf("the token has no scopes: want one or more of %s", strings.Join(AllScopes, ", "))
		}
		g := grant{scopes: map[string]bool{}}
		for _, sc := range st.Scopes {
			if !slices.Contains(AllScopes, sc) {
				return nil, fmt.Errorf("unknown scope %q: want one of %s", sc, strings.Join(AllScopes, ", "))
			}
			g.scopes[sc] = true
			if sc == ScopeRegistryPushCredentials {
				g.scopes[ScopeRegistryPullCredentials] = true
			}
		}
		out = append(out, scopedToken{token: st.Token, grant: g})
	}
	return out, nil
}

// lookupToken finds the grant of the bearer header got: the admin token,
// or one of the scoped tokens. Every candidate is compared in constant
// time, so timing does not tell which prefix matched.
func lookupToken(got, admin string, scoped []scopedToken) (grant, bool) {
	found, ok := grant{}, false
	if subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+admin)) == 1 {
		found, ok = grant{admin: true}, true
	}
	for _, st := range scoped {
		if subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+st.token)) == 1 {
			found, ok = st.grant, true
		}
	}
	return found, ok
}
