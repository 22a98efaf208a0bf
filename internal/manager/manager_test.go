package manager

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"
)

var known = []Controller{
	{Name: "cloud-node-controller", Aliases: []string{"cloud-node"}},
	{Name: "cloud-node-lifecycle-controller", Aliases: []string{"cloud-node-lifecycle"}},
	{Name: "opt-in-controller", Aliases: []string{"opt-in"}, DisabledByDefault: true},
}

func names(cs []Controller) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return strings.Join(out, ",")
}

func TestEnabledControllers(t *testing.T) {
	cases := []struct {
		flags []string
		want  string
	}{
		{[]string{"*"}, "cloud-node-controller,cloud-node-lifecycle-controller"},
		{[]string{"*", "-cloud-node-lifecycle"}, "cloud-node-controller"},
		{[]string{"cloud-node"}, "cloud-node-controller"},
		{[]string{"cloud-node-lifecycle-controller"}, "cloud-node-lifecycle-controller"},
		{[]string{"-cloud-node", "cloud-node"}, ""},
		{[]string{}, ""},
		// A controller upstream's CCM lacks runs only when named.
		{[]string{"*", "opt-in"}, "cloud-node-controller,cloud-node-lifecycle-controller,opt-in-controller"},
		{[]string{"opt-in-controller"}, "opt-in-controller"},
		{[]string{"*", "opt-in", "-opt-in"}, "cloud-node-controller,cloud-node-lifecycle-controller"},
	}
	for _, tc := range cases {
		got, err := EnabledControllers(tc.flags, known)
		if err != nil || names(got) != tc.want {
			t.Errorf("%v: got %q %v, want %q", tc.flags, names(got), err, tc.want)
		}
	}
	_, err := EnabledControllers([]string{"*", "-route"}, known)
	if err == nil || !strings.Contains(err.Error(), `unknown controller "route"`) || !strings.Contains(err.Error(), "cloud-node-lifecycle") ||
		!strings.Contains(err.Error(), "opt-in-controller (disabled by default)") {
		t.Errorf("unknown controller error must name it and list the known ones: %v", err)
	}
}

func TestValidateIsOneClearLine(t *testing.T) {
	o := NewOptions()
	o.CloudProvider = "local"
	if err := o.Validate(known); err != nil {
		t.Fatalf("defaults with a provider must be valid: %v", err)
	}
	o.CloudProvider = ""
	o.LeaderElectResourceLock = "configmaps"
	o.RenewDeadline = 20 * time.Second
	o.CertFile = "x.crt"
	err := o.Validate(known)
	if err == nil {
		t.Fatal("want errors")
	}
	msg := err.Error()
	for _, want := range []string{"--cloud-provider is required", "--leader-elect-resource-lock=configmaps", "lease-duration > renew-deadline", "--tls-private-key-file"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans lines: %q", msg)
	}
}

func TestTLSSettings(t *testing.T) {
	cases := []struct {
		min     string
		suites  []string
		wantMin uint16
		wantN   int
		err     string
	}{
		{"", nil, tls.VersionTLS12, 0, ""},
		{"VersionTLS13", nil, tls.VersionTLS13, 0, ""},
		{"VersionTLS12", []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}, tls.VersionTLS12, 1, ""},
		{"VersionTLS10", nil, 0, 0, "TLS 1.2 or later"},
		{"TLS1.3", nil, 0, 0, "--tls-min-version"},
		{"", []string{"TLS_NOT_A_SUITE"}, 0, 0, "--tls-cipher-suites"},
	}
	for _, tc := range cases {
		o := NewOptions()
		o.TLSMinVersion, o.TLSCipherSuites = tc.min, tc.suites
		minV, suites, err := o.tlsSettings()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q %v: err %v, want one naming %q", tc.min, tc.suites, err, tc.err)
			}
			continue
		}
		if err != nil || minV != tc.wantMin || len(suites) != tc.wantN {
			t.Errorf("%q %v: %x %v %v", tc.min, tc.suites, minV, suites, err)
		}
	}
}
