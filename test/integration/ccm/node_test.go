package ccm

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodecontroller "github.com/portside-io/portside/internal/controllers/node"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

const uninit = "node.cloudprovider.kubernetes.io/uninitialized"

func initialized(n *corev1.Node) bool { return !tainted(n, uninit) }

func addressesOf(n *corev1.Node, typ corev1.NodeAddressType) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == typ {
			out = append(out, a.Address)
		}
	}
	return out
}

func TestNodesAreInitialized(t *testing.T) {
	f := env(t)
	no := false
	v4 := f.instance(t, api.CreateInstanceRequest{Name: "init-v4", Zone: "zone-a", Type: "medium", Labels: map[string]string{"example.com/rack": "r1"}})
	v6 := f.instance(t, api.CreateInstanceRequest{Name: "init-v6", Zone: "zone-b", IPv4: &no, IPv6: true})
	ds := f.instance(t, api.CreateInstanceRequest{Name: "init-ds", Zone: "zone-c", IPv6: true})
	f.register(t,
		nodesim.NodeSpec{Name: "init-v4"},
		nodesim.NodeSpec{Name: "init-v6"},
		nodesim.NodeSpec{Name: "init-ds", NodeIPs: []string{ds.Addresses[0].Address, ds.Addresses[1].Address}},
	)

	n := f.waitNode(t, "init-v4", 20*time.Second, "initialization", initialized)
	if n.Spec.ProviderID != "local://"+v4.ID {
		t.Errorf("providerID = %q", n.Spec.ProviderID)
	}
	for k, want := range map[string]string{
		"topology.kubernetes.io/zone": "zone-a", "failure-domain.beta.kubernetes.io/zone": "zone-a",
		"topology.kubernetes.io/region": "region-1", "failure-domain.beta.kubernetes.io/region": "region-1",
		"node.kubernetes.io/instance-type": "medium", "beta.kubernetes.io/instance-type": "medium",
		"example.com/rack": "r1", "kubernetes.io/hostname": "init-v4",
	} {
		if n.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], want)
		}
	}
	if got := addressesOf(n, corev1.NodeInternalIP); len(got) != 1 || got[0] != v4.Addresses[0].Address {
		t.Errorf("InternalIP = %v", got)
	}
	if got := addressesOf(n, corev1.NodeHostName); len(got) != 1 {
		t.Errorf("Hostname = %v", got)
	}

	n = f.waitNode(t, "init-v6", 20*time.Second, "initialization", initialized)
	if got := addressesOf(n, corev1.NodeInternalIP); len(got) != 1 || !strings.Contains(got[0], ":") || got[0] != v6.Addresses[0].Address {
		t.Errorf("IPv6-only InternalIP = %v", got)
	}
	n = f.waitNode(t, "init-ds", 20*time.Second, "initialization", initialized)
	if got := addressesOf(n, corev1.NodeInternalIP); len(got) != 2 || got[0] != ds.Addresses[0].Address || got[1] != ds.Addresses[1].Address {
		t.Errorf("dual-stack InternalIPs = %v, want the provided %s,%s first", got, ds.Addresses[0].Address, ds.Addresses[1].Address)
	}
	if ev := f.events(t, "init-ds"); len(ev) != 0 {
		t.Errorf("a successful initialization needs no event, got %v", ev)
	}
}

