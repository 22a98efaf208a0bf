package cloud

import (
	"errors"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/diff"
	cloudprovider "k8s.io/cloud-provider"
	nodecontroller "k8s.io/cloud-provider/controllers/node"
	nodelifecycle "k8s.io/cloud-provider/controllers/nodelifecycle"
	"k8s.io/cloud-provider/fake"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/cloud/upstream"
)

func inventory() machines {
	return machines{
		"node-a": {id: "i-a", instanceType: "m5.large", zone: "zone-a", region: "region-1",
			addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.10"}, {Type: corev1.NodeInternalIP, Address: "fd00::10"},
				{Type: corev1.NodeExternalIP, Address: "203.0.113.10"}, {Type: corev1.NodeHostName, Address: "node-a"}},
			labels: map[string]string{"example.com/hw": "gen3", "kubernetes.io/not-yours": "x"}},
		"node-b": {id: "i-b", instanceType: "c5.xlarge", zone: "zone-b", region: "region-1", shutdown: true,
			addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.11"}, {Type: corev1.NodeHostName, Address: "node-b"}}},
	}
}

// providerCase makes a fresh provider and reads back what it was asked.
// Each test runs two of them: one under upstream's controller, one through
// the adapter; both must be asked the same.
type providerCase struct {
	name  string
	cloud func() (cloudprovider.Interface, func() []call)
}

func recorded(r interface{ Calls() []call }) func() []call { return r.Calls }

// fakeCalls reads k8s.io/cloud-provider/fake's call log (method names
// only). Its lock is unexported: read it only once the controller is done
// (after the API write that shows it, or after a synchronous pass).
func fakeCalls(f *fake.Cloud) func() []call {
	return func() []call {
		out := make([]call, len(f.Calls))
		for i, c := range f.Calls {
			out[i] = call{Method: c}
		}
		return out
	}
}

func fakeCloud(v2 bool) func() (cloudprovider.Interface, func() []call) {
	return func() (cloudprovider.Interface, func() []call) {
		f := &fake.Cloud{EnableInstancesV2: v2, ExistsByProviderID: true,
			ProviderID:       map[types.NodeName]string{"node-a": "fake://i-a"},
			ExtID:            map[types.NodeName]string{"node-a": "i-a"},
			InstanceTypes:    map[types.NodeName]string{"fake://i-a": "m.large"},
			Addresses:        inventory()["node-a"].addresses,
			Zone:             cloudprovider.Zone{FailureDomain: "zone-f", Region: "region-f"},
			AdditionalLabels: map[string]string{"example.com/fake": "yes"}}
		return f, fakeCalls(f)
	}
}

func v2Provider() (cloudprovider.Interface, func() []call) {
	c := newV2Cloud(inventory())
	return c, recorded(c)
}

func legacyProvider(mod func(*legacyCloud)) func() (cloudprovider.Interface, func() []call) {
	return func() (cloudprovider.Interface, func() []call) {
		c := &legacyCloud{machines: inventory()}
		if mod != nil {
			mod(c)
		}
		return c, recorded(c)
	}
}

// sameCalls checks that the adapter asked the provider exactly what
// upstream's controller asked it first (upstream may go on with periodic
// calls of its own afterwards).
func sameCalls(t *testing.T, upstreamCalls, adapterCalls []call) {
	t.Helper()
	if len(upstreamCalls) < len(adapterCalls) || !apiequality.Semantic.DeepEqual(upstreamCalls[:len(adapterCalls)], adapterCalls) {
		t.Fatalf("the provider was asked differently (-upstream +adapter):\n%s", diff.Diff(upstreamCalls, adapterCalls))
	}
}

