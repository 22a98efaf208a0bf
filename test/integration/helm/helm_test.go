// Package helm checks the chart deploy/helm/portside: it renders it with
// Helm's own library (values.schema.json included) for several value sets,
// checks the rendered objects, has a real kube-apiserver accept each
// rendering (kubectl apply --dry-run=server), and keeps the chart's RBAC and
// webhook identical to deploy/ccm's.
package helm

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func chartDir(t *testing.T) string {
	return filepath.Join(repoRoot(t), "deploy", "helm", "portside")
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

// render is `helm template portside deploy/helm/portside -n kube-system -f
// values`: the values are coalesced with values.yaml and checked against
// values.schema.json (chartutil.ToRenderValues), then the templates are
// executed (strictly: a missing value is an error). It returns the
// manifests as one YAML stream, in file order, without NOTES.txt.
func render(t *testing.T, values map[string]any) (string, error) {
	t.Helper()
	c := loadChart(t)
	opts := chartutil.ReleaseOptions{Name: "portside", Namespace: "kube-system", Revision: 1, IsInstall: true}
	vals, err := chartutil.ToRenderValues(c, values, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return "", err
	}
	files, err := engine.Engine{Strict: true}.Render(c, vals)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		if strings.TrimSpace(files[name]) == "" {
			continue
		}
		b.WriteString("---\n# Source: " + name + "\n" + files[name] + "\n")
	}
	return b.String(), nil
}

func mustRender(t *testing.T, values map[string]any) string {
	t.Helper()
	out, err := render(t, values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return out
}

// object is one rendered manifest: its kind and name, and its YAML.
type object struct {
	Kind, Name string
	raw        []byte
}

func objects(t *testing.T, stream string) []object {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	var objs []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var tm struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if tm.Kind == "" {
			continue // comments only
		}
		objs = append(objs, object{tm.Kind, tm.Metadata.Name, doc})
	}
}

// get decodes the rendered object kind/name into into (strictly: a field
// its type lacks is an error); false when absent.
func get(t *testing.T, objs []object, kind, name string, into any) bool {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			if err := yaml.UnmarshalStrict(o.raw, into); err != nil {
				t.Fatalf("%s %s: %v\n%s", kind, name, err, o.raw)
			}
			return true
		}
	}
	return false
}

func mustGet(t *testing.T, objs []object, kind, name string, into any) {
	t.Helper()
	if !get(t, objs, kind, name, into) {
		t.Fatalf("no %s %s rendered", kind, name)
	}
}

func kinds(objs []object) []string {
	var s []string
	for _, o := range objs {
		s = append(s, o.Kind+"/"+o.Name)
	}
	return s
}

// dryRunApply has the test apiserver validate and admit the rendering
// without persisting it.
func dryRunApply(t *testing.T, stream string) string {
	t.Helper()
	out := kubectlApply(t, stream, "--dry-run=server")
	if !strings.Contains(out, "(server dry run)") {
		t.Fatalf("not a server dry run:\n%s", out)
	}
	return out
}

// kubectlApply is `kubectl apply [flags] -f -` of stream against the test
// apiserver; a failure fails the test, naming the objects.
func kubectlApply(t *testing.T, stream string, flags ...string) string {
	t.Helper()
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl, err := tools.Path(bin, tools.Kubectl)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig", testenv.Kubeconfig(t), "apply"}, flags...)
	cmd := exec.Command(kubectl, append(args, "-f", "-")...)
	cmd.Stdin = strings.NewReader(stream)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply %s: %v\n%s\nobjects:\n%s", strings.Join(flags, " "), err, out, stream)
	}
	return string(out)
}

// deployObjects parses a file of deploy/.
func deployObjects(t *testing.T, rel string) []object {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return objects(t, string(data))
}

func ccmDeployment(t *testing.T, objs []object) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	d := &appsv1.Deployment{}
	mustGet(t, objs, "Deployment", "portside-cloud-controller-manager", d)
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers, want 1", n)
	}
	return d, &d.Spec.Template.Spec.Containers[0]
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	v := loadChart(t).Metadata.AppVersion
	if v == "" {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return v
}

func hasArg(c *corev1.Container, arg string) bool { return slices.Contains(c.Command, arg) }

