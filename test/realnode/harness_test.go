package realnode_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/localcloud/machine"
	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/realnode"
	"github.com/portside-io/portside/internal/testbin"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/testskip"
	"github.com/portside-io/portside/internal/tools"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// cluster is a control plane with what real nodes need (bootstrap tokens,
// the Node authorizer, KCM's CSR signer and approver), served to a VPC of
// the test's own at its gateway.
type cluster struct {
	cp       *controlplane.ControlPlane
	client   kubernetes.Interface
	nw       *vpc.Network
	ranges   vpctest.Ranges
	apiURL   string // as the nodes reach it
	token    string
	bins     realnode.Binaries
	portside string
	dir      string
}

func needBinaries(t *testing.T) realnode.Binaries {
	t.Helper()
	dir, err := tools.BinDir()
	if err != nil {
		testskip.Unavailable(t, "%v", err)
	}
	var b realnode.Binaries
	for _, x := range []struct {
		dst  *string
		name string
	}{{&b.Kubelet, "kubelet"}, {&b.KubeProxy, "kube-proxy"}, {&b.Containerd, "containerd"}, {&b.Shim, "containerd-shim-runc-v2"}} {
		p, err := tools.Path(dir, x.name)
		if err != nil {
			testskip.Unavailable(t, "%v", err)
		}
		*x.dst = p
	}
	b.CNIDir = filepath.Join(dir, "cni")
	if _, err := os.Stat(filepath.Join(b.CNIDir, "ptp")); err != nil {
		testskip.Unavailable(t, "CNI plugins not found in %s: run make tools", b.CNIDir)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		testskip.Unavailable(t, "runc not found: run hack/ensure-node-packages.sh")
	}
	b.Runc = runc
	if _, err := exec.LookPath("nft"); err != nil {
		testskip.Unavailable(t, "nft not found (kube-proxy's nftables mode): run hack/ensure-node-packages.sh")
	}
	return b
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	vpctest.RequireRoot(t)
	bins := needBinaries(t)
	nw, r := vpctest.Start(t)
	cp := testenv.StartControlPlane(t, controlplane.Options{
		ExtraServingHosts: []string{nw.Gateway().String()},
		RealNodes:         true,
	})
	u, err := url.Parse(cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := nw.Expose(context.Background(), 0, u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Close() })
	client := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	startKCM(t, cp)
	token, err := realnode.EnsureBootstrap(context.Background(), client, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{cp: cp, client: client, nw: nw, ranges: r, apiURL: "https://" + ex.Addr().String(), token: token,
		bins: bins, portside: testbin.Portside(t), dir: t.TempDir()}
}

// startKCM runs kube-controller-manager with its default controllers, the
// CSR signer (cluster CA) and the approver of kubelet client certificates
// among them, as `up` runs it.
func startKCM(t *testing.T, cp *controlplane.ControlPlane) {
	dir, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := tools.Path(dir, tools.KubeControllerManager)
	if err != nil {
		testskip.Unavailable(t, "%v", err)
	}
	log := filepath.Join(t.TempDir(), "kcm.log")
	p, err := proc.Start("kube-controller-manager", bin, []string{
		"--kubeconfig=" + cp.KubeconfigPath, "--secure-port=0", "--leader-elect=false",
		"--controllers=*", "--cluster-signing-cert-file=" + cp.CAFile(),
		"--cluster-signing-key-file=" + cp.CAKeyFile(), "--cloud-provider=external",
		"--service-account-private-key-file=" + filepath.Join(cp.Dir(), "pki", "sa.key"), "--root-ca-file=" + cp.CAFile(), "--use-service-account-credentials=true",
	}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("kube-controller-manager log tail:\n%s", p.LogTail(20))
		}
	})
}

// node is one real machine booted into the cluster.
type node struct {
	name string
	addr netip.Addr
	m    *machine.Machine
	dir  string
}

// bootNode creates machine i and boots kubelet, containerd and kube-proxy
// on it; the machine is deleted when the test ends.
func (c *cluster) bootNode(t *testing.T, i int) *node {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	name := fmt.Sprintf("rn-%s-%d", id[:4], i)
	addr := c.ranges.Subnet.Addr()
	for k := 0; k < 10+i; k++ {
		addr = addr.Next()
	}
	dir := filepath.Join(c.dir, name)
	m, err := machine.Create(context.Background(), c.nw, machine.Config{Name: name, ID: id, Index: i, Addr: addr, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{"kubelet.log", "containerd.log", "kube-proxy.log"} {
				t.Logf("%s %s tail:\n%s", name, f, proc.TailFile(filepath.Join(dir, "log", f), 25))
			}
			t.Logf("%s init log tail:\n%s", name, proc.TailFile(filepath.Join(c.dir, name+".log"), 25))
		}
		if err := m.Delete(context.Background(), 20*time.Second); err != nil {
			t.Errorf("deleting machine %s: %v", name, err)
		}
	})
	serving, err := c.cp.IssueServingCert("kubelet-"+name, addr.String(), name)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := c.cp.IssueClientCert("kube-proxy", "system:kube-proxy")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"ca.crt": c.cp.CAPEM(), "kubelet.crt": serving.CertPEM, "kubelet.key": serving.KeyPEM,
		"kube-proxy.crt": kp.CertPEM, "kube-proxy.key": kp.KeyPEM}
	for f, data := range files {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kpConfig := filepath.Join(dir, "kube-proxy.kubeconfig")
	if err := os.WriteFile(kpConfig, []byte(realnode.KubeProxyKubeconfig(c.apiURL, filepath.Join(dir, "ca.crt"),
		filepath.Join(dir, "kube-proxy.crt"), filepath.Join(dir, "kube-proxy.key"))), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &realnode.BootConfig{
		NodeName: name, NodeIP: addr.String(), Dir: dir, JoinCgroups: m.SystemProcsFiles(), CgroupRoot: m.CgroupPath(),
		Bin: c.bins, APIServer: c.apiURL, CAFile: filepath.Join(dir, "ca.crt"), BootstrapToken: c.token,
		ServingCertFile: filepath.Join(dir, "kubelet.crt"), ServingKeyFile: filepath.Join(dir, "kubelet.key"),
		KubeProxyKubeconfig: kpConfig, ClusterCIDR: c.ranges.Pods.String(), ClusterDomain: "cluster.local",
		SandboxImage: nodeimages.PauseImage, Verbosity: 2,
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	boot := filepath.Join(dir, "boot.json")
	if err := cfg.Write(boot); err != nil {
		t.Fatal(err)
	}
	if err := m.Start([]string{c.portside, "machine-boot", "--config", boot}, nil, filepath.Join(c.dir, name+".log")); err != nil {
		t.Fatal(err)
	}
	return &node{name: name, addr: addr, m: m, dir: dir}
}

// waitNode waits until the Node is registered and cond holds.
func (c *cluster) waitNode(t *testing.T, n *node, timeout time.Duration, what string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	var got *corev1.Node
	testenv.Eventually(t, timeout, n.name+": "+what, func() (bool, string) {
		if !n.m.Running() {
			t.Fatalf("%s: the machine's init exited: %v\n%s", n.name, n.m.Init(), proc.TailFile(filepath.Join(c.dir, n.name+".log"), 20))
		}
		nd, err := c.client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = nd
		return cond(nd), fmt.Sprintf("conditions %v", nd.Status.Conditions)
	})
	return got
}
