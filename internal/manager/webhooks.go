package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/webhook"
	"github.com/portside-io/portside/internal/webhooks/pvlabel"
	"github.com/portside-io/portside/pkg/cloud"
)

// WebhookOptions are the webhook settings: upstream's --webhooks and
// --webhook-* serving flags (k8s.io/cloud-provider/options/webhook.go:
// same names, types and defaults) and Portside's
// --pv-label-on-provider-error. `portside ccm` serves the enabled webhooks
// on every replica (the apiserver calls any replica behind the Service);
// `portside webhook serve` serves them alone.
type WebhookOptions struct {
	// Webhooks: '*' enables the webhooks on by default, 'name' one,
	// '-name' disables one. None by default (as upstream) in the CCM.
	Webhooks           []string
	WebhookBindAddress net.IP
	// WebhookSecurePort: 0 disables the webhooks in the CCM (as upstream);
	// `portside webhook serve` then picks a free port.
	WebhookSecurePort int
	// WebhookCertDir holds cloud-controller-manager-webhook.crt|.key,
	// generated (self-signed) when missing; WebhookCertFile and
	// WebhookKeyFile win over it. Either is re-read when it changes.
	WebhookCertDir             string
	WebhookCertFile            string
	WebhookKeyFile             string
	WebhookTLSCipherSuites     []string
	WebhookTLSCurvePreferences []int32
	WebhookTLSMinVersion       string
	WebhookDisableHTTP2        bool
	// WebhookClientCAFile: Portside's; requests must carry a client
	// certificate of these CAs (the apiserver's admission client cert).
	WebhookClientCAFile string
	// PVLabelProviderQPS and PVLabelProviderBurst bound the provider calls
	// of persistent-volume-label (a token bucket).
	PVLabelProviderQPS   float32
	PVLabelProviderBurst int
	// PVLabelOnProviderError is what persistent-volume-label does when the
	// provider fails: webhook.ProviderErrorsDeny or ProviderErrorsAdmit.
	PVLabelOnProviderError string

	// Set by programs, not flags:

	// WebhookListener, when set, is where the webhooks are served instead
	// of --webhook-bind-address:--webhook-secure-port (the port is then not
	// consulted, 0 included): tests and `portside up` pass a listener on
	// 127.0.0.1:0. Webhooks are still served only when --webhooks enables
	// one. Serving closes it.
	WebhookListener net.Listener
	// OnWebhookServing, when set, gets the webhook server's address
	// (host:port) once it listens; Run calls it before its ready callback.
	OnWebhookServing func(addr string)
	// KnownWebhooks are the webhooks --webhooks chooses from; nil:
	// DefaultWebhooks().
	KnownWebhooks []webhook.Webhook

	// standalone: `portside webhook serve` (port 0 picks a free port).
	standalone bool
}

// Upstream's default webhook port.
const defaultWebhookPort = 10260

// NewWebhookOptions returns the CCM's defaults: upstream's.
func NewWebhookOptions() WebhookOptions {
	return WebhookOptions{
		WebhookBindAddress:     net.IPv4zero,
		WebhookSecurePort:      defaultWebhookPort,
		PVLabelOnProviderError: webhook.ProviderErrorsDeny,
		PVLabelProviderQPS:     pvlabel.DefaultProviderQPS,
		PVLabelProviderBurst:   pvlabel.DefaultProviderBurst,
	}
}

// NewStandaloneWebhookOptions returns the defaults of `portside webhook
// serve`: every webhook on by default (--webhooks=*), and port 0 picks a
// free port instead of disabling.
func NewStandaloneWebhookOptions() WebhookOptions {
	o := NewWebhookOptions()
	o.Webhooks = []string{"*"}
	o.standalone = true
	return o
}

func (o *WebhookOptions) known() []webhook.Webhook {
	if o.KnownWebhooks != nil {
		return o.KnownWebhooks
	}
	return DefaultWebhooks()
}

