package upstream

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/portside-io/portside/pkg/cloud"
)

// instancesV1 serves a provider that has only the deprecated Instances (and
// maybe Zones), calling them exactly as upstream's controllers do when
// InstancesV2 is absent: by providerID first, by node name when that fails
// or the node has no providerID. Each method cites the upstream function it
// follows.
type instancesV1 struct {
	c     cloudprovider.Interface
	v1    cloudprovider.Instances
	zones cloudprovider.Zones // nil when the provider has none
}

// providerID is the node's, else the one upstream builds from InstanceID
// (cloudprovider.GetInstanceProviderID, which returns NotImplemented and
// InstanceNotFound unwrapped).
func (i *instancesV1) providerID(ctx context.Context, n cloud.Node) (string, error) {
	if n.ProviderID != "" {
		return n.ProviderID, nil
	}
	return cloudprovider.GetInstanceProviderID(ctx, i.c, types.NodeName(n.Name))
}

// InstanceMetadata follows CloudNodeController.getInstanceMetadata. Where
// upstream silently leaves out the zone (no Zones) or the providerID
// (InstanceID not implemented), it adds a warning instead; a zone that is
// not implemented either way is a warning too, not upstream's endless
// "failed to get zone" retry.
func (i *instancesV1) InstanceMetadata(ctx context.Context, n cloud.Node) (*cloud.InstanceMetadata, error) {
	md := &cloud.InstanceMetadata{}
	pid, err := i.providerID(ctx, n)
	switch {
	case errors.Is(err, cloudprovider.NotImplemented):
		// Upstream goes on by node name: the only case a node may stay
		// without providerID.
		md.Warnings = append(md.Warnings, fmt.Errorf("node %q: %w: found by node name, so it gets no providerID", n.Name, cloud.ErrNoProviderID))
	case err != nil:
		return nil, fromUpstreamErr(err)
	}
	md.ProviderID = pid
	// getNodeAddressesByProviderIDOrName: by providerID (even ""), else by name.
	if md.Addresses, err = byIDOrName(ctx, "node addresses", pid, n.Name, i.v1.NodeAddressesByProviderID, i.v1.NodeAddresses); err != nil {
		return nil, err
	}
	// getInstanceTypeByProviderIDOrName, likewise.
	if md.InstanceType, err = byIDOrName(ctx, "instance type", pid, n.Name, i.v1.InstanceTypeByProviderID, i.v1.InstanceType); err != nil {
		return nil, err
	}
	if i.zones == nil {
		md.Warnings = append(md.Warnings, fmt.Errorf("node %q: %w: the provider has no Zones interface", n.Name, cloud.ErrNoZone))
		return md, nil
	}
	// getZoneByProviderIDOrName, likewise.
	zone, err := byIDOrName(ctx, "zone", pid, n.Name, i.zones.GetZoneByProviderID, i.zones.GetZoneByNodeName)
	var both *bothFailed
	switch {
	case errors.As(err, &both) && errors.Is(both.byID, cloudprovider.NotImplemented) && errors.Is(both.byName, cloudprovider.NotImplemented):
		md.Warnings = append(md.Warnings, fmt.Errorf("node %q: %w: GetZoneByProviderID and GetZoneByNodeName are not implemented", n.Name, cloud.ErrNoZone))
	case err != nil:
		return nil, err
	default:
		md.Zone, md.Region = zone.FailureDomain, zone.Region
	}
	return md, nil
}

var _ cloud.InstanceAddresser = (*instancesV1)(nil)

// InstanceAddresses follows CloudNodeController.getNodeAddressesByProviderIDOrName,
// as upstream's periodic UpdateNodeStatus: one or two provider calls, not
// the whole metadata (instance ID, type and zone too).
func (i *instancesV1) InstanceAddresses(ctx context.Context, n cloud.Node) ([]corev1.NodeAddress, error) {
	return byIDOrName(ctx, "node addresses", n.ProviderID, n.Name, i.v1.NodeAddressesByProviderID, i.v1.NodeAddresses)
}

// InstanceExists follows CloudNodeLifecycleController.ensureNodeExistsByProviderID:
// an instance InstanceID does not find is gone; any other failure is an error.
func (i *instancesV1) InstanceExists(ctx context.Context, n cloud.Node) (bool, error) {
	pid, err := i.providerID(ctx, n)
	if errors.Is(err, cloudprovider.InstanceNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fromUpstreamErr(err)
	}
	ok, err := i.v1.InstanceExistsByProviderID(ctx, pid)
	return ok, fromUpstreamErr(err)
}

// InstanceShutdown follows CloudNodeLifecycleController.shutdownInCloudProvider.
// Its NotImplemented (upstream: not shut down) stays ErrNotImplemented, which
// the SDK's callers read the same way.
func (i *instancesV1) InstanceShutdown(ctx context.Context, n cloud.Node) (bool, error) {
	pid, err := i.providerID(ctx, n)
	if errors.Is(err, cloudprovider.InstanceNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fromUpstreamErr(err)
	}
	ok, err := i.v1.InstanceShutdownByProviderID(ctx, pid)
	return ok, fromUpstreamErr(err)
}

// bothFailed is the error of a lookup that failed by providerID and by name.
// The error by name is the final answer and is wrapped (translated), so a
// missing instance is still cloud.ErrNotFound.
type bothFailed struct {
	what, providerID, name string
	byID, byName           error
}

func (e *bothFailed) Error() string {
	return fmt.Sprintf("%s: by providerID %q: %v; by node name %q: %v", e.what, e.providerID, e.byID, e.name, e.byName)
}

func (e *bothFailed) Unwrap() error { return fromUpstreamErr(e.byName) }

// byIDOrName asks by providerID, then by node name, as upstream's
// get*ByProviderIDOrName helpers do.
func byIDOrName[T any](ctx context.Context, what, pid, name string,
	byID func(context.Context, string) (T, error), byName func(context.Context, types.NodeName) (T, error)) (T, error) {
	v, errID := byID(ctx, pid)
	if errID == nil {
		return v, nil
	}
	v, errName := byName(ctx, types.NodeName(name))
	if errName == nil {
		return v, nil
	}
	var zero T
	return zero, &bothFailed{what: what, providerID: pid, name: name, byID: errID, byName: errName}
}
