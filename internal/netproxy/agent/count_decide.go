package agent

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/portside-io/portside/internal/netproxy"
)

// Upstream --server-count-source values (ANP cmd/agent/app/options).
const (
	CountSourceDefault = "default"
	CountSourceMax     = "max"
)

// Where a server count came from, for logs (upstream's wording).
const (
	countFromResponses = "server response headers"
	countFromLeases    = "lease count"
	countFromFallback  = "fallback to 1"
)

// countInputs is what the agent knows when it decides how many servers to
// hold.
type countInputs struct {
	// Header is the serverCount header of the last server the agent newly
	// held (0: none yet). Duplicates do not update it, as upstream's.
	Header int
	// LeasesOn is --count-server-leases; Leases is then the count of valid
	// server Leases (leaseCount's result, never below 1).
	LeasesOn bool
	Leases   int
	// Source is --server-count-source ("" is "default").
	Source string
}

// decideServerCount is upstream's aggregate server counter (ANP
// pkg/agent/server_counter.go): without lease counting the header count;
// with it, the lease count ("default") or the larger of both ("max");
// never below 1. Against upstream servers that publish Leases but all
// send --server-count=1, only the Lease count finds the other replicas.
func decideServerCount(in countInputs) (count int, from string) {
	header := in.Header
	if header <= 0 {
		header = 1
	}
	if !in.LeasesOn {
		if in.Header <= 0 {
			return 1, countFromFallback
		}
		return header, countFromResponses
	}
	count, from = in.Leases, countFromLeases
	if in.Source == CountSourceMax && in.Header > count {
		count, from = in.Header, countFromResponses
	}
	if count <= 0 {
		return 1, countFromFallback
	}
	return count, from
}

// leaseCount counts the valid Leases (renewed, or acquired, less than
// their duration before now), as upstream's ServerLeaseCounter: none
// counts as 1, since the agent reached at least the server it talks to.
func leaseCount(leases []*coordinationv1.Lease, now time.Time) int {
	n := 0
	for _, l := range leases {
		if netproxy.LeaseValid(l, now) {
			n++
		}
	}
	return max(n, 1)
}

// validateCountSource checks --server-count-source.
func validateCountSource(s string) error {
	switch s {
	case "", CountSourceDefault, CountSourceMax:
		return nil
	}
	return fmt.Errorf("--server-count-source %q: want %q (one source: the Lease count with --count-server-leases, else the servers' header) or %q (the larger of both)",
		s, CountSourceDefault, CountSourceMax)
}
