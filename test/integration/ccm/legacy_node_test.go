package ccm

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/portside-io/portside/internal/controllers/node"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/cloud/upstream"
)

// legacyCloud is an upstream provider of the old kind: Instances only (no
// InstancesV2, no Zones), InstanceID not implemented, everything answered
// by node name. It knows only the nodes the test gave addresses; any other
// node gets a plain error (not InstanceNotFound), so that it leaves no
// event on the other tests' nodes.
type legacyCloud struct {
	mu    sync.Mutex
	addrs map[string][]corev1.NodeAddress
	// lookups counts the calls about each node: proof that syncs ran.
	lookups map[string]int
}

const legacyProvider = "legacy-test"

var legacy = &legacyCloud{addrs: map[string][]corev1.NodeAddress{}, lookups: map[string]int{}}

func init() {
	cloud.MustRegister(legacyProvider, func(context.Context, io.Reader) (cloud.Provider, error) {
		return upstream.FromUpstream(legacy), nil
	})
}

func (l *legacyCloud) set(name string, addrs ...corev1.NodeAddress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addrs[name] = addrs
}

func (l *legacyCloud) lookupsOf(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lookups[name]
}

func (l *legacyCloud) lookup(name types.NodeName) ([]corev1.NodeAddress, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lookups[string(name)]++
	a, ok := l.addrs[string(name)]
	if !ok {
		return nil, fmt.Errorf("node %q is not one of the legacy test's", name)
	}
	return slices.Clone(a), nil
}

func (l *legacyCloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (l *legacyCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return nil, false }
func (l *legacyCloud) Instances() (cloudprovider.Instances, bool)                        { return l, true }
func (l *legacyCloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return nil, false }
func (l *legacyCloud) Zones() (cloudprovider.Zones, bool)                                { return nil, false }
func (l *legacyCloud) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }
func (l *legacyCloud) Routes() (cloudprovider.Routes, bool)                              { return nil, false }
func (l *legacyCloud) ProviderName() string                                              { return legacyProvider }
func (l *legacyCloud) HasClusterID() bool                                                { return true }

func (l *legacyCloud) NodeAddresses(_ context.Context, name types.NodeName) ([]corev1.NodeAddress, error) {
	return l.lookup(name)
}
func (l *legacyCloud) NodeAddressesByProviderID(context.Context, string) ([]corev1.NodeAddress, error) {
	return nil, cloudprovider.NotImplemented
}
func (l *legacyCloud) InstanceID(context.Context, types.NodeName) (string, error) {
	return "", cloudprovider.NotImplemented
}
func (l *legacyCloud) InstanceType(_ context.Context, name types.NodeName) (string, error) {
	_, err := l.lookup(name)
	return "legacy-small", err
}
func (l *legacyCloud) InstanceTypeByProviderID(context.Context, string) (string, error) {
	return "", cloudprovider.NotImplemented
}
func (l *legacyCloud) AddSSHKeyToAllInstances(context.Context, string, []byte) error {
	return cloudprovider.NotImplemented
}
func (l *legacyCloud) CurrentNodeName(_ context.Context, hostname string) (types.NodeName, error) {
	return types.NodeName(hostname), nil
}
func (l *legacyCloud) InstanceExistsByProviderID(context.Context, string) (bool, error) {
	return false, cloudprovider.NotImplemented
}
func (l *legacyCloud) InstanceShutdownByProviderID(context.Context, string) (bool, error) {
	return false, cloudprovider.NotImplemented
}

