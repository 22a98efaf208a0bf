package nodeipam

import corev1 "k8s.io/api/core/v1"

// NeedsAllocation reports whether node should get pod CIDRs now: it has
// none and is not being deleted. A node being deleted (held by a finalizer)
// would hold a subnet it never uses, freed again once it is gone.
func NeedsAllocation(node *corev1.Node) bool {
	return len(node.Spec.PodCIDRs) == 0 && node.Spec.PodCIDR == "" && node.DeletionTimestamp == nil
}
