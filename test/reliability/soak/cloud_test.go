package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/localcloud/dataplane"
	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// soakCloud is an in-process local cloud whose HTTP front counts the
// answers it gives, per caller, so the test can report how many faults
// were injected (the cloud itself does not count them).
type soakCloud struct {
	srv      *server.Server
	client   *client.Client
	endpoint string
	token    string
	counts   *answerCounts
}

// answerCounts counts requests, injected 500s and 429s, by caller: "ccm"
// for `portside ccm` (its User-Agent), "harness" for everything else.
type answerCounts struct {
	mu                                  sync.Mutex
	requests, injected500, throttled429 map[string]int64
	other5xx                            map[string]int64 // 5xx that are not injected: cloud bugs
}

func (c *answerCounts) snapshot() (req, e500, t429, other map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := func(m map[string]int64) map[string]int64 {
		out := map[string]int64{}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	return cp(c.requests), cp(c.injected500), cp(c.throttled429), cp(c.other5xx)
}

type recordingWriter struct {
	http.ResponseWriter
	status int
	head   bytes.Buffer // the first bytes of the body, to tell injected faults
}

func (w *recordingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status >= 500 && w.head.Len() < 512 {
		w.head.Write(b[:min(len(b), 512-w.head.Len())])
	}
	return w.ResponseWriter.Write(b)
}

func (c *answerCounts) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, "/v1/faults") {
			next.ServeHTTP(w, r)
			return
		}
		rec := &recordingWriter{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		who := "harness"
		if strings.Contains(r.UserAgent(), "ccm") {
			who = "ccm"
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.requests[who]++
		switch {
		case rec.status == http.StatusTooManyRequests:
			c.throttled429[who]++
		case rec.status == http.StatusInternalServerError && strings.Contains(rec.head.String(), "InjectedFault"):
			c.injected500[who]++
		case rec.status >= 500:
			c.other5xx[who]++
		}
	})
}

// startCloud runs a cloud on loopback ranges of its own (as localcloudtest
// does) with health checks off: the soak checks the control plane, not the
// data plane, and checks would cost CPU on a small machine.
func startCloud(t *testing.T) *soakCloud {
	t.Helper()
	octet := 10 + rand.IntN(240)
	token := fmt.Sprintf("soak-%d", rand.Int64())
	srv, err := server.New(context.Background(), filepath.Join(t.TempDir(), server.StateFile), server.Options{
		Token:      token,
		VIPPoolV4:  netip.MustParsePrefix(fmt.Sprintf("127.%d.%d.0/20", octet, rand.IntN(8)*16)),
		NodePoolV4: netip.MustParsePrefix(fmt.Sprintf("127.%d.128.0/17", octet)),
		DataPlane:  dataplane.Options{NoHealthChecks: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	counts := &answerCounts{requests: map[string]int64{}, injected500: map[string]int64{}, throttled429: map[string]int64{}, other5xx: map[string]int64{}}
	hs := httptest.NewServer(counts.wrap(srv.Handler()))
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	return &soakCloud{srv: srv, client: client.New(hs.URL, token).WithUserAgent("portside-soak-harness"), endpoint: hs.URL, token: token, counts: counts}
}

// retryCloud retries fn while the cloud answers 500 or 429 (honouring
// Retry-After), as any client of a flaky cloud must; the harness's own
// calls go through the same faults as the CCM's.
func retryCloud(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil {
			return nil
		}
		var se *client.StatusError
		if !errors.As(err, &se) || (se.Status != http.StatusInternalServerError && se.Status != http.StatusTooManyRequests) {
			return err
		}
		wait := 50 * time.Millisecond
		if ra, ok := client.RetryAfter(err); ok && ra > 0 {
			wait = ra
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// instances returns the names of the cloud's instances, read from the
// store (no faults).
func (c *soakCloud) state(t *testing.T) (instances map[string]bool, lbs []api.LoadBalancer, routes []api.Route) {
	st, err := c.srv.State(context.Background())
	if err != nil {
		t.Errorf("cloud state: %v", err)
		return nil, nil, nil
	}
	instances = map[string]bool{}
	for _, i := range st.Instances {
		instances[i.Name] = true
	}
	for _, lb := range st.LoadBalancers {
		lbs = append(lbs, lb.LoadBalancer)
	}
	return instances, lbs, st.Routes
}
