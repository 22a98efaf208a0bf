package nodesim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// AnnotationEndpointsOn lists (comma-separated) the simulated nodes that
// have local endpoints of a Service: their health-check node port answers
// 200, the others 503, as kube-proxy does for externalTrafficPolicy=Local.
// Without it every node has endpoints.
const AnnotationEndpointsOn = "nodesim.portside.io/endpoints-on"

// ProxyStandIn plays kube-proxy on simulated nodes: on each node's IP it
// answers every Service's NodePorts (HTTP on TCP, echo on UDP), and the
// health-check node port of externalTrafficPolicy=Local Services.
type ProxyStandIn struct {
	client kubernetes.Interface

	mu        sync.Mutex
	nodes     map[string]netip.Addr // name → IP
	listeners map[string]closer     // "node|proto|port" → listener
	services  map[string]*corev1.Service
}

type closer interface{ Close() error }

// NewProxyStandIn returns a stand-in; add nodes with AddNode, then Run.
func NewProxyStandIn(client kubernetes.Interface) *ProxyStandIn {
	return &ProxyStandIn{client: client, nodes: map[string]netip.Addr{}, listeners: map[string]closer{}, services: map[string]*corev1.Service{}}
}

// AddNode makes the stand-in answer on ip for node.
func (p *ProxyStandIn) AddNode(node string, ip netip.Addr) {
	p.mu.Lock()
	p.nodes[node] = ip
	p.mu.Unlock()
	p.reconcile()
}

// RemoveNode stops answering for node (its kubelet and kube-proxy are gone).
func (p *ProxyStandIn) RemoveNode(node string) {
	p.mu.Lock()
	delete(p.nodes, node)
	p.mu.Unlock()
	p.reconcile()
}

// Run watches Services until ctx is done, then closes every listener.
func (p *ProxyStandIn) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(p.client, 0)
	inf := factory.Core().V1().Services().Informer()
	set := func(obj any) {
		if svc, ok := obj.(*corev1.Service); ok {
			p.mu.Lock()
			p.services[svc.Namespace+"/"+svc.Name] = svc
			p.mu.Unlock()
			p.reconcile()
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: set, UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if svc, ok := obj.(*corev1.Service); ok {
				p.mu.Lock()
				delete(p.services, svc.Namespace+"/"+svc.Name)
				p.mu.Unlock()
				p.reconcile()
			}
		},
	})
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, l := range p.listeners {
		_ = l.Close()
		delete(p.listeners, k)
	}
}

// reconcile opens and closes listeners to match nodes × Service ports.
func (p *ProxyStandIn) reconcile() {
	p.mu.Lock()
	defer p.mu.Unlock()
	type want struct {
		node  string
		ip    netip.Addr
		proto corev1.Protocol
		port  int32
		hc    bool
		svc   string
	}
	wanted := map[string]want{}
	for key, svc := range p.services {
		for node, ip := range p.nodes {
			for _, sp := range svc.Spec.Ports {
				if sp.NodePort != 0 {
					w := want{node: node, ip: ip, proto: sp.Protocol, port: sp.NodePort, svc: key}
					wanted[fmt.Sprintf("%s|%s|%d", node, w.proto, w.port)] = w
				}
			}
			if svc.Spec.HealthCheckNodePort != 0 {
				w := want{node: node, ip: ip, proto: corev1.ProtocolTCP, port: svc.Spec.HealthCheckNodePort, hc: true, svc: key}
				wanted[fmt.Sprintf("%s|TCP|%d", node, w.port)] = w
			}
		}
	}
	for k, l := range p.listeners {
		if _, ok := wanted[k]; !ok {
			_ = l.Close()
			delete(p.listeners, k)
		}
	}
	for k, w := range wanted {
		if _, ok := p.listeners[k]; ok {
			continue
		}
		addr := net.JoinHostPort(w.ip.String(), strconv.Itoa(int(w.port)))
		var l closer
		var err error
		switch {
		case w.hc:
			l, err = p.serveHTTP(addr, p.healthHandler(w.node, w.svc))
		case w.proto == corev1.ProtocolUDP:
			l, err = serveUDP(addr, w.node)
		default:
			l, err = p.serveHTTP(addr, nodePortHandler(w.node, w.svc))
		}
		if err != nil {
			klog.Background().V(2).Info("Stand-in cannot listen", "address", addr, "err", err)
			continue
		}
		p.listeners[k] = l
	}
}

func (p *ProxyStandIn) serveHTTP(addr string, h http.Handler) (closer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

// nodePortHandler answers like a backend reached through kube-proxy.
func nodePortHandler(node, svc string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Node", node)
		_, _ = fmt.Fprintf(w, "hello from %s (service %s, client %s)\n", node, svc, r.RemoteAddr)
	})
}

// healthHandler answers kube-proxy's health check for a Local Service.
func (p *ProxyStandIn) healthHandler(node, svc string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		s := p.services[svc]
		p.mu.Unlock()
		local := s != nil
		if s != nil {
			if on, ok := s.Annotations[AnnotationEndpointsOn]; ok {
				local = false
				for _, n := range strings.Split(on, ",") {
					local = local || strings.TrimSpace(n) == node
				}
			}
		}
		if !local {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, `{"service":%q,"localEndpoints":0}`, svc)
			return
		}
		_, _ = fmt.Fprintf(w, `{"service":%q,"localEndpoints":1}`, svc)
	})
}

type udpEcho struct{ pc net.PacketConn }

func (u udpEcho) Close() error { return u.pc.Close() }

// serveUDP answers each datagram with "<node>: <datagram>".
func serveUDP(addr, node string) (closer, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 64*1024)
		for {
			n, from, err := pc.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			_, _ = pc.WriteTo(append([]byte(node+": "), buf[:n]...), from)
		}
	}()
	return udpEcho{pc}, nil
}
