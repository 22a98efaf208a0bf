package devenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/deploy"
)

// InstallManifests applies deploy/ccm's plain manifests with kubectl, as
// an operator without Helm does, with what an operator edits in them: the
// image, the replicas, the provider's flags and the webhook's CA bundle.
const InstallManifests = "manifests"

// manifestPatch is what `up` changes in deploy/ccm's manifests.
type manifestPatch struct {
	Image    string
	Replicas int32
	// ExtraArgs are appended to the CCM's command.
	ExtraArgs []string
	// ClientCAConfigMap, when set, is mounted for --webhook-client-ca-file.
	ClientCAConfigMap string
	CABundle          []byte
}

// installManifests replaces startCCM with --install=manifests.
func installManifests(ctx context.Context, s *stack, env *environment) error {
	ref, err := prepareInClusterCCM(ctx, s, env)
	if err != nil {
		return err
	}
	files, err := deploy.CCMManifests()
	if err != nil {
		return err
	}
	p := manifestPatch{Image: ref, Replicas: int32(min(2, len(env.nodes))), CABundle: env.cp.CAPEM(), ClientCAConfigMap: chartWebhookClientCA,
		ExtraArgs: []string{"--controllers=*,node-serving-csr-approver", "--allocate-node-cidrs=true", "--cluster-cidr=" + env.podCIDR(),
			"--service-cluster-ip-range=" + env.serviceCIDR(), "--configure-cloud-routes=true"}}
	patched, err := patchCCMManifests(files, p)
	if err != nil {
		return err
	}
	dir := filepath.Join(env.dir, "manifests", "ccm")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if env.networkProxy {
		// deploy/network-proxy's agents, dialing up's proxy-server at the
		// VPC gateway; the server itself is up's, on this host.
		agents, err := patchProxyAgentManifest(deploy.ProxyAgentManifest(), ref, env.realNet.gateway().String(), agentGatewayPort)
		if err != nil {
			return fmt.Errorf("deploy/network-proxy/proxy-agent.yaml: %w", err)
		}
		patched["proxy-agent.yaml"] = agents
	}
	for name, data := range patched {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	s.p.step("ccm", "kubectl apply -f %s: deploy/ccm's manifests (the CCM as a Deployment of %d, its RBAC and the node-serving-csr-approver's, the webhook behind its Service) with this image, instead of running the CCM on this host", dir, p.Replicas)
	began := time.Now()
	if err := kubectl(ctx, env, "apply", "-f", dir); err != nil {
		return err
	}
	if err := kubectl(ctx, env, "-n", ChartNamespace, "rollout", "status", "deployment/portside-cloud-controller-manager", "--timeout="+chartTimeout.String()); err != nil {
		return fmt.Errorf("%w (the CCM's pods: kubectl -n %s get pods -l app.kubernetes.io/name=portside-ccm -o wide)", err, ChartNamespace)
	}
	s.p.step("ccm", "applied and rolled out in %v: %d CCM pods ready on the nodes (image %s)", time.Since(began).Round(100*time.Millisecond), p.Replicas, ref)
	env.webhookURL = "service " + ChartNamespace + "/" + chartWebhookService
	if env.networkProxy {
		return waitChartAgents(ctx, s, env)
	}
	return nil
}

// patchProxyAgentManifest sets the agents' image and the proxy server's
// host and port in deploy/network-proxy/proxy-agent.yaml, as its comments
// tell an operator to; the other documents are kept as written.
func patchProxyAgentManifest(data []byte, image, host string, port int) ([]byte, error) {
	docs := strings.Split(string(data), "\n---\n")
	found := false
	for i, doc := range docs {
		if !strings.Contains(doc, "\nkind: DaemonSet\n") {
			continue
		}
		d := &appsv1.DaemonSet{}
		if err := yaml.UnmarshalStrict([]byte(doc), d); err != nil {
			return nil, err
		}
		j := slices.IndexFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "proxy-agent" })
		if j < 0 {
			return nil, fmt.Errorf("no container proxy-agent in DaemonSet %s", d.Name)
		}
		c := &d.Spec.Template.Spec.Containers[j]
		c.Image = image
		hostSet, portSet := false, false
		for k, a := range c.Command {
			switch {
			case strings.HasPrefix(a, "--proxy-server-host="):
				c.Command[k], hostSet = "--proxy-server-host="+host, true
			case strings.HasPrefix(a, "--proxy-server-port="):
				c.Command[k], portSet = fmt.Sprintf("--proxy-server-port=%d", port), true
			}
		}
		if !hostSet || !portSet {
			return nil, fmt.Errorf("DaemonSet %s's agent has no --proxy-server-host or --proxy-server-port to set", d.Name)
		}
		out, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		docs[i], found = string(out), true
	}
	if !found {
		return nil, fmt.Errorf("no DaemonSet")
	}
	return []byte(strings.Join(docs, "\n---\n")), nil
}

