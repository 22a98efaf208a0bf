// Package store is the local cloud's durable state: JSON records in bbolt
// buckets, one bucket per kind. Every write is one fsync'ed transaction, so
// a `kill -9` loses nothing that was acknowledged and leaves nothing half
// written; bbolt serializes writers, so concurrent requests are safe.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Kinds (bucket names).
const (
	Instances     = "instances"
	LoadBalancers = "loadbalancers"
	Routes        = "routes"
	Volumes       = "volumes"
	Registries    = "registries"
	// TokenIssuers holds trusted service-account token issuers, by issuer.
	TokenIssuers = "tokenissuers"
	Meta         = "meta"
	// IPs holds allocated addresses: key = address, value = owner.
	IPs = "ips"
)

var kinds = []string{Instances, LoadBalancers, Routes, Volumes, Registries, TokenIssuers, Meta, IPs, RouteCIDRs, LBBackends}

// Store is an open state file.
type Store struct {
	db *bolt.DB
	// group is the group commit's queue (Update).
	group struct {
		mu      sync.Mutex
		pending []call
		running bool // a committer goroutine is running
	}
	// commits and updates committed (WriteStats).
	statsMu          sync.Mutex
	commits, updates int
}

// Open opens (creating if needed) the state file at path. Only one process
// may hold it. A damaged file is reported (ErrDamaged), with how to recover,
// and left as it is.
func Open(path string) (*Store, error) {
	db, err := openBolt(path)
	if err != nil {
		return nil, err
	}
	if err := createBuckets(db); err != nil {
		_ = db.Close()
		var p *panicked
		if errors.As(err, &p) {
			return nil, damaged(path, err)
		}
		return nil, fmt.Errorf("initialize state file %s: %w", path, err)
	}
	if err := check(db, path); err != nil {
		_ = db.Close()
		return nil, err
	}
	return &Store{db: db}, nil
}