// TestUpstreamParityNodeInit initializes the same Node twice: by upstream's
// CloudNodeController (syncNode → getInstanceMetadata →
// getNodeModifiersFromCloudProvider → updateNodeAddress) and through the
// adapter as Portside's node controller asks (InstanceMetadata(NodeFrom(node)),
// internal/controllers/node initNode). The provider must be asked the same
// (methods, providerIDs, names, the full Node), and the metadata must be
// what upstream wrote on the Node.
func TestUpstreamParityNodeInit(t *testing.T) {
	for _, tc := range []struct {
		providerCase
		providerID string
		warnings   []error
	}{
		{providerCase{"fake InstancesV2", fakeCloud(true)}, "fake://i-a", nil},
		{providerCase{"fake Instances+Zones", fakeCloud(false)}, "", nil},
		{providerCase{"InstancesV2 by name", v2Provider}, "", nil},
		{providerCase{"InstancesV2 by providerID", v2Provider}, "v2://i-a", nil},
		{providerCase{"Instances+Zones by name", legacyProvider(nil)}, "", nil},
		{providerCase{"Instances+Zones by providerID", legacyProvider(nil)}, "legacy://i-a", nil},
		{providerCase{"Instances+Zones without InstanceID", legacyProvider(func(c *legacyCloud) { c.byNameOnly = true })}, "", []error{cloud.ErrNoProviderID}},
		{providerCase{"Instances without Zones", legacyProvider(func(c *legacyCloud) { c.noZones = true })}, "", []error{cloud.ErrNoZone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, clusterNode("node-a", tc.providerID, true))
			orig := c.node(t, "node-a")

			viaAdapter, adapterCalls := tc.cloud()
			inst, ok := upstream.FromUpstream(viaAdapter, upstream.WithNodes(c.factory.Core().V1().Nodes().Lister())).Instances()
			if !ok {
				t.Fatal("no instances")
			}
			md, err := inst.InstanceMetadata(c.ctx, cloud.NodeFrom(orig))
			if err != nil {
				t.Fatal(err)
			}
			checkWarnings(t, md.Warnings, tc.warnings)

			viaUpstream, upstreamCalls := tc.cloud()
			nc, err := nodecontroller.NewCloudNodeController(c.factory.Core().V1().Nodes(), c.client, viaUpstream, time.Hour, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			go nc.RunWithContext(c.ctx, c.metrics)
			var up *corev1.Node
			eventually(t, "upstream to initialize the node", func() bool {
				up, err = c.client.CoreV1().Nodes().Get(c.ctx, "node-a", metav1.GetOptions{})
				return err == nil && !hasUninitializedTaint(up) && len(up.Status.Addresses) == len(md.Addresses)
			})
			sameCalls(t, upstreamCalls(), adapterCalls())
			checkInitialized(t, orig, up, md)
		})
	}
}

func checkWarnings(t *testing.T, got, want []error) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("warnings = %v, want %v", got, want)
	}
	for i := range want {
		if !errors.Is(got[i], want[i]) {
			t.Fatalf("warning %d = %v, want %v", i, got[i], want[i])
		}
	}
}

// k8sNamespace is upstream's filter of AdditionalLabels
// (getNodeModifiersFromCloudProvider).
var k8sNamespace = regexp.MustCompile(`(^|\.)(kubernetes|k8s)\.io/`)

// checkInitialized compares the Node upstream initialized with md, field by
// field as getNodeModifiersFromCloudProvider and updateNodeAddress apply it.
func checkInitialized(t *testing.T, orig, up *corev1.Node, md *cloud.InstanceMetadata) {
	t.Helper()
	wantPID := orig.Spec.ProviderID
	if wantPID == "" {
		wantPID = md.ProviderID
	}
	if up.Spec.ProviderID != wantPID {
		t.Errorf("providerID: upstream %q, adapter %q", up.Spec.ProviderID, wantPID)
	}
	for label, v := range map[string]string{
		corev1.LabelInstanceTypeStable: md.InstanceType, corev1.LabelInstanceType: md.InstanceType,
		corev1.LabelTopologyZone: md.Zone, corev1.LabelFailureDomainBetaZone: md.Zone,
		corev1.LabelTopologyRegion: md.Region, corev1.LabelFailureDomainBetaRegion: md.Region,
	} {
		if got, ok := up.Labels[label]; got != v || ok != (v != "") {
			t.Errorf("label %s: upstream %q (set %v), adapter %q", label, got, ok, v)
		}
	}
	for k, v := range md.AdditionalLabels {
		if got := up.Labels[k]; !k8sNamespace.MatchString(k) && got != v {
			t.Errorf("additional label %s: upstream %q, adapter %q", k, got, v)
		}
	}
	if !apiequality.Semantic.DeepEqual(up.Status.Addresses, md.Addresses) {
		t.Errorf("addresses: upstream %v, adapter %v", up.Status.Addresses, md.Addresses)
	}
}

