package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// maxBodyBytes bounds request bodies; the largest legitimate body (a load
// balancer with thousands of backends) is far below it.
const maxBodyBytes = 4 << 20

// apiError is an error with its HTTP status and code.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, api.CodeInvalid, fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &apiError{http.StatusNotFound, api.CodeNotFound, fmt.Sprintf(format, args...)}
}

func unauthorized(format string, args ...any) error {
	return &apiError{http.StatusUnauthorized, "Unauthorized", fmt.Sprintf(format, args...)}
}

func forbidden(format string, args ...any) error {
	return &apiError{http.StatusForbidden, "Forbidden", fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &apiError{http.StatusConflict, "AlreadyExists", fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, api.Error{Code: code, Message: msg})
}

// respond writes v, or err as the matching status.
func respond(w http.ResponseWriter, r *http.Request, status int, v any, err error) {
	if err == nil {
		if v == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, status, v)
		return
	}
	var ae *apiError
	if errors.As(err, &ae) {
		writeError(w, ae.status, ae.code, ae.msg)
		return
	}
	klog.FromContext(r.Context()).Error(err, "Request failed", "method", r.Method, "path", r.URL.Path)
	writeError(w, http.StatusInternalServerError, "Internal", err.Error())
}

// decode reads a JSON body into v, rejecting unknown fields, trailing data
// and oversized bodies with messages that say what is wrong.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return &apiError{http.StatusUnsupportedMediaType, api.CodeInvalid, fmt.Sprintf("Content-Type %q is not supported: send application/json", ct)}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{http.StatusRequestEntityTooLarge, "TooLarge", fmt.Sprintf("request body larger than %d bytes", maxBodyBytes)}
		}
		if errors.Is(err, io.EOF) {
			return invalid("request body is empty: send a JSON object")
		}
		return invalid("malformed JSON body: %v", err)
	}
	if dec.More() {
		return invalid("malformed JSON body: unexpected data after the JSON object")
	}
	return nil
}

