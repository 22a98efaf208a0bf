package netproxy_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/netproxy"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
)

// TestHTTPServersTimeOut: the proxy's HTTP servers close a connection
// left idle or a request left unfinished (before: only a header timeout,
// so an idle keep-alive connection or a slow body held a goroutine
// forever), while a CONNECT tunnel outlives those timeouts.
func TestHTTPServersTimeOut(t *testing.T) {
	saved := []time.Duration{netproxy.HTTPReadTimeout, netproxy.HTTPWriteTimeout, netproxy.HTTPIdleTimeout}
	netproxy.HTTPReadTimeout, netproxy.HTTPWriteTimeout, netproxy.HTTPIdleTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	t.Cleanup(func() {
		netproxy.HTTPReadTimeout, netproxy.HTTPWriteTimeout, netproxy.HTTPIdleTimeout = saved[0], saved[1], saved[2]
	})
	echo := netproxytest.Listen(t, netproxytest.Echo)
	st := startStack(t, false, false, server.Options{Mode: server.ModeHTTPConnect, HealthAddress: "127.0.0.1:0"})

	closedWithin := func(c net.Conn, d time.Duration) error {
		_ = c.SetReadDeadline(time.Now().Add(d))
		_, err := io.Copy(io.Discard, c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("still open after %v", d)
		}
		return nil
	}

	// An idle keep-alive connection to the health port.
	c, err := net.Dial("tcp", st.srv.HealthAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n")
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || line != "HTTP/1.1 200 OK\r\n" {
		t.Fatalf("healthz: %q, %v", line, err)
	}
	if err := closedWithin(c, 3*time.Second); err != nil {
		t.Errorf("idle health connection: %v", err)
	}

	// A request whose body never comes, on the CONNECT frontend.
	slow, err := net.Dial("tcp", st.srv.FrontendAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST / HTTP/1.1\r\nHost: proxy\r\nContent-Length: 1000\r\n\r\nabc")
	if err := closedWithin(slow, 3*time.Second); err != nil {
		t.Errorf("unfinished request: %v", err)
	}

	// A tunnel lives on past the read and write timeouts.
	tc, err := net.Dial("tcp", st.srv.FrontendAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	fmt.Fprintf(tc, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", echo, echo)
	tbr := bufio.NewReader(tc)
	if line, err := tbr.ReadString('\n'); err != nil || line != "HTTP/1.1 200 Connection Established\r\n" {
		t.Fatalf("CONNECT: %q, %v", line, err)
	}
	if _, err := tbr.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	tunnel := &bufConn{Conn: tc, r: tbr}
	for range 3 {
		time.Sleep(400 * time.Millisecond)
		if err := roundTrip(tunnel, 4096); err != nil {
			t.Fatalf("tunnel after the timeouts passed: %v", err)
		}
	}
}
