package pvlabel

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestOverLimit(t *testing.T) {
	for _, tc := range []struct {
		name        string
		provisioned bool
		labels      map[string]string
		retryAfter  time.Duration
		wantRetry   int32 // 0: admitted
		wantAff     bool
	}{
		{name: "provisioned with topology: its labels, no cloud call", provisioned: true, labels: map[string]string{gaZone: "zone-a", gaRegion: "r1"}, wantAff: true},
		{name: "provisioned with beta topology: its labels", provisioned: true, labels: map[string]string{betaZone: "zone-a", betaRegion: "r1"}, wantAff: true},
		{name: "provisioned without topology: refused", provisioned: true, retryAfter: 100 * time.Millisecond, wantRetry: 1},
		{name: "provisioned, only a zone: refused", provisioned: true, labels: map[string]string{gaZone: "zone-a"}, retryAfter: 1500 * time.Millisecond, wantRetry: 2},
		{name: "hand-labelled: refused (its labels are not trusted)", labels: map[string]string{gaZone: "zone-a", gaRegion: "r1"}, retryAfter: 3 * time.Second, wantRetry: 3},
		{name: "no labels: refused", wantRetry: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pv := testPV(tc.labels, nil)
			if tc.provisioned {
				pv.Annotations = map[string]string{AnnProvisionedBy: "x"}
			}
			before := pv.DeepCopy()
			d, st := OverLimit(pv, "pv-1", tc.retryAfter)
			if !reflect.DeepEqual(pv, before) {
				t.Error("OverLimit modified the PV")
			}
			if tc.wantRetry == 0 {
				if st != nil {
					t.Fatalf("refused: %+v", st)
				}
				if (d.NodeAffinity != nil) != tc.wantAff || d.Labels != nil {
					t.Errorf("decision %+v, want the PV's own labels and affinity from them", d)
				}
				if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "without checking them with the cloud") {
					t.Errorf("warnings %q", d.Warnings)
				}
				return
			}
			if st == nil || st.Code != http.StatusTooManyRequests || st.Details == nil || st.Details.RetryAfterSeconds != tc.wantRetry {
				t.Fatalf("status %+v, want 429 retry after %ds", st, tc.wantRetry)
			}
			if !strings.Contains(st.Message, "--pv-label-provider-qps") || !strings.Contains(st.Message, "pv-1") {
				t.Errorf("message %q names neither the flag nor the PV", st.Message)
			}
			if d.Changed() {
				t.Errorf("a refusal with a patch: %+v", d)
			}
		})
	}
}