// TestUpstreamParityNodeLifecycle checks a NotReady Node the way upstream's
// CloudNodeLifecycleController.MonitorNodes does (ensureNodeExistsByProviderID,
// then shutdownInCloudProvider) and through the adapter as Portside's
// lifecycle controller asks (InstanceExists, then InstanceShutdown). Same
// questions, same answers: a gone instance deletes the Node, a stopped one
// taints it, a provider that cannot tell is an error (no action).
func TestUpstreamParityNodeLifecycle(t *testing.T) {
	for _, tc := range []struct {
		providerCase
		node, providerID string
		exists, shutdown bool
		err              bool
	}{
		{providerCase: providerCase{"fake Instances", fakeCloud(false)}, node: "node-a", providerID: "fake://i-a", exists: true},
		{providerCase: providerCase{"InstancesV2 running", v2Provider}, node: "node-a", providerID: "v2://i-a", exists: true},
		{providerCase: providerCase{"InstancesV2 stopped", v2Provider}, node: "node-b", exists: true, shutdown: true},
		{providerCase: providerCase{"InstancesV2 gone", v2Provider}, node: "node-gone", providerID: "v2://i-gone"},
		{providerCase: providerCase{"Instances stopped by name", legacyProvider(nil)}, node: "node-b", exists: true, shutdown: true},
		{providerCase: providerCase{"Instances gone by name", legacyProvider(nil)}, node: "node-gone"},
		{providerCase: providerCase{"Instances gone by providerID", legacyProvider(nil)}, node: "node-gone", providerID: "legacy://i-gone"},
		{providerCase: providerCase{"Instances without InstanceID", legacyProvider(func(c *legacyCloud) { c.byNameOnly = true })}, node: "node-a", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := clusterNode(tc.node, tc.providerID, false)
			n.Spec.Taints = nil
			c := newCluster(t, n)
			orig := c.node(t, tc.node)

			viaAdapter, adapterCalls := tc.cloud()
			inst, _ := upstream.FromUpstream(viaAdapter, upstream.WithNodes(c.factory.Core().V1().Nodes().Lister())).Instances()
			exists, err := inst.InstanceExists(c.ctx, cloud.NodeFrom(orig))
			shutdown := false
			if err == nil && exists {
				if shutdown, err = inst.InstanceShutdown(c.ctx, cloud.NodeFrom(orig)); cloud.IsNotImplemented(err) {
					err = nil
				}
			}
			if exists != tc.exists || shutdown != tc.shutdown || (err != nil) != tc.err {
				t.Fatalf("adapter: exists %v shutdown %v err %v", exists, shutdown, err)
			}

			viaUpstream, upstreamCalls := tc.cloud()
			lc, err := nodelifecycle.NewCloudNodeLifecycleController(c.factory.Core().V1().Nodes(), c.client, viaUpstream, time.Hour, 1)
			if err != nil {
				t.Fatal(err)
			}
			if tc.exists || tc.err {
				// One pass, synchronously: nothing to delete, so MonitorNodes
				// needs no event recorder (Run sets it up).
				lc.MonitorNodes(c.ctx)
			} else {
				go lc.Run(c.ctx, c.metrics)
			}
			eventually(t, "upstream to act", func() bool {
				up, err := c.client.CoreV1().Nodes().Get(c.ctx, tc.node, metav1.GetOptions{})
				switch {
				case !tc.exists && !tc.err:
					return apierrors.IsNotFound(err)
				case tc.shutdown:
					return err == nil && len(up.Spec.Taints) == 1 && up.Spec.Taints[0].Key == nodelifecycle.ShutdownTaint.Key
				}
				return err == nil && len(up.Spec.Taints) == 0
			})
			sameCalls(t, upstreamCalls(), adapterCalls())
		})
	}
}