// authenticate finds the request's token and refuses it (401) unless it is
// the admin token or a scoped one, and (403) unless its scopes cover the
// operation: the route routes matches, through requiredScope. The grant is
// kept in the context for checks that need the body (push credentials).
func (s *Server) authenticate(routes *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		t := s.tokens.Load() // one set per request, even during a rotation
		g, ok := lookupToken(got, t.admin, t.scoped)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="portside-local-cloud"`)
			msg := "missing bearer token: send Authorization: Bearer <token> (the cloud's --token-file)"
			if len(got) > 0 {
				msg = "invalid bearer token: use the token in the cloud's --token-file, or one of its --scoped-token-file"
			}
			writeError(w, http.StatusUnauthorized, "Unauthorized", msg)
			return
		}
		_, pattern := routes.Handler(r)
		scope, known := requiredScope(pattern)
		if !known && !g.admin {
			// Fail closed: a route nobody gave a scope is the admin's.
			klog.FromContext(r.Context()).Error(nil, "API route without a scope", "pattern", pattern)
			respond(w, r, 0, nil, forbidden("%s %s has no scope a scoped token may hold: use the admin token", r.Method, r.URL.Path))
			return
		}
		if !g.allows(scope) {
			respond(w, r, 0, nil, missingScope(r, scope))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), grantKey{}, g)))
	})
}

// grantKey keys the request's grant in its context.
type grantKey struct{}

// requireScope answers whether the request's token holds scope, for checks
// that depend on the body; it writes the 403 when it does not.
func requireScope(w http.ResponseWriter, r *http.Request, scope string) bool {
	g, _ := r.Context().Value(grantKey{}).(grant)
	if g.allows(scope) {
		return true
	}
	respond(w, r, 0, nil, missingScope(r, scope))
	return false
}

func missingScope(r *http.Request, scope string) error {
	return forbidden("the token lacks scope %q, which %s %s needs: use a token with that scope (a line of the cloud's --scoped-token-file) or the admin token",
		scope, r.Method, r.URL.Path)
}

func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				klog.FromContext(r.Context()).Error(fmt.Errorf("%v", p), "Panic serving request", "method", r.Method, "path", r.URL.Path)
				writeError(w, http.StatusInternalServerError, "Internal", "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// injectFaults applies the first fault rule matching the request.
func (s *Server) injectFaults(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/faults") {
			if rule, ok := s.matchFault(r); ok {
				if rule.LatencyMillis > 0 {
					select {
					case <-time.After(time.Duration(rule.LatencyMillis) * time.Millisecond):
					case <-r.Context().Done():
						return
					}
				}
				if rule.ThrottleRate > 0 && rand.Float64() < rule.ThrottleRate {
					after := max(rule.RetryAfterSeconds, 1)
					w.Header().Set("Retry-After", strconv.Itoa(after))
					writeError(w, http.StatusTooManyRequests, "Throttled", fmt.Sprintf("rate limit exceeded (injected): retry after %ds", after))
					return
				}
				if rule.ErrorRate > 0 && rand.Float64() < rule.ErrorRate {
					writeError(w, http.StatusInternalServerError, "InjectedFault", "injected fault")
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) matchFault(r *http.Request) (api.FaultRule, bool) {
	s.faultsMu.RLock()
	defer s.faultsMu.RUnlock()
	for _, rule := range s.faults.Rules {
		if (rule.Method == "*" || strings.EqualFold(rule.Method, r.Method)) && strings.HasPrefix(r.URL.Path, rule.PathPrefix) {
			return rule, true
		}
	}
	return api.FaultRule{}, false
}

func (s *Server) getFaults(w http.ResponseWriter, r *http.Request) {
	s.faultsMu.RLock()
	defer s.faultsMu.RUnlock()
	respond(w, r, http.StatusOK, s.faults, nil)
}

func (s *Server) putFaults(w http.ResponseWriter, r *http.Request) {
	var f api.Faults
	if err := decode(w, r, &f); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if err := validateFaults(f); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	s.faultsMu.Lock()
	s.faults = f
	s.faultsMu.Unlock()
	klog.FromContext(r.Context()).Info("Fault rules set", "rules", len(f.Rules))
	respond(w, r, http.StatusOK, f, nil)
}

// validateFaults checks fault rules, naming the first bad field.
func validateFaults(f api.Faults) error {
	if len(f.Rules) > maxFaultRules {
		return invalid("%d fault rules: at most %d", len(f.Rules), maxFaultRules)
	}
	for i, rule := range f.Rules {
		if rule.Method == "" {
			return invalid("rules[%d].method is empty: use an HTTP method or *", i)
		}
		for name, rate := range map[string]float64{"errorRate": rule.ErrorRate, "throttleRate": rule.ThrottleRate} {
			if rate < 0 || rate > 1 {
				return invalid("rules[%d].%s is %v: want a number from 0 to 1", i, name, rate)
			}
		}
		if rule.LatencyMillis < 0 || rule.LatencyMillis > 60_000 || rule.RetryAfterSeconds < 0 {
			return invalid("rules[%d]: latencyMillis must be 0..60000 and retryAfterSeconds >= 0", i)
		}
	}
	return nil
}

// maxFaultRules bounds the rules (each request scans them).
const maxFaultRules = 100

// countCalls counts authenticated API calls by method and resource, for
// benchmarks that compare how many cloud calls controllers make.
func (s *Server) countCalls(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/v1/"), "/", 3)
		key := r.Method + " /v1/" + parts[0]
		if len(parts) == 3 {
			key += "/*/" + parts[2]
		}
		s.callsMu.Lock()
		if _, seen := s.calls[key]; !seen && len(s.calls) >= maxCallKeys {
			// Made-up methods and paths cannot grow the map without bound.
			key = "other"
		}
		s.calls[key]++
		s.callsMu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// maxCallKeys bounds the call counters: the API has a few dozen routes.
const maxCallKeys = 256

// Calls returns the API calls served so far, by "METHOD /v1/resource[/*/sub]".
func (s *Server) Calls() map[string]int64 {
	s.callsMu.Lock()
	defer s.callsMu.Unlock()
	out := make(map[string]int64, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}
