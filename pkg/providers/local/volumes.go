package local

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
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

// RegistryCredential asks the cloud to sign a credential; in
// service-account-token mode the cloud verifies the token against the
// cluster's issuer and binds the credential to the service account.
func (p *credentials) RegistryCredential(ctx context.Context, req cloud.RegistryCredentialRequest) (*cloud.RegistryCredential, error) {
	cred, err := p.c.Credential(ctx, api.CredentialRequest{
		Image: req.Image, ServiceAccountToken: req.ServiceAccountToken, ServiceAccountAnnotations: req.ServiceAccountAnnotations,
	})
	if err != nil {
		return nil, sdkErr(err, "credential for "+req.Image)
	}
	return &cloud.RegistryCredential{
		Registry: cred.Registry, Username: cred.Username, Password: cred.Password,
		ExpiresAt: cred.ExpiresAt, Scope: cloud.ScopeRegistry,
	}, nil
}
