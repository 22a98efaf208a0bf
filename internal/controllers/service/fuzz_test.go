package service

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

// FuzzServiceAnnotations drives the Service controller's decisions from a
// Service's annotations and labels as a user may write them: the
// source-ranges annotation (and the spec field it falls back from), the
// node exclusion label, externalTrafficPolicy with a health-check node
// port, and the load-balancer class. Properties:
//   - nothing panics;
//   - the exclusion label excludes unless it parses as false (upstream's
//     strconv.ParseBool rule: an unparsable value excludes);
//   - an accepted spec has only valid, masked source ranges, and writing
//     them back into the annotation is accepted and gives the same ranges
//     (an accepted value re-validates);
//   - the health check is set exactly for Local with a node port;
//   - SpecHash is deterministic and changes with the annotations;
//   - Unsupported is "" for a cloud with every feature and names source
//     ranges for one without them.
func FuzzServiceAnnotations(f *testing.F) {
	f.Add("10.0.0.0/8, 192.168.1.0/24", "", "true", true, int32(30123), "")
	f.Add("", "203.0.113.7/24,2001:db8::1/64", "false", false, int32(0), "example.com/lb")
	f.Add(" , ", "", "yes", true, int32(0), "")
	f.Add("0.0.0.0/0", "", "FALSE", false, int32(-1), "")
	f.Add("::ffff:10.0.0.1/104", "::/0", "1", true, int32(65535), "")
	f.Add("10.0.0.1/33", "", "", false, int32(1), "")
	f.Add("fe80::1%eth0/64", "", "0", true, int32(2), "")
	f.Fuzz(func(t *testing.T, annotation, specRanges, exclude string, local bool, hcPort int32, class string) {
		// The exclusion label.
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{LabelExcludeFromLB: exclude}}}
		b, err := strconv.ParseBool(exclude)
		if want := err == nil && !b; EligibleNode(n) != want {
			t.Fatalf("EligibleNode with %s=%q = %v, want %v", LabelExcludeFromLB, exclude, !want, want)
		}
		if !EligibleNode(&corev1.Node{}) {
			t.Fatal("a node without the label is not eligible")
		}

		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "0d6f2c1e-0000-4000-8000-000000000001",
				Annotations: map[string]string{cloud.AnnotationLoadBalancerSourceRanges: annotation}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
				Ports:               []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}},
				HealthCheckNodePort: hcPort},
		}
		if class != "" {
			svc.Spec.LoadBalancerClass = &class
		}
		if specRanges != "" {
			svc.Spec.LoadBalancerSourceRanges = strings.Split(specRanges, ",")
		}
		if local {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		_ = OfClass(svc, "")
		_ = WantsLoadBalancer(svc, class)
		spec, err := cloud.SpecFromService("c", svc)
		if err != nil {
			if spec != nil {
				t.Fatalf("spec %+v with error %v", spec, err)
			}
			if !strings.Contains(err.Error(), "not a CIDR") {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		var back []string
		for _, p := range spec.SourceRanges {
			if !p.IsValid() || p != p.Masked() {
				t.Fatalf("source range %v is not a valid masked prefix", p)
			}
			if q, err := netip.ParsePrefix(p.String()); err != nil || q != p {
				t.Fatalf("source range %v does not round-trip: %v %v", p, q, err)
			}
			back = append(back, p.String())
		}
		if len(back) > 0 {
			again := svc.DeepCopy()
			again.Spec.LoadBalancerSourceRanges = nil
			again.Annotations[cloud.AnnotationLoadBalancerSourceRanges] = strings.Join(back, ",")
			spec2, err := cloud.SpecFromService("c", again)
			if err != nil {
				t.Fatalf("the accepted ranges %q do not re-validate: %v", back, err)
			}
			if len(spec2.SourceRanges) != len(spec.SourceRanges) {
				t.Fatalf("re-validated ranges %v, want %v", spec2.SourceRanges, spec.SourceRanges)
			}
			for i := range spec2.SourceRanges {
				if spec2.SourceRanges[i] != spec.SourceRanges[i] {
					t.Fatalf("re-validated ranges %v, want %v", spec2.SourceRanges, spec.SourceRanges)
				}
			}
		}
		if wantHC := local && hcPort != 0; (spec.HealthCheck != nil) != wantHC {
			t.Fatalf("health check %+v for local=%v port=%d", spec.HealthCheck, local, hcPort)
		}
		h := SpecHash(spec)
		if len(h) != 64 || SpecHash(spec) != h {
			t.Fatalf("SpecHash %q is not a stable sha256", h)
		}
		changed := svc.DeepCopy()
		changed.Annotations["example.com/other"] = annotation + "x"
		spec3 := *spec
		spec3.Object = changed
		if SpecHash(&spec3) == h {
			t.Fatal("SpecHash ignores an added annotation")
		}
		all := cloud.LoadBalancerFeatures{Protocols: []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP},
			MixedProtocols: true, SourceRanges: true, DualStack: true, HealthChecks: true}
		if why := Unsupported(spec, all); why != "" {
			t.Fatalf("Unsupported with every feature: %s", why)
		}
		none := all
		none.SourceRanges = false
		if why := Unsupported(spec, none); (why != "") != (len(spec.SourceRanges) > 0) {
			t.Fatalf("Unsupported without source ranges = %q for %v", why, spec.SourceRanges)
		}
	})
}
