package node

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

func addr(t corev1.NodeAddressType, a string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: t, Address: a}
}

var cloudAddrs = []corev1.NodeAddress{
	addr(corev1.NodeInternalIP, "10.0.0.1"), addr(corev1.NodeInternalIP, "10.0.0.2"),
	addr(corev1.NodeInternalIP, "fd00::1"), addr(corev1.NodeExternalIP, "203.0.113.1"),
	addr(corev1.NodeHostName, "vm-1"),
}

func tainted(annotations map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: annotations, Labels: map[string]string{"kubernetes.io/hostname": "n1", "team": "blue"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule},
			{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{addr(corev1.NodeHostName, "n1")}},
	}
}

func TestDecideInitialization(t *testing.T) {
	md := &cloud.InstanceMetadata{ProviderID: "local://i-1", InstanceType: "small", Zone: "zone-a", Region: "region-1",
		Addresses:        cloudAddrs[:4],
		AdditionalLabels: map[string]string{"example.com/rack": "r1", "team": "red", "node.kubernetes.io/x": "no", "k8s.io/y": "no", "sub.k8s.io/z": "no"}}
	init, err := DecideInitialization(tainted(nil), md)
	if err != nil {
		t.Fatal(err)
	}
	if init.ProviderID != "local://i-1" {
		t.Errorf("providerID = %q", init.ProviderID)
	}
	want := map[string]string{
		"node.kubernetes.io/instance-type": "small", "beta.kubernetes.io/instance-type": "small",
		"topology.kubernetes.io/zone": "zone-a", "failure-domain.beta.kubernetes.io/zone": "zone-a",
		"topology.kubernetes.io/region": "region-1", "failure-domain.beta.kubernetes.io/region": "region-1",
		"example.com/rack": "r1",
	}
	if fmt.Sprint(init.Labels) != fmt.Sprint(want) {
		t.Errorf("labels = %v\nwant     %v", init.Labels, want)
	}
	if len(init.Taints) != 1 || init.Taints[0].Key != "dedicated" {
		t.Errorf("taints = %v: only the uninitialized taint goes", init.Taints)
	}
	// The cloud gave no Hostname: the kubelet's is kept.
	if last := init.Addresses[len(init.Addresses)-1]; last != addr(corev1.NodeHostName, "n1") || !init.AddressesChanged {
		t.Errorf("addresses = %v", init.Addresses)
	}
	// An existing providerID is never changed.
	n := tainted(nil)
	n.Spec.ProviderID = "local://i-1"
	if init, _ := DecideInitialization(n, md); init.ProviderID != "" {
		t.Errorf("providerID rewritten: %q", init.ProviderID)
	}
	var ie *InitError
	if _, err := DecideInitialization(tainted(nil), &cloud.InstanceMetadata{}); !errors.As(err, &ie) || ie.Reason != "ProviderIDMissing" {
		t.Errorf("no providerID: %v", err)
	}
}

func TestDesiredAddressesProvidedNodeIP(t *testing.T) {
	cases := []struct {
		provided string
		want     []corev1.NodeAddress
		reason   string
	}{
		{"", cloudAddrs, ""},
		// The provided IP comes first and replaces other InternalIPs.
		{"10.0.0.2", []corev1.NodeAddress{addr(corev1.NodeInternalIP, "10.0.0.2"), addr(corev1.NodeExternalIP, "203.0.113.1"), addr(corev1.NodeHostName, "vm-1")}, ""},
		// Dual-stack.
		{"10.0.0.2,fd00::1", []corev1.NodeAddress{addr(corev1.NodeInternalIP, "10.0.0.2"), addr(corev1.NodeInternalIP, "fd00::1"), addr(corev1.NodeExternalIP, "203.0.113.1"), addr(corev1.NodeHostName, "vm-1")}, ""},
		{"fd00::1, 10.0.0.1", []corev1.NodeAddress{addr(corev1.NodeInternalIP, "fd00::1"), addr(corev1.NodeInternalIP, "10.0.0.1"), addr(corev1.NodeExternalIP, "203.0.113.1"), addr(corev1.NodeHostName, "vm-1")}, ""},
		{"10.9.9.9", nil, "ProvidedNodeIPNotFound"},
		{"10.0.0.1,10.9.9.9", nil, "InvalidProvidedNodeIP"},
		{"10.0.0.1,fd00::9", nil, "ProvidedNodeIPNotFound"},
		{"not-an-ip", nil, "InvalidProvidedNodeIP"},
		{"10.0.0.1,fd00::1,10.0.0.2", nil, "InvalidProvidedNodeIP"},
	}
	for _, tc := range cases {
		n := tainted(map[string]string{AnnotationProvidedNodeIP: tc.provided})
		got, err := DesiredAddresses(n, cloudAddrs)
		if tc.reason != "" {
			var ie *InitError
			if !errors.As(err, &ie) || ie.Reason != tc.reason {
				t.Errorf("%q: want %s, got %v", tc.provided, tc.reason, err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%q: got %v %v\nwant %v", tc.provided, got, err, tc.want)
		}
	}
	n := tainted(map[string]string{AnnotationProvidedNodeIP: "10.9.9.9"})
	_, err := DesiredAddresses(n, cloudAddrs)
	if err == nil || !contains(err.Error(), "10.9.9.9", "InternalIP=10.0.0.1", "--node-ip") {
		t.Errorf("mismatch message must name the IP, the instance's addresses and the fix: %v", err)
	}
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func TestGALabelFixes(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		labelZoneBeta: "z1", corev1.LabelTopologyZone: "z1", labelRegionBeta: "r1", corev1.LabelTopologyRegion: "old", labelInstanceTypeBeta: "t1",
	}}}
	got := GALabelFixes(n)
	if fmt.Sprint(got) != fmt.Sprint(map[string]string{corev1.LabelInstanceTypeStable: "t1", corev1.LabelTopologyRegion: "r1"}) {
		t.Errorf("fixes = %v", got)
	}
}

