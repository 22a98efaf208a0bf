package servingcsr

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
)

// csrSpec is what a test CSR is made of; the zero value of each field
// means what kubelet sends for node n1.
type csrSpec struct {
	signer, user string
	groups       []string
	cn           string
	orgs         []string
	usages       []certificatesv1.KeyUsage
	dns          []string
	ips          []string
	emails       []string
	uris         []string
	request      []byte // replaces the generated request
	conditions   []certificatesv1.RequestConditionType
	certificate  bool
}

var kubeletUsagesEC = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}

// PEMRequest returns a PEM CERTIFICATE REQUEST with a fresh P-256 key, as kubelet makes.
func PEMRequest(t testing.TB, cn string, orgs, dns []string, ips []net.IP, emails []string, uris []*url.URL) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn, Organization: orgs}, DNSNames: dns, IPAddresses: ips, EmailAddresses: emails, URIs: uris,
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func makeCSR(t *testing.T, s csrSpec) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&s.signer, certificatesv1.KubeletServingSignerName)
	def(&s.user, "system:node:n1")
	def(&s.cn, "system:node:n1")
	if s.groups == nil {
		s.groups = []string{"system:nodes", "system:authenticated"}
	}
	if s.orgs == nil {
		s.orgs = []string{"system:nodes"}
	}
	if s.usages == nil {
		s.usages = kubeletUsagesEC
	}
	if s.dns == nil && s.ips == nil {
		s.dns, s.ips = []string{"n1"}, []string{"10.0.0.5"}
	}
	req := s.request
	if req == nil {
		var ips []net.IP
		for _, ip := range s.ips {
			ips = append(ips, net.ParseIP(ip))
		}
		var uris []*url.URL
		for _, u := range s.uris {
			p, _ := url.Parse(u)
			uris = append(uris, p)
		}
		req = PEMRequest(t, s.cn, s.orgs, s.dns, ips, s.emails, uris)
	}
	csr := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
		SignerName: s.signer, Username: s.user, Groups: s.groups, Usages: s.usages, Request: req,
	}}
	csr.Name = "csr-test"
	for _, c := range s.conditions {
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: c, Status: corev1.ConditionTrue})
	}
	if s.certificate {
		csr.Status.Certificate = []byte("cert")
	}
	return csr
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name   string
		spec   csrSpec
		want   Verdict
		reason string
		msg    string // a part of the message
	}{
		{name: "kubelet's request (EC key)", spec: csrSpec{}, want: AskCloud},
		{name: "kubelet's request (RSA key: key encipherment too)", spec: csrSpec{usages: []certificatesv1.KeyUsage{
			certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth, certificatesv1.UsageDigitalSignature}}, want: AskCloud},
		{name: "only IP SANs", spec: csrSpec{ips: []string{"10.0.0.5"}}, want: AskCloud},

		{name: "another signer: not ours", spec: csrSpec{signer: certificatesv1.KubeAPIServerClientKubeletSignerName}, want: Leave, msg: "is not kubernetes.io/kubelet-serving"},
		{name: "a custom signer with a node's bad request: not ours", spec: csrSpec{signer: "example.com/serving", cn: "system:node:n2"}, want: Leave},
		{name: "already approved", spec: csrSpec{conditions: []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved}}, want: Leave},
		{name: "already denied", spec: csrSpec{conditions: []certificatesv1.RequestConditionType{certificatesv1.CertificateDenied}}, want: Leave},
		{name: "already failed", spec: csrSpec{conditions: []certificatesv1.RequestConditionType{certificatesv1.CertificateFailed}}, want: Leave},
		{name: "already issued", spec: csrSpec{certificate: true}, want: Leave},
		{name: "requestor not a node user", spec: csrSpec{user: "alice"}, want: Leave, msg: `requestor "alice"`},
		{name: "requestor system:node: with no name", spec: csrSpec{user: "system:node:", cn: "system:node:"}, want: Leave},
		{name: "node user outside system:nodes", spec: csrSpec{groups: []string{"system:authenticated"}}, want: Leave},
		{name: "subject claims system:nodes, requestor is not a node", spec: csrSpec{user: "system:serviceaccount:default:x", groups: []string{"system:serviceaccounts"}}, want: Leave},

		{name: "impostor: subject CN is another node", spec: csrSpec{cn: "system:node:n2"}, want: Deny, reason: ReasonSubjectNotRequestor, msg: `"system:node:n2" is not the requestor's "system:node:n1"`},
		{name: "subject CN not a node", spec: csrSpec{cn: "n1"}, want: Deny, reason: ReasonSubjectNotRequestor},
		{name: "subject O missing", spec: csrSpec{orgs: []string{}}, want: Deny, reason: ReasonSubjectNotRequestor},
		{name: "subject O with more", spec: csrSpec{orgs: []string{"system:nodes", "system:masters"}}, want: Deny, reason: ReasonSubjectNotRequestor},
		{name: "usage client auth", spec: csrSpec{usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth}}, want: Deny, reason: ReasonUnexpectedUsages, msg: `"client auth"`},
		{name: "usage server auth missing", spec: csrSpec{usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment}}, want: Deny, reason: ReasonUnexpectedUsages},
		{name: "usage digital signature missing", spec: csrSpec{usages: []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth}}, want: Deny, reason: ReasonUnexpectedUsages},
		{name: "email SAN", spec: csrSpec{emails: []string{"a@example.com"}}, want: Deny, reason: ReasonInvalidRequest, msg: "email"},
		{name: "URI SAN", spec: csrSpec{uris: []string{"spiffe://x/y"}}, want: Deny, reason: ReasonInvalidRequest, msg: "URI"},
		{name: "no SAN", spec: csrSpec{dns: []string{}, ips: []string{}}, want: Deny, reason: ReasonInvalidRequest, msg: "at least one"},
		{name: "not PEM", spec: csrSpec{request: []byte("junk")}, want: Deny, reason: ReasonInvalidRequest},
		{name: "PEM of garbage", spec: csrSpec{request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{1, 2, 3}})}, want: Deny, reason: ReasonInvalidRequest, msg: "does not parse"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, d := Check(makeCSR(t, tc.spec))
			if d.Verdict != tc.want || d.Reason != tc.reason || !strings.Contains(d.Message, tc.msg) {
				t.Fatalf("got %v %q %q, want %v %q with %q", d.Verdict, d.Reason, d.Message, tc.want, tc.reason, tc.msg)
			}
			if d.Verdict == AskCloud && req.Node != "n1" {
				t.Fatalf("request %+v: want node n1", req)
			}
		})
	}
}

