// Package nettest has the small TCP servers and clients the load-balancer
// tests share: a server that answers each connection's first line with its
// name, so a test can tell which backend a request reached.
package nettest

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// NameServer listens on addr (port 0: any) until the test ends and answers
// the first line of each connection with name.
func NameServer(t testing.TB, name, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					_, _ = fmt.Fprintln(c, name)
				}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// AskName sends one line to addr and returns the name that answered.
func AskName(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintln(c, "hi"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}
