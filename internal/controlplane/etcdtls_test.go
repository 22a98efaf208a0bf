package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// etcdKV speaks etcd's JSON gateway (/v3/kv/*), which is what another local
// user with curl would use.
type etcdKV struct {
	base   string // scheme://host:port
	client *http.Client
}

func (kv etcdKV) call(op string, body map[string]any) (map[string]any, error) {
	data, _ := json.Marshal(body)
	resp, err := kv.client.Post(kv.base+"/v3/kv/"+op, "application/json", bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(out)))
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", out, err)
	}
	return m, nil
}

func (kv etcdKV) put(key string) error {
	_, err := kv.call("put", map[string]any{"key": b64(key), "value": b64("stranger")})
	return err
}

// count is the number of keys with prefix key.
func (kv etcdKV) count(key string) (string, error) {
	end := key[:len(key)-1] + string(key[len(key)-1]+1)
	m, err := kv.call("range", map[string]any{"key": b64(key), "range_end": b64(end), "count_only": true})
	if err != nil {
		return "", err
	}
	n, _ := m["count"].(string) // absent means 0 in proto3 JSON
	if n == "" {
		n = "0"
	}
	return n, nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestEtcdRequiresItsClientCertificate(t *testing.T) {
	bins := binDir(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Options{Dir: dir, BinDir: bins})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	u, err := url.Parse(cp.EtcdURL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "https" {
		t.Errorf("EtcdURL %s is not https", cp.EtcdURL)
	}
	good, err := cp.EtcdClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	newClient := func(cfg *tls.Config) *http.Client {
		tr := &http.Transport{TLSClientConfig: cfg}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Timeout: 5 * time.Second, Transport: tr}
	}
	// Trusting etcd's CA, so that a refusal is about the client's identity.
	noCert := &tls.Config{RootCAs: good.RootCAs, MinVersion: tls.VersionTLS12}
	// A certificate of the control plane's CA, as kubelets, proxy agents and
	// test clients hold: it must not open etcd.
	other, err := cp.IssueClientCert("not-etcd", "system:admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	otherCert, err := other.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	// Sent even though etcd asks for its own CA's (Go would send none).
	otherCA := &tls.Config{RootCAs: good.RootCAs, MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &otherCert, nil }}

	const prefix = "/portside-test/stranger/"
	for _, c := range []struct {
		name string
		kv   etcdKV
	}{
		{"plain http", etcdKV{base: "http://" + u.Host, client: newClient(nil)}},
		{"TLS without a client certificate", etcdKV{base: "https://" + u.Host, client: newClient(noCert)}},
		{"TLS with a certificate of the control plane's CA", etcdKV{base: "https://" + u.Host, client: newClient(otherCA)}},
	} {
		if err := c.kv.put(prefix + c.name); err == nil {
			t.Errorf("%s: etcd accepted a write", c.name)
		} else {
			t.Logf("%s: refused: %v", c.name, err)
		}
	}

	owner := etcdKV{base: cp.EtcdURL, client: newClient(good)}
	if n, err := owner.count(prefix); err != nil || n != "0" {
		t.Errorf("keys written by strangers: %s, %v", n, err)
	}
	if err := owner.put("/portside-test/owner"); err != nil {
		t.Fatalf("with the etcd client certificate: %v", err)
	}
	// kube-apiserver stores into this etcd over the same TLS.
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "etcd-tls", Namespace: "default"}}
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := owner.count("/registry/configmaps/default/etcd-tls"); err != nil || n != "1" {
		t.Errorf("the apiserver's ConfigMap in etcd: %s, %v", n, err)
	}

	// Keys readable by their owner only; etcd's directory closed to others.
	etcdDir := filepath.Join(dir, "pki", "etcd")
	if fi, err := os.Stat(etcdDir); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %v, want 0700", etcdDir, fi.Mode().Perm())
	}
	keys, _ := filepath.Glob(filepath.Join(etcdDir, "*.key"))
	if len(keys) != 3 {
		t.Errorf("etcd keys %v, want server, peer and apiserver-etcd-client", keys)
	}
	for _, k := range keys {
		if fi, err := os.Stat(k); err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", k, fi.Mode().Perm())
		}
	}
}
