package credentialprovider

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/credentialplugin/kubelettest"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// TestServiceAccountTokenMode: the kubelet requests a token of the pod's
// service account from the real kube-apiserver (audience from
// tokenAttributes), the plugin passes it to the cloud, the cloud checks it
// against the cluster's issuer and signs a credential bound to the service
// account; the kubelet caches per service account.
func TestServiceAccountTokenMode(t *testing.T) {
	ctx := context.Background()
	cp := testenv.ControlPlane(t)
	cs := testenv.Client(t)
	c := startCloud(t, 3600e9)
	pub, err := cp.ServiceAccountPublicKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.PutTokenIssuer(ctx, api.TokenIssuer{
		Issuer: controlplane.ServiceAccountIssuer, Audiences: []string{"portside-local-registry"}, PublicKeysPEM: string(pub),
	}); err != nil {
		t.Fatal(err)
	}

	// A new namespace per run: without kube-controller-manager a deleted
	// one is never finalized.
	created, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "credprov-sa-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := created.Name
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	// Pods bound to their service accounts, as the kubelet's tokens are.
	pods := map[string]kubelettest.Pod{}
	for _, sa := range []string{"puller", "other"} {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: sa + "-pod"},
			Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "app", Image: c.registry + "/portside/hello:1.0"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[sa] = kubelettest.Pod{Namespace: ns, Name: p.Name, UID: string(p.UID), ServiceAccount: sa}
	}

	binDir := installPlugin(t, "portside-credential-provider")
	config := sampleConfig(t, "credential-provider-config-serviceaccount.yaml", c.registry, "portside-credential-provider", c.config)
	k := kubelettest.Start(t, config, binDir, testenv.Kubeconfig(t))
	image := c.registry + "/portside/hello:1.0"

	r := k.Lookup(t, image, pods["puller"])
	if !r.Found || len(r.Auths) != 1 || r.Execs != 1 {
		t.Fatalf("lookup = %+v", r)
	}
	if !strings.Contains(r.Auths[0].Username, "puller") || !strings.Contains(r.Auths[0].Username, ns) {
		t.Fatalf("credential user %q is not bound to %s/puller", r.Auths[0].Username, ns)
	}
	if _, err := kubelettest.Pull(image, &r.Auths[0]); err != nil {
		t.Fatalf("pull with the exchanged credential: %v", err)
	}
	// Cached per service account: the same one again is no exec, another
	// service account is.
	if r := k.Lookup(t, image, pods["puller"]); r.Execs != 1 {
		t.Fatalf("same service account again exec'd: %+v", r)
	}
	other := k.Lookup(t, image, pods["other"])
	if !other.Found || other.Execs != 2 || !strings.Contains(other.Auths[0].Username, "other") {
		t.Fatalf("another service account: %+v", other)
	}
	// requireServiceAccount: a pod without one (a static pod) gets nothing.
	if r := k.Lookup(t, image, kubelettest.Pod{Namespace: ns, Name: "static", UID: "u"}); r.Found || r.Execs != 2 {
		t.Fatalf("a pod without a service account: %+v", r)
	}

	// A cloud that does not trust the cluster's issuer refuses the exchange:
	// the kubelet gets no credential, and the pull is refused.
	untrusting := startCloud(t, 3600e9)
	config = sampleConfig(t, "credential-provider-config-serviceaccount.yaml", untrusting.registry, "portside-credential-provider", untrusting.config)
	k2 := kubelettest.Start(t, config, binDir, testenv.Kubeconfig(t))
	if r := k2.Lookup(t, untrusting.registry+"/portside/hello:1.0", pods["puller"]); r.Found || r.Execs != 1 {
		t.Fatalf("an untrusted issuer must give no credential after one exec: %+v", r)
	}
}
