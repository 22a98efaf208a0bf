package pvlabel

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	cloudvolume "k8s.io/cloud-provider/volume"
	volumehelpers "k8s.io/cloud-provider/volume/helpers"

	"github.com/portside-io/portside/pkg/cloud"
)

// Decision is what the webhook writes to a PV being created.
type Decision struct {
	// Labels is the PV's full label map after the change (the PV's other
	// labels included); nil when the labels do not change.
	Labels map[string]string
	// NodeAffinity is the PV's full node affinity after the change; nil
	// when it does not change.
	NodeAffinity *corev1.VolumeNodeAffinity
	// Warnings are for the user who creates the PV.
	Warnings []string
}

// Changed reports whether the decision patches the PV.
func (d Decision) Changed() bool { return d.Labels != nil || d.NodeAffinity != nil }

// topologyKeys is a pair of label keys: GA or beta.
type topologyKeys struct{ zone, region string }

var (
	gaKeys   = topologyKeys{corev1.LabelTopologyZone, corev1.LabelTopologyRegion}
	betaKeys = topologyKeys{corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion}
)

// AnnProvisionedBy is the annotation a provisioner (the PV controller's
// in-tree provisioning, or CSI's external-provisioner) sets on the PVs it
// creates: storagehelpers.AnnDynamicallyProvisioned upstream.
const AnnProvisionedBy = "pv.kubernetes.io/provisioned-by"

// Decide computes the topology labels and node affinity of pv from the
// cloud's topology of its volume. topo nil means the cloud could not tell.
//
// As upstream's PersistentVolumeLabel plugin (and the cloud providers'
// webhooks that replaced it), a PV's own zone and region pair (GA, else
// beta) is trusted only when the PV was dynamically provisioned: the
// provisioner asked the cloud where it created the volume. Anyone else may
// write any label, and a PV labelled with the wrong zone schedules its pods
// where the volume cannot attach, so for other PVs the cloud's topology
// wins (GA keys) and every label it replaces is named in a warning.
// Upstream replaced silently; a trusted PV's labels are still compared with
// the cloud's (a warning, labels kept), which upstream did not do.
func Decide(pv *corev1.PersistentVolume, topo *cloud.VolumeTopology) Decision {
	var d Decision
	keys, zone, region, kept := trustedTopology(pv)
	want := map[string]string{}
	if kept {
		want[keys.zone], want[keys.region] = zone, region
		if topo != nil {
			if w := disagreement(pv.Name, keys, zone, region, topo, "labels kept"); w != "" {
				d.Warnings = append(d.Warnings, w)
			}
		}
	} else if topo != nil {
		keys = gaKeys
		if zones := normalizeZones(topo.Zones); len(zones) > 0 {
			want[keys.zone] = strings.Join(zones, cloudvolume.LabelMultiZoneDelimiter)
		}
		if r := strings.TrimSpace(topo.Region); r != "" {
			want[keys.region] = r
		}
		// The cloud answers with GA keys only; beta labels that say
		// otherwise are left (as upstream), but the scheduler's
		// VolumeZone plugin reads them too, so say so.
		if bk, bz, br, ok := existingTopology(pv.Labels, betaKeys); ok && len(want) > 0 {
			if w := disagreement(pv.Name, bk, bz, br, topo, "beta labels kept: remove or correct them, the scheduler reads them too"); w != "" {
				d.Warnings = append(d.Warnings, w)
			}
		}
	}
	if len(want) == 0 {
		return d
	}

	for _, k := range []string{keys.zone, keys.region} {
		v, ok := want[k]
		if !ok || pv.Labels[k] == v {
			continue
		}
		old, had := pv.Labels[k]
		if had && k == keys.zone && validZones(old) && slices.Equal(labelZones(old), labelZones(v)) {
			continue // the same zones in another order: nothing to replace
		}
		if d.Labels == nil {
			d.Labels = maps.Clone(pv.Labels)
			if d.Labels == nil {
				d.Labels = map[string]string{}
			}
		}
		if had {
			d.Warnings = append(d.Warnings, fmt.Sprintf("persistent volume %s: label %s=%q replaced with the cloud's %q%s", pv.Name, k, old, v, untrustedNote(pv)))
		}
		d.Labels[k] = v
	}
	d.NodeAffinity = withRequirements(pv.Spec.NodeAffinity, requirements(keys, want))
	return d
}

// Provisioned reports whether pv carries the annotation of a dynamic
// provisioner; its value is not checked, as upstream (HasAnnotation).
func Provisioned(pv *corev1.PersistentVolume) bool {
	_, ok := pv.Annotations[AnnProvisionedBy]
	return ok
}

// trustedTopology is the PV's own zone and region pair when Decide uses it
// as it is: a dynamically provisioned PV's usable pair.
func trustedTopology(pv *corev1.PersistentVolume) (keys topologyKeys, zone, region string, ok bool) {
	if !Provisioned(pv) {
		return topologyKeys{}, "", "", false
	}
	return existingTopology(pv.Labels, gaKeys, betaKeys)
}

