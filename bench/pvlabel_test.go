package bench

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/webhook"
	"github.com/portside-io/portside/internal/webhooks/pvlabel"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/providers/local"
)

// BenchmarkPVLabelWebhook: the persistent-volume-label webhook on the real
// kube-apiserver's admission path. PORTSIDE_BENCH_PVLABEL_PVS (default
// 1000) PVs of local-cloud volumes are created one after another with the
// webhook registered (failurePolicy Fail, TLS with a CA bundle, served
// in-process as `portside webhook serve` serves it), then as many PVs of
// another CSI driver, which the configuration's matchConditions keep from
// the webhook. Reported: the admission round trip as the apiserver measures
// it (apiserver_admission_webhook_admission_duration_seconds, quantiles
// interpolated in its buckets, which are coarse: 5 ms, 25 ms, ...), the
// webhook's own handling time (cloud_provider_webhook_request_duration_seconds,
// the cloud's GET /v1/volumes/{id} included), and the client-side create
// latency with and without the webhook.
func BenchmarkPVLabelWebhook(b *testing.B) {
	n := envInt("PORTSIDE_BENCH_PVLABEL_PVS", 1000)
	r := runPVLabel(b, n)
	delta, own, withHook, without := r.apiserver, r.webhook, r.withHook, r.without
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(delta.quantile(0.50)*1e3, "apiserver-p50-ms")
	b.ReportMetric(delta.quantile(0.99)*1e3, "apiserver-p99-ms")
	b.ReportMetric(own.quantile(0.50)*1e3, "webhook-p50-ms")
	b.ReportMetric(own.quantile(0.99)*1e3, "webhook-p99-ms")
	b.ReportMetric(pct(withHook, 0.50), "create-p50-ms")
	b.ReportMetric(pct(withHook, 0.99), "create-p99-ms")
	b.ReportMetric(pct(without, 0.50), "create-nohook-p50-ms")
	b.ReportMetric(pct(without, 0.99), "create-nohook-p99-ms")
	b.Logf("%d PVs; apiserver admission round trip: p50 %.2f ms, p99 %.2f ms (buckets %v: counts %v); webhook handling p50 %.2f ms, p99 %.2f ms (%v calls); "+
		"client create p50/p99 %.2f/%.2f ms with the webhook, %.2f/%.2f ms without (load %s)",
		n, delta.quantile(0.5)*1e3, delta.quantile(0.99)*1e3, delta.bounds, delta.counts, own.quantile(0.5)*1e3, own.quantile(0.99)*1e3, own.count,
		pct(withHook, 0.5), pct(withHook, 0.99), pct(without, 0.5), pct(without, 0.99), loadAvg())
}

// TestPVLabelWebhookSmoke runs BenchmarkPVLabelWebhook's harness small (5
// PVs of each driver), for make test: the apiserver called the webhook once
// per cloud PV, each got the volume's zone and region labels and node
// affinity, and the other driver's PVs were left alone. No timing is
// checked.
func TestPVLabelWebhookSmoke(t *testing.T) {
	const n = 5
	r := runPVLabel(t, n)
	if r.apiserver.count != n || r.labeled != n || r.untouched != n {
		t.Errorf("%v webhook calls, %d of %d cloud PVs labeled, %d of %d other PVs untouched", r.apiserver.count, r.labeled, n, r.untouched, n)
	}
}

type pvResult struct {
	// apiserver is its admission latency of the webhook, webhook the
	// webhook's own handling time.
	apiserver, webhook histogram
	// Client-side create latencies (ms) with and without the webhook.
	withHook, without []float64
	// labeled: cloud PVs with the volume's topology; untouched: the other
	// driver's PVs, without.
	labeled, untouched int
}

