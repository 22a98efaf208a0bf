package pvlabel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/portside-io/portside/internal/webhook"
	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/client"
	"github.com/portside-io/portside/pkg/providers/local"
)

// fakeVolumes answers every volume with topo or err.
type fakeVolumes struct {
	topo *cloud.VolumeTopology
	err  error
}

func (f *fakeVolumes) VolumeTopology(context.Context, *corev1.PersistentVolume) (*cloud.VolumeTopology, error) {
	return f.topo, f.err
}

// fakeProvider has only the Volumes capability (or none).
type fakeProvider struct{ volumes cloud.Volumes }

func (fakeProvider) ProviderName() string                       { return "fake" }
func (fakeProvider) Instances() (cloud.Instances, bool)         { return nil, false }
func (fakeProvider) LoadBalancers() (cloud.LoadBalancers, bool) { return nil, false }
func (fakeProvider) Routes() (cloud.Routes, bool)               { return nil, false }
func (p fakeProvider) Volumes() (cloud.Volumes, bool)           { return p.volumes, p.volumes != nil }
func (fakeProvider) RegistryCredentials() (cloud.RegistryCredentials, bool) {
	return nil, false
}

func newAdmitter(t testing.TB, vols cloud.Volumes, policy string, reg prometheus.Registerer) *Admitter {
	t.Helper()
	a, skip, err := New(context.Background(), &webhook.Context{Cloud: fakeProvider{vols}, ProviderErrors: policy, Metrics: reg})
	if err != nil || skip != "" {
		t.Fatalf("New: skip %q, err %v", skip, err)
	}
	return a.(*Admitter)
}

func createPV(raw []byte) *admissionv1.AdmissionRequest {
	return &admissionv1.AdmissionRequest{
		UID: "uid", Operation: admissionv1.Create, Resource: pvResource,
		Kind:   metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolume"},
		Object: runtime.RawExtension{Raw: raw},
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// applyAdds applies a JSON patch of "add" operations on object members,
// the only kind the webhook writes (RFC 6902: add replaces a member).
func applyAdds(t testing.TB, doc, patch []byte) []byte {
	t.Helper()
	var obj map[string]any
	var ops []struct {
		Op    string
		Path  string
		Value any
	}
	if err := json.Unmarshal(doc, &obj); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	for _, o := range ops {
		parts := strings.Split(strings.TrimPrefix(o.Path, "/"), "/")
		if o.Op != "add" || !strings.HasPrefix(o.Path, "/") {
			t.Fatalf("unexpected operation %+v", o)
		}
		parent := obj
		for _, p := range parts[:len(parts)-1] {
			next, ok := parent[p].(map[string]any)
			if !ok {
				t.Fatalf("patch path %s: no object member %q", o.Path, p)
			}
			parent = next
		}
		parent[parts[len(parts)-1]] = o.Value
	}
	return mustJSON(t, obj)
}

// patchedPV is the PV of a request after the response's patch.
func patchedPV(t testing.TB, raw []byte, resp *admissionv1.AdmissionResponse) *corev1.PersistentVolume {
	t.Helper()
	if resp.Patch != nil {
		if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
			t.Fatalf("patch type %v", resp.PatchType)
		}
		raw = applyAdds(t, raw, resp.Patch)
	}
	pv := &corev1.PersistentVolume{}
	if err := json.Unmarshal(raw, pv); err != nil {
		t.Fatal(err)
	}
	return pv
}

func csiPV(name string, labels map[string]string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolume"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: local.CSIDriver, VolumeHandle: "vol-123"}},
		},
	}
}

