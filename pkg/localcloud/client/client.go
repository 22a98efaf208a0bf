// Package client is the Go client of the local cloud's v1 API.
//
// Errors from the API are *StatusError values: IsNotFound tells a missing
// object, and RetryAfter tells a throttled request (429 with Retry-After).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// Client talks to one local cloud.
type Client struct {
	endpoint string
	token    string
	// tokenFile, when set, gives the token instead (NewWithTokenFile).
	tokenFile *fileToken
	userAgent string
	http      *http.Client
}

// defaultUserAgent names the program and its subcommand ("portside ccm"),
// so the cloud's console shows who calls.
var defaultUserAgent = func() string {
	if len(os.Args) == 0 {
		return "portside-localcloud-client"
	}
	ua := filepath.Base(os.Args[0])
	if len(os.Args) > 1 && os.Args[1] != "" && !strings.HasPrefix(os.Args[1], "-") {
		ua += " " + os.Args[1]
	}
	return ua
}()

// New returns a client for the cloud at endpoint (e.g. http://127.0.0.1:8443).
func New(endpoint, token string) *Client {
	return &Client{
		endpoint:  strings.TrimRight(endpoint, "/"),
		token:     token,
		userAgent: defaultUserAgent,
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
		}},
	}
}

// WithUserAgent sets the User-Agent the client sends and returns c.
func (c *Client) WithUserAgent(ua string) *Client {
	c.userAgent = ua
	return c
}

// Endpoint returns the cloud's address.
func (c *Client) Endpoint() string { return c.endpoint }

// StatusError is a non-2xx answer of the API.
type StatusError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("local cloud: %d %s: %s", e.Status, e.Code, e.Message)
}

// IsNotFound reports whether err is the API's answer that the resource
// does not exist: a 404 with the API's code NotFound. A 404 without it (a
// path the server has no endpoint for, a proxy or another server at the
// endpoint) says nothing about the resource, and callers act on "gone"
// (a Node deleted, a finalizer removed).
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == http.StatusNotFound && se.Code == api.CodeNotFound
}

// IsConflict reports whether err is a 409 from the API.
func IsConflict(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == http.StatusConflict
}

// RetryAfter returns the delay a throttled (429) request asked for.
func RetryAfter(err error) (time.Duration, bool) {
	var se *StatusError
	if errors.As(err, &se) && se.Status == http.StatusTooManyRequests {
		return se.RetryAfter, true
	}
	return 0, false
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint+path, body)
	if err != nil {
		return err
	}
	token := c.token
	if c.tokenFile != nil {
		token = c.tokenFile.get()
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("User-Agent", c.userAgent)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("local cloud %s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 300 {
		se := &StatusError{Status: resp.StatusCode}
		var apiErr api.Error
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(data, &apiErr) == nil {
			se.Code, se.Message = apiErr.Code, apiErr.Message
		} else {
			se.Message = strings.TrimSpace(string(data))
		}
		se.RetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		return se
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("local cloud %s %s: bad response: %w", method, path, err)
	}
	return nil
}

// Regions lists regions and zones.
func (c *Client) Regions(ctx context.Context) ([]api.Region, error) {
	var out []api.Region
	return out, c.do(ctx, http.MethodGet, "/v1/regions", nil, &out)
}

// InstanceTypes lists instance types.
func (c *Client) InstanceTypes(ctx context.Context) ([]api.InstanceType, error) {
	var out []api.InstanceType
	return out, c.do(ctx, http.MethodGet, "/v1/instance-types", nil, &out)
}

// CreateInstance creates an instance.
func (c *Client) CreateInstance(ctx context.Context, req api.CreateInstanceRequest) (*api.Instance, error) {
	var out api.Instance
	return &out, c.do(ctx, http.MethodPost, "/v1/instances", req, &out)
}

