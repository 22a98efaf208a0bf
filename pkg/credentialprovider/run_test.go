package credentialprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

// scripted answers with errs first, then a credential; it records requests.
type scripted struct {
	errs []error
	reqs []cloud.RegistryCredentialRequest
}

func (s *scripted) RegistryCredential(_ context.Context, req cloud.RegistryCredentialRequest) (*cloud.RegistryCredential, error) {
	s.reqs = append(s.reqs, req)
	if len(s.reqs) <= len(s.errs) {
		return nil, s.errs[len(s.reqs)-1]
	}
	return &cloud.RegistryCredential{Registry: "r.example.com", Username: "u", Password: "p", ExpiresAt: time.Now().Add(time.Hour)}, nil
}

const token = "eyJhbGciOiJSUzI1NiJ9.the-secret-token.sig"

func request(image string) string {
	return `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"` + image +
		`","serviceAccountToken":"` + token + `","serviceAccountAnnotations":{"k":"v"}}`
}

func TestServe(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		errs     []error
		calls    int
		wantErr  string
		noSecret bool
	}{
		{name: "credential", calls: 1},
		{name: "throttled then served", errs: []error{cloud.RetryAfter(10*time.Millisecond, "throttled")}, calls: 2},
		{name: "flaky cloud then served", errs: []error{errors.New("503"), errors.New("503")}, calls: 3},
		{name: "cloud down", errs: []error{errors.New("connection refused"), errors.New("connection refused"), errors.New("connection refused")}, calls: 3,
			wantErr: "did not issue a credential for image r.example.com/app:1 after 3 attempts: connection refused"},
		{name: "not our registry: not retried", errs: []error{fmt.Errorf("credential: %w", cloud.ErrNotFound)}, calls: 1,
			wantErr: "no registry of this provider serves image r.example.com/app:1"},
		{name: "a provider echoing the token is redacted", errs: []error{errors.New("bad token " + token), errors.New("bad token " + token), errors.New("bad token " + token)}, calls: 3,
			wantErr: "[service-account token redacted]", noSecret: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scripted{errs: tc.errs}
			var out bytes.Buffer
			err := Serve(ctx, s, strings.NewReader(request("r.example.com/app:1")), &out)
			if len(s.reqs) != tc.calls {
				t.Fatalf("calls = %d, want %d", len(s.reqs), tc.calls)
			}
			if s.reqs[0].ServiceAccountToken != token || s.reqs[0].ServiceAccountAnnotations["k"] != "v" || s.reqs[0].Image != "r.example.com/app:1" {
				t.Fatalf("request = %+v", s.reqs[0])
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "the-secret-token") {
					t.Fatalf("error = %v, want %q without the token", err, tc.wantErr)
				}
				if out.Len() != 0 {
					t.Fatalf("wrote a response on error: %s", out.String())
				}
				return
			}
			var resp v1.CredentialProviderResponse
			if err != nil || json.Unmarshal(out.Bytes(), &resp) != nil {
				t.Fatalf("Serve = %v, output %q", err, out.String())
			}
			if resp.Auth["r.example.com"].Password != "p" || resp.CacheKeyType != v1.RegistryPluginCacheKeyType || resp.CacheDuration == nil {
				t.Fatalf("response = %s", out.String())
			}
		})
	}
}

func TestServeGivesUpAtTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	s := &scripted{errs: []error{cloud.RetryAfter(time.Minute, "throttled"), nil}}
	err := Serve(ctx, s, strings.NewReader(request("r.example.com/app:1")), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "in time") || len(s.reqs) != 1 {
		t.Fatalf("error = %v after %d calls", err, len(s.reqs))
	}
}

func TestExit(t *testing.T) {
	var stderr bytes.Buffer
	if Exit(&stderr, "p", nil) != 0 || stderr.Len() != 0 {
		t.Fatal("success must be silent with status 0")
	}
	if Exit(&stderr, "p", errors.New("boom")) != 1 || stderr.String() != "p: boom\n" {
		t.Fatalf("stderr = %q", stderr.String())
	}
}
