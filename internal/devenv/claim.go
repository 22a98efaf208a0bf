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

// claimPrefix scopes the names. Every environment on the host, whatever
// binary runs it, must see the others' claims; only this package's unit
// tests set their own (TestMain), so that they never hold a name a
// running environment needs. Abstract sockets have no permissions: any
// local user can take a name first (and block an `up`) or ask who holds
// it; Portside's hosts are single-user machines.
var claimPrefix = "portside/"

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
	switch h := claimHolder(name); h {
	case "":
	case dir:
		// Two `up`s of one data directory passed the pid file's check at
		// once: --purge would remove the running one's state.
		return fmt.Errorf("portside up is already running with data directory %s (it holds %s): run `portside down --data-dir %s` first", dir, what, dir)
	default:
		holder = "the environment with data directory " + h
	}
	return fmt.Errorf("%s, chosen when data directory %s was first used, is in use by %s: stop that one first, or start this one afresh (`portside down --purge --data-dir %s`)", what, dir, holder, dir)
}

// claimAll claims every name, or none: held is the first name another
// environment holds (its claims released).
func claimAll(owner string, names ...string) (claims []*claim, held string, err error) {
	for _, name := range names {
		c, isHeld, err := tryClaim(name, owner)
		if err != nil || isHeld {
			releaseAll(claims)
			if isHeld {
				return nil, name, nil
			}
			return nil, "", err
		}
		claims = append(claims, c)
	}
	return claims, "", nil
}

func releaseAll(claims []*claim) {
	for _, c := range claims {
		c.release()
	}
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