// runPVLabel: n PVs of local-cloud volumes created one after another with
// the webhook registered (failurePolicy Fail, TLS with a CA bundle, served
// in-process as `portside webhook serve` serves it), then as many PVs of
// another CSI driver, which the configuration's matchConditions keep from
// the webhook. Every PV is checked as stored.
func runPVLabel(tb testing.TB, n int) pvResult {
	ctx := context.Background()
	cp := testenv.ControlPlane(tb)
	cs := testenv.Client(tb)
	c, stop, err := localcloudtest.StartDetached(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	vol, err := c.Client.CreateVolume(ctx, api.CreateVolumeRequest{Name: "bench", Zones: []string{"zone-b", "zone-a"}, SizeGiB: 1})
	if err != nil {
		tb.Fatal(err)
	}
	run := rand.Int64()
	cert, err := cp.IssueServingCert(fmt.Sprintf("pvlabel-bench-%d", run), "127.0.0.1")
	if err != nil {
		tb.Fatal(err)
	}
	provider, err := local.NewFromConfig(local.Config{Endpoint: c.Endpoint, Token: c.Token})
	if err != nil {
		tb.Fatal(err)
	}
	reg := newGatherer()
	sctx, cancel := context.WithCancel(ctx)
	addr, errc, err := webhook.Serve(sctx, webhook.ServeOptions{
		BindAddress: "127.0.0.1", CertFile: cert.CertFile, KeyFile: cert.KeyFile, Registry: reg,
		Webhooks: []webhook.Webhook{pvlabel.Webhook()}, Context: &webhook.Context{Cloud: provider, ProviderErrors: webhook.ProviderErrorsDeny},
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cancel()
		for range errc {
		}
	})
	const name = "persistent-volume-label.bench.portside.io"
	url := "https://" + addr + pvlabel.Path
	fail, none, ver := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, int32(5)
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pvlabel-bench-%d", run)},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: name, AdmissionReviewVersions: []string{"v1"}, SideEffects: &none, FailurePolicy: &fail, TimeoutSeconds: &ver,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: cp.CAPEM()},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"persistentvolumes"}}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "cloud-volume",
				Expression: "has(object.spec.csi) && object.spec.csi.driver == '" + local.CSIDriver + "'"}},
		}},
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), mwc.Name, metav1.DeleteOptions{})
	})
	pv := func(i int, driver string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{
			// The run in the name: PVs are cluster-wide, and -count runs this
			// again on the same apiserver.
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%x-%s-%d", uint16(run), strings.Split(driver, ".")[0], i)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: vol.ID}},
			},
		}
	}
	// Wait until the apiserver calls the webhook.
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv(-1, local.CSIDriver), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && p.Labels["topology.kubernetes.io/zone"] != "" {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the apiserver does not call the webhook: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	var r pvResult
	before := apiserverHistogram(tb, cs, name)
	var cloudPVs, otherPVs []string
	r.withHook, cloudPVs = createPVs(tb, cs, n, func(i int) *corev1.PersistentVolume { return pv(i, local.CSIDriver) })
	after := apiserverHistogram(tb, cs, name)
	r.without, otherPVs = createPVs(tb, cs, n, func(i int) *corev1.PersistentVolume { return pv(i, "other.csi.example.com") })
	r.apiserver = after.minus(before)
	if r.apiserver.count != float64(n) {
		tb.Fatalf("the apiserver observed %v webhook calls for %d PVs", r.apiserver.count, n)
	}
	r.webhook = reg.histogram(tb, "portside_webhook_request_duration_seconds")
	r.labeled = checkPVs(tb, cs, cloudPVs, vol)
	r.untouched = checkPVs(tb, cs, otherPVs, nil)
	return r
}

// checkPVs reads each PV as stored and checks its topology: with vol, the
// volume's zones (sorted, "__"-joined) and region as labels and as required
// node affinity; without, no topology label and no node affinity. It
// reports the first few wrong and returns how many were right.
func checkPVs(tb testing.TB, cs kubernetes.Interface, names []string, vol *api.Volume) int {
	right, reported := 0, 0
	for _, name := range names {
		p, err := cs.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		var wrong []string
		if vol == nil {
			if _, ok := p.Labels[corev1.LabelTopologyZone]; ok || p.Spec.NodeAffinity != nil {
				wrong = append(wrong, fmt.Sprintf("labels %v, node affinity %v: want none", p.Labels, p.Spec.NodeAffinity))
			}
		} else {
			zones := slices.Sorted(slices.Values(vol.Zones))
			if got, want := p.Labels[corev1.LabelTopologyZone], strings.Join(zones, "__"); got != want {
				wrong = append(wrong, fmt.Sprintf("zone label %q, want %q", got, want))
			}
			if got := p.Labels[corev1.LabelTopologyRegion]; got != vol.Region || got == "" {
				wrong = append(wrong, fmt.Sprintf("region label %q, want %q", got, vol.Region))
			}
			want := map[string][]string{corev1.LabelTopologyZone: zones, corev1.LabelTopologyRegion: {vol.Region}}
			if !requiresExactly(p.Spec.NodeAffinity, want) {
				wrong = append(wrong, fmt.Sprintf("node affinity %v, want a term requiring %v", p.Spec.NodeAffinity, want))
			}
		}
		if len(wrong) == 0 {
			right++
		} else if reported++; reported <= 5 {
			tb.Errorf("PV %s: %s", name, strings.Join(wrong, "; "))
		}
	}
	return right
}

