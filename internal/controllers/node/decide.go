package node

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/portside-io/portside/pkg/cloud"
)

// Well-known names (k8s.io/cloud-provider api and k8s.io/api core/v1).
const (
	TaintUninitialized       = "node.cloudprovider.kubernetes.io/uninitialized"
	AnnotationProvidedNodeIP = "alpha.kubernetes.io/provided-node-ip"
	labelInstanceTypeBeta    = "beta.kubernetes.io/instance-type"
	labelZoneBeta            = "failure-domain.beta.kubernetes.io/zone"
	labelRegionBeta          = "failure-domain.beta.kubernetes.io/region"
)

// betaToGA maps the deprecated labels to their GA names; the beta label is
// the source of truth, as upstream.
var betaToGA = [][2]string{
	{labelInstanceTypeBeta, corev1.LabelInstanceTypeStable},
	{labelZoneBeta, corev1.LabelTopologyZone},
	{labelRegionBeta, corev1.LabelTopologyRegion},
}

// Initialization is what initializing one node changes: computed from the
// node and the cloud's metadata, applied in at most two writes (status, then
// the object itself).
type Initialization struct {
	ProviderID string            // set when the node has none
	Labels     map[string]string // labels to set
	Addresses  []corev1.NodeAddress
	// AddressesChanged is false when status.addresses already match.
	AddressesChanged bool
	// Taints is the node's taint list without the uninitialized taint.
	Taints []corev1.Taint
}

// InitError is why a node cannot be initialized, with the event reason.
type InitError struct {
	Reason  string
	Message string
}

func (e *InitError) Error() string { return e.Message }

// HasUninitializedTaint reports whether the node waits for the cloud node controller.
func HasUninitializedTaint(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == TaintUninitialized })
}

// DecideInitialization computes the initialization of node from md. It is
// pure: no API or cloud calls.
func DecideInitialization(node *corev1.Node, md *cloud.InstanceMetadata) (*Initialization, error) {
	providerID := node.Spec.ProviderID
	if providerID == "" {
		providerID = md.ProviderID
	}
	if providerID == "" && !hasWarning(md, cloud.ErrNoProviderID) {
		// Upstream leaves such nodes tainted too (issues.k8s.io/123024),
		// except for a legacy provider that cannot name its instances
		// (InstanceID not implemented): it initializes those without one.
		return nil, &InitError{Reason: ReasonProviderIDMissing, Message: "the cloud provider returned no providerID for this node and the node has none"}
	}
	addrs, err := DesiredAddresses(node, md.Addresses)
	if err != nil {
		return nil, err
	}
	init := &Initialization{
		Labels:           map[string]string{},
		Addresses:        addrs,
		AddressesChanged: !equalAddresses(node.Status.Addresses, addrs),
	}
	if node.Spec.ProviderID == "" {
		init.ProviderID = providerID
	}
	set := func(k, v string) {
		if v != "" && node.Labels[k] != v {
			init.Labels[k] = v
		}
	}
	set(corev1.LabelInstanceTypeStable, md.InstanceType)
	set(labelInstanceTypeBeta, md.InstanceType)
	set(corev1.LabelTopologyZone, md.Zone)
	set(labelZoneBeta, md.Zone)
	set(corev1.LabelTopologyRegion, md.Region)
	set(labelRegionBeta, md.Region)
	for k, v := range md.AdditionalLabels {
		if _, exists := node.Labels[k]; exists || reservedLabel(k) {
			continue // never override a label, never write into kubernetes.io / k8s.io
		}
		init.Labels[k] = v
	}
	for _, t := range node.Spec.Taints {
		if t.Key != TaintUninitialized {
			init.Taints = append(init.Taints, t)
		}
	}
	return init, nil
}

// hasWarning reports whether one of md's warnings is target.
func hasWarning(md *cloud.InstanceMetadata, target error) bool {
	return slices.ContainsFunc(md.Warnings, func(w error) bool { return errors.Is(w, target) })
}

