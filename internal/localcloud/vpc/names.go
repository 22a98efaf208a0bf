// Package vpc is the local cloud's virtual network for real machines: a
// router network namespace of the cloud's own holding the VPC bridge, an
// uplink veth from the host into it, a veth per machine, kernel routes for
// the cloud's routes API inside the router, and unreachable routes on the
// host covering every range, so no packet for them ever leaves the machine.
//
// Forwarding is switched on only inside the router namespace: the host's
// settings never change. Everything made is recorded in a state file and
// removed by that record (by name and namespace identity), never by a name
// pattern, so `down` after a kill -9 removes exactly what was made.
package vpc

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
)

// idRE: the ID is part of every link and namespace name, and link names
// have at most 15 bytes (IFNAMSIZ-1): "ps" + 6 + a 6-byte suffix fits.
var idRE = regexp.MustCompile(`^[a-z0-9]{6}$`)

// IDFor derives a network's ID from what identifies its owner (the data
// directory of `portside up`): the same directory always finds its own
// network again, two directories never share one.
func IDFor(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:])[:6]
}

// names are the kernel object names of network id.
type names struct {
	// router is the router's netns name (under /run/netns).
	router string
	// bridge is the VPC bridge, inside the router.
	bridge string
	// hostUplink and routerUplink are the two ends of the uplink veth.
	hostUplink, routerUplink string
}

func namesFor(id string) (names, error) {
	if !idRE.MatchString(id) {
		return names{}, fmt.Errorf("vpc id %q: want 6 lower-case letters or digits (see vpc.IDFor)", id)
	}
	return names{
		router:       "ps" + id + "-router",
		bridge:       "ps" + id + "br",
		hostUplink:   "ps" + id + "up",
		routerUplink: "ps" + id + "upr",
	}, nil
}

// machineLink is the router-side name of machine index i's veth (the
// machine side is always eth0, inside the machine's own namespace).
func machineLink(id string, i int) string { return fmt.Sprintf("ps%sm%d", id, i) }
