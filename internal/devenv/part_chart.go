package devenv

import (
	"context"
	"debug/elf"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/portside-io/portside/deploy"
	"github.com/portside-io/portside/internal/helmrelease"
	"github.com/portside-io/portside/internal/image"
	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/internal/version"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// With --install=chart the CCM is not a process of `up`: `up` pushes
// Portside's image to the local cloud's registry and installs the Helm
// chart deploy/helm/portside with Helm's library, as an operator would on
// any cluster, and the real kubelets pull the image through the
// credential provider and run the CCM's pods (hostNetwork: they must run
// before the pod network exists) on the nodes they initialize.
const (
	// InstallHost runs the CCM as `up`'s own child processes (the default).
	InstallHost = "host"
	// InstallChart installs the chart into the cluster instead.
	InstallChart = "chart"

	// ChartRelease and ChartNamespace are the release `up` installs.
	ChartRelease   = "portside"
	ChartNamespace = metav1.NamespaceSystem

	chartCloudConfigSecret = "portside-cloud-config"
	chartWebhookTLSSecret  = "portside-ccm-webhook-tls"
	chartWebhookClientCA   = "portside-ccm-webhook-client-ca"
	chartWebhookService    = "portside-ccm-webhook"
	// The chart's network proxy agents: their ServiceAccount and the
	// audience of their projected tokens (values.yaml's, upstream's).
	chartAgentServiceAccount = "konnectivity-agent"
	chartAgentAudience       = "system:konnectivity-server"
	// chartTimeout bounds an install or upgrade: the image pulled by every
	// node and the pods ready.
	chartTimeout = 4 * time.Minute
)

// prepareInClusterCCM does what both in-cluster installs need first: the
// host tools' cloud config, the image pushed, the Secrets and ConfigMap
// the CCM's pods mount, and no webhook configuration of an earlier run's
// host-process CCM (it points at a loopback port; the install brings its
// own). It returns the image's reference.
func prepareInClusterCCM(ctx context.Context, s *stack, env *environment) (string, error) {
	if err := writeHostCloudConfig(env); err != nil {
		return "", err
	}
	ref, err := pushOwnImage(ctx, env, version.Version)
	if err != nil {
		return "", err
	}
	s.p.step("ccm", "pushed Portside's image %s to the local cloud's registry (a push credential it issued); the kubelets pull it through %s", ref, credentialPluginName)
	if err := chartPrerequisites(ctx, env); err != nil {
		return "", err
	}
	return ref, unregisterWebhook(ctx, env)
}

// preparedChartValues does prepareInClusterCCM and returns the chart's
// values for the pushed image, and its reference.
func preparedChartValues(ctx context.Context, s *stack, env *environment) (map[string]any, string, error) {
	ref, err := prepareInClusterCCM(ctx, s, env)
	if err != nil {
		return nil, "", err
	}
	values, err := chartValues(env, ref)
	return values, ref, err
}

// installChart replaces startCCM with --install=chart.
func installChart(ctx context.Context, s *stack, env *environment) error {
	values, ref, err := preparedChartValues(ctx, s, env)
	if err != nil {
		return err
	}
	hc, err := helmrelease.New(ctx, env.kubeconfig(), ChartNamespace)
	if err != nil {
		return err
	}
	ch, err := helmrelease.LoadChart(deploy.Chart(), version.Version)
	if err != nil {
		return err
	}
	s.p.step("ccm", "installing the Helm chart deploy/helm/portside as release %s/%s (the CCM as a Deployment of %d, leader election, the persistent-volume-label webhook behind its Service), instead of running the CCM on this host",
		ChartNamespace, ChartRelease, values["replicaCount"])
	began := time.Now()
	// An earlier run's release belongs to a cluster that is gone with its
	// control plane (etcd is new each run), so this is always an install.
	rel, err := hc.Install(ctx, ChartRelease, ch, values, chartTimeout)
	if err != nil {
		return fmt.Errorf("%w (the CCM's pods: kubectl -n %s get pods -l app.kubernetes.io/name=portside-ccm -o wide)", err, ChartNamespace)
	}
	s.p.step("ccm", "release %s revision %d deployed in %v: %d CCM pods ready on the nodes (image %s)",
		ChartRelease, rel.Version, time.Since(began).Round(100*time.Millisecond), values["replicaCount"], ref)
	if env.networkProxy {
		if err := waitChartAgents(ctx, s, env); err != nil {
			return err
		}
	}
	env.webhookURL = "service " + ChartNamespace + "/" + chartWebhookService
	return nil
}

// pushOwnImage builds Portside's image from this very binary (static,
// linux/amd64: `make build`'s) with internal/image, the code `make image`
// uses, and pushes it to the cloud's registry as
// <registry>/portside/portside:<Tag(ver)>. It returns the reference pods
// name it by.
func pushOwnImage(ctx context.Context, env *environment, ver string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if err := checkStatic(exe); err != nil {
		return "", err
	}
	idx, err := image.Build(ctx, image.Options{Version: ver, Commit: version.Commit, BuildDate: buildDate(),
		Binaries: map[image.Platform]string{image.LinuxAMD64: exe}})
	if err != nil {
		return "", fmt.Errorf("build Portside's image from %s: %w", exe, err)
	}
	tag := image.Tag(ver)
	ref, err := name.ParseReference(env.registryHost + "/" + image.DefaultRepository + ":" + tag)
	if err != nil {
		return "", err
	}
	cred, err := env.cloudClient.Credential(ctx, api.CredentialRequest{Image: ref.Context().Name(), Push: true})
	if err != nil {
		return "", fmt.Errorf("a push credential for %s: %w", ref.Context().Name(), err)
	}
	if err := image.Push(ctx, idx, ref, &authn.Basic{Username: cred.Username, Password: cred.Password}); err != nil {
		return "", err
	}
	return ref.String(), nil
}

// checkStatic refuses a dynamically linked binary: the image has no libc
// or loader, so its pods would fail with "no such file or directory".
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked, and Portside's image has no libc: build it static (`make build`, or CGO_ENABLED=0 go build ./cmd/portside) for --install=%s", path, InstallChart)
		}
	}
	return nil
}

