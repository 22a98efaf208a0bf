package devenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/proc"
)

// With --network-proxy, kube-apiserver sends its `cluster` egress (logs,
// exec, port-forward, node/pod/service proxy) through `portside
// proxy-server` over a unix socket (GRPC), and one `portside proxy-agent`
// per zone dials out to the server and reaches that zone's nodes, as
// konnectivity is deployed when the control plane cannot reach node
// networks. Agents authenticate with client certificates of the control
// plane's CA. A zone's agent is a gateway for several nodes, bound to none,
// so its certificate carries the group the server's --allow-route-claims
// names: only that lets it claim its nodes' addresses.

// netproxyState is what `up` tells `portside status` about the network
// proxy: where each part answers health checks.
type netproxyState struct {
	Server netproxyPart   `json:"server"`
	Agents []netproxyPart `json:"agents"`
}

type netproxyPart struct {
	ID string `json:"id"`
	// Zone and Nodes (agents only) are what it serves.
	Zone   string `json:"zone,omitempty"`
	Nodes  int    `json:"nodes,omitempty"`
	Health string `json:"health"` // host:port of /healthz and /readyz
	// AgentAddress (server only) is where agents connect.
	AgentAddress string `json:"agentAddress,omitempty"`
	Socket       string `json:"socket,omitempty"`
}

// proxyGatewayGroup is the certificate group (Organization) of the zones'
// agents, which the proxy server allows to claim addresses of any node.
// No RBAC binding names it: to kube-apiserver it grants nothing.
const proxyGatewayGroup = "portside:proxy-gateways"

// maxSocketPath: a unix socket path must fit sockaddr_un (108 bytes with
// the terminating NUL).
const maxSocketPath = 107

// egressSelections is the control plane's egress configuration with
// --network-proxy: `cluster` through the proxy server's socket.
func (l layout) egressSelections() []controlplane.EgressSelection {
	return []controlplane.EgressSelection{{Name: "cluster", ProxyProtocol: "GRPC", UDSName: l.netproxySocket()}}
}

// startNetworkProxyServer runs `portside proxy-server`, supervised, on the
// socket kube-apiserver's egress selector names.
func startNetworkProxyServer(ctx context.Context, s *stack, env *environment) error {
	if err := os.MkdirAll(env.netproxy(), 0o755); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cert, err := env.cp.IssueServingCert("proxy-server", "127.0.0.1")
	if err != nil {
		return err
	}
	ports, err := controlplane.FreePorts(3)
	if err != nil {
		return err
	}
	st := netproxyState{Server: netproxyPart{ID: "proxy-server-1", Socket: env.netproxySocket(),
		AgentAddress: "127.0.0.1:" + strconv.Itoa(ports[0]), Health: "127.0.0.1:" + strconv.Itoa(ports[1])}}
	args := []string{"proxy-server", "--mode=grpc", "--uds-name=" + st.Server.Socket, "--delete-existing-uds-file",
		"--agent-port=" + strconv.Itoa(ports[0]), "--agent-bind-address=127.0.0.1",
		"--health-port=" + strconv.Itoa(ports[1]), "--health-bind-address=127.0.0.1",
		"--admin-port=" + strconv.Itoa(ports[2]), "--admin-bind-address=127.0.0.1",
		"--server-id=" + st.Server.ID, "--server-count=1", "--proxy-strategies=destHost,default",
		"--cluster-cert=" + cert.CertFile, "--cluster-key=" + cert.KeyFile, "--cluster-ca-cert=" + env.cp.CAFile(),
		"--allow-route-claims=" + proxyGatewayGroup,
	}
	logPath := filepath.Join(env.logs(), "proxy-server.log")
	s.p.step("network proxy", "starting proxy-server for kube-apiserver's cluster egress (socket %s, agents at %s; log %s)", st.Server.Socket, st.Server.AgentAddress, logPath)
	run := func() (*proc.Process, error) {
		p, err := proc.Start("proxy-server", exe, args, nil, logPath)
		if err != nil {
			return nil, err
		}
		if err := waitHealthy(context.WithoutCancel(ctx), p, "http://"+st.Server.Health+"/healthz", 30*time.Second); err != nil {
			p.Stop(10 * time.Second)
			return nil, processError(err, p)
		}
		return p, nil
	}
	p, err := run()
	if err != nil {
		return err
	}
	s.pushSupervised(supervise(s.p, "network proxy", "proxy-server", p, 10*time.Second, run))
	env.netproxyState = &st
	s.p.step("network proxy", "proxy-server serving (pid %d)", p.PID())
	return writeNetproxyState(env)
}

