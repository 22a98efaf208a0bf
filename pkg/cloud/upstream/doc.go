// Package upstream adapts between Portside's provider SDK (pkg/cloud) and the
// upstream k8s.io/cloud-provider interface, in both directions:
//
//   - FromUpstream wraps any upstream cloudprovider.Interface as a Portside
//     provider, so existing providers run under Portside unchanged. It asks
//     the provider what upstream's controllers ask, with the same arguments:
//     the full Node objects (given WithNodes, the CCM's node lister) and the
//     Service itself; InstancesV2 when present, else Instances and Zones by
//     providerID, then by node name, as upstream's node controllers do. What
//     upstream would leave out silently (no Zones, no InstanceID) comes back
//     in InstanceMetadata.Warnings (cloud.ErrNoZone, cloud.ErrNoProviderID).
//     Its load balancers declare every feature, since upstream hands them
//     every Service and lets them decide; a listed route whose destination
//     does not parse is skipped with a log line, as upstream's route
//     controller does;
//   - ToUpstream exposes a Portside provider as a cloudprovider.Interface, so
//     upstream's own controllers can run on the same cloud (side-by-side
//     benchmarks, migrations).
//
// Errors are translated both ways: InstanceNotFound and DiskNotFound ⇄
// cloud.ErrNotFound, NotImplemented ⇄ cloud.ErrNotImplemented,
// ImplementedElsewhere ⇄ cloud.ErrImplementedElsewhere, and api.RetryError ⇄
// *cloud.RetryAfterError.
package upstream

import (
	"errors"
	"fmt"

	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"

	"github.com/portside-io/portside/pkg/cloud"
)

// fromUpstreamErr translates an upstream error into the SDK's contract,
// keeping the original in the chain.
func fromUpstreamErr(err error) error {
	if err == nil {
		return nil
	}
	var re *api.RetryError
	switch {
	case errors.As(err, &re):
		return &cloud.RetryAfterError{After: re.RetryAfter(), Reason: re.Error()}
	case errors.Is(err, cloudprovider.InstanceNotFound), errors.Is(err, cloudprovider.DiskNotFound):
		return fmt.Errorf("%w: %w", cloud.ErrNotFound, err)
	case errors.Is(err, cloudprovider.NotImplemented):
		return fmt.Errorf("%w: %w", cloud.ErrNotImplemented, err)
	case errors.Is(err, cloudprovider.ImplementedElsewhere):
		return fmt.Errorf("%w: %w", cloud.ErrImplementedElsewhere, err)
	}
	return err
}

// toUpstreamErr translates an SDK error into what upstream controllers
// test for with ==: they compare sentinels directly, so the sentinel itself
// is returned, not a wrapper.
func toUpstreamErr(err error) error {
	if err == nil {
		return nil
	}
	if d, ok := cloud.IsRetryAfter(err); ok {
		return api.NewRetryError(err.Error(), d)
	}
	switch {
	case errors.Is(err, cloud.ErrNotImplemented):
		return cloudprovider.NotImplemented
	case errors.Is(err, cloud.ErrImplementedElsewhere):
		return cloudprovider.ImplementedElsewhere
	case errors.Is(err, cloud.ErrNotFound):
		return cloudprovider.InstanceNotFound
	}
	return err
}