func checkArgs(t *testing.T, c *corev1.Container, want, unwanted []string) {
	t.Helper()
	for _, a := range want {
		if !hasArg(c, a) {
			t.Errorf("command lacks %q: %q", a, c.Command)
		}
	}
	for _, a := range unwanted {
		for _, got := range c.Command {
			if strings.HasPrefix(got, a) {
				t.Errorf("command has %q: %q", got, c.Command)
			}
		}
	}
}

// TestDefaults: the default values render the CCM as deploy/ccm does (two
// replicas, leader election, deploy/ccm's RBAC), without the webhook and the
// network proxy, with the chart's appVersion as the image tag.
func TestDefaults(t *testing.T) {
	stream := mustRender(t, nil)
	objs := objects(t, stream)
	d, c := ccmDeployment(t, objs)
	if got := *d.Spec.Replicas; got != 2 {
		t.Errorf("replicas = %d, want 2", got)
	}
	// hostNetwork: a surge pod would find its ports taken on every node
	// that runs a CCM, and the roll would never end.
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxSurge.String() != "0" || ru.MaxUnavailable.String() != "1" {
		t.Errorf("strategy = %+v, want RollingUpdate maxSurge 0, maxUnavailable 1", d.Spec.Strategy)
	}
	if !slices.Contains(kinds(objs), "PodDisruptionBudget/portside-cloud-controller-manager") {
		t.Errorf("no PodDisruptionBudget with 2 replicas: %v", kinds(objs))
	}
	if tsc := d.Spec.Template.Spec.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].TopologyKey != "topology.kubernetes.io/zone" ||
		tsc[0].WhenUnsatisfiable != corev1.ScheduleAnyway {
		t.Errorf("topologySpreadConstraints = %+v, want over zones, ScheduleAnyway", tsc)
	}
	if want := "ghcr.io/portside-io/portside:" + chartAppVersion(t); c.Image != want {
		t.Errorf("image = %q, want %q", c.Image, want)
	}
	checkArgs(t, c, []string{"/portside", "ccm", "--cloud-provider=local", "--cloud-config=/etc/portside/cloud.yaml",
		"--cluster-name=kubernetes", "--controllers=*", "--leader-elect=true", "--secure-port=10258"},
		[]string{"--webhook", "--enable-leader-migration", "--leader-migration-config", "--use-service-account-credentials"})
	if got := d.Spec.Template.Spec.Volumes[0].Secret.SecretName; got != "portside-cloud-config" {
		t.Errorf("cloud config Secret = %q", got)
	}
	for _, absent := range []string{"MutatingWebhookConfiguration/portside-persistent-volume-label", "Service/portside-ccm-webhook",
		"ConfigMap/portside-ccm-leader-migration", "DaemonSet/portside-proxy-agent", "DaemonSet/portside-proxy-server",
		"Role/portside:cloud-controller-manager:service-account-credentials",
		"ClusterRole/portside:cloud-controller-manager:node-serving-csr-approver"} {
		if slices.Contains(kinds(objs), absent) {
			t.Errorf("%s rendered by default", absent)
		}
	}
	checkRBAC(t, objs, "deploy/ccm/rbac.yaml")
	dryRunApply(t, stream)
}

// checkRBAC: every RBAC object of deploy's file is rendered, equal.
func checkRBAC(t *testing.T, objs []object, file string) {
	t.Helper()
	want := deployObjects(t, file)
	if len(want) == 0 {
		t.Fatalf("%s is empty", file)
	}
	for _, w := range want {
		var wantObj, gotObj any
		switch w.Kind {
		case "ClusterRole":
			wantObj, gotObj = &rbacv1.ClusterRole{}, &rbacv1.ClusterRole{}
		case "Role":
			wantObj, gotObj = &rbacv1.Role{}, &rbacv1.Role{}
		case "ClusterRoleBinding":
			wantObj, gotObj = &rbacv1.ClusterRoleBinding{}, &rbacv1.ClusterRoleBinding{}
		case "RoleBinding":
			wantObj, gotObj = &rbacv1.RoleBinding{}, &rbacv1.RoleBinding{}
		default:
			t.Fatalf("%s: unexpected %s", file, w.Kind)
		}
		if err := yaml.UnmarshalStrict(w.raw, wantObj); err != nil {
			t.Fatal(err)
		}
		if !get(t, objs, w.Kind, w.Name, gotObj) {
			t.Errorf("%s %s of %s not rendered", w.Kind, w.Name, file)
			continue
		}
		if !reflect.DeepEqual(gotObj, wantObj) {
			t.Errorf("%s %s differs from %s's:\n got %+v\nwant %+v", w.Kind, w.Name, file, gotObj, wantObj)
		}
	}
}

