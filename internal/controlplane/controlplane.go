// Package controlplane runs a real etcd and kube-apiserver as child processes
// on loopback: the control plane of integration tests, benchmarks and
// `portside up`. Ports are chosen free at start, so any number of control
// planes can run side by side.
package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/tools"
)

// Options configure a control plane.
type Options struct {
	// Dir holds etcd data, certificates, logs and the kubeconfig. Required.
	Dir string
	// BinDir holds the etcd and kube-apiserver binaries; default tools.BinDir().
	BinDir string
	// Durable keeps etcd's fsync on. Tests turn it off for speed.
	Durable bool
	// ServiceClusterIPRange defaults to 10.96.0.0/16.
	ServiceClusterIPRange string
	// APIServerPort fixes the secure port; 0 picks a free one.
	APIServerPort int
	// ExtraAPIServerArgs are appended to kube-apiserver's flags (after
	// Portside's, so they win).
	ExtraAPIServerArgs []string
	// EgressSelections route kube-apiserver's egress through konnectivity
	// proxy servers (--egress-selector-config-file); none: direct.
	EgressSelections []EgressSelection
	// StartTimeout bounds the wait for /readyz; default 90s.
	StartTimeout time.Duration
	// ExtraServingHosts are more names and addresses in kube-apiserver's
	// serving certificate: the address real nodes reach it at (the VPC
	// gateway), which is not one of its own.
	ExtraServingHosts []string
	// RealNodes configures kube-apiserver for real kubelets: bootstrap
	// tokens (TLS bootstrap), the Node authorizer before RBAC and the
	// NodeRestriction admission plugin, as kubeadm's clusters run.
	RealNodes bool
}

// ControlPlane is a running etcd + kube-apiserver.
type ControlPlane struct {
	// URL is the apiserver's https address.
	URL string
	// KubeconfigPath is an admin (system:masters) kubeconfig.
	KubeconfigPath string
	// EtcdURL is etcd's https client address; etcd requires the client
	// certificate of EtcdClientTLS.
	EtcdURL string

	dir        string
	ca         *pki
	caPEM      []byte
	etcdPKI    *etcdPKI
	clientCert []byte
	extraHosts []string
	clientKey  []byte
	etcd       *proc.Process
	apiserver  *proc.Process
}

const maxPortAttempts = 3

// ServiceAccountIssuer is the "iss" claim of the cluster's service-account
// tokens (kube-apiserver's --service-account-issuer).
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// ServiceAccountPublicKeyPEM returns the PEM public key that verifies the
// cluster's service-account tokens, for a cloud that exchanges them.
func (cp *ControlPlane) ServiceAccountPublicKeyPEM() ([]byte, error) {
	return os.ReadFile(filepath.Join(cp.dir, "pki", "sa.pub"))
}

