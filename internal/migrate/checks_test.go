package migrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/internal/manager"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func node(name, providerID string, labels map[string]string, taints ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	for _, t := range taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: t, Effect: corev1.TaintEffectNoSchedule})
	}
	return n
}

// want checks a single finding: nil when id is "", else its ID, severity
// and objects.
func want(t *testing.T, f *Finding, id string, sev Severity, objects []string) {
	t.Helper()
	if id == "" {
		if f != nil {
			t.Fatalf("want no finding, got %+v", *f)
		}
		return
	}
	if f == nil {
		t.Fatalf("want finding %s, got none", id)
	}
	if f.ID != id || f.Severity != sev || !slices.Equal(f.Objects, objects) {
		t.Fatalf("got %s/%s %q, want %s/%s %q", f.ID, f.Severity, f.Objects, id, sev, objects)
	}
	if f.Fix == "" && f.Severity != Info {
		t.Fatalf("finding %s has no fix", f.ID)
	}
}

func TestNodesWithoutProviderID(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []corev1.Node
		id    string
		objs  []string
	}{
		{"none", nil, "", nil},
		{"all set", []corev1.Node{node("a", "aws:///i-1", nil)}, "", nil},
		{"some missing", []corev1.Node{node("a", "aws:///i-1", nil), node("b", "", nil), node("c", "", nil)}, "node-without-provider-id", []string{"b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) { want(t, NodesWithoutProviderID(tc.nodes), tc.id, Blocking, tc.objs) })
	}
}

func TestNodesWithBetaLabelsOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		id     string
		objs   []string
	}{
		{"no labels", nil, "", nil},
		{"GA only", map[string]string{corev1.LabelTopologyZone: "z"}, "", nil},
		{"beta and GA", map[string]string{betaZone: "z", corev1.LabelTopologyZone: "z", betaInstanceType: "m", corev1.LabelInstanceTypeStable: "m"}, "", nil},
		{"beta zone only", map[string]string{betaZone: "z"}, "node-beta-labels-only", []string{"n (lacks topology.kubernetes.io/zone)"}},
		{"all beta, one GA", map[string]string{betaZone: "z", betaRegion: "r", betaInstanceType: "m", corev1.LabelTopologyRegion: "r"}, "node-beta-labels-only",
			[]string{"n (lacks topology.kubernetes.io/zone, node.kubernetes.io/instance-type)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want(t, NodesWithBetaLabelsOnly([]corev1.Node{node("n", "x", tc.labels)}), tc.id, Warning, tc.objs)
		})
	}
}

func TestNodesUninitialized(t *testing.T) {
	tainted := []corev1.Node{node("a", "", nil, uninitTaint), node("b", "", nil, "other")}
	want(t, NodesUninitialized(nil, ""), "", "", nil)
	want(t, NodesUninitialized([]corev1.Node{node("b", "", nil, "other")}, ""), "", "", nil)
	want(t, NodesUninitialized(tainted, ""), "node-uninitialized", Blocking, []string{"a"})
	want(t, NodesUninitialized(tainted, "ccm-1"), "node-uninitialized", Warning, []string{"a"})
}

func pod(name string, mirror bool, command ...string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Command: command}}}}
	if mirror {
		p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
	}
	return p
}

func ids(fs []*Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.ID+"/"+string(f.Severity)+":"+strings.Join(f.Objects, ";"))
	}
	return out
}

func TestControlPlaneFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		want []string
	}{
		{"no pods", nil, nil},
		{"kcm aws", []corev1.Pod{pod("kube-controller-manager-cp1", true, "kube-controller-manager", "--cloud-provider=aws", "--cloud-config=/etc/aws.conf")},
			[]string{"control-plane-in-tree-provider/blocking:kube-controller-manager-cp1 (kube-controller-manager: --cloud-provider=aws)"}},
		{"apiserver gce, separate value", []corev1.Pod{pod("kube-apiserver-cp1", true, "kube-apiserver", "--cloud-provider", "gce")},
			[]string{"control-plane-in-tree-provider/blocking:kube-apiserver-cp1 (kube-apiserver: --cloud-provider=gce)"}},
		{"not a mirror pod", []corev1.Pod{pod("kube-controller-manager-cp1", false, "kube-controller-manager", "--cloud-provider=aws")}, nil},
		{"other static pod", []corev1.Pod{pod("etcd-cp1", true, "etcd", "--cloud-provider=aws")}, nil},
		{"external clean", []corev1.Pod{pod("kube-controller-manager-cp1", true, "kube-controller-manager", "--cloud-provider=external")}, nil},
		{"external with cloud-config", []corev1.Pod{pod("kube-controller-manager-cp1", true, "kube-controller-manager", "--cloud-provider=external", "--cloud-config=/c")},
			[]string{"control-plane-cloud-config/warning:kube-controller-manager-cp1 (kube-controller-manager: --cloud-config=/c)"}},
		{"external, controllers star", []corev1.Pod{pod("kube-controller-manager-cp1", true, "kube-controller-manager", "--cloud-provider=external", "--controllers=*,bootstrapsigner")},
			[]string{"kcm-external-cloud-controllers/info:kube-controller-manager-cp1 (--controllers=*,bootstrapsigner)"}},
		{"external, cloud controllers disabled", []corev1.Pod{pod("kube-controller-manager-cp1", true, "kube-controller-manager", "--cloud-provider=external",
			"--controllers=*,-cloud-node-lifecycle,-service,-route")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(ControlPlaneFlags(tc.pods)); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestControlPlaneFlagsReadsArgsAndLabel(t *testing.T) {
	p := pod("kcm", true)
	p.Labels = map[string]string{"component": "kube-controller-manager"}
	p.Spec.Containers[0].Args = []string{"--cloud-provider=openstack"}
	if got := ids(ControlPlaneFlags([]corev1.Pod{p})); len(got) != 1 || !strings.Contains(got[0], "--cloud-provider=openstack") {
		t.Fatalf("got %q", got)
	}
}

func TestKubeletCloudProviders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		probes []KubeletProbe
		want   []string
	}{
		{"none", nil, nil},
		{"external", []KubeletProbe{{Node: "a", Reported: true, CloudProvider: "external"}}, nil},
		{"in-tree", []KubeletProbe{{Node: "a", Reported: true, CloudProvider: "aws"}, {Node: "b", Reported: true}},
			[]string{"kubelet-in-tree-provider/blocking:a (cloudProvider=aws)"}},
		{"forbidden", []KubeletProbe{{Node: "a", Err: "forbidden"}}, []string{"kubelet-configz-unreadable/info:a: forbidden"}},
		{"unreported", []KubeletProbe{{Node: "a"}}, []string{"kubelet-cloud-provider-unreported/info:a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(KubeletCloudProviders(tc.probes)); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseConfigz(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want KubeletProbe
	}{
		{`{"kubeletconfig":{"cloudProvider":"gce","providerID":"x"}}`, KubeletProbe{Node: "n", Reported: true, CloudProvider: "gce"}},
		{`{"kubeletconfig":{"providerID":"x"}}`, KubeletProbe{Node: "n"}},
		{`not json`, KubeletProbe{Node: "n", Err: "configz answer is not a kubelet configuration"}},
	} {
		if got := parseConfigz("n", []byte(tc.raw)); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.raw, got, tc.want)
		}
	}
}

func pv(name string, src corev1.PersistentVolumeSource) corev1.PersistentVolume {
	return corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: src}}
}

