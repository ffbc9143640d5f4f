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
// has passed (Options.Leading). The pool writes of many pools share
// transactions (group commit, as in server/store): one fenced
// transaction carries the writes queued while the last one committed, up
// to MaxTxnOps operations and MaxTxnBytes bytes, within etcd's default
// limits.
//
// Under PREFIX:
//
//	pools/NAME      the pool's record (store.EncodeRecord)
//	resources/NAME  an active pool's instances (store.EncodeResources)
//	live/NAME@INDEX a chunk of the pool's live set (store.EncodeLiveChunk),
//	                INDEX in 16 hex digits ('@' is in no pool name)
//	meta/initialized     RFC 3339 time the pools file was seeded
//	meta/token_floor     decimal: the highest fencing token of any deleted pool
//	meta/lease_id_key    the key lease ids are signed with, shared by every server
//
// In a cluster of several shards, a term's Store reads and writes the
// pools of its shard only (shard.Of(name, Shards) == Shard), and the
// seeding mark and the token floor are its shard's:
// meta/initialized@SHARD and meta/token_floor@SHARD (SHARD in decimal).
// With one shard they are the keys above, as before shards existed.
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
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
	"github.com/tollgate/tollgate/server/store"
	"github.com/tollgate/tollgate/server/store/internal/groupcommit"
)

// DefaultTimeout bounds each etcd call when Options.Timeout is 0.
const DefaultTimeout = 5 * time.Second

// MaxTxnOps and MaxTxnBytes bound one transaction of pool writes, within
// etcd's default --max-txn-ops (128, of which the fenced transaction the
// writes are nested in takes one) and --max-request-bytes (1.5 MiB); a
// pool's write is one or two operations. A single pool write larger than
// MaxTxnBytes goes alone.
const (
	MaxTxnOps   = 127
	MaxTxnBytes = 1 << 20
)

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
	// Unsure, when set, is called (at most once) when a write got no
	// answer: etcd may hold a change the term's engine does not, so the
	// term must not go on from its memory.
	Unsure func()
	// Timeout bounds each etcd call; 0 means DefaultTimeout.
	Timeout time.Duration
	// Shard and Shards are the term's shard and the cluster's number of
	// shards (0 means 1): the Store loads and seeds the pools of Shard
	// only.
	Shard  int
	Shards int
}

// Store is one term's view of the cluster's durable state. It is safe for
// concurrent use.
type Store struct {
	c       *clientv3.Client
	prefix  string
	opts    Options
	deposed sync.Once
	unsure  sync.Once
	res     store.ResourceHashes // each pool's instances as last written
	writes  *groupcommit.Committer[poolWrite]
}

// poolWrite is a pool's write as etcd operations, waiting for a
// transaction.
type poolWrite struct {
	name  string
	ops   []clientv3.Op
	size  int               // bytes of keys and values
	hash  [sha256.Size]byte // of the instances
	isRes bool              // ops write the instances (they changed)
	// live are the chunks of the pool's live set that changed since its
	// last write, by key: a put (the chunk's encoding) or a delete ("").
	live     map[string]string
	liveKeys []string // live's keys, in order
}

// New returns the Store of prefix for the term opts describes. The client
// is not closed by Close.
func New(c *clientv3.Client, prefix string, opts Options) *Store {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	s := &Store{c: c, prefix: prefix, opts: opts}
	s.writes = groupcommit.New(s.commit, store.MaxBatch, store.LaterDelay)
	return s
}

func (s *Store) poolKey(name string) string { return s.prefix + "pools/" + name }
func (s *Store) resKey(name string) string  { return s.prefix + "resources/" + name }
func (s *Store) metaKey(name string) string { return s.prefix + "meta/" + name }

// shardMetaKey is the key of the shard's own meta record name.
func (s *Store) shardMetaKey(name string) string {
	if s.opts.Shards <= 1 {
		return s.metaKey(name)
	}
	return s.metaKey(name + "@" + strconv.Itoa(s.opts.Shard))
}

// mine reports whether the pool named name is in the Store's shard.
func (s *Store) mine(name string) bool         { return shard.Of(name, s.opts.Shards) == s.opts.Shard }
func (s *Store) livePrefix(name string) string { return s.prefix + "live/" + name + "@" }
func (s *Store) liveKey(name string, index uint64) string {
	return fmt.Sprintf("%s%016x", s.livePrefix(name), index)
}