func TestCheckReadsSANs(t *testing.T) {
	req, d := Check(makeCSR(t, csrSpec{dns: []string{"n1", "n1.internal"}, ips: []string{"10.0.0.5", "fd00::5"}}))
	if d.Verdict != AskCloud {
		t.Fatal(d)
	}
	want := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}
	if len(req.IPs) != 2 || req.IPs[0] != want[0] || req.IPs[1] != want[1] || len(req.DNSNames) != 2 {
		t.Fatalf("request %+v, want IPs %v (IPv4 unmapped) and 2 names", req, want)
	}
}

func TestJudge(t *testing.T) {
	addrs := []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.5"},
		{Type: corev1.NodeInternalIP, Address: "fd00::5"},
		{Type: corev1.NodeExternalIP, Address: "203.0.113.5"},
		{Type: corev1.NodeHostName, Address: "ip-10-0-0-5"},
		{Type: corev1.NodeInternalDNS, Address: "ip-10-0-0-5.ec2.internal."},
		{Type: corev1.NodeExternalDNS, Address: "ec2-203-0-113-5.compute.example"},
	}
	ip := netip.MustParseAddr
	cases := []struct {
		name string
		req  Request
		want Verdict
		msg  string
	}{
		{"node name and internal IP", Request{Node: "n1", DNSNames: []string{"n1"}, IPs: []netip.Addr{ip("10.0.0.5")}}, Approve, "instance i-0000002a"},
		{"every address type the cloud reports", Request{Node: "n1",
			DNSNames: []string{"ip-10-0-0-5", "IP-10-0-0-5.ec2.internal", "ec2-203-0-113-5.compute.example"},
			IPs:      []netip.Addr{ip("10.0.0.5"), ip("fd00::5"), ip("203.0.113.5")}}, Approve, ""},
		{"only DNS", Request{Node: "n1", DNSNames: []string{"n1"}}, Approve, ""},
		{"an IP of another instance", Request{Node: "n1", IPs: []netip.Addr{ip("10.0.0.5"), ip("10.0.0.9")}}, Deny,
			"IP 10.0.0.9 is not an address of instance i-0000002a"},
		{"a name of another node", Request{Node: "n1", DNSNames: []string{"n1", "n2"}}, Deny, `DNS name "n2" is not node n1's name`},
		{"a name that is only a subdomain of the node's", Request{Node: "n1", DNSNames: []string{"evil.n1"}}, Deny, "evil.n1"},
		{"a loopback IP", Request{Node: "n1", IPs: []netip.Addr{ip("127.0.0.1")}}, Deny, "127.0.0.1"},
	}
	for _, tc := range cases {
		d := Judge(tc.req, "i-0000002a", addrs)
		if d.Verdict != tc.want || !strings.Contains(d.Message, tc.msg) {
			t.Errorf("%s: got %v %q, want %v with %q", tc.name, d.Verdict, d.Message, tc.want, tc.msg)
		}
		if tc.want == Deny && d.Reason != ReasonAddressNotOfInstance || tc.want == Approve && d.Reason != ReasonAutoApproved {
			t.Errorf("%s: reason %q", tc.name, d.Reason)
		}
	}
	// An instance the cloud reports no address for gets nothing but its node name.
	if d := Judge(Request{Node: "n1", IPs: []netip.Addr{ip("10.0.0.5")}}, "i-1", nil); d.Verdict != Deny {
		t.Errorf("no cloud addresses: %v", d)
	}
}

func TestInstanceGone(t *testing.T) {
	req := Request{Node: "n1"}
	if d := InstanceGone(req, ""); d.Verdict != Leave {
		t.Errorf("no providerID yet: %v, want the request left for when the Node is initialized", d)
	}
	if d := InstanceGone(req, "local://i-1"); d.Verdict != Deny || d.Reason != ReasonInstanceNotFound || !strings.Contains(d.Message, "local://i-1") {
		t.Errorf("instance gone: %v", d)
	}
}

func TestInstanceName(t *testing.T) {
	for _, tc := range [][3]string{
		{"local://i-0000002a", "n1", "i-0000002a"},
		{"aws:///us-east-1a/i-abc", "n1", "us-east-1a/i-abc"},
		{"odd", "n1", "odd"},
		{"", "n1", "of node n1"},
	} {
		if got := InstanceName(tc[0], tc[1]); got != tc[2] {
			t.Errorf("InstanceName(%q, %q) = %q, want %q", tc[0], tc[1], got, tc[2])
		}
	}
}
