package devenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/webhooks/pvlabel"
)

// ccmArgs are the flags `portside up` runs `portside ccm` with: the local
// provider, the environment's kubeconfig, health and metrics on a free
// loopback port, and pod CIDRs and cloud routes for every node (the service
// range is the apiserver's). One replica runs without leader election;
// several compete for the Lease, each with its identity, on short timings so
// a take-over shows within seconds.
func ccmArgs(kubeconfig, cloudConfig, podCIDR, serviceCIDR string, replicas, replica int) []string {
	args := []string{
		"ccm",
		"--cloud-provider=local",
		"--cloud-config=" + cloudConfig,
		"--kubeconfig=" + kubeconfig,
		"--secure-port=0",
		"--bind-address=127.0.0.1",
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + podCIDR,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--configure-cloud-routes=true",
	}
	if replicas == 1 {
		return append(args, "--leader-elect=false")
	}
	// A fresh identity per start: a restarted replica must wait for the
	// Lease like any candidate, not renew its dead predecessor's.
	id := fmt.Sprintf("%s_%d", ccmIdentity(replica), time.Now().UnixNano()%1_000_000)
	return append(args, "--leader-elect=true", "--leader-elect-identity="+id,
		"--leader-elect-lease-duration="+CCMLeaseDuration.String(), "--leader-elect-renew-deadline=5s", "--leader-elect-retry-period=1s")
}

// webhookArgs make a CCM serve the persistent-volume-label webhook on
// 127.0.0.1:port with a certificate of the cluster's CA (the apiserver
// trusts it through the webhook configuration's CA bundle), answering only
// callers with a client certificate of clientCAFile (the apiserver's, from
// its admission configuration), so another local user cannot make it
// read volumes from the cloud.
func webhookArgs(port int, certFile, keyFile, clientCAFile string) []string {
	return []string{
		"--webhooks=" + pvlabel.Name,
		"--webhook-bind-address=127.0.0.1",
		"--webhook-secure-port=" + strconv.Itoa(port),
		"--webhook-tls-cert-file=" + certFile,
		"--webhook-tls-private-key-file=" + keyFile,
		"--webhook-client-ca-file=" + clientCAFile,
	}
}

// CCMLeaseDuration is the Lease duration of replicated CCMs: a dead
// leader's successor leads within it.
const CCMLeaseDuration = 8 * time.Second

// ccmIdentity names replica i (from 1) in the leader Lease.
func ccmIdentity(i int) string { return fmt.Sprintf("ccm-%d", i) }

// The pod and Service ranges of simulated nodes, and the first choice of
// real ones (each real-node environment takes free ones: realNetwork).
const (
	ClusterCIDR = "10.244.0.0/16"
	ServiceCIDR = "10.96.0.0/16"
)

// servingLine is the CCM's log line that names its health address.
var servingLine = regexp.MustCompile(`"Serving health and metrics" address="(https://[^"]+)"`)

// startCCM writes the provider's cloud config and runs env.ccmReplicas
// `portside ccm` children with all their controllers, each supervised, and
// waits for each one's /readyz (a standby is ready too).
func startCCM(ctx context.Context, s *stack, env *environment) error {
	if err := writeHostCloudConfig(env); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if env.ccmBinary != "" {
		// Another CCM (e.g. upstream's): upstream's flags only, no webhook.
		for i := 1; i <= env.ccmReplicas; i++ {
			if err := startCCMReplica(ctx, s, env, env.ccmBinary, i, nil); err != nil {
				return err
			}
		}
		if env.realNodes {
			if err := startCSRApprover(ctx, s, env, exe); err != nil {
				return err
			}
		}
		return unregisterWebhook(ctx, env)
	}
	cert, err := env.cp.IssueServingCert("ccm-webhook", "127.0.0.1")
	if err != nil {
		return err
	}
	for i := 1; i <= env.ccmReplicas; i++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		if i == 1 {
			env.webhookURL = fmt.Sprintf("https://127.0.0.1:%d%s", port, pvlabel.Path)
		}
		if err := startCCMReplica(ctx, s, env, exe, i, webhookArgs(port, cert.CertFile, cert.KeyFile, env.webhookClient.CAFile)); err != nil {
			return err
		}
	}
	return registerWebhook(ctx, s, env)
}

// startCSRApprover runs Portside's node-serving-csr-approver alone beside
// another CCM: real kubelets ask for serving certificates by CSR, and
// approving them is no CCM's job upstream (upstream's has no such
// controller), so without it kube-apiserver's calls to kubelets (logs,
// exec, port-forward) fail the TLS handshake. It checks each CSR against
// the cloud's instance as in Portside's CCM, and runs no other controller.
func startCSRApprover(ctx context.Context, s *stack, env *environment, exe string) error {
	logPath := filepath.Join(env.logs(), "csr-approver.log")
	var offset int64
	if st, err := os.Stat(logPath); err == nil {
		offset = st.Size()
	}
	args := []string{"ccm", "--cloud-provider=local", "--cloud-config=" + env.cloudConfig(), "--kubeconfig=" + env.kubeconfig(),
		"--secure-port=0", "--bind-address=127.0.0.1", "--leader-elect=false", "--controllers=node-serving-csr-approver"}
	s.p.step("ccm", "starting Portside's node-serving-csr-approver alone beside %s, for the real kubelets' serving certificates (log %s)", filepath.Base(env.ccmBinary), logPath)
	run := func() (*proc.Process, error) { return proc.Start("csr-approver", exe, args, nil, logPath) }
	p, err := run()
	if err != nil {
		return err
	}
	if _, err := waitCCMReady(ctx, p, logPath, offset, time.Minute); err != nil {
		p.Stop(10 * time.Second)
		return processError(err, p)
	}
	s.pushSupervised(supervise(s.p, "ccm", "csr-approver", p, 10*time.Second, run))
	return nil
}

