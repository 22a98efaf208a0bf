package migrate

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Node labels and taints.
const (
	betaZone         = "failure-domain.beta.kubernetes.io/zone"
	betaRegion       = "failure-domain.beta.kubernetes.io/region"
	betaInstanceType = "beta.kubernetes.io/instance-type"
	uninitTaint      = "node.cloudprovider.kubernetes.io/uninitialized"
)

// gaLabel maps each beta label to its GA replacement.
var gaLabel = map[string]string{
	betaZone:         corev1.LabelTopologyZone,
	betaRegion:       corev1.LabelTopologyRegion,
	betaInstanceType: corev1.LabelInstanceTypeStable,
}

// NodesWithoutProviderID: the external CCM maps Nodes to instances by
// spec.providerID.
func NodesWithoutProviderID(nodes []corev1.Node) *Finding {
	var names []string
	for _, n := range nodes {
		if n.Spec.ProviderID == "" {
			names = append(names, n.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return &Finding{
		ID: "node-without-provider-id", Area: AreaNodes, Severity: Blocking,
		Title:   "Nodes without spec.providerID: the external CCM cannot map them to instances",
		Objects: names,
		Fix: "Start their kubelets with --cloud-provider=external so that the CCM initializes them (it sets providerID, " +
			"addresses and labels), or set providerID (kubelet --provider-id or KubeletConfiguration.providerID) and re-register the Node.",
	}
}

// NodesWithBetaLabelsOnly: a beta topology or instance-type label without
// its GA counterpart; the node's GA labels are what current schedulers,
// CSI drivers and CCMs read.
func NodesWithBetaLabelsOnly(nodes []corev1.Node) *Finding {
	var objs []string
	for _, n := range nodes {
		var missing []string
		for _, beta := range []string{betaZone, betaRegion, betaInstanceType} {
			if _, ok := n.Labels[beta]; !ok {
				continue
			}
			if _, ok := n.Labels[gaLabel[beta]]; !ok {
				missing = append(missing, gaLabel[beta])
			}
		}
		if len(missing) > 0 {
			objs = append(objs, n.Name+" (lacks "+strings.Join(missing, ", ")+")")
		}
	}
	if len(objs) == 0 {
		return nil
	}
	return &Finding{
		ID: "node-beta-labels-only", Area: AreaNodes, Severity: Warning,
		Title:   "Nodes with beta topology/instance-type labels only, no GA ones",
		Objects: objs,
		Fix: "Label them with the GA keys (topology.kubernetes.io/zone, topology.kubernetes.io/region, node.kubernetes.io/instance-type), " +
			"e.g. kubectl label node <n> topology.kubernetes.io/zone=<beta value>, and move nodeSelectors, affinities, " +
			"topologySpreadConstraints and StorageClass allowedTopologies off the failure-domain.beta.kubernetes.io/* and beta.kubernetes.io/instance-type keys.",
	}
}

// NodesUninitialized: the kubelet registered with --cloud-provider=external
// and waits for a CCM to initialize the Node; nothing schedules there until
// then. Blocking when no CCM holds its lease.
func NodesUninitialized(nodes []corev1.Node, activeCCM string) *Finding {
	var names []string
	for _, n := range nodes {
		if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == uninitTaint }) {
			names = append(names, n.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	f := &Finding{
		ID: "node-uninitialized", Area: AreaNodes, Objects: names,
		Title: "Nodes still tainted " + uninitTaint,
	}
	if activeCCM == "" {
		f.Severity = Blocking
		f.Detail = "No cloud controller manager holds the kube-system/cloud-controller-manager (or " + LeaseMigration + ") lease: nothing will initialize " +
			"these Nodes, and no pod without a toleration schedules on them (a CCM running with --leader-elect=false cannot be seen through the API)."
		f.Fix = "Deploy the external CCM (deploy/ccm/: serviceaccount.yaml, rbac.yaml, deployment.yaml) before, or together with, switching kubelets to --cloud-provider=external."
	} else {
		f.Severity = Warning
		f.Detail = "The CCM " + activeCCM + " is running but has not initialized these Nodes."
		f.Fix = "Read the CCM's logs and the Nodes' events (cloud-node-controller): the instance is usually not found by name or providerID in the cloud."
	}
	return f
}