// Start starts etcd then kube-apiserver and waits until the apiserver is ready.
// On any failure everything already started is stopped, and the error names
// the part that failed and the end of its log.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.Dir == "" {
		return nil, errors.New("controlplane: Options.Dir is required")
	}
	if opts.BinDir == "" {
		dir, err := tools.BinDir()
		if err != nil {
			return nil, err
		}
		opts.BinDir = dir
	}
	if opts.ServiceClusterIPRange == "" {
		opts.ServiceClusterIPRange = "10.96.0.0/16"
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 90 * time.Second
	}
	etcdBin, err := tools.Path(opts.BinDir, tools.Etcd)
	if err != nil {
		return nil, err
	}
	apiBin, err := tools.Path(opts.BinDir, tools.KubeAPIServer)
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"pki", "logs"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	cp := &ControlPlane{dir: opts.Dir, extraHosts: opts.ExtraServingHosts}
	if err := cp.writePKI(); err != nil {
		return nil, fmt.Errorf("controlplane: certificates: %w", err)
	}

	// A free port can be taken by someone else between our probe and the
	// child's bind; retry with new ports when that happens.
	for attempt := 1; ; attempt++ {
		err = cp.startEtcd(ctx, etcdBin, opts)
		if err == nil {
			break
		}
		if attempt >= maxPortAttempts || !portTaken(err) {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		err = cp.startAPIServer(ctx, apiBin, opts)
		if err == nil {
			break
		}
		if attempt >= maxPortAttempts || opts.APIServerPort != 0 || !portTaken(err) {
			cp.Stop()
			return nil, err
		}
	}
	if err := cp.writeKubeconfig(); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) startEtcd(ctx context.Context, bin string, opts Options) error {
	ports, err := FreePorts(2)
	if err != nil {
		return err
	}
	client := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "https://127.0.0.1:" + strconv.Itoa(ports[1])
	args := []string{
		"--name=portside",
		"--data-dir=" + filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=portside=" + peer,
		"--listen-metrics-urls=",
		"--log-level=warn",
	}
	args = append(args, cp.etcdPKI.etcdArgs()...)
	if !opts.Durable {
		args = append(args, "--unsafe-no-fsync=true")
	}
	p, err := proc.Start("etcd", bin, args, nil, filepath.Join(cp.dir, "logs", "etcd.log"))
	if err != nil {
		return err
	}
	tlsConfig, err := cp.etcdPKI.clientTLS()
	if err != nil {
		p.Stop(5 * time.Second)
		return err
	}
	health := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	err = waitHTTP(ctx, p, health, client+"/health", opts.StartTimeout)
	health.CloseIdleConnections()
	if err != nil {
		p.Stop(5 * time.Second)
		return err
	}
	cp.etcd, cp.EtcdURL = p, client
	return nil
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, bin string, opts Options) error {
	port := opts.APIServerPort
	if port == 0 {
		ports, err := FreePorts(1)
		if err != nil {
			return err
		}
		port = ports[0]
	}
	pki := filepath.Join(cp.dir, "pki")
	egressArgs, err := cp.writeEgressConfig(opts.EgressSelections)
	if err != nil {
		return err
	}
	args := []string{
		"--etcd-servers=" + cp.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The kubernetes Service cannot point at loopback; nothing needs it here.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + filepath.Join(pki, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(pki, "apiserver.key"),
		"--client-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-key-file=" + filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range=" + opts.ServiceClusterIPRange,
		"--authorization-mode=" + authorizationModes(opts.RealNodes),
		"--allow-privileged=true",
		"--cert-dir=" + filepath.Join(cp.dir, "apiserver-certs"),
		// kube-apiserver → kubelet (logs, exec, node proxy): it presents a
		// client certificate of the CA and verifies the kubelet's serving
		// certificate with the CA (IssueServingCert issues one per node).
		"--kubelet-client-certificate=" + filepath.Join(pki, "kubelet-client.crt"),
		"--kubelet-client-key=" + filepath.Join(pki, "kubelet-client.key"),
		"--kubelet-certificate-authority=" + filepath.Join(pki, "ca.crt"),
		// Simulated nodes' Hostname addresses do not resolve; their
		// InternalIPs (loopback addresses) are reachable.
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--v=1",
	}
	if opts.RealNodes {
		args = append(args, "--enable-bootstrap-token-auth=true", "--enable-admission-plugins=NodeRestriction")
	}
	args = append(args, cp.etcdPKI.apiserverArgs()...)
	args = append(args, egressArgs...)
	args = append(args, opts.ExtraAPIServerArgs...)
	p, err := proc.Start("kube-apiserver", bin, args, nil, filepath.Join(cp.dir, "logs", "kube-apiserver.log"))
	if err != nil {
		return err
	}
	cp.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	client, err := cp.httpClient()
	if err != nil {
		p.Stop(5 * time.Second)
		return err
	}
	if err := waitHTTP(ctx, p, client, cp.URL+"/readyz", opts.StartTimeout); err != nil {
		p.Stop(10 * time.Second)
		return err
	}
	cp.apiserver = p
	return nil
}

// Stop stops the apiserver then etcd, by PID, and waits for both to exit.
func (cp *ControlPlane) Stop() {
	if cp.apiserver != nil {
		cp.apiserver.Stop(15 * time.Second)
	}
	if cp.etcd != nil {
		cp.etcd.Stop(10 * time.Second)
	}
}

// Dir is the control plane's working directory.
func (cp *ControlPlane) Dir() string { return cp.dir }

// PIDs returns the PIDs of etcd and kube-apiserver.
func (cp *ControlPlane) PIDs() map[string]int {
	pids := map[string]int{}
	if cp.etcd != nil {
		pids["etcd"] = cp.etcd.PID()
	}
	if cp.apiserver != nil {
		pids["kube-apiserver"] = cp.apiserver.PID()
	}
	return pids
}

// RESTConfig returns an admin client configuration.
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return &rest.Config{
		Host: cp.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cp.caPEM,
			CertData: cp.clientCert,
			KeyData:  cp.clientKey,
		},
		QPS:   -1, // tests and tools should not be throttled client-side
		Burst: 0,
	}
}