// TestRBACHasOneSourceOfTruth: the chart's RBAC files are byte-for-byte
// copies of deploy/'s (which test/integration and test/integration/rbac
// check against the real CCM). Fix a failure by copying deploy's file over
// the chart's.
func TestRBACHasOneSourceOfTruth(t *testing.T) {
	root := repoRoot(t)
	for chartFile, deployFile := range map[string]string{
		"rbac.yaml":                             "deploy/ccm/rbac.yaml",
		"rbac-service-account-credentials.yaml": "deploy/ccm/rbac-service-account-credentials.yaml",
		"rbac-node-serving-csr-approver.yaml":   "deploy/ccm/rbac-node-serving-csr-approver.yaml",
		"network-proxy-rbac.yaml":               "deploy/network-proxy/rbac.yaml",
	} {
		want, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(deployFile)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chartDir(t), "files", chartFile))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("deploy/helm/portside/files/%s differs from %s, the source of truth: cp %s deploy/helm/portside/files/%s",
				chartFile, deployFile, deployFile, chartFile)
		}
	}
}

// TestWebhook: with the webhook on, the Deployment serves it as
// deploy/ccm/deployment.yaml does, and the Service and the
// MutatingWebhookConfiguration are deploy/ccm/webhook.yaml's, with
// cert-manager's annotation or the given caBundle.
func TestWebhook(t *testing.T) {
	deployed := deployObjects(t, "deploy/ccm/webhook.yaml")
	wantSvc := &corev1.Service{}
	mustGet(t, deployed, "Service", "portside-ccm-webhook", wantSvc)
	wantMWC := &admissionregistrationv1.MutatingWebhookConfiguration{}
	mustGet(t, deployed, "MutatingWebhookConfiguration", "portside-persistent-volume-label", wantMWC)
	wantDeploy, wantC := ccmDeployment(t, deployObjects(t, "deploy/ccm/deployment.yaml"))

	t.Run("cert-manager", func(t *testing.T) {
		stream := mustRender(t, map[string]any{"webhook": map[string]any{"enabled": true, "certManager": map[string]any{"enabled": true}}})
		objs := objects(t, stream)
		svc := &corev1.Service{}
		mustGet(t, objs, "Service", "portside-ccm-webhook", svc)
		if !reflect.DeepEqual(svc.Spec, wantSvc.Spec) {
			t.Errorf("Service spec %+v, want deploy/ccm's %+v", svc.Spec, wantSvc.Spec)
		}
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		mustGet(t, objs, "MutatingWebhookConfiguration", "portside-persistent-volume-label", mwc)
		if !reflect.DeepEqual(mwc.Annotations, wantMWC.Annotations) {
			t.Errorf("annotations %v, want deploy/ccm's %v", mwc.Annotations, wantMWC.Annotations)
		}
		if !reflect.DeepEqual(mwc.Webhooks, wantMWC.Webhooks) {
			t.Errorf("webhooks differ from deploy/ccm/webhook.yaml's:\n got %+v\nwant %+v", mwc.Webhooks, wantMWC.Webhooks)
		}

		d, c := ccmDeployment(t, objs)
		for _, a := range wantC.Command {
			if !hasArg(c, a) {
				t.Errorf("command lacks deploy/ccm's %q: %q", a, c.Command)
			}
		}
		if !reflect.DeepEqual(c.Ports, wantC.Ports) {
			t.Errorf("ports %+v, want %+v", c.Ports, wantC.Ports)
		}
		if !reflect.DeepEqual(c.VolumeMounts, wantC.VolumeMounts) || !reflect.DeepEqual(d.Spec.Template.Spec.Volumes, wantDeploy.Spec.Template.Spec.Volumes) {
			t.Errorf("volumes %+v / %+v, want deploy/ccm's %+v / %+v", c.VolumeMounts, d.Spec.Template.Spec.Volumes, wantC.VolumeMounts, wantDeploy.Spec.Template.Spec.Volumes)
		}
		for name, pair := range map[string][2]any{
			"probes":              {[]any{c.LivenessProbe, c.ReadinessProbe}, []any{wantC.LivenessProbe, wantC.ReadinessProbe}},
			"resources":           {c.Resources, wantC.Resources},
			"securityContext":     {c.SecurityContext, wantC.SecurityContext},
			"pod securityContext": {d.Spec.Template.Spec.SecurityContext, wantDeploy.Spec.Template.Spec.SecurityContext},
			"tolerations":         {d.Spec.Template.Spec.Tolerations, wantDeploy.Spec.Template.Spec.Tolerations},
			"affinity":            {d.Spec.Template.Spec.Affinity, wantDeploy.Spec.Template.Spec.Affinity},
			"hostNetwork":         {d.Spec.Template.Spec.HostNetwork, wantDeploy.Spec.Template.Spec.HostNetwork},
			"priorityClassName":   {d.Spec.Template.Spec.PriorityClassName, wantDeploy.Spec.Template.Spec.PriorityClassName},
			"serviceAccountName":  {d.Spec.Template.Spec.ServiceAccountName, wantDeploy.Spec.Template.Spec.ServiceAccountName},
		} {
			if !reflect.DeepEqual(pair[0], pair[1]) {
				t.Errorf("%s differ from deploy/ccm/deployment.yaml's:\n got %+v\nwant %+v", name, pair[0], pair[1])
			}
		}
		dryRunApply(t, stream)
	})

	t.Run("caBundle", func(t *testing.T) {
		ca := "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==" // any base64: the apiserver does not parse it
		stream := mustRender(t, map[string]any{"webhook": map[string]any{"enabled": true, "caBundle": ca, "failurePolicy": "Ignore"}})
		objs := objects(t, stream)
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		mustGet(t, objs, "MutatingWebhookConfiguration", "portside-persistent-volume-label", mwc)
		if len(mwc.Annotations) != 0 {
			t.Errorf("annotations %v with a caBundle", mwc.Annotations)
		}
		if got := string(mwc.Webhooks[0].ClientConfig.CABundle); got != "-----BEGIN CERTIFICATE-----\n" {
			t.Errorf("caBundle = %q", got)
		}
		if got := *mwc.Webhooks[0].FailurePolicy; got != admissionregistrationv1.Ignore {
			t.Errorf("failurePolicy = %q", got)
		}
		dryRunApply(t, stream)
	})

	t.Run("without a CA", func(t *testing.T) {
		_, err := render(t, map[string]any{"webhook": map[string]any{"enabled": true}})
		if err == nil || !strings.Contains(err.Error(), "webhook.enabled needs webhook.caBundle or webhook.certManager.enabled") {
			t.Errorf("err = %v", err)
		}
	})
}

