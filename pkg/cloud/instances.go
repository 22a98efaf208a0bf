package cloud

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Node identifies a Kubernetes node to the provider. ProviderID is empty for
// a node the provider has not initialized yet; the provider then finds the
// instance by Name.
type Node struct {
	Name       string
	ProviderID string
	// Addresses are the node's current status addresses, if any.
	Addresses []corev1.NodeAddress
	// Labels are the node's labels, for providers that key on them.
	Labels map[string]string
}

// NodeFrom returns the Node reference of a Kubernetes Node object.
func NodeFrom(n *corev1.Node) Node {
	return Node{Name: n.Name, ProviderID: n.Spec.ProviderID, Addresses: n.Status.Addresses, Labels: n.Labels}
}

// InstanceMetadata is what the cloud knows about the instance behind a node.
type InstanceMetadata struct {
	// ProviderID is "<provider>://<id>"; see ProviderID.
	ProviderID string
	// InstanceType becomes the node.kubernetes.io/instance-type label.
	InstanceType string
	// Addresses of the instance: InternalIP and ExternalIP (IPv4 and IPv6),
	// Hostname, InternalDNS, ExternalDNS.
	Addresses []corev1.NodeAddress
	// Zone and Region become the topology.kubernetes.io labels.
	Zone   string
	Region string
	// AdditionalLabels are added to the node. Keys in the kubernetes.io and
	// k8s.io namespaces are dropped, and existing labels are never overwritten.
	AdditionalLabels map[string]string
	// PodCIDRs the cloud assigned to the instance (one per family), for
	// --cidr-allocator-type=CloudAllocator; empty when it assigns none.
	PodCIDRs []netip.Prefix
	// Warnings say what the provider could not tell about an instance it
	// did find, each wrapping ErrNoZone or ErrNoProviderID (both wrap
	// ErrNotImplemented). The rest of the metadata is good: the node
	// controller initializes the node with it and reports every warning as
	// a Warning event on the Node, so that a missing zone label or
	// providerID is never silent.
	Warnings []error
}

var (
	// ErrNoZone, in InstanceMetadata.Warnings, means the provider reports
	// no zone or region (an upstream provider without Zones, or whose
	// GetZoneByProviderID and GetZoneByNodeName are not implemented): the
	// node gets no topology labels.
	ErrNoZone = fmt.Errorf("%w: the cloud provider reports no zone", ErrNotImplemented)
	// ErrNoProviderID, in InstanceMetadata.Warnings, means the provider
	// cannot name the instance (an upstream provider whose InstanceID is
	// not implemented): the instance was found by node name, and
	// InstanceMetadata.ProviderID is empty. Upstream initializes such a
	// node without a providerID; the node controller should too.
	ErrNoProviderID = fmt.Errorf("%w: the cloud provider gives no instance ID", ErrNotImplemented)
)

// Instances gives the instance behind a node.
type Instances interface {
	// InstanceMetadata returns the instance's metadata; an error wrapping
	// ErrNotFound when there is no such instance.
	InstanceMetadata(ctx context.Context, node Node) (*InstanceMetadata, error)
	// InstanceExists reports whether the instance exists. It returns
	// (false, nil) only when the cloud positively said the instance is gone;
	// any doubt is an error.
	InstanceExists(ctx context.Context, node Node) (bool, error)
	// InstanceShutdown reports whether the instance is stopped.
	InstanceShutdown(ctx context.Context, node Node) (bool, error)
}

// InstanceAddresser is optionally implemented by a provider's Instances
// when it can look up only an instance's addresses more cheaply than its
// whole metadata: the node controller's periodic address sync then uses it
// (as upstream's uses NodeAddressesByProviderID / NodeAddresses alone).
type InstanceAddresser interface {
	// InstanceAddresses returns the instance's addresses; an error wrapping
	// ErrNotFound when there is no such instance.
	InstanceAddresses(ctx context.Context, node Node) ([]corev1.NodeAddress, error)
}

// ProviderID builds the providerID "<provider>://<id>".
func ProviderID(provider, id string) string { return provider + "://" + id }

// ParseProviderID splits "<provider>://<id>" and checks the provider name.
func ParseProviderID(provider, providerID string) (string, error) {
	name, id, ok := strings.Cut(providerID, "://")
	if !ok || id == "" {
		return "", fmt.Errorf("providerID %q is not of the form <provider>://<id>", providerID)
	}
	if name != provider {
		return "", fmt.Errorf("providerID %q belongs to provider %q, not %q", providerID, name, provider)
	}
	return id, nil
}
