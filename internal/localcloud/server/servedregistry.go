package server

import (
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"github.com/portside-io/portside/internal/localcloud/registry"
	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// RegistryDir is the served registry's directory (blobs and manifest
// journal), next to the state file.
const RegistryDir = "registry"

// ServeRegistry opens the OCI registry the cloud serves, reachable by
// clients at host (host:port), records it as the served registry (dropping
// a served registry recorded with another host) and returns its handler.
// Credentials the cloud issues for host are what the registry accepts.
// Call it at most once; Close closes the registry.
func (s *Server) ServeRegistry(host string) (http.Handler, error) {
	if s.registry != nil {
		return nil, fmt.Errorf("the registry is already served at %s", s.registryHost)
	}
	// With real machines the registry has a second name: the VPC
	// gateway's port, where the machines reach it; images named by it get
	// credentials for it.
	var aliases []string
	if s.hv != nil {
		aliases = []string{netip.AddrPortFrom(s.hv.Network().Gateway(), VPCRegistryPort).String()}
	}
	reg, err := registry.New(registry.Options{
		Host: host, Aliases: aliases, Dir: filepath.Join(s.dir, RegistryDir), Secret: s.secret, Logger: s.logger.WithName("registry"),
		PublicPrefixes: s.opts.RegistryPublicPrefixes,
	})
	if err != nil {
		return nil, err
	}
	if err := s.recordServedRegistry(host, aliases...); err != nil {
		_ = reg.Close()
		return nil, err
	}
	s.registry, s.registryHost = reg, host
	return reg.Handler(), nil
}

// recordServedRegistry makes host (and its aliases) the served registry;
// "" records none.
func (s *Server) recordServedRegistry(host string, aliases ...string) error {
	hosts := append([]string{host}, aliases...)
	return s.store.Update(func(tx *store.Tx) error {
		regs, err := store.List[api.Registry](tx, store.Registries)
		if err != nil {
			return err
		}
		for _, r := range regs {
			if r.Served && !slices.Contains(hosts, r.Host) {
				if err := tx.Delete(store.Registries, r.Host); err != nil {
					return err
				}
			}
		}
		if host == "" {
			return nil
		}
		for _, h := range hosts {
			cur, ok, err := store.Get[api.Registry](tx, store.Registries, h)
			if err != nil {
				return err
			}
			if !ok {
				cur = api.Registry{Host: h, CreatedAt: time.Now().UTC()}
			}
			cur.Served = true
			if err := tx.Put(store.Registries, h, cur); err != nil {
				return err
			}
		}
		return nil
	})
}