func driver(name string) storagev1.CSIDriver {
	return storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func TestInTreeVolumes(t *testing.T) {
	ebs := pv("ebs", corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-1"}})
	gce := pv("gce", corev1.PersistentVolumeSource{GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "d"}})
	pwx := pv("pwx", corev1.PersistentVolumeSource{PortworxVolume: &corev1.PortworxVolumeSource{VolumeID: "p"}})
	csi := pv("csi", corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "v"}})
	for _, tc := range []struct {
		name    string
		pvs     []corev1.PersistentVolume
		drivers []storagev1.CSIDriver
		want    []string
	}{
		{"none", nil, nil, nil},
		{"csi only", []corev1.PersistentVolume{csi}, nil, nil},
		{"ebs without driver", []corev1.PersistentVolume{ebs, csi}, nil, []string{"pv-in-tree-plugin/blocking:ebs"}},
		{"ebs with driver, gce without", []corev1.PersistentVolume{ebs, gce}, []storagev1.CSIDriver{driver("ebs.csi.aws.com")},
			[]string{"pv-in-tree-plugin/info:ebs", "pv-in-tree-plugin/blocking:gce"}},
		{"portworx with driver", []corev1.PersistentVolume{pwx}, []storagev1.CSIDriver{driver("pxd.portworx.com")}, []string{"pv-in-tree-plugin/info:pwx"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(InTreeVolumes(tc.pvs, tc.drivers, 37)); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	if f := InTreeVolumes([]corev1.PersistentVolume{pwx}, nil, 31); !strings.Contains(f[0].Detail, "feature gate") {
		t.Errorf("portworx before GA: %q", f[0].Detail)
	}
	if f := InTreeVolumes([]corev1.PersistentVolume{ebs}, nil, 37); !strings.Contains(f[0].Fix, "ebs.csi.aws.com") {
		t.Errorf("fix does not name the driver: %q", f[0].Fix)
	}
}

func TestInTreeStorageClasses(t *testing.T) {
	sc := func(name, prov string) storagev1.StorageClass {
		return storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: prov}
	}
	for _, tc := range []struct {
		name    string
		classes []storagev1.StorageClass
		drivers []storagev1.CSIDriver
		want    []string
	}{
		{"none", nil, nil, nil},
		{"csi", []storagev1.StorageClass{sc("gp3", "ebs.csi.aws.com")}, nil, nil},
		{"aws-ebs without driver", []storagev1.StorageClass{sc("gp2", "kubernetes.io/aws-ebs"), sc("gp3", "ebs.csi.aws.com")}, nil,
			[]string{"storageclass-in-tree-provisioner/blocking:gp2"}},
		{"azure with drivers", []storagev1.StorageClass{sc("d", "kubernetes.io/azure-disk"), sc("f", "kubernetes.io/azure-file")},
			[]storagev1.CSIDriver{driver("disk.csi.azure.com"), driver("file.csi.azure.com")},
			[]string{"storageclass-in-tree-provisioner/info:d", "storageclass-in-tree-provisioner/info:f"}},
		{"vsphere and cinder", []storagev1.StorageClass{sc("v", "kubernetes.io/vsphere-volume"), sc("c", "kubernetes.io/cinder")}, nil,
			[]string{"storageclass-in-tree-provisioner/blocking:c", "storageclass-in-tree-provisioner/blocking:v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(InTreeStorageClasses(tc.classes, tc.drivers, 37)); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func lbService(name string, finalizer bool, class *string, annotations map[string]string) corev1.Service {
	s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: class}}
	if finalizer {
		s.Finalizers = []string{lbCleanupFinalizer}
	}
	return s
}

func TestLoadBalancerCleanupWithoutController(t *testing.T) {
	svcs := []corev1.Service{
		lbService("fin", true, nil, nil),
		lbService("nofin", false, nil, nil),
		lbService("classed", true, ptr.To("example.com/lb"), nil),
		{ObjectMeta: metav1.ObjectMeta{Name: "cip", Namespace: "ns", Finalizers: []string{lbCleanupFinalizer}}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}},
	}
	want(t, LoadBalancerCleanupWithoutController(svcs, ""), "lb-finalizer-no-controller", Warning, []string{"ns/fin"})
	want(t, LoadBalancerCleanupWithoutController(svcs, "ccm-0"), "", "", nil)
	want(t, LoadBalancerCleanupWithoutController(nil, ""), "", "", nil)
}

func TestLoadBalancerProviderAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  corev1.Service
		objs []string
	}{
		{"plain", lbService("a", false, nil, map[string]string{"example.com/x": "y"}), nil},
		{"aws", lbService("a", false, nil, map[string]string{
			"service.beta.kubernetes.io/aws-load-balancer-type":     "nlb",
			"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}),
			[]string{"ns/a (service.beta.kubernetes.io/aws-load-balancer-internal, service.beta.kubernetes.io/aws-load-balancer-type)"}},
		{"gce", lbService("a", false, nil, map[string]string{"cloud.google.com/load-balancer-type": "Internal"}), []string{"ns/a (cloud.google.com/load-balancer-type)"}},
		{"azure", lbService("a", false, nil, map[string]string{"service.beta.kubernetes.io/azure-load-balancer-internal": "true"}),
			[]string{"ns/a (service.beta.kubernetes.io/azure-load-balancer-internal)"}},
		{"class set: not ours", lbService("a", false, ptr.To("x"), map[string]string{"cloud.google.com/load-balancer-type": "Internal"}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := ""
			if tc.objs != nil {
				id = "lb-provider-annotations"
			}
			want(t, LoadBalancerProviderAnnotations([]corev1.Service{tc.svc}), id, Warning, tc.objs)
		})
	}
}

func TestCCMAccess(t *testing.T) {
	all := CCMAccessChecks()
	for i := range all {
		all[i].Allowed = true
	}
	want(t, CCMAccess(true, all), "", "", nil)
	some := slices.Clone(all)
	some[2].Allowed = false
	some[8].Allowed, some[8].Err = false, "forbidden"
	want(t, CCMAccess(true, some), "ccm-rbac-missing", Blocking, []string{"patch nodes/status",
		"update leases.coordination.k8s.io kube-system/cloud-controller-manager (not checked: forbidden)"})
	want(t, CCMAccess(false, all), "ccm-rbac-missing", Blocking, []string{"ServiceAccount kube-system/cloud-controller-manager does not exist"})
	if s := (AccessCheck{Verb: "create", Resource: "leases", Group: "coordination.k8s.io", Namespace: "kube-system"}).String(); s != "create leases.coordination.k8s.io in kube-system" {
		t.Errorf("String: %q", s)
	}
}

func lease(name, holder string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}, Spec: coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: renewed}}}
}