func kubectl(ctx context.Context, env *environment, args ...string) error {
	cmd := exec.CommandContext(ctx, env.kubectl, append([]string{"--kubeconfig", env.kubeconfig()}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// patchCCMManifests edits deploy/ccm's files as p says; the optional
// rbac-service-account-credentials.yaml (for
// --use-service-account-credentials, which `up` does not use) is left out.
// Every other file is kept as written.
func patchCCMManifests(files map[string][]byte, p manifestPatch) (map[string][]byte, error) {
	out := map[string][]byte{}
	for name, data := range files {
		var err error
		switch name {
		case "rbac-service-account-credentials.yaml":
			continue
		case "deployment.yaml":
			data, err = patchCCMDeployment(data, p)
		case "webhook.yaml":
			data, err = patchWebhookCABundle(data, p.CABundle)
		}
		if err != nil {
			return nil, fmt.Errorf("deploy/ccm/%s: %w", name, err)
		}
		out[name] = data
	}
	for _, need := range []string{"deployment.yaml", "webhook.yaml", "rbac.yaml", "serviceaccount.yaml", "rbac-node-serving-csr-approver.yaml"} {
		if _, ok := out[need]; !ok {
			return nil, fmt.Errorf("deploy/ccm has no %s", need)
		}
	}
	return out, nil
}

// patchCCMDeployment sets the CCM container's image and replicas, appends
// p.ExtraArgs (a flag given again replaces the manifest's: the last one
// wins in the CCM's flag parsing, but a reader should see one), and mounts
// the webhook's client CA.
func patchCCMDeployment(data []byte, p manifestPatch) ([]byte, error) {
	d := &appsv1.Deployment{}
	if err := yaml.UnmarshalStrict(data, d); err != nil {
		return nil, err
	}
	i := slices.IndexFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "ccm" })
	if i < 0 {
		return nil, fmt.Errorf("no container ccm in Deployment %s", d.Name)
	}
	c := &d.Spec.Template.Spec.Containers[i]
	c.Image = p.Image
	if p.Replicas > 0 {
		d.Spec.Replicas = ptr.To(p.Replicas)
	}
	args := p.ExtraArgs
	if p.ClientCAConfigMap != "" {
		args = append(slices.Clone(args), "--webhook-client-ca-file=/etc/portside-webhook-client-ca/ca.crt")
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "webhook-client-ca", MountPath: "/etc/portside-webhook-client-ca", ReadOnly: true})
		d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: "webhook-client-ca",
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: p.ClientCAConfigMap},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}}})
	}
	for _, a := range args {
		flag, _, _ := strings.Cut(a, "=")
		c.Command = slices.DeleteFunc(c.Command, func(x string) bool { return x == flag || strings.HasPrefix(x, flag+"=") })
		c.Command = append(c.Command, a)
	}
	return yaml.Marshal(d)
}

// patchWebhookCABundle sets the caBundle of webhook.yaml's
// MutatingWebhookConfiguration; its other documents are kept as written.
func patchWebhookCABundle(data []byte, ca []byte) ([]byte, error) {
	docs, i, mwc, err := deploy.FindMutatingWebhookConfiguration(string(data))
	if err != nil {
		return nil, err
	}
	for j := range mwc.Webhooks {
		mwc.Webhooks[j].ClientConfig.CABundle = ca
	}
	mwc.Annotations = nil // cert-manager's injection: the CA is given
	b, err := yaml.Marshal(mwc)
	if err != nil {
		return nil, err
	}
	docs[i] = "\n" + string(b)
	return bytes.TrimSpace([]byte(strings.Join(docs, "\n---"))), nil
}