// TestLeaderMigration: a LeaderMigrationConfiguration ConfigMap, mounted,
// naming the Lease the RBAC allows, and the flags.
func TestLeaderMigration(t *testing.T) {
	stream := mustRender(t, map[string]any{"leaderMigration": map[string]any{"enabled": true,
		"controllerLeaders": []any{
			map[string]any{"name": "route-controller", "component": "*"},
			map[string]any{"name": "cloud-node-lifecycle-controller", "component": "cloud-controller-manager"},
		}}})
	objs := objects(t, stream)
	cm := &corev1.ConfigMap{}
	mustGet(t, objs, "ConfigMap", "portside-ccm-leader-migration", cm)
	var lmc struct {
		metav1.TypeMeta   `json:",inline"`
		LeaderName        string
		ResourceLock      string
		ControllerLeaders []struct{ Name, Component string }
	}
	if err := yaml.UnmarshalStrict([]byte(cm.Data["leader-migration.yaml"]), &lmc); err != nil {
		t.Fatalf("%v\n%s", err, cm.Data["leader-migration.yaml"])
	}
	if lmc.APIVersion != "controllermanager.config.k8s.io/v1" || lmc.Kind != "LeaderMigrationConfiguration" ||
		lmc.LeaderName != "cloud-provider-extraction-migration" || lmc.ResourceLock != "leases" ||
		len(lmc.ControllerLeaders) != 2 || lmc.ControllerLeaders[1].Name != "cloud-node-lifecycle-controller" ||
		lmc.ControllerLeaders[1].Component != "cloud-controller-manager" {
		t.Errorf("LeaderMigrationConfiguration %+v", lmc)
	}
	d, c := ccmDeployment(t, objs)
	checkArgs(t, c, []string{"--leader-elect=true", "--enable-leader-migration=true",
		"--leader-migration-config=/etc/portside-leader-migration/leader-migration.yaml"}, nil)
	found := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			found = true
		}
	}
	if !found || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/portside-leader-migration" }) {
		t.Errorf("the ConfigMap is not mounted: %+v %+v", d.Spec.Template.Spec.Volumes, c.VolumeMounts)
	}
	if d.Spec.Template.Annotations["checksum/leader-migration"] == "" {
		t.Error("no checksum/leader-migration annotation: a changed configuration would not roll the pods")
	}
	dryRunApply(t, stream)

	if _, err := render(t, map[string]any{"leaderElection": map[string]any{"enabled": false}, "replicaCount": 1,
		"leaderMigration": map[string]any{"enabled": true}}); err == nil || !strings.Contains(err.Error(), "leaderMigration.enabled needs leaderElection.enabled") {
		t.Errorf("leader migration without leader election: err = %v", err)
	}
}

