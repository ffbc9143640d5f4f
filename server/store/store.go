// Package store keeps a Tollgate server's durable state in one bbolt file
// in a data directory: the pools that operators declared, and for each
// pool the engine's DurableState (fencing token ceiling, lease horizon,
// TTL bound). Leases themselves are not stored: they are soft state that a
// restarted server re-adopts during its recovery window (see
// docs/recovery.md).
//
// A Store implements limiter.Persister. A write returns once the bbolt
// transaction it went in has committed with an fsync, so a write that
// returned nil survives a crash of the process or the machine. The
// writes of many pools share transactions (group commit): a pool's
// write waits while a batch commits, then goes in the next with every
// other write queued meanwhile; a background write (SavePoolLater) waits
// up to LaterDelay for others.
//
// On disk, in DIR/tollgate.db:
//
//	bucket "meta":  "format" -> "2", "initialized" -> RFC 3339 time of the first start,
//	                "token_floor" -> decimal: the highest fencing token of any deleted pool
//	bucket "pools": pool name -> the pool's record (see Record)
//	bucket "resources": pool name -> an active pool's instances (see ResourceHashes)
//	bucket "live": pool name -> bucket: chunk index (8 bytes, big-endian) -> a chunk
//	                of the pool's live set (EncodeLiveChunk)
//
// Format 1 differs only in that its records were JSON; a file of format 1
// is marked 2 when opened, and its records are read until rewritten.
package store

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server/store/internal/groupcommit"
)

// FileName is the name of the store's file in its data directory.
const FileName = "tollgate.db"

// formatVersion is the on-disk format this code writes; it also reads
// oldFormatVersion.
const (
	formatVersion    = "2"
	oldFormatVersion = "1"
)

// LaterDelay is the longest a background write (SavePoolLater) waits for
// other writes to share its commit, and MaxBatch the most pool writes one
// transaction carries.
const (
	LaterDelay = 10 * time.Millisecond
	MaxBatch   = 4096
)

// lockTimeout bounds the wait for another process's lock on the file.
const lockTimeout = time.Second

var (
	metaBucket     = []byte("meta")
	poolsBucket    = []byte("pools")
	resBucket      = []byte("resources") // an active pool's instances, apart from its record
	liveBucket     = []byte("live")      // each pool's live set, apart from its record
	formatKey      = []byte("format")
	initializedKey = []byte("initialized")
	tokenFloorKey  = []byte("token_floor")
	leaseIDKeyKey  = []byte("lease_id_key")
)

// Store is an open data directory. Its methods are safe for concurrent
// use. Create it with Open and Close it when done.
type Store struct {
	db     *bolt.DB
	path   string
	res    ResourceHashes // what each pool's instances were last written as
	writes *groupcommit.Committer[poolWrite]
}

// poolWrite is a pool's record and instances in their stored form,
// waiting for a transaction.
type poolWrite struct {
	name    string
	rec     []byte
	res     []byte // nil: none
	resHash [sha256.Size]byte
	live    []limiter.LiveChunk // the chunks of the live set that changed
}

// newPoolWrite encodes sp for a write.
func newPoolWrite(sp limiter.SavedPool) (poolWrite, error) {
	rec, err := encode(sp)
	if err != nil {
		return poolWrite{}, err
	}
	res, err := encodeResources(sp.Resources)
	if err != nil {
		return poolWrite{}, fmt.Errorf("encoding the instances of pool %q: %w", sp.Config.Name, err)
	}
	return poolWrite{name: sp.Config.Name, rec: rec, res: res, resHash: sha256.Sum256(res), live: sp.LiveChunks}, nil
}

