package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/portside-io/portside/pkg/cloud"
)

// recordingInstances answers every lookup with md or err and records the
// nodes it was asked about.
type recordingInstances struct {
	md  *cloud.InstanceMetadata
	err error

	mu    sync.Mutex
	asked []cloud.Node
}

func (r *recordingInstances) InstanceMetadata(_ context.Context, n cloud.Node) (*cloud.InstanceMetadata, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, n)
	return r.md, r.err
}
func (r *recordingInstances) InstanceExists(context.Context, cloud.Node) (bool, error) {
	return true, nil
}
func (r *recordingInstances) InstanceShutdown(context.Context, cloud.Node) (bool, error) {
	return false, nil
}

// testController returns a controller whose lister and client hold node.
func testController(t *testing.T, node *corev1.Node, inst cloud.Instances) (*Controller, *fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	client := fake.NewClientset(node)
	nodes := informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes()
	rec := record.NewFakeRecorder(100)
	c, err := New(Config{Client: client, Nodes: nodes, Recorder: rec, Workers: 1, Instances: inst})
	if err != nil {
		t.Fatal(err)
	}
	if err := nodes.Informer().GetIndexer().Add(node); err != nil {
		t.Fatal(err)
	}
	return c, client, rec
}

// drain returns the events recorded so far, as "Type Reason Message".
func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func getNode(t *testing.T, client *fake.Clientset, name string) *corev1.Node {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var (
	errNoZone       = fmt.Errorf("node %q: %w: the provider has no Zones interface", "n1", cloud.ErrNoZone)
	errNoProviderID = fmt.Errorf("node %q: %w: found by node name, so it gets no providerID", "n1", cloud.ErrNoProviderID)
)

// TestInitializationReportsWarnings: what the provider could not say about
// an instance it found becomes one Warning event per warning, and the node
// is initialized with the rest (no zone labels, or no providerID for a
// legacy provider without InstanceID).
func TestInitializationReportsWarnings(t *testing.T) {
	cases := []struct {
		name           string
		md             cloud.InstanceMetadata
		wantInit       bool
		wantProviderID string
		wantEvents     []string
	}{{
		name:     "complete metadata: no event",
		md:       cloud.InstanceMetadata{ProviderID: "local://i-1", Zone: "zone-a", Region: "region-1", Addresses: cloudAddrs[:1]},
		wantInit: true, wantProviderID: "local://i-1",
	}, {
		name:     "no zone: initialized without zone labels, one event",
		md:       cloud.InstanceMetadata{ProviderID: "local://i-1", Addresses: cloudAddrs[:1], Warnings: []error{errNoZone}},
		wantInit: true, wantProviderID: "local://i-1",
		wantEvents: []string{"Warning IncompleteInstanceMetadata " + errNoZone.Error()},
	}, {
		name:     "legacy provider without InstanceID nor zone: initialized without providerID, one event each",
		md:       cloud.InstanceMetadata{Addresses: cloudAddrs[:1], InstanceType: "small", Warnings: []error{errNoProviderID, errNoZone}},
		wantInit: true,
		wantEvents: []string{
			"Warning IncompleteInstanceMetadata " + errNoProviderID.Error(),
			"Warning IncompleteInstanceMetadata " + errNoZone.Error(),
		},
	}, {
		name:       "no providerID and no warning saying why: stays tainted",
		md:         cloud.InstanceMetadata{Addresses: cloudAddrs[:1], Warnings: []error{errNoZone}},
		wantEvents: []string{"Warning ProviderIDMissing Node stays uninitialized: the cloud provider returned no providerID for this node and the node has none"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, client, rec := testController(t, tainted(nil), &recordingInstances{md: &tc.md})
			err := c.initNode(context.Background(), "n1")
			if (err == nil) != tc.wantInit {
				t.Fatalf("initNode: %v, want initialized=%v", err, tc.wantInit)
			}
			n := getNode(t, client, "n1")
			if HasUninitializedTaint(n) == tc.wantInit || n.Spec.ProviderID != tc.wantProviderID {
				t.Errorf("tainted=%v providerID=%q, want initialized=%v providerID=%q",
					HasUninitializedTaint(n), n.Spec.ProviderID, tc.wantInit, tc.wantProviderID)
			}
			if tc.wantInit && tc.md.Zone == "" {
				for _, k := range []string{corev1.LabelTopologyZone, labelZoneBeta, corev1.LabelTopologyRegion, labelRegionBeta} {
					if v, ok := n.Labels[k]; ok {
						t.Errorf("label %s=%q without a zone from the cloud", k, v)
					}
				}
			}
			if got := drain(rec); !slices.Equal(got, tc.wantEvents) {
				t.Errorf("events:\n got %q\nwant %q", got, tc.wantEvents)
			}
		})
	}
}

// TestSyncNodeWithoutProviderID: the periodic address sync goes on for an
// initialized node without providerID (a legacy provider finds it by name,
// as upstream's UpdateNodeStatus asks it to), never repeats the warnings
// of initialization, and leaves the node alone when the cloud has no such
// instance or gives no addresses.
func TestSyncNodeWithoutProviderID(t *testing.T) {
	have := []corev1.NodeAddress{addr(corev1.NodeHostName, "n1")}
	cases := []struct {
		name string
		md   *cloud.InstanceMetadata
		err  error
		want []corev1.NodeAddress
	}{{
		name: "addresses by node name",
		md:   &cloud.InstanceMetadata{Addresses: cloudAddrs[:1], Warnings: []error{errNoProviderID, errNoZone}},
		want: []corev1.NodeAddress{cloudAddrs[0], addr(corev1.NodeHostName, "n1")},
	}, {
		name: "no such instance: nothing to do",
		err:  fmt.Errorf("instance of node n1: %w", cloud.ErrNotFound),
		want: have,
	}, {
		name: "no addresses from the cloud: kept",
		md:   &cloud.InstanceMetadata{Warnings: []error{errNoProviderID}},
		want: have,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := tainted(nil)
			n.Spec.Taints = nil
			n.Status.Addresses = have
			inst := &recordingInstances{md: tc.md, err: tc.err}
			c, client, rec := testController(t, n, inst)
			if err := c.syncNode(context.Background(), "n1"); err != nil {
				t.Fatalf("syncNode: %v", err)
			}
			if want := []cloud.Node{cloud.NodeFrom(n)}; fmt.Sprint(inst.asked) != fmt.Sprint(want) {
				t.Errorf("cloud asked about %+v, want %+v", inst.asked, want)
			}
			if got := getNode(t, client, "n1").Status.Addresses; !slices.Equal(got, tc.want) {
				t.Errorf("addresses = %v, want %v", got, tc.want)
			}
			if ev := drain(rec); len(ev) != 0 {
				t.Errorf("the periodic sync must not repeat initialization's warnings: %q", ev)
			}
		})
	}
}

