// Package upstream adapts between Portside's provider SDK (pkg/cloud) and the
// upstream k8s.io/cloud-provider interface, in both directions:
//
//   - FromUpstream wraps any upstream cloudprovider.Interface as a Portside
//     provider, so existing providers run under Portside unchanged;
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
