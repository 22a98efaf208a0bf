package nodesim

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/portside-io/portside/internal/nettest"
)

// TestKubeletServer: /healthz, container logs (tailLines too), 404 for the
// rest, and every request recorded with its source address.
func TestKubeletServer(t *testing.T) {
	cert, pool := nettest.SelfSigned(t, "kubelet")
	var seen []KubeletRequest
	k, err := StartKubelet(KubeletOptions{NodeName: "n1", Address: "127.0.0.1", Certificate: cert,
		OnRequest: func(r KubeletRequest) { seen = append(seen, r) }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = k.Close() }()
	if k.Port() == 0 || !strings.HasPrefix(k.Addr(), "127.0.0.1:") {
		t.Fatalf("addr %s port %d", k.Addr(), k.Port())
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(path string) (int, string) {
		resp, err := c.Get("https://" + k.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	code, body := get("/containerLogs/ns1/p1/c1")
	if code != 200 || strings.Count(body, "\n") != 3 || !strings.Contains(body, "container c1 of pod ns1/p1 on node n1") {
		t.Errorf("logs: %d %q", code, body)
	}
	if code, body := get("/containerLogs/ns1/p1/c1?tailLines=1"); code != 200 || body != "line 3 of container c1 of pod ns1/p1 on node n1\n" {
		t.Errorf("tailLines=1: %d %q", code, body)
	}
	if code, _ := get("/exec/ns1/p1/c1"); code != http.StatusNotFound {
		t.Errorf("/exec: %d, want 404", code)
	}
	reqs := k.Requests()
	if len(reqs) != 4 || len(seen) != 4 {
		t.Fatalf("recorded %d requests, OnRequest saw %d; want 4", len(reqs), len(seen))
	}
	if r := reqs[0]; r.Path != "/healthz" || r.Remote.Addr().String() != "127.0.0.1" || r.Remote.Port() == 0 || int32(r.Local.Port()) != k.Port() {
		t.Errorf("first request %+v", r)
	}
}

// TestKubeletServerRequiresClientCert: with ClientCAs, a client without a
// certificate of them is refused at the handshake.
func TestKubeletServerRequiresClientCert(t *testing.T) {
	cert, pool := nettest.SelfSigned(t, "kubelet")
	k, err := StartKubelet(KubeletOptions{NodeName: "n1", Address: "127.0.0.1", Certificate: cert, ClientCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = k.Close() }()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if resp, err := c.Get("https://" + k.Addr() + "/healthz"); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("no client certificate: %s, want a handshake error", resp.Status)
	}
	if n := len(k.Requests()); n != 0 {
		t.Errorf("%d requests recorded", n)
	}
}

// TestNodeStatusKubeletPort: the port lands where kube-apiserver looks.
func TestNodeStatusKubeletPort(t *testing.T) {
	st := nodeStatus(NodeSpec{Name: "n1", NodeIPs: []string{"127.0.0.1"}, KubeletPort: 12345})
	if st.DaemonEndpoints.KubeletEndpoint.Port != 12345 {
		t.Errorf("kubelet port %d", st.DaemonEndpoints.KubeletEndpoint.Port)
	}
}
