package pvlabel

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

const (
	gaZone, gaRegion     = corev1.LabelTopologyZone, corev1.LabelTopologyRegion
	betaZone, betaRegion = corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion
)

func in(key string, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
}

func term(reqs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: reqs}
}

func affinity(terms ...corev1.NodeSelectorTerm) *corev1.VolumeNodeAffinity {
	return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: terms}}
}

func testPV(labels map[string]string, aff *corev1.VolumeNodeAffinity) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1", Labels: labels},
		Spec:       corev1.PersistentVolumeSpec{NodeAffinity: aff},
	}
}

func topology(region string, zones ...string) *cloud.VolumeTopology {
	return &cloud.VolumeTopology{Zones: zones, Region: region}
}

func TestDecide(t *testing.T) {
	hostname := in(corev1.LabelHostname, "node-1")
	cases := []struct {
		name        string
		provisioned bool // the PV has the provisioned-by annotation
		labels      map[string]string
		aff         *corev1.VolumeNodeAffinity
		topo        *cloud.VolumeTopology
		wantLabels  map[string]string
		wantAff     *corev1.VolumeNodeAffinity
		wantWarn    string // substring of the only warning; "" for none
	}{
		{
			name: "single zone", topo: topology("r1", "zone-a"),
			wantLabels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
		},
		{
			name: "multi-zone: sorted label and values", topo: topology("r1", "zone-b", "zone-a"),
			wantLabels: map[string]string{gaZone: "zone-a__zone-b", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a", "zone-b"), in(gaRegion, "r1"))),
		},
		{
			name: "cloud zones with duplicates and blanks", topo: topology("r1", " zone-b", "", "zone-a", "zone-b"),
			wantLabels: map[string]string{gaZone: "zone-a__zone-b", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a", "zone-b"), in(gaRegion, "r1"))),
		},
		{
			name: "region only", topo: topology("r1"),
			wantLabels: map[string]string{gaRegion: "r1"},
			wantAff:    affinity(term(in(gaRegion, "r1"))),
		},
		{
			name: "zone only", topo: topology("", "zone-a"),
			wantLabels: map[string]string{gaZone: "zone-a"},
			wantAff:    affinity(term(in(gaZone, "zone-a"))),
		},
		{name: "empty topology: unchanged", topo: topology("")},
		{name: "cloud could not tell, no labels: unchanged", topo: nil},
		{
			name: "unrelated labels kept", labels: map[string]string{"app": "db"}, topo: topology("r1", "zone-a"),
			wantLabels: map[string]string{"app": "db", gaZone: "zone-a", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
		},
		{
			name: "labels match, no affinity: affinity added", provisioned: true, labels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			topo:    topology("r1", "zone-a"),
			wantAff: affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
		},
		{
			name: "labels match, affinity there: unchanged", provisioned: true, labels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			aff: affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))), topo: topology("r1", "zone-a"),
		},
		{
			name: "multi-zone labels in another order match", provisioned: true, labels: map[string]string{gaZone: "zone-b__zone-a", gaRegion: "r1"},
			topo:    topology("r1", "zone-a", "zone-b"),
			wantAff: affinity(term(in(gaZone, "zone-a", "zone-b"), in(gaRegion, "r1"))),
		},
		{
			name: "labels disagree: kept, warned", provisioned: true, labels: map[string]string{gaZone: "zone-x", gaRegion: "r1"},
			topo:     topology("r1", "zone-a"),
			wantAff:  affinity(term(in(gaZone, "zone-x"), in(gaRegion, "r1"))),
			wantWarn: `disagree with the cloud's zone "zone-a" region "r1": labels kept`,
		},
		{
			name: "region disagrees: kept, warned", provisioned: true, labels: map[string]string{gaZone: "zone-a", gaRegion: "r2"},
			topo:     topology("r1", "zone-a"),
			wantAff:  affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r2"))),
			wantWarn: "disagree",
		},
		{
			name: "labels kept, the cloud tells only the region: zones not compared", provisioned: true, labels: map[string]string{gaZone: "zone-x", gaRegion: "r1"},
			topo:    topology("r1"),
			wantAff: affinity(term(in(gaZone, "zone-x"), in(gaRegion, "r1"))),
		},
		{
			name: "labels kept, cloud could not tell", provisioned: true, labels: map[string]string{gaZone: "zone-x", gaRegion: "r1"},
			topo:    nil,
			wantAff: affinity(term(in(gaZone, "zone-x"), in(gaRegion, "r1"))),
		},
		// Upstream trusts a PV's labels only when it was dynamically
		// provisioned; on other PVs the cloud's topology wins.
		{
			name: "not provisioned, labels disagree: the cloud's replace them, warned", labels: map[string]string{gaZone: "zone-x", gaRegion: "r1"},
			topo:       topology("r1", "zone-a"),
			wantLabels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
			wantWarn:   `label topology.kubernetes.io/zone="zone-x" replaced with the cloud's "zone-a" (the PV has no pv.kubernetes.io/provisioned-by annotation`,
		},
		{
			name: "not provisioned, region disagrees: replaced, warned", labels: map[string]string{gaZone: "zone-a", gaRegion: "r2"},
			topo:       topology("r1", "zone-a"),
			wantLabels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
			wantWarn:   `label topology.kubernetes.io/region="r2" replaced with the cloud's "r1"`,
		},
		{
			name: "not provisioned, labels agree: affinity added, no warning", labels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			topo:    topology("r1", "zone-a"),
			wantAff: affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
		},
		{
			name: "not provisioned, the same zones in another order: kept", labels: map[string]string{gaZone: "zone-b__zone-a", gaRegion: "r1"},
			topo:    topology("r1", "zone-a", "zone-b"),
			wantAff: affinity(term(in(gaZone, "zone-a", "zone-b"), in(gaRegion, "r1"))),
		},
		{
			name: "not provisioned, cloud tells only the region: the zone label stays, affinity on the region (as upstream)", labels: map[string]string{gaZone: "zone-x", gaRegion: "r2"},
			topo:       topology("r1"),
			wantLabels: map[string]string{gaZone: "zone-x", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaRegion, "r1"))),
			wantWarn:   `label topology.kubernetes.io/region="r2" replaced`,
		},
		{
			name: "not provisioned, cloud could not tell: labels not used", labels: map[string]string{gaZone: "zone-x", gaRegion: "r1"},
			topo: nil,
		},
		{
			name: "not provisioned, empty topology: unchanged (as upstream: no labels from the cloud)", labels: map[string]string{gaZone: "zone-x", gaRegion: "r1"},
			topo: topology(""),
		},
		{
			name: "not provisioned, affinity already on the zone key: labels replaced, affinity left", labels: map[string]string{gaZone: "zone-x", gaRegion: "r1"},
			aff:        affinity(term(in(gaZone, "zone-x"))),
			topo:       topology("r1", "zone-a"),
			wantLabels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			wantWarn:   "replaced",
		},
		{
			name: "not provisioned, beta labels: the cloud's GA labels added, beta kept", labels: map[string]string{betaZone: "zone-a", betaRegion: "r1"},
			topo:       topology("r1", "zone-a"),
			wantLabels: map[string]string{betaZone: "zone-a", betaRegion: "r1", gaZone: "zone-a", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
		},
		{
			name: "not provisioned, beta labels disagree: GA labels added, warned about the beta ones", labels: map[string]string{betaZone: "zone-x", betaRegion: "r1"},
			topo:       topology("r1", "zone-a"),
			wantLabels: map[string]string{betaZone: "zone-x", betaRegion: "r1", gaZone: "zone-a", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
			wantWarn:   "beta labels kept: remove or correct them",
		},
		{
			name: "provisioned with an empty annotation value: trusted (upstream checks the key)", provisioned: true, labels: map[string]string{gaZone: "zone-x", gaRegion: "r1"},
			topo:     topology("r1", "zone-a"),
			wantAff:  affinity(term(in(gaZone, "zone-x"), in(gaRegion, "r1"))),
			wantWarn: "labels kept",
		},
		{
			name: "provisioned, only a partial pair: the cloud's labels", provisioned: true, labels: map[string]string{gaZone: "zone-x"},
			topo:       topology("r1", "zone-a"),
			wantLabels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
			wantWarn:   `replaced with the cloud's "zone-a"`,
		},
		{
			name: "beta labels kept: affinity on beta keys", provisioned: true, labels: map[string]string{betaZone: "zone-a", betaRegion: "r1"},
			topo:    topology("r1", "zone-a"),
			wantAff: affinity(term(in(betaZone, "zone-a"), in(betaRegion, "r1"))),
		},
		{
			name: "GA zone and beta region are no pair: the cloud's GA labels", labels: map[string]string{gaZone: "zone-a", betaRegion: "r1"},
			topo:       topology("r1", "zone-a"),
			wantLabels: map[string]string{gaZone: "zone-a", betaRegion: "r1", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
		},
		{
			name: "partial label differing from the cloud: replaced, warned", labels: map[string]string{gaZone: "zone-x"},
			topo:       topology("r1", "zone-a"),
			wantLabels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
			wantWarn:   `label topology.kubernetes.io/zone="zone-x" replaced with the cloud's "zone-a"`,
		},
		{
			name: "malformed zone label: replaced, warned", labels: map[string]string{gaZone: "zone-a____zone-b", gaRegion: "r1"},
			topo:       topology("r1", "zone-a"),
			wantLabels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
			wantWarn:   "replaced",
		},
		{
			name: "affinity with other keys: appended to every term", topo: topology("r1", "zone-a"),
			aff:        affinity(term(hostname), term(in("rack", "r7"))),
			wantLabels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			wantAff: affinity(
				term(hostname, in(gaZone, "zone-a"), in(gaRegion, "r1")),
				term(in("rack", "r7"), in(gaZone, "zone-a"), in(gaRegion, "r1"))),
		},
		{
			name: "affinity already uses the zone key: affinity unchanged", topo: topology("r1", "zone-a"),
			aff:        affinity(term(hostname), term(in(gaZone, "zone-b"))),
			wantLabels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
		},
		{
			name: "affinity uses the zone key in match fields only: appended (upstream checks expressions)", topo: topology("r1", "zone-a"),
			aff:        affinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{in(gaZone, "zone-b")}}),
			wantLabels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			wantAff: affinity(corev1.NodeSelectorTerm{
				MatchFields:      []corev1.NodeSelectorRequirement{in(gaZone, "zone-b")},
				MatchExpressions: []corev1.NodeSelectorRequirement{in(gaZone, "zone-a"), in(gaRegion, "r1")},
			}),
		},
		{
			name: "required with zero terms: one term", topo: topology("r1", "zone-a"),
			aff:        affinity(),
			wantLabels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
		},
		{
			name: "affinity without required: one term", topo: topology("r1", "zone-a"),
			aff:        &corev1.VolumeNodeAffinity{},
			wantLabels: map[string]string{gaZone: "zone-a", gaRegion: "r1"},
			wantAff:    affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1"))),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pv := testPV(tc.labels, tc.aff)
			if tc.provisioned {
				pv.Annotations = map[string]string{AnnProvisionedBy: "volumes.local.portside.io"}
			}
			before := pv.DeepCopy()
			d := Decide(pv, tc.topo)
			if !reflect.DeepEqual(d.Labels, tc.wantLabels) {
				t.Errorf("labels %v, want %v", d.Labels, tc.wantLabels)
			}
			if !reflect.DeepEqual(d.NodeAffinity, tc.wantAff) {
				t.Errorf("node affinity %+v, want %+v", d.NodeAffinity, tc.wantAff)
			}
			switch {
			case tc.wantWarn == "" && len(d.Warnings) != 0:
				t.Errorf("warnings %q, want none", d.Warnings)
			case tc.wantWarn != "" && (len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], tc.wantWarn)):
				t.Errorf("warnings %q, want one with %q", d.Warnings, tc.wantWarn)
			}
			if !reflect.DeepEqual(pv, before) {
				t.Errorf("Decide modified the PV")
			}
			if d.Changed() != (tc.wantLabels != nil || tc.wantAff != nil) {
				t.Errorf("Changed() = %v", d.Changed())
			}
		})
	}
}
