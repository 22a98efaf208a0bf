package testenv

import (
	"regexp"
	"slices"
	"strings"
)

// MigratedControllers are the CCM's names (upstream's, v1.31 on) of the
// controllers leader migration hands over; the configuration's
// cloud-node-lifecycle, route and service are their aliases.
var MigratedControllers = []string{"cloud-node-lifecycle-controller", "node-route-controller", "service-lb-controller"}

var (
	becameLeader = regexp.MustCompile(`"Became leader; starting controllers".* lease="([^"]+)"`)
	ctrlStarted  = regexp.MustCompile(`"Controller started" controller="([^"]+)"`)
	leaseDone    = regexp.MustCompile(`"Shut down; lease released".* lease="([^"]+)"`)
)

// RunningControllers reads a `portside ccm` log (one process's; test/kcmintree's
// logs the same lines) and
// returns the migrated controllers it runs, each with the lease it was
// started under: a controller starts after "Became leader" of its lease
// and stops when that lease is released.
func RunningControllers(log string) map[string]string {
	running, lease := map[string]string{}, ""
	for _, line := range strings.Split(log, "\n") {
		if m := becameLeader.FindStringSubmatch(line); m != nil {
			lease = m[1]
		}
		if m := ctrlStarted.FindStringSubmatch(line); m != nil && slices.Contains(MigratedControllers, m[1]) {
			running[m[1]] = lease
		}
		if m := leaseDone.FindStringSubmatch(line); m != nil {
			for c, l := range running {
				if l == m[1] {
					delete(running, c)
				}
			}
		}
	}
	return running
}
