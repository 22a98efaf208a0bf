package link

import (
	"strings"
	"testing"
)

func TestParseHeader(t *testing.T) {
	for _, tc := range []struct {
		name    string
		h       header
		wantErr string
	}{
		{"data at the limit", header{typ: frameData, length: MaxPayload, id: 7}, ""},
		{"data over the limit", header{typ: frameData, length: MaxPayload + 1, id: 7}, "over the 262144 allowed"},
		{"control frame too big", header{typ: frameDial, length: maxControlSize + 1, id: 7}, "over the 4096 allowed"},
		{"credit of 4 bytes", header{typ: frameCredit, length: 4, id: 1}, ""},
		{"credit of 3 bytes", header{typ: frameCredit, length: 3, id: 1}, "want 4"},
		{"ping of 8", header{typ: framePing, length: 8}, ""},
		{"pong of 7", header{typ: framePong, length: 7}, "want 8"},
		{"close with a payload", header{typ: frameClose, length: 1, id: 1}, "want none"},
		{"dial answer with its window", header{typ: frameDialOK, length: 4, id: 1}, ""},
		{"dial answer without", header{typ: frameDialOK, id: 1}, "want 4"},
		{"goaway without an ID", header{typ: frameGoAway}, ""},
		{"data for connection 0", header{typ: frameData, length: 1}, "connection 0"},
		{"dial for connection 0", header{typ: frameDial, length: 5}, "connection 0"},
		{"unknown type is passed on", header{typ: 200, length: 10, id: 0}, ""},
	} {
		b := appendHeader(nil, tc.h)
		if len(b) != HeaderSize {
			t.Fatalf("%s: header of %d bytes", tc.name, len(b))
		}
		got, err := parseHeader(b)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.h {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.h)
		}
	}
}

func TestDialPayload(t *testing.T) {
	for _, tc := range []struct{ network, address string }{
		{"tcp", "10.0.0.1:10250"}, {"tcp", "[fd00:1::2]:443"}, {"unix", ""}, {"", "x"},
	} {
		p, err := dialPayload(1<<20, tc.network, tc.address)
		if err != nil {
			t.Fatal(err)
		}
		w, n, a, err := parseDial(p)
		if err != nil || w != 1<<20 || n != tc.network || a != tc.address {
			t.Errorf("%q %q: got %d %q %q %v", tc.network, tc.address, w, n, a, err)
		}
	}
	if _, err := dialPayload(1<<20, "tcp", strings.Repeat("a", maxControlSize)); err == nil {
		t.Error("an address over the control frame limit was accepted")
	}
	tooSmall, _ := dialPayload(MinWindow-1, "tcp", "x:1")
	tooBig, _ := dialPayload(MaxWindow+1, "tcp", "x:1")
	for _, bad := range [][]byte{nil, {0, 0, 16, 0, 5, 't', 'c'}, tooSmall, tooBig} {
		if _, _, _, err := parseDial(bad); err == nil {
			t.Errorf("parseDial(%v) accepted", bad)
		}
	}
}
