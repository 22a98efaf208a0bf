package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrDamaged is matched (errors.Is) by the error Open returns for a state
// file that is not a readable bbolt database.
var ErrDamaged = errors.New("state file is damaged")

// CheckTimeout bounds the consistency check at open. A check still running
// then is left to finish in the background and the store opens (writes
// wait for the check): a huge but healthy state file must not block
// startup.
var CheckTimeout = 10 * time.Second

type damagedError struct {
	path  string
	cause error
}

func (e *damagedError) Error() string {
	return fmt.Sprintf("state file %s is damaged (%v): restore a backup or move it aside and start with an empty cloud: mv %s %s.damaged",
		e.path, e.cause, e.path, e.path)
}

func (e *damagedError) Is(target error) bool { return target == ErrDamaged }
func (e *damagedError) Unwrap() error        { return e.cause }

func damaged(path string, cause error) error { return &damagedError{path, cause} }

// guarded runs fn in its own goroutine, turning panics and memory faults
// (bbolt reads pages through mmap: a corrupt page id can point past the
// file) into errors.
func guarded(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		debug.SetPanicOnFault(true)
		defer func() {
			if p := recover(); p != nil {
				ch <- &panicked{p}
			}
		}()
		ch <- fn()
	}()
	return <-ch
}

// panicked is a panic (or memory fault) in bbolt, turned into an error.
type panicked struct{ v any }

func (p *panicked) Error() string { return fmt.Sprintf("panic reading it: %v", p.v) }

// openBolt opens path, classifying errors: locked, not openable (an OS
// error: permissions, missing directory) or damaged.
func openBolt(path string) (*bolt.DB, error) {
	if data, err := os.ReadFile(path); err == nil {
		if err := validateFile(data); err != nil {
			if lockedElsewhere(path) {
				return nil, errLocked(path)
			}
			return nil, damaged(path, err)
		}
	}
	var db *bolt.DB
	err := guarded(func() (err error) {
		db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
		return err
	})
	var pathErr *fs.PathError
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, errLocked(path)
	case errors.As(err, &pathErr) && pathErr.Op != "read":
		return nil, fmt.Errorf("open state file %s: %w", path, err)
	default:
		return nil, damaged(path, err)
	}
}

func errLocked(path string) error {
	return fmt.Errorf("state file %s is locked by another running local cloud: stop it or use another --data-dir", path)
}

// check reads every record and runs bbolt's consistency check, waiting at
// most CheckTimeout. It holds a write transaction: bbolt's check is not
// safe beside writers, so after a timeout the store's writes wait for it.
func check(db *bolt.DB, path string) error {
	done := make(chan error, 1)
	go func() {
		done <- guarded(func() error {
			tx, err := db.Begin(true)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			// Reading every key first proves every page id in the tree is
			// inside the file before tx.Check (which cannot catch a fault)
			// follows them.
			err = tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				return b.ForEach(func(k, v []byte) error { return nil })
			})
			if err != nil {
				return err
			}
			var errs []error
			for err := range tx.Check() {
				if len(errs) < 3 {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			return damaged(path, err)
		}
	case <-time.After(CheckTimeout):
	}
	return nil
}
