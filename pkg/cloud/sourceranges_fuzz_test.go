package cloud

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzSourceRanges checks SourceRanges, which reads
// spec.loadBalancerSourceRanges or, when that is empty, the
// service.beta.kubernetes.io/load-balancer-source-ranges annotation:
//   - nothing panics; an error names the field or annotation it came from;
//   - the field wins over the annotation when it is set;
//   - every accepted range is a valid masked prefix that round-trips
//     through its string form (what providers send to their clouds), and
//     one entry in gives one range out;
//   - what is accepted is also a CIDR to the standard library's
//     net.ParseCIDR (upstream's parser), with the same network address.
func FuzzSourceRanges(f *testing.F) {
	f.Add("10.0.0.0/8,192.168.0.1/24", "")
	f.Add("", "2001:db8::/32, 203.0.113.9/32")
	f.Add(" ", "0.0.0.0/0")
	f.Add("10.0.0.0/8,,", "")
	f.Add("::ffff:10.1.2.3/120", "")
	f.Add("", "1.2.3.4")
	f.Add("", "010.0.0.0/8")
	f.Add("fe80::1%eth0/64", "")
	f.Fuzz(func(t *testing.T, annotation, field string) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationLoadBalancerSourceRanges: annotation}}}
		if field != "" {
			svc.Spec.LoadBalancerSourceRanges = strings.Split(field, ",")
		}
		got, err := SourceRanges(svc)
		if err != nil {
			want := "annotation " + AnnotationLoadBalancerSourceRanges
			if field != "" {
				want = "spec.loadBalancerSourceRanges"
			}
			if !strings.HasPrefix(err.Error(), want+":") {
				t.Fatalf("error %q does not name %s", err, want)
			}
			return
		}
		var raw []string
		switch {
		case field != "":
			raw = strings.Split(field, ",")
		case strings.TrimSpace(annotation) != "":
			raw = strings.Split(strings.TrimSpace(annotation), ",")
		}
		if len(got) != len(raw) {
			t.Fatalf("%d ranges from %d entries %q: %v", len(got), len(raw), raw, got)
		}
		for i, p := range got {
			if !p.IsValid() || p != p.Masked() {
				t.Fatalf("range %v is not a valid masked prefix", p)
			}
			if q, err := netip.ParsePrefix(p.String()); err != nil || q != p {
				t.Fatalf("range %v does not round-trip: %v %v", p, q, err)
			}
			ip, ipnet, err := net.ParseCIDR(strings.TrimSpace(raw[i]))
			if err != nil {
				t.Fatalf("%q is accepted, but net.ParseCIDR rejects it: %v", raw[i], err)
			}
			ones, _ := ipnet.Mask.Size()
			if ones != p.Bits() && ones+96 != p.Bits() {
				t.Fatalf("%q: %d bits, net.ParseCIDR says %d", raw[i], p.Bits(), ones)
			}
			if !ipnet.Contains(net.IP(p.Addr().AsSlice())) || !ipnet.Contains(ip) {
				t.Fatalf("%q: network %v is not net.ParseCIDR's %v", raw[i], p, ipnet)
			}
		}
	})
}
