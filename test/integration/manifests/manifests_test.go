// Package manifests starts `portside ccm` with the exact command lines of
// real upstream cloud-controller-manager manifests (upstream's sample and
// public providers'), only the provider, its config, the kubeconfig and the
// serving port replaced, on a real kube-apiserver and local cloud: each must
// start, lead, become ready, initialize a node and serve a LoadBalancer
// Service with the controllers it enables, with per-controller
// ServiceAccount clients when the manifest asks for them.
package manifests

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/internal/cli"
	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/manager/upstreammanifest"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
	_ "github.com/portside-io/portside/pkg/providers/local" // registers "local"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const manifestDir = "../../../internal/manager/testdata/upstream-manifests"

func TestUpstreamManifestsStart(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("manifests: %v %v", files, err)
	}
	client := testenv.Client(t)
	lc := localcloudtest.Start(t)
	cloudCfg := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cloudCfg, fmt.Appendf(nil, "endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	sim := nodesim.New(client, 4)
	t.Cleanup(func() { _ = sim.Delete(context.Background(), sim.Names()) })
	for i, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			argv, err := upstreammanifest.Args(file)
			if err != nil {
				t.Fatal(err)
			}
			args := upstreammanifest.StandIns(argv, map[string]string{
				"cloud-provider": "local", "cloud-config": cloudCfg, "kubeconfig": testenv.Kubeconfig(t),
				// Fixed ports would collide with other test packages.
				"secure-port": "0", "bind-address": "127.0.0.1",
			})
			o := manager.NewOptions()
			fs := pflag.NewFlagSet("ccm", pflag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.AddFlags(fs)
			fs.AddFlagSet(cli.NewRootCommand().PersistentFlags())
			if err := fs.Parse(args); err != nil {
				t.Fatalf("%q: %v", args, err)
			}
			t.Logf("manifest: %q", argv)
			run(t, o, lc, sim, fmt.Sprintf("manifest-%d", i))
		})
	}
}

func run(t *testing.T, o *manager.Options, lc *localcloudtest.Cloud, sim *nodesim.Simulator, name string) {
	ctx := context.Background()
	client := testenv.Client(t)
	enabled, err := manager.EnabledControllers(o.Controllers, manager.DefaultControllers())
	if err != nil {
		t.Fatal(err)
	}
	has := func(n string) bool {
		return slices.ContainsFunc(enabled, func(c manager.Controller) bool { return c.Name == n })
	}
	runCtx, cancel := context.WithCancel(ctx)
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- manager.Run(runCtx, o, manager.DefaultControllers(), func(a string) { addr <- a }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ccm: %v", err)
		}
	}()
	var base string
	select {
	case a := <-addr:
		base = "https://" + a
	case err := <-done:
		t.Fatalf("ccm exited at start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("ccm did not serve")
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	testenv.Eventually(t, 30*time.Second, "/readyz 200", func() (bool, string) {
		resp, err := hc.Get(base + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		return resp.StatusCode == http.StatusOK, resp.Status
	})

	if has("cloud-node-controller") {
		if _, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Zone: "zone-a"}); err != nil {
			t.Fatal(err)
		}
		if err := sim.Register(ctx, []nodesim.NodeSpec{{Name: name}}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "node initialized", func() (bool, string) {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return n.Spec.ProviderID != "" && !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
				return t.Key == "node.cloudprovider.kubernetes.io/uninitialized"
			}), fmt.Sprint(n.Spec)
		})
	}
	if has("service-lb-controller") {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
		if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "ingress", func() (bool, string) {
			s, err := client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
			return err == nil && len(s.Status.LoadBalancer.Ingress) > 0, fmt.Sprint(err)
		})
		if err := client.CoreV1().Services("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "Service cleaned up", func() (bool, string) {
			_, err := client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	}
	if o.UseServiceAccountCredentials {
		// Upstream's client builder made the controllers' ServiceAccounts.
		for _, c := range enabled {
			if c.ClientName == "" || !(c.Name == "service-lb-controller" || c.Name == "cloud-node-controller") {
				continue
			}
			if _, err := client.CoreV1().ServiceAccounts("kube-system").Get(ctx, c.ClientName, metav1.GetOptions{}); err != nil {
				t.Errorf("--use-service-account-credentials: no ServiceAccount kube-system/%s for %s: %v", c.ClientName, c.Name, err)
			}
		}
	}
	if !strings.HasPrefix(base, "https://127.0.0.1:") {
		t.Errorf("served on %s, not on the test's loopback address", base)
	}
}