func (cp *ControlPlane) writePKI() error {
	ca, err := newPKI()
	if err != nil {
		return err
	}
	servingCert, servingKey, err := ca.issue("kube-apiserver", nil,
		append([]string{"127.0.0.1", "::1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}, cp.extraHosts...),
		x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	cp.clientCert, cp.clientKey, err = ca.issue("portside-admin", []string{"system:masters"}, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	// The kubelet client identity of kube-apiserver, as kubeadm names it;
	// system:masters lets a kubelet that authorizes by webhook accept it.
	kubeletCert, kubeletKey, err := ca.issue("kube-apiserver-kubelet-client", []string{"system:masters"}, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	cp.ca, cp.caPEM = ca, ca.caPEM
	// The CA key is written (0600, as every key here) for
	// kube-controller-manager's CSR signer: real kubelets get their client
	// certificates by TLS bootstrap.
	caKey, err := ca.keyPEM()
	if err != nil {
		return err
	}
	dir := filepath.Join(cp.dir, "pki")
	if cp.etcdPKI, err = writeEtcdPKI(dir); err != nil {
		return err
	}
	if _, _, err := serviceAccountKeys(dir); err != nil {
		return err
	}
	return writeFiles(map[string][]byte{
		filepath.Join(dir, "ca.crt"):             ca.caPEM,
		filepath.Join(dir, "ca.key"):             caKey,
		filepath.Join(dir, "apiserver.crt"):      servingCert,
		filepath.Join(dir, "apiserver.key"):      servingKey,
		filepath.Join(dir, "kubelet-client.crt"): kubeletCert,
		filepath.Join(dir, "kubelet-client.key"): kubeletKey,
	})
}

func (cp *ControlPlane) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["portside"] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthorityData: cp.caPEM}
	cfg.AuthInfos["portside-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cp.clientCert, ClientKeyData: cp.clientKey}
	cfg.Contexts["portside"] = &clientcmdapi.Context{Cluster: "portside", AuthInfo: "portside-admin"}
	cfg.CurrentContext = "portside"
	cp.KubeconfigPath = filepath.Join(cp.dir, "kubeconfig")
	return clientcmd.WriteToFile(*cfg, cp.KubeconfigPath)
}

func (cp *ControlPlane) httpClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cp.caPEM) {
		return nil, errors.New("controlplane: bad CA")
	}
	cert, err := tls.X509KeyPair(cp.clientCert, cp.clientKey)
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		}},
	}, nil
}

// waitHTTP polls url until it answers 200, the process exits, or timeout.
func waitHTTP(ctx context.Context, p *proc.Process, client *http.Client, url string, timeout time.Duration) error {
	logger := klog.FromContext(ctx).WithValues("component", p.Name)
	deadline := time.Now().Add(timeout)
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				logger.V(2).Info("Ready", "pid", p.PID())
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-p.Done():
			return &StartError{Component: p.Name, Cause: fmt.Sprintf("exited during start-up (%v)", p.ExitErr()), LogPath: p.LogPath, LogTail: p.LogTail(15)}
		case <-ctx.Done():
			return &StartError{Component: p.Name, Cause: ctx.Err().Error(), LogPath: p.LogPath, LogTail: p.LogTail(15)}
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return &StartError{Component: p.Name, Cause: fmt.Sprintf("not ready after %v (last: %s)", timeout, last), LogPath: p.LogPath, LogTail: p.LogTail(15)}
		}
	}
}

// StartError says which part of the control plane failed to start and why.
type StartError struct {
	Component string
	Cause     string
	LogPath   string
	LogTail   string
}

func (e *StartError) Error() string {
	return fmt.Sprintf("%s failed to start: %s\n--- last lines of %s ---\n%s", e.Component, e.Cause, e.LogPath, e.LogTail)
}

func portTaken(err error) bool {
	var se *StartError
	return errors.As(err, &se) && strings.Contains(se.LogTail, "address already in use")
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 a moment ago.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// authorizationModes: real kubelets are authorized by the Node authorizer
// (each only for its own Node and pods), the rest by RBAC.
func authorizationModes(realNodes bool) string {
	if realNodes {
		return "Node,RBAC"
	}
	return "RBAC"
}
