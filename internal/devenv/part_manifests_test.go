package devenv

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/deploy"
)

func TestPatchCCMManifests(t *testing.T) {
	files, err := deploy.CCMManifests()
	if err != nil {
		t.Fatal(err)
	}
	p := manifestPatch{Image: "127.0.0.1:5000/portside/portside:v1", Replicas: 1, CABundle: []byte("CA PEM"), ClientCAConfigMap: "client-ca",
		ExtraArgs: []string{"--controllers=*,node-serving-csr-approver", "--cluster-name=edge", "--allocate-node-cidrs=true"}}
	out, err := patchCCMManifests(files, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out["rbac-service-account-credentials.yaml"]; ok {
		t.Errorf("the optional --use-service-account-credentials RBAC was kept")
	}
	for _, same := range []string{"rbac.yaml", "serviceaccount.yaml", "rbac-node-serving-csr-approver.yaml"} {
		if string(out[same]) != string(files[same]) {
			t.Errorf("%s changed", same)
		}
	}
	d := &appsv1.Deployment{}
	if err := yaml.UnmarshalStrict(out["deployment.yaml"], d); err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != p.Image || *d.Spec.Replicas != 1 {
		t.Errorf("image %s, replicas %d", c.Image, *d.Spec.Replicas)
	}
	for _, want := range []string{"--controllers=*,node-serving-csr-approver", "--cluster-name=edge", "--allocate-node-cidrs=true",
		"--webhook-client-ca-file=/etc/portside-webhook-client-ca/ca.crt", "--leader-elect=true", "--cloud-config=/etc/portside/cloud.yaml"} {
		if n := slices.Index(c.Command, want); n < 0 {
			t.Errorf("command lacks %s: %v", want, c.Command)
		}
	}
	// A flag given again replaces the manifest's, once.
	count := 0
	for _, a := range c.Command {
		if strings.HasPrefix(a, "--cluster-name") {
			count++
		}
	}
	if count != 1 {
		t.Errorf("--cluster-name %d times: %v", count, c.Command)
	}
	if d.Spec.Strategy.RollingUpdate == nil || d.Spec.Strategy.RollingUpdate.MaxSurge.String() != "0" {
		t.Errorf("the manifest's strategy was lost: %+v", d.Spec.Strategy)
	}
	if !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "webhook-client-ca" && v.ConfigMap != nil && v.ConfigMap.Name == "client-ca"
	}) {
		t.Errorf("no client CA volume: %+v", d.Spec.Template.Spec.Volumes)
	}
	var mwc *admissionregistrationv1.MutatingWebhookConfiguration
	for _, doc := range strings.Split(string(out["webhook.yaml"]), "\n---") {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := yaml.Unmarshal([]byte(doc), m); err == nil && m.Kind == "MutatingWebhookConfiguration" {
			mwc = m
		}
	}
	if mwc == nil || string(mwc.Webhooks[0].ClientConfig.CABundle) != "CA PEM" || mwc.Webhooks[0].ClientConfig.Service == nil {
		t.Errorf("webhook configuration: %+v", mwc)
	}
	if !strings.Contains(string(out["webhook.yaml"]), "kind: Service\n") {
		t.Errorf("the webhook's Service was lost:\n%s", out["webhook.yaml"])
	}

	delete(files, "rbac.yaml")
	if _, err := patchCCMManifests(files, p); err == nil || !strings.Contains(err.Error(), "no rbac.yaml") {
		t.Errorf("deploy/ccm without rbac.yaml: %v", err)
	}
	files["deployment.yaml"] = []byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: 1\n")
	if _, err := patchCCMManifests(files, p); err == nil || !strings.Contains(err.Error(), "no container ccm") {
		t.Errorf("a Deployment without the ccm container: %v", err)
	}
}

func TestPatchProxyAgentManifest(t *testing.T) {
	const img = "10.1.0.1:5000/portside/portside:v2"
	out, err := patchProxyAgentManifest(deploy.ProxyAgentManifest(), img, "10.1.0.1", 8132)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(out), "\n---\n")
	if len(docs) != 2 || !strings.Contains(docs[0], "kind: ServiceAccount") {
		t.Fatalf("want the ServiceAccount kept and the DaemonSet, got %d documents", len(docs))
	}
	d := &appsv1.DaemonSet{}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), d); err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != img || !slices.Contains(c.Command, "--proxy-server-host=10.1.0.1") || !slices.Contains(c.Command, "--proxy-server-port=8132") {
		t.Errorf("agent not patched: image %s, command %v", c.Image, c.Command)
	}
	for _, bad := range []struct{ name, doc string }{
		{"no DaemonSet", "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: x\n"},
		{"no agent container", "apiVersion: v1\nkind: ServiceAccount\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      containers:\n        - name: other\n"},
		{"no server flags", "apiVersion: v1\nkind: ServiceAccount\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      containers:\n        - name: proxy-agent\n          command: [/portside]\n"},
		{"unknown field", "apiVersion: v1\nkind: ServiceAccount\n---\napiVersion: apps/v1\nkind: DaemonSet\nspec:\n  bogus: 1\n"},
	} {
		if _, err := patchProxyAgentManifest([]byte(bad.doc), img, "h", 1); err == nil {
			t.Errorf("%s: no error", bad.name)
		}
	}
}
