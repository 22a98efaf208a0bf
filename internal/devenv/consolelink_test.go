package devenv

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/localcloud/console"
	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// TestConsoleLinkReadOnlyByDefault: the link `up` prints logs in
// read-only unless --console-read-write; the session it gives cannot set
// faults.
func TestConsoleLinkReadOnlyByDefault(t *testing.T) {
	cloud := localcloudtest.Start(t)
	env := &environment{layout: layout{dir: t.TempDir()}, cloudClient: client.New(cloud.Endpoint, cloud.Token), cloudEndpoint: cloud.Endpoint}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, readWrite := range []bool{false, true} {
		var out bytes.Buffer
		consoleLink(context.Background(), &progress{w: &out, start: time.Now()}, env, readWrite)
		m := regexp.MustCompile(`web console: (\S+/console/login\?ticket=[0-9a-f]+)`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("read-write %v: no link in %q", readWrite, out.String())
		}
		wantWords := map[bool]string{false: "read-only", true: "read-write"}[readWrite]
		if !strings.Contains(out.String(), "a one-time link, "+wantWords) {
			t.Errorf("read-write %v: %q does not say %s", readWrite, out.String(), wantWords)
		}
		resp, err := noRedirect.Get(m[1])
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		var session *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == console.CookieName {
				session = c
			}
		}
		if session == nil {
			t.Fatalf("read-write %v: the link gave no session (%d)", readWrite, resp.StatusCode)
		}
		req, _ := http.NewRequest(http.MethodPut, cloud.Endpoint+"/console/api/faults", strings.NewReader(`{"rules":[]}`))
		req.Header.Set(console.WriteHeader, "1")
		req.AddCookie(session)
		put, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = put.Body.Close()
		if want := map[bool]int{false: http.StatusForbidden, true: http.StatusNoContent}[readWrite]; put.StatusCode != want {
			t.Errorf("read-write %v: setting faults with the link's session: %d, want %d", readWrite, put.StatusCode, want)
		}
	}
}