// Path describes the store, for logs.
func (s *Store) Path() string {
	return fmt.Sprintf("etcd %s (prefix %s)", strings.Join(s.c.Endpoints(), ","), s.prefix)
}

// Close does nothing: the client is the caller's.
func (s *Store) Close() error { return nil }

// errNotLeader is the answer to a write of a deposed leader.
func errNotLeader() error {
	return &apierr.Error{Code: apierr.CodeUnavailable, Reason: apierr.ReasonNotLeader,
		Message: "this server no longer leads the pool's shard; nothing was changed; retry on its leader"}
}

// outcomeUnknown is the answer to a write that was sent but not answered:
// etcd may have committed it or not.
func outcomeUnknown(what, path string, err error) error {
	return &apierr.Error{Code: apierr.CodeUnavailable, Reason: apierr.ReasonOutcomeUnknown,
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
		if s.opts.Unsure != nil {
			s.unsure.Do(s.opts.Unsure)
		}
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

// LoadOrSeed returns every pool of the Store's shard. While the shard was
// never seeded, it first writes each pool of seed in the shard that is
// not there yet, then the mark that it is seeded, and returns those pools
// of seed with seeded true.
func (s *Store) LoadOrSeed(seed []limiter.SavedPool) (pools []limiter.SavedPool, seeded bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	initKey := s.shardMetaKey("initialized")
	init, err := s.c.Get(ctx, initKey)
	if err != nil {
		return nil, false, fmt.Errorf("loading pools from %s: %w", s.Path(), err)
	}
	if len(init.Kvs) == 0 {
		var own []limiter.SavedPool
		for _, sp := range seed {
			if s.mine(sp.Config.Name) {
				own = append(own, sp)
			}
		}
		for _, sp := range own {
			if err := s.save(sp); err != nil {
				return nil, false, err
			}
		}
		initialized := clientv3.Compare(clientv3.CreateRevision(initKey), "=", 0)
		ok, err := s.fencedTxn("marking the pools file seeded", []clientv3.Cmp{initialized},
			clientv3.OpPut(initKey, time.Now().UTC().Format(time.RFC3339Nano)))
		if err != nil {
			return nil, false, err
		}
		if ok {
			return own, true, nil
		}
	}
	return s.load(ctx)
}

// load reads every pool of the shard, its instances and its live set, at
// one revision.
func (s *Store) load(ctx context.Context) ([]limiter.SavedPool, bool, error) {
	recs, err := s.c.Get(ctx, s.prefix+"pools/", clientv3.WithPrefix())
	if err != nil {
		return nil, false, fmt.Errorf("loading pools from %s: %w", s.Path(), err)
	}
	res, err := s.c.Get(ctx, s.prefix+"resources/", clientv3.WithPrefix(), clientv3.WithRev(recs.Header.Revision))
	if err != nil {
		return nil, false, fmt.Errorf("loading pools from %s: %w", s.Path(), err)
	}
	live, err := s.c.Get(ctx, s.prefix+"live/", clientv3.WithPrefix(), clientv3.WithRev(recs.Header.Revision))
	if err != nil {
		return nil, false, fmt.Errorf("loading pools from %s: %w", s.Path(), err)
	}
	chunks := make(map[string][]limiter.LiveChunk)
	for _, kv := range live.Kvs {
		k := strings.TrimPrefix(string(kv.Key), s.prefix+"live/")
		at := strings.LastIndexByte(k, '@')
		idx, perr := strconv.ParseUint(k[at+1:], 16, 64)
		if at < 0 || perr != nil {
			return nil, false, fmt.Errorf("%s: damaged live chunk key %q", s.Path(), kv.Key)
		}
		if !s.mine(k[:at]) {
			continue
		}
		c, err := store.DecodeLiveChunk(k[:at], idx, kv.Value)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", s.Path(), err)
		}
		chunks[k[:at]] = append(chunks[k[:at]], c)
	}
	instances := make(map[string][]byte, len(res.Kvs))
	for _, kv := range res.Kvs {
		if name := strings.TrimPrefix(string(kv.Key), s.prefix+"resources/"); s.mine(name) {
			instances[name] = kv.Value
		}
	}
	pools := make([]limiter.SavedPool, 0, len(recs.Kvs))
	for _, kv := range recs.Kvs {
		name := strings.TrimPrefix(string(kv.Key), s.prefix+"pools/")
		if !s.mine(name) {
			continue
		}
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
		sp.LiveChunks = chunks[name]
		pools = append(pools, sp)
	}
	return pools, false, nil
}

// SavePool writes sp, replacing any record of the same name, in the next
// fenced transaction, shared with the other pools' writes queued
// meanwhile. It implements limiter.Persister.
func (s *Store) SavePool(sp limiter.SavedPool) error {
	w, err := s.poolWrite(sp)
	if err != nil {
		return err
	}
	return s.writes.Now(w)
}

// SavePoolLater is SavePool for a write no caller waits for: it may wait
// up to store.LaterDelay for other writes to share its transaction. It
// implements limiter.LaterPersister.
func (s *Store) SavePoolLater(sp limiter.SavedPool) error {
	w, err := s.poolWrite(sp)
	if err != nil {
		return err
	}
	return s.writes.Later(w)
}

// poolWrite returns the operations that write sp: its record, and its
// instances when they differ from those last written.
func (s *Store) poolWrite(sp limiter.SavedPool) (poolWrite, error) {
	name := sp.Config.Name
	v, err := store.EncodeRecord(sp)
	if err != nil {
		return poolWrite{}, err
	}
	rv, err := store.EncodeResources(sp.Resources)
	if err != nil {
		return poolWrite{}, fmt.Errorf("encoding the instances of pool %q: %w", name, err)
	}
	w := poolWrite{name: name, ops: []clientv3.Op{clientv3.OpPut(s.poolKey(name), string(v))},
		size: len(s.poolKey(name)) + len(v), hash: sha256.Sum256(rv)}
	if old, known := s.res.Get(name); !known || old != w.hash {
		w.isRes = true
		w.size += len(s.resKey(name)) + len(rv)
		if rv == nil {
			w.ops = append(w.ops, clientv3.OpDelete(s.resKey(name)))
		} else {
			w.ops = append(w.ops, clientv3.OpPut(s.resKey(name), string(rv)))
		}
	}
	for _, c := range sp.LiveChunks {
		v := ""
		if !c.Delete {
			cv, err := store.EncodeLiveChunk(c)
			if err != nil {
				return poolWrite{}, fmt.Errorf("encoding the live set of pool %q: %w", name, err)
			}
			v = string(cv)
		}
		w.addLive(s.liveKey(name, c.Index), v)
	}
	return w, nil
}

// addLiveBefore records a chunk change made before w's own: it is kept
// unless w changes the same chunk.
func (w *poolWrite) addLiveBefore(key, v string) {
	if _, ok := w.live[key]; !ok {
		w.addLive(key, v)
	}
}

// addLive records a chunk's put (v) or delete (v == "") in w; a later
// change of the same chunk replaces an earlier one.
func (w *poolWrite) addLive(key, v string) {
	if w.live == nil {
		w.live = map[string]string{}
	}
	if _, ok := w.live[key]; !ok {
		w.liveKeys = append(w.liveKeys, key)
	}
	w.live[key] = v
}

// liveOps returns the operations of w's live chunks: puts and deletes.
func (w *poolWrite) liveOps() (puts, dels []clientv3.Op, size int) {
	for _, k := range w.liveKeys {
		if v := w.live[k]; v == "" {
			dels = append(dels, clientv3.OpDelete(k))
		} else {
			puts = append(puts, clientv3.OpPut(k, v))
			size += len(k) + len(v)
		}
	}
	return puts, dels, size
}

// commit writes a batch of pool writes in as few fenced transactions as
// etcd's limits allow; each write gets the outcome of the transaction it
// went in. Of two writes of one pool, the later is written (one
// transaction may not put a key twice), and both get its outcome.
func (s *Store) commit(batch []poolWrite) []error {
	last := make(map[string]int, len(batch))
	for i, w := range batch {
		last[w.name] = i
	}
	errs := make([]error, len(batch))
	failed := false
	// Each write carries only the live chunks that changed since the one
	// before it: the write that goes in takes those of its pool's earlier
	// writes in the batch too. A pool with more chunks than fit beside
	// its record puts them first, in transactions of their own, so that
	// the record's live mark never covers a live lease whose chunk is not
	// written, and deletes them after (a chunk with no live lease may
	// stay a while).
	var after []clientv3.Op
	for i := range batch {
		w := &batch[i]
		if j := last[w.name]; j != i {
			for _, k := range w.liveKeys {
				batch[j].addLiveBefore(k, w.live[k])
			}
			continue
		}
		puts, dels, size := w.liveOps()
		if len(w.ops)+len(puts)+len(dels) > MaxTxnOps || w.size+size > MaxTxnBytes {
			for len(puts) > 0 && errs[i] == nil {
				n := min(len(puts), MaxTxnOps)
				if _, err := s.fencedTxn(fmt.Sprintf("writing the live set of pool %q", w.name), nil, puts[:n]...); err != nil {
					errs[i], failed = err, true
				}
				puts = puts[n:]
			}
			after = append(after, dels...)
			continue
		}
		w.ops = append(append(w.ops, puts...), dels...)
		w.size += size
	}
	var txn []int // indexes in batch
	ops, size := 0, 0
	flush := func() {
		if len(txn) == 0 {
			return
		}
		var all []clientv3.Op
		for _, i := range txn {
			all = append(all, batch[i].ops...)
		}
		what := fmt.Sprintf("writing pool %q", batch[txn[0]].name)
		if len(txn) > 1 {
			what = fmt.Sprintf("writing %d pools (%q and others)", len(txn), batch[txn[0]].name)
		}
		_, err := s.fencedTxn(what, nil, all...)
		for _, i := range txn {
			if err != nil {
				errs[i] = err
				failed = true
			} else if batch[i].isRes {
				s.res.Set(batch[i].name, batch[i].hash)
			}
		}
		txn, ops, size = txn[:0], 0, 0
	}
	for i, w := range batch {
		if last[w.name] != i || errs[i] != nil {
			continue
		}
		if ops+len(w.ops) > MaxTxnOps || size+w.size > MaxTxnBytes {
			flush()
		}
		txn = append(txn, i)
		ops += len(w.ops)
		size += w.size
	}
	flush()
	for len(after) > 0 && !failed {
		n := min(len(after), MaxTxnOps)
		if _, err := s.fencedTxn("deleting chunks of live sets", nil, after[:n]...); err != nil {
			break // chunks with no live lease in them: harmless where they stay
		}
		after = after[n:]
	}
	if !failed {
		return nil
	}
	for i, w := range batch {
		errs[i] = errs[last[w.name]]
	}
	return errs
}

// save writes sp alone, and only when no record of its name is there
// (seeding).
func (s *Store) save(sp limiter.SavedPool) error {
	w, err := s.poolWrite(sp)
	if err != nil {
		return err
	}
	ifs := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.poolKey(w.name)), "=", 0)}
	ok, err := s.fencedTxn(fmt.Sprintf("writing pool %q", w.name), ifs, w.ops...)
	if err != nil {
		return err
	}
	if ok && w.isRes {
		s.res.Set(w.name, w.hash)
	}
	return nil
}

// DeletePool removes the named pool and raises the stored token floor to
// tokenFloor, in one fenced transaction. It implements limiter.Persister.
func (s *Store) DeletePool(name string, tokenFloor uint64) error {
	floorKey := s.shardMetaKey("token_floor")
	for {
		cur, rev, err := s.tokenFloor()
		if err != nil {
			return err
		}
		ops := []clientv3.Op{clientv3.OpDelete(s.poolKey(name)), clientv3.OpDelete(s.resKey(name)),
			clientv3.OpDelete(s.livePrefix(name), clientv3.WithPrefix())}
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

// TokenFloor returns the highest fencing token any deleted pool of the
// shard may have issued (0 if none was ever deleted).
func (s *Store) TokenFloor() (uint64, error) {
	n, _, err := s.tokenFloor()
	return n, err
}

func (s *Store) tokenFloor() (floor uint64, modRev int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	resp, err := s.c.Get(ctx, s.shardMetaKey("token_floor"))
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

var _ limiter.LaterPersister = (*Store)(nil)