// waitAlive fails when p exits within d.
func waitAlive(ctx context.Context, p *proc.Process, d time.Duration) error {
	select {
	case <-p.Done():
		return fmt.Errorf("%w (%v)", errExited, p.ExitErr())
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// freePort is a loopback port free now; a replica keeps it across restarts.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startCCMReplica(ctx context.Context, s *stack, env *environment, exe string, i int, extra []string) error {
	name, logPath := "ccm", filepath.Join(env.logs(), "ccm.log")
	if env.ccmReplicas > 1 {
		name = ccmIdentity(i)
		if i > 1 {
			logPath = filepath.Join(env.logs(), name+".log")
		}
	}
	// The log is appended to across runs; only this run's lines count.
	var offset int64
	if st, err := os.Stat(logPath); err == nil {
		offset = st.Size()
	}
	s.p.step("ccm", "starting the cloud controller manager %s(log %s)", map[bool]string{true: name + " ", false: ""}[env.ccmReplicas > 1], logPath)
	// Built at every start: a restarted replica gets a fresh leader
	// identity (ccmArgs), so it waits for the Lease like any candidate.
	args := func() []string {
		a := append(ccmArgs(env.kubeconfig(), env.cloudConfig(), env.podCIDR(), env.serviceCIDR(), env.ccmReplicas, i), extra...)
		if env.ccmBinary == "" {
			if env.realNodes {
				// Real kubelets ask for serving certificates by CSR: the
				// approver checks each against the cloud's instance.
				a = append(a, "--controllers=*,node-serving-csr-approver")
			}
			return a
		}
		// No "ccm" subcommand, and no node IPAM flags (kube-controller-manager
		// allocates pod CIDRs then).
		return slices.DeleteFunc(a[1:], func(a string) bool {
			return strings.HasPrefix(a, "--allocate-node-cidrs") || strings.HasPrefix(a, "--service-cluster-ip-range")
		})
	}
	run := func() (*proc.Process, error) { return proc.Start(name, exe, args(), nil, logPath) }
	p, err := run()
	if err != nil {
		return err
	}
	addr := "none: " + filepath.Base(exe) + " runs with --secure-port=0"
	if env.ccmBinary != "" {
		// Not Portside's: it serves no health endpoint here; it is ready
		// when it has not exited, and the nodes' initialization shows it works.
		err = waitAlive(ctx, p, 2*time.Second)
	} else {
		addr, err = waitCCMReady(ctx, p, logPath, offset, time.Minute)
	}
	if err != nil {
		p.Stop(10 * time.Second)
		return processError(err, p)
	}
	// From here a CCM that dies is restarted, as a kubelet would.
	sv := supervise(s.p, "ccm", name, p, 10*time.Second, run)
	s.pushSupervised(sv)
	env.ccm = append(env.ccm, sv)
	if env.ccmReplicas == 1 {
		s.p.step("ccm", "ready, all controllers running (pid %d; health and metrics at %s)", p.PID(), addr)
	} else {
		s.p.step("ccm", "%s ready (pid %d; health and metrics at %s); the leader runs the controllers", name, p.PID(), addr)
	}
	return nil
}

// waitCCMReady finds the CCM's health address in its log and polls
// /readyz (served with a self-signed certificate) until it answers 200.
func waitCCMReady(ctx context.Context, p *proc.Process, logPath string, offset int64, timeout time.Duration) (string, error) {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// A loopback probe of our own child, which serves a self-signed certificate.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	deadline := time.After(timeout)
	addr, last := "", "no health address in its log yet"
	for {
		if addr == "" {
			addr = findServingAddr(logPath, offset)
		}
		if addr != "" {
			resp, err := hc.Get(addr + "/readyz")
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return addr, nil
				}
				last = "/readyz: " + resp.Status
			} else {
				last = err.Error()
			}
		}
		select {
		case <-p.Done():
			return "", fmt.Errorf("%w (%v)", errExited, p.ExitErr())
		case <-ctx.Done():
			return "", ctx.Err()
		case <-deadline:
			return "", errors.New("not ready after " + timeout.String() + " (last: " + last + ")")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func findServingAddr(path string, offset int64) string {
	data, err := os.ReadFile(path)
	if err != nil || int64(len(data)) < offset {
		return ""
	}
	if m := servingLine.FindSubmatch(data[offset:]); m != nil {
		return string(m[1])
	}
	return ""
}

// writeHostCloudConfig writes the local provider's cloud config for
// programs on this host (the host-process CCM; `portside conformance` and
// `migrate check` with --install=chart too): the cloud's loopback API and
// the admin token.
func writeHostCloudConfig(env *environment) error {
	cfg := fmt.Sprintf("endpoint: %s\ntokenFile: %s\n", env.cloudEndpoint, filepath.Join(env.cloud(), "token"))
	if env.vpc6() {
		cfg += "dualStack: true\n" // the cloud has an IPv6 VIP pool
	}
	return os.WriteFile(env.cloudConfig(), []byte(cfg), 0o600)
}
