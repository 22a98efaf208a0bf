package server

import (
	"crypto/x509"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"
)

// An agent's identifiers are claims: the server routes a node's kubelet
// traffic (exec, logs, port-forward) and Service traffic by them. So the
// server grants only what the agent's credential proves, and this file
// decides that, without I/O.

// NodeNameExtra is the TokenReview extra a pod-bound ServiceAccount token
// carries: the name of the node the pod runs on.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// nodeUserPrefix is the user name of a node's credential (kubelet client
// certificates, the Node authorizer): "system:node:<nodeName>".
const nodeUserPrefix = "system:node:"

// Principal is who an agent proved to be.
type Principal struct {
	// User is the authenticated user: the ServiceAccount user of a token,
	// or a client certificate's CommonName; empty when the agent proved
	// nothing (no token authentication and no verified certificate).
	User   string
	Groups []string
	// Node is the node the credential is bound to: the token's node-name
	// extra, or <name> of a certificate whose CommonName is
	// system:node:<name>. Empty when the credential names no node.
	Node string
}

// PrincipalFromCert is the principal of a verified client certificate.
// Only the CommonName form system:node:<name> binds a node, the same form
// kube-apiserver's Node authorizer trusts: a bare CommonName that happens
// to equal a node's name would let any user so named claim that node.
func PrincipalFromCert(c *x509.Certificate) Principal {
	p := Principal{User: c.Subject.CommonName, Groups: slices.Clone(c.Subject.Organization)}
	if n, ok := strings.CutPrefix(p.User, nodeUserPrefix); ok {
		p.Node = n
	}
	return p
}

// NodeFacts is what the apiserver says of a node: the names and the
// addresses an agent on it may claim.
type NodeFacts struct {
	Name string
	// Hosts: the node's name and its Hostname/InternalDNS/ExternalDNS
	// addresses, the names kube-apiserver may dial the kubelet by.
	Hosts []string
	IPs   []netip.Addr
	// Contested are the Hosts and IPs (ClaimKey) another Node lists too.
	// A node's kubelet writes its own Node's status, so a compromised
	// node can list another's name or address there; granting it to both
	// agents would send the other node's kubelet traffic (exec, logs)
	// through the compromised one. Nobody may claim it by its Node while
	// two Nodes list it (NAT'd nodes sharing an ExternalIP lose it too:
	// no single node could be reached by it anyway). The value names the
	// other Nodes, for the operator to find the culprit.
	Contested map[string][]string
}

// ClaimKeys are the keys of a node's claimable names and addresses, for
// finding Nodes that list the same (the server's Node index).
func (f *NodeFacts) ClaimKeys() []string {
	keys := make([]string, 0, len(f.Hosts)+len(f.IPs))
	for _, h := range f.Hosts {
		keys = append(keys, hostKey(h))
	}
	for _, ip := range f.IPs {
		keys = append(keys, addrKey(ip))
	}
	return slices.Compact(slices.Sorted(slices.Values(keys)))
}

// hostKey is a host name's key; a "name" that is an IP address is keyed as
// the address: routing matches host, ipv4 and ipv6 claims as one list of
// strings, so a Hostname address 10.0.0.1 on one Node and InternalIP
// 10.0.0.1 on another are the same claim, and contested.
func hostKey(h string) string {
	if ip, err := netip.ParseAddr(h); err == nil {
		return addrKey(ip)
	}
	return "host/" + h
}

func addrKey(ip netip.Addr) string { return "addr/" + ip.Unmap().String() }

// FactsOf reads a Node's claimable names and addresses.
func FactsOf(n *corev1.Node) *NodeFacts {
	f := &NodeFacts{Name: n.Name, Hosts: []string{n.Name}}
	for _, a := range n.Status.Addresses {
		switch a.Type {
		case corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
			f.Hosts = append(f.Hosts, a.Address)
		case corev1.NodeInternalIP, corev1.NodeExternalIP:
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				f.IPs = append(f.IPs, ip.Unmap())
			}
		}
	}
	return f
}

// Denial is one identifier an agent may not claim, and why.
type Denial struct {
	Kind   string `json:"kind"` // host, ipv4, ipv6, cidr, default-route
	Value  string `json:"value"`
	Reason string `json:"reason"` // a metric label value
	// ListedBy are the other Nodes that list a contested identifier.
	ListedBy []string `json:"listedBy,omitempty"`
}

// Denial reasons (label values of the denied-identifiers metric).
const (
	DenyNoIdentity   = "no_identity"       // the agent proved no identity, or none bound to a node
	DenyNodeNotFound = "node_not_found"    // its node is not (yet) a Node in the apiserver
	DenyNotOwnHost   = "not_own_host"      // a host name that is not its node's
	DenyNotOwnAddr   = "not_own_address"   // an address that is not its node's
	DenyMalformed    = "malformed"         // not an address of the identifier's family
	DenyRouteClaim   = "route_not_allowed" // cidr/default-route, or another node's address, without --allow-route-claims
	DenyContested    = "contested"         // its node's, but another Node lists it too (NodeFacts.Contested)
)

