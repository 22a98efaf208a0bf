package node

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// InitPatches are the two JSON patches (RFC 6902) that write an
// initialization: status (the addresses) and the node (labels, providerID,
// taints); a nil patch has nothing to write.
//
// Each is guarded by a test of exactly what the decision was computed from,
// not by resourceVersion: a resourceVersion guard fails whenever anything
// else wrote the node in between, and at a burst of joins the route
// controller's NetworkUnavailable condition nearly always does (0.8
// conflicts a node at 20-50 joins/s, each a retry with another cloud call).
// The addresses patch tests the addresses it replaces, the node patch the
// taints it replaces (which include the uninitialized taint, so a node is
// never initialized twice). Labels and providerID are set per key: nothing
// else of the node is overwritten.
func InitPatches(node *corev1.Node, d *Initialization) (status, main []byte, err error) {
	if d.AddressesChanged {
		addrs := d.Addresses
		if addrs == nil {
			addrs = []corev1.NodeAddress{}
		}
		ops := []jsonPatchOp{{Op: "add", Path: "/status/addresses", Value: addrs}}
		if node.Status.Addresses != nil {
			ops = []jsonPatchOp{{Op: "test", Path: "/status/addresses", Value: node.Status.Addresses},
				{Op: "replace", Path: "/status/addresses", Value: addrs}}
		}
		if status, err = json.Marshal(ops); err != nil {
			return nil, nil, err
		}
	}
	taints := d.Taints
	if taints == nil {
		taints = []corev1.Taint{}
	}
	ops := []jsonPatchOp{{Op: "test", Path: "/spec/taints", Value: node.Spec.Taints}, {Op: "replace", Path: "/spec/taints", Value: taints}}
	if d.ProviderID != "" {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/providerID", Value: d.ProviderID})
	}
	if len(d.Labels) > 0 && node.Labels == nil {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/labels", Value: map[string]string{}})
	}
	for _, k := range sortedKeys(d.Labels) {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/labels/" + escapePointer(k), Value: d.Labels[k]})
	}
	main, err = json.Marshal(ops)
	return status, main, err
}

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// PatchGuardFailed reports whether a JSON patch was refused because one of
// its test operations failed: the node changed under the decision.
// kube-apiserver answers that with a bare 422 Invalid (no kind, name or
// causes: json-patch's message is not passed on), while a patched node that
// fails validation is a 422 naming the Node and the invalid fields.
// test/integration/ccm pins this against the real apiserver.
func PatchGuardFailed(err error) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) || !apierrors.IsInvalid(err) {
		return false
	}
	st := se.Status()
	return st.Details == nil || (st.Details.Kind == "" && st.Details.Name == "" && len(st.Details.Causes) == 0)
}
