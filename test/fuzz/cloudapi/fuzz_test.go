// Package cloudapi fuzzes the local cloud's HTTP API: the JSON decoding
// and validation of every request body, through the server's real handler
// (authentication, fault injection and panic recovery included).
package cloudapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// endpoint is one request body the API decodes; cleanup undoes a success
// so the cloud's state (and its listeners) stays small across executions.
type endpoint struct {
	method, path string
	cleanup      func(name string, created []byte) (method, path, body string)
}

var endpoints = []endpoint{
	{http.MethodPut, "/v1/load-balancers/{name}", func(name string, _ []byte) (string, string, string) {
		return http.MethodDelete, "/v1/load-balancers/" + name, ""
	}},
	{http.MethodPut, "/v1/load-balancers/{name}/backends", nil},
	{http.MethodPost, "/v1/instances", func(_ string, created []byte) (string, string, string) {
		var in api.Instance
		_ = json.Unmarshal(created, &in)
		return http.MethodDelete, "/v1/instances/" + url.PathEscape(in.ID), ""
	}},
	{http.MethodPost, "/v1/routes", func(_ string, created []byte) (string, string, string) {
		var rt api.Route
		_ = json.Unmarshal(created, &rt)
		return http.MethodDelete, "/v1/routes/" + url.PathEscape(rt.Name), ""
	}},
	{http.MethodPost, "/v1/volumes", func(_ string, created []byte) (string, string, string) {
		var v api.Volume
		_ = json.Unmarshal(created, &v)
		return http.MethodDelete, "/v1/volumes/" + url.PathEscape(v.ID), ""
	}},
	{http.MethodPut, "/v1/faults", func(string, []byte) (string, string, string) {
		return http.MethodPut, "/v1/faults", `{"rules":[]}`
	}},
	{http.MethodPost, "/v1/credentials", nil},
	{http.MethodPost, "/v1/registries", func(_ string, created []byte) (string, string, string) {
		var r api.Registry
		_ = json.Unmarshal(created, &r)
		return http.MethodDelete, "/v1/registries/" + url.PathEscape(r.Host), ""
	}},
	{http.MethodPost, "/v1/token-issuers", func(_ string, created []byte) (string, string, string) {
		var ti api.TokenIssuer
		_ = json.Unmarshal(created, &ti)
		return http.MethodDelete, "/v1/token-issuers?issuer=" + url.QueryEscape(ti.Issuer), ""
	}},
	{http.MethodPost, "/v1/console/tickets", nil},
}

// FuzzCloudAPI sends arbitrary bodies to the local cloud's write
// endpoints. Properties: the server never answers 5xx (a panic is
// recovered into a 500, so it counts too); every 4xx is a JSON api.Error
// with a code and a non-empty message; every 2xx body is JSON.
func FuzzCloudAPI(f *testing.F) {
	c := localcloudtest.Start(f)
	h := c.Server.Handler()
	seeds := []struct {
		op   uint8
		name string
		body string
	}{
		{0, "lb1", `{"cluster":"c","listeners":[{"protocol":"TCP","port":8080,"backendPort":30080}],"backends":[{"name":"n1","address":"127.0.0.1"}],"sourceRanges":["10.0.0.1/8"," ::/0"],"healthCheck":{"type":"http","path":"/healthz","port":30081}}`},
		{0, "lb2", `{"cluster":"c","listeners":[{"protocol":"UDP","port":53,"backendPort":30053}],"backends":[],"sourceRanges":["bogus"]}`},
		{0, "lb3", `{"cluster":"c","tags":{"k":"v"},"listeners":[{"protocol":"TCP","port":0,"backendPort":1}],"backends":null,"ipFamilies":["IPv6"],"requestedIP":"127.0.0.1"}`},
		{1, "lb1", `{"backends":[{"name":"n1","address":"::1"},{"name":"n2","address":"not-an-ip"}]}`},
		{2, "", `{"name":"node-1","zone":"zone-a","ipv6":true,"labels":{"a":"b"},"podCIDRs":["10.244.0.0/24"]}`},
		{2, "", `{"name":"","zone":"nowhere","ipv4":false}`},
		{3, "", `{"name":"r1","cluster":"c","targetNode":"node-1","destinationCIDR":"10.244.1.0/24"}`},
		{4, "", `{"name":"v1","zones":["zone-a"],"sizeGiB":10}`},
		{4, "", `{"name":"v2","zones":[],"sizeGiB":-1}`},
		{5, "", `{"rules":[{"method":"*","pathPrefix":"/v1/","errorRate":1}]}`},
		{5, "", `{"rules":[{"method":"GET","pathPrefix":"/v1/instances","errorRate":0.5,"throttleRate":0.5,"retryAfterSeconds":-3,"latencyMillis":-1}]}`},
		{6, "", `{"image":"registry.local/app:1","serviceAccountToken":"x","push":true}`},
		{7, "", `{"host":"registry.example:5000"}`},
		{8, "", `{"issuer":"https://issuer.example","audiences":["a"],"publicKeysPEM":"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"}`},
		{9, "", `{"readOnly":true}`},
		{0, "x", `{"cluster":"c"} {"cluster":"d"}`},
		{2, "", `{"name":"n","zone":"zone-a","extra":1}`},
		{6, "", ``},
		{3, "", `[1,2,3]`},
	}
	for _, s := range seeds {
		f.Add(s.op, s.name, []byte(s.body), false)
	}
	f.Add(uint8(0), "lb1", []byte(`{}`), true)

	do := func(t *testing.T, method, path string, body []byte, textPlain bool) (int, []byte) {
		req, err := http.NewRequest(method, path, bytes.NewReader(body))
		if err != nil {
			return 0, nil
		}
		req.Header.Set("Authorization", "Bearer "+c.Token)
		if textPlain {
			req.Header.Set("Content-Type", "text/plain")
		} else {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		res := rec.Result()
		out := rec.Body.Bytes()
		if res.StatusCode >= 500 {
			t.Fatalf("%s %s with body %q: %d %s", method, path, body, res.StatusCode, out)
		}
		if res.StatusCode >= 400 {
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("%s %s: %d with Content-Type %q: %s", method, path, res.StatusCode, ct, out)
			}
			var e api.Error
			dec := json.NewDecoder(bytes.NewReader(out))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&e); err != nil || e.Code == "" || strings.TrimSpace(e.Message) == "" {
				t.Fatalf("%s %s: %d body %q is not an api.Error with a message (%v)", method, path, res.StatusCode, out, err)
			}
		} else if len(bytes.TrimSpace(out)) > 0 && !json.Valid(out) {
			t.Fatalf("%s %s: %d body %q is not JSON", method, path, res.StatusCode, out)
		}
		return res.StatusCode, out
	}

	f.Fuzz(func(t *testing.T, op uint8, name string, body []byte, textPlain bool) {
		ep := endpoints[int(op)%len(endpoints)]
		if len(name) > 80 {
			name = name[:80]
		}
		esc := url.PathEscape(name)
		path := strings.ReplaceAll(ep.path, "{name}", esc)
		status, out := do(t, ep.method, path, body, textPlain)
		if testing.Verbose() {
			t.Logf("%s %s: %d %.200s", ep.method, path, status, out)
		}
		if status >= 200 && status < 300 && ep.cleanup != nil {
			m, p, b := ep.cleanup(esc, out)
			do(t, m, p, []byte(b), false)
		}
	})
}