// TestSingleReplicaWithoutLeaderElection, and more than one replica
// without it refused.
func TestSingleReplicaWithoutLeaderElection(t *testing.T) {
	stream := mustRender(t, map[string]any{"replicaCount": 1, "leaderElection": map[string]any{"enabled": false},
		"image":     map[string]any{"tag": "v9.9.9"},
		"extraArgs": []any{"--concurrent-node-syncs=4"}, "controllers": []any{"*", "-cloud-node-lifecycle"},
		"useServiceAccountCredentials": true, "nodeSelector": map[string]any{"node-role.kubernetes.io/control-plane": ""},
		"cloudConfig": map[string]any{"existingSecret": "my-cloud", "key": "config.yaml"}})
	objs := objects(t, stream)
	d, c := ccmDeployment(t, objs)
	if *d.Spec.Replicas != 1 {
		t.Errorf("replicas = %d", *d.Spec.Replicas)
	}
	if slices.Contains(kinds(objs), "PodDisruptionBudget/portside-cloud-controller-manager") {
		t.Errorf("a PodDisruptionBudget for one replica would block every drain")
	}
	if c.Image != "ghcr.io/portside-io/portside:v9.9.9" {
		t.Errorf("image = %q", c.Image)
	}
	checkArgs(t, c, []string{"--leader-elect=false", "--concurrent-node-syncs=4", "--controllers=*,-cloud-node-lifecycle",
		"--use-service-account-credentials=true", "--cloud-config=/etc/portside/config.yaml"}, []string{"--leader-elect=true"})
	if got := d.Spec.Template.Spec.Volumes[0].Secret.SecretName; got != "my-cloud" {
		t.Errorf("cloud config Secret = %q", got)
	}
	if got := d.Spec.Template.Spec.NodeSelector; len(got) != 1 {
		t.Errorf("nodeSelector = %v", got)
	}
	checkRBAC(t, objs, "deploy/ccm/rbac-service-account-credentials.yaml")
	dryRunApply(t, stream)

	_, err := render(t, map[string]any{"replicaCount": 3, "leaderElection": map[string]any{"enabled": false}})
	if err == nil || !strings.Contains(err.Error(), "replicaCount 3 needs leaderElection.enabled") {
		t.Errorf("3 replicas without leader election: err = %v", err)
	}
}

// TestServiceMonitor: the metrics Service and the ServiceMonitor, with the
// extra labels, only when asked (the CRD is the operator's; kube-apiserver
// here has none, so only the Service is dry-run).
func TestServiceMonitor(t *testing.T) {
	if slices.Contains(kinds(objects(t, mustRender(t, nil))), "ServiceMonitor/portside-ccm") {
		t.Errorf("a ServiceMonitor by default")
	}
	stream := mustRender(t, map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true, "interval": "15s",
		"labels": map[string]any{"release": "prometheus"}}}})
	objs := objects(t, stream)
	for _, want := range []string{"Service/portside-ccm-metrics", "ServiceMonitor/portside-ccm"} {
		if !slices.Contains(kinds(objs), want) {
			t.Errorf("%s not rendered: %v", want, kinds(objs))
		}
	}
	var sm struct {
		Metadata struct{ Labels map[string]string } `json:"metadata"`
		Spec     struct {
			Endpoints []struct {
				Port, Scheme, Interval, BearerTokenFile string
			} `json:"endpoints"`
		} `json:"spec"`
	}
	for _, o := range objs {
		if o.Kind == "ServiceMonitor" {
			if err := yaml.Unmarshal(o.raw, &sm); err != nil {
				t.Fatal(err)
			}
		}
	}
	if sm.Metadata.Labels["release"] != "prometheus" || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Scheme != "https" ||
		sm.Spec.Endpoints[0].Interval != "15s" || sm.Spec.Endpoints[0].BearerTokenFile == "" {
		t.Errorf("ServiceMonitor: %+v", sm)
	}
	var svc corev1.Service
	if !get(t, objs, "Service", "portside-ccm-metrics", &svc) || svc.Spec.Ports[0].Port != 10258 {
		t.Errorf("metrics Service: %+v", svc.Spec)
	}
	if _, err := render(t, map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"interval": "often"}}}); err == nil {
		t.Errorf("interval \"often\" accepted")
	}
}

