package realnode_test

import (
	"context"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestNodeJoins boots one real machine: kubelet TLS-bootstraps (its client
// certificate signed by kube-controller-manager), registers the Node with
// --cloud-provider=external (tainted uninitialized, its address the
// machine's), and goes Ready once the Node has a pod CIDR (containerd
// writes the CNI config from it).
func TestNodeJoins(t *testing.T) {
	c := startCluster(t)
	n := c.bootNode(t, 1)
	nd := c.waitNode(t, n, 2*time.Minute, "registered", func(*corev1.Node) bool { return true })
	if !slices.ContainsFunc(nd.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == "node.cloudprovider.kubernetes.io/uninitialized" }) {
		t.Errorf("Node %s has no uninitialized taint (kubelet --cloud-provider=external adds it): %v", n.name, nd.Spec.Taints)
	}
	// Node IPAM's part (the CCM's in `up`): a pod CIDR.
	podCIDR := c.ranges.Pods.Addr().String() + "/24"
	patch := []byte(`{"spec":{"podCIDR":"` + podCIDR + `","podCIDRs":["` + podCIDR + `"]}}`)
	if _, err := c.client.CoreV1().Nodes().Patch(context.Background(), n.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitNode(t, n, 2*time.Minute, "Ready", func(nd *corev1.Node) bool {
		for _, cond := range nd.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue
			}
		}
		return false
	})
	csrs, err := c.client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	signed := slices.ContainsFunc(csrs.Items, func(csr certificatesv1.CertificateSigningRequest) bool {
		return csr.Spec.SignerName == "kubernetes.io/kube-apiserver-client-kubelet" && len(csr.Status.Certificate) > 0
	})
	if !signed {
		t.Errorf("no kubelet client CSR was signed: the node did not TLS-bootstrap")
	}
}