func TestAdmit(t *testing.T) {
	pv := csiPV("pv-1", map[string]string{"app": "db"})
	raw := mustJSON(t, pv)
	labeled := pv.DeepCopy()
	labeled.Labels = map[string]string{"app": "db", gaZone: "zone-a", gaRegion: "r1"}
	labeled.Spec.NodeAffinity = affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1")))
	kept := csiPV("pv-1", map[string]string{gaZone: "zone-x", gaRegion: "r1"})
	kept.Annotations = map[string]string{AnnProvisionedBy: local.CSIDriver}
	keptWithAffinity := kept.DeepCopy()
	keptWithAffinity.Spec.NodeAffinity = affinity(term(in(gaZone, "zone-x"), in(gaRegion, "r1")))
	// A PV written by a person (no provisioned-by): its labels are not trusted.
	userLabeled := csiPV("pv-1", map[string]string{gaZone: "zone-x", gaRegion: "r1"})
	userRelabeled := userLabeled.DeepCopy()
	userRelabeled.Labels = map[string]string{gaZone: "zone-a", gaRegion: "r1"}
	userRelabeled.Spec.NodeAffinity = affinity(term(in(gaZone, "zone-a"), in(gaRegion, "r1")))
	boom := errors.New("cloud on fire")
	throttled := cloud.RetryAfter(7*time.Second, "rate limited")

	cases := []struct {
		name     string
		vols     *fakeVolumes
		policy   string
		req      *admissionv1.AdmissionRequest
		want     *corev1.PersistentVolume // nil: denied
		code     int32
		warn     string // substring of the only warning; "" for none
		outcome  string
		wantText string // substring of the denial message
	}{
		{name: "labeled", vols: &fakeVolumes{topo: topology("r1", "zone-a")}, req: createPV(raw), want: labeled, outcome: outcomeLabeled},
		{name: "already labeled: no patch", vols: &fakeVolumes{topo: topology("r1", "zone-a")}, req: createPV(mustJSON(t, labeled)), want: labeled, outcome: outcomeUnchanged},
		{name: "empty topology: no patch", vols: &fakeVolumes{topo: topology("")}, req: createPV(raw), want: pv, outcome: outcomeUnchanged},
		{name: "nil topology: no patch", vols: &fakeVolumes{}, req: createPV(raw), want: pv, outcome: outcomeUnchanged},
		{
			name: "labels disagree: kept, affinity added, warned", vols: &fakeVolumes{topo: topology("r1", "zone-a")},
			req: createPV(mustJSON(t, kept)), want: keptWithAffinity, warn: "disagree", outcome: outcomeLabeled,
		},
		{
			name: "not provisioned, labels disagree: the cloud's replace them, warned", vols: &fakeVolumes{topo: topology("r1", "zone-a")},
			req: createPV(mustJSON(t, userLabeled)), want: userRelabeled, warn: `label topology.kubernetes.io/zone="zone-x" replaced with the cloud's "zone-a"`, outcome: outcomeLabeled,
		},
		{
			name: "not provisioned, labels set, provider error: denied (its labels are not trusted)", vols: &fakeVolumes{err: boom}, req: createPV(mustJSON(t, userLabeled)),
			code: 500, outcome: outcomeProviderErrorDenied, wantText: "cloud on fire",
		},
		{
			name: "not ours", vols: &fakeVolumes{err: fmt.Errorf("nope: %w", cloud.ErrNotImplemented)}, req: createPV(raw), want: pv,
			warn: "persistent volume pv-1 is not a volume of provider fake: admitted without topology labels", outcome: outcomeNotOurs,
		},
		{
			name: "unknown volume", vols: &fakeVolumes{err: fmt.Errorf("volume vol-123: %w", cloud.ErrNotFound)}, req: createPV(raw), want: pv,
			warn: "the cloud has no volume vol-123", outcome: outcomeUnknownVolume,
		},
		{
			name: "provider error, deny", vols: &fakeVolumes{err: boom}, req: createPV(raw), code: 500, outcome: outcomeProviderErrorDenied,
			wantText: "persistent-volume-label: cannot get the topology of volume pv-1 from the cloud: cloud on fire; the PV is refused",
		},
		{
			name: "provider error, default policy denies", vols: &fakeVolumes{err: boom}, policy: "-", req: createPV(raw), code: 500, outcome: outcomeProviderErrorDenied,
			wantText: "--pv-label-on-provider-error=admit",
		},
		{name: "provider asks for a retry, deny: 503", vols: &fakeVolumes{err: throttled}, req: createPV(raw), code: 503, outcome: outcomeProviderErrorDenied, wantText: "rate limited"},
		{
			name: "provider error, admit", vols: &fakeVolumes{err: boom}, policy: webhook.ProviderErrorsAdmit, req: createPV(raw), want: pv,
			warn: "cloud on fire: admitted without topology labels", outcome: outcomeProviderErrorAdmitted,
		},
		{
			name: "provider error, PV labeled: labels used despite deny", vols: &fakeVolumes{err: boom}, req: createPV(mustJSON(t, kept)),
			want: keptWithAffinity, warn: "cannot check its topology labels with the cloud", outcome: outcomeProviderErrorAdmitted,
		},
		{
			name: "UPDATE", vols: &fakeVolumes{topo: topology("r1", "zone-a")}, outcome: outcomeIgnored, want: pv,
			req:  func() *admissionv1.AdmissionRequest { r := createPV(raw); r.Operation = admissionv1.Update; return r }(),
			warn: "persistent-volume-label handles CREATE of v1 persistentvolumes; got UPDATE of v1/persistentvolumes: admitted unchanged",
		},
		{
			name: "other resource", vols: &fakeVolumes{topo: topology("r1", "zone-a")}, outcome: outcomeIgnored, want: pv,
			req: func() *admissionv1.AdmissionRequest {
				r := createPV(raw)
				r.Resource = metav1.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "volumeattachments"}
				return r
			}(),
			warn: "got CREATE of storage.k8s.io/v1/volumeattachments",
		},
		{
			name: "v1beta1", vols: &fakeVolumes{topo: topology("r1", "zone-a")}, outcome: outcomeIgnored, want: pv,
			req:  func() *admissionv1.AdmissionRequest { r := createPV(raw); r.Resource.Version = "v1beta1"; return r }(),
			warn: "got CREATE of v1beta1/persistentvolumes",
		},
		{
			name: "status subresource", vols: &fakeVolumes{topo: topology("r1", "zone-a")}, outcome: outcomeIgnored, want: pv,
			req:  func() *admissionv1.AdmissionRequest { r := createPV(raw); r.SubResource = "status"; return r }(),
			warn: "v1/persistentvolumes/status",
		},
		{
			name: "dry run: same as others", vols: &fakeVolumes{topo: topology("r1", "zone-a")}, outcome: outcomeLabeled, want: labeled,
			req: func() *admissionv1.AdmissionRequest { r := createPV(raw); dry := true; r.DryRun = &dry; return r }(),
		},
		{name: "invalid JSON", vols: &fakeVolumes{}, req: createPV([]byte(`{"metadata":`)), code: 400, outcome: outcomeInvalid, wantText: "not a persistent volume"},
		{name: "labels not a map", vols: &fakeVolumes{}, req: createPV([]byte(`{"metadata":{"labels":[1]}}`)), code: 400, outcome: outcomeInvalid, wantText: "not a persistent volume"},
		{name: "another kind", vols: &fakeVolumes{}, req: createPV([]byte(`{"apiVersion":"v1","kind":"Pod"}`)), code: 400, outcome: outcomeInvalid, wantText: "not a v1 PersistentVolume"},
		{name: "nil object", vols: &fakeVolumes{}, req: createPV(nil), code: 400, outcome: outcomeInvalid, wantText: "no object"},
		{name: "null object", vols: &fakeVolumes{}, req: createPV([]byte(" null ")), code: 400, outcome: outcomeInvalid, wantText: "no object"},
		{name: "nil request", vols: &fakeVolumes{}, req: nil, code: 400, outcome: outcomeInvalid, wantText: "no admission request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			policy := tc.policy
			if policy == "" {
				policy = webhook.ProviderErrorsDeny
			} else if policy == "-" {
				policy = ""
			}
			reg := prometheus.NewPedanticRegistry()
			a := newAdmitter(t, tc.vols, policy, reg)
			resp := a.Admit(context.Background(), tc.req)
			if resp == nil {
				t.Fatal("nil response")
			}
			if got := counterValue(t, a.decisions.WithLabelValues(tc.outcome)); got != 1 {
				t.Errorf("outcome %s counted %v times", tc.outcome, got)
			}
			switch {
			case tc.warn == "" && len(resp.Warnings) != 0:
				t.Errorf("warnings %q, want none", resp.Warnings)
			case tc.warn != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], tc.warn)):
				t.Errorf("warnings %q, want one with %q", resp.Warnings, tc.warn)
			}
			if tc.want == nil {
				if resp.Allowed || resp.Result == nil || resp.Result.Code != tc.code || !strings.Contains(resp.Result.Message, tc.wantText) || resp.Patch != nil {
					t.Fatalf("response %+v (result %+v), want denied with %d and %q", resp, resp.Result, tc.code, tc.wantText)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			if got := patchedPV(t, tc.req.Object.Raw, resp); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("patched PV\n%s\nwant\n%s", mustJSON(t, got), mustJSON(t, tc.want))
			}
			if reflect.DeepEqual(tc.want, pvFrom(t, tc.req.Object.Raw)) != (resp.Patch == nil) {
				t.Errorf("patch %s for a PV that should be unchanged=%v", resp.Patch, resp.Patch == nil)
			}
		})
	}
}

