package nodesim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ProxyStandIn plays kube-proxy on simulated nodes, from Services and
// their EndpointSlices as kube-proxy reads them. On each node's IP:
//   - a NodePort answers only while it has somewhere to send traffic: a
//     ready endpoint of the Service, or for externalTrafficPolicy=Local a
//     ready endpoint on that node; otherwise it refuses connections, as
//     kube-proxy's REJECT rule does. HTTP on TCP, echo on UDP; the answer
//     names the node and the pod (round-robin) that "served" it.
//   - the health-check node port of a Local Service answers 200 with the
//     count of local ready endpoints, or 503 when there are none, as
//     kube-proxy's healthz server does; load balancers' health checks then
//     follow where the pods run.
type ProxyStandIn struct {
	client kubernetes.Interface

	mu        sync.Mutex
	nodes     map[string]netip.Addr // name → IP
	listeners map[string]closer     // "node|proto|port" → listener
	services  map[string]*corev1.Service
	// slices by Service key ("ns/name"), then by slice name.
	slices map[string]map[string]*discoveryv1.EndpointSlice
	// next picks endpoints round-robin per "node|service|port".
	next map[string]int
}

type closer interface{ Close() error }

// NewProxyStandIn returns a stand-in; add nodes with AddNode, then Run.
func NewProxyStandIn(client kubernetes.Interface) *ProxyStandIn {
	return &ProxyStandIn{client: client, nodes: map[string]netip.Addr{}, listeners: map[string]closer{},
		services: map[string]*corev1.Service{}, slices: map[string]map[string]*discoveryv1.EndpointSlice{}, next: map[string]int{}}
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

func unwrapTombstone(obj any) any {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tomb.Obj
	}
	return obj
}

// Run watches Services and EndpointSlices until ctx is done, then closes
// every listener.
func (p *ProxyStandIn) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(p.client, 0)
	_, _ = factory.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: p.setService, UpdateFunc: func(_, obj any) { p.setService(obj) },
		DeleteFunc: func(obj any) {
			if svc, ok := unwrapTombstone(obj).(*corev1.Service); ok {
				p.mu.Lock()
				delete(p.services, svc.Namespace+"/"+svc.Name)
				p.mu.Unlock()
				p.reconcile()
			}
		},
	})
	_, _ = factory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { p.setSlice(obj, false) }, UpdateFunc: func(_, obj any) { p.setSlice(obj, false) },
		DeleteFunc: func(obj any) { p.setSlice(unwrapTombstone(obj), true) },
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

func (p *ProxyStandIn) setService(obj any) {
	if svc, ok := obj.(*corev1.Service); ok {
		p.mu.Lock()
		p.services[svc.Namespace+"/"+svc.Name] = svc
		p.mu.Unlock()
		p.reconcile()
	}
}

func (p *ProxyStandIn) setSlice(obj any, deleted bool) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	svcName := s.Labels[discoveryv1.LabelServiceName]
	if svcName == "" {
		return
	}
	key := s.Namespace + "/" + svcName
	p.mu.Lock()
	if deleted {
		delete(p.slices[key], s.Name)
		if len(p.slices[key]) == 0 {
			delete(p.slices, key)
		}
	} else {
		if p.slices[key] == nil {
			p.slices[key] = map[string]*discoveryv1.EndpointSlice{}
		}
		p.slices[key][s.Name] = s
	}
	p.mu.Unlock()
	p.reconcile()
}

// endpointsLocked are the ready endpoints of one port of a Service.
func (p *ProxyStandIn) endpointsLocked(svcKey string, port corev1.ServicePort) []Endpoint {
	list := make([]*discoveryv1.EndpointSlice, 0, len(p.slices[svcKey]))
	for _, s := range p.slices[svcKey] {
		list = append(list, s)
	}
	return ReadyEndpoints(list, port)
}

// listenKey names one listener: a node's port of a protocol.
func listenKey(node string, proto corev1.Protocol, port int32) string {
	return fmt.Sprintf("%s|%s|%d", node, proto, port)
}

type wantListener struct {
	node, svc string
	ip        netip.Addr
	port      corev1.ServicePort // for a health-check port: only Port set
	hc        bool
}

