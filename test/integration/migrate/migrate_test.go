// Package migrate runs `portside migrate check` against a real
// kube-apiserver: a cluster seeded with each in-tree leftover is NOT READY
// with every leftover reported with its fix; the same cluster cleaned up,
// with the CCM's RBAC applied and initialized Nodes, is READY.
//
// The checks read cluster-wide objects, so the tests do not run in
// parallel and each deletes what it created (finalizers included: no
// kube-controller-manager runs here) so that -count=N passes.
package migrate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/internal/cli"
	"github.com/portside-io/portside/internal/migrate"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func suffix() string { return fmt.Sprintf("%06x", time.Now().UnixNano()&0xffffff) }

// runCheck runs `portside migrate check -o json` and returns the report and
// whether the command failed (exit status 1).
func runCheck(t *testing.T, extra ...string) (*migrate.Report, bool) {
	t.Helper()
	cmd := cli.NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(append([]string{"migrate", "check", "--kubeconfig", testenv.Kubeconfig(t), "-o", "json", "--kubelet-timeout", "2s"}, extra...))
	err := cmd.ExecuteContext(context.Background())
	var rep migrate.Report
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		t.Fatalf("migrate check: %v; output is not a JSON report: %v\n%s", err, jerr, out.String())
	}
	return &rep, err != nil
}

func findingsByID(r *migrate.Report) map[string][]migrate.Finding {
	m := map[string][]migrate.Finding{}
	for _, f := range r.Findings {
		m[f.ID] = append(m[f.ID], f)
	}
	return m
}

// expectFinding asserts a finding id of severity sev names an object
// containing each of objs, and has a fix.
func expectFinding(t *testing.T, r *migrate.Report, id string, sev migrate.Severity, objs ...string) {
	t.Helper()
	for _, f := range findingsByID(r)[id] {
		if f.Severity != sev {
			continue
		}
		all := true
		for _, o := range objs {
			all = all && slices.ContainsFunc(f.Objects, func(s string) bool { return strings.Contains(s, o) })
		}
		if all {
			if f.Fix == "" {
				t.Errorf("finding %s has no fix", id)
			}
			return
		}
	}
	t.Errorf("no %s finding %s naming %q; findings: %+v", sev, id, objs, findingsByID(r)[id])
}

// forget removes an object's finalizers (nothing here would) and deletes it
// at once, failing the test unless it is gone.
func forget(t *testing.T, what string, patch func(types.PatchType, []byte) error, del func(metav1.DeleteOptions) error) {
	t.Helper()
	if err := patch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("clean-up: removing %s's finalizers: %v", what, err)
	}
	if err := del(metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("clean-up: deleting %s: %v", what, err)
	}
}

