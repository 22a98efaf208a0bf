package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1beta1 "k8s.io/apiserver/pkg/apis/apiserver/v1beta1"
	"sigs.k8s.io/yaml"
)

// Egress selection names kube-apiserver knows.
const (
	// EgressCluster is traffic to nodes, pods and services: kubelet
	// (logs, exec, port-forward, node proxy), pod/service proxy, webhooks
	// and aggregated APIs running in the cluster.
	EgressCluster = "cluster"
	// EgressControlPlane is traffic to the control plane (webhooks and
	// aggregated APIs outside the cluster).
	EgressControlPlane = "controlplane"
	// EgressEtcd is traffic to etcd.
	EgressEtcd = "etcd"
)

// Egress proxy protocols (EgressSelection.ProxyProtocol).
const (
	// ProxyGRPC speaks konnectivity's gRPC; only over a unix socket.
	ProxyGRPC = string(apiserverv1beta1.ProtocolGRPC)
	// ProxyHTTPConnect sends HTTP CONNECT, over a unix socket or TCP (mTLS).
	ProxyHTTPConnect = string(apiserverv1beta1.ProtocolHTTPConnect)
	// ProxyDirect dials directly (no proxy).
	ProxyDirect = string(apiserverv1beta1.ProtocolDirect)
)

// EgressSelection routes one kind of kube-apiserver egress through a
// konnectivity-compatible proxy server. It becomes one entry of the
// EgressSelectorConfiguration (apiserver.k8s.io/v1beta1) passed with
// --egress-selector-config-file.
type EgressSelection struct {
	// Name is EgressCluster, EgressControlPlane or EgressEtcd.
	Name string
	// ProxyProtocol is ProxyGRPC, ProxyHTTPConnect or ProxyDirect.
	ProxyProtocol string
	// UDSName is the proxy server's unix socket (GRPC or HTTPConnect). It
	// need not exist when kube-apiserver starts: it dials per connection.
	UDSName string
	// URL is the proxy server's TCP address, https://host:port (HTTPConnect
	// only). With https, kube-apiserver verifies the proxy's certificate with
	// CABundle and presents ClientCert/ClientKey.
	URL string
	// CABundle defaults to the control plane's CA (CAFile); issue the proxy
	// server's certificate with IssueServingCert.
	CABundle string
	// ClientCert and ClientKey default to a client certificate issued by the
	// control plane's CA for CN "system:konnectivity-client" (KonnectivityClientCert).
	ClientCert, ClientKey string
}

// KonnectivityClientName is the file name (in the PKI directory) of the
// client certificate kube-apiserver presents to a TCP proxy server.
const KonnectivityClientName = "konnectivity-client"

// EgressSelectorConfig renders selections as an EgressSelectorConfiguration
// (apiserver.k8s.io/v1beta1) YAML document. Defaults (CA bundle, client
// certificate) must have been filled in already.
func EgressSelectorConfig(selections []EgressSelection) ([]byte, error) {
	cfg := apiserverv1beta1.EgressSelectorConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: apiserverv1beta1.SchemeGroupVersion.String(), Kind: "EgressSelectorConfiguration"},
	}
	seen := map[string]bool{}
	for _, s := range selections {
		if seen[s.Name] {
			return nil, fmt.Errorf("egress selection %q given twice", s.Name)
		}
		seen[s.Name] = true
		switch s.Name {
		case EgressCluster, EgressControlPlane, EgressEtcd:
		default:
			return nil, fmt.Errorf("egress selection %q: name must be %s, %s or %s", s.Name, EgressCluster, EgressControlPlane, EgressEtcd)
		}
		conn := apiserverv1beta1.Connection{ProxyProtocol: apiserverv1beta1.ProtocolType(s.ProxyProtocol)}
		switch {
		case s.ProxyProtocol == ProxyDirect:
		case s.ProxyProtocol != ProxyGRPC && s.ProxyProtocol != ProxyHTTPConnect:
			return nil, fmt.Errorf("egress selection %q: proxy protocol %q must be %s, %s or %s", s.Name, s.ProxyProtocol, ProxyGRPC, ProxyHTTPConnect, ProxyDirect)
		case (s.UDSName == "") == (s.URL == ""):
			return nil, fmt.Errorf("egress selection %q: exactly one of UDSName and URL must be set", s.Name)
		case s.UDSName != "":
			conn.Transport = &apiserverv1beta1.Transport{UDS: &apiserverv1beta1.UDSTransport{UDSName: s.UDSName}}
		case s.ProxyProtocol == ProxyGRPC:
			return nil, fmt.Errorf("egress selection %q: GRPC needs a unix socket (UDSName); kube-apiserver does not support it over TCP", s.Name)
		default:
			tcp := &apiserverv1beta1.TCPTransport{URL: s.URL}
			if s.CABundle != "" || s.ClientCert != "" || s.ClientKey != "" {
				tcp.TLSConfig = &apiserverv1beta1.TLSConfig{CABundle: s.CABundle, ClientCert: s.ClientCert, ClientKey: s.ClientKey}
			}
			conn.Transport = &apiserverv1beta1.Transport{TCP: tcp}
		}
		cfg.EgressSelections = append(cfg.EgressSelections, apiserverv1beta1.EgressSelection{Name: s.Name, Connection: conn})
	}
	return yaml.Marshal(cfg)
}