// reconcile opens and closes listeners to match what kube-proxy would
// answer on each node: NodePorts with somewhere to send traffic, and the
// health-check node ports of Local Services.
func (p *ProxyStandIn) reconcile() {
	p.mu.Lock()
	defer p.mu.Unlock()
	wanted := map[string]wantListener{}
	for key, svc := range p.services {
		for _, sp := range svc.Spec.Ports {
			if sp.NodePort == 0 {
				continue
			}
			eps := p.endpointsLocked(key, sp)
			for node, ip := range p.nodes {
				if len(NodePortTargets(svc, eps, node)) > 0 {
					wanted[listenKey(node, protocolOf(sp), sp.NodePort)] = wantListener{node: node, svc: key, ip: ip, port: sp}
				}
			}
		}
		if hc := svc.Spec.HealthCheckNodePort; hc != 0 {
			for node, ip := range p.nodes {
				wanted[listenKey(node, corev1.ProtocolTCP, hc)] = wantListener{node: node, svc: key, ip: ip, port: corev1.ServicePort{Port: hc}, hc: true}
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
		l, err := p.listen(w)
		if err != nil {
			klog.Background().V(2).Info("Stand-in cannot listen", "node", w.node, "service", w.svc, "port", w.port.NodePort, "err", err)
			continue
		}
		p.listeners[k] = l
	}
}

func protocolOf(sp corev1.ServicePort) corev1.Protocol {
	if sp.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return sp.Protocol
}

func (p *ProxyStandIn) listen(w wantListener) (closer, error) {
	if w.hc {
		return serveHTTP(net.JoinHostPort(w.ip.String(), strconv.Itoa(int(w.port.Port))), p.healthHandler(w.node, w.svc))
	}
	addr := net.JoinHostPort(w.ip.String(), strconv.Itoa(int(w.port.NodePort)))
	if protocolOf(w.port) == corev1.ProtocolUDP {
		return p.serveUDP(addr, w.node, w.svc, w.port)
	}
	return serveHTTP(addr, p.nodePortHandler(w.node, w.svc, w.port))
}

// pick returns the endpoint that serves the next request to a NodePort,
// round-robin over its targets, or false when it has none now.
func (p *ProxyStandIn) pick(node, svcKey string, port corev1.ServicePort) (Endpoint, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	svc := p.services[svcKey]
	if svc == nil {
		return Endpoint{}, false
	}
	targets := NodePortTargets(svc, p.endpointsLocked(svcKey, port), node)
	if len(targets) == 0 {
		return Endpoint{}, false
	}
	rr := node + "|" + svcKey + "|" + port.Name
	i := p.next[rr] % len(targets)
	p.next[rr] = i + 1
	return targets[i], true
}

func serveHTTP(addr string, h http.Handler) (closer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

// nodePortHandler answers like a pod reached through kube-proxy on node.
// X-Node names the node whose NodePort took the request, X-Pod the pod.
func (p *ProxyStandIn) nodePortHandler(node, svcKey string, port corev1.ServicePort) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep, ok := p.pick(node, svcKey, port)
		if !ok {
			// The listener is closing: the last endpoint just went away.
			http.Error(w, "no endpoints", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Node", node)
		w.Header().Set("X-Pod", ep.Pod)
		_, _ = fmt.Fprintf(w, "hello from %s (%s on %s) through %s; service %s, client %s\n", ep.Pod, ep.IP, orUnknown(ep.Node), node, svcKey, r.RemoteAddr)
	})
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown node"
	}
	return s
}

// healthHandler answers kube-proxy's health check of a Local Service on node.
func (p *ProxyStandIn) healthHandler(node, svcKey string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		local := 0
		if svc := p.services[svcKey]; svc != nil {
			seen := map[string]bool{}
			for _, sp := range svc.Spec.Ports {
				for _, e := range LocalEndpoints(p.endpointsLocked(svcKey, sp), node) {
					if !seen[e.IP] {
						seen[e.IP] = true
						local++
					}
				}
			}
		}
		p.mu.Unlock()
		ns, name, _ := cache.SplitMetaNamespaceKey(svcKey)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if local == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = fmt.Fprintf(w, `{"service":{"namespace":%q,"name":%q},"localEndpoints":%d,"serviceProxyHealthy":true}`, ns, name, local)
	})
}

type udpEcho struct{ pc net.PacketConn }

func (u udpEcho) Close() error { return u.pc.Close() }

// serveUDP answers each datagram with "<node>/<pod>: <datagram>", and
// drops it when there is no endpoint to serve it.
func (p *ProxyStandIn) serveUDP(addr, node, svcKey string, port corev1.ServicePort) (closer, error) {
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
			ep, ok := p.pick(node, svcKey, port)
			if !ok {
				continue
			}
			_, _ = pc.WriteTo(append([]byte(node+"/"+ep.Pod+": "), buf[:n]...), from)
		}
	}()
	return udpEcho{pc}, nil
}
