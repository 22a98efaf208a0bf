package devenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/realnode"
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
//
// Real nodes (machines of the cloud's VPC) each run their own agent instead,
// inside the machine, started and supervised by its init (power-off stops
// it, start brings it back): its certificate's CommonName is
// system:node:<name>, the form the server binds to that Node, so it may
// claim that Node's name and addresses and no other's. It reaches the
// server's agent port at the VPC gateway, where the cloud exposes it as it
// does kube-apiserver. One agent on the host, claiming only default-route,
// carries what is not for a node (the CCM's webhook on the host's loopback,
// say): the server's strategies are then destHost, then defaultRoute.

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
	// AgentAddress is where agents connect: the server's, and a node
	// agent's (the VPC gateway).
	AgentAddress string `json:"agentAddress,omitempty"`
	Socket       string `json:"socket,omitempty"`
}

// proxyGatewayGroup is the certificate group (Organization) of the zones'
// agents, which the proxy server allows to claim addresses of any node.
// No RBAC binding names it: to kube-apiserver it grants nothing.
const proxyGatewayGroup = "portside:proxy-gateways"

// agentGatewayPort is where real nodes' agents reach the proxy server: the
// VPC gateway's port (konnectivity's usual agent port), served by the cloud
// from the server's loopback agent port.
const agentGatewayPort = 8132

