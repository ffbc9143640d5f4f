// Package etcdstore keeps the durable state of a cluster of Tollgate
// servers in etcd: the same records as the data directory's store
// (server/store), under a prefix. It implements limiter.Persister for the
// leader of one leadership term.
//
// Every write is one etcd transaction conditioned on the create revision
// of the term's leader key (its campaign key): once that key is gone (the
// leader resigned, or etcd expired its session) or belongs to a later
// campaign, the write changes nothing and fails with UNAVAILABLE
// (NOT_LEADER). A write is not even sent once the leader's own deadline
// has passed (Options.Leading).
//
// Under PREFIX:
//
//	pools/NAME      the pool's record (store.EncodeRecord)
//	resources/NAME  an active pool's instances (store.EncodeResources)
//	meta/initialized     RFC 3339 time the pools file was seeded
//	meta/token_floor     decimal: the highest fencing token of any deleted pool
//	meta/lease_id_key    the key lease ids are signed with, shared by every server
package etcdstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server/store"
)

// DefaultTimeout bounds each etcd call when Options.Timeout is 0.
const DefaultTimeout = 5 * time.Second

// Options configures a Store.
type Options struct {
	// LeaderKey and LeaderRev are the term's campaign key and its create
	// revision: every write is conditioned on them.
	LeaderKey string
	LeaderRev int64
	// Leading, when set, is asked before every write; a write is refused
	// when it says false (the leadership deadline has passed).
	Leading func() bool
	// Deposed, when set, is called (at most once) when a write's fence
	// fails: another campaign leads, so this term can never write again.
	Deposed func()
	// Timeout bounds each etcd call; 0 means DefaultTimeout.
	Timeout time.Duration
}

// Store is one term's view of the cluster's durable state. It is safe for
// concurrent use.
type Store struct {
	c       *clientv3.Client
	prefix  string
	opts    Options
	deposed sync.Once
	res     store.ResourceHashes // each pool's instances as last written
}

// New returns the Store of prefix for the term opts describes. The client
// is not closed by Close.
func New(c *clientv3.Client, prefix string, opts Options) *Store {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	return &Store{c: c, prefix: prefix, opts: opts}
}

func (s *Store) poolKey(name string) string { return s.prefix + "pools/" + name }
func (s *Store) resKey(name string) string  { return s.prefix + "resources/" + name }
func (s *Store) metaKey(name string) string { return s.prefix + "meta/" + name }

// Path describes the store, for logs.
func (s *Store) Path() string {
	return fmt.Sprintf("etcd %s (prefix %s)", strings.Join(s.c.Endpoints(), ","), s.prefix)
}

// Close does nothing: the client is the caller's.
func (s *Store) Close() error { return nil }

// errNotLeader is the answer to a write of a deposed leader.
func errNotLeader() error {
	return &limiter.Error{Code: limiter.CodeUnavailable, Reason: limiter.ReasonNotLeader,
		Message: "this server no longer leads the cluster; nothing was changed; retry on the leader"}
}

// outcomeUnknown is the answer to a write that was sent but not answered:
// etcd may have committed it or not.
func outcomeUnknown(what, path string, err error) error {
	return &limiter.Error{Code: limiter.CodeUnavailable, Reason: limiter.ReasonOutcomeUnknown,
		Message: fmt.Sprintf("%s in %s got no answer (%v): it may or may not have been made; read the state back before sending the change again", what, path, err)}
}

// fencedTxn commits ops if the term's leader key is still ours; it
// answers NOT_LEADER (and reports the deposition) when it is not, and
// OUTCOME_UNKNOWN when etcd did not answer. ifs are
// further conditions; when they fail (and the fence holds), it returns
// false and no error.
func (s *Store) fencedTxn(what string, ifs []clientv3.Cmp, ops ...clientv3.Op) (bool, error) {
	if s.opts.LeaderKey == "" || s.opts.Leading != nil && !s.opts.Leading() {
		return false, errNotLeader() // the deadline passed: the term ends by itself
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	fence := clientv3.Compare(clientv3.CreateRevision(s.opts.LeaderKey), "=", s.opts.LeaderRev)
	resp, err := s.c.Txn(ctx).If(fence).Then(clientv3.OpTxn(ifs, ops, nil)).Commit()
	if err != nil {
		return false, outcomeUnknown(what, s.Path(), err)
	}
	if !resp.Succeeded {
		s.deposedNow()
		return false, errNotLeader()
	}
	return resp.Responses[0].GetResponseTxn().GetSucceeded(), nil
}

func (s *Store) deposedNow() {
	if s.opts.Deposed != nil {
		s.deposed.Do(s.opts.Deposed)
	}
}

// LoadOrSeed returns every pool. While the cluster was never seeded, it
// first writes each pool of seed that is not there yet, then the mark that
// it is seeded, and returns seed with seeded true.
func (s *Store) LoadOrSeed(seed []limiter.SavedPool) (pools []limiter.SavedPool, seeded bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	init, err := s.c.Get(ctx, s.metaKey("initialized"))
	if err != nil {
		return nil, false, fmt.Errorf("loading pools from %s: %w", s.Path(), err)
	}
	if len(init.Kvs) == 0 {
		for _, sp := range seed {
			if err := s.save(sp, true); err != nil {
				return nil, false, err
			}
		}
		initialized := clientv3.Compare(clientv3.CreateRevision(s.metaKey("initialized")), "=", 0)
		ok, err := s.fencedTxn("marking the pools file seeded", []clientv3.Cmp{initialized},
			clientv3.OpPut(s.metaKey("initialized"), time.Now().UTC().Format(time.RFC3339Nano)))
		if err != nil {
			return nil, false, err
		}
		if ok {
			return append([]limiter.SavedPool(nil), seed...), true, nil
		}
	}
	return s.load(ctx)
}

// load reads every pool and its instances at one revision.
func (s *Store) load(ctx context.Context) ([]limiter.SavedPool, bool, error) {
	recs, err := s.c.Get(ctx, s.prefix+"pools/", clientv3.WithPrefix())
	if err != nil {
		return nil, false, fmt.Errorf("loading pools from %s: %w", s.Path(), err)
	}
	res, err := s.c.Get(ctx, s.prefix+"resources/", clientv3.WithPrefix(), clientv3.WithRev(recs.Header.Revision))
	if err != nil {
		return nil, false, fmt.Errorf("loading pools from %s: %w", s.Path(), err)
	}
	instances := make(map[string][]byte, len(res.Kvs))
	for _, kv := range res.Kvs {
		instances[strings.TrimPrefix(string(kv.Key), s.prefix+"resources/")] = kv.Value
	}
	pools := make([]limiter.SavedPool, 0, len(recs.Kvs))
	for _, kv := range recs.Kvs {
		name := strings.TrimPrefix(string(kv.Key), s.prefix+"pools/")
		sp, err := store.DecodeRecord([]byte(name), kv.Value)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", s.Path(), err)
		}
		if v, ok := instances[name]; ok {
			if sp.Resources, err = store.DecodeResources(name, v); err != nil {
				return nil, false, fmt.Errorf("%s: %w", s.Path(), err)
			}
			s.res.Set(name, sha256.Sum256(v))
		}
		pools = append(pools, sp)
	}
	return pools, false, nil
}

