package credentialprovider

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/deploy"
	"github.com/portside-io/portside/internal/localcloud/registry"
	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// cloud is a local cloud with its registry, seeded with the small image.
type cloud struct {
	client   *client.Client
	registry string // host:port
	seeded   string // <registry>/portside/hello:1.0@sha256:...
	config   string // the local provider's cloud config file
}

// startCloud runs a local cloud whose credentials live ttl, serving its
// API and its registry on free loopback ports, until the test ends.
func startCloud(t testing.TB, ttl time.Duration) *cloud {
	t.Helper()
	dir := t.TempDir()
	token := fmt.Sprintf("test-%d", rand.Int64())
	srv, err := server.New(context.Background(), filepath.Join(dir, server.StateFile), server.Options{Token: token, CredentialTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	rs := httptest.NewUnstartedServer(nil)
	host := rs.Listener.Addr().String()
	if rs.Config.Handler, err = srv.ServeRegistry(host); err != nil {
		t.Fatal(err)
	}
	rs.Start()
	api := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { api.Close(); rs.Close(); srv.Close() })

	c := &cloud{client: client.New(api.URL, token), registry: host, config: filepath.Join(dir, "cloud.yaml")}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.config, []byte("endpoint: "+api.URL+"\ntokenFile: "+tokenFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c.seeded, err = registry.SeedServed(context.Background(), c.client, ""); err != nil {
		t.Fatal(err)
	}
	return c
}

// sampleConfig is a sample of deploy/credential-provider as written, with
// only the registry address, the plugin's name and the cloud config path
// made this test's.
func sampleConfig(t testing.TB, file, registryHost, pluginName, cloudConfig string) string {
	t.Helper()
	data, err := deploy.CredentialProviderConfig(strings.Contains(file, "serviceaccount"), registryHost, pluginName, cloudConfig)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), file)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
