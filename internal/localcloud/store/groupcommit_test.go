package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// Concurrent updates are committed together; one that fails is rolled
// back alone and its caller gets its error, the others are committed.
func TestGroupCommit(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 64
	errBad := errors.New("bad update")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = s.Update(func(tx *Tx) error {
				if err := tx.Put(Meta, fmt.Sprint("k", i), i); err != nil {
					return err
				}
				if i%10 == 3 {
					return errBad // after writing: the write must be rolled back
				}
				return nil
			})
		})
	}
	wg.Wait()
	if err := s.View(func(tx *Tx) error {
		for i := range n {
			_, ok, err := Get[int](tx, Meta, fmt.Sprint("k", i))
			if err != nil {
				return err
			}
			if failing := i%10 == 3; failing != (errs[i] != nil) || failing == ok {
				t.Errorf("update %d: error %v, stored %v", i, errs[i], ok)
			}
			if errs[i] != nil && !errors.Is(errs[i], errBad) {
				t.Errorf("update %d: error %v, want its own", i, errs[i])
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st := s.WriteStats()
	if st.Updates != n-7 || st.Commits < 1 || st.Commits > st.Updates {
		t.Errorf("stats %+v: want %d updates committed", st, n-7)
	}
}

// A panic in an update is its caller's, as with a plain bbolt Update, and
// the store goes on committing.
func TestGroupCommitPanicIsCallers(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the update's panic", p)
			}
		}()
		_ = s.Update(func(tx *Tx) error {
			_ = tx.Put(Meta, "panicked", 1)
			panic("boom")
		})
	}()
	if err := s.Update(func(tx *Tx) error { return tx.Put(Meta, "after", 1) }); err != nil {
		t.Fatal(err)
	}
	_ = s.View(func(tx *Tx) error {
		if tx.Exists(Meta, "panicked") || !tx.Exists(Meta, "after") {
			t.Error("the panicking update was committed, or the next one was not")
		}
		return nil
	})
}