// TestDesiredAddressesEmptyFromCloud: an empty list from the cloud never
// wipes a node's addresses (upstream skips the update), with or without a
// provided node IP.
func TestDesiredAddressesEmptyFromCloud(t *testing.T) {
	have := []corev1.NodeAddress{addr(corev1.NodeInternalIP, "10.0.0.1"), addr(corev1.NodeHostName, "n1")}
	for _, provided := range []string{"", "10.0.0.1"} {
		n := tainted(map[string]string{AnnotationProvidedNodeIP: provided})
		n.Status.Addresses = have
		for _, empty := range [][]corev1.NodeAddress{nil, {}} {
			got, err := DesiredAddresses(n, empty)
			if err != nil || fmt.Sprint(got) != fmt.Sprint(have) {
				t.Errorf("provided %q, cloud %v: got %v %v, want the node's %v", provided, empty, got, err, have)
			}
		}
	}
	md := &cloud.InstanceMetadata{ProviderID: "local://i-1"}
	n := tainted(nil)
	n.Status.Addresses = have
	init, err := DecideInitialization(n, md)
	if err != nil || init.AddressesChanged {
		t.Errorf("initialization with no cloud addresses: changed=%v err=%v", init != nil && init.AddressesChanged, err)
	}
}

// TestDecideInitializationWithoutProviderID: a node may stay without
// providerID only when the provider said it cannot name the instance
// (cloud.ErrNoProviderID: a legacy provider whose InstanceID is not
// implemented, found by node name), as upstream initializes such nodes.
func TestDecideInitializationWithoutProviderID(t *testing.T) {
	cases := []struct {
		name     string
		warnings []error
		reason   string // "" when initialized
	}{
		{"no warning", nil, "ProviderIDMissing"},
		{"only no zone", []error{fmt.Errorf("n1: %w", cloud.ErrNoZone)}, "ProviderIDMissing"},
		{"not implemented, but not the providerID", []error{cloud.ErrNotImplemented}, "ProviderIDMissing"},
		{"no providerID", []error{fmt.Errorf("n1: %w", cloud.ErrNoProviderID)}, ""},
		{"no providerID nor zone", []error{fmt.Errorf("n1: %w", cloud.ErrNoZone), fmt.Errorf("n1: %w", cloud.ErrNoProviderID)}, ""},
	}
	for _, tc := range cases {
		md := &cloud.InstanceMetadata{InstanceType: "small", Addresses: cloudAddrs[:1], Warnings: tc.warnings}
		init, err := DecideInitialization(tainted(nil), md)
		if tc.reason != "" {
			var ie *InitError
			if !errors.As(err, &ie) || ie.Reason != tc.reason {
				t.Errorf("%s: got %v, want %s", tc.name, err, tc.reason)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if init.ProviderID != "" || init.Labels[corev1.LabelInstanceTypeStable] != "small" || len(init.Taints) != 1 || !init.AddressesChanged {
			t.Errorf("%s: initialization %+v, want one without providerID and with the rest", tc.name, init)
		}
	}
}