// Open opens the store in dir, creating dir (mode 0700) and the store
// file (mode 0600) if they do not exist. Only one process may have a
// store open: Open fails after a second if another holds it. It also
// fails for a file of an unknown format.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("no data directory given; the server keeps its pools on disk and needs one")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create the data directory: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("the data directory %s is in use by another tollgate server (%s is locked); stop that server or choose another data directory", dir, path)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open the store %s: %w", path, err)
	}
	s := &Store{db: db, path: path}
	s.writes = groupcommit.New(s.commit, MaxBatch, LaterDelay)
	if err := s.init(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// init creates the buckets of a new file and checks the format of an old
// one.
func (s *Store) init() error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(poolsBucket); err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(resBucket); err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(liveBucket); err != nil {
			return err
		}
		switch v := meta.Get(formatKey); {
		case v == nil, string(v) == oldFormatVersion:
			return meta.Put(formatKey, []byte(formatVersion))
		case string(v) != formatVersion:
			return fmt.Errorf("%s has format %q, but this server reads formats %s and %s; run the tollgate version that wrote it", s.path, v, oldFormatVersion, formatVersion)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot initialize the store %s: %w", s.path, err)
	}
	return nil
}

// Path returns the store's file.
func (s *Store) Path() string { return s.path }

// Close closes the store's file and releases its lock. Writes after Close
// fail.
func (s *Store) Close() error { return s.db.Close() }

// LoadOrSeed returns every pool in the store. On the store's first start
// (it was never started before, even if it has no pools now), it first
// writes seed, in one transaction with the mark that the store has
// started, and returns seed with seeded true. Later starts ignore seed: the
// store, which holds every acknowledged change since, wins.
func (s *Store) LoadOrSeed(seed []limiter.SavedPool) (pools []limiter.SavedPool, seeded bool, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		meta, b := tx.Bucket(metaBucket), tx.Bucket(poolsBucket)
		if meta.Get(initializedKey) == nil {
			for _, sp := range seed {
				w, err := newPoolWrite(sp)
				if err != nil {
					return err
				}
				if err := b.Put([]byte(w.name), w.rec); err != nil {
					return err
				}
				if _, err := s.putResources(tx, w); err != nil {
					return err
				}
			}
			seeded = true
			return meta.Put(initializedKey, []byte(time.Now().UTC().Format(time.RFC3339Nano)))
		}
		return b.ForEach(func(k, v []byte) error {
			sp, err := decode(k, v)
			if err != nil {
				return err
			}
			if sp.Resources, err = s.loadResources(tx, sp.Config.Name, sp.Resources); err != nil {
				return err
			}
			if sp.LiveChunks, err = loadLiveChunks(tx, sp.Config.Name); err != nil {
				return err
			}
			pools = append(pools, sp)
			return nil
		})
	})
	if err != nil {
		return nil, false, fmt.Errorf("loading pools from %s: %w", s.path, err)
	}
	if seeded {
		pools = append([]limiter.SavedPool(nil), seed...)
	}
	return pools, seeded, nil
}

// SavePool durably writes sp, replacing any record of the same name, in
// the next transaction, shared with the other pools' writes queued
// meanwhile. It implements limiter.Persister.
func (s *Store) SavePool(sp limiter.SavedPool) error {
	w, err := newPoolWrite(sp)
	if err != nil {
		return err
	}
	return s.writes.Now(w)
}

// SavePoolLater is SavePool for a write no caller waits for: it may wait
// up to LaterDelay for other writes to share its transaction. It
// implements limiter.LaterPersister.
func (s *Store) SavePoolLater(sp limiter.SavedPool) error {
	w, err := newPoolWrite(sp)
	if err != nil {
		return err
	}
	return s.writes.Later(w)
}

