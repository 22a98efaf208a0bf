package realnode_test

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/testbin"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// joinCommand is the command `up` prints for adding a real node.
var joinCommand = regexp.MustCompile(`to add a node: portside (cloud instances create NAME .*)`)

// joinNode adds a real node to up's cluster as its output says an operator
// does: `portside cloud instances create` with the user data `up` wrote.
// The returned func waits until the node is Ready, initialized by the CCM
// (provider ID, no uninitialized taint), a backend of every cloud load
// balancer, and served by a network proxy agent when agents is true; it
// returns how long that took from the create.
func joinNode(t *testing.T, upOut, name string, kube kubernetes.Interface, cloud *client.Client, agents bool) func() time.Duration {
	t.Helper()
	m := joinCommand.FindStringSubmatch(upOut)
	if m == nil {
		t.Fatalf("up printed no command to add a node:\n%s", upOut)
	}
	args := strings.Fields(strings.Replace(m[1], "NAME", name, 1))
	began := time.Now()
	out, err := exec.Command(testbin.Portside(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("portside %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("portside %s: %s", strings.Join(args, " "), strings.TrimSpace(string(out)))
	return func() time.Duration {
		t.Helper()
		ctx := context.Background()
		var addr string
		testenv.Eventually(t, 4*time.Minute, "node "+name+" joined: Ready and initialized by the CCM", func() (bool, string) {
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			uninit := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "node.cloudprovider.kubernetes.io/uninitialized" })
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					addr = a.Address
				}
			}
			return nodeReady(n) && !uninit && n.Spec.ProviderID != "" && addr != "",
				fmt.Sprintf("ready %v, uninitialized %v, providerID %q, addresses %v", nodeReady(n), uninit, n.Spec.ProviderID, n.Status.Addresses)
		})
		testenv.Eventually(t, 2*time.Minute, "node "+name+" a backend of every cloud load balancer", func() (bool, string) {
			lbs, err := cloud.ListLoadBalancers(ctx, "")
			if err != nil {
				return false, err.Error()
			}
			var missing []string
			for _, lb := range lbs {
				if !slices.ContainsFunc(lb.Backends, func(b api.Backend) bool { return b.Address == addr }) {
					missing = append(missing, lb.Name)
				}
			}
			return len(lbs) > 0 && len(missing) == 0, fmt.Sprintf("%d load balancers, without %s: %v", len(lbs), addr, missing)
		})
		if agents {
			testenv.Eventually(t, 2*time.Minute, "a ready network proxy agent on "+name, func() (bool, string) {
				for _, p := range podsOf(t, kube, agentSelector) {
					if p.Spec.NodeName == name && podIsReady(&p) {
						// kube-apiserver reaches the new kubelet through it.
						_, err := kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptrTo[int64](1)}).DoRaw(ctx)
						return err == nil, fmt.Sprintf("the log of %s: %v", p.Name, err)
					}
				}
				return false, "none"
			})
		}
		return time.Since(began)
	}
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil
		}
	}
	return false
}
