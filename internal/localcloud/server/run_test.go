package server

import (
	"context"
	"net/http"
	"testing"
)

// TestAPIServerTimeouts: the API server bounds every phase of a connection.
func TestAPIServerTimeouts(t *testing.T) {
	hs := apiServer(context.Background(), http.NotFoundHandler())
	if hs.ReadHeaderTimeout == 0 || hs.ReadTimeout == 0 || hs.WriteTimeout == 0 || hs.IdleTimeout == 0 {
		t.Fatalf("timeouts: read-header %v, read %v, write %v, idle %v", hs.ReadHeaderTimeout, hs.ReadTimeout, hs.WriteTimeout, hs.IdleTimeout)
	}
}