func TestLeftoversAreReportedNotReady(t *testing.T) {
	c := testenv.Client(t)
	ctx := context.Background()
	sfx := suffix()
	bare, tainted := "mig-bare-"+sfx, "mig-tainted-"+sfx
	kcm := "kube-controller-manager-mig-" + sfx
	pvName, scName, svcName, ns := "mig-ebs-"+sfx, "mig-gp2-"+sfx, "mig-lb-"+sfx, "default"

	// A Node without providerID with beta labels only, and one still tainted uninitialized.
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: bare, Labels: map[string]string{
			"failure-domain.beta.kubernetes.io/zone": "us-east-1a", "failure-domain.beta.kubernetes.io/region": "us-east-1",
			"beta.kubernetes.io/instance-type": "m5.large"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: tainted, Labels: map[string]string{corev1.LabelTopologyZone: "us-east-1a"}},
			Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-0" + sfx,
				Taints: []corev1.Taint{{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule}}}},
	} {
		if _, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		name := n.Name
		t.Cleanup(func() {
			forget(t, "node "+name, func(pt types.PatchType, b []byte) error {
				_, err := c.CoreV1().Nodes().Patch(ctx, name, pt, b, metav1.PatchOptions{})
				return err
			}, func(o metav1.DeleteOptions) error { return c.CoreV1().Nodes().Delete(ctx, name, o) })
		})
	}
	// A kube-controller-manager mirror pod with an in-tree provider; bound
	// to a node so that nothing would schedule it (no scheduler runs anyway).
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: kcm, Namespace: "kube-system",
			Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "0123456789abcdef"},
			Labels:      map[string]string{"component": "kube-controller-manager", "tier": "control-plane"}},
		Spec: corev1.PodSpec{NodeName: tainted, Containers: []corev1.Container{{
			Name: "kube-controller-manager", Image: "registry.k8s.io/kube-controller-manager:v1.30.0",
			Command: []string{"kube-controller-manager", "--cloud-provider=aws", "--cloud-config=/etc/kubernetes/aws.conf", "--leader-elect=true"},
		}}},
	}
	if _, err := c.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		forget(t, "pod "+kcm, func(pt types.PatchType, b []byte) error {
			_, err := c.CoreV1().Pods("kube-system").Patch(ctx, kcm, pt, b, metav1.PatchOptions{})
			return err
		}, func(o metav1.DeleteOptions) error { return c.CoreV1().Pods("kube-system").Delete(ctx, kcm, o) })
	})
	// An in-tree EBS volume (the apiserver adds the pv-protection finalizer).
	createInTreePV(t, c, pvName, "10Gi", sfx)
	// An in-tree StorageClass.
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: scName}, Provisioner: "kubernetes.io/aws-ebs", Parameters: map[string]string{"type": "gp2"}}
	if _, err := c.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.StorageV1().StorageClasses().Delete(ctx, scName, metav1.DeleteOptions{}); err != nil {
			t.Errorf("clean-up: %v", err)
		}
	})
	// A LoadBalancer Service with AWS annotations and the service controller's finalizer.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: ns, Finalizers: []string{"service.kubernetes.io/load-balancer-cleanup"},
			Annotations: map[string]string{
				"service.beta.kubernetes.io/aws-load-balancer-type":     "nlb",
				"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": svcName}},
	}
	if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		forget(t, "service "+svcName, func(pt types.PatchType, b []byte) error {
			_, err := c.CoreV1().Services(ns).Patch(ctx, svcName, pt, b, metav1.PatchOptions{})
			return err
		}, func(o metav1.DeleteOptions) error { return c.CoreV1().Services(ns).Delete(ctx, svcName, o) })
	})
	// A Service of another load balancer class: skipped.
	classed := svc.DeepCopy()
	classed.Name, classed.Finalizers, classed.Spec.LoadBalancerClass = svcName+"-classed", nil, new(string)
	*classed.Spec.LoadBalancerClass = "example.com/other-lb"
	if _, err := c.CoreV1().Services(ns).Create(ctx, classed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CoreV1().Services(ns).Delete(ctx, classed.Name, metav1.DeleteOptions{}) })

	dir := t.TempDir()
	rep, failed := runCheck(t, "--write-leader-migration-config", dir)
	if !failed || rep.Ready || rep.Blocking == 0 {
		t.Fatalf("want NOT READY and exit status 1, got failed=%v ready=%v blocking=%d", failed, rep.Ready, rep.Blocking)
	}
	if !strings.HasPrefix(rep.ServerVersion, "v1.") {
		t.Errorf("server version %q", rep.ServerVersion)
	}
	expectFinding(t, rep, "node-without-provider-id", migrate.Blocking, bare)
	expectFinding(t, rep, "node-beta-labels-only", migrate.Warning,
		bare+" (lacks topology.kubernetes.io/zone, topology.kubernetes.io/region, node.kubernetes.io/instance-type)")
	expectFinding(t, rep, "node-uninitialized", migrate.Blocking, tainted)
	expectFinding(t, rep, "control-plane-in-tree-provider", migrate.Blocking, kcm+" (kube-controller-manager: --cloud-provider=aws)")
	expectFinding(t, rep, "pv-in-tree-plugin", migrate.Blocking, pvName)
	expectFinding(t, rep, "storageclass-in-tree-provisioner", migrate.Blocking, scName)
	expectFinding(t, rep, "lb-finalizer-no-controller", migrate.Warning, ns+"/"+svcName)
	expectFinding(t, rep, "lb-provider-annotations", migrate.Warning,
		ns+"/"+svcName+" (service.beta.kubernetes.io/aws-load-balancer-internal, service.beta.kubernetes.io/aws-load-balancer-type)")
	expectFinding(t, rep, "ccm-rbac-missing", migrate.Blocking, "ServiceAccount kube-system/cloud-controller-manager does not exist", "patch nodes/status")
	// The simulated Nodes have no kubelet: configz is skipped with an info finding.
	expectFinding(t, rep, "kubelet-configz-unreadable", migrate.Info, bare, tainted)
	for _, f := range rep.Findings {
		for _, o := range f.Objects {
			if strings.Contains(o, classed.Name) {
				t.Errorf("a Service with a loadBalancerClass was reported: %+v", f)
			}
		}
		if f.Fix == "" && f.Severity != migrate.Info {
			t.Errorf("finding without a fix: %+v", f)
		}
	}
	for _, f := range []string{"kcm.yaml", "ccm.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !strings.Contains(string(data), "kind: LeaderMigrationConfiguration") {
			t.Errorf("%s: %v\n%s", f, err, data)
		}
	}

	// The text report names them with their fixes.
	cmd := cli.NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"migrate", "check", "--kubeconfig", testenv.Kubeconfig(t), "--kubelet-timeout", "2s"})
	if err := cmd.ExecuteContext(ctx); err == nil {
		t.Error("text check of a NOT READY cluster succeeded")
	}
	for _, w := range []string{": NOT READY for an external cloud controller manager", "== Nodes ==", "[BLOCKING] Nodes without spec.providerID",
		"    - " + bare + "\n", "fix: Start their kubelets with --cloud-provider=external", "--cloud-provider=aws", "ebs.csi.aws.com",
		"kubectl apply -f deploy/ccm/serviceaccount.yaml -f deploy/ccm/rbac.yaml", "leaderName: cloud-provider-extraction-migration"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, out.String())
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("text report:\n%s", out.String())
	}
}

