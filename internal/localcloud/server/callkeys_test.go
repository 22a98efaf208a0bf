package server

import (
	"context"
	"fmt"
	"net/http"
	"testing"
)

// TestCallCountersBounded: an authenticated client making up methods and
// paths cannot grow the call counters without bound.
func TestCallCountersBounded(t *testing.T) {
	srv, c := startServer(t)
	for i := range 1000 {
		req, _ := http.NewRequestWithContext(context.Background(), fmt.Sprintf("M%d", i), c.Endpoint()+fmt.Sprintf("/v1/made-up-%d/x/y-%d", i, i), nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	calls := srv.Calls()
	if len(calls) > maxCallKeys+1 {
		t.Fatalf("%d call counters after 1000 made-up requests; at most %d", len(calls), maxCallKeys+1)
	}
	if calls["other"] == 0 {
		t.Errorf("made-up requests beyond the bound not counted as other: %d keys", len(calls))
	}
	if _, err := c.Regions(context.Background()); err != nil {
		t.Fatal(err)
	}
}
