package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// lbReachable reports whether the run may connect to ingress addresses;
// when not, it logs what is therefore not checked.
func lbReachable(t *T, what string) bool {
	if t.Env.Capabilities[LBReachable] {
		return true
	}
	t.Logf("not checked (capability %s not given): %s", LBReachable, what)
	return false
}

// --- traffic ---

// httpAnswer is one HTTP answer through a load balancer.
type httpAnswer struct {
	Status int
	// Node and Pod are the kube-proxy stand-in's X-Node and X-Pod headers
	// (`portside up` only; empty elsewhere).
	Node, Pod string
	Body      string
	// Local is the runner's end of the connection.
	Local netip.AddrPort
}

// lbGet sends GET http://hostPort/path on a fresh connection.
func lbGet(ctx context.Context, hostPort, path string) (httpAnswer, error) {
	var local netip.AddrPort
	dialer := &net.Dialer{Timeout: lbRequestTimeout}
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err == nil {
			if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
				local = a.AddrPort()
			}
		}
		return c, err
	}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Timeout: lbRequestTimeout, Transport: tr}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort+path, nil)
	if err != nil {
		return httpAnswer{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return httpAnswer{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return httpAnswer{}, fmt.Errorf("GET http://%s%s: reading the answer: %w", hostPort, path, err)
	}
	return httpAnswer{Status: resp.StatusCode, Node: resp.Header.Get("X-Node"), Pod: resp.Header.Get("X-Pod"),
		Body: strings.TrimSpace(string(data)), Local: local}, nil
}

// lbPodIn returns which of pods an answer names: the longest pod name that
// occurs in body as a whole word (between characters that cannot be part
// of a pod name).
func lbPodIn(body string, pods []string) (string, bool) {
	best := ""
	for _, name := range pods {
		if len(name) > len(best) && containsWord(body, name) {
			best = name
		}
	}
	return best, best != ""
}

func containsWord(s, word string) bool {
	if word == "" {
		return false
	}
	for i := 0; ; {
		j := strings.Index(s[i:], word)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(word)
		if (start == 0 || !nameChar(s[start-1])) && (end == len(s) || !nameChar(s[end])) {
			return true
		}
		i = start + 1
	}
}

// nameChar reports whether c can be part of a pod name (DNS subdomain).
func nameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.'
}

// lbClientIn returns the client address an answer names: agnhost's
// /clientip answers "ip:port"; the kube-proxy stand-in ends its answer
// with "client ip:port".
func lbClientIn(body string) (netip.Addr, bool) {
	body = strings.TrimSpace(body)
	if i := strings.LastIndex(body, "client "); i >= 0 {
		tok := strings.Fields(body[i+len("client "):])
		if len(tok) > 0 {
			if a, ok := parseAddr(strings.TrimRight(tok[0], ".,;)")); ok {
				return a, true
			}
		}
	}
	return parseAddr(body)
}

func parseAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

// lbWaitServed waits until GET path through hostPort is answered 200 by
// one of pods (the load balancer may take a while to find healthy
// backends) and returns the answer.
func lbWaitServed(ctx context.Context, t *T, hostPort, path string, pods []string) httpAnswer {
	var ans httpAnswer
	t.Eventually(ctx, lbTrafficTimeout, fmt.Sprintf("GET http://%s%s answered by one of the Service's pods %v", hostPort, path, pods),
		func(ctx context.Context) (bool, string) {
			a, err := lbGet(ctx, hostPort, path)
			if err != nil {
				return false, err.Error()
			}
			if msg := lbCheckServed(a, pods); msg != "" {
				return false, msg
			}
			ans = a
			return true, ""
		})
	return ans
}

// lbCheckServed says what is wrong with an answer that should come from
// one of pods ("" when nothing is).
func lbCheckServed(a httpAnswer, pods []string) string {
	if a.Status != http.StatusOK {
		return fmt.Sprintf("answer %d: %q", a.Status, lbShort(a.Body))
	}
	if _, ok := lbPodIn(a.Body, pods); !ok {
		return fmt.Sprintf("answer %q names none of the pods %v", lbShort(a.Body), pods)
	}
	return ""
}

func lbShort(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// lbUDPAsk sends msg from a fresh socket (so a load balancer opens a new
// flow) and returns the first answer.
func lbUDPAsk(ctx context.Context, hostPort, msg string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", hostPort)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(lbRequestTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	buf := make([]byte, 2048)
	// A datagram may be lost; resend a few times within the deadline.
	for {
		if _, err := c.Write([]byte(msg)); err != nil {
			return "", fmt.Errorf("send to udp %s: %w", hostPort, err)
		}
		_ = c.SetReadDeadline(minTime(deadline, time.Now().Add(time.Second)))
		n, err := c.Read(buf)
		if err == nil {
			return strings.TrimSpace(string(buf[:n])), nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !time.Now().Before(deadline) {
			return "", fmt.Errorf("no answer from udp %s: %w", hostPort, err)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// lbWaitUDPServed waits until a UDP "hostname" to hostPort is answered by
// one of pods and returns the answer.
func lbWaitUDPServed(ctx context.Context, t *T, hostPort string, pods []string) string {
	var answer string
	t.Eventually(ctx, lbTrafficTimeout, fmt.Sprintf("UDP \"hostname\" to %s answered by one of the Service's pods %v", hostPort, pods),
		func(ctx context.Context) (bool, string) {
			a, err := lbUDPAsk(ctx, hostPort, "hostname")
			if err != nil {
				return false, err.Error()
			}
			if _, ok := lbPodIn(a, pods); !ok {
				return false, fmt.Sprintf("answer %q names none of the pods", lbShort(a))
			}
			answer = a
			return true, ""
		})
	return answer
}

// lbSourceAddr is the address the runner connects to hostPort from (no
// packet is sent).
func lbSourceAddr(hostPort string) (netip.Addr, error) {
	c, err := net.Dial("udp", hostPort)
	if err != nil {
		return netip.Addr{}, err
	}
	defer func() { _ = c.Close() }()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}
