package controlplane

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEgressSelectorConfig: selections render as kube-apiserver's
// EgressSelectorConfiguration, and impossible ones are refused.
func TestEgressSelectorConfig(t *testing.T) {
	got, err := EgressSelectorConfig([]EgressSelection{
		{Name: EgressCluster, ProxyProtocol: ProxyGRPC, UDSName: "/run/konnectivity.sock"},
		{Name: EgressControlPlane, ProxyProtocol: ProxyHTTPConnect, URL: "https://127.0.0.1:8131",
			CABundle: "/pki/ca.crt", ClientCert: "/pki/c.crt", ClientKey: "/pki/c.key"},
		{Name: EgressEtcd, ProxyProtocol: ProxyDirect},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `apiVersion: apiserver.k8s.io/v1beta1
egressSelections:
- connection:
    proxyProtocol: GRPC
    transport:
      uds:
        udsName: /run/konnectivity.sock
  name: cluster
- connection:
    proxyProtocol: HTTPConnect
    transport:
      tcp:
        tlsConfig:
          caBundle: /pki/ca.crt
          clientCert: /pki/c.crt
          clientKey: /pki/c.key
        url: https://127.0.0.1:8131
  name: controlplane
- connection:
    proxyProtocol: Direct
  name: etcd
kind: EgressSelectorConfiguration
`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	for name, bad := range map[string][]EgressSelection{
		"GRPC over TCP":  {{Name: EgressCluster, ProxyProtocol: ProxyGRPC, URL: "https://127.0.0.1:1"}},
		"no transport":   {{Name: EgressCluster, ProxyProtocol: ProxyGRPC}},
		"two transports": {{Name: EgressCluster, ProxyProtocol: ProxyHTTPConnect, URL: "https://x:1", UDSName: "/s"}},
		"unknown name":   {{Name: "nodes", ProxyProtocol: ProxyDirect}},
		"bad protocol":   {{Name: EgressCluster, ProxyProtocol: "SOCKS", UDSName: "/s"}},
		"twice":          {{Name: EgressEtcd, ProxyProtocol: ProxyDirect}, {Name: EgressEtcd, ProxyProtocol: ProxyDirect}},
	} {
		if _, err := EgressSelectorConfig(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestWriteEgressConfigDefaults: an https proxy gets the control plane's CA
// and a konnectivity client certificate of it; the file is passed by flag.
func TestWriteEgressConfigDefaults(t *testing.T) {
	ca, err := newPKI()
	if err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{dir: t.TempDir(), ca: ca, caPEM: ca.caPEM}
	if err := os.MkdirAll(filepath.Join(cp.dir, "pki"), 0o755); err != nil {
		t.Fatal(err)
	}
	args, err := cp.writeEgressConfig([]EgressSelection{{Name: EgressCluster, ProxyProtocol: ProxyHTTPConnect, URL: "https://127.0.0.1:8131"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(args) != 1 || !strings.HasPrefix(args[0], "--egress-selector-config-file=") {
		t.Fatalf("args %v", args)
	}
	data, err := os.ReadFile(strings.TrimPrefix(args[0], "--egress-selector-config-file="))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"caBundle: " + cp.CAFile(), "clientCert: " + filepath.Join(cp.dir, "pki", KonnectivityClientName+".crt")} {
		if !strings.Contains(string(data), want) {
			t.Errorf("config lacks %q:\n%s", want, data)
		}
	}
	pair, err := cp.KonnectivityClientCert()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pair.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: cp.CAPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate does not verify with the CA: %v", err)
	}
	if none, _ := cp.writeEgressConfig(nil); none != nil {
		t.Errorf("no selections: args %v", none)
	}
}