// The message of a warning event is the warning's text, as is.
func TestWarningEventMessageIsTheWarning(t *testing.T) {
	w := fmt.Errorf("100%% odd: %w", cloud.ErrNoZone)
	c, _, rec := testController(t, tainted(nil), &recordingInstances{md: &cloud.InstanceMetadata{ProviderID: "local://i-1", Warnings: []error{w}}})
	if err := c.initNode(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	if got := drain(rec); len(got) != 1 || !strings.HasSuffix(got[0], " "+w.Error()) {
		t.Errorf("events = %q, want the warning's text %q", got, w.Error())
	}
}

// addressOnly is a provider that can look up addresses alone.
type addressOnly struct {
	recordingInstances
	addrs     []corev1.NodeAddress
	addressed int
}

func (a *addressOnly) InstanceAddresses(_ context.Context, n cloud.Node) ([]corev1.NodeAddress, error) {
	a.addressed++
	return a.addrs, nil
}

// TestSyncNodeAsksForAddressesOnly: with cloud.InstanceAddresser, the
// periodic sync makes that one call, not a whole-metadata lookup.
func TestSyncNodeAsksForAddressesOnly(t *testing.T) {
	n := tainted(nil)
	n.Spec.Taints = nil
	n.Spec.ProviderID = "local://i-1"
	inst := &addressOnly{addrs: cloudAddrs[:1]}
	c, client, _ := testController(t, n, inst)
	if err := c.syncNode(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	if inst.addressed != 1 || len(inst.asked) != 0 {
		t.Fatalf("InstanceAddresses calls %d, InstanceMetadata calls %d; want 1 and 0", inst.addressed, len(inst.asked))
	}
	if got := getNode(t, client, "n1").Status.Addresses; len(got) == 0 || got[0] != cloudAddrs[0] {
		t.Errorf("addresses = %v", got)
	}
}
