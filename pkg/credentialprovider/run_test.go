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

// TestServeResponder: a Responder's whole Result reaches the kubelet
// (several entries, or none as a success), its errors are retried like a
// credential's, and a wrong answer is not retried.
func TestServeResponder(t *testing.T) {
	ctx := context.Background()
	two := &Result{Credentials: []cloud.RegistryCredential{
		{Registry: "*.gcr.io", Username: "u", Password: "p1"}, {Registry: "*.pkg.dev", Username: "u", Password: "p2"},
	}, CacheDuration: CacheFor(0)}
	for _, tc := range []struct {
		name    string
		answers []any // *Result or error, in order; the last repeats
		calls   int
		want    string // substring of the response
		wantErr string
	}{
		{name: "several entries", answers: []any{two}, calls: 1, want: `"cacheDuration":"0s","auth":{"*.gcr.io":{"username":"u","password":"p1"},"*.pkg.dev":{"username":"u","password":"p2"}}`},
		{name: "success with no credentials", answers: []any{&Result{}}, calls: 1, want: `"cacheKeyType":"Registry"}`},
		{name: "throttled then several", answers: []any{cloud.RetryAfter(time.Millisecond, "slow down"), two}, calls: 2, want: `"*.pkg.dev"`},
		{name: "a nil result is not retried", answers: []any{(*Result)(nil)}, calls: 1, wantErr: "return a Result with no Credentials"},
		{name: "a wrong result is not retried", answers: []any{&Result{Credentials: []cloud.RegistryCredential{{}}}}, calls: 1, wantErr: "image r.example.com/app:1: credential 1: a credential has no registry"},
		{name: "not found stays an error", answers: []any{cloud.ErrNotFound}, calls: 1, wantErr: "or have the provider answer a Result with no credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			rf := ResponderFunc(func(_ context.Context, req cloud.RegistryCredentialRequest) (*Result, error) {
				a := tc.answers[min(calls, len(tc.answers)-1)]
				calls++
				if req.ServiceAccountToken != token || req.Image != "r.example.com/app:1" {
					t.Errorf("request = %+v", req)
				}
				if err, ok := a.(error); ok {
					return nil, err
				}
				return a.(*Result), nil
			})
			var out bytes.Buffer
			err := Serve(ctx, rf, strings.NewReader(request("r.example.com/app:1")), &out)
			if calls != tc.calls {
				t.Fatalf("calls = %d, want %d", calls, tc.calls)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || out.Len() != 0 {
					t.Fatalf("error = %v, output %q; want %q and nothing written", err, out.String(), tc.wantErr)
				}
				return
			}
			if err != nil || !strings.Contains(out.String(), tc.want) {
				t.Fatalf("Serve = %v, output %s; want it to contain %s", err, out.String(), tc.want)
			}
		})
	}
}

// TestServeNilCredentialNotRetried: a provider returning no credential and
// no error is answered at once, not asked three times.
func TestServeNilCredentialNotRetried(t *testing.T) {
	n := 0
	rc := credFunc(func(context.Context, cloud.RegistryCredentialRequest) (*cloud.RegistryCredential, error) {
		n++
		return nil, nil
	})
	err := Serve(context.Background(), rc, strings.NewReader(request("r.example.com/app:1")), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "returned no credential") || n != 1 {
		t.Fatalf("error = %v after %d calls", err, n)
	}
}

type credFunc func(context.Context, cloud.RegistryCredentialRequest) (*cloud.RegistryCredential, error)

func (f credFunc) RegistryCredential(ctx context.Context, req cloud.RegistryCredentialRequest) (*cloud.RegistryCredential, error) {
	return f(ctx, req)
}

func TestResponderFuncRegistryCredential(t *testing.T) {
	ctx := context.Background()
	one := ResponderFunc(func(context.Context, cloud.RegistryCredentialRequest) (*Result, error) {
		return &Result{Credentials: []cloud.RegistryCredential{{Registry: "r.example.com", Password: "p"}}}, nil
	})
	if c, err := one.RegistryCredential(ctx, cloud.RegistryCredentialRequest{Image: "r.example.com/a"}); err != nil || c.Password != "p" {
		t.Fatalf("one credential = %+v, %v", c, err)
	}
	none := ResponderFunc(func(context.Context, cloud.RegistryCredentialRequest) (*Result, error) { return &Result{}, nil })
	if _, err := none.RegistryCredential(ctx, cloud.RegistryCredentialRequest{Image: "r.example.com/a"}); err == nil || !strings.Contains(err.Error(), "with 0 credentials: call Respond") {
		t.Fatalf("no credentials: %v", err)
	}
}
