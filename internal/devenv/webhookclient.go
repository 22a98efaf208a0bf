package devenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// webhookClient is the identity kube-apiserver presents to admission
// webhooks: a client certificate of a CA of its own, which the CCM's
// persistent-volume-label webhook requires (--webhook-client-ca-file).
// The CA is not the cluster's: that one also signs the admin's, the
// kubelets' and the proxy's certificates, and none of those should be
// able to call the webhook.
type webhookClient struct {
	// CAFile is the CA the webhook requires of its callers.
	CAFile string
	// AdmissionConfigFile is kube-apiserver's --admission-control-config-file.
	AdmissionConfigFile string
}

// writeWebhookClient makes a fresh CA and client certificate in dir (every
// run, as the control plane's PKI), the kubeconfig naming them and the
// admission configuration pointing at it.
func writeWebhookClient(dir string) (webhookClient, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return webhookClient{}, err
	}
	caPEM, certPEM, keyPEM, err := newWebhookClientCerts(time.Now())
	if err != nil {
		return webhookClient{}, fmt.Errorf("webhook client certificate: %w", err)
	}
	wc := webhookClient{CAFile: filepath.Join(dir, "ca.crt"), AdmissionConfigFile: filepath.Join(dir, "admission.yaml")}
	certFile, keyFile, kubeconfig := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"), filepath.Join(dir, "kubeconfig")
	for path, data := range map[string][]byte{
		wc.CAFile:              caPEM,
		certFile:               certPEM,
		keyFile:                keyPEM,
		kubeconfig:             []byte(webhookClientKubeconfig(certFile, keyFile)),
		wc.AdmissionConfigFile: []byte(webhookAdmissionConfig(kubeconfig)),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return webhookClient{}, err
		}
	}
	return wc, nil
}

// webhookClientKubeconfig names the client certificate for user "*":
// kube-apiserver picks a webhook's credentials by the user named as the
// webhook's host:port, and the port is chosen only when the CCM starts,
// after the apiserver. Every webhook of `up` is Portside's, so "*" gives
// the certificate to no one else.
func webhookClientKubeconfig(certFile, keyFile string) string {
	return "apiVersion: v1\nkind: Config\nusers:\n- name: \"*\"\n  user:\n    client-certificate: " + strconv.Quote(certFile) +
		"\n    client-key: " + strconv.Quote(keyFile) + "\n"
}

// webhookAdmissionConfig gives both webhook admission plugins the
// kubeconfig (persistent-volume-label is a mutating webhook; a validating
// one added later gets the same identity).
func webhookAdmissionConfig(kubeconfig string) string {
	s := "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n"
	for _, plugin := range []string{"MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"} {
		s += "- name: " + plugin + "\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: " + strconv.Quote(kubeconfig) + "\n"
	}
	return s
}

// newWebhookClientCerts returns a CA and a client certificate it signs
// (PEM), valid for a year from now.
func newWebhookClientCerts(now time.Time) (caPEM, certPEM, keyPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "portside-webhook-client-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver-webhook-client"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