// commit writes a batch of pool writes in one transaction: all of them,
// or none (each then fails with the transaction's error). Of two writes
// of one pool, the later's record wins; the live set takes the chunks of
// both, in order.
func (s *Store) commit(batch []poolWrite) []error {
	var written []func()
	err := s.db.Update(func(tx *bolt.Tx) error {
		written = written[:0]
		pools := tx.Bucket(poolsBucket)
		last := make(map[string]int, len(batch))
		for i, w := range batch {
			last[w.name] = i
		}
		for i, w := range batch {
			// Each write carries only the chunks that changed since the
			// one before it: every write's chunks go in, in order.
			if err := putLiveChunks(tx, w.name, w.live); err != nil {
				return fmt.Errorf("writing the live set of pool %q: %w", w.name, err)
			}
			if last[w.name] != i {
				continue
			}
			if err := pools.Put([]byte(w.name), w.rec); err != nil {
				return fmt.Errorf("writing pool %q: %w", w.name, err)
			}
			f, err := s.putResources(tx, w) // only when they changed
			if err != nil {
				return fmt.Errorf("writing the instances of pool %q: %w", w.name, err)
			}
			written = append(written, f)
		}
		return nil
	})
	if err != nil {
		errs := make([]error, len(batch))
		for i, w := range batch {
			errs[i] = fmt.Errorf("writing pool %q to %s: %w", w.name, s.path, err)
		}
		return errs
	}
	for _, f := range written {
		f()
	}
	return nil
}

// DeletePool durably removes the named pool's record (removing one that is
// not there is not an error) and, in the same transaction, raises the
// stored token floor to tokenFloor. It implements limiter.Persister.
func (s *Store) DeletePool(name string, tokenFloor uint64) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(poolsBucket).Delete([]byte(name)); err != nil {
			return err
		}
		if err := tx.Bucket(resBucket).Delete([]byte(name)); err != nil {
			return err
		}
		if err := tx.Bucket(liveBucket).DeleteBucket([]byte(name)); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return err
		}
		s.res.Forget(name)
		meta := tx.Bucket(metaBucket)
		if cur, err := readTokenFloor(meta); err != nil || tokenFloor <= cur {
			return err
		}
		return meta.Put(tokenFloorKey, []byte(strconv.FormatUint(tokenFloor, 10)))
	})
	if err != nil {
		return fmt.Errorf("deleting pool %q from %s: %w", name, s.path, err)
	}
	return nil
}

// TokenFloor returns the highest fencing token any deleted pool may have
// issued (0 if none was ever deleted): pools created after a restart must
// start above it (limiter.Engine.RaiseTokenFloor).
func (s *Store) TokenFloor() (uint64, error) {
	var floor uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		floor, err = readTokenFloor(tx.Bucket(metaBucket))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reading the token floor from %s: %w", s.path, err)
	}
	return floor, nil
}

// readTokenFloor reads the meta bucket's token floor; a missing one is 0.
func readTokenFloor(meta *bolt.Bucket) (uint64, error) {
	v := meta.Get(tokenFloorKey)
	if v == nil {
		return 0, nil
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("damaged token floor %q: %w", v, err)
	}
	return n, nil
}

var _ limiter.LaterPersister = (*Store)(nil)

// LeaseIDKeyLen is the length of the key LeaseIDKey returns, in bytes.
const LeaseIDKeyLen = 32

// LeaseIDKey returns the server's secret key for lease ids, creating it
// (LeaseIDKeyLen random bytes, written durably) on the first call for a
// data directory. The server signs the lease ids it hands to holders with
// it; keeping it across restarts lets holders renew, and so re-adopt,
// their leases on a restarted server. Anyone who can read the data
// directory can read it.
func (s *Store) LeaseIDKey() ([]byte, error) {
	var key []byte
	err := s.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(metaBucket)
		if v := meta.Get(leaseIDKeyKey); v != nil {
			if len(v) != LeaseIDKeyLen {
				return fmt.Errorf("damaged lease id key (%d bytes, want %d)", len(v), LeaseIDKeyLen)
			}
			key = append([]byte(nil), v...)
			return nil
		}
		key = make([]byte, LeaseIDKeyLen)
		if _, err := rand.Read(key); err != nil {
			return err
		}
		return meta.Put(leaseIDKeyKey, key)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the lease id key from %s: %w", s.path, err)
	}
	return key, nil
}

// Commits returns how many transactions of pool writes the store has
// committed since it was opened.
func (s *Store) Commits() uint64 { return s.writes.Batches() }