// reservedLabel reports whether a label key is in the kubernetes.io or
// k8s.io namespaces (including subdomains), which providers may not add.
func reservedLabel(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, d := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == d || strings.HasSuffix(prefix, "."+d) {
			return true
		}
	}
	return false
}

// DesiredAddresses returns the node's addresses from the cloud's, honouring
// the kubelet's provided-node-ip annotation (one IP, or two for
// dual-stack): each provided IP must be among the cloud's addresses; the
// matching addresses come first and replace the other addresses of their
// type. The kubelet's Hostname address is kept when the cloud gives none.
// An empty list from the cloud keeps the node's addresses as they are (as
// upstream skips the update): a cloud hiccup must not unroute a node.
func DesiredAddresses(node *corev1.Node, cloudAddrs []corev1.NodeAddress) ([]corev1.NodeAddress, error) {
	if len(cloudAddrs) == 0 {
		return slices.Clone(node.Status.Addresses), nil
	}
	out := slices.Clone(cloudAddrs)
	if provided := strings.TrimSpace(node.Annotations[AnnotationProvidedNodeIP]); provided != "" {
		ips, err := parseProvidedIPs(provided)
		if err != nil {
			return nil, err
		}
		var enforced []corev1.NodeAddress
		types := map[corev1.NodeAddressType]bool{}
		for _, ip := range ips {
			found := false
			for _, a := range cloudAddrs {
				if cip, err := netip.ParseAddr(a.Address); err == nil && cip == ip {
					enforced = append(enforced, a)
					types[a.Type] = true
					found = true
				}
			}
			if !found {
				return nil, &InitError{Reason: ReasonProvidedNodeIPNotFound, Message: fmt.Sprintf(
					"the kubelet's %s %s is not among the instance's addresses %s: fix the kubelet's --node-ip or the instance",
					AnnotationProvidedNodeIP, ip, formatAddresses(cloudAddrs))}
			}
		}
		out = enforced
		for _, a := range cloudAddrs {
			if !types[a.Type] {
				out = append(out, a)
			}
		}
	}
	if !slices.ContainsFunc(out, func(a corev1.NodeAddress) bool { return a.Type == corev1.NodeHostName }) {
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeHostName {
				out = append(out, a)
				break
			}
		}
	}
	return out, nil
}

func parseProvidedIPs(v string) ([]netip.Addr, error) {
	parts := strings.Split(v, ",")
	bad := func(why string) error {
		return &InitError{Reason: ReasonInvalidProvidedNodeIP, Message: fmt.Sprintf("annotation %s=%q %s: want one IP, or an IPv4 and an IPv6 separated by a comma", AnnotationProvidedNodeIP, v, why)}
	}
	if len(parts) > 2 {
		return nil, bad("has more than two addresses")
	}
	var ips []netip.Addr
	for _, p := range parts {
		ip, err := netip.ParseAddr(strings.TrimSpace(p))
		if err != nil || ip.IsUnspecified() {
			return nil, bad(fmt.Sprintf("has %q, which is not a usable IP", p))
		}
		ips = append(ips, ip)
	}
	if len(ips) == 2 && ips[0].Is4() == ips[1].Is4() {
		return nil, bad("has two addresses of the same family")
	}
	return ips, nil
}

func formatAddresses(as []corev1.NodeAddress) string {
	parts := make([]string, 0, len(as))
	for _, a := range as {
		parts = append(parts, string(a.Type)+"="+a.Address)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func equalAddresses(a, b []corev1.NodeAddress) bool {
	return slices.Equal(a, b)
}

// GALabelFixes returns the GA labels to set from their beta labels on an
// initialized node (the beta label is the source of truth).
func GALabelFixes(node *corev1.Node) map[string]string {
	var fix map[string]string
	for _, pair := range betaToGA {
		beta, ok := node.Labels[pair[0]]
		if !ok || node.Labels[pair[1]] == beta {
			continue
		}
		if fix == nil {
			fix = map[string]string{}
		}
		fix[pair[1]] = beta
	}
	return fix
}

var labelsEverything = labels.Everything()
