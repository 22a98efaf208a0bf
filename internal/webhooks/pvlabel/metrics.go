package pvlabel

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of portside_webhook_pv_label_decisions_total.
const (
	outcomeLabeled               = "labeled"
	outcomeUnchanged             = "unchanged"
	outcomeNotOurs               = "not_ours"
	outcomeUnknownVolume         = "unknown_volume"
	outcomeProviderErrorDenied   = "provider_error_denied"
	outcomeProviderErrorAdmitted = "provider_error_admitted"
	outcomeInvalid               = "invalid"
	// Over the provider call limit: refused, or a provisioner's PV
	// admitted on its own labels.
	outcomeRateLimitedDenied   = "rate_limited_denied"
	outcomeRateLimitedAdmitted = "rate_limited_admitted"
	// outcomeIgnored: a request other than a PV CREATE.
	outcomeIgnored = "ignored"
)

var outcomes = []string{
	outcomeLabeled, outcomeUnchanged, outcomeNotOurs, outcomeUnknownVolume,
	outcomeProviderErrorDenied, outcomeProviderErrorAdmitted, outcomeInvalid, outcomeIgnored,
	outcomeRateLimitedDenied, outcomeRateLimitedAdmitted,
}

// newDecisions returns the decisions counter, registered on reg when reg
// is not nil. A second webhook built on the same registry shares the
// counter registered first.
func newDecisions(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "portside_webhook", Subsystem: "pv_label", Name: "decisions_total",
		Help: "Admission decisions of the persistent-volume-label webhook by outcome.",
	}, []string{"outcome"})
	for _, o := range outcomes {
		c.WithLabelValues(o) // export every outcome from zero
	}
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, err
	}
	return c, nil
}

// RegisterMetrics registers the webhook's metrics on reg, as its New does
// (for docs/reference/metrics.md).
func RegisterMetrics(reg prometheus.Registerer) error {
	_, err := newDecisions(reg)
	return err
}
