package nodeipam

import (
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// NeedsAllocation reports whether node should get pod CIDRs now: it has
// none and is not being deleted. A node being deleted (held by a finalizer)
// would hold a subnet it never uses, freed again once it is gone.
func NeedsAllocation(node *corev1.Node) bool {
	return len(node.Spec.PodCIDRs) == 0 && node.Spec.PodCIDR == "" && node.DeletionTimestamp == nil
}

// WriteSurelyFailed reports whether a failed write of a node's pod CIDRs
// surely did not land, so its CIDRs may be freed: the apiserver refused
// it (the node is gone, the patch invalid, forbidden, malformed). After a
// timeout, a dropped connection or a conflict it may have landed, and
// freeing could hand the CIDRs out twice; kept, they are retried for this
// node (allocate returns them again).
func WriteSurelyFailed(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)
}
