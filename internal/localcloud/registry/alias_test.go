package registry

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestAliases: a credential for the registry's host or for one of its
// aliases (the VPC gateway's name) is accepted; one for any other registry
// is refused, as a forged one is.
func TestAliases(t *testing.T) {
	const alias = "198.18.0.1:5000"
	hs := httptest.NewUnstartedServer(nil)
	host := hs.Listener.Addr().String()
	reg, err := New(Options{Host: host, Aliases: []string{alias}, Dir: t.TempDir(), Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = reg.Handler()
	hs.Start()
	t.Cleanup(func() { hs.Close(); _ = reg.Close() })
	for _, tc := range []struct {
		name, credHost string
		secret         []byte
		want           int
	}{
		{"own host", host, testSecret, http.StatusOK},
		{"alias", alias, testSecret, http.StatusOK},
		{"another registry", "198.18.0.2:5000", testSecret, http.StatusUnauthorized},
		{"alias, forged", alias, []byte("not the cloud's"), http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, p := Sign(tc.secret, Claims{Host: tc.credHost, Subject: NodeSubject, ExpiresAt: time.Now().Add(time.Minute)})
			req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/v2/", nil)
			req.SetBasicAuth(u, p)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET /v2/ with a credential for %s = %d, want %d", tc.credHost, resp.StatusCode, tc.want)
			}
		})
	}
}
