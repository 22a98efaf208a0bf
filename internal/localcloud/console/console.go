// Package console is the local cloud's web console: a read-mostly view of
// instances, load balancers (with the data plane's backend health), routes,
// volumes, registries, recent API calls and injected faults, joined with the
// cluster side (Service → load balancer → nodes → pods) when a kubeconfig is
// given. Everything it serves is embedded: it works offline.
package console

import (
	"context"
	"embed"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// Cloud is what the console reads from, and writes to, the local cloud.
type Cloud interface {
	State(ctx context.Context) (CloudState, error)
	SetFaults(ctx context.Context, f api.Faults) error
}

// CloudState is one consistent view of the cloud.
type CloudState struct {
	Regions       []api.Region   `json:"regions"`
	Instances     []api.Instance `json:"instances"`
	LoadBalancers []LoadBalancer `json:"loadBalancers"`
	Routes        []api.Route    `json:"routes"`
	Volumes       []api.Volume   `json:"volumes"`
	Registries    []api.Registry `json:"registries"`
	Faults        api.Faults     `json:"faults"`
	Calls         []Call         `json:"calls"`
}

// LoadBalancer is a stored load balancer with its data plane's health.
type LoadBalancer struct {
	api.LoadBalancer
	Health api.LoadBalancerHealth `json:"health"`
}

// Call is one API request the cloud served.
type Call struct {
	Time          time.Time `json:"time"`
	Method        string    `json:"method"`
	Path          string    `json:"path"`
	Status        int       `json:"status"`
	LatencyMillis float64   `json:"latencyMillis"`
	Caller        string    `json:"caller"`
}

// Options configure a Console.
type Options struct {
	Cloud Cloud
	// WriteToken (the API token) logs in with write access: faults can be
	// set from the page.
	WriteToken string
	// ViewerToken logs in read-only.
	ViewerToken string
	// SessionKey signs session cookies; a key kept with the cloud's state
	// keeps browsers logged in across cloud restarts.
	SessionKey []byte
	// Kubeconfig, when set, joins the cluster side once the file exists.
	Kubeconfig string
	// Interval between snapshots pushed to open pages; default 1s.
	Interval time.Duration
}

// Console serves the web console under /console/.
type Console struct {
	opts    Options
	auth    *authenticator
	hub     *hub
	cluster *clusterSource
	logger  klog.Logger
}

//go:embed assets
var assets embed.FS

// New returns a console; its cluster side (if any) and live updates stop
// when ctx is done.
func New(ctx context.Context, opts Options) *Console {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	c := &Console{opts: opts, auth: newAuthenticator(opts.WriteToken, opts.ViewerToken, opts.SessionKey),
		logger: klog.FromContext(ctx).WithName("console")}
	if opts.Kubeconfig != "" {
		c.cluster = newClusterSource(ctx, opts.Kubeconfig)
	}
	c.hub = newHub(ctx, opts.Interval, c.snapshot)
	return c
}

// SetTokens rotates the tokens logins are checked against: sessions granted
// under a token that changed end at once, open event streams included.
func (c *Console) SetTokens(writeToken, viewerToken string) {
	c.auth.setTokens(writeToken, viewerToken)
	c.logger.Info("Console tokens rotated: sessions granted under the old ones ended")
}

// NewTicket returns a one-time login ticket (see the /console/login?ticket=
// URL) valid for TicketTTL.
func (c *Console) NewTicket(write bool) (string, time.Time) { return c.auth.newTicket(write) }

// Handler serves /console/.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /console/login", c.loginPage)
	mux.HandleFunc("POST /console/login", c.login)
	mux.HandleFunc("POST /console/logout", c.logout)
	mux.Handle("GET /console/assets/", http.StripPrefix("/console/", http.FileServerFS(assets)))
	mux.HandleFunc("GET /console/{$}", c.requireSession(c.index))
	mux.HandleFunc("GET /console/api/state", c.requireSession(c.state))
	mux.HandleFunc("GET /console/api/events", c.requireSession(c.events))
	mux.HandleFunc("PUT /console/api/faults", c.requireSession(c.putFaults))
	mux.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no console page "+r.Method+" "+r.URL.Path, http.StatusNotFound)
	})
	return securityHeaders(mux)
}

// securityHeaders keeps the pages to their own scripts and styles, out of
// frames, and the login ticket out of Referer headers.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}
