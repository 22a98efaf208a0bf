package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

func TestRefusesField(t *testing.T) {
	older := `malformed JSON body: json: unknown field "clusterUID"`
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"an older cloud's answer", &client.StatusError{Status: http.StatusBadRequest, Code: "Invalid", Message: older}, true},
		{"wrapped", fmt.Errorf("create: %w", &client.StatusError{Status: http.StatusBadRequest, Code: "Invalid", Message: older}), true},
		{"another unknown field", &client.StatusError{Status: http.StatusBadRequest, Code: "Invalid", Message: `malformed JSON body: json: unknown field "other"`}, false},
		{"a field of a similar name", &client.StatusError{Status: http.StatusBadRequest, Code: "Invalid", Message: `json: unknown field "clusterUIDs"`}, false},
		{"another bad request", &client.StatusError{Status: http.StatusBadRequest, Code: "Invalid", Message: "destinationCIDR is not a CIDR"}, false},
		{"the message with another status", &client.StatusError{Status: http.StatusConflict, Code: "Conflict", Message: older}, false},
		{"not the API's", errors.New(older), false},
		{"a 400 without the API's code (a proxy in front)", &client.StatusError{Status: http.StatusBadRequest, Message: older}, false},
		{"no error", nil, false},
	}
	for _, tc := range cases {
		if got := RefusesField(tc.err, "clusterUID"); got != tc.want {
			t.Errorf("%s: RefusesField = %v; want %v", tc.name, got, tc.want)
		}
	}
}

// TestCreateRouteOnOlderCloud: a cloud from before routes carried the
// cluster UID refuses the field (its API rejects unknown fields). The
// provider creates the route without it instead of failing every route
// until the cloud is upgraded; a cloud that knows the field gets it.
func TestCreateRouteOnOlderCloud(t *testing.T) {
	for _, older := range []bool{true, false} {
		var mu sync.Mutex
		var stored []api.Route
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			dec := json.NewDecoder(r.Body)
			var body map[string]any
			_ = dec.Decode(&body)
			if _, ok := body["clusterUID"]; ok && older {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(map[string]string{"code": "Invalid", "message": `malformed JSON body: json: unknown field "clusterUID"`})
				return
			}
			raw, _ := json.Marshal(body)
			var rt api.Route
			_ = json.Unmarshal(raw, &rt)
			mu.Lock()
			stored = append(stored, rt)
			mu.Unlock()
			_ = json.NewEncoder(w).Encode(rt)
		}))
		p := New(client.New(srv.URL, "token"))
		rs, _ := p.Routes()
		err := rs.CreateRoute(context.Background(), "c1", "uid-1", cloud.Route{TargetNode: "n1", ClusterUID: "cluster-uid",
			DestinationCIDR: netip.MustParsePrefix("10.244.1.0/24")})
		srv.Close()
		if err != nil {
			t.Fatalf("older=%v: CreateRoute: %v", older, err)
		}
		want := "cluster-uid"
		if older {
			want = ""
		}
		if len(stored) != 1 || stored[0].ClusterUID != want || stored[0].Name != "uid-1-ipv4" {
			t.Errorf("older=%v: stored %+v; want one route uid-1-ipv4 with clusterUID %q", older, stored, want)
		}
	}
}
