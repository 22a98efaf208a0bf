package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/internal/credentialplugin/kubelettest"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// registryServesKubelets: the image `up` seeded pulls with the credentials
// the kubelet's own plugin client gets through the config `up` wrote, in
// both modes (node credentials, and a demo pod's service-account token
// exchanged by the cloud), and not without them.
func registryServesKubelets(t *testing.T, out *syncBuffer, data string) {
	t.Helper()
	m := regexp.MustCompile(`registry\s+serving (\S+) with (\S+); kubelet flags: --image-credential-provider-config=(\S+) --image-credential-provider-bin-dir=(\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no registry line in the output:\n%s", out.String())
	}
	ref := m[2]
	image := strings.Split(ref, "@")[0]
	dir := filepath.Join(data, "credential-provider")
	if _, err := kubelettest.Pull(ref, nil); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Fatalf("an anonymous pull of %s must be refused, got %v", ref, err)
	}

	// The kubelet flags as printed.
	k := kubelettest.Start(t, m[3], m[4], "")
	defer k.Stop()
	r := k.Lookup(t, image, kubelettest.Pod{})
	if !r.Found || r.Execs != 1 {
		t.Fatalf("kubelet lookup of %s = %+v", image, r)
	}
	if _, err := kubelettest.Pull(ref, &r.Auths[0]); err != nil {
		t.Fatalf("pull %s with the node credential: %v", ref, err)
	}

	ctx := context.Background()
	nodeTokenIsPullOnly(ctx, t, filepath.Join(dir, "cloud.yaml"), image)
	pods, err := upClient(t, data).CoreV1().Pods("demo").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("demo pods: %v (%d)", err, len(pods.Items))
	}
	p := pods.Items[0]
	sa := kubelettest.Start(t, filepath.Join(dir, "config-serviceaccount.yaml"), filepath.Join(dir, "bin"), filepath.Join(data, "controlplane", "kubeconfig"))
	defer sa.Stop()
	r = sa.Lookup(t, image, kubelettest.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), ServiceAccount: p.Spec.ServiceAccountName})
	if !r.Found || !strings.Contains(r.Auths[0].Username, "demo") {
		t.Fatalf("service-account lookup for pod %s/%s = %+v", p.Namespace, p.Name, r)
	}
	if _, err := kubelettest.Pull(ref, &r.Auths[0]); err != nil {
		t.Fatalf("pull %s with the service account's credential: %v", ref, err)
	}
}

// nodeTokenIsPullOnly: the token the nodes' credential plugin is given
// gets pull credentials and is refused (403 naming the scope) deleting a
// load balancer or minting push credentials: it is not the admin token.
func nodeTokenIsPullOnly(ctx context.Context, t *testing.T, cloudConfig, image string) {
	t.Helper()
	data, err := os.ReadFile(cloudConfig)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^endpoint: (\S+)\ntokenFile: (\S+)$`).FindStringSubmatch(string(data))
	if m == nil {
		t.Fatalf("plugin cloud config %s: %q, want endpoint and tokenFile", cloudConfig, data)
	}
	tok, err := client.ReadTokenFile(m[2])
	if err != nil {
		t.Fatal(err)
	}
	node := client.New(m[1], tok)
	if _, err := node.Credential(ctx, api.CredentialRequest{Image: image}); err != nil {
		t.Fatalf("pull credential with the plugin's token: %v", err)
	}
	for name, call := range map[string]func() error{
		"delete a load balancer": func() error { return node.DeleteLoadBalancer(ctx, "any") },
		"push credentials": func() error {
			_, err := node.Credential(ctx, api.CredentialRequest{Image: image, Push: true})
			return err
		},
	} {
		var se *client.StatusError
		if err := call(); !errors.As(err, &se) || se.Status != http.StatusForbidden || !strings.Contains(se.Message, "lacks scope") {
			t.Errorf("%s with the plugin's token (%s): %v, want 403 naming the missing scope", name, m[2], err)
		}
	}
}
