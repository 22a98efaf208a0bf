// Package webhook hosts admission webhooks: the plugins of the manager that
// the cloud controller manager serves with --webhooks (upstream's webhook
// hosting, KEP-2699) and `portside webhook serve` serves standalone.
package webhook

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

// Admitter answers admission requests. Admit never returns nil: every
// outcome (allowed, patched, denied, allowed with warnings) is a response;
// the host sets its UID.
type Admitter interface {
	Admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse
}

// Context is what a webhook is built with.
type Context struct {
	Cloud cloud.Provider
	// ProviderErrors says what a webhook does when the provider fails:
	// ProviderErrorsDeny or ProviderErrorsAdmit.
	ProviderErrors string
	// Metrics is where the webhook registers its own metrics.
	Metrics prometheus.Registerer
	// ProviderQPS and ProviderBurst bound a webhook's calls to the
	// provider (a token bucket): whoever reaches the webhook must not be
	// able to enumerate volumes or spend the cloud's quota through it.
	// 0: the webhook's defaults.
	ProviderQPS   float32
	ProviderBurst int
}

// Values of --pv-label-on-provider-error (Context.ProviderErrors).
const (
	ProviderErrorsDeny  = "deny"
	ProviderErrorsAdmit = "admit"
)

// Webhook is a plugin of the manager, like a controller.
type Webhook struct {
	// Name is what --webhooks names, e.g. "persistent-volume-label".
	Name string
	// Path is the HTTPS path it is served on, e.g. "/persistent-volume-label".
	Path string
	// DisabledByDefault webhooks are not enabled by --webhooks=*.
	DisabledByDefault bool
	// New builds the webhook; it returns skip (with the reason) when the
	// provider lacks what the webhook needs.
	New func(ctx context.Context, wc *Context) (a Admitter, skip string, err error)
}