// untrustedNote says why a full pair of labels was not used.
func untrustedNote(pv *corev1.PersistentVolume) string {
	if _, _, _, ok := existingTopology(pv.Labels, gaKeys, betaKeys); ok && !Provisioned(pv) {
		return " (the PV has no " + AnnProvisionedBy + " annotation: only a provisioner's topology labels are trusted)"
	}
	return ""
}

// existingTopology returns the first of pairs (GA, then beta, as upstream
// looked them up) whose zone and region labels are both set and usable.
func existingTopology(labels map[string]string, pairs ...topologyKeys) (keys topologyKeys, zone, region string, ok bool) {
	for _, k := range pairs {
		zone, zok := labels[k.zone]
		region, rok := labels[k.region]
		if zok && rok && strings.TrimSpace(region) != "" && validZones(zone) {
			return k, zone, region, true
		}
	}
	return topologyKeys{}, "", "", false
}

// validZones reports whether a zone label value parses, so that the node
// affinity built from it is valid (upstream refused the PV otherwise).
func validZones(v string) bool {
	_, err := volumehelpers.LabelZonesToSet(v)
	return err == nil
}

// labelZones are the zones of a zone label value, sorted (upstream sorted
// them "for better testability"; it also makes requirements stable).
func labelZones(v string) []string {
	set, err := volumehelpers.LabelZonesToSet(v)
	if err != nil {
		return nil
	}
	return set.List()
}

// normalizeZones sorts and dedupes the cloud's zones, dropping empty ones
// that would make the label unparseable. Upstream's ZonesSetToLabelValue
// joins in map order; sorting keeps the label stable.
func normalizeZones(zones []string) []string {
	out := make([]string, 0, len(zones))
	for _, z := range zones {
		if z = strings.TrimSpace(z); z != "" {
			out = append(out, z)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// disagreement is a warning when kept labels differ from what the cloud
// knows; an unknown part of the cloud's topology is not compared.
func disagreement(name string, keys topologyKeys, zone, region string, topo *cloud.VolumeTopology, outcome string) string {
	cloudZones := normalizeZones(topo.Zones)
	cloudRegion := strings.TrimSpace(topo.Region)
	zonesDiffer := len(cloudZones) > 0 && !slices.Equal(labelZones(zone), cloudZones)
	regionDiffers := cloudRegion != "" && strings.TrimSpace(region) != cloudRegion
	if !zonesDiffer && !regionDiffers {
		return ""
	}
	return fmt.Sprintf("persistent volume %s: labels %s=%q %s=%q disagree with the cloud's zone %q region %q: %s",
		name, keys.zone, zone, keys.region, region,
		strings.Join(cloudZones, cloudvolume.LabelMultiZoneDelimiter), cloudRegion, outcome)
}

// requirements are the node selector requirements of the topology labels:
// zone first, then region. Upstream ranged over a map, so its order was
// random; a fixed order makes the patch deterministic.
func requirements(keys topologyKeys, labels map[string]string) []corev1.NodeSelectorRequirement {
	var reqs []corev1.NodeSelectorRequirement
	if z, ok := labels[keys.zone]; ok {
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: keys.zone, Operator: corev1.NodeSelectorOpIn, Values: labelZones(z)})
	}
	if r, ok := labels[keys.region]; ok {
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: keys.region, Operator: corev1.NodeSelectorOpIn, Values: []string{r}})
	}
	return reqs
}

// withRequirements returns aff with reqs added as upstream's plugin did:
// appended to every required term, one empty term allocated when there is
// none; nil (unchanged) when a term already uses one of the keys, which
// upstream took as the user's own placement.
func withRequirements(aff *corev1.VolumeNodeAffinity, reqs []corev1.NodeSelectorRequirement) *corev1.VolumeNodeAffinity {
	if len(reqs) == 0 {
		return nil
	}
	out := aff.DeepCopy()
	if out == nil {
		out = &corev1.VolumeNodeAffinity{}
	}
	if out.Required == nil {
		out.Required = &corev1.NodeSelector{}
	}
	terms := out.Required.NodeSelectorTerms
	if len(terms) == 0 {
		terms = make([]corev1.NodeSelectorTerm, 1)
	}
	if keysUsed(reqs, terms) {
		return nil
	}
	for i := range terms {
		for _, r := range reqs {
			terms[i].MatchExpressions = append(terms[i].MatchExpressions, *r.DeepCopy())
		}
	}
	out.Required.NodeSelectorTerms = terms
	return out
}

// keysUsed is upstream's nodeSelectorRequirementKeysExistInNodeSelectorTerms:
// whether any term's match expressions (not fields) use a key of reqs.
func keysUsed(reqs []corev1.NodeSelectorRequirement, terms []corev1.NodeSelectorTerm) bool {
	for _, t := range terms {
		for _, e := range t.MatchExpressions {
			if slices.ContainsFunc(reqs, func(r corev1.NodeSelectorRequirement) bool { return r.Key == e.Key }) {
				return true
			}
		}
	}
	return false
}
