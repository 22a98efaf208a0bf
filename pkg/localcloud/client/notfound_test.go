package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestIsNotFound: only the API's NotFound says a resource is gone; any
// other 404 (no such endpoint, a proxy's or another server's page) must
// not be read as "gone", since callers delete Nodes and drop finalizers
// on it.
func TestIsNotFound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"the API's NotFound", 404, `{"code":"NotFound","message":"instance i-1 not found"}`, true},
		{"no such endpoint", 404, `{"code":"NoSuchEndpoint","message":"no API endpoint GET /v1/x"}`, false},
		{"a 404 page that is not the API's", 404, "404 page not found", false},
		{"an empty 404", 404, "", false},
		{"NotFound code on another status", 500, `{"code":"NotFound","message":"?"}`, false},
		{"ok", 200, `{}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}))
			defer srv.Close()
			_, err := New(srv.URL, "token").GetInstance(context.Background(), "i-1")
			if got := IsNotFound(err); got != tc.want {
				t.Errorf("IsNotFound(%v) = %v, want %v", err, got, tc.want)
			}
		})
	}
}
