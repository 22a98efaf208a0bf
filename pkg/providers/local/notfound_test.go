package local

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// TestForeign404IsNotGone: an endpoint that answers every request with a
// plain 404 (a wrong port, a proxy, another server) must make the
// provider fail, not report instances, load balancers and routes gone: the
// lifecycle controller would delete every NotReady Node, the service
// controller drop finalizers of load balancers that still exist.
func TestForeign404IsNotGone(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	p := New(client.New(srv.URL, "token"))
	ctx := context.Background()
	node := cloud.Node{Name: "n1", ProviderID: "local://i-00000001"}
	inst, _ := p.Instances()
	exists, err := inst.InstanceExists(ctx, node)
	if err == nil || cloud.IsNotFound(err) {
		t.Errorf("InstanceExists = %v, %v; want an error that is not ErrNotFound", exists, err)
	}
	if _, err := inst.InstanceMetadata(ctx, node); err == nil || errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("InstanceMetadata error %v; want one that is not ErrNotFound", err)
	}
	if err := sdkErr(&client.StatusError{Status: http.StatusNotFound, Code: "NotFound", Message: "gone"}, "get"); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("the API's NotFound: %v, want ErrNotFound", err)
	}
}