func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := c.Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func pvFrom(t testing.TB, raw []byte) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{}
	if err := json.Unmarshal(raw, pv); err != nil {
		t.Fatal(err)
	}
	return pv
}

func TestAdmitRetryAfterDetails(t *testing.T) {
	a := newAdmitter(t, &fakeVolumes{err: cloud.RetryAfter(1500*time.Millisecond, "busy")}, webhook.ProviderErrorsDeny, nil)
	resp := a.Admit(context.Background(), createPV(mustJSON(t, csiPV("pv-1", nil))))
	if resp.Result == nil || resp.Result.Details == nil || resp.Result.Details.RetryAfterSeconds != 2 || resp.Result.Reason != metav1.StatusReasonServiceUnavailable {
		t.Fatalf("result %+v, want 503 retrying after 2s", resp.Result)
	}
}

// The patch still applies to an object without metadata or spec (an
// apiserver always sends both; a hand-made request may not).
func TestAdmitPatchAddsMissingParents(t *testing.T) {
	a := newAdmitter(t, &fakeVolumes{topo: topology("r1", "zone-a")}, webhook.ProviderErrorsDeny, nil)
	for _, raw := range []string{`{}`, `{"metadata":null,"spec":null}`} {
		resp := a.Admit(context.Background(), createPV([]byte(raw)))
		got := patchedPV(t, []byte(raw), resp)
		if got.Labels[gaZone] != "zone-a" || got.Spec.NodeAffinity == nil {
			t.Errorf("%s: patched PV %+v", raw, got)
		}
	}
}

