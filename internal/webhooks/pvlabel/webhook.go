// Package pvlabel is the persistent-volume-label mutating admission
// webhook: upstream's replacement for the removed in-tree
// PersistentVolumeLabel admission plugin. On CREATE of a PV it asks the
// provider for the volume's zones and region, sets the topology labels and
// the node affinity that keeps pods using the PV in those zones.
package pvlabel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/webhook"
	"github.com/portside-io/portside/pkg/cloud"
)

const (
	// Name is what --webhooks names the webhook by.
	Name = "persistent-volume-label"
	// Path is the HTTPS path the webhook is served on.
	Path = "/persistent-volume-label"
)

// pvResource is the only resource the webhook handles.
var pvResource = metav1.GroupVersionResource{Group: "", Version: "v1", Resource: "persistentvolumes"}

// Webhook returns the plugin, enabled by default like upstream's plugin
// was in clusters with a cloud provider.
func Webhook() webhook.Webhook {
	return webhook.Webhook{Name: Name, Path: Path, New: New}
}

// New builds the webhook from the provider's Volumes capability; it skips
// when the provider has none.
func New(_ context.Context, wc *webhook.Context) (webhook.Admitter, string, error) {
	if wc == nil || wc.Cloud == nil {
		return nil, "", errors.New("no cloud provider")
	}
	vols, ok := wc.Cloud.Volumes()
	if !ok || vols == nil {
		return nil, "the cloud provider has no volumes capability", nil
	}
	deny := true
	switch wc.ProviderErrors {
	case webhook.ProviderErrorsDeny, "":
	case webhook.ProviderErrorsAdmit:
		deny = false
	default:
		return nil, "", fmt.Errorf("provider errors policy %q: want %q or %q", wc.ProviderErrors, webhook.ProviderErrorsDeny, webhook.ProviderErrorsAdmit)
	}
	decisions, err := newDecisions(wc.Metrics)
	if err != nil {
		return nil, "", err
	}
	qps, burst := wc.ProviderQPS, wc.ProviderBurst
	if qps == 0 {
		qps = DefaultProviderQPS
	}
	if burst == 0 {
		burst = DefaultProviderBurst
	}
	if qps < 0 || burst < 0 {
		return nil, "", fmt.Errorf("provider call limit qps %v burst %d: both must be positive (0: defaults %d and %d)", qps, burst, DefaultProviderQPS, DefaultProviderBurst)
	}
	return &Admitter{
		volumes: vols, provider: wc.Cloud.ProviderName(), denyOnProviderError: deny, decisions: decisions,
		limiter: flowcontrol.NewTokenBucketPassiveRateLimiter(qps, burst), qps: qps,
	}, "", nil
}

// Admitter labels persistent volumes with their cloud topology.
type Admitter struct {
	volumes             cloud.Volumes
	provider            string
	denyOnProviderError bool
	decisions           *prometheus.CounterVec
	// limiter is the budget of provider calls; qps its refill rate.
	limiter flowcontrol.PassiveRateLimiter
	qps     float32
}

// Admit answers one admission request; it never returns nil.
func (a *Admitter) Admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req == nil {
		return a.invalid(klog.FromContext(ctx), "no admission request")
	}
	if req.Operation != admissionv1.Create || req.Resource != pvResource || req.SubResource != "" {
		a.count(outcomeIgnored)
		return allowed(fmt.Sprintf("%s handles CREATE of v1 persistentvolumes; got %s of %s: admitted unchanged", Name, req.Operation, resourceString(req)))
	}
	pv, err := decode(req.Object.Raw)
	if err != nil {
		return a.invalid(klog.FromContext(ctx), err.Error())
	}
	name := pvName(pv)
	logger := klog.FromContext(ctx).WithValues("pv", name)

	if !a.limiter.TryAccept() {
		// A token comes back every 1/qps.
		d, refuse := OverLimit(pv, name, time.Duration(float64(time.Second)/float64(a.qps)))
		if refuse != nil {
			logger.V(2).Info("Provider call limit reached: PV refused", "qps", a.qps)
			a.count(outcomeRateLimitedDenied)
			return denied(refuse)
		}
		logger.V(2).Info("Provider call limit reached: the provisioner's labels used unchecked", "qps", a.qps)
		return a.respond(logger, d, req.Object.Raw, outcomeRateLimitedAdmitted)
	}
	topo, err := a.volumes.VolumeTopology(ctx, pv)
	pv.Name = name // for the warnings of Decide; the patch is computed against the raw object
	var d Decision
	outcome := ""
	switch {
	case err == nil:
		if topo == nil {
			topo = &cloud.VolumeTopology{}
		}
		d = Decide(pv, topo)
	case cloud.IsNotImplemented(err):
		logger.V(2).Info("Not a volume of the provider: admitted unchanged", "provider", a.provider)
		a.count(outcomeNotOurs)
		return allowed(fmt.Sprintf("persistent volume %s is not a volume of provider %s: admitted without topology labels", name, a.provider))
	case cloud.IsNotFound(err):
		logger.V(2).Info("Volume unknown to the cloud: admitted unchanged", "volume", volumeHandle(pv), "err", err)
		a.count(outcomeUnknownVolume)
		return allowed(fmt.Sprintf("persistent volume %s: the cloud has no volume %s: admitted without topology labels", name, volumeHandle(pv)))
	case hasTrustedTopology(pv):
		// A provisioner said where the volume is (upstream did not even
		// ask the cloud): denying would not protect anything. Other PVs'
		// labels are not used without the cloud: as upstream, which
		// failed their creation when the cloud did.
		logger.V(2).Info("Cannot check the PV's topology labels with the cloud: using them", "err", err)
		d = Decide(pv, nil)
		d.Warnings = append(d.Warnings, fmt.Sprintf("persistent volume %s: cannot check its topology labels with the cloud: %v", name, err))
		outcome = outcomeProviderErrorAdmitted
	case a.denyOnProviderError:
		logger.Info("Cannot get the volume's topology from the cloud: PV refused", "err", err)
		a.count(outcomeProviderErrorDenied)
		return denied(providerErrorStatus(name, err))
	default:
		logger.Info("Cannot get the volume's topology from the cloud: admitted unchanged", "err", err)
		a.count(outcomeProviderErrorAdmitted)
		return allowed(fmt.Sprintf("persistent volume %s: cannot get its topology from the cloud: %v: admitted without topology labels", name, err))
	}

	return a.respond(logger, d, req.Object.Raw, outcome)
}

