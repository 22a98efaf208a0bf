package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
)

// etcd serves TLS on its client and peer URLs and requires a client
// certificate on both: loopback is shared by every local user, and a plain
// etcd on it lets any of them write the cluster (Secrets, RBAC) behind
// kube-apiserver's back.
//
// Its certificates come from a CA of their own, as kubeadm's etcd/ca.crt,
// not from the control plane's CA: that CA also signs certificates handed to
// kubelets, proxy agents and test clients (IssueClientCert), and etcd checks
// only that a client certificate chains to its trusted CA, so sharing it
// would let each of those holders write etcd.
type etcdPKI struct {
	dir string // <Dir>/pki/etcd, mode 0700; out of reach of issueFiles' names

	caPEM                 []byte
	clientCert, clientKey []byte // kube-apiserver's (and Portside's) etcd client identity
}

func (e *etcdPKI) caFile() string     { return filepath.Join(e.dir, "ca.crt") }
func (e *etcdPKI) serverCert() string { return filepath.Join(e.dir, "server.crt") }
func (e *etcdPKI) serverKey() string  { return filepath.Join(e.dir, "server.key") }
func (e *etcdPKI) peerCert() string   { return filepath.Join(e.dir, "peer.crt") }
func (e *etcdPKI) peerKey() string    { return filepath.Join(e.dir, "peer.key") }
func (e *etcdPKI) clientCertFile() string {
	return filepath.Join(e.dir, "apiserver-etcd-client.crt")
}
func (e *etcdPKI) clientKeyFile() string {
	return filepath.Join(e.dir, "apiserver-etcd-client.key")
}

// writeEtcdPKI creates a fresh etcd CA and its leaf certificates on every
// start, like the control plane's CA: etcd's data does not depend on them.
func writeEtcdPKI(pkiDir string) (*etcdPKI, error) {
	e := &etcdPKI{dir: filepath.Join(pkiDir, "etcd")}
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		return nil, err
	}
	// MkdirAll keeps the mode of a directory left by an earlier run.
	if err := os.Chmod(e.dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := newCA("portside-etcd-ca")
	if err != nil {
		return nil, err
	}
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	// A member is a server to clients and peers, and a client of its peers.
	serverCert, serverKey, err := ca.issue("portside-etcd", nil, hosts, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	peerCert, peerKey, err := ca.issue("portside-etcd-peer", nil, hosts, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	e.clientCert, e.clientKey, err = ca.issue("kube-apiserver-etcd-client", nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	e.caPEM = ca.caPEM
	return e, writeFiles(map[string][]byte{
		e.caFile():         ca.caPEM,
		e.serverCert():     serverCert,
		e.serverKey():      serverKey,
		e.peerCert():       peerCert,
		e.peerKey():        peerKey,
		e.clientCertFile(): e.clientCert,
		e.clientKeyFile():  e.clientKey,
	})
}

// etcdArgs are etcd's TLS flags: https on both URLs, a client certificate
// of the etcd CA required on both.
func (e *etcdPKI) etcdArgs() []string {
	return []string{
		"--cert-file=" + e.serverCert(),
		"--key-file=" + e.serverKey(),
		"--client-cert-auth=true",
		"--trusted-ca-file=" + e.caFile(),
		"--peer-cert-file=" + e.peerCert(),
		"--peer-key-file=" + e.peerKey(),
		"--peer-client-cert-auth=true",
		"--peer-trusted-ca-file=" + e.caFile(),
	}
}

// apiserverArgs point kube-apiserver's etcd client at the etcd CA and its
// client certificate.
func (e *etcdPKI) apiserverArgs() []string {
	return []string{
		"--etcd-cafile=" + e.caFile(),
		"--etcd-certfile=" + e.clientCertFile(),
		"--etcd-keyfile=" + e.clientKeyFile(),
	}
}

func (e *etcdPKI) clientTLS() (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(e.caPEM) {
		return nil, errors.New("controlplane: bad etcd CA")
	}
	cert, err := tls.X509KeyPair(e.clientCert, e.clientKey)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// EtcdClientTLS is the TLS configuration of a client of etcd (EtcdURL): the
// etcd CA and kube-apiserver's etcd client certificate. Anything that talks
// to etcd directly must use it; etcd refuses clients without it.
func (cp *ControlPlane) EtcdClientTLS() (*tls.Config, error) {
	if cp.etcdPKI == nil {
		return nil, errors.New("controlplane: no etcd certificates (not started)")
	}
	return cp.etcdPKI.clientTLS()
}
