package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/localcloud/registry"
	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

func (s *Server) createRegistry(w http.ResponseWriter, r *http.Request) {
	var reg api.Registry
	if err := decode(w, r, &reg); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if reg.Host == "" || strings.ContainsAny(reg.Host, "/ ") {
		respond(w, r, 0, nil, invalid("host %q is not a registry host (want e.g. registry.example.com:5000)", reg.Host))
		return
	}
	reg.CreatedAt = time.Now().UTC()
	lim := s.limits()
	if err := checkLen("host", reg.Host, lim.RegistryHostLen); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	err := s.store.Update(func(tx *store.Tx) error {
		if tx.Exists(store.Registries, reg.Host) {
			return conflict("registry %q already exists", reg.Host)
		}
		if err := checkCount(tx, store.Registries, "registries", lim.Registries); err != nil {
			return err
		}
		return tx.Put(store.Registries, reg.Host, reg)
	})
	respond(w, r, http.StatusCreated, reg, err)
}

func (s *Server) listRegistries(w http.ResponseWriter, r *http.Request) {
	var out []api.Registry
	err := s.store.View(func(tx *store.Tx) (err error) {
		out, err = store.List[api.Registry](tx, store.Registries)
		return err
	})
	if out == nil {
		out = []api.Registry{}
	}
	respond(w, r, http.StatusOK, out, err)
}

func (s *Server) deleteRegistry(w http.ResponseWriter, r *http.Request) {
	host := r.PathValue("host")
	err := s.store.Update(func(tx *store.Tx) error {
		reg, ok, err := store.Get[api.Registry](tx, store.Registries, host)
		if err != nil {
			return err
		}
		if !ok {
			return notFound("registry %q not found", host)
		}
		if reg.Served {
			return &apiError{http.StatusConflict, "Conflict", fmt.Sprintf("registry %q is the one the cloud serves: it cannot be removed while served (restart the cloud with --registry-listen=\"\")", host)}
		}
		return tx.Delete(store.Registries, host)
	})
	respond(w, r, 0, nil, err)
}

// RegistryHost returns the registry part of an image reference, as the
// container runtimes read it: the first path segment when it looks like a
// host (has a '.' or ':' or is localhost), else docker.io.
func RegistryHost(image string) string {
	first, _, found := strings.Cut(image, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return first
	}
	return "docker.io"
}

// issueCredential signs a short-lived credential for the image's registry:
// a node credential, or, with a service-account token, one bound to that
// service account (after the token is verified against a trusted issuer).
func (s *Server) issueCredential(w http.ResponseWriter, r *http.Request) {
	var req api.CredentialRequest
	if err := decode(w, r, &req); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if req.Image == "" {
		respond(w, r, 0, nil, invalid("image is empty (want e.g. registry.example.com/team/app:1.0)"))
		return
	}
	if !requireScope(w, r, credentialScope(req.Push)) {
		return
	}
	host := RegistryHost(req.Image)
	err := s.store.View(func(tx *store.Tx) error {
		if !tx.Exists(store.Registries, host) {
			return notFound("no credentials for registry %q: register it with POST /v1/registries", host)
		}
		return nil
	})
	if err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	now := time.Now()
	claims := registry.Claims{Host: host, Subject: registry.NodeSubject, Push: req.Push,
		ExpiresAt: now.Add(s.opts.CredentialTTL).UTC().Truncate(time.Second)}
	if req.ServiceAccountToken != "" {
		sa, err := s.exchangeToken(req.ServiceAccountToken, now)
		if err != nil {
			klog.FromContext(r.Context()).V(2).Info("Service account token refused", "image", req.Image, "reason", err.Error())
			respond(w, r, 0, nil, err)
			return
		}
		if req.Push {
			respond(w, r, 0, nil, forbidden("service account %s/%s may not push: credentials from exchanged tokens only pull", sa.Namespace, sa.Name))
			return
		}
		claims.Subject = "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
		claims.Repositories = sa.Repositories
		if exp := sa.Expiry.UTC().Truncate(time.Second); exp.Before(claims.ExpiresAt) {
			claims.ExpiresAt = exp
		}
		klog.FromContext(r.Context()).V(2).Info("Service account token exchanged", "registry", host,
			"namespace", sa.Namespace, "serviceAccount", sa.Name, "uid", sa.UID, "expiresAt", claims.ExpiresAt, "repositories", claims.Repositories)
	}
	user, pass := registry.Sign(s.secret, claims)
	respond(w, r, http.StatusOK, api.Credential{
		Registry: host, Username: user, Password: pass, ExpiresAt: claims.ExpiresAt,
		Subject: claims.Subject, Push: claims.Push, Repositories: claims.Repositories,
	}, nil)
}
