package tlsutil

import (
	"crypto/tls"
	"slices"
	"strings"
	"testing"
)

func TestCiphers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []string
		want    []uint16
		wantErr []string // substrings of the error
	}{
		{name: "empty is Go's defaults", in: nil},
		{name: "secure TLS 1.2 suites, upstream's names",
			in:   []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"},
			want: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}},
		{name: "TLS 1.3 names are accepted, as upstream", in: []string{"TLS_AES_128_GCM_SHA256"}, want: []uint16{tls.TLS_AES_128_GCM_SHA256}},
		{name: "spaces around names", in: []string{" TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 "}, want: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384}},
		{name: "RC4 is refused", in: []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_RSA_WITH_RC4_128_SHA"},
			wantErr: []string{"--cipher-suites", "TLS_RSA_WITH_RC4_128_SHA is insecure", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}},
		{name: "3DES is refused", in: []string{"TLS_RSA_WITH_3DES_EDE_CBC_SHA"}, wantErr: []string{"is insecure"}},
		{name: "CBC-SHA256 is refused", in: []string{"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256"}, wantErr: []string{"is insecure"}},
		{name: "unknown name", in: []string{"TLS_NO_SUCH"}, wantErr: []string{`unknown cipher suite "TLS_NO_SUCH"`, "secure suites: "}},
		{name: "OpenSSL spelling is not a Go name", in: []string{"ECDHE-RSA-AES128-GCM-SHA256"}, wantErr: []string{"unknown cipher suite"}},
		{name: "only blanks", in: []string{" ", ""}, wantErr: []string{"names no cipher suite"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Ciphers(tc.in)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Ciphers(%q) = %v, want an error", tc.in, got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Ciphers(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestCiphersRefuseEveryInsecureSuite: whatever Go lists as insecure now
// (the list grows with Go releases) is refused, and every secure suite is
// accepted.
func TestCiphersRefuseEveryInsecureSuite(t *testing.T) {
	for _, c := range tls.InsecureCipherSuites() {
		if ids, err := Ciphers([]string{c.Name}); err == nil {
			t.Errorf("insecure %s accepted: %v", c.Name, ids)
		}
	}
	for _, c := range tls.CipherSuites() {
		if ids, err := Ciphers([]string{c.Name}); err != nil || len(ids) != 1 || ids[0] != c.ID {
			t.Errorf("secure %s: %v, %v", c.Name, ids, err)
		}
	}
}

func TestMinVersion(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    uint16
		wantErr string
	}{
		{in: "", want: tls.VersionTLS12},
		{in: "VersionTLS12", want: tls.VersionTLS12},
		{in: "VersionTLS13", want: tls.VersionTLS13},
		{in: "VersionTLS10", wantErr: "below TLS 1.2"},
		{in: "VersionTLS11", wantErr: "below TLS 1.2"},
		{in: "1.2", wantErr: "unknown version"},
	} {
		got, err := MinVersion(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--tls-min-version") {
				t.Errorf("MinVersion(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("MinVersion(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
