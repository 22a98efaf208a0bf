package server

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	anpserver "sigs.k8s.io/apiserver-network-proxy/pkg/server"
	"sigs.k8s.io/apiserver-network-proxy/pkg/server/proxystrategies"
	"sigs.k8s.io/apiserver-network-proxy/pkg/util"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"
)

// The routing table, case by case, against upstream's v0.34.0 server
// code itself (linked in, not copied): its agents and frontend are
// in-memory streams, so each case is one DIAL_REQ through upstream's
// Connect and Proxy, and the agent it reaches is upstream's answer.

// upAgentStream is an agent's stream as upstream's Connect sees it.
type upAgentStream struct {
	grpc.ServerStream
	ctx        context.Context
	registered chan struct{} // closed on the first Recv: Connect has added the backend
	once       sync.Once
	done       chan struct{}
	mu         sync.Mutex
	got        []*client.Packet
}

func (s *upAgentStream) Context() context.Context     { return s.ctx }
func (s *upAgentStream) SendHeader(metadata.MD) error { return nil }
func (s *upAgentStream) Send(p *client.Packet) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, p)
	return nil
}
func (s *upAgentStream) Recv() (*client.Packet, error) {
	s.once.Do(func() { close(s.registered) })
	<-s.done
	return nil, io.EOF
}
func (s *upAgentStream) dialed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.got, func(p *client.Packet) bool { return p.Type == client.PacketType_DIAL_REQ })
}

// upFrontendStream sends one DIAL_REQ, then ends.
type upFrontendStream struct {
	grpc.ServerStream
	pkts []*client.Packet
	mu   sync.Mutex
	got  []*client.Packet
}

func (s *upFrontendStream) Context() context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.MD{})
}
func (s *upFrontendStream) Send(p *client.Packet) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, p)
	return nil
}
func (s *upFrontendStream) Recv() (*client.Packet, error) {
	if len(s.pkts) == 0 {
		return nil, io.EOF
	}
	p := s.pkts[0]
	s.pkts = s.pkts[1:]
	return p, nil
}

// upstreamRoute returns the agents upstream's server sent the dial to
// (at most one), the error its DIAL_RSP gave otherwise, and each
// strategy's count of backends (its ready_backends).
func upstreamRoute(t *testing.T, strategies string, agents []string, address string) ([]int, string, map[Strategy]int) {
	t.Helper()
	ps, err := proxystrategies.ParseProxyStrategies(strategies)
	if err != nil {
		t.Fatal(err)
	}
	srv := anpserver.NewProxyServer("upstream", ps, 1, &anpserver.AgentTokenAuthenticationOptions{}, 10)
	var streams []*upAgentStream
	var wg sync.WaitGroup
	defer func() {
		for _, s := range streams {
			close(s.done)
		}
		wg.Wait()
	}()
	for i, q := range agents {
		md := metadata.Pairs(header.AgentID, fmt.Sprintf("agent-%d", i), header.AgentIdentifiers, q)
		s := &upAgentStream{ctx: metadata.NewIncomingContext(context.Background(), md),
			registered: make(chan struct{}), done: make(chan struct{})}
		streams = append(streams, s)
		wg.Add(1)
		go func() { defer wg.Done(); _ = srv.Connect(s) }()
		// In order: upstream's destHost prefers the first registered.
		<-s.registered
	}
	ready := map[Strategy]int{}
	for i, bm := range srv.BackendManagers {
		ready[Strategy(ps[i].String())] = bm.NumBackends()
	}
	fe := &upFrontendStream{pkts: []*client.Packet{{Type: client.PacketType_DIAL_REQ,
		Payload: &client.Packet_DialRequest{DialRequest: &client.DialRequest{Protocol: "tcp", Address: address, Random: 1}}}}}
	_ = srv.Proxy(fe) // returns once the DIAL_REQ is handled and the stream ended
	var got []int
	for i, s := range streams {
		if s.dialed() {
			got = append(got, i)
		}
	}
	var rspErr string
	for _, p := range fe.got {
		if p.Type == client.PacketType_DIAL_RSP {
			rspErr = p.GetDialResponse().Error
		}
	}
	return got, rspErr, ready
}

func TestRoutingMatchesUpstream(t *testing.T) {
	for _, tc := range routeCases {
		if !tc.upstream {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			strategies, err := ParseStrategies(tc.strategies)
			if err != nil {
				t.Fatal(err)
			}
			agents := routeAgents(t, tc.agents)
			eligible, s := Eligible(strategies, tc.address, agents)
			mine, _ := Choose(strategies, tc.address, agents, func(int) int { return 0 })
			// Random strategies: upstream's draw must be one of ours, and
			// every one of ours must be drawn by upstream now and then.
			drawn := map[int]bool{}
			for range 1 + 20*len(eligible) {
				up, rspErr, ready := upstreamRoute(t, tc.strategies, tc.agents, tc.address)
				if mine := ReadyBackends(strategies, agents); !reflect.DeepEqual(mine, ready) {
					t.Fatalf("ready_backends %v; upstream %v", mine, ready)
				}
				switch {
				case len(up) == 0 && eligible != nil:
					t.Fatalf("upstream found no agent (%q); Portside chose %d of %v by %s", rspErr, mine, eligible, s)
				case len(up) == 0:
					if !strings.Contains(rspErr, "No agent available") {
						t.Fatalf("upstream's DIAL_RSP error %q; want No agent available", rspErr)
					}
					return
				case len(up) > 1:
					t.Fatalf("upstream sent the dial to agents %v", up)
				case eligible == nil:
					t.Fatalf("upstream chose agent %d; Portside none", up[0])
				case s == StrategyDestHost && up[0] != mine:
					t.Fatalf("upstream chose agent %d under destHost; Portside %d", up[0], mine)
				case !slices.Contains(eligible, up[0]):
					t.Fatalf("upstream chose agent %d; Portside's eligible %v by %s", up[0], eligible, s)
				}
				drawn[up[0]] = true
				if s == StrategyDestHost || len(drawn) == len(eligible) {
					return
				}
			}
			t.Fatalf("upstream drew only %v of Portside's eligible %v", drawn, eligible)
		})
	}
}

func TestDialHostMatchesUpstream(t *testing.T) {
	for _, a := range []string{"node-a:10250", "10.0.0.1", "[fd00::2]:443", "fd00::2", "[fd00::2]", "[10.0.0.1]:443",
		"fd00::2:443", ":443", "", "a:b:c", "Node-A:1", "[::1]", "[::1]:80", "::", "host:", "[", "]:1", "a]:b", "[a:b]:c:d"} {
		if got, want := DialHost(a), util.RemovePortFromHost(a); got != want {
			t.Errorf("DialHost(%q) = %q; upstream %q", a, got, want)
		}
	}
}
