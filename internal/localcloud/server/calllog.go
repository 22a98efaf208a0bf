package server

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/portside-io/portside/internal/localcloud/console"
)

// recentCallsKept bounds the call log the console shows.
const recentCallsKept = 200

// callLog is a ring of the most recent API calls.
type callLog struct {
	mu    sync.Mutex
	calls []console.Call
	next  int
}

func (l *callLog) add(c console.Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) < recentCallsKept {
		l.calls = append(l.calls, c)
		return
	}
	l.calls[l.next] = c
	l.next = (l.next + 1) % recentCallsKept
}

// recent returns the calls oldest first.
func (l *callLog) recent() []console.Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]console.Call, 0, len(l.calls))
	out = append(out, l.calls[l.next:]...)
	return append(out, l.calls[:l.next]...)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// logCalls records every API call, refused ones included (a 401 says a
// client has the wrong token).
func (s *Server) logCalls(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			s.callLog.add(console.Call{Time: start.UTC(), Method: r.Method, Path: truncate(r.URL.Path, 200), Status: status,
				LatencyMillis: float64(time.Since(start).Microseconds()) / 1000, Caller: caller(r)})
		}()
		next.ServeHTTP(rec, r)
	})
}

// caller is the client's program (User-Agent) and address.
func caller(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ua := r.UserAgent()
	if ua == "" {
		ua = "unknown client"
	}
	return truncate(ua, 80) + " @ " + host
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// Unwrap lets http.ResponseController reach the connection.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
