package store

import (
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// LBBackends holds each load balancer's backends, one record per backend
// in a group (a nested bucket) named after the load balancer: adding or
// removing one backend writes that record only, not the whole set.
const LBBackends = "lbbackends"

func (t *Tx) group(kind, group string, create bool) (*bolt.Bucket, error) {
	if create {
		return t.bucket(kind).CreateBucketIfNotExists([]byte(group))
	}
	return t.bucket(kind).Bucket([]byte(group)), nil
}

// PutIn stores v as JSON under key in kind's group.
func (t *Tx) PutIn(kind, group, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b, err := t.group(kind, group, true)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), data)
}

// DeleteIn removes key from kind's group; a missing key or group is not an
// error.
func (t *Tx) DeleteIn(kind, group, key string) error {
	b, _ := t.group(kind, group, false)
	if b == nil {
		return nil
	}
	return b.Delete([]byte(key))
}

// DeleteGroup removes a group and its records; a missing one is not an
// error.
func (t *Tx) DeleteGroup(kind, group string) error {
	err := t.bucket(kind).DeleteBucket([]byte(group))
	if errors.Is(err, berrors.ErrBucketNotFound) {
		return nil
	}
	return err
}

// ExistsIn reports whether kind's group has key.
func (t *Tx) ExistsIn(kind, group, key string) bool {
	b, _ := t.group(kind, group, false)
	return b != nil && b.Get([]byte(key)) != nil
}

// HasGroup reports whether kind has the group.
func (t *Tx) HasGroup(kind, group string) bool {
	b, _ := t.group(kind, group, false)
	return b != nil
}

// CountIn is the number of records in kind's group. (A cursor, not
// Stats: Stats misses a write transaction's changes to a small group.)
func (t *Tx) CountIn(kind, group string) int {
	b, _ := t.group(kind, group, false)
	if b == nil {
		return 0
	}
	n := 0
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		n++
	}
	return n
}

// ListIn returns the records of kind's group in key order; a missing group
// has none.
func ListIn[T any](t *Tx, kind, group string) ([]T, bool, error) {
	b, _ := t.group(kind, group, false)
	if b == nil {
		return nil, false, nil
	}
	var out []T
	err := b.ForEach(func(k, data []byte) error {
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("corrupt %s/%s record %q: %w", kind, group, k, err)
		}
		out = append(out, v)
		return nil
	})
	return out, true, err
}

// GetIn reads key of kind's group; ok is false when the group or the key
// is missing.
func GetIn[T any](t *Tx, kind, group, key string) (v T, ok bool, err error) {
	b, _ := t.group(kind, group, false)
	if b == nil {
		return v, false, nil
	}
	data := b.Get([]byte(key))
	if data == nil {
		return v, false, nil
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, false, fmt.Errorf("corrupt %s/%s record %q: %w", kind, group, key, err)
	}
	return v, true, nil
}