// AddFlags registers the webhook flags with upstream's names, types and
// defaults, and --pv-label-on-provider-error.
func (o *WebhookOptions) AddFlags(fs *pflag.FlagSet) {
	var all, off []string
	for _, w := range o.known() {
		all = append(all, w.Name)
		if w.DisabledByDefault {
			off = append(off, w.Name)
		}
	}
	portUsage := "HTTPS port to serve the webhooks on; 0: no webhooks are served (as upstream)"
	if o.standalone {
		portUsage = "HTTPS port to serve the webhooks on; 0: a free port (the address is printed)"
	}
	offNote := "none is off by default"
	if len(off) > 0 {
		offNote = "off by default: " + strings.Join(off, ", ")
	}
	fs.StringSliceVar(&o.Webhooks, "webhooks", o.Webhooks, "webhooks to serve: '*' for all on by default, 'name' to enable, '-name' to disable; known webhooks: "+
		strings.Join(all, ", ")+" ("+offNote+")")
	fs.IPVar(&o.WebhookBindAddress, "webhook-bind-address", o.WebhookBindAddress, "address to serve the webhooks on (0.0.0.0 or ::: all interfaces)")
	fs.IntVar(&o.WebhookSecurePort, "webhook-secure-port", o.WebhookSecurePort, portUsage)
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", o.WebhookCertDir, "directory of the serving pair "+webhook.PairName+".crt and .key, generated (self-signed) when missing; ignored with --webhook-tls-cert-file")
	fs.StringVar(&o.WebhookCertFile, "webhook-tls-cert-file", o.WebhookCertFile, "webhooks' serving certificate (CA certificates after it); re-read when it changes (default: --webhook-cert-dir, else a self-signed one in memory)")
	fs.StringVar(&o.WebhookKeyFile, "webhook-tls-private-key-file", o.WebhookKeyFile, "key of --webhook-tls-cert-file")
	fs.StringSliceVar(&o.WebhookTLSCipherSuites, "webhook-tls-cipher-suites", o.WebhookTLSCipherSuites, "TLS 1.2 cipher suites of the webhook server, by IANA name (default: Go's secure defaults)")
	fs.Int32SliceVar(&o.WebhookTLSCurvePreferences, "webhook-tls-curve-preferences", o.WebhookTLSCurvePreferences, "key exchanges of the webhook server, as Go's crypto/tls CurveID numbers, e.g. 29,23; empty: Go's defaults")
	fs.StringVar(&o.WebhookTLSMinVersion, "webhook-tls-min-version", o.WebhookTLSMinVersion, "minimum TLS version of the webhook server: VersionTLS12 or VersionTLS13 (default VersionTLS12)")
	fs.BoolVar(&o.WebhookDisableHTTP2, "webhook-disable-http2-serving", o.WebhookDisableHTTP2, "serve the webhooks over HTTP/1.1 only")
	fs.StringVar(&o.WebhookClientCAFile, "webhook-client-ca-file", o.WebhookClientCAFile,
		"PEM CA certificates; when set, every request must present a client certificate they sign (kube-apiserver's, from its admission kubeconfig), others are refused at TLS (Portside's; default: no client certificate asked)")
	fs.Float32Var(&o.PVLabelProviderQPS, "pv-label-provider-qps", o.PVLabelProviderQPS,
		"cloud provider calls per second persistent-volume-label may make (a token bucket); over it, PVs it would ask the cloud about are refused with 429 and Retry-After")
	fs.IntVar(&o.PVLabelProviderBurst, "pv-label-provider-burst", o.PVLabelProviderBurst, "burst of --pv-label-provider-qps")
	fs.StringVar(&o.PVLabelOnProviderError, "pv-label-on-provider-error", o.PVLabelOnProviderError,
		"what persistent-volume-label does when the cloud provider fails: deny (the apiserver retries the create) or admit (the volume is created without topology labels)")
}