// RouteClaimsAllowed reports whether the operator's --allow-route-claims
// list names the principal: by user, by group, or, for a node-bound
// credential, as system:node:<node>.
func RouteClaimsAllowed(p Principal, allowed []string) bool {
	if p.User == "" {
		return false
	}
	for _, a := range allowed {
		if a == p.User || slices.Contains(p.Groups, a) || (p.Node != "" && a == nodeUserPrefix+p.Node) {
			return true
		}
	}
	return false
}

// DecideIdentifiers returns the identifiers the agent keeps and those it
// loses. node is the apiserver's view of p.Node (nil: no node-bound
// credential, or the Node does not exist). The rules:
//   - host: its node's name or DNS addresses, compared exactly (upstream's
//     destHost matching is exact, and Node names are lower case);
//   - ipv4/ipv6: its node's addresses; any address only for an agent
//     allowed route claims, since one address is a /32 (/128) route;
//   - cidr and default-route: only agents allowed route claims, because
//     they capture every address nobody claims more precisely (cidr) or
//     every dial left over (default-route).
func DecideIdentifiers(p Principal, claims header.Identifiers, node *NodeFacts, routesAllowed bool) (header.Identifiers, []Denial) {
	var kept header.Identifiers
	var denied []Denial
	deny := func(kind, v, reason string) { denied = append(denied, Denial{Kind: kind, Value: v, Reason: reason}) }
	routesAllowed = routesAllowed && p.User != "" // no identity, no routes, whatever the caller says
	// nodeless is why a claim on a node fails when there is none to check.
	nodeless := DenyNoIdentity
	if p.User != "" && p.Node != "" {
		nodeless = DenyNodeNotFound
	}
	for _, h := range claims.Host {
		switch {
		case node == nil:
			deny("host", h, nodeless)
		case slices.Contains(node.Hosts, h) && node.Contested[hostKey(h)] != nil:
			denied = append(denied, Denial{Kind: "host", Value: h, Reason: DenyContested, ListedBy: node.Contested[hostKey(h)]})
		case slices.Contains(node.Hosts, h):
			kept.Host = append(kept.Host, h)
		default:
			deny("host", h, DenyNotOwnHost)
		}
	}
	addr := func(kind, v string, want4 bool) bool {
		ip, err := netip.ParseAddr(v)
		if err != nil || ip.Zone() != "" || want4 != ip.Is4() {
			deny(kind, v, DenyMalformed)
			return false
		}
		own := node != nil && slices.Contains(node.IPs, ip)
		switch {
		case own && node.Contested[addrKey(ip)] == nil, routesAllowed:
			return true
		case own:
			denied = append(denied, Denial{Kind: kind, Value: v, Reason: DenyContested, ListedBy: node.Contested[addrKey(ip)]})
		case node != nil:
			deny(kind, v, DenyNotOwnAddr)
		case p.User != "" && p.Node == "":
			// An identity bound to no node, and not allowed routes.
			deny(kind, v, DenyRouteClaim)
		default:
			deny(kind, v, nodeless)
		}
		return false
	}
	for _, v := range claims.IPv4 {
		if addr("ipv4", v, true) {
			kept.IPv4 = append(kept.IPv4, v)
		}
	}
	for _, v := range claims.IPv6 {
		if addr("ipv6", v, false) {
			kept.IPv6 = append(kept.IPv6, v)
		}
	}
	routeReason := DenyRouteClaim
	if p.User == "" {
		routeReason = DenyNoIdentity
	}
	for _, c := range claims.CIDR {
		if routesAllowed {
			kept.CIDR = append(kept.CIDR, c)
		} else {
			deny("cidr", c, routeReason)
		}
	}
	if claims.DefaultRoute {
		if routesAllowed {
			kept.DefaultRoute = true
		} else {
			deny("default-route", "true", routeReason)
		}
	}
	return kept, denied
}

// eventWorthy decides whether denials warrant a Warning Event on the Node:
// not when every one is only that the Node does not exist yet. An agent in
// a machine starts before its kubelet registers the Node (every boot of a
// real node); its claims are granted once the Node appears (nodeChanged),
// and the log line and the denial metric still record the wait.
func eventWorthy(denied []Denial) bool {
	for _, d := range denied {
		if d.Reason != DenyNodeNotFound {
			return true
		}
	}
	return false
}

// authMode is how an agent's stream is authenticated.
type authMode int

const (
	// authByNothing: the empty Principal, which may claim no identifier.
	authByNothing authMode = iota
	authByToken
	authByCertificate
)

// authBy decides how to authenticate an agent: with token authentication
// on, by its token (a stream without one is refused by the token check),
// except, with certificate agents allowed, an agent that sent no token but
// a verified client certificate, which names it; without token
// authentication, by its verified client certificate if any.
func authBy(tokenAuth, certificateAgents, hasToken, hasCert bool) authMode {
	switch {
	case tokenAuth && certificateAgents && !hasToken && hasCert:
		return authByCertificate
	case tokenAuth:
		return authByToken
	case hasCert:
		return authByCertificate
	}
	return authByNothing
}