// ListInstances lists instances; name filters by name when not empty.
func (c *Client) ListInstances(ctx context.Context, name string) ([]api.Instance, error) {
	path := "/v1/instances"
	if name != "" {
		path += "?name=" + url.QueryEscape(name)
	}
	var out []api.Instance
	return out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// GetInstance returns an instance by ID.
func (c *Client) GetInstance(ctx context.Context, id string) (*api.Instance, error) {
	var out api.Instance
	return &out, c.do(ctx, http.MethodGet, "/v1/instances/"+url.PathEscape(id), nil, &out)
}

// InstanceByName returns the instance with a name, or a NotFound StatusError.
func (c *Client) InstanceByName(ctx context.Context, name string) (*api.Instance, error) {
	list, err := c.ListInstances(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, &StatusError{Status: http.StatusNotFound, Code: api.CodeNotFound, Message: fmt.Sprintf("no instance named %q", name)}
	}
	return &list[0], nil
}

// DeleteInstance deletes an instance.
func (c *Client) DeleteInstance(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/instances/"+url.PathEscape(id), nil, nil)
}

// StopInstance stops an instance.
func (c *Client) StopInstance(ctx context.Context, id string) (*api.Instance, error) {
	var out api.Instance
	return &out, c.do(ctx, http.MethodPost, "/v1/instances/"+url.PathEscape(id)+"/stop", nil, &out)
}

// StartInstance starts a stopped instance.
func (c *Client) StartInstance(ctx context.Context, id string) (*api.Instance, error) {
	var out api.Instance
	return &out, c.do(ctx, http.MethodPost, "/v1/instances/"+url.PathEscape(id)+"/start", nil, &out)
}

// PutLoadBalancer creates or updates a load balancer.
func (c *Client) PutLoadBalancer(ctx context.Context, name string, spec api.LoadBalancerSpec) (*api.LoadBalancer, error) {
	var out api.LoadBalancer
	return &out, c.do(ctx, http.MethodPut, "/v1/load-balancers/"+url.PathEscape(name), spec, &out)
}

// SetBackends replaces only the backends of a load balancer.
func (c *Client) SetBackends(ctx context.Context, name string, backends []api.Backend) (*api.LoadBalancer, error) {
	var out api.LoadBalancer
	return &out, c.do(ctx, http.MethodPut, "/v1/load-balancers/"+url.PathEscape(name)+"/backends", api.SetBackendsRequest{Backends: backends}, &out)
}

// ChangeBackends removes, then adds, backends of a load balancer, leaving
// the others alone; it returns how many it has now.
func (c *Client) ChangeBackends(ctx context.Context, name string, add, remove []api.Backend) (int, error) {
	var out api.ChangeBackendsResponse
	err := c.do(ctx, http.MethodPatch, "/v1/load-balancers/"+url.PathEscape(name)+"/backends",
		api.ChangeBackendsRequest{Add: add, Remove: remove}, &out)
	return out.Backends, err
}

// GetLoadBalancer returns a load balancer.
func (c *Client) GetLoadBalancer(ctx context.Context, name string) (*api.LoadBalancer, error) {
	var out api.LoadBalancer
	return &out, c.do(ctx, http.MethodGet, "/v1/load-balancers/"+url.PathEscape(name), nil, &out)
}

// ListLoadBalancers lists load balancers, of one cluster when cluster is set.
func (c *Client) ListLoadBalancers(ctx context.Context, cluster string) ([]api.LoadBalancer, error) {
	path := "/v1/load-balancers"
	if cluster != "" {
		path += "?cluster=" + url.QueryEscape(cluster)
	}
	var out []api.LoadBalancer
	return out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// LoadBalancerHealth returns the data plane's view of the backends.
func (c *Client) LoadBalancerHealth(ctx context.Context, name string) (*api.LoadBalancerHealth, error) {
	var out api.LoadBalancerHealth
	return &out, c.do(ctx, http.MethodGet, "/v1/load-balancers/"+url.PathEscape(name)+"/health", nil, &out)
}

// DeleteLoadBalancer deletes a load balancer.
func (c *Client) DeleteLoadBalancer(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/load-balancers/"+url.PathEscape(name), nil, nil)
}

// ListRoutes lists the routes of a cluster (all when empty).
func (c *Client) ListRoutes(ctx context.Context, cluster string) ([]api.Route, error) {
	path := "/v1/routes"
	if cluster != "" {
		path += "?cluster=" + url.QueryEscape(cluster)
	}
	var out []api.Route
	return out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// CreateRoute creates a route.
func (c *Client) CreateRoute(ctx context.Context, rt api.Route) (*api.Route, error) {
	var out api.Route
	return &out, c.do(ctx, http.MethodPost, "/v1/routes", rt, &out)
}

// DeleteRoute deletes a route.
func (c *Client) DeleteRoute(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/routes/"+url.PathEscape(name), nil, nil)
}

// CreateVolume creates a volume.
func (c *Client) CreateVolume(ctx context.Context, req api.CreateVolumeRequest) (*api.Volume, error) {
	var out api.Volume
	return &out, c.do(ctx, http.MethodPost, "/v1/volumes", req, &out)
}

// ListVolumes lists volumes.
func (c *Client) ListVolumes(ctx context.Context) ([]api.Volume, error) {
	var out []api.Volume
	return out, c.do(ctx, http.MethodGet, "/v1/volumes", nil, &out)
}

// GetVolume returns a volume by ID.
func (c *Client) GetVolume(ctx context.Context, id string) (*api.Volume, error) {
	var out api.Volume
	return &out, c.do(ctx, http.MethodGet, "/v1/volumes/"+url.PathEscape(id), nil, &out)
}

// DeleteVolume deletes a volume.
func (c *Client) DeleteVolume(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/volumes/"+url.PathEscape(id), nil, nil)
}

// CreateRegistry registers an image registry host.
func (c *Client) CreateRegistry(ctx context.Context, host string) (*api.Registry, error) {
	var out api.Registry
	return &out, c.do(ctx, http.MethodPost, "/v1/registries", api.Registry{Host: host}, &out)
}

// ListRegistries lists registries.
func (c *Client) ListRegistries(ctx context.Context) ([]api.Registry, error) {
	var out []api.Registry
	return out, c.do(ctx, http.MethodGet, "/v1/registries", nil, &out)
}

// Credential issues a registry credential for req.Image.
func (c *Client) Credential(ctx context.Context, req api.CredentialRequest) (*api.Credential, error) {
	var out api.Credential
	return &out, c.do(ctx, http.MethodPost, "/v1/credentials", req, &out)
}

// PutTokenIssuer trusts (or replaces, by issuer) a service-account token issuer.
func (c *Client) PutTokenIssuer(ctx context.Context, iss api.TokenIssuer) (*api.TokenIssuer, error) {
	var out api.TokenIssuer
	return &out, c.do(ctx, http.MethodPost, "/v1/token-issuers", iss, &out)
}

// ListTokenIssuers lists the trusted token issuers.
func (c *Client) ListTokenIssuers(ctx context.Context) ([]api.TokenIssuer, error) {
	var out []api.TokenIssuer
	return out, c.do(ctx, http.MethodGet, "/v1/token-issuers", nil, &out)
}

// DeleteTokenIssuer stops trusting a service-account token issuer.
func (c *Client) DeleteTokenIssuer(ctx context.Context, issuer string) error {
	return c.do(ctx, http.MethodDelete, "/v1/token-issuers?issuer="+url.QueryEscape(issuer), nil, nil)
}

// Faults returns the fault rules in force.
func (c *Client) Faults(ctx context.Context) (*api.Faults, error) {
	var out api.Faults
	return &out, c.do(ctx, http.MethodGet, "/v1/faults", nil, &out)
}

// ConsoleTicket asks for a one-time login link to the web console; the
// returned URL is absolute.
func (c *Client) ConsoleTicket(ctx context.Context, readOnly bool) (url string, t *api.ConsoleTicket, err error) {
	var out api.ConsoleTicket
	if err := c.do(ctx, http.MethodPost, "/v1/console/tickets", api.ConsoleTicketRequest{ReadOnly: readOnly}, &out); err != nil {
		return "", nil, err
	}
	return c.endpoint + out.Path, &out, nil
}

// SetFaults replaces the fault rules (an empty set clears them).
func (c *Client) SetFaults(ctx context.Context, f api.Faults) error {
	return c.do(ctx, http.MethodPut, "/v1/faults", f, nil)
}

// ParseRetryAfter reads a Retry-After header: delay-seconds or an HTTP-date
// (RFC 9110). Absent, malformed, zero, negative or past values give 0 (the
// caller backs off as usual). Either form is capped at a day, so a far
// HTTP-date is bounded as a large delay-seconds is; callers bound further
// themselves.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	const maxRetryAfter = 24 * time.Hour
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		if s > int64(maxRetryAfter/time.Second) {
			s = int64(maxRetryAfter / time.Second)
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}
