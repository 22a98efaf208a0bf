// Package local is the provider of Portside's local reference cloud
// (`portside cloud serve`): the SDK of pkg/cloud over the cloud's v1 API.
//
// It registers itself as "local"; its --cloud-config is YAML or JSON:
//
//	endpoint: http://127.0.0.1:8780   # the cloud's API
//	tokenFile: _output/cloud/token    # or token: <literal>
//	# or, instead of both: dataDir: _output/cloud (reads its endpoint and token files)
package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// ProviderName is the name of the local provider, and the scheme of its
// providerIDs ("local://i-00000001").
const ProviderName = "local"

// CSIDriver is the CSI driver name of the local cloud's volumes: a PV with
// this driver has the volume ID as its volumeHandle.
const CSIDriver = "volumes.local.portside.io"

func init() {
	cloud.MustRegister(ProviderName, func(_ context.Context, config io.Reader) (cloud.Provider, error) {
		return NewFromReader(config)
	})
}

// NewFromReader is ParseConfig and NewFromConfig: what a provider factory
// (this package's, or one wrapping the local provider) does with its
// --cloud-config.
func NewFromReader(config io.Reader) (*Provider, error) {
	cfg, err := ParseConfig(config)
	if err != nil {
		return nil, err
	}
	return NewFromConfig(cfg)
}

// Config is the local provider's --cloud-config.
type Config struct {
	Endpoint  string `json:"endpoint,omitempty"`
	Token     string `json:"token,omitempty"`
	TokenFile string `json:"tokenFile,omitempty"`
	// DataDir of a cloud on this machine: its endpoint and token files are read.
	DataDir string `json:"dataDir,omitempty"`
	// DualStack declares that the cloud has an IPv6 VIP pool.
	DualStack bool `json:"dualStack,omitempty"`
}

// ParseConfig reads a config; nil config is an error that says what to give.
func ParseConfig(r io.Reader) (Config, error) {
	var cfg Config
	if r == nil {
		return cfg, errors.New("the local provider needs --cloud-config with endpoint and token (or dataDir)")
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return cfg, err
	}
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return cfg, fmt.Errorf("--cloud-config: %w (fields: endpoint, token, tokenFile, dataDir, dualStack)", err)
	}
	return cfg, nil
}

// NewFromConfig resolves a config into a provider.
func NewFromConfig(cfg Config) (*Provider, error) {
	if cfg.DataDir != "" {
		if cfg.Endpoint == "" {
			data, err := os.ReadFile(filepath.Join(cfg.DataDir, "endpoint"))
			if err != nil {
				return nil, fmt.Errorf("dataDir %s has no endpoint file (is `portside cloud serve --data-dir %s` running?): %w", cfg.DataDir, cfg.DataDir, err)
			}
			cfg.Endpoint = strings.TrimSpace(string(data))
		}
		if cfg.Token == "" && cfg.TokenFile == "" {
			cfg.TokenFile = filepath.Join(cfg.DataDir, "token")
		}
	}
	fromFile := cfg.Token == "" && cfg.TokenFile != ""
	if fromFile {
		tok, err := client.ReadTokenFile(cfg.TokenFile) // refused if others may read it
		if err != nil {
			return nil, fmt.Errorf("tokenFile: %w", err)
		}
		cfg.Token = tok
	}
	if cfg.Endpoint == "" || cfg.Token == "" {
		return nil, errors.New("--cloud-config must give endpoint and token (or tokenFile), or dataDir")
	}
	c := client.New(cfg.Endpoint, cfg.Token)
	if fromFile {
		// The file is read again when it changes: a token rotated in the
		// cloud (SIGHUP) reaches the CCM without a restart.
		var err error
		if c, err = client.NewWithTokenFile(cfg.Endpoint, cfg.TokenFile); err != nil {
			return nil, fmt.Errorf("tokenFile: %w", err)
		}
	}
	p := New(c)
	p.dualStack = cfg.DualStack
	return p, nil
}

// Provider implements cloud.Provider for the local cloud.
type Provider struct {
	c         *client.Client
	dualStack bool
}

var _ cloud.Provider = (*Provider)(nil)

// New returns a provider over a client.
func New(c *client.Client) *Provider { return &Provider{c: c} }

// ProviderName returns "local".
func (p *Provider) ProviderName() string { return ProviderName }

// Instances returns the instances capability.
func (p *Provider) Instances() (cloud.Instances, bool) { return (*instances)(p), true }

// LoadBalancers returns the load-balancer capability.
func (p *Provider) LoadBalancers() (cloud.LoadBalancers, bool) { return (*loadBalancers)(p), true }

// Routes returns the routes capability.
func (p *Provider) Routes() (cloud.Routes, bool) { return (*routes)(p), true }

// Volumes returns the volume topology capability.
func (p *Provider) Volumes() (cloud.Volumes, bool) { return (*volumes)(p), true }

// RegistryCredentials returns the registry credentials capability.
func (p *Provider) RegistryCredentials() (cloud.RegistryCredentials, bool) {
	return (*credentials)(p), true
}

// sdkErr maps API errors onto the SDK's error contract.
func sdkErr(err error, what string) error {
	if err == nil {
		return nil
	}
	if d, ok := client.RetryAfter(err); ok {
		return &cloud.RetryAfterError{After: d, Reason: fmt.Sprintf("%s: local cloud is throttling", what)}
	}
	var se *client.StatusError
	if client.IsNotFound(err) && errors.As(err, &se) {
		return fmt.Errorf("%s: %w (%s)", what, cloud.ErrNotFound, se.Message)
	}
	return fmt.Errorf("%s: %w", what, err)
}
