package server

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"
)

func TestDecideIdentifiers(t *testing.T) {
	nodeA := FactsOf(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeExternalIP, Address: "fd00::1"},
		{Type: corev1.NodeHostName, Address: "a.internal"}, {Type: corev1.NodeInternalDNS, Address: "a.dns"}}}})
	tokenA := Principal{User: "system:serviceaccount:kube-system:konnectivity-agent", Node: "node-a"}
	tokenNoNode := Principal{User: "system:serviceaccount:kube-system:konnectivity-agent"}
	gateway := Principal{User: "gw", Groups: []string{"gateways"}}
	// A real node's agent in `portside up`: CN=system:node:<name>, no group.
	certA := PrincipalFromCert(&x509.Certificate{Subject: pkix.Name{CommonName: "system:node:node-a"}})
	ids := func(q string) header.Identifiers {
		i, err := header.GenAgentIdentifiers(q)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	for _, tc := range []struct {
		name   string
		p      Principal
		claims string
		node   *NodeFacts
		routes bool
		kept   string
		denied []Denial
	}{
		{"own name and addresses", tokenA, "host=node-a&host=a.internal&host=a.dns&ipv4=10.0.0.1&ipv6=fd00::1", nodeA, false,
			"host=node-a&host=a.internal&host=a.dns&ipv4=10.0.0.1&ipv6=fd00::1", nil},
		{"ipv6 in another spelling is the same address", tokenA, "ipv6=FD00:0::1", nodeA, false, "ipv6=FD00:0::1", nil},
		{"another node's name", tokenA, "host=node-b", nodeA, false, "", []Denial{{"host", "node-b", DenyNotOwnHost, nil}}},
		{"own, but another Node lists them too", tokenA, "host=node-a&host=a.internal&ipv4=10.0.0.1&ipv6=fd00::1", contested(nodeA, hostKey("a.internal"), addrKey(netip.MustParseAddr("10.0.0.1"))), false,
			"host=node-a&ipv6=fd00::1", []Denial{{"host", "a.internal", DenyContested, []string{"node-b"}}, {"ipv4", "10.0.0.1", DenyContested, []string{"node-b"}}}},
		{"contested, but route claims allowed (the operator trusts it)", tokenA, "ipv4=10.0.0.1", contested(nodeA, addrKey(netip.MustParseAddr("10.0.0.1"))), true,
			"ipv4=10.0.0.1", nil},
		{"host compared exactly, as upstream's destHost", tokenA, "host=Node-A", nodeA, false, "", []Denial{{"host", "Node-A", DenyNotOwnHost, nil}}},
		{"another node's address", tokenA, "ipv4=10.0.0.2&ipv6=fd00::2", nodeA, false, "",
			[]Denial{{"ipv4", "10.0.0.2", DenyNotOwnAddr, nil}, {"ipv6", "fd00::2", DenyNotOwnAddr, nil}}},
		{"address of the wrong family", tokenA, "ipv4=fd00::1&ipv6=10.0.0.1&ipv4=nonsense", nodeA, false, "",
			[]Denial{{"ipv4", "fd00::1", DenyMalformed, nil}, {"ipv4", "nonsense", DenyMalformed, nil}, {"ipv6", "10.0.0.1", DenyMalformed, nil}}},
		{"cidr denied", tokenA, "ipv4=10.0.0.1&cidr=0.0.0.0/0", nodeA, false, "ipv4=10.0.0.1", []Denial{{"cidr", "0.0.0.0/0", DenyRouteClaim, nil}}},
		{"default-route denied", tokenA, "default-route=true", nodeA, false, "", []Denial{{"default-route", "true", DenyRouteClaim, nil}}},
		{"route claims allowed", tokenA, "cidr=10.0.0.0/8&default-route=true&ipv4=10.0.0.9", nodeA, true, "cidr=10.0.0.0/8&default-route=true&ipv4=10.0.0.9", nil},
		{"route claims allowed still check host names", tokenA, "host=node-b", nodeA, true, "", []Denial{{"host", "node-b", DenyNotOwnHost, nil}}},
		{"node not found", tokenA, "host=node-a&ipv4=10.0.0.1", nil, false, "",
			[]Denial{{"host", "node-a", DenyNodeNotFound, nil}, {"ipv4", "10.0.0.1", DenyNodeNotFound, nil}}},
		{"token without node-name extra", tokenNoNode, "host=node-a&ipv4=10.0.0.1&cidr=10.0.0.0/8", nil, false, "",
			[]Denial{{"host", "node-a", DenyNoIdentity, nil}, {"ipv4", "10.0.0.1", DenyRouteClaim, nil}, {"cidr", "10.0.0.0/8", DenyRouteClaim, nil}}},
		{"gateway allowed routes: addresses of any node", gateway, "ipv4=10.0.0.1&ipv4=10.0.0.2&cidr=10.1.0.0/16", nil, true, "ipv4=10.0.0.1&ipv4=10.0.0.2&cidr=10.1.0.0/16", nil},
		{"gateway: no host names", gateway, "host=node-a", nil, true, "", []Denial{{"host", "node-a", DenyNoIdentity, nil}}},
		{"no identity gets nothing, even if told routes are allowed", Principal{}, "host=node-a&ipv4=10.0.0.1&cidr=0.0.0.0/0&default-route=true", nil, true, "",
			[]Denial{{"host", "node-a", DenyNoIdentity, nil}, {"ipv4", "10.0.0.1", DenyNoIdentity, nil}, {"cidr", "0.0.0.0/0", DenyNoIdentity, nil}, {"default-route", "true", DenyNoIdentity, nil}}},
		{"nothing claimed", tokenA, "", nodeA, false, "", nil},
		{"node certificate: its own name and address", certA, "host=node-a&ipv4=10.0.0.1", nodeA, false, "host=node-a&ipv4=10.0.0.1", nil},
		{"node certificate: another node's name and address", certA, "host=node-b&ipv4=10.0.0.2", nodeA, false, "",
			[]Denial{{"host", "node-b", DenyNotOwnHost, nil}, {"ipv4", "10.0.0.2", DenyNotOwnAddr, nil}}},
		{"node certificate: routes", certA, "cidr=10.0.0.0/8&default-route=true", nodeA, false, "",
			[]Denial{{"cidr", "10.0.0.0/8", DenyRouteClaim, nil}, {"default-route", "true", DenyRouteClaim, nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, denied := DecideIdentifiers(tc.p, ids(tc.claims), tc.node, tc.routes)
			if want := ids(tc.kept); !reflect.DeepEqual(kept, want) {
				t.Errorf("kept %+v, want %+v", kept, want)
			}
			if !reflect.DeepEqual(denied, tc.denied) {
				t.Errorf("denied %+v, want %+v", denied, tc.denied)
			}
		})
	}
}

func TestPrincipalFromCert(t *testing.T) {
	for _, tc := range []struct {
		cn, org string
		want    Principal
	}{
		{"system:node:node-a", "system:nodes", Principal{User: "system:node:node-a", Groups: []string{"system:nodes"}, Node: "node-a"}},
		{"system:node:node-a", "", Principal{User: "system:node:node-a", Node: "node-a"}}, // no group needed: the CommonName binds
		// A CommonName equal to a node's name is a user, not that node.
		{"node-a", "", Principal{User: "node-a"}},
		{"system:konnectivity-agent:zone-1", "portside:proxy-gateways", Principal{User: "system:konnectivity-agent:zone-1", Groups: []string{"portside:proxy-gateways"}}},
		{"System:Node:node-a", "", Principal{User: "System:Node:node-a"}}, // prefixes are case-sensitive, as in the Node authorizer
	} {
		c := &x509.Certificate{Subject: pkix.Name{CommonName: tc.cn}}
		if tc.org != "" {
			c.Subject.Organization = []string{tc.org}
		}
		if got := PrincipalFromCert(c); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("PrincipalFromCert(CN=%s,O=%s) = %+v, want %+v", tc.cn, tc.org, got, tc.want)
		}
	}
}

