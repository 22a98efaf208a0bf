package server

import (
	"errors"
	"fmt"
	"slices"

	"github.com/portside-io/portside/pkg/localcloud/client"
)

// tokenSet is what the API and the console check bearer tokens against.
// It is replaced whole on rotation, so a request sees the old set or the
// new one, never half of each.
type tokenSet struct {
	admin, viewer string
	scoped        []scopedToken
}

// compileTokens checks a set of tokens and builds it. The admin token is
// required; the viewer token (optional) and every scoped token must differ
// from it and from each other, since one token meaning two grants would
// give the wider.
func compileTokens(admin, viewer string, scoped []ScopedToken) (*tokenSet, error) {
	if admin == "" {
		return nil, errors.New("a bearer token is required (--token or --token-file)")
	}
	if viewer == admin {
		return nil, errors.New("the viewer token equals the API token: it would give read-write access; use another")
	}
	cs, err := compileScoped(scoped, admin, viewer)
	if err != nil {
		return nil, fmt.Errorf("scoped tokens: %w", err)
	}
	return &tokenSet{admin: admin, viewer: viewer, scoped: cs}, nil
}

// tokenChanges names what differs between two sets, for the log line of a
// rotation (never the values).
func tokenChanges(old, cur *tokenSet) []string {
	var out []string
	if old.admin != cur.admin {
		out = append(out, "admin")
	}
	if old.viewer != cur.viewer {
		out = append(out, "viewer")
	}
	if !slices.EqualFunc(old.scoped, cur.scoped, func(a, b scopedToken) bool { return a.token == b.token && a.grant.equal(b.grant) }) {
		out = append(out, "scoped")
	}
	return out
}

func (g grant) equal(o grant) bool {
	if g.admin != o.admin || len(g.scopes) != len(o.scopes) {
		return false
	}
	for s := range g.scopes {
		if !o.scopes[s] {
			return false
		}
	}
	return true
}

// SetTokens rotates the cloud's tokens without a restart: from its return
// the API refuses the old ones (401) and accepts the new, and console
// sessions granted under a changed admin or viewer token end, open event
// streams included. A bad set is refused whole and the old one stays. It
// returns what changed ("admin", "viewer", "scoped").
func (s *Server) SetTokens(admin, viewer string, scoped []ScopedToken) ([]string, error) {
	next, err := compileTokens(admin, viewer, scoped)
	if err != nil {
		return nil, err
	}
	s.tokensMu.Lock()
	defer s.tokensMu.Unlock()
	changed := tokenChanges(s.tokens.Load(), next)
	if len(changed) == 0 {
		return nil, nil
	}
	s.tokens.Store(next)
	if slices.Contains(changed, "admin") || slices.Contains(changed, "viewer") {
		s.console.SetTokens(admin, viewer)
	}
	s.logger.Info("Cloud tokens rotated: the old ones are refused from now on", "changed", changed)
	return changed, nil
}

// ReloadTokens reads the token files again (as at start, except that none
// is created: a rotation is the operator's, never a made-up token) and
// rotates to them; on any error the old tokens stay. `portside cloud
// serve` calls it on SIGHUP.
func (s *Server) ReloadTokens(tokenFile, viewerTokenFile, scopedExplicit, scopedDefault string) ([]string, error) {
	admin, err := client.ReadTokenFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	viewer, err := client.ReadTokenFile(viewerTokenFile)
	if err != nil {
		return nil, fmt.Errorf("viewer token file: %w", err)
	}
	scoped, err := readScopedTokens(scopedExplicit, scopedDefault)
	if err != nil {
		return nil, err
	}
	return s.SetTokens(admin, viewer, scoped)
}
