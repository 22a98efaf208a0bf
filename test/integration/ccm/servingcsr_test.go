package ccm

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/portside-io/portside/internal/controllers/servingcsr"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// TestServingCSRApprover runs `portside ccm --controllers=node-serving-csr-approver`
// beside the package's CCM (which initializes the nodes from their
// instances) and has two nodes ask for serving certificates as kubelet
// does, each with a client certificate system:node:<name> of the control
// plane's CA: a node's own addresses are approved; another node's address,
// an address of no instance, and another node's name are denied with
// messages naming what is wrong; a request of another signer is left
// alone; a request made before its Node exists waits for it; and while
// the cloud fails, nothing is approved until it answers.
func TestServingCSRApprover(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	suffix := fmt.Sprintf("%x", time.Now().UnixNano()%0xffffff)
	a, b, late := "csr-a-"+suffix, "csr-b-"+suffix, "csr-late-"+suffix
	instA := f.instance(t, api.CreateInstanceRequest{Name: a, Zone: "zone-a"})
	instB := f.instance(t, api.CreateInstanceRequest{Name: b, Zone: "zone-a"})
	f.instance(t, api.CreateInstanceRequest{Name: late, Zone: "zone-a"})
	f.register(t, nodesim.NodeSpec{Name: a}, nodesim.NodeSpec{Name: b})
	nodeA := f.waitNode(t, a, 20*time.Second, "initialization", initialized)
	f.waitNode(t, b, 20*time.Second, "initialization", initialized)
	ipA, ipB := addressesOf(nodeA, corev1.NodeInternalIP)[0], instB.Addresses[0].Address
	idA, idB := instA.ID, instB.ID

	o := *f.opts
	o.Controllers = []string{servingcsr.Name}
	metrics, stop := startCCM(t, &o)
	t.Cleanup(stop)

	allowNodesToRequest(t, f.client, suffix, a, b, late)
	asA, asB, asLate := nodeClient(t, a), nodeClient(t, b), nodeClient(t, late)

	serving := certificatesv1.KubeletServingSignerName
	good := f.requestCSR(t, asA, "good-"+suffix, serving, a, []string{a}, []string{ipA})
	notOwn := f.requestCSR(t, asA, "bad-ip-"+suffix, serving, a, []string{a}, []string{ipA, "10.255.0.9"})
	impostorIP := f.requestCSR(t, asB, "impostor-ip-"+suffix, serving, b, []string{b}, []string{ipA})
	impostorName := f.requestCSR(t, asB, "impostor-cn-"+suffix, serving, a, []string{a}, []string{ipA})
	impostorDNS := f.requestCSR(t, asB, "impostor-dns-"+suffix, serving, b, []string{a}, []string{ipB})
	other := f.requestCSR(t, asA, "other-signer-"+suffix, "example.com/serving", a, []string{a}, []string{"10.255.0.9"})
	early := f.requestCSR(t, asLate, "early-"+suffix, serving, late, []string{late}, nil)

	cond := f.waitCSR(t, good, certificatesv1.CertificateApproved, servingcsr.ReasonAutoApproved, "instance "+idA)
	t.Logf("approved: %s", cond.Message)
	f.waitCSR(t, notOwn, certificatesv1.CertificateDenied, servingcsr.ReasonAddressNotOfInstance,
		fmt.Sprintf("IP 10.255.0.9 is not an address of instance %s", idA))
	f.waitCSR(t, impostorIP, certificatesv1.CertificateDenied, servingcsr.ReasonAddressNotOfInstance,
		fmt.Sprintf("IP %s is not an address of instance %s", ipA, idB))
	f.waitCSR(t, impostorName, certificatesv1.CertificateDenied, servingcsr.ReasonSubjectNotRequestor,
		fmt.Sprintf("%q is not the requestor's %q", "system:node:"+a, "system:node:"+b))
	f.waitCSR(t, impostorDNS, certificatesv1.CertificateDenied, servingcsr.ReasonAddressNotOfInstance, fmt.Sprintf("DNS name %q", a))
	f.waitEvent(t, good, servingcsr.ReasonServingCertificateApproved)
	f.waitEvent(t, impostorIP, servingcsr.ReasonServingCertificateDenied)

	// What the approver cannot judge, it never touches; the request made
	// before its Node existed is still waiting.
	time.Sleep(time.Second)
	for _, name := range []string{other, early} {
		if got := f.csrConditions(t, name); len(got) != 0 {
			t.Errorf("CSR %s: conditions %+v, want none", name, got)
		}
	}
	f.register(t, nodesim.NodeSpec{Name: late})
	f.waitCSR(t, early, certificatesv1.CertificateApproved, servingcsr.ReasonAutoApproved, "node "+late)

	// While the cloud fails, a good request waits (retried with backoff),
	// and is approved once the cloud answers again.
	t.Cleanup(func() {
		if err := f.cloud.Client.SetFaults(context.Background(), api.Faults{}); err != nil {
			t.Errorf("clear faults: %v", err)
		}
	})
	if err := f.cloud.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "GET", PathPrefix: "/v1/instances", ErrorRate: 1}}}); err != nil {
		t.Fatal(err)
	}
	errorsBefore := scrapeCounter(t, metrics, `portside_ccm_serving_csr_cloud_calls_total{result="error"}`)
	retried := f.requestCSR(t, asA, "retried-"+suffix, serving, a, []string{a}, []string{ipA})
	testenv.Eventually(t, 20*time.Second, "failed instance lookups, retried", func() (bool, string) {
		if got := f.csrConditions(t, retried); len(got) != 0 {
			t.Fatalf("CSR %s decided while the cloud fails: %+v", retried, got)
		}
		n := scrapeCounter(t, metrics, `portside_ccm_serving_csr_cloud_calls_total{result="error"}`)
		return n >= errorsBefore+2, fmt.Sprintf("%v failed lookups since the fault", n-errorsBefore)
	})
	if err := f.cloud.Client.SetFaults(ctx, api.Faults{}); err != nil {
		t.Fatal(err)
	}
	f.waitCSR(t, retried, certificatesv1.CertificateApproved, servingcsr.ReasonAutoApproved, "instance "+idA)
}

