package manager

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// annotationLastApplied is kubectl's copy of the whole applied object: often
// the biggest annotation a Service has, and read by no controller here.
const annotationLastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// trimForCache keeps in the informer caches only what the controllers (and
// the providers they call) read. At thousands of nodes a real Node is 10-20
// KB, most of it status.images, nodeInfo and the per-resource capacity no
// controller here looks at; managedFields are as big again. A Node keeps its
// metadata (labels, annotations, taints are read), spec, addresses and
// conditions; a Service everything but managedFields and kubectl's
// last-applied copy.
//
// Safe because no controller writes a cached object back whole where a
// dropped field would be lost: Nodes are written by patches or by an Update
// of the main resource (which ignores status, and keeps managedFields that a
// request leaves empty); Services only by patches.
func trimForCache(obj any) (any, error) {
	if acc, err := meta.Accessor(obj); err == nil && acc.GetManagedFields() != nil {
		acc.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *corev1.Node:
		trimNodeStatus(&o.Status)
	case *corev1.Service:
		delete(o.Annotations, annotationLastApplied)
	}
	return obj, nil
}

// trimNodeStatus keeps addresses and conditions (without their messages,
// which change with every heartbeat on some kubelets).
func trimNodeStatus(st *corev1.NodeStatus) {
	*st = corev1.NodeStatus{Addresses: st.Addresses, Conditions: st.Conditions, Phase: st.Phase}
	for i := range st.Conditions {
		st.Conditions[i].Message = ""
	}
}