func buildDate() time.Time {
	t, err := time.Parse(time.RFC3339, version.BuildDate)
	if err != nil {
		return time.Unix(0, 0).UTC()
	}
	return t
}

// chartPrerequisites creates what the chart's values name and an operator
// creates beforehand: the cloud-config Secret (the cloud's API as the
// nodes reach it, with the CCM's scoped token), the webhook's serving
// certificate for its Service, and the CA of the apiserver's webhook
// client certificate.
func chartPrerequisites(ctx context.Context, env *environment) error {
	endpoint, err := os.ReadFile(filepath.Join(env.cloud(), server.VPCEndpointFile))
	if err != nil {
		return fmt.Errorf("the cloud serves no API to its VPC: %w", err)
	}
	token, err := os.ReadFile(filepath.Join(env.cloud(), clusterCCMTokenFile))
	if err != nil {
		return err
	}
	cloudYAML := fmt.Sprintf("endpoint: %s\ntoken: %s\n", strings.TrimSpace(string(endpoint)), strings.TrimSpace(string(token)))
	if env.vpc6() {
		cloudYAML += "dualStack: true\n"
	}
	svcHost := chartWebhookService + "." + ChartNamespace + ".svc"
	cert, err := env.cp.IssueServingCert("ccm-webhook-service", svcHost, svcHost+".cluster.local")
	if err != nil {
		return err
	}
	clientCA, err := os.ReadFile(env.webhookClient.CAFile)
	if err != nil {
		return err
	}
	for _, obj := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: chartCloudConfigSecret}, Data: map[string][]byte{"cloud.yaml": []byte(cloudYAML)}},
		{ObjectMeta: metav1.ObjectMeta{Name: chartWebhookTLSSecret}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: cert.CertPEM, corev1.TLSPrivateKeyKey: cert.KeyPEM}},
	} {
		if err := applySecret(ctx, env, obj); err != nil {
			return err
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: chartWebhookClientCA, Namespace: ChartNamespace}, Data: map[string]string{"ca.crt": string(clientCA)}}
	cms := env.client.CoreV1().ConfigMaps(ChartNamespace)
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("ConfigMap %s/%s: %w", ChartNamespace, cm.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("ConfigMap %s/%s: %w", ChartNamespace, cm.Name, err)
	}
	return nil
}

func applySecret(ctx context.Context, env *environment, sec *corev1.Secret) error {
	sec.Namespace = ChartNamespace
	secrets := env.client.CoreV1().Secrets(ChartNamespace)
	_, err := secrets.Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("Secret %s/%s: %w", ChartNamespace, sec.Name, err)
	}
	return nil
}

