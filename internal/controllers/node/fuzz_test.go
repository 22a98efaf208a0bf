package node

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzProvidedNodeIP checks the kubelet's alpha.kubernetes.io/provided-node-ip
// annotation against the cloud's addresses (given as "Type=addr;..."):
//   - nothing panics; errors are *InitError with one of the two reasons;
//   - an accepted annotation has one IP, or one of each family, none
//     unspecified, and re-validates from its canonical form;
//   - the result contains every provided IP (first), holds only the
//     cloud's addresses plus the node's own Hostname, and no address type
//     the provided IPs enforce appears with another address;
//   - an empty cloud answer keeps the node's addresses.
func FuzzProvidedNodeIP(f *testing.F) {
	f.Add("10.0.0.2", "InternalIP=10.0.0.1;InternalIP=10.0.0.2;ExternalIP=203.0.113.5;Hostname=n1")
	f.Add("10.0.0.2,fd00::2", "InternalIP=10.0.0.2;InternalIP=fd00::2;Hostname=n1")
	f.Add("10.0.0.2, 10.0.0.3", "InternalIP=10.0.0.2;InternalIP=10.0.0.3")
	f.Add("0.0.0.0", "InternalIP=10.0.0.1")
	f.Add("::ffff:10.0.0.1", "InternalIP=10.0.0.1")
	f.Add("fe80::1%eth0", "InternalIP=fe80::1%eth0")
	f.Add(" ", "")
	f.Add("10.0.0.9", "InternalIP=10.0.0.1")
	f.Fuzz(func(t *testing.T, annotation, cloudAddrs string) {
		var addrs []corev1.NodeAddress
		for _, e := range strings.Split(cloudAddrs, ";") {
			if typ, a, ok := strings.Cut(e, "="); ok {
				addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeAddressType(typ), Address: a})
			}
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{AnnotationProvidedNodeIP: annotation}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "kubelet-host"}, {Type: corev1.NodeInternalIP, Address: "192.0.2.1"}}}}
		out, err := DesiredAddresses(node, addrs)
		provided := strings.TrimSpace(annotation)
		var ips []netip.Addr
		if provided != "" {
			var perr error
			ips, perr = parseProvidedIPs(provided)
			if perr == nil {
				if len(ips) == 0 || len(ips) > 2 || (len(ips) == 2 && ips[0].Is4() == ips[1].Is4()) {
					t.Fatalf("accepted %q as %v", provided, ips)
				}
				canon := make([]string, len(ips))
				for i, ip := range ips {
					if ip.IsUnspecified() || !ip.IsValid() {
						t.Fatalf("accepted %q with unusable %v", provided, ip)
					}
					canon[i] = ip.String()
				}
				again, err := parseProvidedIPs(strings.Join(canon, ","))
				if err != nil || !slices.Equal(again, ips) {
					t.Fatalf("accepted %q does not re-validate from %q: %v %v", provided, canon, again, err)
				}
			} else if len(addrs) > 0 && err == nil {
				t.Fatalf("invalid %q (%v) accepted by DesiredAddresses", provided, perr)
			}
		}
		if err != nil {
			var ie *InitError
			if !errors.As(err, &ie) || (ie.Reason != ReasonInvalidProvidedNodeIP && ie.Reason != ReasonProvidedNodeIPNotFound) || ie.Message == "" {
				t.Fatalf("error %#v", err)
			}
			if len(addrs) == 0 {
				t.Fatalf("error %v with no cloud addresses", err)
			}
			return
		}
		if len(addrs) == 0 {
			if !slices.Equal(out, node.Status.Addresses) {
				t.Fatalf("empty cloud answer changed the addresses to %v", out)
			}
			return
		}
		for _, a := range out {
			if !slices.Contains(addrs, a) && !(a.Type == corev1.NodeHostName && a.Address == "kubelet-host") {
				t.Fatalf("address %v is neither the cloud's nor the kubelet's hostname", a)
			}
		}
		enforcedTypes := map[corev1.NodeAddressType]bool{}
		for i, ip := range ips {
			if i >= len(out) {
				t.Fatalf("provided %v missing from %v", ip, out)
			}
			found := false
			for _, a := range out {
				if cip, err := netip.ParseAddr(a.Address); err == nil && cip == ip {
					found = true
					enforcedTypes[a.Type] = true
				}
			}
			if !found {
				t.Fatalf("provided %v missing from %v", ip, out)
			}
		}
		for _, a := range out {
			if !enforcedTypes[a.Type] {
				continue
			}
			cip, err := netip.ParseAddr(a.Address)
			if err != nil || !slices.Contains(ips, cip) {
				t.Fatalf("%v kept next to the provided %v of its type: %v", a, ips, out)
			}
		}
	})
}
