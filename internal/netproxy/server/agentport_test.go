package server

import (
	"slices"
	"testing"
)

// The agent port's ALPN preference: the link first unless turned off;
// crypto/tls takes the first of these the agent offers.
func TestProtocols(t *testing.T) {
	for _, tc := range []struct {
		disable bool
		want    []string
	}{
		{false, []string{"portside-link/2", "h2"}},
		{true, []string{"h2"}},
	} {
		s := &Server{opts: Options{DisableLink: tc.disable}}
		if got := s.protocols(); !slices.Equal(got, tc.want) {
			t.Errorf("DisableLink=%v: %q, want %q", tc.disable, got, tc.want)
		}
	}
}