func TestRouteClaimsAllowed(t *testing.T) {
	p := Principal{User: "u", Groups: []string{"g"}, Node: "n"}
	for _, tc := range []struct {
		allowed []string
		want    bool
	}{
		{nil, false}, {[]string{"u"}, true}, {[]string{"g"}, true}, {[]string{"system:node:n"}, true},
		{[]string{"U", "other", "system:node:m"}, false},
	} {
		if got := RouteClaimsAllowed(p, tc.allowed); got != tc.want {
			t.Errorf("RouteClaimsAllowed(%v) = %v", tc.allowed, got)
		}
	}
	if RouteClaimsAllowed(Principal{}, []string{""}) {
		t.Error("an agent with no identity matched an empty entry")
	}
}

func TestFactsOf(t *testing.T) {
	f := FactsOf(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "::ffff:10.0.0.1"}, {Type: corev1.NodeInternalIP, Address: "bogus"}, {Type: "Other", Address: "x"}}}})
	if !reflect.DeepEqual(f.IPs, []netip.Addr{netip.MustParseAddr("10.0.0.1")}) || !reflect.DeepEqual(f.Hosts, []string{"n"}) {
		t.Errorf("FactsOf = %+v", f)
	}
}

func TestEventWorthy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		denied []Denial
		want   bool
	}{
		{"nothing denied", nil, false},
		{"the Node does not exist yet (a booting machine)", []Denial{{"host", "node-a", DenyNodeNotFound, nil}, {"ipv4", "10.0.0.1", DenyNodeNotFound, nil}}, false},
		{"another node's address", []Denial{{"ipv4", "10.0.0.2", DenyNotOwnAddr, nil}}, true},
		{"a route claim beside a missing Node", []Denial{{"host", "node-a", DenyNodeNotFound, nil}, {"cidr", "0.0.0.0/0", DenyRouteClaim, nil}}, true},
	} {
		if got := eventWorthy(tc.denied); got != tc.want {
			t.Errorf("%s: eventWorthy(%v) = %v, want %v", tc.name, tc.denied, got, tc.want)
		}
	}
}

