package registry

import (
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ggcr "github.com/google/go-containerregistry/pkg/registry"
)

// Realm is the HTTP Basic realm the registry challenges with.
const Realm = "portside local cloud registry"

// Options configure a Registry.
type Options struct {
	// Host is the host:port clients use to reach the registry; credentials
	// must be for it, or for one of Aliases.
	Host string
	// Aliases are other host:port names clients reach the registry by (the
	// cloud's VPC gateway, for its machines): a credential for any of them
	// is accepted, as for Host.
	Aliases []string
	// Dir holds the blobs (Dir/blobs) and the manifest journal.
	Dir string
	// Secret verifies credentials (the cloud's credential secret).
	Secret []byte
	// Logger logs refusals at V(2) and the registry's requests at V(4);
	// default: discard.
	Logger logr.Logger
	// Now is the clock credentials are checked against; default time.Now.
	Now func() time.Time
	// PublicPrefixes name the public repositories: anyone may pull them
	// without a credential, as from a cloud's public image repositories
	// (real nodes' containerd mirrors registry.k8s.io here, and pulls the
	// pod sandbox image with no credential at all). Each is a repository
	// name or a prefix ending in "/". Pushing always needs a credential.
	PublicPrefixes []string
}

// Registry is an OCI distribution registry with durable manifests.
type Registry struct {
	opts    Options
	inner   http.Handler
	journal *journal
	blobs   *blobIndex
}

// New opens (creating if needed) the registry in opts.Dir and replays its
// manifest journal, so a restarted cloud serves what was pushed before.
func New(opts Options) (*Registry, error) {
	if opts.Host == "" {
		return nil, errors.New("registry: Host is required")
	}
	if len(opts.Secret) == 0 {
		return nil, errors.New("registry: Secret is required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	blobs := filepath.Join(opts.Dir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, fmt.Errorf("registry directory: %w", err)
	}
	r := &Registry{opts: opts, blobs: newBlobIndex()}
	r.inner = ggcr.New(
		ggcr.WithBlobHandler(ggcr.NewDiskBlobHandler(blobs)),
		ggcr.Logger(log.New(logWriter{opts.Logger.V(4)}, "", 0)),
	)
	j, replayed, err := openJournal(filepath.Join(opts.Dir, journalFile), r.inner, r.blobs, opts.Logger)
	if err != nil {
		return nil, err
	}
	r.journal = j
	opts.Logger.Info("Registry opened", "host", opts.Host, "dir", opts.Dir, "manifestOps", replayed)
	return r, nil
}

// Close closes the journal.
func (r *Registry) Close() error { return r.journal.close() }

// Handler serves the distribution API (/v2/), authenticated.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, pass, ok := req.BasicAuth()
		if !ok && publicRead(req.Method, req.URL.Path, r.opts.PublicPrefixes) {
			r.serveLimited(w, req)
			return
		}
		if !ok {
			r.refuse(w, req, http.StatusUnauthorized, "UNAUTHORIZED",
				"authentication required: send HTTP Basic credentials issued by the local cloud (POST /v1/credentials)", "no credentials")
			return
		}
		claims, err := Verify(r.opts.Secret, r.opts.Host, user, pass, r.opts.Now())
		for _, a := range r.opts.Aliases {
			if err == nil {
				break
			}
			if c, aerr := Verify(r.opts.Secret, a, user, pass, r.opts.Now()); aerr == nil {
				claims, err = c, nil
			}
		}
		if err != nil {
			r.refuse(w, req, http.StatusUnauthorized, "UNAUTHORIZED", "invalid credential: "+err.Error(), err.Error())
			return
		}
		write := req.Method != http.MethodGet && req.Method != http.MethodHead
		if write && !claims.Push {
			r.refuse(w, req, http.StatusForbidden, "DENIED",
				fmt.Sprintf("credential of %s may only pull: ask for a push credential (push: true) to %s", claims.Subject, req.Method), "pull-only credential")
			return
		}
		// A narrowed credential only reads (the cloud issues none that
		// push): its repositories, and what anyone may pull (the kubelet
		// sends it for every image of this registry).
		if len(claims.Repositories) > 0 && (write || !(ReadAllowed(req.URL.Path, claims.Repositories) || publicRead(req.Method, req.URL.Path, r.opts.PublicPrefixes))) {
			r.refuse(w, req, http.StatusForbidden, "DENIED",
				fmt.Sprintf("credential of %s reads only %s: widen the token issuer's repositories (portside cloud registries trust-issuer --repository) to read %s",
					claims.Subject, strings.Join(claims.Repositories, ", "), req.URL.Path), "outside the credential's repositories")
			return
		}
		if write && isManifestPath(req.URL.Path) {
			r.journal.serveWrite(w, req, r.inner)
			return
		}
		if len(claims.Repositories) > 0 {
			r.serveLimited(w, req)
			return
		}
		r.inner.ServeHTTP(w, req)
	})
}

// serveLimited serves a read of a client allowed only some repositories
// (already checked): a blob only if a manifest of the repository in its
// path references it, else 404 BLOB_UNKNOWN, as for a blob the repository
// does not have.
func (r *Registry) serveLimited(w http.ResponseWriter, req *http.Request) {
	if repo, digest := blobOf(req.URL.Path); repo != "" && !r.blobs.has(repo, digest) {
		r.refuse(w, req, http.StatusNotFound, "BLOB_UNKNOWN",
			fmt.Sprintf("blob %s is not referenced by any manifest of repository %s", digest, repo), "blob of another repository")
		return
	}
	r.inner.ServeHTTP(w, req)
}

func (r *Registry) refuse(w http.ResponseWriter, req *http.Request, status int, code, msg, reason string) {
	user, _, _ := req.BasicAuth()
	r.opts.Logger.V(2).Info("Registry request refused", "method", req.Method, "path", req.URL.Path,
		"remote", req.RemoteAddr, "username", user, "status", status, "reason", reason)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf("Basic realm=%q", Realm))
	}
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	writeRegError(w, status, code, msg)
}

// logWriter sends the registry's log lines to a logr logger.
type logWriter struct{ l logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	if w.l.Enabled() {
		w.l.Info(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
