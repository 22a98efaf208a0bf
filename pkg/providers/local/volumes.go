package local

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

type volumes Provider

// VolumeTopology answers for CSI volumes of the local cloud's driver; other
// volumes are not ours (ErrNotImplemented).
func (p *volumes) VolumeTopology(ctx context.Context, pv *corev1.PersistentVolume) (*cloud.VolumeTopology, error) {
	csi := pv.Spec.CSI
	if csi == nil || csi.Driver != CSIDriver {
		return nil, fmt.Errorf("persistent volume %q is not a %s volume: %w", pv.Name, CSIDriver, cloud.ErrNotImplemented)
	}
	vol, err := p.c.GetVolume(ctx, csi.VolumeHandle)
	if err != nil {
		return nil, sdkErr(err, "volume "+csi.VolumeHandle)
	}
	return &cloud.VolumeTopology{Zones: vol.Zones, Region: vol.Region}, nil
}

type credentials Provider

func (p *credentials) RegistryCredential(ctx context.Context, image string) (*cloud.RegistryCredential, error) {
	cred, err := p.c.Credential(ctx, image)
	if err != nil {
		return nil, sdkErr(err, "credential for "+image)
	}
	return &cloud.RegistryCredential{Registry: cred.Registry, Username: cred.Username, Password: cred.Password, ExpiresAt: cred.ExpiresAt}, nil
}
