package devenv

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/tools"
)

// kcmArgs are the flags kube-controller-manager runs with in a cluster
// whose cloud controllers are Portside's: --cloud-provider=external, each
// controller with its own ServiceAccount, ServiceAccount tokens signed with
// the control plane's key, no serving port (nothing scrapes it here) and no
// leader election (one replica), a higher client rate. Node IPAM stays off: the CCM's gives the
// pod CIDRs.
func kcmArgs(kubeconfig, pki, serviceCIDR string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--cloud-provider=external",
		"--secure-port=0",
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + filepath.Join(pki, "sa.key"),
		"--root-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--allocate-node-cidrs=false",
		"--service-cluster-ip-range=" + serviceCIDR,
		// The user's own load is all this apiserver serves: a Deployment of
		// 1,000 pods should not wait on the default 20 requests/s.
		"--kube-api-qps=200", "--kube-api-burst=400",
	}
}

// startKCM runs kube-controller-manager from `make tools`, so namespaces,
// garbage collection, EndpointSlices and ServiceAccount tokens work as in a
// real cluster, and waits until its controllers act: the root CA ConfigMap
// is published into a namespace made for the check.
func startKCM(ctx context.Context, s *stack, env *environment) error {
	binDir, err := tools.BinDir()
	if err != nil {
		return err
	}
	bin, err := tools.Path(binDir, tools.KubeControllerManager)
	if err != nil {
		return err
	}
	logPath := filepath.Join(env.logs(), "kube-controller-manager.log")
	s.p.step("controllers", "starting kube-controller-manager --cloud-provider=external (log %s)", logPath)
	args := kcmArgs(env.kubeconfig(), filepath.Join(env.controlPlane(), "pki"), env.serviceCIDR())
	if env.realNodes {
		// Real kubelets' client certificates, by TLS bootstrap.
		args = append(args, "--cluster-signing-cert-file="+env.cp.CAFile(), "--cluster-signing-key-file="+env.cp.CAKeyFile(),
			// A powered-off machine's Node goes NotReady in 20 s, not 50:
			// the CCM's lifecycle controller then sees the shutdown.
			"--node-monitor-grace-period=20s")
	}
	if env.ccmBinary != "" || env.install == InstallPrepare {
		// A CCM built from k8s.io/cloud-provider alone has no node IPAM
		// (k/k's main adds it), and with --install=prepare no CCM may run
		// yet (version N of a migration had kube-controller-manager's):
		// kube-controller-manager's gives pod CIDRs.
		args = append(args, "--allocate-node-cidrs=true", "--cluster-cidr="+env.podCIDR())
	}
	run := func() (*proc.Process, error) {
		return proc.Start("kube-controller-manager", bin, args, nil, logPath)
	}
	p, err := run()
	if err != nil {
		return err
	}
	began := time.Now()
	if err := waitKCMActing(ctx, env, p); err != nil {
		p.Stop(10 * time.Second)
		return processError(err, p)
	}
	s.pushSupervised(supervise(s.p, "controllers", "kube-controller-manager", p, 10*time.Second, run))
	s.p.step("controllers", "kube-controller-manager acting (pid %d, %.1fs)", p.PID(), time.Since(began).Seconds())
	return nil
}

// waitKCMActing waits for kube-controller-manager's root-CA publisher to
// fill a fresh namespace: proof its controllers run with working
// credentials.
func waitKCMActing(ctx context.Context, env *environment, p *proc.Process) error {
	const probe = "portside-kcm-probe"
	ns := env.client.CoreV1().Namespaces()
	if _, err := ns.Get(ctx, probe, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := ns.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probe}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := env.client.CoreV1().ConfigMaps(probe).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err == nil {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("exited during start-up: %v", p.ExitErr())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("its controllers did not act within a minute (no kube-root-ca.crt in namespace %s)", probe)
		}
	}
}
