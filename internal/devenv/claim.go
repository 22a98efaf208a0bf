package devenv

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// A claim holds a name on this host (its network namespace) while the
// process that made it runs, or until released: an abstract unix socket,
// which the kernel frees however the process ends, so a killed `up` leaves
// no file behind and nothing stale to misread. Claims keep environments
// that start at the same instant from choosing the same addresses: what
// they check besides (sockets, routes, links) shows another environment
// only once it runs.
type claim struct {
	ln net.Listener
}

// claimPrefix scopes the names. It has no per-build or per-test part:
// every environment on the host, whatever binary runs it, must see the
// others' claims.
const claimPrefix = "portside/"

// tryClaim claims name for owner (a data directory, told to whoever asks
// who holds it). held is true when another environment has it.
func tryClaim(name, owner string) (c *claim, held bool, err error) {
	ln, err := net.Listen("unix", "@"+claimPrefix+name)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("claim %s: %w", name, err)
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // released
			}
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(conn, owner)
			_ = conn.Close()
		}
	}()
	return &claim{ln: ln}, false, nil
}

// claimHolder is the data directory of the environment holding name, or
// "" when it cannot be told (released since, or not answering).
func claimHolder(name string) string {
	conn, err := net.DialTimeout("unix", "@"+claimPrefix+name, time.Second)
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	b, _ := io.ReadAll(io.LimitReader(conn, 4096))
	return string(b)
}

// heldError says which environment holds what this one's data directory
// chose earlier, and what to do.
func heldError(what, name, dir string) error {
	holder := "another running environment"
	if h := claimHolder(name); h != "" {
		holder = "the environment with data directory " + h
	}
	return fmt.Errorf("%s, chosen when data directory %s was first used, is in use by %s: stop that one first, or start this one afresh (`portside down --purge --data-dir %s`)", what, dir, holder, dir)
}

func (c *claim) release() {
	if c != nil {
		_ = c.ln.Close()
	}
}

// hold keeps claims until release: after every part is stopped and the
// real machines' networks are removed, so that no environment can choose
// addresses this one still has on the host.
func (s *stack) hold(c *claim) { s.claims = append(s.claims, c) }

func (s *stack) releaseClaims() {
	for _, c := range s.claims {
		c.release()
	}
	s.claims = nil
}