func TestNew(t *testing.T) {
	wh := Webhook()
	if wh.Name != Name || wh.Path != Path || wh.DisabledByDefault || wh.New == nil {
		t.Fatalf("webhook %+v", wh)
	}
	ctx := context.Background()
	if a, skip, err := wh.New(ctx, &webhook.Context{Cloud: fakeProvider{}}); a != nil || err != nil || skip != "the cloud provider has no volumes capability" {
		t.Errorf("no volumes: %v %q %v", a, skip, err)
	}
	if _, _, err := wh.New(ctx, &webhook.Context{Cloud: fakeProvider{&fakeVolumes{}}, ProviderErrors: "ignore"}); err == nil {
		t.Error("unknown provider errors policy: no error")
	}
	// Built twice on one registry (e.g. two hosts in a test): the counter is shared.
	reg := prometheus.NewRegistry()
	for range 2 {
		if _, skip, err := wh.New(ctx, &webhook.Context{Cloud: fakeProvider{&fakeVolumes{}}, Metrics: reg}); err != nil || skip != "" {
			t.Fatalf("New: %q %v", skip, err)
		}
	}
	families, err := reg.Gather()
	if err != nil || len(families) != 1 || families[0].GetName() != "portside_webhook_pv_label_decisions_total" || len(families[0].GetMetric()) != len(outcomes) {
		t.Errorf("gathered %v (%v), want one family with %d series", families, err, len(outcomes))
	}
}

