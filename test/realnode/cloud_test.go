package realnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/hostsnap"
	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/realnode"
	"github.com/portside-io/portside/internal/testbin"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// TestCloudMachines runs `portside cloud serve --machines=real` and drives
// it only through the cloud's API, as `up` and users do: an instance
// created with user data boots a real node that joins the cluster and
// pulls its images through the cloud registry's mirror of
// registry.k8s.io; the cloud's route carries pod traffic; stop powers the
// machine off (its pod stops answering, kubelet is gone) and start boots
// it again; delete removes the sandbox; stopping the cloud, and a kill -9
// followed by a new start and stop, leave the host as it was found.
func TestCloudMachines(t *testing.T) {
	vpctest.RequireRoot(t)
	bins := needBinaries(t)
	before, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	r := vpctest.Pick()
	gw := r.Subnet.Addr().Next()
	cp := testenv.StartControlPlane(t, controlplane.Options{ExtraServingHosts: []string{gw.String()}, RealNodes: true})
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	startKCM(t, cp)
	apiHost := must(url.Parse(cp.URL)).Host
	dir := t.TempDir()
	cloudDir := filepath.Join(dir, "cloud")
	args := []string{"cloud", "serve", "--data-dir", cloudDir, "--listen", "127.0.0.1:0", "--registry-listen", "127.0.0.1:0",
		"--machines=real", "--node-pool", r.Subnet.String(), "--vpc-uplink", r.Uplink.String(),
		"--vpc-route", r.Pods.String(), "--vpc-cover", r.Block.String(), "--vpc-cover", r.Pods.String(),
		"--vpc-expose", "6443=" + apiHost, "--registry-public-prefix", "pause", "--registry-public-prefix", "e2e-test-images/",
		"--vip-pool", r.VIPs.String(), "--vpc-route", r.VIPs.String(), "--vpc-local", r.VIPs.String(), "-v=2"}
	portside := testbin.Portside(t)
	cloud := startCloudProcess(t, portside, args, cloudDir)
	cc := cloudClient(t, cloudDir)
	imgs, _, err := nodeimages.Cached(must(tools.BinDir()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodeimages.PushServed(context.Background(), cc, imgs); err != nil {
		t.Fatal(err)
	}
	regVPC := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(cloudDir, server.RegistryVPCEndpointFile)))))
	token, err := realnode.EnsureBootstrap(context.Background(), kube, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(dir, "shared")
	_ = os.MkdirAll(shared, 0o700)
	kp, err := cp.IssueClientCert("kube-proxy", "system:kube-proxy")
	if err != nil {
		t.Fatal(err)
	}
	apiURL := "https://" + netip.AddrPortFrom(gw, 6443).String()
	for f, data := range map[string][]byte{"ca.crt": cp.CAPEM(), "kube-proxy.crt": kp.CertPEM, "kube-proxy.key": kp.KeyPEM,
		"kube-proxy.kubeconfig": []byte(realnode.KubeProxyKubeconfig(apiURL, filepath.Join(shared, "ca.crt"),
			filepath.Join(shared, "kube-proxy.crt"), filepath.Join(shared, "kube-proxy.key")))} {
		if err := os.WriteFile(filepath.Join(shared, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	userData := realnode.BootConfig{
		Bin: bins, APIServer: apiURL, CAFile: filepath.Join(shared, "ca.crt"), BootstrapToken: token,
		KubeProxyKubeconfig: filepath.Join(shared, "kube-proxy.kubeconfig"), ClusterCIDR: r.Pods.String(), ClusterDomain: "cluster.local",
		SandboxImage: nodeimages.PauseImage, Mirrors: map[string]string{"registry.k8s.io": "http://" + regVPC},
	}
	ud := string(must(json.Marshal(userData)))
	name := fmt.Sprintf("cm-%d", time.Now().UnixNano()%1e6)
	inst, err := cc.CreateInstance(context.Background(), api.CreateInstanceRequest{Name: name, Zone: "zone-a", UserData: ud})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{name: name, dir: filepath.Join(cloudDir, "machines", inst.ID)}
	n.addr = netip.MustParseAddr(inst.Addresses[0].Address)
	c := &cluster{cp: cp, client: kube, ranges: r, dir: dir}
	waitNodeObj(t, kube, name, 2*time.Minute, "registered", func(*corev1.Node) bool { return true })
	cidr := netip.PrefixFrom(r.Pods.Addr(), 24)
	setPodCIDR(t, c, name, cidr)
	if _, err := cc.CreateRoute(context.Background(), api.Route{Name: name, Cluster: "test", TargetNode: name, DestinationCIDR: cidr.String()}); err != nil {
		t.Fatal(err)
	}
	waitNodeObj(t, kube, name, 2*time.Minute, "Ready", nodeReady)
	// Pulled through the mirror (IfNotPresent: nothing was imported).
	pod := runPod(t, c, "mirror-pulled", name, corev1.PullIfNotPresent)
	url := "http://" + pod.Status.PodIP + ":8080/hostname"
	if got := httpGet(t, url); got != pod.Name {
		t.Errorf("GET %s = %q, want %q", url, got, pod.Name)
	}

	// A load balancer of the cloud on a VIP of its VPC, to the pod's
	// NodePort: answered from the host and from inside a pod (the VIP is
	// the VPC router's, not a loopback address of the host).
	svc, err := kube.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "lb-target"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": pod.Name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
				{Name: "udp", Port: 81, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(8081)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := cc.PutLoadBalancer(context.Background(), "lb-"+name, api.LoadBalancerSpec{Cluster: "test",
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: 80, BackendPort: int(svc.Spec.Ports[0].NodePort)},
			{Protocol: api.ProtocolUDP, Port: 81, BackendPort: int(svc.Spec.Ports[1].NodePort)}},
		Backends: []api.Backend{{Name: name, Address: n.addr.String()}}})
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr(lb.VIPs[0])
	if !r.VIPs.Contains(vip) {
		t.Errorf("VIP %s is not from the VPC's VIP range %s", vip, r.VIPs)
	}
	vipURL := "http://" + vip.String() + "/hostname"
	testenv.Eventually(t, time.Minute, "the VIP answered from the host", func() (bool, string) {
		got, err := tryGet(vipURL)
		return err == nil && got == pod.Name, fmt.Sprintf("%q %v", got, err)
	})
	// No CCM here to approve the kubelet's serving certificate (`up` runs
	// node-serving-csr-approver): the test approves it, for kubectl exec.
	approveServingCSRs(t, kube, name)
	// UDP through the VIP: agnhost netexec answers "hostname" on 8081.
	testenv.Eventually(t, time.Minute, "the VIP's UDP listener answered from the host", func() (bool, string) {
		got, err := udpAsk(netip.AddrPortFrom(vip, 81), "hostname")
		return err == nil && got == pod.Name, fmt.Sprintf("%q %v", got, err)
	})
	testenv.Eventually(t, time.Minute, "the VIP answered from inside the pod", func() (bool, string) {
		err := kubectlAt(cp.KubeconfigPath, "exec", pod.Name, "--", "/agnhost", "connect", "--timeout=2s", vip.String()+":80")
		return err == nil, fmt.Sprint(err)
	})
	if err := cc.DeleteLoadBalancer(context.Background(), "lb-"+name); err != nil {
		t.Fatal(err)
	}

	// Power off: the machine's processes are gone, its pod answers nothing.
	if _, err := cc.StopInstance(context.Background(), inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tryGet(url); err == nil {
		t.Errorf("the pod of a stopped instance answered %s", url)
	}
	if b, err := os.ReadFile(filepath.Join(n.dir, "machine.json")); err != nil || strings.Contains(string(b), `"init"`) {
		t.Errorf("a stopped machine's record still names a running init (%v): %s", err, b)
	}
	// Power on: it boots again, kubelet restarts the pod.
	if _, err := cc.StartInstance(context.Background(), inst.ID); err != nil {
		t.Fatal(err)
	}
	// Its sandbox is new (a machine's boot ends every container), and so
	// may its address be: ask kubelet's report each time.
	testenv.Eventually(t, 2*time.Minute, "the pod answers again after the instance started", func() (bool, string) {
		p, err := kube.CoreV1().Pods("default").Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil || p.Status.PodIP == "" {
			return false, fmt.Sprint(err)
		}
		got, err := tryGet("http://" + p.Status.PodIP + ":8080/hostname")
		return err == nil && got == pod.Name, fmt.Sprintf("%s: %q %v", p.Status.PodIP, got, err)
	})
	// Delete: the sandbox goes.
	if err := cc.DeleteInstance(context.Background(), inst.ID); err != nil {
		t.Fatal(err)
	}
	id := vpc.IDFor(must(filepath.Abs(filepath.Join(cloudDir, "machines"))))
	if _, err := os.Stat(vpc.NetnsPath("ps-" + id + "-" + strings.TrimPrefix(inst.ID, "i-"))); err == nil {
		t.Error("the deleted instance's network namespace is still there")
	}

	// A second instance, then kill -9 of the cloud: its next start cleans up.
	if _, err := cc.CreateInstance(context.Background(), api.CreateInstanceRequest{Name: name + "-b", Zone: "zone-a", UserData: ud}); err != nil {
		t.Fatal(err)
	}
	cloud.Kill()
	cloud = startCloudProcess(t, portside, args, cloudDir)
	waitNodeObj(t, kube, name+"-b", 2*time.Minute, "registered after the cloud's restart", func(*corev1.Node) bool { return true })
	cloud.Stop(60 * time.Second)
	after, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	mine := []string{"ps" + id, r.Subnet.Addr().String()[:strings.LastIndex(r.Subnet.Addr().String(), ".")+1], "/ps-" + id}
	if d := hostsnap.Diff(before.Mentioning(mine...), after.Mentioning(mine...)); d != "" {
		t.Errorf("the host differs after the cloud stopped:\n%s", d)
	}
	if d := hostsnap.Diff(hostsnap.Snapshot{"sysctl": before["sysctl"]}, hostsnap.Snapshot{"sysctl": after["sysctl"]}); d != "" {
		t.Errorf("host sysctls changed:\n%s", d)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func startCloudProcess(t *testing.T, portside string, args []string, dir string) *proc.Process {
	t.Helper()
	_ = os.MkdirAll(dir, 0o755)
	_ = os.Remove(filepath.Join(dir, server.EndpointFile))
	p, err := proc.Start("cloud", portside, args, nil, filepath.Join(dir, "cloud.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(60 * time.Second)
		if t.Failed() {
			t.Logf("cloud log tail:\n%s", p.LogTail(30))
		}
	})
	testenv.Eventually(t, time.Minute, "the cloud serving", func() (bool, string) {
		select {
		case <-p.Done():
			t.Fatalf("the cloud exited: %v\n%s", p.ExitErr(), p.LogTail(20))
		default:
		}
		_, err := os.Stat(filepath.Join(dir, server.EndpointFile))
		return err == nil, fmt.Sprint(err)
	})
	return p
}

func cloudClient(t *testing.T, dir string) *client.Client {
	t.Helper()
	ep := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dir, server.EndpointFile)))))
	tok, err := client.ReadTokenFile(filepath.Join(dir, server.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return client.New(ep, tok)
}

func waitNodeObj(t *testing.T, kube kubernetes.Interface, name string, timeout time.Duration, what string, cond func(*corev1.Node) bool) {
	t.Helper()
	testenv.Eventually(t, timeout, name+": "+what, func() (bool, string) {
		nd, err := kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return cond(nd), fmt.Sprintf("conditions %v", nd.Status.Conditions)
	})
}

// approveServingCSRs approves node's pending kubernetes.io/kubelet-serving
// CSRs, waiting until there is one.
func approveServingCSRs(t *testing.T, kube kubernetes.Interface, node string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, node+"'s kubelet-serving CSR approved", func() (bool, string) {
		list, err := kube.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		approved := 0
		for _, csr := range list.Items {
			if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName || csr.Spec.Username != "system:node:"+node {
				continue
			}
			if len(csr.Status.Conditions) == 0 {
				csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
					Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "TestApproved", Message: "approved by the test"})
				if _, err := kube.CertificatesV1().CertificateSigningRequests().UpdateApproval(context.Background(), csr.Name, &csr, metav1.UpdateOptions{}); err != nil {
					return false, err.Error()
				}
			}
			approved++
		}
		return approved > 0, "no kubelet-serving CSR yet"
	})
}

// udpAsk sends one datagram and returns the answer.
func udpAsk(to netip.AddrPort, msg string) (string, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	return strings.TrimSpace(string(buf[:n])), err
}