// Validate checks the webhook options; each problem is one message.
func (o *WebhookOptions) Validate() []string {
	var errs []string
	if o.WebhookSecurePort < 0 || o.WebhookSecurePort > 65535 {
		errs = append(errs, fmt.Sprintf("--webhook-secure-port %d is out of range 0-65535 (0: no webhooks)", o.WebhookSecurePort))
	}
	if (o.WebhookCertFile == "") != (o.WebhookKeyFile == "") {
		errs = append(errs, "--webhook-tls-cert-file and --webhook-tls-private-key-file go together")
	}
	if _, _, _, err := o.webhookTLS(); err != nil {
		errs = append(errs, err.Error())
	}
	if o.PVLabelProviderQPS <= 0 || o.PVLabelProviderBurst < 1 {
		errs = append(errs, fmt.Sprintf("--pv-label-provider-qps=%v --pv-label-provider-burst=%d: the QPS must be above 0 and the burst at least 1 (defaults %d and %d)",
			o.PVLabelProviderQPS, o.PVLabelProviderBurst, pvlabel.DefaultProviderQPS, pvlabel.DefaultProviderBurst))
	}
	switch o.PVLabelOnProviderError {
	case webhook.ProviderErrorsDeny, webhook.ProviderErrorsAdmit:
	default:
		errs = append(errs, fmt.Sprintf("--pv-label-on-provider-error=%q: use %s or %s", o.PVLabelOnProviderError, webhook.ProviderErrorsDeny, webhook.ProviderErrorsAdmit))
	}
	if _, err := webhook.Enabled(o.Webhooks, o.known()); err != nil {
		errs = append(errs, err.Error())
	}
	return errs
}

// webhookTLS parses the --webhook-tls-* settings.
func (o *WebhookOptions) webhookTLS() (minVersion uint16, suites []uint16, curves []tls.CurveID, err error) {
	if minVersion, suites, err = parseTLSFlags("--webhook-", o.WebhookTLSMinVersion, o.WebhookTLSCipherSuites); err != nil {
		return 0, nil, nil, err
	}
	for _, c := range o.WebhookTLSCurvePreferences {
		id := tls.CurveID(c)
		if c < 0 || c > 0xffff || strings.HasPrefix(id.String(), "CurveID(") {
			return 0, nil, nil, fmt.Errorf("--webhook-tls-curve-preferences: %d is not a curve Go's crypto/tls knows (e.g. 29 X25519, 23 P-256, 4588 X25519MLKEM768)", c)
		}
		curves = append(curves, id)
	}
	return minVersion, suites, curves, nil
}

// ServeWebhooks serves the enabled webhooks until ctx is done, and returns
// their address; "" (and a nil errc) when none is served: no webhook
// enabled, or --webhook-secure-port=0 in the CCM. The options must be
// valid. reg gets the serving metrics and the webhooks' own.
func (o *WebhookOptions) ServeWebhooks(ctx context.Context, provider cloud.Provider, reg prometheus.Registerer) (addr string, errc <-chan error, err error) {
	logger := klog.FromContext(ctx)
	enabled, err := webhook.Enabled(o.Webhooks, o.known())
	if err != nil {
		return "", nil, err
	}
	if len(enabled) == 0 {
		logger.V(2).Info("No webhooks enabled (--webhooks)")
		return "", nil, nil
	}
	names := make([]string, len(enabled))
	for i, w := range enabled {
		names[i] = w.Name
	}
	if o.WebhookListener == nil && o.WebhookSecurePort == 0 && !o.standalone {
		logger.Info("Webhooks enabled but not served: --webhook-secure-port=0", "webhooks", names)
		return "", nil, nil
	}
	logger.Info("Webhooks enabled", "webhooks", names, "onProviderError", o.PVLabelOnProviderError)
	minTLS, suites, curves, err := o.webhookTLS()
	if err != nil {
		return "", nil, err
	}
	bind := ""
	if o.WebhookBindAddress != nil {
		bind = o.WebhookBindAddress.String()
	}
	return webhook.Serve(ctx, webhook.ServeOptions{
		BindAddress: bind, Port: o.WebhookSecurePort, Listener: o.WebhookListener,
		CertDir: o.WebhookCertDir, CertFile: o.WebhookCertFile, KeyFile: o.WebhookKeyFile, ClientCAFile: o.WebhookClientCAFile,
		MinTLSVersion: minTLS, CipherSuites: suites, CurvePreferences: curves, DisableHTTP2: o.WebhookDisableHTTP2,
		Webhooks: enabled,
		Context: &webhook.Context{Cloud: provider, ProviderErrors: o.PVLabelOnProviderError, Metrics: reg,
			ProviderQPS: o.PVLabelProviderQPS, ProviderBurst: o.PVLabelProviderBurst},
		Registry: reg,
	})
}
