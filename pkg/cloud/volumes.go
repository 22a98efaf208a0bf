package cloud

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// VolumeTopology is where a volume can be attached.
type VolumeTopology struct {
	// Zones the volume is available in (more than one for regional disks).
	Zones []string
	// Region of the volume.
	Region string
}

// Volumes tells the topology of persistent volumes, for the PV labeling
// admission webhook.
type Volumes interface {
	// VolumeTopology returns the topology of the cloud volume behind pv;
	// ErrNotImplemented when pv is not one of this provider's volumes.
	VolumeTopology(ctx context.Context, pv *corev1.PersistentVolume) (*VolumeTopology, error)
}
