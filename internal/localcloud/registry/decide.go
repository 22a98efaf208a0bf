package registry

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// The OCI distribution spec's grammar (spec.md, "Pulling manifests" and
// "Pushing manifests"). go-containerregistry's registry routes any path, so
// a name such as "evil?x" (pushed as evil%3Fx) would be stored, journaled,
// and could not be replayed as a URL; names are checked here before the
// registry sees a write.
var (
	nameRE   = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
	tagRE    = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
	digestRE = regexp.MustCompile(`^[a-z0-9]+([+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`)
)

// maxNameLen bounds a repository name: the spec lets registries limit it,
// and clients commonly cap host/name at 255 characters.
const maxNameLen = 255

// Refusal is a distribution-spec error: the HTTP status, the spec's error
// code and a message saying what is wrong and what to do.
type Refusal struct {
	Status  int
	Code    string
	Message string
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Message }

func refusal(code, format string, a ...any) *Refusal {
	return &Refusal{Status: http.StatusBadRequest, Code: code, Message: fmt.Sprintf(format, a...)}
}

// CheckName refuses a repository name outside the spec's grammar
// (NAME_INVALID).
func CheckName(repo string) *Refusal {
	if len(repo) > maxNameLen {
		return refusal("NAME_INVALID", "repository name is %d characters long, at most %d are allowed", len(repo), maxNameLen)
	}
	if !nameRE.MatchString(repo) {
		return refusal("NAME_INVALID", "repository name %q is invalid: use lowercase letters and digits in /-separated components, joined by '.', '_', '__' or dashes (OCI distribution spec)", repo)
	}
	return nil
}

// CheckReference refuses a manifest reference that is neither a tag
// (TAG_INVALID) nor a well-formed digest (DIGEST_INVALID). A reference
// with a ':' can only be a digest, as tags cannot contain one.
func CheckReference(ref string) *Refusal {
	if !strings.Contains(ref, ":") {
		if !tagRE.MatchString(ref) {
			return refusal("TAG_INVALID", "tag %q is invalid: 1 to 128 of letters, digits, '_', '.' and '-', not starting with '.' or '-'", ref)
		}
		return nil
	}
	if !digestRE.MatchString(ref) {
		return refusal("DIGEST_INVALID", "digest %q is invalid: want algorithm:hex, e.g. sha256:<64 hex digits>", ref)
	}
	alg, enc, _ := strings.Cut(ref, ":")
	size, ok := map[string]int{"sha256": sha256.Size, "sha512": sha512.Size}[alg]
	if !ok {
		return refusal("DIGEST_INVALID", "digest %q uses algorithm %q: this registry supports sha256 and sha512", ref, alg)
	}
	if len(enc) != 2*size || strings.ToLower(enc) != enc {
		return refusal("DIGEST_INVALID", "digest %q is invalid: %s wants %d lowercase hex digits", ref, alg, 2*size)
	}
	if _, err := hex.DecodeString(enc); err != nil {
		return refusal("DIGEST_INVALID", "digest %q is invalid: %s wants %d lowercase hex digits", ref, alg, 2*size)
	}
	return nil
}

// CheckManifestWrite decides whether a manifest PUT (put, with body) or
// DELETE of repo/ref may reach the registry: the name and the
// reference must be in the spec's grammar, and a manifest put by digest
// must have that digest (the spec: Docker-Content-Digest MUST match the
// digest the client gave; go-containerregistry's registry does not check).
// Used for live writes and for journal entries on replay alike.
func CheckManifestWrite(put bool, repo, ref string, body []byte) *Refusal {
	if r := CheckName(repo); r != nil {
		return r
	}
	if r := CheckReference(ref); r != nil {
		return r
	}
	alg, want, isDigest := strings.Cut(ref, ":")
	if !isDigest || !put {
		return nil
	}
	var got string
	switch alg {
	case "sha256":
		s := sha256.Sum256(body)
		got = hex.EncodeToString(s[:])
	case "sha512":
		s := sha512.Sum512(body)
		got = hex.EncodeToString(s[:])
	}
	if got != want {
		return refusal("DIGEST_INVALID", "manifest pushed as %s has digest %s:%s: push it by that digest or by a tag", ref, alg, got)
	}
	return nil
}

// publicRead reports whether a request without credentials may be served:
// a pull (GET or HEAD) of a manifest or blob of a public repository. The
// /v2/ ping and the catalog stay authenticated, so an anonymous client
// learns nothing of the private repositories. Blobs are stored by digest
// for all repositories at once: the handler then serves a blob only
// through a repository that references it (blobIndex), so a private
// layer's digest does not open it through a public path.
func publicRead(method, path string, prefixes []string) bool {
	if method != http.MethodGet && method != http.MethodHead {
		return false
	}
	repo, kind := repoOf(path)
	if kind != "manifests" && kind != "blobs" {
		return false
	}
	return matchesRepo(repo, prefixes)
}

// ReadAllowed reports whether a credential narrowed to repos may make a
// read (GET or HEAD) of path: the /v2/ ping, and manifests, blobs and tag
// lists of the repositories repos name (a name, or a prefix ending in
// "/"). The catalog, which names every repository, is not. Empty repos:
// everything. As for publicRead, a blob is then served only through a
// repository that references it (blobIndex).
func ReadAllowed(path string, repos []string) bool {
	if len(repos) == 0 || path == "/v2/" || path == "/v2" {
		return true
	}
	repo, kind := repoOf(path)
	switch kind {
	case "manifests", "blobs", "tags":
		return matchesRepo(repo, repos)
	}
	return false
}

// repoOf splits a distribution API path /v2/<name>/<kind>/<rest> into the
// repository name and kind (manifests, blobs or tags, for tags/list); ""
// for any other path or a name outside the grammar.
func repoOf(path string) (repo, kind string) {
	if !strings.HasPrefix(path, "/v2/") {
		return "", ""
	}
	elem := strings.Split(strings.TrimPrefix(path, "/v2/"), "/")
	if len(elem) < 3 || elem[len(elem)-1] == "" {
		return "", ""
	}
	kind = elem[len(elem)-2]
	if kind != "manifests" && kind != "blobs" && (kind != "tags" || elem[len(elem)-1] != "list") {
		return "", ""
	}
	repo = strings.Join(elem[:len(elem)-2], "/")
	if CheckName(repo) != nil {
		return "", ""
	}
	return repo, kind
}

// matchesRepo reports whether repo is one of patterns: a name, or a
// prefix ending in "/".
func matchesRepo(repo string, patterns []string) bool {
	for _, p := range patterns {
		if repo == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(repo, p)) {
			return true
		}
	}
	return false
}