// gatewayAgentID is the host's agent with real nodes: the default route.
const gatewayAgentID = "agent-gateway"

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
	exe, lead, err := env.proxyCommand("proxy-server")
	if err != nil {
		return err
	}
	upstream := env.netproxyBinaries != ""
	hosts := []string{"127.0.0.1"}
	if env.realNodes {
		// Node agents verify the server at the gateway's address.
		hosts = append(hosts, env.realNet.gateway().String())
	}
	cert, err := env.cp.IssueServingCert("proxy-server", hosts...)
	if err != nil {
		return err
	}
	ports, err := controlplane.FreePorts(3)
	if err != nil {
		return err
	}
	st := netproxyState{Server: netproxyPart{ID: "proxy-server-1", Socket: env.netproxySocket(),
		AgentAddress: "127.0.0.1:" + strconv.Itoa(ports[0]), Health: "127.0.0.1:" + strconv.Itoa(ports[1])}}
	args := []string{"--mode=grpc", "--uds-name=" + st.Server.Socket, "--delete-existing-uds-file", "--server-port=0",
		"--agent-port=" + strconv.Itoa(ports[0]), "--agent-bind-address=127.0.0.1",
		"--health-port=" + strconv.Itoa(ports[1]), "--health-bind-address=127.0.0.1",
		"--admin-port=" + strconv.Itoa(ports[2]), "--admin-bind-address=127.0.0.1",
		"--server-id=" + st.Server.ID, "--server-count=1", "--proxy-strategies=destHost,default",
		"--cluster-cert=" + cert.CertFile, "--cluster-key=" + cert.KeyFile, "--cluster-ca-cert=" + env.cp.CAFile(),
		"--allow-route-claims=" + proxyGatewayGroup,
	}
	if env.realNodes {
		// A node agent's claims are checked against its Node, which the
		// server reads; a dial for no node's address takes the host's
		// default-route agent, never a node's (default would pick any).
		args[slices.Index(args, "--proxy-strategies=destHost,default")] = "--proxy-strategies=destHost,defaultRoute"
		if !upstream {
			kubeconfig, err := proxyServerKubeconfig(ctx, env)
			if err != nil {
				return err
			}
			args = append(args, "--kubeconfig="+kubeconfig)
		}
		// The cloud serves the agent port at the gateway (cloudArgs).
		env.realNet.agentTarget = st.Server.AgentAddress
		if env.chartAgents() {
			// The chart's DaemonSet agents prove their node with pod-bound
			// ServiceAccount tokens; the host's gateway agent keeps its
			// certificate.
			args = append(args, "--agent-namespace="+ChartNamespace, "--agent-service-account="+chartAgentServiceAccount,
				"--authentication-audience="+chartAgentAudience, "--allow-certificate-agents")
		}
	}
	args = append(lead, upstreamProxyArgs(args, upstream)...)
	logPath := filepath.Join(env.logs(), "proxy-server.log")
	if upstream {
		s.p.step("network proxy", "running %s and its proxy-agent instead of Portside's (--network-proxy-binaries), with upstream's flags: it believes whatever addresses an agent claims, so this is for comparison only", exe)
	}
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
// agent of its zone. Real nodes run their own agents (nodeAgentUserData):
// then it runs the host's default-route agent and waits for every node's.
func startNetworkProxyAgents(ctx context.Context, s *stack, env *environment) error {
	if env.realNodes {
		p, err := startHostAgent(ctx, s, env, netproxyPart{ID: gatewayAgentID, Zone: "default route (the host's loopback: the CCM's webhook)"}, url.Values{"default-route": {"true"}})
		if err != nil {
			return err
		}
		s.p.step("network proxy", "%s connected (pid %d), for dials to no node's address (default-route)", gatewayAgentID, p.PID())
		if env.chartAgents() {
			s.p.step("network proxy", "the nodes' agents come with the install (DaemonSet %s/portside-proxy-agent, pod-bound tokens)", ChartNamespace)
			return writeNetproxyState(env)
		}
		return waitNodeAgents(ctx, s, env)
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
	for _, zone := range zones {
		ids := url.Values{}
		for _, n := range byZone[zone] {
			ids.Add("ipv4", n.ip.String())
		}
		part := netproxyPart{ID: "agent-" + zone, Zone: zone, Nodes: len(byZone[zone])}
		p, err := startHostAgent(ctx, s, env, part, ids)
		if err != nil {
			return err
		}
		s.p.step("network proxy", "%s connected (pid %d), serving %s of %s", part.ID, p.PID(), plural(part.Nodes, "node"), zone)
	}
	return writeNetproxyState(env)
}

// startHostAgent runs one supervised agent on the host with identifiers
// ids, a gateway bound to no node (its certificate's group is allowed route
// claims), and records it in the state.
func startHostAgent(ctx context.Context, s *stack, env *environment, part netproxyPart, ids url.Values) (*proc.Process, error) {
	exe, lead, err := env.proxyCommand("proxy-agent")
	if err != nil {
		return nil, err
	}
	server := env.netproxyState.Server
	host, port, _ := strings.Cut(server.AgentAddress, ":")
	id := part.ID
	cert, err := env.cp.IssueClientCert("proxy-"+id, "system:konnectivity-agent:"+strings.TrimPrefix(id, "agent-"), proxyGatewayGroup)
	if err != nil {
		return nil, err
	}
	ports, err := controlplane.FreePorts(2)
	if err != nil {
		return nil, err
	}
	part.Health = "127.0.0.1:" + strconv.Itoa(ports[0])
	args := []string{"--proxy-server-host=" + host, "--proxy-server-port=" + port,
		"--agent-id=" + id, "--agent-identifiers=" + ids.Encode(),
		"--ca-cert=" + env.cp.CAFile(), "--agent-cert=" + cert.CertFile, "--agent-key=" + cert.KeyFile,
		"--health-server-host=127.0.0.1", "--health-server-port=" + strconv.Itoa(ports[0]),
		"--admin-bind-address=127.0.0.1", "--admin-server-port=" + strconv.Itoa(ports[1]),
		// An agent stops only when the environment stops: its tunnels
		// (kube-apiserver's idle connections to kubelets among them)
		// get a moment, not the open-ended drain of a rolling restart.
		"--drain-timeout=1s",
	}
	args = append(lead, upstreamProxyArgs(args, env.netproxyBinaries != "")...)
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
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	s.pushSupervised(supervise(s.p, "network proxy", id, p, 10*time.Second, run))
	env.netproxyState.Agents = append(env.netproxyState.Agents, part)
	return p, nil
}

// nodeAgentUserData is userData with node's own agent in it: a client
// certificate whose CommonName system:node:<node> binds it to that Node
// (no group: to kube-apiserver, whose Node authorizer wants system:nodes,
// it grants nothing), the server at the VPC gateway. Without the network
// proxy it is userData unchanged.
func nodeAgentUserData(env *environment, node, userData string) (string, error) {
	if !env.networkProxy || env.chartAgents() {
		return userData, nil // none, or the chart's DaemonSet
	}
	var c realnode.BootConfig
	if err := json.Unmarshal([]byte(userData), &c); err != nil {
		return "", err
	}
	exe, _, err := env.proxyCommand("proxy-agent")
	if err != nil {
		return "", err
	}
	cert, err := env.cp.IssueClientCert("proxy-agent-"+node, "system:node:"+node)
	if err != nil {
		return "", err
	}
	shared := env.nodesShared()
	certFile, keyFile := filepath.Join(shared, "proxy-agent-"+node+".crt"), filepath.Join(shared, "proxy-agent-"+node+".key")
	for f, data := range map[string][]byte{certFile: cert.CertPEM, keyFile: cert.KeyPEM} {
		if err := os.WriteFile(f, data, 0o600); err != nil {
			return "", err
		}
	}
	c.ProxyAgent = &realnode.ProxyAgent{Bin: exe, Upstream: env.netproxyBinaries != "", Server: netip.AddrPortFrom(env.realNet.gateway(), agentGatewayPort).String(),
		CAFile: c.CAFile, CertFile: certFile, KeyFile: keyFile}
	data, err := json.Marshal(c)
	return string(data), err
}

// waitNodeAgents waits until every real node's agent is connected to the
// server: its /readyz, on the node's address, answers 200 through the VPC
// (the host routes the subnet to the VPC router).
func waitNodeAgents(ctx context.Context, s *stack, env *environment) error {
	gw := netip.AddrPortFrom(env.realNet.gateway(), agentGatewayPort).String()
	for _, n := range env.nodes {
		part := netproxyPart{ID: n.name, Zone: n.zone, Nodes: 1, AgentAddress: gw,
			Health: netip.AddrPortFrom(n.ip, realnode.DefaultAgentHealthPort).String()}
		began := time.Now()
		for {
			err := probe(ctx, "http://"+part.Health+"/readyz")
			if err == nil {
				break
			}
			if time.Since(began) > 60*time.Second {
				return fmt.Errorf("the agent on %s is not connected to proxy-server after 60s (%v): see %s", n.name, err,
					filepath.Join(env.machines(), "<instance>", "log", "proxy-agent.log"))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		env.netproxyState.Agents = append(env.netproxyState.Agents, part)
		s.p.step("network proxy", "agent on %s connected (in the machine, supervised by its init), serving %s at %s through the gateway %s",
			n.name, n.name, n.ip, gw)
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
