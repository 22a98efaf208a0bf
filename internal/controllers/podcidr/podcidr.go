// Package podcidr reads a node's pod CIDRs, shared by the node IPAM and
// route controllers.
package podcidr

import "net/netip"

// Parse parses spec.podCIDRs, masked; an error names the bad one.
func Parse(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
