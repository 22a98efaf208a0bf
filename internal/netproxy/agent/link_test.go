package agent

import (
	"slices"
	"testing"
)

func TestLinkOffer(t *testing.T) {
	for _, tc := range []struct {
		alpn, want []string
	}{
		{nil, []string{"portside-link/2", "h2"}},
		{[]string{"konnectivity"}, []string{"portside-link/2", "konnectivity", "h2"}},
		{[]string{"h2"}, []string{"portside-link/2", "h2"}},
		{[]string{"konnectivity", "h2"}, []string{"portside-link/2", "konnectivity", "h2"}},
	} {
		if got := linkOffer(tc.alpn); !slices.Equal(got, tc.want) {
			t.Errorf("linkOffer(%q) = %q, want %q", tc.alpn, got, tc.want)
		}
	}
}