// writeEgressConfig fills the defaults of selections, writes the
// configuration into the control plane's directory and returns the
// kube-apiserver flag for it, or nil without selections.
func (cp *ControlPlane) writeEgressConfig(selections []EgressSelection) ([]string, error) {
	if len(selections) == 0 {
		return nil, nil
	}
	sels := append([]EgressSelection(nil), selections...)
	for i := range sels {
		s := &sels[i]
		if s.URL == "" || s.ProxyProtocol == ProxyDirect || !strings.HasPrefix(s.URL, "https://") {
			continue
		}
		if s.CABundle == "" {
			s.CABundle = cp.CAFile()
		}
		if s.ClientCert == "" && s.ClientKey == "" {
			pair, err := cp.KonnectivityClientCert()
			if err != nil {
				return nil, err
			}
			s.ClientCert, s.ClientKey = pair.CertFile, pair.KeyFile
		}
	}
	data, err := EgressSelectorConfig(sels)
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	path := filepath.Join(cp.dir, "egress-selector.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, err
	}
	return []string{"--egress-selector-config-file=" + path}, nil
}

// CertPair is a certificate and its key signed by the control plane's CA,
// in PEM and as files in the control plane's PKI directory.
type CertPair struct {
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
}

// TLSCertificate parses the pair for a tls.Config.
func (c CertPair) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(c.CertPEM, c.KeyPEM)
}

// CAPEM is the control plane's CA certificate (PEM).
func (cp *ControlPlane) CAPEM() []byte { return cp.caPEM }

// CAFile is the path of the control plane's CA certificate.
func (cp *ControlPlane) CAFile() string { return filepath.Join(cp.dir, "pki", "ca.crt") }

// CAKeyFile is the path of the CA's private key (kube-controller-manager's
// --cluster-signing-key-file).
func (cp *ControlPlane) CAKeyFile() string { return filepath.Join(cp.dir, "pki", "ca.key") }

// CAPool is a pool holding the control plane's CA.
func (cp *ControlPlane) CAPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.caPEM)
	return pool
}

// IssueServingCert issues a server certificate for hosts (IP addresses or
// DNS names) signed by the control plane's CA, which kube-apiserver trusts
// for kubelets (--kubelet-certificate-authority) and, by default, for egress
// proxy servers. It is written to <dir>/pki/<name>.{crt,key}.
func (cp *ControlPlane) IssueServingCert(name string, hosts ...string) (CertPair, error) {
	if len(hosts) == 0 {
		return CertPair{}, errors.New("controlplane: a serving certificate needs at least one host")
	}
	return cp.issueFiles(name, hosts[0], nil, hosts, x509.ExtKeyUsageServerAuth)
}

// IssueClientCert issues a client certificate (user commonName, groups
// orgs) signed by the control plane's CA, which kube-apiserver accepts
// (--client-ca-file). It is written to <dir>/pki/<name>.{crt,key}.
func (cp *ControlPlane) IssueClientCert(name, commonName string, orgs ...string) (CertPair, error) {
	return cp.issueFiles(name, commonName, orgs, nil, x509.ExtKeyUsageClientAuth)
}

// KonnectivityClientCert is the client certificate kube-apiserver presents to
// an egress proxy server over TCP (issued on first use).
func (cp *ControlPlane) KonnectivityClientCert() (CertPair, error) {
	return cp.IssueClientCert(KonnectivityClientName, "system:konnectivity-client")
}

func (cp *ControlPlane) issueFiles(name, cn string, orgs, hosts []string, usage x509.ExtKeyUsage) (CertPair, error) {
	if cp.ca == nil {
		return CertPair{}, errors.New("controlplane: no CA (not started)")
	}
	if name == "" || filepath.Base(name) != name {
		return CertPair{}, fmt.Errorf("controlplane: bad certificate name %q", name)
	}
	certPEM, keyPEM, err := cp.ca.issue(cn, orgs, hosts, usage)
	if err != nil {
		return CertPair{}, err
	}
	dir := filepath.Join(cp.dir, "pki")
	pair := CertPair{CertPEM: certPEM, KeyPEM: keyPEM,
		CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}
	if err := writeFiles(map[string][]byte{pair.CertFile: certPEM, pair.KeyFile: keyPEM}); err != nil {
		return CertPair{}, err
	}
	return pair, nil
}