func TestActiveCCMAndLeases(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leases map[string]*coordinationv1.Lease
		active string
		want   []string
	}{
		{"none", nil, "", []string{"ccm-lease/info:"}},
		{"fresh ccm", map[string]*coordinationv1.Lease{LeaseCCM: lease(LeaseCCM, "ccm-a", now.Add(-5*time.Second))}, "ccm-a",
			[]string{"ccm-lease/info:kube-system/cloud-controller-manager: held by ccm-a, renewed 5s ago"}},
		{"stale ccm", map[string]*coordinationv1.Lease{LeaseCCM: lease(LeaseCCM, "ccm-a", now.Add(-time.Hour))}, "",
			[]string{"ccm-lease/info:kube-system/cloud-controller-manager: held by ccm-a, renewed 1h0m0s ago (stale)"}},
		{"migration", map[string]*coordinationv1.Lease{
			LeaseKCM:       lease(LeaseKCM, "cp1_x", now.Add(-time.Second)),
			LeaseMigration: lease(LeaseMigration, "cp2_y", now.Add(-time.Second))}, "cp2_y",
			[]string{"ccm-lease/info:", "kcm-lease/info:kube-system/kube-controller-manager: held by cp1_x, renewed 1s ago",
				"migration-lease/info:kube-system/cloud-provider-extraction-migration: held by cp2_y, renewed 1s ago"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if a := ActiveCCM(tc.leases, now); a != tc.active {
				t.Errorf("ActiveCCM = %q, want %q", a, tc.active)
			}
			if got := ids(CCMLeases(tc.leases, now)); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLeaderMigrationConfigs(t *testing.T) {
	files := LeaderMigrationConfigs()
	dir := t.TempDir()
	paths, err := files.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(paths, []string{filepath.Join(dir, "kcm.yaml"), filepath.Join(dir, "ccm.yaml")}) {
		t.Fatalf("paths %q", paths)
	}
	for path, component := range map[string]string{paths[0]: "kube-controller-manager", paths[1]: "cloud-controller-manager"} {
		// The CCM itself must accept the file.
		c, err := manager.LoadMigrationConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		if c.APIVersion != "controllermanager.config.k8s.io/v1" || c.Kind != "LeaderMigrationConfiguration" || c.LeaderName != "cloud-provider-extraction-migration" {
			t.Errorf("%s: %+v", path, c)
		}
		var names []string
		for _, l := range c.ControllerLeaders {
			names = append(names, l.Name)
			if l.Component != component {
				t.Errorf("%s: %s has component %s, want %s", path, l.Name, l.Component, component)
			}
		}
		if !slices.Equal(names, []string{"cloud-node-lifecycle", "route", "service"}) {
			t.Errorf("%s: controllers %q", path, names)
		}
		data, _ := os.ReadFile(path)
		if strings.Contains(string(data), "resourceLock") {
			t.Errorf("%s: v1 has no resourceLock:\n%s", path, data)
		}
	}
}

func TestEvaluateAndPrint(t *testing.T) {
	var nodes []corev1.Node
	for i := range 13 {
		nodes = append(nodes, node("node-"+string(rune('a'+i)), "", nil))
	}
	s := &Snapshot{Server: "https://x", ServerVersion: "v1.37.2", Minor: 37, Nodes: nodes, Now: now, ServiceAccount: true,
		Errors: map[string]string{"services": "forbidden"}}
	for _, c := range CCMAccessChecks() {
		c.Allowed = true
		s.Access = append(s.Access, c)
	}
	r := Evaluate(s)
	if r.Ready || r.Blocking != 2 {
		t.Fatalf("ready=%v blocking=%d: %+v", r.Ready, r.Blocking, r.Findings)
	}
	var buf bytes.Buffer
	if err := Print(&buf, r, "text"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, w := range []string{"Kubernetes v1.37.2): NOT READY", "== Cluster access ==", "[BLOCKING] Could not read services",
		"== Nodes ==", "- node-j\n", "- and 3 more\n", "fix: Start their kubelets with --cloud-provider=external",
		"kind: LeaderMigrationConfiguration", "component: cloud-controller-manager"} {
		if !strings.Contains(out, w) {
			t.Errorf("text lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "node-k") {
		t.Errorf("text lists more than %d objects:\n%s", MaxObjectsShown, out)
	}
	// Areas in order: access before nodes before leader migration.
	if strings.Index(out, "== Cluster access") > strings.Index(out, "== Nodes") || strings.Index(out, "== Nodes") > strings.Index(out, "== Leader migration") {
		t.Errorf("areas out of order:\n%s", out)
	}
	buf.Reset()
	if err := Print(&buf, r, "json"); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Ready || len(back.Findings) != len(r.Findings) || len(back.Findings[1].Objects) != 13 || back.LeaderMigration.CCM.LeaderName == "" ||
		len(back.LeaderMigrationPlan) != len(LeaderMigrationPlan()) {
		t.Errorf("json round trip: %+v", back)
	}
	if err := Print(&buf, r, "yaml"); err == nil {
		t.Error("yaml output accepted")
	}

	clean := &Snapshot{ServerVersion: "v1.37.2", Now: now, ServiceAccount: true, Access: s.Access,
		Nodes: []corev1.Node{node("a", "local://a", map[string]string{corev1.LabelTopologyZone: "z"})}}
	if r := Evaluate(clean); !r.Ready || r.Warnings != 0 {
		t.Errorf("clean snapshot: ready=%v %+v", r.Ready, r.Findings)
	}
}

func TestMigrationLeaseAccess(t *testing.T) {
	allow := func(denied ...string) []SubjectAccess {
		checks := MigrationAccessChecks()
		for i := range checks {
			checks[i].Allowed = !slices.Contains(denied, checks[i].Subject+" "+checks[i].Verb)
		}
		return checks
	}
	lease := "leases.coordination.k8s.io kube-system/cloud-provider-extraction-migration"
	errored := allow()
	errored[0].Err = "forbidden"
	for _, tc := range []struct {
		name    string
		checks  []SubjectAccess
		started bool
		id      string
		sev     Severity
		objs    []string
	}{
		{"all allowed", allow(), false, "", "", nil},
		{"not checked", nil, false, "", "", nil},
		{"kcm lacks update, before the migration", allow(KCMUser + " update"), false, "migration-lease-access", Warning,
			[]string{KCMUser + ": update " + lease}},
		{"both lack get, migration under way", allow(KCMUser+" get", CCMSubjectName+" get"), true, "migration-lease-access", Blocking,
			[]string{KCMUser + ": get " + lease, CCMSubjectName + ": get " + lease}},
		{"review failed", errored, false, "migration-lease-access", Warning,
			[]string{KCMUser + ": get " + lease + " (not checked: forbidden)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want(t, MigrationLeaseAccess(tc.checks, tc.started), tc.id, tc.sev, tc.objs)
		})
	}
	// Both components, get and update each.
	var got []string
	for _, c := range MigrationAccessChecks() {
		got = append(got, c.Subject+" "+c.String())
	}
	if !slices.Equal(got, []string{KCMUser + " get " + lease, KCMUser + " update " + lease, CCMSubjectName + " get " + lease, CCMSubjectName + " update " + lease}) {
		t.Errorf("checks %q", got)
	}
}

func TestKCMLeaderMigrationFlags(t *testing.T) {
	kcm := func(name string, args ...string) corev1.Pod {
		return pod("kube-controller-manager-"+name, true, append([]string{"kube-controller-manager"}, args...)...)
	}
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		want []string
	}{
		{"no mirror pod", []corev1.Pod{pod("kube-controller-manager-x", false, "kube-controller-manager", "--leader-elect=false")},
			[]string{"kcm-flags-unseen/info:"}},
		{"version N as upstream wants", []corev1.Pod{kcm("a", "--cloud-provider=aws", "--leader-elect=true", "--enable-leader-migration", "--leader-migration-config=/etc/leadermigration.conf")}, nil},
		{"leader-elect defaults to true", []corev1.Pod{kcm("a", "--cloud-provider=gce", "--enable-leader-migration")}, nil},
		{"version N+1 as upstream wants", []corev1.Pod{kcm("b", "--cloud-provider=external", "--leader-elect")}, nil},
		{"leader election off", []corev1.Pod{kcm("a", "--cloud-provider=aws", "--leader-elect=false")},
			[]string{"kcm-leader-elect-off/warning:kube-controller-manager-a"}},
		{"leader election off under migration", []corev1.Pod{kcm("a", "--cloud-provider=aws", "--leader-elect=false", "--enable-leader-migration")},
			[]string{"kcm-leader-elect-off/blocking:kube-controller-manager-a"}},
		{"the last flag wins", []corev1.Pod{kcm("a", "--leader-elect=false", "--leader-elect=true", "--cloud-provider=aws")}, nil},
		// The bug of the old plan: kube-controller-manager N+1 given ccm.yaml.
		{"version N+1 with leader migration", []corev1.Pod{kcm("b", "--cloud-provider=external", "--enable-leader-migration", "--leader-migration-config=/etc/leadermigration.conf")},
			[]string{"kcm-external-leader-migration/blocking:kube-controller-manager-b (--cloud-provider=external --enable-leader-migration)"}},
		{"no provider (v1.31+) with leader migration", []corev1.Pod{kcm("c", "--enable-leader-migration=true")},
			[]string{"kcm-external-leader-migration/blocking:kube-controller-manager-c (--cloud-provider= --enable-leader-migration)"}},
		{"leader migration explicitly off", []corev1.Pod{kcm("c", "--cloud-provider=external", "--enable-leader-migration=false")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := KCMLeaderMigrationFlags(tc.pods)
			if got := ids(fs); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for _, f := range fs {
				if f.Fix == "" {
					t.Errorf("%s has no fix", f.ID)
				}
			}
		})
	}
	// A sidecar's flags are not kube-controller-manager's.
	p := kcm("s", "--cloud-provider=aws")
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "proxy", Args: []string{"--leader-elect=false"}})
	if got := ids(KCMLeaderMigrationFlags([]corev1.Pod{p})); got != nil {
		t.Errorf("sidecar read: %q", got)
	}
}

func csiNode(name string, migrated string, drivers ...string) storagev1.CSINode {
	n := storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if migrated != "" {
		n.Annotations = map[string]string{corev1.MigratedPluginsAnnotationKey: migrated}
	}
	for _, d := range drivers {
		n.Spec.Drivers = append(n.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: name})
	}
	return n
}

func TestCSINodeReadiness(t *testing.T) {
	ebsPV := []corev1.PersistentVolume{pv("ebs", corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-1"}})}
	gp2 := []storagev1.StorageClass{{ObjectMeta: metav1.ObjectMeta{Name: "gp2"}, Provisioner: "kubernetes.io/aws-ebs"}}
	nodes := []corev1.Node{node("a", "", nil), node("b", "", nil), node("c", "", nil)}
	ready := []storagev1.CSINode{
		csiNode("a", "kubernetes.io/aws-ebs,kubernetes.io/gce-pd", "ebs.csi.aws.com"),
		csiNode("b", "kubernetes.io/aws-ebs", "other.csi.example.com", "ebs.csi.aws.com"),
		csiNode("c", "kubernetes.io/gce-pd,kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
	}
	for _, tc := range []struct {
		name     string
		csiNodes []storagev1.CSINode
		pvs      []corev1.PersistentVolume
		classes  []storagev1.StorageClass
		want     []string
	}{
		{"no in-tree volume", nil, nil, []storagev1.StorageClass{{Provisioner: "ebs.csi.aws.com"}}, nil},
		{"every node ready", ready, ebsPV, nil, nil},
		{"class only, every node ready", ready, nil, gp2, nil},
		{"a node without CSINode, one without the driver, one not migrated", []storagev1.CSINode{
			csiNode("b", "", "other.csi.example.com"), csiNode("c", "kubernetes.io/gce-pd", "ebs.csi.aws.com")}, ebsPV, gp2,
			[]string{"csi-driver-not-on-nodes/blocking:a (no CSINode);b (CSINode drivers: [other.csi.example.com]);" +
				"c (ebs.csi.aws.com registered; kubernetes.io/aws-ebs not in annotation storage.alpha.kubernetes.io/migrated-plugins)"}},
		{"two plugins: only the unready one", ready, append(ebsPV, pv("pd", corev1.PersistentVolumeSource{GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "d"}})), nil,
			[]string{"csi-driver-not-on-nodes/blocking:a (CSINode drivers: [ebs.csi.aws.com]);b (CSINode drivers: [other.csi.example.com, ebs.csi.aws.com]);c (CSINode drivers: [ebs.csi.aws.com])"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := CSINodeReadiness(nodes, tc.csiNodes, tc.pvs, tc.classes)
			if got := ids(fs); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for _, f := range fs {
				if f.Fix == "" || !strings.Contains(f.Title, "ebs.csi.aws.com") && !strings.Contains(f.Title, "pd.csi.storage.gke.io") {
					t.Errorf("finding %+v", f)
				}
			}
		})
	}
}

// TestLeaderMigrationPlan: upstream's steps in upstream's order, each file
// with the component upstream gives it, and kube-controller-manager N+1
// never told to enable leader migration.
func TestLeaderMigrationPlan(t *testing.T) {
	steps := LeaderMigrationPlan()
	var titles []string
	for _, s := range steps {
		titles = append(titles, s.Title)
	}
	order := []string{"Before you begin", "Grant access to the migration lease", "Initial leader migration configuration", "Deploy the cloud-controller-manager",
		"Upgrade the control plane", "Rollback", "Disable leader migration", "Default configuration"}
	if len(titles) != len(order) {
		t.Fatalf("steps %q", titles)
	}
	for i, w := range order {
		if !strings.Contains(titles[i], w) {
			t.Errorf("step %d is %q, want %q", i+1, titles[i], w)
		}
	}
	text := func(s PlanStep) string { return strings.Join(s.Actions, "\n") }
	if !strings.Contains(text(steps[0]), "--leader-elect=true") {
		t.Errorf("prerequisites lack leader election:\n%s", text(steps[0]))
	}
	// Version N is one with the in-tree controllers, and a newer KCM given
	// leader migration is called out (test/e2e shows v1.37 exiting).
	if !strings.Contains(text(steps[0]), "v1.30 or older") || !strings.Contains(text(steps[0]), "is already registered") || !strings.Contains(text(steps[0]), "kcm-external-leader-migration") {
		t.Errorf("prerequisites do not say which kube-controller-manager is version N:\n%s", text(steps[0]))
	}
	for _, role := range []string{"system::leader-locking-kube-controller-manager", "system::leader-locking-cloud-controller-manager"} {
		if !strings.Contains(text(steps[1]), "role '"+role+"' --type=json") || !strings.Contains(text(steps[1]), `"resourceNames":["cloud-provider-extraction-migration"],"verbs":["create","list","get","update"]`) {
			t.Errorf("grant step lacks %s's patch:\n%s", role, text(steps[1]))
		}
	}
	if !slices.Equal(steps[2].Files, []string{"kcm.yaml"}) || !strings.Contains(text(steps[2]), "--enable-leader-migration --leader-migration-config=/etc/leadermigration.conf") ||
		!strings.Contains(text(steps[2]), "restart kube-controller-manager on each node") {
		t.Errorf("step 3: %+v", steps[2])
	}
	deploy := text(steps[3])
	if !slices.Equal(steps[3].Files, []string{"ccm.yaml"}) || !strings.Contains(deploy, "kube-controller-manager --cloud-provider=external") ||
		!strings.Contains(deploy, "MUST NOT have leader migration enabled") || !strings.Contains(deploy, "cloud-node") || !strings.Contains(deploy, "webhooks") {
		t.Errorf("step 4:\n%s", deploy)
	}
	// The old plan's error: a line telling kube-controller-manager with an
	// external provider to enable leader migration.
	for _, s := range steps {
		for _, a := range s.Actions {
			if strings.Contains(a, "--cloud-provider=external --enable-leader-migration") {
				t.Errorf("step %q tells KCM N+1 to enable leader migration: %s", s.Title, a)
			}
		}
	}
	if !slices.Equal(steps[5].Files, []string{"kcm.yaml"}) || !strings.Contains(text(steps[5]), "replacing one node of version N+1 each time") {
		t.Errorf("rollback: %+v", steps[5])
	}
	if !strings.Contains(text(steps[6]), "remove --enable-leader-migration and --leader-migration-config from the cloud-controller-manager") {
		t.Errorf("disable: %+v", steps[6])
	}
	// Printed in order, with the files.
	var buf bytes.Buffer
	if err := Print(&buf, Evaluate(&Snapshot{Now: now}), "text"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	last := 0
	for i, w := range titles {
		at := strings.Index(out, fmt.Sprintf("%d. %s", i+1, w))
		if at < last {
			t.Fatalf("step %d %q missing or out of order:\n%s", i+1, w, out)
		}
		last = at
	}
	for _, w := range []string{"[needs kcm.yaml]", "[needs ccm.yaml]", "# kcm.yaml: kube-controller-manager of version N only", "never kube-controller-manager N+1"} {
		if !strings.Contains(out, w) {
			t.Errorf("text lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "--cloud-provider=external --enable-leader-migration") {
		t.Errorf("text tells KCM N+1 to enable leader migration:\n%s", out)
	}
}
