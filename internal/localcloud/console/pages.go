package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

var loginTemplate = template.Must(template.ParseFS(assets, "assets/login.html"))

func (c *Console) renderLogin(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = loginTemplate.Execute(w, struct{ Error string }{msg})
}

func (c *Console) index(w http.ResponseWriter, _ *http.Request) {
	data, err := assets.ReadFile("assets/index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(data)
}

// Snapshot is what the page renders: the cloud, the cluster side, and
// what this session may do.
type Snapshot struct {
	Cloud     CloudState    `json:"cloud"`
	CloudErr  string        `json:"cloudError,omitempty"`
	Cluster   *ClusterState `json:"cluster,omitempty"`
	Generated time.Time     `json:"generated"`
}

func (c *Console) snapshot() Snapshot {
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	var s Snapshot
	cs, err := c.opts.Cloud.State(ctx)
	if err != nil {
		s.CloudErr = err.Error()
	}
	s.Cloud = cs
	if c.cluster != nil {
		cl := c.cluster.state(cs.LoadBalancers)
		s.Cluster = &cl
	}
	s.Generated = time.Now().UTC()
	return s
}

// session tells the page what it may do.
type session struct {
	Writable bool `json:"writable"`
}

func (c *Console) state(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		Session session `json:"session"`
		Snapshot
	}{session{accessFrom(r.Context()) == readWrite}, c.snapshot()})
}

// events streams snapshots as server-sent events: "session" once, then a
// "snapshot" whenever something changed, and a comment as a keep-alive.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	// Watch for rotations and logouts before checking the session once more:
	// one between requireSession's check and here is then seen either by
	// this check or by the watch, never by neither.
	changed := c.auth.watch()
	s := sessionFrom(r.Context())
	if c.auth.verify(s.cookie).acc == noAccess {
		http.Error(w, "not logged in: open /console/login", http.StatusUnauthorized)
		return
	}
	updates, cancel := c.hub.subscribe()
	defer cancel()
	// The API server's write timeout would end the stream: each write gets
	// its own deadline instead.
	send := func(event string, data []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		var err error
		if event == "" {
			_, err = io.WriteString(w, ": keep-alive\n\n")
		} else {
			_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
		}
		if err == nil {
			err = rc.Flush()
		}
		return err
	}
	sess, _ := json.Marshal(session{accessFrom(r.Context()) == readWrite})
	if send("session", sess) != nil {
		return
	}
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	// The stream lives only as long as its session: it ends at the
	// session's expiry, on logout, and when the token it was granted under
	// is rotated, with an "ended" event telling the page why.
	expiry := time.NewTimer(time.Until(s.exp) + time.Second) // verify counts whole seconds
	defer expiry.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-changed:
			changed = c.auth.watch()
			if c.auth.verify(s.cookie).acc == noAccess {
				_ = send("ended", []byte(`{"reason":"the session was logged out or its token rotated: log in again"}`))
				return
			}
		case <-expiry.C:
			if c.auth.verify(s.cookie).acc == noAccess {
				_ = send("ended", []byte(`{"reason":"the session expired: log in again"}`))
				return
			}
			expiry.Reset(time.Second)
		case data, ok := <-updates:
			if !ok || send("snapshot", data) != nil {
				return
			}
		case <-keepAlive.C:
			if send("", nil) != nil {
				return
			}
		}
	}
}

func (c *Console) putFaults(w http.ResponseWriter, r *http.Request) {
	if status, msg := canWrite(r); status != 0 {
		http.Error(w, msg, status)
		return
	}
	var f api.Faults
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		http.Error(w, "malformed fault rules: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := c.opts.Cloud.SetFaults(r.Context(), f); err != nil {
		status := http.StatusInternalServerError
		var ie InvalidError
		if errors.As(err, &ie) {
			status = http.StatusBadRequest
		}
		http.Error(w, err.Error(), status)
		return
	}
	c.logger.Info("Fault rules set from the console", "rules", len(f.Rules))
	c.hub.poke()
	w.WriteHeader(http.StatusNoContent)
}

// InvalidError is a Cloud error about bad input (answered 400).
type InvalidError struct{ Err error }

func (e InvalidError) Error() string { return e.Err.Error() }
func (e InvalidError) Unwrap() error { return e.Err }