// TestNodeServingCSRApprover: the controller added to --controllers, and
// deploy/ccm's RBAC for it rendered.
func TestNodeServingCSRApprover(t *testing.T) {
	stream := mustRender(t, map[string]any{"nodeServingCSRApprover": map[string]any{"enabled": true}, "controllers": []any{"*", "-route"}})
	objs := objects(t, stream)
	_, c := ccmDeployment(t, objs)
	checkArgs(t, c, []string{"--controllers=*,-route,node-serving-csr-approver"}, nil)
	checkRBAC(t, objs, "deploy/ccm/rbac-node-serving-csr-approver.yaml")
	dryRunApply(t, stream)
}

// TestNetworkProxy: proxy-server and proxy-agent as deploy/network-proxy's,
// with its RBAC.
func TestNetworkProxy(t *testing.T) {
	stream := mustRender(t, map[string]any{"networkProxy": map[string]any{"enabled": true,
		"server": map[string]any{"serverCount": 3}, "agent": map[string]any{"proxyServerHost": "cp.example.com"}}})
	objs := objects(t, stream)
	server, agent := &appsv1.DaemonSet{}, &appsv1.DaemonSet{}
	mustGet(t, objs, "DaemonSet", "portside-proxy-server", server)
	mustGet(t, objs, "DaemonSet", "portside-proxy-agent", agent)
	mustGet(t, objs, "ServiceAccount", "konnectivity-agent", &corev1.ServiceAccount{})
	checkRBAC(t, objs, "deploy/network-proxy/rbac.yaml")

	wantServer := &corev1.Pod{}
	mustGet(t, deployObjects(t, "deploy/network-proxy/proxy-server.yaml"), "Pod", "portside-proxy-server", wantServer)
	sc := &server.Spec.Template.Spec.Containers[0]
	for _, a := range wantServer.Spec.Containers[0].Command {
		if a == "--server-count=1" {
			a = "--server-count=3"
		}
		if !hasArg(sc, a) {
			t.Errorf("proxy-server lacks %q: %q", a, sc.Command)
		}
	}
	if !reflect.DeepEqual(server.Spec.Template.Spec.Volumes, wantServer.Spec.Volumes) || !reflect.DeepEqual(sc.VolumeMounts, wantServer.Spec.Containers[0].VolumeMounts) {
		t.Errorf("proxy-server volumes differ from deploy/network-proxy's: %+v %+v", server.Spec.Template.Spec.Volumes, sc.VolumeMounts)
	}

	wantAgent := &appsv1.DaemonSet{}
	mustGet(t, deployObjects(t, "deploy/network-proxy/proxy-agent.yaml"), "DaemonSet", "portside-proxy-agent", wantAgent)
	ac, wac := &agent.Spec.Template.Spec.Containers[0], &wantAgent.Spec.Template.Spec.Containers[0]
	for _, a := range wac.Command {
		if strings.HasPrefix(a, "--proxy-server-host=") {
			a = "--proxy-server-host=cp.example.com"
		}
		if !hasArg(ac, a) {
			t.Errorf("proxy-agent lacks %q: %q", a, ac.Command)
		}
	}
	if !reflect.DeepEqual(agent.Spec.Template.Spec.Volumes, wantAgent.Spec.Template.Spec.Volumes) || !reflect.DeepEqual(ac.Env, wac.Env) ||
		!reflect.DeepEqual(ac.SecurityContext, wac.SecurityContext) || !reflect.DeepEqual(agent.Spec.Template.Spec.Tolerations, wantAgent.Spec.Template.Spec.Tolerations) {
		t.Errorf("proxy-agent differs from deploy/network-proxy's:\n got %+v\nwant %+v", agent.Spec.Template.Spec, wantAgent.Spec.Template.Spec)
	}
	if want := "ghcr.io/portside-io/portside:" + chartAppVersion(t); ac.Image != want || sc.Image != want {
		t.Errorf("images %q, %q, want %q", sc.Image, ac.Image, want)
	}
	dryRunApply(t, stream)

	// The agents alone, for a proxy-server that runs elsewhere: no server,
	// none of its RBAC.
	stream = mustRender(t, map[string]any{"networkProxy": map[string]any{"enabled": true,
		"server": map[string]any{"enabled": false}, "agent": map[string]any{"proxyServerHost": "cp.example.com"}}})
	objs = objects(t, stream)
	mustGet(t, objs, "DaemonSet", "portside-proxy-agent", &appsv1.DaemonSet{})
	mustGet(t, objs, "ServiceAccount", "konnectivity-agent", &corev1.ServiceAccount{})
	for _, k := range kinds(objs) {
		if k == "DaemonSet/portside-proxy-server" || strings.Contains(k, "konnectivity-server") {
			t.Errorf("%s rendered with networkProxy.server.enabled false", k)
		}
	}
	dryRunApply(t, stream)
}

