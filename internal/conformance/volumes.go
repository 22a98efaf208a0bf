package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
	"github.com/portside-io/portside/pkg/providers/local"
)

// multiZoneDelimiter joins the zones of a regional volume's zone label.
const multiZoneDelimiter = "__"

func pvLabelsTest() Test {
	return Test{
		Name:    "volumes/pv-labels",
		Needs:   []Capability{Volumes},
		Timeout: 2 * time.Minute,
		Run: func(ctx context.Context, t *T) {
			c := t.Env.Cloud
			if c == nil {
				t.Skipf("needs --cloud-data-dir (or --cloud-endpoint) to create a volume")
			}
			regions, err := c.Regions(ctx)
			if err != nil {
				t.Fatalf("list the cloud's regions: %v", err)
			}
			var region api.Region
			for _, r := range regions {
				if len(r.Zones) >= 2 {
					region = r
					break
				}
			}
			if region.Name == "" {
				t.Skipf("no region of the cloud has two zones for a regional volume (%v)", regions)
			}
			name := "conformance-" + t.Env.RunID + "-pv"
			zones := slices.Sorted(slices.Values(region.Zones[:2]))
			vol, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: name, Zones: zones, SizeGiB: 1})
			if err != nil {
				t.Fatalf("create volume %s in %v: %v", name, zones, err)
			}
			t.Cleanup(func(ctx context.Context) {
				if err := c.DeleteVolume(ctx, vol.ID); err != nil && !client.IsNotFound(err) {
					t.Errorf("clean-up: delete volume %s: %v", vol.ID, err)
				}
			})
			t.Logf("volume %s (%s) in %s, zones %v", name, vol.ID, vol.Region, vol.Zones)

			pvs := t.Env.Client.CoreV1().PersistentVolumes()
			pv := &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{RunLabel: t.Env.RunID}},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
						Driver: local.CSIDriver, VolumeHandle: vol.ID,
					}},
				},
			}
			created, err := pvs.Create(ctx, pv, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create persistent volume %s: %v", name, err)
			}
			t.Cleanup(func(ctx context.Context) {
				if err := pvs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("clean-up: delete persistent volume %s: %v", name, err)
				}
			})
			t.Logf("persistent volume %s: labels %s=%q %s=%q", name, corev1.LabelTopologyZone, created.Labels[corev1.LabelTopologyZone],
				corev1.LabelTopologyRegion, created.Labels[corev1.LabelTopologyRegion])
			for _, p := range pvProblems(created, strings.Join(zones, multiZoneDelimiter), vol.Region, zones) {
				t.Errorf("persistent volume %s: %s (is the persistent-volume-label webhook of the CCM registered?)", name, p)
			}
		},
	}
}

// pvProblems compares a created PV's topology labels and node affinity
// with the volume's zones and region.
func pvProblems(pv *corev1.PersistentVolume, zoneLabel, region string, zones []string) []string {
	var ps []string
	for k, want := range map[string]string{corev1.LabelTopologyZone: zoneLabel, corev1.LabelTopologyRegion: region} {
		if got, ok := pv.Labels[k]; !ok || got != want {
			ps = append(ps, fmt.Sprintf("label %s=%s, want %q", k, labelValue(got, ok), want))
		}
	}
	slices.Sort(ps)
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil || len(pv.Spec.NodeAffinity.Required.NodeSelectorTerms) == 0 {
		return append(ps, "no spec.nodeAffinity.required node selector terms")
	}
	want := map[string][]string{corev1.LabelTopologyZone: zones, corev1.LabelTopologyRegion: {region}}
	for i, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, key := range []string{corev1.LabelTopologyZone, corev1.LabelTopologyRegion} {
			found := false
			for _, e := range term.MatchExpressions {
				if e.Key == key && e.Operator == corev1.NodeSelectorOpIn && slices.Equal(slices.Sorted(slices.Values(e.Values)), want[key]) {
					found = true
				}
			}
			if !found {
				ps = append(ps, fmt.Sprintf("node selector term %d has no requirement %s in %v (match expressions: %v)", i, key, want[key], term.MatchExpressions))
			}
		}
	}
	return ps
}