// startLegacyCCM runs a second CCM, on the legacy provider, with only the
// cloud node controller: the package's CCM (local provider) keeps the
// other controllers, and finds no instance for the legacy nodes.
func startLegacyCCM(t *testing.T) {
	t.Helper()
	o := manager.NewOptions()
	o.CloudProvider, o.Kubeconfig = legacyProvider, testenv.Kubeconfig(t)
	o.LeaderElect = false
	o.SecurePort, o.BindAddress = 0, "127.0.0.1"
	o.NodeStatusUpdateFrequency = time.Second
	var only []manager.Controller
	for _, c := range manager.DefaultControllers() {
		if c.Name == node.Name {
			only = append(only, c)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	serving := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := manager.Run(ctx, o, only, func(string) { close(serving) }); err != nil {
			fmt.Fprintln(os.Stderr, "legacy ccm exited:", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-serving:
	case <-done:
		t.Fatal("legacy CCM exited")
	case <-time.After(30 * time.Second):
		t.Fatal("legacy CCM did not start serving")
	}
}

// eventMessages returns the messages and counts of the events with reason
// about a node.
func eventMessages(t *testing.T, f *fixture, name, reason string) map[string]int32 {
	t.Helper()
	list, err := f.client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, e := range list.Items {
		if e.Reason == reason {
			out[e.Message] += max(1, e.Count)
		}
	}
	return out
}

// TestLegacyProviderNodeInitializedAndSyncedByName: a node of an upstream
// provider without InstanceID nor Zones is initialized as upstream does
// (no providerID, no zone labels), says so in one Warning event per
// missing piece, and keeps getting its addresses by node name.
func TestLegacyProviderNodeInitializedAndSyncedByName(t *testing.T) {
	f := env(t)
	const name = "legacy-1"
	legacy.set(name, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.200.0.1"})
	startLegacyCCM(t)
	f.register(t, nodesim.NodeSpec{Name: name})
	t.Cleanup(func() { _ = f.sim.Delete(context.Background(), []string{name}) })

	n := f.waitNode(t, name, 20*time.Second, "initialization", initialized)
	if n.Spec.ProviderID != "" {
		t.Errorf("providerID = %q, want none", n.Spec.ProviderID)
	}
	if n.Labels[corev1.LabelInstanceTypeStable] != "legacy-small" {
		t.Errorf("instance type label = %q", n.Labels[corev1.LabelInstanceTypeStable])
	}
	for _, k := range []string{corev1.LabelTopologyZone, corev1.LabelTopologyRegion} {
		if v, ok := n.Labels[k]; ok {
			t.Errorf("label %s=%q from a provider without zones", k, v)
		}
	}
	if got := addressesOf(n, corev1.NodeInternalIP); !slices.Equal(got, []string{"10.200.0.1"}) {
		t.Errorf("InternalIP = %v", got)
	}

	wantWarnings := []string{"no zone", "no instance ID"}
	warned := func() bool {
		msgs := eventMessages(t, f, name, node.ReasonIncompleteInstanceMetadata)
		for _, want := range wantWarnings {
			if !slices.ContainsFunc(slices.Collect(maps.Keys(msgs)), func(m string) bool { return strings.Contains(m, want) }) {
				return false
			}
		}
		return len(msgs) == len(wantWarnings)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !warned() {
		if time.Now().After(deadline) {
			t.Fatalf("want one %s event per warning (%v), got %v", node.ReasonIncompleteInstanceMetadata, wantWarnings,
				eventMessages(t, f, name, node.ReasonIncompleteInstanceMetadata))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The instance's address changes: the periodic sync finds it by name.
	legacy.set(name, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.200.0.2"})
	f.waitNode(t, name, 10*time.Second, "the new address", func(n *corev1.Node) bool {
		return slices.Equal(addressesOf(n, corev1.NodeInternalIP), []string{"10.200.0.2"})
	})
	// Several syncs later (counted at the cloud, not slept for), the
	// warnings were still said once.
	synced := legacy.lookupsOf(name)
	testenv.Eventually(t, 20*time.Second, "three more syncs", func() (bool, string) {
		n := legacy.lookupsOf(name) - synced
		return n >= 3, fmt.Sprintf("%d more lookups", n)
	})
	for msg, count := range eventMessages(t, f, name, node.ReasonIncompleteInstanceMetadata) {
		if count != 1 {
			t.Errorf("warning %q reported %d times, want once (at initialization)", msg, count)
		}
	}
}
