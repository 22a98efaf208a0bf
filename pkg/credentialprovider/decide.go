package credentialprovider

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	v1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

// The decisions here are pure functions of what the kubelet does with a
// response (k8s.io/kubernetes/pkg/credentialprovider v1.37.2, read, not
// copied): it caches the auth map under the whole image (Image), under the
// image's first path segment, host and port (Registry), or under one key
// for every image its matchImages select (Global); a later pull finds the
// entry by those keys without running the plugin, and then matches the
// image against the entry's auth keys itself. An entry whose keys do not
// match an image it is found for gives that image no credential until it
// expires, which is the failure these functions prevent.

// authKey is an auth map key as the kubelet's keyring reads it.
type authKey struct {
	hostParts []string // the host split at dots; each part a glob
	port      string
	path      string // "" when the key names a whole registry
}

// parseAuthKey reads key as the kubelet's keyring does: an optional
// http(s) scheme, a host with optional port, an optional path; "/v1/" and
// "/v2/" at the start of the path mean the registry itself, as for Docker.
func parseAuthKey(key string) (authKey, error) {
	if key == "" {
		return authKey{}, fmt.Errorf("a credential has no registry: set Registry to the host (and optional port and path) it is for")
	}
	raw := key
	if !strings.HasPrefix(raw, "https://") && !strings.HasPrefix(raw, "http://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return authKey{}, fmt.Errorf("credential registry %q is not a registry host with optional port and path (e.g. registry.example.com:5000/team)", truncate(key))
	}
	path := u.Path
	if strings.HasPrefix(path, "/v1/") || strings.HasPrefix(path, "/v2/") {
		path = path[3:]
	}
	if path == "/" {
		path = ""
	}
	// url.Parse refuses a backslash, and "[" outside an IPv6 literal, in a host.
	parts, port := splitHostPort(u.Host)
	return authKey{hostParts: parts, port: port, path: path}, nil
}

// splitHostPort splits a URL host as the kubelet does: a port only when
// net.SplitHostPort finds one.
func splitHostPort(hostport string) (parts []string, port string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	return strings.Split(host, "."), port
}

// hostMatches says whether k's host glob matches host (host[:port]): the
// same number of dot-separated parts, each matching its glob, and equal
// ports (ports have no globs).
func (k authKey) hostMatches(hostport string) bool {
	parts, port := splitHostPort(hostport)
	if port != k.port || len(parts) != len(k.hostParts) {
		return false
	}
	for i, glob := range k.hostParts {
		if ok, _ := filepath.Match(glob, parts[i]); !ok {
			return false
		}
	}
	return true
}

// imageRegistry is the kubelet's Registry cache key for image: everything
// before the first slash.
func imageRegistry(image string) string {
	registry, _, _ := strings.Cut(image, "/")
	return registry
}

// coversRegistry says whether a response with these auth keys may be
// cached under the image's registry: no key may have a path (the answer
// for "registry.example.com/team" says nothing of ".../other", which the
// provider may answer differently), and some key's host must match the
// image's (else the entry is for a registry the answer does not serve).
// With image unknown (""), only the paths are checked.
func coversRegistry(image string, keys []authKey) bool {
	matched := image == ""
	for _, k := range keys {
		if k.path != "" {
			return false
		}
		matched = matched || k.hostMatches(imageRegistry(image))
	}
	return matched
}

// scopeRank orders scopes from the narrowest cache entry to the widest.
var scopeRank = map[cloud.CredentialScope]int{cloud.ScopeImage: 0, cloud.ScopeRegistry: 1, cloud.ScopeGlobal: 2}

// checkScope maps "" to the default (Registry) and refuses unknown scopes.
func checkScope(s cloud.CredentialScope) (cloud.CredentialScope, error) {
	if s == "" {
		return cloud.ScopeRegistry, nil
	}
	if _, ok := scopeRank[s]; !ok {
		return "", fmt.Errorf("the provider returned a credential with unknown scope %q (want Registry, Image or Global)", s)
	}
	return s, nil
}

// decideCacheKeyType is the response's cacheKeyType for a pull of image
// (may be "" when unknown) with these auth keys and the provider's scope.
// Image and Global are the provider's word (Global says the answer is the
// same for every image matchImages selects). Registry stays only when the
// entry it makes covers every image of the registry (coversRegistry);
// otherwise, as for a credential for "registry.example.com/team", the entry
// would be found for "registry.example.com/other/app" and give it nothing,
// so the answer is cached for this image alone. With no auth keys ("no credentials for this
// image") the scope says how far that answer holds, and stays.
func decideCacheKeyType(image string, keys []authKey, scope cloud.CredentialScope) (v1.PluginCacheKeyType, string) {
	switch scope {
	case cloud.ScopeImage:
		return v1.ImagePluginCacheKeyType, ""
	case cloud.ScopeGlobal:
		return v1.GlobalPluginCacheKeyType, ""
	}
	if len(keys) == 0 || coversRegistry(image, keys) {
		return v1.RegistryPluginCacheKeyType, ""
	}
	return v1.ImagePluginCacheKeyType, "a credential's registry has a path prefix, or none is for the image's host: cached per image"
}
