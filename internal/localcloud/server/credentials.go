package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"

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
	err := s.store.Update(func(tx *store.Tx) error {
		if tx.Exists(store.Registries, reg.Host) {
			return conflict("registry %q already exists", reg.Host)
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
		if !tx.Exists(store.Registries, host) {
			return notFound("registry %q not found", host)
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

// issueCredential signs a short-lived credential for the image's registry.
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
	exp := time.Now().Add(s.opts.CredentialTTL).UTC().Truncate(time.Second)
	mac := hmac.New(sha256.New, s.secret)
	_, _ = fmt.Fprintf(mac, "%s|%d", host, exp.Unix())
	cred := api.Credential{
		Registry: host, Username: "portside",
		Password:  fmt.Sprintf("%d.%s", exp.Unix(), base64.RawURLEncoding.EncodeToString(mac.Sum(nil))),
		ExpiresAt: exp,
	}
	respond(w, r, http.StatusOK, cred, nil)
}
