package registry

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	good := Claims{Host: "127.0.0.1:5000", Subject: NodeSubject, Push: true, ExpiresAt: now.Add(time.Hour)}
	user, pass := Sign(secret, good)
	if user != "portside" || strings.Contains(user, ":") {
		t.Fatalf("node username = %q", user)
	}
	swapPush := strings.Replace(pass, ".1.", ".0.", 1)
	later := strings.Replace(pass, ".1800003600.", ".1800007200.", 1)
	if swapPush == pass || later == pass {
		t.Fatal("test setup: could not alter the password")
	}
	_, otherSecret := Sign([]byte("another secret"), good)
	_, otherHost := Sign(secret, Claims{Host: "registry.example.com", Subject: NodeSubject, ExpiresAt: good.ExpiresAt})
	_, expired := Sign(secret, Claims{Host: good.Host, Subject: NodeSubject, ExpiresAt: now.Add(-time.Second)})
	saUser, saPass := Sign(secret, Claims{Host: good.Host, Subject: "system:serviceaccount:team-a:puller.v2", ExpiresAt: good.ExpiresAt})
	oddUser, oddPass := Sign(secret, Claims{Host: good.Host, Subject: "weird:subject:with:colons", ExpiresAt: good.ExpiresAt})

	cases := []struct {
		name, host, user, pass string
		want                   string // error substring; "" = valid
		subject                string
		push                   bool
	}{
		{"valid push credential", good.Host, user, pass, "", NodeSubject, true},
		{"host compared case-insensitively", strings.ToUpper(good.Host), user, pass, "", NodeSubject, true},
		{"service account", good.Host, saUser, saPass, "", "system:serviceaccount:team-a:puller.v2", false},
		{"other subject", good.Host, oddUser, oddPass, "", "weird:subject:with:colons", false},
		{"push flag swapped", good.Host, user, swapPush, "signature does not match", "", false},
		{"expiry extended", good.Host, user, later, "signature does not match", "", false},
		{"other secret", good.Host, user, otherSecret, "signature does not match", "", false},
		{"subject swapped", good.Host, saUser, pass, "signature does not match", "", false},
		{"other host", good.Host, user, otherHost, "credential is for registry registry.example.com, not 127.0.0.1:5000", "", false},
		{"expired", good.Host, user, expired, "credential expired at 2027-01-15T07:59:59Z", "", false},
		{"unknown username", good.Host, "admin", pass, `username "admin" is not`, "", false},
		// One credential, one username: the node's subject spelled the
		// raw way would be another name for the same credential in logs.
		{"another spelling of the node's username", good.Host, rawUserPrefix + base64.RawURLEncoding.EncodeToString([]byte(NodeSubject)), pass,
			"is not a credential username the cloud issues", "", false},
		{"bad sa username", good.Host, "sa.nodot", pass, "sa.<namespace>.<name>", "", false},
		{"empty password", good.Host, user, "", "password is not a credential", "", false},
		{"garbage password", good.Host, user, "hunter2", "password is not a credential", "", false},
		{"old format", good.Host, user, "1800003600.abc", "password is not a credential", "", false},
		{"bad push flag", good.Host, user, strings.Replace(pass, ".1.", ".2.", 1), "password is not a credential", "", false},
		{"padded expiry", good.Host, user, strings.Replace(pass, ".1800003600.", ".01800003600.", 1), "password is not a credential", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Verify(secret, tc.host, tc.user, tc.pass, now)
			if tc.want == "" {
				if err != nil || c.Subject != tc.subject || c.Push != tc.push || !c.ExpiresAt.Equal(good.ExpiresAt) {
					t.Fatalf("Verify = %+v, %v", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verify error = %v, want it to say %q", err, tc.want)
			}
			if tc.pass != "" && strings.Contains(err.Error(), tc.pass) {
				t.Fatalf("error echoes the password: %v", err)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	secret := []byte("fuzz secret")
	exp := time.Unix(1_800_000_000, 0)
	u, p := Sign(secret, Claims{Host: "h:1", Subject: "system:serviceaccount:ns:sa", ExpiresAt: exp})
	f.Add("h:1", u, p)
	u2, p2 := Sign(secret, Claims{Host: "h:1", Subject: "system:serviceaccount:ns:sa", ExpiresAt: exp, Repositories: []string{"ns/", "shared/base"}})
	f.Add("h:1", u2, p2)
	f.Add("h:1", "portside", "v1.aDox.1800000000.0.AAAA")
	f.Add("", "u.", "v1....")
	f.Fuzz(func(t *testing.T, host, user, pass string) {
		c, err := Verify(secret, host, user, pass, exp.Add(-time.Minute))
		if err != nil {
			if pass != "" && len(pass) > 8 && strings.Contains(err.Error(), pass) {
				t.Fatalf("error echoes the password: %v", err)
			}
			return
		}
		// Whatever verifies must be what was signed.
		if u2, p2 := Sign(secret, c); u2 != user || p2 != pass {
			t.Fatalf("verified %q/%q but re-signing gives %q/%q", user, pass, u2, p2)
		}
	})
}

// TestNarrowedCredential: a credential narrowed to repositories (v2)
// carries them under its signature: they cannot be widened, dropped (to
// read as an unnarrowed v1 credential) or added to a v1 credential.
func TestNarrowedCredential(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	host := "127.0.0.1:5000"
	narrowed := Claims{Host: host, Subject: "system:serviceaccount:team-a:puller", ExpiresAt: now.Add(time.Hour),
		Repositories: []string{"team-a/", "shared/base"}}
	user, pass := Sign(secret, narrowed)
	if !strings.HasPrefix(pass, "v2.") {
		t.Fatalf("narrowed credential's password %q is not v2", pass)
	}
	c, err := Verify(secret, host, user, pass, now)
	if err != nil || strings.Join(c.Repositories, ",") != "team-a/,shared/base" || c.Subject != narrowed.Subject {
		t.Fatalf("Verify = %+v, %v; want the repositories signed", c, err)
	}
	parts := strings.Split(pass, ".")
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	with := func(i int, v string) string {
		p := append([]string(nil), parts...)
		p[i] = v
		return strings.Join(p, ".")
	}
	_, v1pass := Sign(secret, Claims{Host: host, Subject: narrowed.Subject, ExpiresAt: narrowed.ExpiresAt})
	v1parts := strings.Split(v1pass, ".")
	for _, tc := range []struct{ name, pass, want string }{
		{"repositories widened", with(4, enc("team-a/,shared/")), "signature does not match"},
		{"a repository added", with(4, enc("team-a/,shared/base,team-b/")), "signature does not match"},
		{"repositories dropped (read as v1)", strings.Join(append([]string{"v1"}, append(parts[1:4], parts[5])...), "."), "signature does not match"},
		{"v1 given repositories", strings.Join(append([]string{"v2"}, append(v1parts[1:4], enc("team-a/"), v1parts[4])...), "."), "signature does not match"},
		{"an empty repository", with(4, enc("team-a/,,shared/base")), "password is not a credential"},
		{"no repositories", with(4, ""), "password is not a credential"},
		{"v2 with v1's shape", strings.Join(append([]string{"v2"}, v1parts[1:]...), "."), "password is not a credential"},
	} {
		if _, err := Verify(secret, host, user, tc.pass, now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Verify error = %v; want %q", tc.name, err, tc.want)
		}
	}
}
