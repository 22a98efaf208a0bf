package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestTokenFileFollowsRotation: a client made from a token file sends the
// file's new token after it changes (written in place or replaced by a
// rename), and keeps the last good token while the file is bad.
func TestTokenFileFollowsRotation(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = w.Write([]byte("[]"))
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "token")
	writes := 0
	write := func(tok string, mode os.FileMode) {
		writes++
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(tok+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		// A distinct modification time, as a rotation minutes apart has.
		stamp := time.Now().Add(time.Duration(writes) * time.Second)
		_ = os.Chtimes(tmp, stamp, stamp)
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("first", 0o600)
	c, err := NewWithTokenFile(srv.URL, path)
	if err != nil {
		t.Fatal(err)
	}
	call := func() string {
		if _, err := c.ListInstances(context.Background(), ""); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return seen[len(seen)-1]
	}
	for _, step := range []struct {
		tok  string
		mode os.FileMode
		want string
	}{
		{"", 0, "Bearer first"},
		{"second", 0o600, "Bearer second"},
		{"third", 0o644, "Bearer second"}, // readable by others: refused, the last good one stays
		{"fourth", 0o600, "Bearer fourth"},
	} {
		if step.tok != "" {
			write(step.tok, step.mode)
		}
		if got := call(); got != step.want {
			t.Errorf("after writing %q (mode %04o): sent %q, want %q", step.tok, step.mode, got, step.want)
		}
	}
	if _, err := NewWithTokenFile(srv.URL, filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing token file was accepted")
	}
}