func TestAuthBy(t *testing.T) {
	for _, tc := range []struct {
		name                                   string
		tokenAuth, certAgents, token, verified bool
		want                                   authMode
	}{
		{"tokens: the token decides", true, false, true, false, authByToken},
		{"tokens, with a certificate too: still the token (upstream)", true, false, true, true, authByToken},
		{"tokens, no token: the token check refuses", true, false, false, true, authByToken},
		{"tokens, no token, no certificate", true, false, false, false, authByToken},
		{"certificate agents allowed: a certificate without token names the agent", true, true, false, true, authByCertificate},
		{"certificate agents allowed: a token still wins", true, true, true, true, authByToken},
		{"certificate agents allowed: neither is refused by the token check", true, true, false, false, authByToken},
		{"no tokens: the certificate", false, false, false, true, authByCertificate},
		{"no tokens: a token is ignored, the certificate names it", false, false, true, true, authByCertificate},
		{"no tokens, nothing: the empty principal", false, false, true, false, authByNothing},
	} {
		if got := authBy(tc.tokenAuth, tc.certAgents, tc.token, tc.verified); got != tc.want {
			t.Errorf("%s: authBy = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestVerifiedLeaf(t *testing.T) {
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "system:node:node-a"}}
	ca := &x509.Certificate{Subject: pkix.Name{CommonName: "ca"}}
	for _, tc := range []struct {
		name string
		st   tls.ConnectionState
		want *x509.Certificate
	}{
		{"no certificate", tls.ConnectionState{}, nil},
		{"presented, not verified", tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}, nil},
		{"verified", tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf, ca}}}, leaf},
		{"a chain but no peer certificate", tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf, ca}}}, nil},
	} {
		if got := verifiedLeaf(tc.st); got != tc.want {
			t.Errorf("%s: verifiedLeaf = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// contested is f with keys marked contested: node-b lists them too.
func contested(f *NodeFacts, keys ...string) *NodeFacts {
	c := *f
	c.Contested = map[string][]string{}
	for _, k := range keys {
		c.Contested[k] = []string{"node-b"}
	}
	return &c
}

func TestClaimKeys(t *testing.T) {
	f := FactsOf(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeExternalIP, Address: "::ffff:10.0.0.1"},
		{Type: corev1.NodeHostName, Address: "n1"}, {Type: corev1.NodeInternalDNS, Address: "n1.dns"},
		// A "name" that is an address is the address: routing matches
		// host and ip claims as one list of strings.
		{Type: corev1.NodeExternalDNS, Address: "10.0.0.7"}}}})
	want := []string{"addr/10.0.0.1", "addr/10.0.0.7", "host/n1", "host/n1.dns"}
	if got := f.ClaimKeys(); !slices.Equal(got, want) {
		t.Errorf("ClaimKeys = %v, want %v (sorted, each once, IPv4-mapped as IPv4)", got, want)
	}
}
