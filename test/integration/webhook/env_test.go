package webhook

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/portside-io/portside/deploy"
	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/webhook"
	"github.com/portside-io/portside/internal/webhooks/pvlabel"
	"github.com/portside-io/portside/pkg/providers/local"
)

// serveInProcess serves the built-in webhook with a certificate of the
// control plane's CA, as `portside webhook serve` would, until stop.
func serveInProcess(t *testing.T, c *localcloudtest.Cloud, policy string) (url string, stop func()) {
	t.Helper()
	cp := testenv.ControlPlane(t)
	cert, err := cp.IssueServingCert(fmt.Sprintf("webhook-%d", rand.Int64()), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	provider, err := local.NewFromConfig(local.Config{Endpoint: c.Endpoint, Token: c.Token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, errc, err := webhook.Serve(ctx, webhook.ServeOptions{
		BindAddress: "127.0.0.1", CertFile: cert.CertFile, KeyFile: cert.KeyFile,
		Webhooks: []webhook.Webhook{pvlabel.Webhook()},
		Context:  &webhook.Context{Cloud: provider, ProviderErrors: policy},
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			for range errc {
			}
		})
	}
	t.Cleanup(stop)
	return "https://" + addr + pvlabel.Path, stop
}

// sampleConfig is deploy/ccm/webhook.yaml's MutatingWebhookConfiguration
// as written, pointed at url (with the control plane's CA) instead of the
// in-cluster Service, under a name of the test's.
func sampleConfig(t *testing.T, url, failurePolicy string) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	mwc, err := deploy.PVLabelWebhookConfiguration(url, testenv.ControlPlane(t).CAPEM())
	if err != nil {
		t.Fatal(err)
	}
	mwc.Name = fmt.Sprintf("%s-%d", mwc.Name, rand.IntN(1e6))
	w := &mwc.Webhooks[0]
	// Tests share the apiserver: each one's webhook sees only its own PVs.
	w.ObjectSelector.MatchLabels = map[string]string{testLabel: mwc.Name}
	fp := admissionregistrationv1.FailurePolicyType(failurePolicy)
	w.FailurePolicy = &fp
	return mwc
}

// install registers mwc and waits until the apiserver calls it (a dry-run
// PV of a cloud volume comes back labeled, or, for a webhook that is down,
// the failure policy shows), then removes it when the test ends.
func install(t *testing.T, cs kubernetes.Interface, mwc *admissionregistrationv1.MutatingWebhookConfiguration, volumeID string, ready func(*corev1.PersistentVolume, error) bool) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), mwc.Name, metav1.DeleteOptions{})
	})
	testenv.Eventually(t, 30*time.Second, "the apiserver calling webhook "+mwc.Name, func() (bool, string) {
		pv, err := cs.CoreV1().PersistentVolumes().Create(ctx, cloudPV(mwc, "probe", volumeID), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return ready(pv, err), fmt.Sprintf("%v %v", err, pv)
	})
}

// testLabel ties a test's PVs to its webhook configuration.
const testLabel = "test.portside.io/webhook"

// cloudPV is a PV of a local-cloud volume, as a CSI provisioner writes it,
// for the test whose webhook configuration is mwc.
func cloudPV(mwc *admissionregistrationv1.MutatingWebhookConfiguration, name, volumeID string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: mwc.Name + "-" + name, Labels: map[string]string{testLabel: mwc.Name}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: local.CSIDriver, VolumeHandle: volumeID},
			},
		},
	}
}

// warnings collects the apiserver's warnings (a webhook's response
// warnings reach the client this way, as kubectl shows them).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

// clientWithWarnings is an admin client whose warnings are collected.
func clientWithWarnings(t *testing.T) (kubernetes.Interface, *warnings) {
	t.Helper()
	cfg := rest.CopyConfig(testenv.Config(t))
	w := &warnings{}
	cfg.WarningHandler = w
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, w
}
