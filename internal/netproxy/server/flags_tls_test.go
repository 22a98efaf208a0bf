package server_test

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"

	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
)

// TestFlagsRequireClientCertificates: with --server-ca-cert and
// --cluster-ca-cert, the TLS configs Options builds from the flags (the
// ones the command serves with) refuse a client without a certificate on
// the TCP frontend and on the agent port, and accept one the CA signed.
// The server's other tests build their TLS configs themselves, so only
// this one guards the flag path.
func TestFlagsRequireClientCertificates(t *testing.T) {
	pki := netproxytest.NewPKI(t)
	caf, crt, key := pki.ServerFiles(t, t.TempDir())
	f := server.NewFlags()
	fs := pflag.NewFlagSet("proxy-server", pflag.ContinueOnError)
	f.AddFlags(fs)
	if err := fs.Parse([]string{"--server-cert=" + crt, "--server-key=" + key, "--server-ca-cert=" + caf,
		"--cluster-cert=" + crt, "--cluster-key=" + key, "--cluster-ca-cert=" + caf}); err != nil {
		t.Fatal(err)
	}
	o, err := f.Options(fs, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		name string
		cfg  *tls.Config
	}{{"the TCP frontend (--server-ca-cert)", o.FrontendTLS}, {"the agent port (--cluster-ca-cert)", o.AgentTLS}} {
		if side.cfg == nil {
			t.Fatalf("%s: no TLS config", side.name)
		}
		for _, c := range []struct {
			name, cn string
			ok       bool
		}{{"no client certificate", "", false}, {"a certificate of the CA", "client", true}} {
			err := serverHandshake(t, side.cfg, pki.ClientTLS(t, c.cn))
			if (err == nil) != c.ok {
				t.Errorf("%s, %s: server handshake error %v, want ok=%v", side.name, c.name, err, c.ok)
			}
		}
	}
}

// serverHandshake is the server side's handshake result for one client.
func serverHandshake(t *testing.T, serverTLS, client *tls.Config) error {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	result := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			result <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		result <- c.(*tls.Conn).Handshake()
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		// TLS 1.3: the client is done before the server has read its
		// certificate; a read sees the server's verdict.
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = c.Read(make([]byte, 1))
		c.Close()
	}
	return <-result
}
