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
type Store struct{ db *bolt.DB }

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
	// Group commit waits at most 1 ms for company: a lone request pays
	// little, a burst shares one fsync.
	db.MaxBatchDelay = time.Millisecond
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

// Close closes the state file.
func (s *Store) Close() error { return s.db.Close() }

// Update runs fn in a read-write transaction, committed durably (fsync'ed)
// before it returns, if fn returns nil. Concurrent updates are committed
// together (group commit: one fsync for many requests), so fn may run more
// than once, including in a transaction that is then rolled back: effects
// outside the store (the data plane) belong after Update returns nil.
func (s *Store) Update(fn func(*Tx) error) error {
	return s.db.Batch(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx}) })
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
