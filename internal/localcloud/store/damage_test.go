package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const pageSize = 4096

// validState writes a state file with enough records to span many pages.
func validState(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		err := s.Update(func(tx *Tx) error {
			return tx.Put(Routes, fmt.Sprintf("route-%04d", i), map[string]string{"cidr": fmt.Sprintf("10.%d.%d.0/24", i/250, i%250), "pad": strings.Repeat("x", 200)})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// openDamaged opens data as a state file and checks Open fails with an error
// naming the file and the way out, without panicking.
func openDamaged(t *testing.T, data []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := openNoPanic(t, path)
	if err == nil {
		s.Close()
		t.Fatalf("Open of a damaged state file succeeded")
	}
	for _, want := range []string{path + " is damaged", "restore a backup", "mv " + path + " " + path + ".damaged"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func openNoPanic(t *testing.T, path string) (s *Store, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Open panicked: %v", p)
		}
	}()
	return Open(path)
}

func TestOpenDamaged(t *testing.T) {
	valid := validState(t)
	if len(valid) < 20*pageSize {
		t.Fatalf("state file has only %d bytes", len(valid))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	cases := map[string]func() []byte{
		"truncated to half":      func() []byte { return bytes.Clone(valid[:len(valid)/2]) },
		"truncated to meta only": func() []byte { return bytes.Clone(valid[:2*pageSize]) },
		"truncated mid-page":     func() []byte { return bytes.Clone(valid[:len(valid)/2+100]) },
		"zeroed middle pages": func() []byte {
			d := bytes.Clone(valid)
			clear(d[len(d)/3 : len(d)/3+4*pageSize])
			return d
		},
		"garbage middle pages": func() []byte {
			d := bytes.Clone(valid)
			copy(d[len(d)/2:], garbage(3*pageSize))
			return d
		},
		"zeroed meta pages": func() []byte {
			d := bytes.Clone(valid)
			clear(d[:2*pageSize])
			return d
		},
		"random bytes":  func() []byte { return garbage(len(valid)) },
		"short garbage": func() []byte { return garbage(100) },
		"not bbolt":     func() []byte { return []byte("{\"this is\": \"a JSON file, not a state file\"}\n") },
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) { openDamaged(t, data()) })
	}
}

// An empty file is what a crash before bbolt's first write leaves: it
// holds nothing, so it opens as an empty cloud.
func TestOpenEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestOpenRandomlyCorrupted damages random pages of a valid state file
// (deterministic seed): Open either fails with the damage error or opens a
// store whose records can all be read; it never panics or faults.
func TestOpenRandomlyCorrupted(t *testing.T) {
	valid := validState(t)
	pages := len(valid) / pageSize
	rng := rand.New(rand.NewPCG(42, 7))
	dir := t.TempDir()
	var opened, refused int
	for i := range 150 {
		d := bytes.Clone(valid)
		for range 1 + rng.IntN(3) {
			p := 2 + rng.IntN(pages-2) // meta pages are checksummed: hit the rest
			off := p*pageSize + rng.IntN(pageSize)
			n := min(1+rng.IntN(64), len(d)-off)
			switch rng.IntN(3) {
			case 0:
				clear(d[off : off+n])
			case 1:
				for j := off; j < off+n; j++ {
					d[j] = byte(rng.Uint32())
				}
			default:
				d[off] ^= 1 << rng.IntN(8)
			}
		}
		path := filepath.Join(dir, fmt.Sprintf("state-%d.db", i))
		if err := os.WriteFile(path, d, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := openNoPanic(t, path)
		if err != nil {
			if !strings.Contains(err.Error(), "mv "+path+" "+path+".damaged") {
				t.Fatalf("iteration %d: error without the way out: %v", i, err)
			}
			refused++
			continue
		}
		opened++
		_ = s.View(func(tx *Tx) error {
			_, err := List[map[string]string](tx, Routes) // a corrupt JSON value is an error, not a panic
			return err
		})
		s.Close()
	}
	t.Logf("%d opened (damage inside values), %d refused", opened, refused)
	if refused == 0 {
		t.Fatal("no corruption was detected")
	}
}

// TestOpenDoesNotWaitForALongCheck: past CheckTimeout the store opens and
// writes wait for the check, which must not run beside them.
func TestOpenDoesNotWaitForALongCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, validState(t), 0o600); err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { CheckTimeout = d }(CheckTimeout)
	CheckTimeout = 0
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(func(tx *Tx) error { return tx.Put(Routes, "new", "x") }); err != nil {
		t.Fatal(err)
	}
	if err := s.View(func(tx *Tx) error {
		if n := tx.Count(Routes); n != 401 {
			t.Errorf("%d routes, want 401", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
