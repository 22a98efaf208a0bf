package nodesim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// KubeletOptions configure the HTTPS endpoint of one simulated kubelet, the
// one kube-apiserver calls for container logs and node proxy.
type KubeletOptions struct {
	// NodeName names the node in answers.
	NodeName string
	// Address is the IP to listen on: the node's InternalIP, which
	// kube-apiserver dials (--kubelet-preferred-address-types).
	Address string
	// Port is the port to listen on; 0 picks a free one. Register the node
	// with it (NodeSpec.KubeletPort) so kube-apiserver finds it.
	Port int
	// Certificate is the serving certificate. kube-apiserver verifies it when
	// started with --kubelet-certificate-authority (the control plane's is:
	// issue one with controlplane.IssueServingCert for Address). Required.
	Certificate tls.Certificate
	// ClientCAs, when set, makes the kubelet require a client certificate
	// signed by one of them (kube-apiserver's --kubelet-client-certificate),
	// as a kubelet with --client-ca-file and authentication would.
	ClientCAs *x509.CertPool
	// Logs returns a container's log; default ContainerLog.
	Logs func(node, namespace, pod, container string) string
	// OnRequest, when set, is called for every request while it is served
	// (its connection still open), before the answer is written.
	OnRequest func(KubeletRequest)
}

// KubeletRequest is one request a simulated kubelet served.
type KubeletRequest struct {
	Method, Path string
	// Remote is the connection's source address: who dialed the kubelet
	// (kube-apiserver, or a proxy agent when an egress selector is used).
	Remote netip.AddrPort
	// Local is the address the connection reached.
	Local netip.AddrPort
	// ClientCN is the common name of the verified client certificate, if any.
	ClientCN string
	Time     time.Time
}

// KubeletServer is a running simulated kubelet HTTPS endpoint. It serves
// /healthz ("ok") and /containerLogs/{namespace}/{pod}/{container} (plain
// text lines naming the pod and the node), and records every request.
type KubeletServer struct {
	opts KubeletOptions
	ln   net.Listener
	srv  *http.Server
	done chan struct{}

	mu   sync.Mutex
	reqs []KubeletRequest
}

// StartKubelet listens on opts.Address:opts.Port and serves until Close.
func StartKubelet(opts KubeletOptions) (*KubeletServer, error) {
	if opts.Address == "" {
		return nil, errors.New("nodesim: kubelet: Address is required")
	}
	if len(opts.Certificate.Certificate) == 0 {
		return nil, errors.New("nodesim: kubelet: Certificate is required")
	}
	if opts.Logs == nil {
		opts.Logs = ContainerLog
	}
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{opts.Certificate}, MinVersion: tls.VersionTLS12}
	if opts.ClientCAs != nil {
		tlsCfg.ClientCAs, tlsCfg.ClientAuth = opts.ClientCAs, tls.RequireAndVerifyClientCert
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(opts.Address, strconv.Itoa(opts.Port)))
	if err != nil {
		return nil, fmt.Errorf("nodesim: kubelet of %s: %w", opts.NodeName, err)
	}
	k := &KubeletServer{opts: opts, ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", k.containerLogs)
	k.srv = &http.Server{
		Handler:           k.record(mux),
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// No write timeout: `kubectl logs -f` streams for as long as it likes.
		IdleTimeout: 90 * time.Second,
	}
	go func() {
		defer close(k.done)
		_ = k.srv.Serve(tls.NewListener(ln, tlsCfg))
	}()
	return k, nil
}

// ContainerLog is the default log of a simulated container: three lines
// naming the container, its pod and the node.
func ContainerLog(node, namespace, pod, container string) string {
	var b strings.Builder
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&b, "line %d of container %s of pod %s/%s on node %s\n", i, container, namespace, pod, node)
	}
	return b.String()
}

func (k *KubeletServer) containerLogs(w http.ResponseWriter, r *http.Request) {
	text := k.opts.Logs(k.opts.NodeName, r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container"))
	if n, err := strconv.Atoi(r.URL.Query().Get("tailLines")); err == nil && n >= 0 {
		lines := strings.SplitAfter(text, "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		if n < len(lines) {
			text = strings.Join(lines[len(lines)-n:], "")
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(text))
}

func (k *KubeletServer) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := KubeletRequest{Method: r.Method, Path: r.URL.Path, Time: time.Now()}
		req.Remote, _ = netip.ParseAddrPort(r.RemoteAddr)
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			req.Local, _ = netip.ParseAddrPort(a.String())
		}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			req.ClientCN = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		k.mu.Lock()
		k.reqs = append(k.reqs, req)
		k.mu.Unlock()
		if k.opts.OnRequest != nil {
			k.opts.OnRequest(req)
		}
		next.ServeHTTP(w, r)
	})
}

// Port is the port the kubelet listens on.
func (k *KubeletServer) Port() int32 { return int32(k.ln.Addr().(*net.TCPAddr).Port) }

// Addr is the kubelet's host:port.
func (k *KubeletServer) Addr() string { return k.ln.Addr().String() }

// Requests returns the requests served so far, oldest first.
func (k *KubeletServer) Requests() []KubeletRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]KubeletRequest(nil), k.reqs...)
}

// Close stops the server and closes its connections.
func (k *KubeletServer) Close() error {
	err := k.srv.Close()
	<-k.done
	return err
}

// SetKubeletPort records a kubelet's port in its Node's status
// (daemonEndpoints.kubeletEndpoint.Port), where kube-apiserver looks for it.
func (s *Simulator) SetKubeletPort(ctx context.Context, node string, port int32) error {
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{
		"daemonEndpoints": map[string]any{"kubeletEndpoint": map[string]any{"Port": port}},
	}})
	_, err := s.client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}
