package webhook

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// TestWebhookDown: with the webhook unreachable, failurePolicy Ignore
// creates the PV without topology, and Fail (the sample's) refuses it with
// the apiserver's message.
func TestWebhookDown(t *testing.T) {
	ctx := context.Background()
	cs, _ := clientWithWarnings(t)
	c := localcloudtest.Start(t)
	vol := createVolume(t, c, "data", "zone-a")
	for _, policy := range []string{"Ignore", "Fail"} {
		t.Run(policy, func(t *testing.T) {
			url, stop := serveInProcess(t, c, "deny")
			mwc := sampleConfig(t, url, policy)
			install(t, cs, mwc, vol, labeled)
			stop()
			pv, err := cs.CoreV1().PersistentVolumes().Create(ctx, cloudPV(mwc, "pv", vol), metav1.CreateOptions{})
			if policy == "Ignore" {
				if err != nil || pv.Labels[zoneKey] != "" {
					t.Fatalf("Ignore: %v, labels %v", err, pv.Labels)
				}
				_ = cs.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
				return
			}
			if err == nil || !strings.Contains(err.Error(), `failed calling webhook "persistent-volume-label.ccm.portside.io"`) {
				t.Fatalf("Fail: want the apiserver's refusal, got %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestProviderErrorsPolicy: when the cloud fails, --pv-label-on-provider-error
// decides: deny refuses the PV with a message saying why and what to do;
// admit creates it without topology and warns.
func TestProviderErrorsPolicy(t *testing.T) {
	ctx := context.Background()
	cs, warned := clientWithWarnings(t)
	for _, policy := range []string{"deny", "admit"} {
		t.Run(policy, func(t *testing.T) {
			c := localcloudtest.Start(t)
			vol := createVolume(t, c, "data", "zone-a")
			url, _ := serveInProcess(t, c, policy)
			mwc := sampleConfig(t, url, "Fail")
			install(t, cs, mwc, vol, labeled)
			if err := c.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "GET", PathPrefix: "/v1/volumes", ErrorRate: 1}}}); err != nil {
				t.Fatal(err)
			}
			warned.take()
			pv, err := cs.CoreV1().PersistentVolumes().Create(ctx, cloudPV(mwc, "pv", vol), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			w := strings.Join(warned.take(), "\n")
			switch policy {
			case "deny":
				if err == nil || !strings.Contains(err.Error(), "pv-label-on-provider-error") {
					t.Fatalf("deny: want a refusal naming the flag, got %v (%v)", err, pv)
				}
				t.Logf("refused: %v", err)
			case "admit":
				if err != nil || pv.Labels[zoneKey] != "" || w == "" {
					t.Fatalf("admit: %v, labels %v, warnings %q", err, pv.Labels, w)
				}
				t.Logf("warned: %s", w)
			}
		})
	}
}