// SavePool writes sp, replacing any record of the same name, in one fenced
// transaction. It implements limiter.Persister.
func (s *Store) SavePool(sp limiter.SavedPool) error { return s.save(sp, false) }

// save writes sp; onlyNew writes it only when no record of its name is
// there (seeding).
func (s *Store) save(sp limiter.SavedPool, onlyNew bool) error {
	name := sp.Config.Name
	v, err := store.EncodeRecord(sp)
	if err != nil {
		return err
	}
	ops := []clientv3.Op{clientv3.OpPut(s.poolKey(name), string(v))}
	rv, err := store.EncodeResources(sp.Resources)
	if err != nil {
		return fmt.Errorf("encoding the instances of pool %q: %w", name, err)
	}
	h := sha256.Sum256(rv)
	old, known := s.res.Get(name)
	if !known || old != h {
		if rv == nil {
			ops = append(ops, clientv3.OpDelete(s.resKey(name)))
		} else {
			ops = append(ops, clientv3.OpPut(s.resKey(name), string(rv)))
		}
	}
	var ifs []clientv3.Cmp
	if onlyNew {
		ifs = append(ifs, clientv3.Compare(clientv3.CreateRevision(s.poolKey(name)), "=", 0))
	}
	ok, err := s.fencedTxn(fmt.Sprintf("writing pool %q", name), ifs, ops...)
	if err != nil {
		return err
	}
	if ok {
		s.res.Set(name, h)
	}
	return nil
}

// DeletePool removes the named pool and raises the stored token floor to
// tokenFloor, in one fenced transaction. It implements limiter.Persister.
func (s *Store) DeletePool(name string, tokenFloor uint64) error {
	floorKey := s.metaKey("token_floor")
	for {
		cur, rev, err := s.tokenFloor()
		if err != nil {
			return err
		}
		ops := []clientv3.Op{clientv3.OpDelete(s.poolKey(name)), clientv3.OpDelete(s.resKey(name))}
		if tokenFloor > cur {
			ops = append(ops, clientv3.OpPut(floorKey, strconv.FormatUint(tokenFloor, 10)))
		}
		ok, err := s.fencedTxn(fmt.Sprintf("deleting pool %q", name),
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(floorKey), "=", rev)}, ops...)
		if err != nil {
			return err
		}
		if ok {
			s.res.Forget(name)
			return nil
		}
		// The floor moved meanwhile: read it again.
	}
}

// TokenFloor returns the highest fencing token any deleted pool may have
// issued (0 if none was ever deleted).
func (s *Store) TokenFloor() (uint64, error) {
	n, _, err := s.tokenFloor()
	return n, err
}

func (s *Store) tokenFloor() (floor uint64, modRev int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	resp, err := s.c.Get(ctx, s.metaKey("token_floor"))
	if err != nil {
		return 0, 0, fmt.Errorf("reading the token floor from %s: %w", s.Path(), err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, nil
	}
	kv := resp.Kvs[0]
	n, err := strconv.ParseUint(string(kv.Value), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: damaged token floor %q: %w", s.Path(), kv.Value, err)
	}
	return n, kv.ModRevision, nil
}

// LeaseIDKey returns the cluster's key for lease ids, creating it (by a
// transaction that only the first server to get there wins) if there is
// none: every server signs and checks ids with the same key, so ids stay
// valid across leaders. It is not fenced: any server may create it.
func (s *Store) LeaseIDKey() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	key := s.metaKey("lease_id_key")
	fresh := make([]byte, store.LeaseIDKeyLen)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	resp, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(fresh))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, fmt.Errorf("reading the lease id key from %s: %w", s.Path(), err)
	}
	if resp.Succeeded {
		return fresh, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) != 1 || len(kvs[0].Value) != store.LeaseIDKeyLen {
		return nil, fmt.Errorf("%s: damaged lease id key", s.Path())
	}
	return bytes.Clone(kvs[0].Value), nil
}

var _ limiter.Persister = (*Store)(nil)