// allowNodesToRequest lets the named nodes create and read CSRs, as the
// Node authorizer lets every node (the package's apiserver runs RBAC only).
func allowNodesToRequest(t *testing.T, client kubernetes.Interface, suffix string, nodes ...string) {
	t.Helper()
	ctx := context.Background()
	name := "serving-csr-test-" + suffix
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"create", "get"},
	}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name}}
	for _, n := range nodes {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "system:node:" + n})
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// nodeClient is a client authenticated as node name (system:node:<name>
// in system:nodes) by a client certificate of the control plane's CA.
func nodeClient(t *testing.T, name string) kubernetes.Interface {
	t.Helper()
	cp := testenv.ControlPlane(t)
	pair, err := cp.IssueClientCert("servingcsr-"+name, "system:node:"+name, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(pair.CertFile); _ = os.Remove(pair.KeyFile) })
	admin := testenv.Config(t)
	c, err := kubernetes.NewForConfig(&rest.Config{Host: admin.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData, CertData: pair.CertPEM, KeyData: pair.KeyPEM}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// requestCSR creates a CSR as kubelet's serving certificate manager does
// (a P-256 key: digital signature and server auth), deleted with its
// events when the test ends.
func (f *fixture) requestCSR(t *testing.T, as kubernetes.Interface, name, signer, cnNode string, dns, ips []string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + cnNode, Organization: []string{"system:nodes"}}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.CertificateSigningRequestSpec{
		Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		SignerName: signer, Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
	}}
	f.forgetEvents(t, name)
	if _, err := as.CertificatesV1().CertificateSigningRequests().Create(context.Background(), csr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CSR %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = f.client.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func (f *fixture) csrConditions(t *testing.T, name string) []certificatesv1.CertificateSigningRequestCondition {
	t.Helper()
	csr, err := f.client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return csr.Status.Conditions
}

// waitCSR waits for the CSR's condition and checks its reason and message.
func (f *fixture) waitCSR(t *testing.T, name string, typ certificatesv1.RequestConditionType, reason, msg string) certificatesv1.CertificateSigningRequestCondition {
	t.Helper()
	var got certificatesv1.CertificateSigningRequestCondition
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("CSR %s %s", name, typ), func() (bool, string) {
		conds := f.csrConditions(t, name)
		if len(conds) == 0 {
			return false, "no condition"
		}
		got = conds[0]
		return true, ""
	})
	if len(f.csrConditions(t, name)) != 1 || got.Type != typ || got.Reason != reason || !strings.Contains(got.Message, msg) {
		t.Fatalf("CSR %s: condition %s %s %q, want %s %s with %q", name, got.Type, got.Reason, got.Message, typ, reason, msg)
	}
	return got
}

func (f *fixture) waitEvent(t *testing.T, csr, reason string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "event "+reason+" on CSR "+csr, func() (bool, string) {
		ev := f.events(t, csr)
		_, ok := ev[reason]
		return ok, fmt.Sprint(ev)
	})
}

// scrapeCounter reads one sample of a CCM's /metrics (0 when absent).
func scrapeCounter(t *testing.T, url, sample string) float64 {
	t.Helper()
	scrapeOnce.Do(func() { scrapeToken = testenv.ServiceAccountToken(t, "lifecycle-scraper", "/metrics") })
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+scrapeToken)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v %.200s", resp.StatusCode, err, body)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return n
		}
	}
	return 0
}