// TestLocalProviderMatchesUpstream runs the local provider against a fake
// local cloud: a multi-zone volume gets what upstream's plugin gave a
// regional GCE PD, its label value "<zone>__<zone>" (sorted here, map
// order upstream) and one required term whose zone requirement lists the
// sorted zones and whose region requirement lists the region.
func TestLocalProviderMatchesUpstream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/volumes/vol-123" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"code":"NotFound","message":"no such volume"}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"vol-123","zones":["us-central1-c","us-central1-a"],"region":"us-central1"}`))
	}))
	defer srv.Close()
	prov := local.New(client.New(srv.URL, "token"))
	a, skip, err := New(context.Background(), &webhook.Context{Cloud: prov, ProviderErrors: webhook.ProviderErrorsDeny})
	if err != nil || skip != "" {
		t.Fatalf("New: %q %v", skip, err)
	}

	pv := csiPV("pvc-0a1b", nil)
	pv.Spec.Capacity = corev1.ResourceList{}
	raw := mustJSON(t, pv)
	resp := a.Admit(context.Background(), createPV(raw))
	if !resp.Allowed || len(resp.Warnings) != 0 {
		t.Fatalf("response %+v", resp)
	}
	wantPatch := `[{"op":"add","path":"/metadata/labels","value":{"topology.kubernetes.io/region":"us-central1","topology.kubernetes.io/zone":"us-central1-a__us-central1-c"}},` +
		`{"op":"add","path":"/spec/nodeAffinity","value":{"required":{"nodeSelectorTerms":[{"matchExpressions":[` +
		`{"key":"topology.kubernetes.io/zone","operator":"In","values":["us-central1-a","us-central1-c"]},` +
		`{"key":"topology.kubernetes.io/region","operator":"In","values":["us-central1"]}]}]}}}]`
	if string(resp.Patch) != wantPatch {
		t.Fatalf("patch\n%s\nwant\n%s", resp.Patch, wantPatch)
	}

	// Not the local driver: not ours. An unknown handle: the cloud has no such volume.
	other := csiPV("pv-nfs", nil)
	other.Spec.CSI.Driver = "nfs.csi.k8s.io"
	if resp := a.Admit(context.Background(), createPV(mustJSON(t, other))); !resp.Allowed || resp.Patch != nil || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "not a volume of provider") {
		t.Errorf("other driver: %+v", resp)
	}
	gone := csiPV("pv-gone", nil)
	gone.Spec.CSI.VolumeHandle = "vol-gone"
	if resp := a.Admit(context.Background(), createPV(mustJSON(t, gone))); !resp.Allowed || resp.Patch != nil || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "the cloud has no volume vol-gone") {
		t.Errorf("unknown volume: %+v", resp)
	}
}

func FuzzAdmit(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pv","labels":{"topology.kubernetes.io/zone":"a__b","topology.kubernetes.io/region":"r"}},"spec":{}}`), "zone-a", "r1", false)
	f.Add([]byte(`{"metadata":{"labels":{"failure-domain.beta.kubernetes.io/zone":"____","failure-domain.beta.kubernetes.io/region":""}},"spec":{"nodeAffinity":{"required":{"nodeSelectorTerms":[]}}}}`), "", "", false)
	f.Add([]byte(`{"spec":{"nodeAffinity":{"required":null}}}`), "a__b", "r", true)
	f.Add([]byte(`null`), "a", "", false)
	f.Add([]byte(`{"metadata":`), "a", "r", false)
	f.Fuzz(func(t *testing.T, raw []byte, zone, region string, fail bool) {
		vols := &fakeVolumes{topo: topology(region, strings.Split(zone, ",")...)}
		if fail {
			vols = &fakeVolumes{err: errors.New("boom")}
		}
		a := newAdmitter(t, vols, webhook.ProviderErrorsDeny, nil)
		resp := a.Admit(context.Background(), createPV(raw))
		if resp == nil {
			t.Fatal("nil response")
		}
		if !resp.Allowed && resp.Result == nil {
			t.Fatal("denied without a result")
		}
		if resp.Patch != nil {
			var ops []op
			if err := json.Unmarshal(resp.Patch, &ops); err != nil || len(ops) == 0 {
				t.Fatalf("patch %s: %v", resp.Patch, err)
			}
		}
	})
}
