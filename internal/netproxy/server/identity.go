package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"
)

// authenticate is who the agent on stream proved to be. With token
// authentication the token decides (the agent port's certificate, if any,
// then only secures the transport); without it, a client certificate
// verified against --cluster-ca-cert does. An agent that proved nothing
// gets the empty Principal, which may claim no identifier.
func (s *Server) authenticate(ctx context.Context, md metadata.MD) (Principal, error) {
	var cert *x509.Certificate
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			cert = verifiedLeaf(ti.State)
		}
	}
	switch authBy(s.opts.TokenAuth != nil, s.opts.CertificateAgents, len(md.Get(header.AuthenticationTokenContextKey)) > 0, cert != nil) {
	case authByToken:
		return s.opts.TokenAuth.Authenticate(ctx, md)
	case authByCertificate:
		return PrincipalFromCert(cert), nil
	}
	return Principal{}, nil
}

// verifiedLeaf is the peer's certificate when the handshake verified its
// chain against the agent port's CA. A certificate only presented (were
// the port ever to ask for certificates without verifying them) proves
// nothing: anyone can make one for CN=system:node:<any node>.
func verifiedLeaf(st tls.ConnectionState) *x509.Certificate {
	if len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 {
		return nil
	}
	return st.PeerCertificates[0]
}

// nodeCache is the apiserver's Nodes, watched, so a connect costs no
// request and an agent gains its claims when its Node appears or gets the
// addresses the cloud provider sets after the agent connected.
type nodeCache struct {
	factory informers.SharedInformerFactory
	lister  cache.Indexer
	holders *claimHolders
	stop    chan struct{}
	once    sync.Once
	// Events on the Node an agent is bound to tell the node's operator
	// what it tried to claim (kubectl describe node).
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	events      typedcorev1.EventInterface
}

func newNodeCache(cs kubernetes.Interface, changed func(name string)) *nodeCache {
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Core().V1().Nodes().Informer()
	holders := newClaimHolders()
	// set re-decides the agents of Node name, unless its names and
	// addresses are unchanged (a status heartbeat every 10 s per node),
	// and of the Nodes whose contest over a name or address its keys
	// (nil: gone) began or ended.
	set := func(name string, keys []string) {
		affected, same := holders.set(name, keys)
		if same {
			return
		}
		changed(name)
		for _, other := range affected {
			changed(other)
		}
	}
	node := func(obj any) *corev1.Node {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		n, _ := obj.(*corev1.Node)
		return n
	}
	update := func(obj any) {
		if n := node(obj); n != nil {
			set(n.Name, FactsOf(n).ClaimKeys())
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, obj any) { update(obj) },
		DeleteFunc: func(obj any) {
			if n := node(obj); n != nil {
				set(n.Name, nil)
			}
		},
	})
	b := record.NewBroadcaster()
	return &nodeCache{factory: f, lister: inf.GetIndexer(), holders: holders, stop: make(chan struct{}), broadcaster: b,
		recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventSource}),
		events:   cs.CoreV1().Events("")}
}

func (c *nodeCache) start() {
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.events})
	c.factory.Start(c.stop)
}

func (c *nodeCache) shutdown() {
	c.once.Do(func() { close(c.stop); c.factory.Shutdown(); c.broadcaster.Shutdown() })
}

// get is the facts of Node name, with what another Node lists too
// marked Contested.
func (c *nodeCache) get(name string) *NodeFacts {
	obj, ok, err := c.lister.GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	f := FactsOf(obj.(*corev1.Node))
	for _, key := range f.ClaimKeys() {
		if others := c.holders.others(name, key); len(others) > 0 {
			if f.Contested == nil {
				f.Contested = map[string][]string{}
			}
			f.Contested[key] = others
		}
	}
	return f
}

// decideIdentity applies DecideIdentifiers to an agent's claims with the
// current Node, logging and counting what it may not claim.
func (s *Server) decideIdentity(logger logr.Logger, agentID string, p Principal, claims header.Identifiers) (Identity, []Denial) {
	var facts *NodeFacts
	if p.Node != "" && s.nodes != nil {
		facts = s.nodes.get(p.Node)
	}
	kept, denied := DecideIdentifiers(p, claims, facts, RouteClaimsAllowed(p, s.opts.RouteClaims))
	id, bad := NewIdentity(agentID, kept)
	if len(bad) > 0 {
		logger.Info("Ignoring malformed cidr identifiers", "cidrs", bad)
	}
	return id, denied
}

func (s *Server) reportDenials(logger logr.Logger, agentID string, p Principal, denied []Denial) {
	if len(denied) == 0 {
		return
	}
	for _, d := range denied {
		s.m.identifiersDenied.WithLabelValues(d.Kind, d.Reason).Inc()
	}
	// Info, not V(n): an impostor, or an agent whose operator forgot
	// --allow-route-claims, must be visible by default.
	logger.Info("Agent may not claim some identifiers; they are ignored", "user", p.User, "node", p.Node, "denied", denied,
		"hint", denialHint)
	if p.Node != "" && s.nodes != nil && eventWorthy(denied) {
		parts := make([]string, len(denied))
		for i, d := range denied {
			parts[i] = d.Kind + "=" + d.Value + " (" + d.Reason + ")"
			if len(d.ListedBy) > 0 {
				parts[i] = d.Kind + "=" + d.Value + " (" + d.Reason + ": also listed by Node " + strings.Join(d.ListedBy, ", ") + ")"
			}
		}
		// The Node is named, not fetched: the event is for its operator
		// even when the Node does not exist (yet). The UID is the name, as
		// the kubelet's node events have it, which kubectl describe node
		// looks for.
		ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: p.Node, UID: types.UID(p.Node)}
		s.nodes.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonAgentIdentifiersDenied,
			"Proxy agent %s (user %s) may not claim %s: %s", agentID, p.User, strings.Join(parts, ", "), denialHint)
	}
}

const denialHint = "host/ipv4/ipv6 must be the agent's own Node's name and addresses; cidr, default-route and other addresses need --allow-route-claims"

// nodeChanged re-decides the identity of the agents bound to node:
// those of that node only (a Node's status heartbeat every 10 s per node
// must not scan every agent).
func (s *Server) nodeChanged(node string) {
	for _, b := range s.backends.onNode(node) {
		s.redecide(b)
	}
}

// redecide recomputes b's routing identity; it reports denials only when
// they changed, so a Node's status heartbeats do not flood the log.
func (s *Server) redecide(b *backend) {
	logger := s.logger.WithValues("agentID", b.id.AgentID)
	id, denied := s.decideIdentity(logger, b.id.AgentID, b.principal, b.claims)
	if s.backends.setIdentity(b, id, denied) {
		s.readyBackendsChanged()
		s.reportDenials(logger, b.id.AgentID, b.principal, denied)
		logger.V(2).Info("Agent identity updated from its Node", "hosts", id.Hosts, "cidrs", id.CIDRs, "defaultRoute", id.DefaultRoute)
		if n := s.revokeStale(b); n > 0 {
			// Info: connections cut by a Node change are for the operator
			// to see, as the denial itself is.
			logger.Info("Closed connections routed by identifiers the agent no longer holds", "connections", n,
				"user", b.principal.User, "node", b.principal.Node, "hosts", id.Hosts)
		}
	}
}