// startNetworkProxyAgents runs one `portside proxy-agent` per zone that has
// nodes, each advertising its nodes' addresses (agent identifiers ipv4=…),
// so the server's destHost strategy sends a dial to a node through the
// agent of its zone.
func startNetworkProxyAgents(ctx context.Context, s *stack, env *environment) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	byZone := map[string][]nodeInfo{}
	for _, n := range env.nodes {
		byZone[n.zone] = append(byZone[n.zone], n)
	}
	zones := make([]string, 0, len(byZone))
	for z := range byZone {
		zones = append(zones, z)
	}
	slices.Sort(zones)
	server := env.netproxyState.Server
	host, port, _ := strings.Cut(server.AgentAddress, ":")
	for _, zone := range zones {
		id := "agent-" + zone
		cert, err := env.cp.IssueClientCert("proxy-"+id, "system:konnectivity-agent:"+zone, proxyGatewayGroup)
		if err != nil {
			return err
		}
		ports, err := controlplane.FreePorts(2)
		if err != nil {
			return err
		}
		ids := url.Values{}
		for _, n := range byZone[zone] {
			ids.Add("ipv4", n.ip.String())
		}
		part := netproxyPart{ID: id, Zone: zone, Nodes: len(byZone[zone]), Health: "127.0.0.1:" + strconv.Itoa(ports[0])}
		args := []string{"proxy-agent", "--proxy-server-host=" + host, "--proxy-server-port=" + port,
			"--agent-id=" + id, "--agent-identifiers=" + ids.Encode(),
			"--ca-cert=" + env.cp.CAFile(), "--agent-cert=" + cert.CertFile, "--agent-key=" + cert.KeyFile,
			"--health-server-host=127.0.0.1", "--health-server-port=" + strconv.Itoa(ports[0]),
			"--admin-bind-address=127.0.0.1", "--admin-server-port=" + strconv.Itoa(ports[1]),
			// An agent stops only when the environment stops: its tunnels
			// (kube-apiserver's idle connections to kubelets among them)
			// get a moment, not the open-ended drain of a rolling restart.
			"--drain-timeout=1s",
		}
		logPath := filepath.Join(env.logs(), "proxy-"+id+".log")
		run := func() (*proc.Process, error) {
			p, err := proc.Start(id, exe, args, nil, logPath)
			if err != nil {
				return nil, err
			}
			// Ready means connected to the server.
			if err := waitHealthy(context.WithoutCancel(ctx), p, "http://"+part.Health+"/readyz", 30*time.Second); err != nil {
				p.Stop(10 * time.Second)
				return nil, processError(err, p)
			}
			return p, nil
		}
		p, err := run()
		if err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		s.pushSupervised(supervise(s.p, "network proxy", id, p, 10*time.Second, run))
		env.netproxyState.Agents = append(env.netproxyState.Agents, part)
		s.p.step("network proxy", "%s connected (pid %d), serving %s of %s", id, p.PID(), plural(part.Nodes, "node"), zone)
	}
	return writeNetproxyState(env)
}

func writeNetproxyState(env *environment) error {
	data, err := json.MarshalIndent(env.netproxyState, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(env.netproxyStateFile(), append(data, '\n'), 0o644)
}

// waitHealthy polls url until it answers 200, the child dies or timeout.
func waitHealthy(ctx context.Context, p *proc.Process, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = probe(ctx, url); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w", url, timeout, last)
		}
		select {
		case <-p.Done():
			return fmt.Errorf("%w (%v)", errExited, p.ExitErr())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var probeClient = &http.Client{Timeout: 2 * time.Second}

// probe GETs url and wants 200.
func probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}