// respond admits with d's patch of raw; outcome "" is labeled or unchanged.
func (a *Admitter) respond(logger klog.Logger, d Decision, raw []byte, outcome string) *admissionv1.AdmissionResponse {
	p, err := patch(d, raw)
	if err != nil { // decode succeeded, so the raw object is JSON: not expected
		return a.invalid(logger, fmt.Sprintf("cannot patch the persistent volume: %v", err))
	}
	if outcome == "" {
		outcome = outcomeUnchanged
		if p != nil {
			outcome = outcomeLabeled
		}
	}
	logger.V(2).Info("Decided", "outcome", outcome, "labels", d.Labels != nil, "nodeAffinity", d.NodeAffinity != nil, "warnings", len(d.Warnings))
	a.count(outcome)
	resp := allowed(d.Warnings...)
	if p != nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = p, &pt
	}
	return resp
}

func (a *Admitter) count(outcome string) {
	if a.decisions != nil {
		a.decisions.WithLabelValues(outcome).Inc()
	}
}

func (a *Admitter) invalid(logger klog.Logger, msg string) *admissionv1.AdmissionResponse {
	logger.V(2).Info("Invalid request", "reason", msg)
	a.count(outcomeInvalid)
	return denied(&metav1.Status{Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest, Message: Name + ": " + msg})
}

// decode reads the PV of a request; the apiserver sends JSON.
func decode(raw []byte) (*corev1.PersistentVolume, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errors.New("the request has no object")
	}
	pv := &corev1.PersistentVolume{}
	if err := json.Unmarshal(raw, pv); err != nil {
		return nil, fmt.Errorf("the object is not a persistent volume: %v", err)
	}
	if (pv.Kind != "" && pv.Kind != "PersistentVolume") || (pv.APIVersion != "" && pv.APIVersion != "v1") {
		return nil, fmt.Errorf("the object is a %s %s, not a v1 PersistentVolume", pv.APIVersion, pv.Kind)
	}
	return pv, nil
}

func hasTrustedTopology(pv *corev1.PersistentVolume) bool {
	_, _, _, ok := trustedTopology(pv)
	return ok
}

// pvName names the PV in messages; on CREATE it may only have a generateName.
func pvName(pv *corev1.PersistentVolume) string {
	switch {
	case pv.Name != "":
		return pv.Name
	case pv.GenerateName != "":
		return pv.GenerateName + "*"
	}
	return "(unnamed)"
}

// volumeHandle names the cloud volume behind pv in messages.
func volumeHandle(pv *corev1.PersistentVolume) string {
	if pv.Spec.CSI != nil && pv.Spec.CSI.VolumeHandle != "" {
		return pv.Spec.CSI.VolumeHandle
	}
	return "behind it"
}

func resourceString(req *admissionv1.AdmissionRequest) string {
	s := req.Resource.Version + "/" + req.Resource.Resource
	if req.Resource.Group != "" {
		s = req.Resource.Group + "/" + s
	}
	if req.SubResource != "" {
		s += "/" + req.SubResource
	}
	return s
}

// providerErrorStatus refuses a PV whose topology the cloud could not
// tell: 503 with the delay when the cloud asks for a retry, else 500.
func providerErrorStatus(name string, err error) *metav1.Status {
	st := &metav1.Status{
		Code:   http.StatusInternalServerError,
		Reason: metav1.StatusReasonInternalError,
		Message: fmt.Sprintf("%s: cannot get the topology of volume %s from the cloud: %v; the PV is refused so it is not created without its zone (retry, or run the webhook with --pv-label-on-provider-error=admit)",
			Name, name, err),
	}
	if after, ok := cloud.IsRetryAfter(err); ok {
		st.Code, st.Reason = http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable
		secs := math.Ceil(after.Seconds())
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(min(max(secs, 1), math.MaxInt32))}
	}
	return st
}

func allowed(warnings ...string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}

func denied(st *metav1.Status) *admissionv1.AdmissionResponse {
	st.Status = metav1.StatusFailure
	st.Message = strings.TrimSpace(st.Message)
	return &admissionv1.AdmissionResponse{Allowed: false, Result: st}
}
