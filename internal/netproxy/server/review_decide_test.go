package server

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestReviewCacheUntil(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name           string
		outcome        string
		expiry         time.Time
		ttl, denialTTL time.Duration
		want           time.Time // zero: not cached
	}{
		{"authenticated, expiry unknown", reviewAuthenticated, time.Time{}, 10 * time.Second, 2 * time.Second, now.Add(10 * time.Second)},
		{"authenticated, expires later", reviewAuthenticated, now.Add(time.Hour), 10 * time.Second, 2 * time.Second, now.Add(10 * time.Second)},
		{"authenticated, expires sooner", reviewAuthenticated, now.Add(3 * time.Second), 10 * time.Second, 2 * time.Second, now.Add(3 * time.Second)},
		{"authenticated, already expired", reviewAuthenticated, now.Add(-time.Second), 10 * time.Second, 2 * time.Second, time.Time{}},
		{"authenticated, cache disabled", reviewAuthenticated, time.Time{}, -1, 2 * time.Second, time.Time{}},
		{"denied: briefly", reviewDenied, now.Add(time.Hour), 10 * time.Second, 2 * time.Second, now.Add(2 * time.Second)},
		{"denied, cache disabled", reviewDenied, time.Time{}, 10 * time.Second, -1, time.Time{}},
		{"error: never", reviewError, time.Time{}, 10 * time.Second, 2 * time.Second, time.Time{}},
	} {
		until, ok := reviewCacheUntil(tc.outcome, now, tc.expiry, tc.ttl, tc.denialTTL)
		if ok != !tc.want.IsZero() || (ok && !until.Equal(tc.want)) {
			t.Errorf("%s: reviewCacheUntil = %v, %v; want %v", tc.name, until, ok, tc.want)
		}
	}
}

func TestTokenExpiry(t *testing.T) {
	jwt := func(payload string) string {
		return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
	}
	for _, tc := range []struct {
		name, tok string
		want      int64 // 0: unknown
	}{
		{"exp", jwt(`{"exp":1700000000,"sub":"x"}`), 1700000000},
		{"no exp", jwt(`{"sub":"x"}`), 0},
		{"exp not a number", jwt(`{"exp":"soon"}`), 0},
		{"negative exp", jwt(`{"exp":-5}`), 0},
		{"not base64", "a.%%%.c", 0},
		{"not json", jwt("junk"), 0},
		{"not a JWT", "opaque-token", 0},
	} {
		got := tokenExpiry(tc.tok)
		if (tc.want == 0 && !got.IsZero()) || (tc.want != 0 && got.Unix() != tc.want) {
			t.Errorf("%s: tokenExpiry = %v, want %d", tc.name, got, tc.want)
		}
	}
}

func TestAdmitStream(t *testing.T) {
	for _, tc := range []struct {
		name               string
		limits             StreamLimits
		onConn, unauthPeer int
		want, flag         string
	}{
		{"first stream", StreamLimits{}, 0, 0, "", ""},
		{"below both caps", StreamLimits{PerConnection: 2, PerUnauthenticatedPeer: 3}, 1, 2, "", ""},
		{"connection full", StreamLimits{PerConnection: 2, PerUnauthenticatedPeer: 3}, 2, 0, refusedPerConnection, "--max-agent-streams-per-connection=2"},
		{"peer full", StreamLimits{PerConnection: 2, PerUnauthenticatedPeer: 3}, 0, 3, refusedPerPeer, "--max-unauthenticated-streams-per-peer=3"},
		{"default connection cap", StreamLimits{}, DefaultMaxStreamsPerConnection, 0, refusedPerConnection, "per-connection"},
		{"default peer cap", StreamLimits{}, 0, DefaultMaxUnauthenticatedStreamsPerPeer, refusedPerPeer, "per-peer"},
		{"no caps", StreamLimits{PerConnection: -1, PerUnauthenticatedPeer: -1}, 1 << 20, 1 << 20, "", ""},
	} {
		reason, err := admitStream(tc.limits, tc.onConn, tc.unauthPeer)
		if reason != tc.want || (err == nil) != (tc.want == "") {
			t.Errorf("%s: admitStream = %q, %v; want %q", tc.name, reason, err, tc.want)
			continue
		}
		if err != nil && (status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), tc.flag)) {
			t.Errorf("%s: error %v, want ResourceExhausted naming %q", tc.name, err, tc.flag)
		}
	}
}