func TestCleanClusterIsReady(t *testing.T) {
	c := testenv.Client(t)
	ctx := context.Background()
	sfx := suffix()
	applyCCMRBAC(t, c)
	for i := range 2 {
		name := fmt.Sprintf("mig-ready-%s-%d", sfx, i)
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelTopologyZone: "zone-a", corev1.LabelTopologyRegion: "region-1", corev1.LabelInstanceTypeStable: "small",
			// The beta labels next to the GA ones are fine.
			"failure-domain.beta.kubernetes.io/zone": "zone-a"}},
			Spec: corev1.NodeSpec{ProviderID: "local://" + name}}
		if _, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}) })
	}
	// A CSI StorageClass and a ClusterIP Service are nothing to report.
	scName := "mig-csi-" + sfx
	if _, err := c.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: scName}, Provisioner: "ebs.csi.aws.com"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.StorageV1().StorageClasses().Delete(ctx, scName, metav1.DeleteOptions{}) })

	rep, failed := runCheck(t)
	if failed || !rep.Ready || rep.Blocking != 0 {
		t.Fatalf("want READY and exit status 0, got failed=%v ready=%v; findings: %+v", failed, rep.Ready, rep.Findings)
	}
	if ids := findingsByID(rep); ids["ccm-rbac-missing"] != nil || ids["node-without-provider-id"] != nil || ids["node-beta-labels-only"] != nil || ids["storageclass-in-tree-provisioner"] != nil {
		t.Errorf("unexpected findings: %+v", rep.Findings)
	}
	expectFinding(t, rep, "ccm-lease", migrate.Info)
	expectFinding(t, rep, "leader-migration-config", migrate.Info)
}

// applyCCMRBAC creates deploy/ccm's ServiceAccount and RBAC as typed
// objects and deletes them when the test ends.
func applyCCMRBAC(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"serviceaccount.yaml", "rbac.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, "deploy", "ccm", file))
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil || meta.Kind == "" {
				continue
			}
			del, err := create(ctx, c, meta.Kind, doc)
			if err != nil {
				t.Fatalf("%s %s: %v", file, meta.Kind, err)
			}
			t.Cleanup(func() {
				if err := del(); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("clean-up of %s: %v", meta.Kind, err)
				}
			})
		}
	}
}

// create creates one manifest document and returns its deletion.
func create(ctx context.Context, c kubernetes.Interface, kind string, doc []byte) (func() error, error) {
	exists := func(err error) error {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	opts := metav1.DeleteOptions{}
	switch kind {
	case "ServiceAccount":
		var o corev1.ServiceAccount
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return nil, err
		}
		_, err := c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		return func() error { return c.CoreV1().ServiceAccounts(o.Namespace).Delete(ctx, o.Name, opts) }, exists(err)
	case "ClusterRole":
		var o rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return nil, err
		}
		_, err := c.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		return func() error { return c.RbacV1().ClusterRoles().Delete(ctx, o.Name, opts) }, exists(err)
	case "ClusterRoleBinding":
		var o rbacv1.ClusterRoleBinding
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return nil, err
		}
		_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		return func() error { return c.RbacV1().ClusterRoleBindings().Delete(ctx, o.Name, opts) }, exists(err)
	case "Role":
		var o rbacv1.Role
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return nil, err
		}
		_, err := c.RbacV1().Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		return func() error { return c.RbacV1().Roles(o.Namespace).Delete(ctx, o.Name, opts) }, exists(err)
	case "RoleBinding":
		var o rbacv1.RoleBinding
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return nil, err
		}
		_, err := c.RbacV1().RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		return func() error { return c.RbacV1().RoleBindings(o.Namespace).Delete(ctx, o.Name, opts) }, exists(err)
	}
	return nil, fmt.Errorf("unexpected kind %s in deploy/ccm", kind)
}

// createInTreePV creates an in-tree EBS PersistentVolume (the apiserver adds
// the pv-protection finalizer) and removes it, finalizers and all, at the
// test's end.
func createInTreePV(t *testing.T, c kubernetes.Interface, pvName, size, sfx string) {
	t.Helper()
	ctx := context.Background()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: corev1.PersistentVolumeSpec{
		Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{
			VolumeID: "aws://us-east-1a/vol-0" + sfx, FSType: "ext4"}},
	}}
	if _, err := c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		forget(t, "pv "+pvName, func(pt types.PatchType, b []byte) error {
			_, err := c.CoreV1().PersistentVolumes().Patch(ctx, pvName, pt, b, metav1.PatchOptions{})
			return err
		}, func(o metav1.DeleteOptions) error { return c.CoreV1().PersistentVolumes().Delete(ctx, pvName, o) })
	})
}
