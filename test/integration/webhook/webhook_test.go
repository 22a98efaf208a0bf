// Package webhook tests the persistent-volume-label admission webhook with
// the real kube-apiserver calling it over TLS (CA bundle), configured by
// deploy/ccm/webhook.yaml as written, against a local cloud's volumes.
package webhook

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	volumehelpers "k8s.io/cloud-provider/volume/helpers"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/providers/local"
)

func TestMain(m *testing.M) {
	code := testenv.Run(m)
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

const (
	zoneKey   = "topology.kubernetes.io/zone"
	regionKey = "topology.kubernetes.io/region"
)

func labeled(pv *corev1.PersistentVolume, err error) bool {
	return err == nil && pv.Labels[zoneKey] != ""
}

func createVolume(t *testing.T, c *localcloudtest.Cloud, name string, zones ...string) string {
	t.Helper()
	v, err := c.Client.CreateVolume(context.Background(), api.CreateVolumeRequest{Name: name, Zones: zones, SizeGiB: 1})
	if err != nil {
		t.Fatal(err)
	}
	return v.ID
}

// upstreamTopology is what the in-tree PersistentVolumeLabel plugin wrote
// for a cloud volume in zones (sorted) of region: the zone label joined
// with "__", and one node selector term requiring zone In zones and region
// In [region].
func upstreamTopology(region string, zones ...string) (map[string]string, *corev1.VolumeNodeAffinity) {
	return map[string]string{zoneKey: strings.Join(zones, "__"), regionKey: region},
		&corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: zoneKey, Operator: corev1.NodeSelectorOpIn, Values: zones},
				{Key: regionKey, Operator: corev1.NodeSelectorOpIn, Values: []string{region}},
			},
		}}}}
}

func node(zone string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-" + zone, Labels: map[string]string{zoneKey: zone, regionKey: "region-1"}}}
}

// TestPVGetsTopologyFromTheCloud: a PV of a local-cloud volume is stored
// with the zone and region labels and the node affinity upstream's plugin
// produced; the scheduler's inputs (the VolumeZone plugin's zone set, the
// VolumeBinding plugin's node affinity) select exactly the volume's zones.
func TestPVGetsTopologyFromTheCloud(t *testing.T) {
	ctx := context.Background()
	cs, warned := clientWithWarnings(t)
	c := localcloudtest.Start(t)
	url, _ := serveInProcess(t, c, "deny")
	single := createVolume(t, c, "data-1", "zone-b")
	regional := createVolume(t, c, "data-2", "zone-c", "zone-a")
	mwc := sampleConfig(t, url, "Fail")
	install(t, cs, mwc, single, labeled)

	for _, tc := range []struct {
		name, volume string
		zones        []string
	}{
		{"single-zone", single, []string{"zone-b"}},
		{"regional", regional, []string{"zone-a", "zone-c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pv, err := cs.CoreV1().PersistentVolumes().Create(ctx, cloudPV(mwc, tc.name, tc.volume), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
			})
			stored, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wantLabels, wantAffinity := upstreamTopology("region-1", tc.zones...)
			for k, v := range wantLabels {
				if stored.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, stored.Labels[k], v)
				}
			}
			got, _ := json.Marshal(stored.Spec.NodeAffinity)
			want, _ := json.Marshal(wantAffinity)
			if string(got) != string(want) {
				t.Errorf("node affinity\n got %s\nwant %s", got, want)
			}
			// VolumeZone reads the label as a zone set.
			set, err := volumehelpers.LabelZonesToSet(stored.Labels[zoneKey])
			if err != nil || !set.Equal(sets.NewString(tc.zones...)) {
				t.Errorf("zone label %q parses to %v (%v)", stored.Labels[zoneKey], set, err)
			}
			// VolumeBinding matches nodes against the affinity.
			sel, err := nodeaffinity.NewNodeSelector(stored.Spec.NodeAffinity.Required)
			if err != nil {
				t.Fatal(err)
			}
			for _, z := range []string{"zone-a", "zone-b", "zone-c"} {
				if got, want := sel.Match(node(z)), sets.NewString(tc.zones...).Has(z); got != want {
					t.Errorf("a node in %s matches the PV's affinity: %v, want %v", z, got, want)
				}
			}
		})
	}

	// Left alone: a provisioner's PV that already has its topology is not
	// even sent (matchConditions); a PV of another driver is not sent either.
	done := cloudPV(mwc, "prelabeled", regional)
	done.Annotations = map[string]string{"pv.kubernetes.io/provisioned-by": local.CSIDriver}
	done.Labels[zoneKey], done.Labels[regionKey] = "zone-x", "region-x"
	done.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}}}}
	other := cloudPV(mwc, "nfs", single)
	other.Spec.CSI = nil
	other.Spec.NFS = &corev1.NFSVolumeSource{Server: "nfs.example.com", Path: "/x"}
	for _, pv := range []*corev1.PersistentVolume{done, other} {
		stored, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		gotAff, _ := json.Marshal(stored.Spec.NodeAffinity)
		wantAff, _ := json.Marshal(pv.Spec.NodeAffinity)
		if stored.Labels[zoneKey] != pv.Labels[zoneKey] || string(gotAff) != string(wantAff) {
			t.Errorf("%s changed: labels %v, affinity %s", pv.Name, stored.Labels, gotAff)
		}
	}

	// A PV written by hand (no provisioned-by annotation) with the wrong
	// zone and region and an affinity of its own: as upstream, its labels
	// are not trusted, the cloud's replace them, and the user is told.
	warned.take()
	forged := cloudPV(mwc, "forged", single)
	forged.Labels[zoneKey], forged.Labels[regionKey] = "zone-x", "region-x"
	forged.Spec.NodeAffinity = done.Spec.NodeAffinity.DeepCopy()
	stored, err := cs.CoreV1().PersistentVolumes().Create(ctx, forged, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if stored.Labels[zoneKey] != "zone-b" || stored.Labels[regionKey] != "region-1" {
		t.Errorf("hand-labelled PV stored with %s=%q %s=%q, want the cloud's zone-b, region-1", zoneKey, stored.Labels[zoneKey], regionKey, stored.Labels[regionKey])
	}
	w := strings.Join(warned.take(), "\n")
	for _, want := range []string{`label topology.kubernetes.io/zone="zone-x" replaced with the cloud's "zone-b"`, `topology.kubernetes.io/region="region-x" replaced with the cloud's "region-1"`} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q, want one saying %q", w, want)
		}
	}

	// A volume the cloud does not know: admitted unchanged, with a warning.
	warned.take()
	unknown, err := cs.CoreV1().PersistentVolumes().Create(ctx, cloudPV(mwc, "unknown", "vol-does-not-exist"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil || unknown.Labels[zoneKey] != "" || unknown.Spec.NodeAffinity != nil {
		t.Fatalf("unknown volume: %v %+v", err, unknown)
	}
	if w := strings.Join(warned.take(), "\n"); !strings.Contains(w, "vol-does-not-exist") {
		t.Errorf("no warning naming the unknown volume, got %q", w)
	}
}