// createBuckets creates the buckets that are missing (all of them in a new
// file). It writes nothing when none is: a commit on a damaged file could
// spread the damage before check finds it.
func createBuckets(db *bolt.DB) error {
	return guarded(func() error {
		var missing bool
		_ = db.View(func(tx *bolt.Tx) error {
			for _, k := range kinds {
				missing = missing || tx.Bucket([]byte(k)) == nil
			}
			return nil
		})
		if !missing {
			return nil
		}
		return db.Update(func(tx *bolt.Tx) error {
			for _, k := range kinds {
				if _, err := tx.CreateBucketIfNotExists([]byte(k)); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// WriteStats are counters of the store's commits, for benchmarks.
type WriteStats struct {
	// Commits is the number of transactions committed, Updates the
	// number of Update calls they carried.
	Commits, Updates int
	// Pages written (dirty pages and the meta page), and the time spent
	// writing and syncing them.
	Pages     int64
	WriteTime time.Duration
}

// WriteStats returns the counters since the store was opened.
func (s *Store) WriteStats() WriteStats {
	st := s.db.Stats()
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	return WriteStats{Commits: s.commits, Updates: s.updates, Pages: st.TxStats.GetWrite(), WriteTime: st.TxStats.GetWriteTime()}
}

// Close closes the state file.
func (s *Store) Close() error { return s.db.Close() }

// Update runs fn in a read-write transaction, committed durably (fsync'ed)
// before it returns, if fn returns nil. Concurrent updates are committed
// together (group commit: one fsync for many requests), so fn may run more
// than once, including in a transaction that is then rolled back: effects
// outside the store (the data plane) belong after Update returns nil.
//
// The group commit is a single committer: an update that finds it idle is
// committed at once, alone; updates that come while a commit runs wait
// for it and are then committed together, all of them. (bbolt's own Batch
// starts a new batch every MaxBatchDelay while a slow commit runs, each
// then paying its own fsyncs in turn: when syncs are slow, batches stay
// small just when they should grow.)
func (s *Store) Update(fn func(*Tx) error) error {
	c := call{fn: fn, err: make(chan error, 1)}
	s.group.mu.Lock()
	s.group.pending = append(s.group.pending, c)
	if !s.group.running {
		s.group.running = true
		go s.commitLoop()
	}
	s.group.mu.Unlock()
	err := <-c.err
	if err == errTrySolo {
		// fn failed in a batch: run it alone, so that its error (or
		// panic) is its caller's and its writes are rolled back.
		err = s.db.Update(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx}) })
		if err == nil {
			s.committed(1)
		}
	}
	return err
}

// maxBatch bounds the updates committed in one transaction.
const maxBatch = 1000

// call is an update waiting for the committer.
type call struct {
	fn  func(*Tx) error
	err chan error
}

// errTrySolo tells an update's caller to run it alone.
var errTrySolo = errors.New("store: update failed in a batch, run it alone")

// commitLoop commits the pending updates, in batches, until none is left.
func (s *Store) commitLoop() {
	for {
		s.group.mu.Lock()
		calls := s.group.pending
		if len(calls) > maxBatch {
			calls, s.group.pending = calls[:maxBatch:maxBatch], calls[maxBatch:]
		} else {
			s.group.pending = nil
		}
		if len(calls) == 0 {
			s.group.running = false
			s.group.mu.Unlock()
			return
		}
		s.group.mu.Unlock()
		s.commitBatch(calls)
	}
}

// commitBatch runs calls in one transaction, as bbolt's Batch does: an
// update that fails is taken out (its caller runs it alone) and the rest
// are run again.
func (s *Store) commitBatch(calls []call) {
	for len(calls) > 0 {
		failed := -1
		err := s.db.Update(func(tx *bolt.Tx) error {
			for i, c := range calls {
				if err := safelyCall(c.fn, &Tx{tx: tx}); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed >= 0 {
			c := calls[failed]
			calls[failed], calls = calls[len(calls)-1], calls[:len(calls)-1]
			c.err <- errTrySolo
			continue
		}
		if err == nil {
			s.committed(len(calls))
		}
		for _, c := range calls {
			c.err <- err
		}
		return
	}
}

// safelyCall runs fn, turning a panic into an error (the caller then runs
// fn alone, where it panics in its own goroutine).
func safelyCall(fn func(*Tx) error, tx *Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicked{p}
		}
	}()
	return fn(tx)
}

// committed counts a commit of n updates.
func (s *Store) committed(n int) {
	s.statsMu.Lock()
	s.commits++
	s.updates += n
	s.statsMu.Unlock()
}

// View runs fn in a read-only transaction.
func (s *Store) View(fn func(*Tx) error) error {
	return s.db.View(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx}) })
}

// Tx is a transaction.
type Tx struct{ tx *bolt.Tx }

func (t *Tx) bucket(kind string) *bolt.Bucket {
	b := t.tx.Bucket([]byte(kind))
	if b == nil {
		panic("store: unknown kind " + kind)
	}
	return b
}

// Exists reports whether key exists in kind.
func (t *Tx) Exists(kind, key string) bool { return t.bucket(kind).Get([]byte(key)) != nil }

// Put stores v as JSON under key.
func (t *Tx) Put(kind, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return t.bucket(kind).Put([]byte(key), data)
}

// Delete removes key; removing a missing key is not an error.
func (t *Tx) Delete(kind, key string) error { return t.bucket(kind).Delete([]byte(key)) }

// NextID returns a new sequence number for kind, unique for the life of the state.
func (t *Tx) NextID(kind string) (uint64, error) { return t.bucket(kind).NextSequence() }

// Get loads the record under key into a T; false if there is none.
func Get[T any](t *Tx, kind, key string) (T, bool, error) {
	var v T
	data := t.bucket(kind).Get([]byte(key))
	if data == nil {
		return v, false, nil
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, false, fmt.Errorf("corrupt %s record %q: %w", kind, key, err)
	}
	return v, true, nil
}

// List returns every record of kind in key order.
func List[T any](t *Tx, kind string) ([]T, error) {
	var out []T
	err := t.bucket(kind).ForEach(func(k, data []byte) error {
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("corrupt %s record %q: %w", kind, k, err)
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// ForEachRaw calls fn with every record of kind in key order, undecoded
// (the data is valid only during fn).
func (t *Tx) ForEachRaw(kind string, fn func(key string, data []byte) error) error {
	return t.bucket(kind).ForEach(func(k, data []byte) error {
		if data == nil {
			return nil // a nested bucket, not a record
		}
		return fn(string(k), data)
	})
}

// ErrPoolExhausted means an address pool has no free address.
var ErrPoolExhausted = errors.New("address pool exhausted")

// AllocateIP takes the first free address of pool for owner. The network
// and (for IPv4) broadcast addresses and the pool's first address are never
// handed out.
func (t *Tx) AllocateIP(pool netip.Prefix, owner string) (netip.Addr, error) {
	b := t.bucket(IPs)
	// Skip the network address and the first host (kept for a gateway).
	addr := pool.Masked().Addr().Next().Next()
	for ; pool.Contains(addr); addr = addr.Next() {
		if addr.Is4() && !pool.Contains(addr.Next()) {
			break // broadcast
		}
		if b.Get([]byte(addr.String())) == nil {
			return addr, b.Put([]byte(addr.String()), []byte(owner))
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: no free address in %s", ErrPoolExhausted, pool)
}

// ClaimIP takes a specific address for owner; it fails if someone else has it.
func (t *Tx) ClaimIP(addr netip.Addr, owner string) error {
	b := t.bucket(IPs)
	if cur := b.Get([]byte(addr.String())); cur != nil && string(cur) != owner {
		return fmt.Errorf("address %s is already in use by %s", addr, cur)
	}
	return b.Put([]byte(addr.String()), []byte(owner))
}

// ReleaseIP frees an address.
func (t *Tx) ReleaseIP(addr string) error { return t.bucket(IPs).Delete([]byte(addr)) }

// Count returns the number of records of kind, from the page headers (no
// record is decoded).
func (t *Tx) Count(kind string) int { return t.bucket(kind).Stats().KeyN }
