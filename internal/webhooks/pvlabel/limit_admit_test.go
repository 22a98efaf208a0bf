package pvlabel

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/portside-io/portside/internal/webhook"
	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/providers/local"
)

// countingVolumes counts the provider calls.
type countingVolumes struct{ calls atomic.Int32 }

func (c *countingVolumes) VolumeTopology(context.Context, *corev1.PersistentVolume) (*cloud.VolumeTopology, error) {
	c.calls.Add(1)
	return topology("r1", "zone-a"), nil
}

// TestAdmitRateLimited: a burst of 2 at 2 QPS. Each step is one request;
// the table says whether the cloud is asked and what the apiserver gets.
func TestAdmitRateLimited(t *testing.T) {
	plain := mustJSON(t, csiPV("pv-1", nil))
	handLabeled := mustJSON(t, csiPV("pv-1", map[string]string{gaZone: "zone-x", gaRegion: "r1"}))
	provisioned := csiPV("pv-1", map[string]string{gaZone: "zone-a", gaRegion: "r1"})
	provisioned.Annotations = map[string]string{AnnProvisionedBy: local.CSIDriver}
	provisionedRaw := mustJSON(t, provisioned)
	update := createPV(plain)
	update.Operation = admissionv1.Update

	steps := []struct {
		name      string
		advance   time.Duration // before the request
		req       *admissionv1.AdmissionRequest
		cloudCall bool
		code      int32 // 0: allowed
		outcome   string
		warn      string
	}{
		{name: "first: within the burst", req: createPV(plain), cloudCall: true, outcome: outcomeLabeled},
		{name: "second: within the burst", req: createPV(plain), cloudCall: true, outcome: outcomeLabeled},
		{name: "third: over the limit, refused 429 without a cloud call", req: createPV(plain), code: http.StatusTooManyRequests, outcome: outcomeRateLimitedDenied},
		{name: "hand-labelled PV over the limit: refused too", req: createPV(handLabeled), code: http.StatusTooManyRequests, outcome: outcomeRateLimitedDenied},
		{name: "provisioner's PV over the limit: its labels, unchecked", req: createPV(provisionedRaw), outcome: outcomeRateLimitedAdmitted, warn: "without checking them with the cloud"},
		{name: "not a PV CREATE: costs nothing", req: update, outcome: outcomeIgnored, warn: "admitted unchanged"},
		{name: "a token back after 1/qps", advance: 500 * time.Millisecond, req: createPV(plain), cloudCall: true, outcome: outcomeLabeled},
		{name: "and spent again", req: createPV(plain), code: http.StatusTooManyRequests, outcome: outcomeRateLimitedDenied},
	}
	vols := &countingVolumes{}
	reg := prometheus.NewPedanticRegistry()
	a, skip, err := New(context.Background(), &webhook.Context{Cloud: fakeProvider{vols}, Metrics: reg, ProviderQPS: 2, ProviderBurst: 2})
	if err != nil || skip != "" {
		t.Fatal(skip, err)
	}
	adm := a.(*Admitter)
	clock := clocktesting.NewFakePassiveClock(time.Now())
	adm.limiter = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(2, 2, clock)
	counted := map[string]float64{}
	for _, s := range steps {
		clock.SetTime(clock.Now().Add(s.advance))
		before := vols.calls.Load()
		resp := adm.Admit(context.Background(), s.req)
		if called := vols.calls.Load() != before; called != s.cloudCall {
			t.Errorf("%s: cloud called %v, want %v", s.name, called, s.cloudCall)
		}
		counted[s.outcome]++
		if got := counterValue(t, adm.decisions.WithLabelValues(s.outcome)); got != counted[s.outcome] {
			t.Errorf("%s: outcome %s counted %v times, want %v", s.name, s.outcome, got, counted[s.outcome])
		}
		if s.code == 0 {
			if !resp.Allowed {
				t.Errorf("%s: refused: %+v", s.name, resp.Result)
			}
		} else if resp.Allowed || resp.Result.Code != s.code || resp.Result.Details == nil || resp.Result.Details.RetryAfterSeconds != 1 ||
			!strings.Contains(resp.Result.Message, "retry in 1s") {
			t.Errorf("%s: response %+v (result %+v), want refused with %d, retry after 1s", s.name, resp, resp.Result, s.code)
		}
		if s.warn != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], s.warn)) {
			t.Errorf("%s: warnings %q, want one with %q", s.name, resp.Warnings, s.warn)
		}
	}
}

func TestNewRefusesNegativeLimits(t *testing.T) {
	for _, wc := range []webhook.Context{{ProviderQPS: -1}, {ProviderBurst: -1}} {
		wc.Cloud = fakeProvider{&countingVolumes{}}
		if _, _, err := New(context.Background(), &wc); err == nil || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("qps %v burst %d: err %v", wc.ProviderQPS, wc.ProviderBurst, err)
		}
	}
}
