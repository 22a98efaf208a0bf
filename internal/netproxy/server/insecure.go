package server

import (
	"errors"
	"fmt"
	"strings"

	"github.com/portside-io/portside/internal/netproxy/tlsutil"
)

// The flags that accept a set-up checkSecurity otherwise refuses. Upstream
// has no such flags because it has no such set-ups: its TCP frontend and
// its agent port always serve TLS. Portside can serve either in plaintext
// (tests, a TLS-terminating load balancer), but only when told so.
const (
	flagInsecureServerPort = "insecure-server-port"
	flagInsecureAgentPort  = "insecure-agent-port"
)

// checkSecurity refuses a command line that would leave the frontend or
// the agent port open to anyone who reaches it, or that asks for weak TLS.
// It reads only f, so it is decided before any file is loaded.
//
// An unauthenticated frontend lets its caller dial anything in the cluster
// network; an unauthenticated agent port lets its caller register as an
// agent and receive kube-apiserver's dials (exec, logs, port-forward). A
// plaintext agent port sends agents' tokens and the tunnelled bytes in the
// clear. Each is allowed only with its --insecure-… flag.
func checkSecurity(f *Flags) error {
	var errs []error
	if _, err := tlsutil.Ciphers(f.CipherSuites); err != nil {
		errs = append(errs, err)
	}
	if _, err := tlsutil.MinVersion(f.TLSMinVersion); err != nil {
		errs = append(errs, err)
	}
	if (f.ServerCert == "") != (f.ServerKey == "") {
		errs = append(errs, errors.New("--server-cert and --server-key go together"))
	}
	if (f.ClusterCert == "") != (f.ClusterKey == "") {
		errs = append(errs, errors.New("--cluster-cert and --cluster-key go together"))
	}
	if f.ClusterCACert != "" && f.ClusterCert == "" {
		// Without a serving certificate the port is plaintext and the CA
		// would be silently unused: the operator believes in mTLS.
		errs = append(errs, errors.New("--cluster-ca-cert needs --cluster-cert and --cluster-key: agent client certificates are checked only over TLS"))
	}
	errs = append(errs, checkFrontend(f), checkAgentPort(f))
	return errors.Join(errs...)
}

func checkFrontend(f *Flags) error {
	if f.UDSName != "" {
		// A file socket is guarded by its mode (0660, see listenUnix); an
		// abstract one ("@name") has none: anyone in the network namespace,
		// hostNetwork pods included, may connect.
		if strings.HasPrefix(f.UDSName, "@") && !f.InsecureServerPort {
			return fmt.Errorf("--uds-name=%s is an abstract socket, which any process in the network namespace may connect to; use a file path, or add --%s to accept this", f.UDSName, flagInsecureServerPort)
		}
		return nil
	}
	if f.InsecureServerPort {
		return nil
	}
	if f.ServerCACert != "" && f.ServerCert == "" {
		return fmt.Errorf("--server-ca-cert needs --server-cert and --server-key: kube-apiserver client certificates are checked only over TLS")
	}
	if f.ServerCert == "" || f.ServerCACert == "" {
		what := "without TLS"
		if f.ServerCert != "" {
			what = "without client certificates (no --server-ca-cert)"
		}
		return fmt.Errorf("the TCP frontend (--server-port=%d) would serve %s, so anyone who reaches it could dial into the cluster network; "+
			"set --server-cert, --server-key and --server-ca-cert, or serve the frontend on a unix socket (--uds-name), or add --%s to accept this",
			f.ServerPort, what, flagInsecureServerPort)
	}
	return nil
}

func checkAgentPort(f *Flags) error {
	if f.InsecureAgentPort {
		return nil
	}
	mTLS := f.ClusterCert != "" && f.ClusterCACert != ""
	tokens := f.AgentNamespace != "" || f.AgentServiceAccount != ""
	switch {
	case f.ClusterCert == "":
		return fmt.Errorf("the agent port (--agent-port=%d) would serve without TLS, so agents' tokens and the tunnelled traffic would cross the network in the clear; "+
			"set --cluster-cert and --cluster-key, or add --%s to accept this (a TLS-terminating load balancer in front)", f.AgentPort, flagInsecureAgentPort)
	case !mTLS && !tokens:
		return fmt.Errorf("the agent port (--agent-port=%d) would accept agents without authentication, so anyone who reaches it could receive kube-apiserver's dials (exec, logs, port-forward); "+
			"set --cluster-ca-cert (client certificates), or --agent-namespace, --agent-service-account and --authentication-audience (ServiceAccount tokens), or add --%s to accept this",
			f.AgentPort, flagInsecureAgentPort)
	}
	return nil
}

// CheckSecurity is checkSecurity for callers outside the package (the
// shipped manifests' tests check their command lines with it).
func (f *Flags) CheckSecurity() error { return checkSecurity(f) }