// chartValues are the values an operator would write for this cluster:
// the pushed image, two replicas with leader election (one with one
// node), the cloud-config Secret, node IPAM and cloud routes for the
// environment's ranges, and the webhook with its CA bundle and client CA.
func chartValues(env *environment, ref string) (map[string]any, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, err
	}
	tag, ok := r.(name.Tag)
	if !ok {
		return nil, fmt.Errorf("image %s has no tag", ref)
	}
	replicas := min(2, len(env.nodes))
	return map[string]any{
		"replicaCount": replicas,
		"image": map[string]any{
			"repository": tag.Context().Name(),
			"tag":        tag.TagStr(),
			"pullPolicy": "IfNotPresent",
		},
		"cloudProvider": "local",
		// The real kubelets ask for serving certificates by CSR.
		"nodeServingCSRApprover": map[string]any{"enabled": true},
		"cloudConfig":            map[string]any{"existingSecret": chartCloudConfigSecret, "key": "cloud.yaml"},
		"leaderElection": map[string]any{
			"enabled": replicas > 1,
		},
		"extraArgs": []any{
			// With prepare kube-controller-manager allocates (part_kcm.go).
			fmt.Sprintf("--allocate-node-cidrs=%v", installRunsCCM(env.install)),
			"--cluster-cidr=" + env.podCIDR(),
			"--service-cluster-ip-range=" + env.serviceCIDR(),
			"--configure-cloud-routes=true",
		},
		"networkProxy": map[string]any{
			"enabled": env.networkProxy,
			// proxy-server is up's, on this host; the agents dial it at
			// the VPC gateway, which the cloud forwards to it.
			"server": map[string]any{"enabled": false},
			"agent":  map[string]any{"proxyServerHost": env.realNet.gateway().String(), "proxyServerPort": agentGatewayPort},
		},
		"webhook": map[string]any{
			"enabled":       true,
			"tlsSecretName": chartWebhookTLSSecret,
			"caBundle":      base64.StdEncoding.EncodeToString(env.cp.CAPEM()),
			"clientCA":      map[string]any{"configMapName": chartWebhookClientCA, "key": "ca.crt"},
		},
	}, nil
}

// waitChartAgents waits until proxy-server has an agent for each node
// besides the host's gateway agent, with node identifiers granted (its
// metrics: the chart's agents are ready once connected, but their claims
// are granted when the server has checked their tokens' nodes), and then
// until kube-apiserver reaches every node's kubelet through the network
// proxy (GET nodes/<node>/proxy/healthz, its cluster egress).
func waitChartAgents(ctx context.Context, s *stack, env *environment) error {
	began := time.Now()
	who := "the chart's"
	if env.install == InstallManifests {
		who = "deploy/network-proxy's"
	}
	metricsURL := "http://" + env.netproxyState.Server.Health + "/metrics"
	want := len(env.nodes)
	last := ""
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		conns, destHost, err := proxyServerBackends(ctx, metricsURL)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%v agent connections (the gateway's among them), %v destHost identifiers", conns, destHost)
		return conns >= float64(want+1) && destHost >= float64(want), nil
	})
	if err != nil {
		return fmt.Errorf("proxy-server has no agent for every node from %s DaemonSet %s/portside-proxy-agent: %s", who, ChartNamespace, last)
	}
	for _, n := range env.nodes {
		last := ""
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := env.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.name, "proxy", "healthz").DoRaw(ctx)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("kube-apiserver cannot reach the kubelet of %s through %s network proxy agent (DaemonSet %s/portside-proxy-agent): %s", n.name, who, ChartNamespace, last)
		}
	}
	s.p.step("network proxy", "%s agents serve all %s: kube-apiserver reaches each kubelet through them (%v)", who, plural(len(env.nodes), "node"), time.Since(began).Round(100*time.Millisecond))
	return nil
}

// proxyServerBackends reads proxy-server's agent connections and its
// destHost backends (one per granted host or address identifier).
func proxyServerBackends(ctx context.Context, url string) (conns, destHost float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	if mf := mfs["konnectivity_network_proxy_server_ready_backend_connections"]; mf != nil && len(mf.Metric) > 0 {
		conns = mf.Metric[0].GetGauge().GetValue()
	}
	if mf := mfs["konnectivity_network_proxy_server_ready_backends"]; mf != nil {
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "proxy_strategy" && l.GetValue() == "destHost" {
					destHost = m.GetGauge().GetValue()
				}
			}
		}
	}
	return conns, destHost, nil
}
