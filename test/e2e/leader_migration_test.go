package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

const ccmIDConst = "portside-ccm-migration"

// TestLeaderMigrationFromKubeControllerManager: a real kube-controller-manager
// v1.37.2 and `portside ccm` with leader migration on the same
// LeaderMigrationConfiguration. KCM takes its own lease, then the migration
// lease. (KCM 1.37 then exits: building the migrated controllers' context
// fails with `informer name "kube-controller-manager" is already
// registered`, an upstream bug; it never releases the lease.) While KCM's
// migration lease is valid, the CCM runs only its own controllers (a node is
// initialized) and not the migrated ones (a LoadBalancer Service gets
// nothing); once it expires, the CCM takes the migration lease and the
// Service gets its load balancer.
func TestLeaderMigrationFromKubeControllerManager(t *testing.T) {
	bin, _ := buildPortside(t)
	binDir, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kcmBin, err := tools.Path(binDir, tools.KubeControllerManager)
	if err != nil {
		t.Fatal(err)
	}
	client := testenv.Client(t)
	ctx := context.Background()
	lc := localcloudtest.Start(t)
	dir := t.TempDir()
	cloudCfg := filepath.Join(dir, "cloud.yaml")
	if err := os.WriteFile(cloudCfg, fmt.Appendf(nil, "endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	// Names of this run's own: the test passes when repeated (-count=N),
	// whatever an earlier run left in the shared apiserver.
	run := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	migrationLease := "e2e-extraction-migration-" + run
	ccmLease, kcmOwnLease, nodeName := "e2e-migration-ccm-"+run, "e2e-kcm-"+run, "lm-node-"+run
	lmCfg := filepath.Join(dir, "leader-migration.yaml")
	if err := os.WriteFile(lmCfg, []byte(`apiVersion: controllermanager.config.k8s.io/v1
kind: LeaderMigrationConfiguration
leaderName: `+migrationLease+`
controllerLeaders:
  - name: route-controller
    component: "*"
  - name: service-controller
    component: "*"
  - name: cloud-node-lifecycle-controller
    component: "*"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	migration := []string{"--enable-leader-migration", "--leader-migration-config=" + lmCfg}
	// Long enough to see the CCM wait for it: the CCM starts, takes its own
	// lease and initializes a node within it, with minWindow to spare, on a
	// loaded machine too.
	const kcmLease = 15 * time.Second
	saKey := filepath.Join(testenv.ControlPlane(t).Dir(), "pki", "sa.key")
	kcm, err := proc.Start("kube-controller-manager", kcmBin, append([]string{"--kubeconfig=" + testenv.Kubeconfig(t),
		"--secure-port=0", "--controllers=serviceaccount-token-controller", // KCM 1.37 has no cloud controllers left; it still holds the migration lease
		"--service-account-private-key-file=" + saKey, "--leader-elect=true", "--leader-elect-resource-name=" + kcmOwnLease, "--leader-elect-lease-duration=" + kcmLease.String(),
		"--leader-elect-renew-deadline=8s", "--leader-elect-retry-period=500ms"}, migration...), nil, filepath.Join(dir, "kcm.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer kcm.Stop(5 * time.Second)

	holder := func(name string) string {
		l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	wait := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s\nkcm log:\n%s", what, kcm.LogTail(15))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wait("KCM to hold the migration lease", time.Minute, func() bool { return holder(migrationLease) != "" })
	kcmID := holder(migrationLease)
	lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, migrationLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expires := lease.Spec.RenewTime.Add(kcmLease)
	t.Logf("kube-controller-manager %s holds %s until %s", kcmID, migrationLease, expires.Format(time.TimeOnly))

	// The Service and the node exist before the CCM starts, so the check
	// below covers the CCM from its first moment: a CCM that ran the
	// migrated service controller without the migration lease would serve
	// the Service as soon as its controllers start.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "leader-migration-" + run}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Runs last: the Service (finalizer released by the CCM, below) goes
	// with it.
	defer func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) }()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb", Namespace: ns.Name}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "x"},
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
	}}
	if _, err := client.CoreV1().Services(ns.Name).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: nodeName, Zone: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	sim := nodesim.New(client, 1)
	if err := sim.Register(ctx, []nodesim.NodeSpec{{Name: nodeName}}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sim.Delete(context.Background(), []string{nodeName}) }()

	const ccmID = ccmIDConst
	ccm, err := proc.Start("ccm", bin, append([]string{"ccm", "--cloud-provider=local", "--cloud-config=" + cloudCfg,
		"--kubeconfig=" + testenv.Kubeconfig(t), "--secure-port=0", "--bind-address=127.0.0.1",
		"--leader-elect-identity=" + ccmID, "--leader-elect-resource-name=" + ccmLease,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}, migration...), nil, filepath.Join(dir, "ccm.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer ccm.Stop(5 * time.Second)
	// Deferred after the CCM's Stop, so it runs first: the CCM deletes the
	// load balancer and releases the Service.
	defer func() {
		_ = client.CoreV1().Services(ns.Name).Delete(context.Background(), "lb", metav1.DeleteOptions{})
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := client.CoreV1().Services(ns.Name).Get(context.Background(), "lb", metav1.GetOptions{}); err != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	ingress := func() bool {
		s, err := client.CoreV1().Services(ns.Name).Get(ctx, "lb", metav1.GetOptions{})
		return err == nil && len(s.Status.LoadBalancer.Ingress) > 0
	}
	initialized := func() bool {
		n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil && n.Spec.ProviderID != ""
	}

	// While KCM's migration lease is valid: the CCM's own controllers run
	// (it holds its own lease and initializes the node) and the migrated
	// service controller does not (no ingress, KCM still the holder).
	var running time.Time // when the CCM was first seen running its own controllers
	for time.Until(expires) > time.Second {
		if ingress() || holder(migrationLease) != kcmID {
			t.Fatalf("while KCM's migration lease is valid the CCM must not serve load balancers (ingress %v, holder %q)\n%s", ingress(), holder(migrationLease), ccm.LogTail(20))
		}
		if running.IsZero() && holder(ccmLease) == ccmID && initialized() {
			running = time.Now()
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The check above means something only if it watched a running CCM for
	// a while: long enough for a wrongly started service controller to
	// serve the Service (it does within a second on the local cloud).
	const minWindow = 3 * time.Second
	switch window := expires.Add(-time.Second).Sub(running); {
	case running.IsZero():
		t.Fatalf("KCM's migration lease (%v) expired before the CCM held its own lease and initialized %s: no window to check that it waits (raise kcmLease)\n%s",
			kcmLease, nodeName, ccm.LogTail(20))
	case window < minWindow:
		t.Fatalf("only %v of KCM's migration lease was left once the CCM ran its own controllers, want at least %v to check that it waits (raise kcmLease)", window.Round(10*time.Millisecond), minWindow)
	default:
		t.Logf("the CCM ran its own controllers without serving the Service for %v of KCM's migration lease", window.Round(10*time.Millisecond))
	}

	// KCM goes away (if the upstream bug above is ever fixed, it is still
	// running and renewing: stop it) and its migration lease expires: the
	// CCM takes it and runs the migrated controllers.
	kcm.Kill()
	if l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, migrationLease, metav1.GetOptions{}); err == nil && l.Spec.RenewTime != nil && *l.Spec.HolderIdentity == kcmID {
		expires = l.Spec.RenewTime.Add(kcmLease)
	}
	wait("the CCM to take the migration lease", 30*time.Second, func() bool { return holder(migrationLease) == ccmID })
	if early := time.Until(expires); early > 0 {
		t.Fatalf("the CCM took the migration lease %v before it expired", early)
	}
	wait("the LoadBalancer Service to get its ingress", 30*time.Second, ingress)
	t.Logf("migration lease taken %v after it expired; load balancer served", time.Since(expires).Round(100*time.Millisecond))
	if holder(ccmLease) != ccmID {
		t.Fatal("the CCM lost its own lease")
	}
	select {
	case <-ccm.Done():
		t.Fatalf("the CCM exited: %v\n%s", ccm.ExitErr(), ccm.LogTail(20))
	default:
	}
}
