package store

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgate/tollgate/limiter"
)

// An active pool's instances (up to limiter.MaxResourcesPerPool, with
// their attributes) are stored under the pool's name in their own bucket,
// apart from the pool's record: the engine writes the record about once a
// second for a busy pool (its reservations), and the instances change
// only when an operator adds or removes some, so a record write rewrites
// them only when they changed. The store remembers, per pool, a hash of
// what it last wrote.

// ResourceHashes are the hashes of each pool's instances as last written
// (sha256 of their stored bytes), so that a store rewrites them only when
// they change. The zero value is ready; it is safe for concurrent use.
type ResourceHashes struct {
	mu     sync.Mutex
	hashes map[string][sha256.Size]byte
	writes int // instance writes made, for tests
}

// Get returns the hash last written for the named pool.
func (c *ResourceHashes) Get(name string) ([sha256.Size]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.hashes[name]
	return h, ok
}

// Set records h as written for the named pool.
func (c *ResourceHashes) Set(name string, h [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hashes == nil {
		c.hashes = make(map[string][sha256.Size]byte)
	}
	c.hashes[name] = h
}

// Forget forgets the named pool.
func (c *ResourceHashes) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.hashes, name)
}

// encodeResources returns the stored form of rs; nil for none.
func encodeResources(rs []limiter.Resource) ([]byte, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	out := make([]resourceRecord, len(rs))
	for i, r := range rs {
		out[i] = resourceRecord{ID: r.ID, Attributes: r.Attributes}
	}
	return json.Marshal(out)
}

// putResources writes w's instances in tx if they differ from what was
// last written (deleting them when there are none), and returns what to
// do once tx has committed: remember them as written.
func (s *Store) putResources(tx *bolt.Tx, w poolWrite) (func(), error) {
	if old, ok := s.res.Get(w.name); ok && old == w.resHash {
		return func() {}, nil
	}
	b := tx.Bucket(resBucket)
	var err error
	if w.res == nil {
		err = b.Delete([]byte(w.name))
	} else {
		err = b.Put([]byte(w.name), w.res)
	}
	if err != nil {
		return nil, err
	}
	return func() {
		s.res.Set(w.name, w.resHash)
		s.res.mu.Lock()
		s.res.writes++
		s.res.mu.Unlock()
	}, nil
}

// loadResources returns the instances stored for the named pool, or
// legacy (those of its record) when none are, and remembers them as
// written.
func (s *Store) loadResources(tx *bolt.Tx, name string, legacy []limiter.Resource) ([]limiter.Resource, error) {
	v := tx.Bucket(resBucket).Get([]byte(name))
	rs := legacy
	if v != nil {
		var err error
		if rs, err = DecodeResources(name, v); err != nil {
			return nil, fmt.Errorf("%w; restore the data directory from a backup", err)
		}
		s.res.Set(name, sha256.Sum256(v))
	}
	return rs, nil
}
