package server

import (
	"net/http"
	"net/http/pprof"
)

func (s *Server) healthMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	ready := func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case s.stopping.Load():
			http.Error(w, "Proxy server is shutting down", http.StatusServiceUnavailable)
		case s.backends.len() == 0:
			http.Error(w, "Proxy server is not ready: no agent connected", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ok"))
		}
	}
	mux.HandleFunc("/readyz", ready)
	// Deprecated, as upstream keeps it: probes written for its older
	// releases ask /ready.
	mux.HandleFunc("/ready", ready)
	mux.Handle("/metrics", s.metricsHandler)
	return mux
}

func (s *Server) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", s.metricsHandler)
	if s.opts.EnableProfiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// backendsChanged updates the gauges after an agent comes or goes.
func (s *Server) backendsChanged(n int, b *backend, delta float64) {
	s.m.readyBackendConns.Set(float64(n))
	s.readyBackendsChanged()
	if b.streamsV1 {
		s.m.streamsV1Backends.Add(delta)
	}
	if b.link != nil {
		s.m.linkBackends.Add(delta)
	}
}

// readyBackendsChanged sets ready_backends after agents or their
// identities changed; serialised, so a stale count never overwrites a
// newer one.
func (s *Server) readyBackendsChanged() {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	for st, n := range s.backends.readyCounts(s.opts.Strategies) {
		s.m.readyBackends.WithLabelValues(string(st)).Set(float64(n))
	}
}
