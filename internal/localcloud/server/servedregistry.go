package server

import (
	"fmt"
	"net/http"
	"path/filepath"
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
	reg, err := registry.New(registry.Options{
		Host: host, Dir: filepath.Join(s.dir, RegistryDir), Secret: s.secret, Logger: s.logger.WithName("registry"),
		PublicPrefixes: s.opts.RegistryPublicPrefixes,
	})
	if err != nil {
		return nil, err
	}
	if err := s.recordServedRegistry(host); err != nil {
		_ = reg.Close()
		return nil, err
	}
	s.registry, s.registryHost = reg, host
	return reg.Handler(), nil
}

// recordServedRegistry makes host the served registry; "" records none.
func (s *Server) recordServedRegistry(host string) error {
	return s.store.Update(func(tx *store.Tx) error {
		regs, err := store.List[api.Registry](tx, store.Registries)
		if err != nil {
			return err
		}
		for _, r := range regs {
			if r.Served && r.Host != host {
				if err := tx.Delete(store.Registries, r.Host); err != nil {
					return err
				}
			}
		}
		if host == "" {
			return nil
		}
		cur, ok, err := store.Get[api.Registry](tx, store.Registries, host)
		if err != nil {
			return err
		}
		if !ok {
			cur = api.Registry{Host: host, CreatedAt: time.Now().UTC()}
		}
		cur.Served = true
		return tx.Put(store.Registries, host, cur)
	})
}