// requiresExactly reports whether every required term of a has an In
// requirement of each key of want with exactly its values (and there is a
// term).
func requiresExactly(a *corev1.VolumeNodeAffinity, want map[string][]string) bool {
	if a == nil || a.Required == nil || len(a.Required.NodeSelectorTerms) == 0 {
		return false
	}
	for _, term := range a.Required.NodeSelectorTerms {
		found := 0
		for _, e := range term.MatchExpressions {
			if vals, ok := want[e.Key]; ok && e.Operator == corev1.NodeSelectorOpIn && slices.Equal(slices.Sorted(slices.Values(e.Values)), vals) {
				found++
			}
		}
		if found != len(want) {
			return false
		}
	}
	return true
}

// createPVs creates n PVs one after another (deleting them afterwards) and
// returns each create's latency in ms, and their names.
func createPVs(tb testing.TB, cs kubernetes.Interface, n int, pv func(int) *corev1.PersistentVolume) ([]float64, []string) {
	ctx := context.Background()
	lat := make([]float64, 0, n)
	names := make([]string, 0, n)
	for i := range n {
		p := pv(i)
		start := time.Now()
		if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, p, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
		lat = append(lat, float64(time.Since(start).Microseconds())/1e3)
		names = append(names, p.Name)
		tb.Cleanup(func() {
			_ = cs.CoreV1().PersistentVolumes().Delete(context.Background(), p.Name, metav1.DeleteOptions{})
		})
	}
	return lat, names
}

func pct(ms []float64, p float64) float64 {
	s := slices.Sorted(slices.Values(ms))
	return s[max(0, int(math.Ceil(float64(len(s))*p))-1)]
}

// histogram is a Prometheus histogram's cumulative buckets.
type histogram struct {
	bounds []float64
	counts []float64 // cumulative, per bound; the last bound is +Inf
	count  float64
}

func (h histogram) minus(o histogram) histogram {
	out := histogram{bounds: h.bounds, counts: make([]float64, len(h.counts)), count: h.count - o.count}
	for i := range h.counts {
		out.counts[i] = h.counts[i]
		if i < len(o.counts) {
			out.counts[i] -= o.counts[i]
		}
	}
	return out
}

// quantile interpolates linearly within the bucket holding q, as
// Prometheus' histogram_quantile does.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * h.count
	prevBound, prevCount := 0.0, 0.0
	for i, c := range h.counts {
		if c >= rank {
			if math.IsInf(h.bounds[i], 1) {
				return prevBound
			}
			return prevBound + (h.bounds[i]-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		prevBound, prevCount = h.bounds[i], c
	}
	return prevBound
}

// apiserverHistogram reads the apiserver's admission webhook latency for
// the webhook named name (admit, CREATE, not rejected) from its /metrics.
func apiserverHistogram(b testing.TB, cs kubernetes.Interface, name string) histogram {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	var h histogram
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_admission_webhook_admission_duration_seconds") || !strings.Contains(line, `name="`+name+`"`) ||
			!strings.Contains(line, `rejected="false"`) {
			continue
		}
		val, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		switch {
		case strings.HasPrefix(line, "apiserver_admission_webhook_admission_duration_seconds_bucket"):
			le := line[strings.Index(line, `le="`)+4:]
			le = le[:strings.IndexByte(le, '"')]
			bound, _ := strconv.ParseFloat(le, 64)
			if le == "+Inf" {
				bound = math.Inf(1)
			}
			h.bounds, h.counts = append(h.bounds, bound), append(h.counts, val)
		case strings.HasPrefix(line, "apiserver_admission_webhook_admission_duration_seconds_count"):
			h.count = val
		}
	}
	return h
}

// gatherer is a registry whose histograms the benchmark reads.
type gatherer struct{ *prometheus.Registry }

func newGatherer() gatherer { return gatherer{prometheus.NewRegistry()} }

// histogram sums the series of the histogram family name.
func (g gatherer) histogram(b testing.TB, name string) histogram {
	mfs, err := g.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var h histogram
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			hist := m.GetHistogram()
			for i, bk := range hist.GetBucket() {
				if len(h.bounds) <= i {
					h.bounds, h.counts = append(h.bounds, bk.GetUpperBound()), append(h.counts, 0)
				}
				h.counts[i] += float64(bk.GetCumulativeCount())
			}
			h.count += float64(hist.GetSampleCount())
		}
	}
	if h.count == 0 {
		b.Fatalf("no samples of %s", name)
	}
	h.bounds, h.counts = append(h.bounds, math.Inf(1)), append(h.counts, h.count)
	return h
}
