package server

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/localcloud/console"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// TestCompileTokens: which token sets a cloud (at start or on rotation)
// accepts, and what a rotation reports as changed.
func TestCompileTokens(t *testing.T) {
	const admin, viewer = "admin-0123456789abcdef", "viewer-0123456789abcdef"
	pull := ScopedToken{Token: "pull-0123456789abcdef", Scopes: []string{ScopeRegistryPullCredentials}}
	for _, c := range []struct {
		name          string
		admin, viewer string
		scoped        []ScopedToken
		err           string
	}{
		{"admin only", admin, "", nil, ""},
		{"all three", admin, viewer, []ScopedToken{pull}, ""},
		{"no admin token", "", viewer, nil, "a bearer token is required"},
		{"viewer equals admin", admin, admin, nil, "the viewer token equals the API token"},
		{"scoped equals viewer", admin, viewer, []ScopedToken{{Token: viewer, Scopes: pull.Scopes}}, "scoped tokens: the token equals the cloud's admin or viewer token"},
		{"scoped equals admin", admin, viewer, []ScopedToken{{Token: admin, Scopes: pull.Scopes}}, "scoped tokens: the token equals"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := compileTokens(c.admin, c.viewer, c.scoped)
			if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("err = %v, want %q", err, c.err)
			}
		})
	}

	base, _ := compileTokens(admin, viewer, []ScopedToken{pull})
	wider := ScopedToken{Token: pull.Token, Scopes: []string{ScopeRegistryPushCredentials}}
	for _, c := range []struct {
		name          string
		admin, viewer string
		scoped        []ScopedToken
		want          []string
	}{
		{"nothing", admin, viewer, []ScopedToken{pull}, nil},
		{"admin", "admin-new-0123456789abcdef", viewer, []ScopedToken{pull}, []string{"admin"}},
		{"viewer", admin, "viewer-new-0123456789abcdef", []ScopedToken{pull}, []string{"viewer"}},
		{"a scoped token's value", admin, viewer, []ScopedToken{{Token: "pull-new-0123456789abcdef", Scopes: pull.Scopes}}, []string{"scoped"}},
		{"a scoped token's scopes", admin, viewer, []ScopedToken{wider}, []string{"scoped"}},
		{"a scoped token removed", admin, viewer, nil, []string{"scoped"}},
		{"all", "a-new-0123456789abcdef", "v-new-0123456789abcdef", nil, []string{"admin", "viewer", "scoped"}},
	} {
		t.Run("changes/"+c.name, func(t *testing.T) {
			next, err := compileTokens(c.admin, c.viewer, c.scoped)
			if err != nil {
				t.Fatal(err)
			}
			if got := tokenChanges(base, next); !slices.Equal(got, c.want) {
				t.Errorf("changes %v, want %v", got, c.want)
			}
		})
	}
}

// writeTokenFile replaces path with tok atomically (as an operator should:
// the cloud never reads half a token), mode perm.
func writeTokenFile(t *testing.T, path, tok string, perm os.FileMode) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, perm); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// consoleLogin logs in to the console with tok and returns the session cookie.
func consoleLogin(t *testing.T, endpoint, tok string) *http.Cookie {
	t.Helper()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.PostForm(endpoint+"/console/login", url.Values{"token": {tok}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == console.CookieName && ck.Value != "" {
			return ck
		}
	}
	t.Fatalf("console login: %s, no session cookie", resp.Status)
	return nil
}

// consoleGet GETs path of the console with the session cookie.
func consoleGet(endpoint, path string, ck *http.Cookie) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, endpoint+path, nil)
	if err != nil {
		return nil, err
	}
	req.AddCookie(ck)
	return http.DefaultClient.Do(req)
}

// TestSIGHUPRotatesTokens: a running `portside cloud serve` (Run in a
// child process) given SIGHUP after its token file was replaced refuses
// the old token and accepts the new one; console sessions granted under
// the old token end, their open event stream included, while viewer
// sessions (whose token did not change) go on. A replacement the cloud
// must refuse (a file others may read) keeps the tokens in force, and the
// log says why.
func TestSIGHUPRotatesTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the cloud as a process; skipped with -short")
	}
	dir := t.TempDir()
	p, old := startChild(t, dir, 10+int(time.Now().UnixNano()%200))
	ctx := context.Background()
	endpoint := old.Endpoint()
	oldTok, err := client.ReadTokenFile(filepath.Join(dir, TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	viewerTok, err := client.ReadTokenFile(filepath.Join(dir, ViewerTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	adminSession, viewerSession := consoleLogin(t, endpoint, oldTok), consoleLogin(t, endpoint, viewerTok)
	stream, err := consoleGet(endpoint, "/console/api/events", adminSession)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("event stream before the rotation: %v %v", err, stream)
	}
	defer func() { _ = stream.Body.Close() }()
	streamEnded := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stream.Body)
		for sc.Scan() {
		}
		streamEnded <- sc.Err()
	}()

	const newTok = "rotated-0123456789abcdef0123456789abcdef"
	writeTokenFile(t, filepath.Join(dir, TokenFile), newTok, 0o600)
	if err := syscall.Kill(p.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := old.Regions(ctx)
		if se, ok := err.(*client.StatusError); ok && se.Status == http.StatusUnauthorized {
			break
		}
		select {
		case <-p.Done():
			t.Fatalf("the cloud exited on SIGHUP: %v\n%s", p.ExitErr(), p.LogTail(10))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old token still answers %v 5 s after SIGHUP\n%s", err, p.LogTail(10))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := client.New(endpoint, newTok).Regions(ctx); err != nil {
		t.Fatalf("the new token after SIGHUP: %v", err)
	}
	select {
	case <-streamEnded:
	case <-time.After(5 * time.Second):
		t.Fatal("the console event stream of a session under the old token is still open 5 s after the rotation")
	}
	for _, c := range []struct {
		name string
		ck   *http.Cookie
		want int
	}{{"admin session (old token)", adminSession, http.StatusUnauthorized}, {"viewer session (unchanged token)", viewerSession, http.StatusOK}} {
		resp, err := consoleGet(endpoint, "/console/api/state", c.ck)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: /console/api/state %s, want %d", c.name, resp.Status, c.want)
		}
	}

	// A token file others may read is refused: the rotated token stays.
	const leaked = "leaked-0123456789abcdef0123456789abcdef"
	writeTokenFile(t, filepath.Join(dir, TokenFile), leaked, 0o644)
	if err := syscall.Kill(p.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for !strings.Contains(p.LogTail(20), "Tokens not reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal logged for a 0644 token file:\n%s", p.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if log := p.LogTail(20); !strings.Contains(log, "mode 0644") {
		t.Errorf("the refusal does not name the file's mode:\n%s", log)
	}
	if _, err := client.New(endpoint, newTok).Regions(ctx); err != nil {
		t.Errorf("the rotated token after a refused reload: %v", err)
	}
	_, err = client.New(endpoint, leaked).Regions(ctx)
	if se, ok := err.(*client.StatusError); !ok || se.Status != http.StatusUnauthorized {
		t.Errorf("the refused file's token: %v, want 401", err)
	}
	select {
	case <-p.Done():
		t.Fatalf("the cloud exited: %v", p.ExitErr())
	default:
	}
}