func TestProvidedNodeIPMismatchKeepsNodeTaintedWithAnEvent(t *testing.T) {
	f := env(t)
	f.instance(t, api.CreateInstanceRequest{Name: "init-mismatch", Zone: "zone-a"})
	f.register(t, nodesim.NodeSpec{Name: "init-mismatch", NodeIPs: []string{"192.0.2.77"}})
	deadline := time.Now().Add(20 * time.Second)
	for {
		ev := f.events(t, "init-mismatch")
		if msg, ok := ev["ProvidedNodeIPNotFound"]; ok {
			if !strings.Contains(msg, "192.0.2.77") || !strings.Contains(msg, "--node-ip") {
				t.Errorf("event message does not say what is wrong and what to do: %q", msg)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ProvidedNodeIPNotFound event; events: %v", ev)
		}
		time.Sleep(100 * time.Millisecond)
	}
	n := f.waitNode(t, "init-mismatch", time.Second, "still tainted", func(n *corev1.Node) bool { return true })
	if initialized(n) || n.Spec.ProviderID != "" {
		t.Fatalf("mismatched node was initialized: %+v", n.Spec)
	}
}

func TestInstanceNotFoundEvent(t *testing.T) {
	f := env(t)
	f.register(t, nodesim.NodeSpec{Name: "init-orphan"})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, ok := f.events(t, "init-orphan")["InstanceNotFound"]; ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no InstanceNotFound event; events: %v", f.events(t, "init-orphan"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestMetricsAreServed(t *testing.T) {
	f := env(t)
	f.instance(t, api.CreateInstanceRequest{Name: "init-metrics", Zone: "zone-a"})
	f.register(t, nodesim.NodeSpec{Name: "init-metrics"})
	f.waitNode(t, "init-metrics", 20*time.Second, "initialization", initialized)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, f.metrics, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Delegated authentication and authorization, as upstream's: no token
	// 401, a token without the RBAC rule 403, a scraper's token 200.
	if code, body := get(""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d %s", code, body)
	}
	if code, body := get("not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a bad token: %d %s", code, body)
	}
	if code, body := get(testenv.ServiceAccountToken(t, "no-metrics")); code != http.StatusForbidden || !strings.Contains(body, "may not get /metrics") {
		t.Errorf("/metrics without RBAC: %d %s", code, body)
	}
	code, body := get(testenv.ServiceAccountToken(t, "metrics-reader", "/metrics"))
	if code != http.StatusOK {
		t.Fatalf("/metrics with a scraper's token: %d %s", code, body)
	}
	for _, want := range []string{`portside_ccm_cloud_node_initializations_total{result="success"}`, "portside_ccm_cloud_node_initialization_seconds_bucket", `portside_ccm_workqueue_adds_total{name="cloud-node-init"}`,
		// Upstream's names, for existing dashboards and alerts.
		"node_controller_cloud_provider_taint_removal_delay_seconds_bucket",
		"node_controller_initial_node_sync_delay_seconds_bucket",
		"# TYPE cloud_node_lifecycle_controller_monitor_nodes_duration_seconds histogram",
		"# TYPE service_controller_loadbalancer_sync_total counter",
		"# TYPE service_controller_nodesync_latency_seconds histogram",
		`cloudprovider_local_api_request_duration_seconds_bucket{request="instance_metadata"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/livez"} {
		r, err := client.Get(strings.TrimSuffix(f.metrics, "/metrics") + path)
		if err != nil || r.StatusCode != 200 {
			t.Errorf("%s: %v %v", path, r, err)
		}
		if r != nil {
			_ = r.Body.Close()
		}
	}
}

// The CCM's caches keep a trimmed Node (no images, nodeInfo, capacity); its
// writes must never erase what it does not cache. A real-size node keeps
// every field the kubelet wrote after it is initialized and its addresses
// synced.
func TestRealisticNodeKeepsWhatTheCacheTrims(t *testing.T) {
	f := env(t)
	inst := f.instance(t, api.CreateInstanceRequest{Name: "init-real", Zone: "zone-a"})
	f.register(t, nodesim.NodeSpec{Name: "init-real", Realistic: true})
	n := f.waitNode(t, "init-real", 20*time.Second, "initialization", initialized)
	if got := addressesOf(n, corev1.NodeInternalIP); len(got) != 1 || got[0] != inst.Addresses[0].Address {
		t.Errorf("InternalIP = %v", got)
	}
	if len(n.Status.Images) != nodesim.RealisticImages || n.Status.NodeInfo.MachineID == "" ||
		n.Status.Capacity.Cpu().IsZero() || len(n.Status.VolumesAttached) != 1 || len(n.Status.Conditions) != 4 {
		t.Errorf("initialization erased status the kubelet wrote: %d images, nodeInfo %+v, capacity %v, %d volumes, %d conditions",
			len(n.Status.Images), n.Status.NodeInfo, n.Status.Capacity, len(n.Status.VolumesAttached), len(n.Status.Conditions))
	}
	for _, c := range n.Status.Conditions {
		if c.Message == "" {
			t.Errorf("condition %s lost its message", c.Type)
		}
	}
	if n.Annotations["csi.volume.kubernetes.io/nodeid"] == "" || n.Labels["node.kubernetes.io/instance-type"] == "" {
		t.Errorf("annotations or labels lost: %v %v", n.Annotations, n.Labels)
	}
}

// The node controller tells a JSON patch refused by its guard (the node
// changed under the decision: retried at once) from other refusals, as the
// real apiserver answers them.
func TestPatchGuardFailedOnRealAPIServer(t *testing.T) {
	f := env(t)
	f.register(t, nodesim.NodeSpec{Name: "guard-node"})
	nodes := f.client.CoreV1().Nodes()
	ctx := context.Background()
	_, err := nodes.Patch(ctx, "guard-node", types.JSONPatchType, []byte(`[{"op":"test","path":"/spec/taints","value":[]}]`), metav1.PatchOptions{})
	if !nodecontroller.PatchGuardFailed(err) {
		t.Errorf("failed test op: PatchGuardFailed(%v) = false", err)
	}
	_, err = nodes.Patch(ctx, "guard-node", types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/labels/bad","value":"not a valid label value!"}]`), metav1.PatchOptions{})
	if err == nil || nodecontroller.PatchGuardFailed(err) {
		t.Errorf("invalid label: err %v, PatchGuardFailed true", err)
	}
}
