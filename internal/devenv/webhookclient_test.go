package devenv

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// TestWriteWebhookClient: the files `up` gives kube-apiserver name a
// client certificate the webhook's CA verifies for client auth, through a
// kubeconfig user "*" that both webhook admission plugins use.
func TestWriteWebhookClient(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "webhook client")
	wc, err := writeWebhookClient(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Upstream's fields (apiserver.config.k8s.io/v1), decoded strictly.
	var adm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Plugins    []struct {
			Name          string `json:"name"`
			Configuration struct {
				APIVersion     string `json:"apiVersion"`
				Kind           string `json:"kind"`
				KubeConfigFile string `json:"kubeConfigFile"`
			} `json:"configuration"`
		} `json:"plugins"`
	}
	data, err := os.ReadFile(wc.AdmissionConfigFile)
	if err != nil || yaml.UnmarshalStrict(data, &adm) != nil || adm.APIVersion != "apiserver.config.k8s.io/v1" || adm.Kind != "AdmissionConfiguration" || len(adm.Plugins) != 2 {
		t.Fatalf("admission configuration: %v\n%s", err, data)
	}
	for _, p := range adm.Plugins {
		if p.Configuration.APIVersion != "apiserver.config.k8s.io/v1" || p.Configuration.Kind != "WebhookAdmissionConfiguration" || p.Configuration.KubeConfigFile != filepath.Join(dir, "kubeconfig") {
			t.Errorf("plugin %s: %+v", p.Name, p.Configuration)
		}
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	user := kc.AuthInfos["*"]
	if user == nil {
		t.Fatalf("no user \"*\" in %+v", kc.AuthInfos)
	}
	certPEM, err := os.ReadFile(user.ClientCertificate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(user.ClientKey); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(wc.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA in the CA file")
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: time.Now()}); err != nil {
		t.Errorf("the client certificate does not verify against the webhook's CA for client auth: %v", err)
	}
	if strings.Contains(cert.Subject.CommonName, "admin") || len(cert.Subject.Organization) > 0 {
		t.Errorf("subject %v: the webhook client needs no groups", cert.Subject)
	}
	for _, f := range []string{wc.CAFile, user.ClientCertificate, user.ClientKey} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want 0600", f, fi.Mode(), err)
		}
	}
}
