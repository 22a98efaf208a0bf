package devenv

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/providers/local"
)

// demoVolume is the demo's regional local-cloud volume and its PV.
const demoVolume = "demo-data"

// showVolumeTopology creates (or finds) a regional volume in the local
// cloud and a PersistentVolume for it without any topology, and shows the
// labels and node affinity the CCM's persistent-volume-label webhook gave
// it. A PV from an earlier run is checked with a dry-run create, so the
// webhook answers in every run.
func showVolumeTopology(ctx context.Context, p *progress, env *environment) error {
	if env.webhookURL == "" {
		p.step("demo", "no PersistentVolume topology shown: the CCM %s serves no persistent-volume-label webhook", env.ccmBinary)
		return nil
	}
	vol, err := ensureDemoVolume(ctx, env)
	if err != nil {
		return err
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: demoVolume},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(fmt.Sprintf("%dGi", vol.SizeGiB))},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: local.CSIDriver, VolumeHandle: vol.ID},
			},
		},
	}
	pvs := env.client.CoreV1().PersistentVolumes()
	opts := metav1.CreateOptions{}
	if _, err := pvs.Get(ctx, demoVolume, metav1.GetOptions{}); err == nil {
		pv.Name = demoVolume + "-check"
		opts.DryRun = []string{metav1.DryRunAll}
	}
	// The apiserver picks up a new webhook configuration within a second.
	var got *corev1.PersistentVolume
	deadline := time.Now().Add(demoWait)
	for {
		got, err = pvs.Create(ctx, pv, opts)
		if apierrors.IsAlreadyExists(err) {
			got, err = pvs.Get(ctx, pv.Name, metav1.GetOptions{})
		}
		if err == nil && got.Labels[corev1.LabelTopologyZone] != "" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("PV %s was not given its topology by the persistent-volume-label webhook (last: %v)", pv.Name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	var reqs []string
	for _, r := range got.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions {
		reqs = append(reqs, fmt.Sprintf("%s In [%s]", r.Key, strings.Join(r.Values, " ")))
	}
	p.step("demo", "PersistentVolume %s (local-cloud volume %s in %s) got %s=%s, %s=%s and node affinity %s from the ccm's persistent-volume-label webhook",
		demoVolume, vol.ID, strings.Join(vol.Zones, ", "), corev1.LabelTopologyZone, got.Labels[corev1.LabelTopologyZone],
		corev1.LabelTopologyRegion, got.Labels[corev1.LabelTopologyRegion], strings.Join(reqs, ", "))
	return nil
}

// ensureDemoVolume finds the demo's volume in the cloud, or creates it in
// the first two zones of the cloud's region.
func ensureDemoVolume(ctx context.Context, env *environment) (*api.Volume, error) {
	vols, err := env.cloudClient.ListVolumes(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range vols {
		if v.Name == demoVolume {
			return &v, nil
		}
	}
	regions, err := env.cloudClient.Regions(ctx)
	if err != nil {
		return nil, err
	}
	zones := regions[0].Zones
	return env.cloudClient.CreateVolume(ctx, api.CreateVolumeRequest{Name: demoVolume, Zones: zones[:min(2, len(zones))], SizeGiB: 1})
}
