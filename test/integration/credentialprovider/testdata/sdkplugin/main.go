// sdkplugin is a kubelet credential provider plugin built with
// pkg/credentialprovider's Result API, for sdk_test.go: it answers every
// image as $PORTSIDE_SDK_TEST_PLUGIN (JSON) says. It is its own small
// binary because the kubelet harness runs it for every uncached pull.
package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/credentialprovider"
)

// answer is what the plugin says for any image: one credential per
// registry ("{ns}" replaced by the image's first path segment, a provider
// answering per repository), each with the resolved registry as its
// password, so a lookup shows which entries it got. No ExpiresAt: unless
// noCache, cacheDuration is left out and the config's defaultCacheDuration
// applies.
type answer struct {
	Registries []string `json:"registries"`
	Scope      string   `json:"scope"`
	// NoCache answers with cacheDuration 0 (explicitly: do not cache).
	NoCache bool `json:"noCache"`
}

func (a answer) result(image string) *credentialprovider.Result {
	_, path, _ := strings.Cut(image, "/")
	ns, _, _ := strings.Cut(path, "/")
	r := &credentialprovider.Result{Scope: cloud.CredentialScope(a.Scope)}
	for _, reg := range a.Registries {
		reg = strings.ReplaceAll(reg, "{ns}", ns)
		r.Credentials = append(r.Credentials, cloud.RegistryCredential{Registry: reg, Username: "u", Password: reg})
	}
	if a.NoCache {
		r.CacheDuration = credentialprovider.CacheFor(0)
	}
	return r
}

func main() {
	var a answer
	if err := json.Unmarshal([]byte(os.Getenv("PORTSIDE_SDK_TEST_PLUGIN")), &a); err != nil {
		os.Exit(credentialprovider.Exit(os.Stderr, "sdkplugin", err))
	}
	os.Exit(credentialprovider.Main(func(context.Context) (cloud.RegistryCredentials, error) {
		return credentialprovider.ResponderFunc(func(_ context.Context, req cloud.RegistryCredentialRequest) (*credentialprovider.Result, error) {
			return a.result(req.Image), nil
		}), nil
	}))
}