// TestSchemaRefusesBadValues: values.schema.json turns mistakes into errors
// that name the field.
func TestSchemaRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{"negative replicas", map[string]any{"replicaCount": -1}, []string{"'/replicaCount'", "minimum"}},
		{"unknown top-level key", map[string]any{"replicas": 2}, []string{"additional properties 'replicas' not allowed"}},
		{"unknown nested key", map[string]any{"webhook": map[string]any{"enable": true}}, []string{"'/webhook'", "additional properties 'enable' not allowed"}},
		{"bad enum", map[string]any{"webhook": map[string]any{"failurePolicy": "Sometimes"}}, []string{"'/webhook/failurePolicy'", "'Fail', 'Ignore'"}},
		{"bad pull policy", map[string]any{"image": map[string]any{"pullPolicy": "Maybe"}}, []string{"'/image/pullPolicy'", "IfNotPresent"}},
		{"string for a number", map[string]any{"replicaCount": "two"}, []string{"'/replicaCount'", "got string, want integer"}},
		{"string for a port", map[string]any{"webhook": map[string]any{"port": "443"}}, []string{"'/webhook/port'", "got string, want integer"}},
		{"unknown provider", map[string]any{"cloudProvider": "aws"}, []string{"'/cloudProvider'", "local"}},
		{"bad component", map[string]any{"leaderMigration": map[string]any{"controllerLeaders": []any{map[string]any{"name": "x", "component": "kcm"}}}}, []string{"'/leaderMigration/controllerLeaders/0/component'"}},
		{"extra arg without dashes", map[string]any{"extraArgs": []any{"v=2"}}, []string{"'/extraArgs/0'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.values)
			if err == nil {
				t.Fatal("rendered")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}

// TestChartRefusesOtherNamespaces: deploy/ccm's RBAC names kube-system.
func TestChartRefusesOtherNamespaces(t *testing.T) {
	c := loadChart(t)
	vals, err := chartutil.ToRenderValues(c, nil, chartutil.ReleaseOptions{Name: "portside", Namespace: "default", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Render(c, vals); err == nil || !strings.Contains(err.Error(), "use -n kube-system") {
		t.Errorf("err = %v", err)
	}
}

// TestInstallDocValues: the values example of docs/install.md renders and
// the apiserver accepts it.
func TestInstallDocValues(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- values example: test/integration/helm renders this block -->"
	_, rest, ok := strings.Cut(string(data), marker)
	if !ok {
		t.Fatalf("docs/install.md lacks %q", marker)
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	if !ok {
		t.Fatal("no ```yaml block after the marker")
	}
	block, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatal("unterminated ```yaml block")
	}
	values := map[string]any{}
	if err := yaml.Unmarshal([]byte(block), &values); err != nil {
		t.Fatalf("the values example: %v\n%s", err, block)
	}
	stream := mustRender(t, values)
	objs := objects(t, stream)
	for _, want := range []string{"Deployment/portside-cloud-controller-manager", "MutatingWebhookConfiguration/portside-persistent-volume-label",
		"ConfigMap/portside-ccm-leader-migration"} {
		if !slices.Contains(kinds(objs), want) {
			t.Errorf("the documented values render no %s", want)
		}
	}
	dryRunApply(t, stream)
}
