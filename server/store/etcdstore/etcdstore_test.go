package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
)

const prefix = "/t/"

var now = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func client(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdtest.Start(t).Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// campaign puts a leader key and returns the options of its term.
func campaign(t *testing.T, c *clientv3.Client, key string) Options {
	t.Helper()
	resp, err := c.Put(context.Background(), key, "x")
	if err != nil {
		t.Fatal(err)
	}
	return Options{LeaderKey: key, LeaderRev: resp.Header.Revision}
}

func pool(t *testing.T, name string, limit int64) limiter.SavedPool {
	t.Helper()
	sp, err := limiter.NewSavedPool(limiter.PoolConfig{Name: name, ConcurrencyLimit: limit}, now)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func names(pools []limiter.SavedPool) map[string]int64 {
	m := map[string]int64{}
	for _, p := range pools {
		m[p.Config.Name] = p.Config.ConcurrencyLimit
	}
	return m
}

func isNotLeader(err error) bool {
	var le *apierr.Error
	return errors.As(err, &le) && le.Reason == apierr.ReasonNotLeader && le.Code == apierr.CodeUnavailable
}

func TestSeedOnceSaveLoadDelete(t *testing.T) {
	c := client(t)
	s := New(c, prefix, campaign(t, c, prefix+"election/a"))
	got, seeded, err := s.LoadOrSeed([]limiter.SavedPool{pool(t, "a", 1), pool(t, "b", 2)})
	if err != nil || !seeded || len(got) != 2 {
		t.Fatalf("first LoadOrSeed = %v, %v, %v", names(got), seeded, err)
	}
	if err := s.SavePool(pool(t, "a", 5)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePool("b", 4000); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePool("none", 10); err != nil { // lower floor: kept
		t.Fatal(err)
	}
	s2 := New(c, prefix, campaign(t, c, prefix+"election/b"))
	got, seeded, err = s2.LoadOrSeed([]limiter.SavedPool{pool(t, "c", 3)})
	if err != nil || seeded {
		t.Fatalf("second LoadOrSeed: seeded %v, err %v", seeded, err)
	}
	if m := names(got); len(m) != 1 || m["a"] != 5 {
		t.Fatalf("second LoadOrSeed = %v, want a=5 only", m)
	}
	if f, err := s2.TokenFloor(); err != nil || f != 4000 {
		t.Fatalf("TokenFloor = %d, %v; want 4000", f, err)
	}
}

// A write of a deposed leader changes nothing and answers NOT_LEADER.
func TestFencedWrite(t *testing.T) {
	c := client(t)
	leaderKey := prefix + "election/old"
	deposed, unsure := 0, 0
	opts := campaign(t, c, leaderKey)
	opts.Deposed = func() { deposed++ }
	opts.Unsure = func() { unsure++ }
	old := New(c, prefix, opts)
	if err := old.SavePool(pool(t, "a", 1)); err != nil {
		t.Fatal(err)
	}
	// The old leader's session ends; a new leader writes.
	if _, err := c.Delete(context.Background(), leaderKey); err != nil {
		t.Fatal(err)
	}
	cur := New(c, prefix, campaign(t, c, prefix+"election/new"))
	if err := cur.SavePool(pool(t, "a", 2)); err != nil {
		t.Fatal(err)
	}
	// Even the same key again (a later campaign) is not the old term's.
	campaign(t, c, leaderKey)
	for _, err := range []error{old.SavePool(pool(t, "a", 9)), old.SavePool(pool(t, "z", 9)), old.DeletePool("a", 99)} {
		if !isNotLeader(err) {
			t.Fatalf("deposed leader's write: %v, want NOT_LEADER", err)
		}
	}
	if deposed != 1 || unsure != 0 {
		t.Fatalf("Deposed called %d times, want 1; Unsure %d times, want 0 (a fenced-out write has a known outcome)", deposed, unsure)
	}
	got, _, err := cur.load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m := names(got); len(m) != 1 || m["a"] != 2 {
		t.Fatalf("after the deposed writes: %v, want a=2 only", m)
	}
	if f, _ := cur.TokenFloor(); f != 0 {
		t.Fatalf("token floor %d after a deposed delete", f)
	}

	// Past the deadline nothing is even sent.
	opts = campaign(t, c, prefix+"election/late")
	opts.Leading = func() bool { return false }
	if err := New(c, prefix, opts).SavePool(pool(t, "late", 1)); !isNotLeader(err) {
		t.Fatalf("write past the deadline: %v", err)
	}
}

func TestLeaseIDKeyShared(t *testing.T) {
	c := client(t)
	a, err := New(c, prefix, Options{}).LeaseIDKey()
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(c, prefix, Options{}).LeaseIDKey()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) || len(a) != 32 {
		t.Fatalf("two servers got different lease id keys (%x, %x)", a, b)
	}
}

func TestResources(t *testing.T) {
	c := client(t)
	s := New(c, prefix, campaign(t, c, prefix+"election/a"))
	if _, _, err := s.LoadOrSeed(nil); err != nil {
		t.Fatal(err)
	}
	sp, err := limiter.NewSavedPool(limiter.PoolConfig{Name: "gpu", ResourceKind: limiter.ResourceActive}, now)
	if err != nil {
		t.Fatal(err)
	}
	sp.Resources = []limiter.Resource{{ID: "g1", Attributes: map[string]string{"zone": "a"}}}
	if err := s.SavePool(sp); err != nil {
		t.Fatal(err)
	}
	got, _, err := New(c, prefix, campaign(t, c, prefix+"election/b")).LoadOrSeed(nil)
	if err != nil || len(got) != 1 || len(got[0].Resources) != 1 || got[0].Resources[0].Attributes["zone"] != "a" {
		t.Fatalf("loaded %+v, %v", got, err)
	}
}

// A pool's live set is stored as chunks beside its record: a write puts
// and deletes only the chunks it carries, more than one transaction holds
// go in several, a pool named like another's prefix keeps its own, and
// deleting the pool deletes them.
func TestLiveChunks(t *testing.T) {
	c := client(t)
	s := New(c, prefix, campaign(t, c, prefix+"election/live"))
	if _, _, err := s.LoadOrSeed(nil); err != nil {
		t.Fatal(err)
	}
	a, ab := pool(t, "a", 5), pool(t, "a/b", 5)
	for i := range uint64(3 * MaxTxnOps) {
		ch := limiter.LiveChunk{Index: i}
		ch.Bits[0] = 1 << (i % 64)
		a.LiveChunks = append(a.LiveChunks, ch)
	}
	ab.LiveChunks = []limiter.LiveChunk{{Index: 7, Bits: limiter.LiveBits{3}}}
	for _, sp := range []limiter.SavedPool{a, ab} {
		if err := s.SavePool(sp); err != nil {
			t.Fatal(err)
		}
	}
	a.LiveChunks = nil
	for i := range uint64(2*MaxTxnOps + 5) { // deletes, beyond one transaction too
		a.LiveChunks = append(a.LiveChunks, limiter.LiveChunk{Index: i, Delete: true})
	}
	if err := s.SavePool(a); err != nil {
		t.Fatal(err)
	}
	chunks := func() map[string]int {
		pools, _, err := New(c, prefix, Options{}).load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, p := range pools {
			m[p.Config.Name] = len(p.LiveChunks)
		}
		return m
	}
	if got := chunks(); got["a"] != MaxTxnOps-5 || got["a/b"] != 1 {
		t.Fatalf("chunks after the writes: %v; want a %d, a/b 1", got, MaxTxnOps-5)
	}
	if err := s.DeletePool("a", 10); err != nil {
		t.Fatal(err)
	}
	if got := chunks(); got["a"] != 0 || got["a/b"] != 1 {
		t.Fatalf("chunks after deleting a: %v", got)
	}
}

// TestBatchSplitsAtEtcdLimits: a batch of more pool writes than one etcd
// transaction may carry (each here two operations: an active pool's
// record and instances) commits in several fenced transactions, every
// write durable; and a deposed term's batch fails every write with
// NOT_LEADER.
func TestBatchSplitsAtEtcdLimits(t *testing.T) {
	c := client(t)
	opts := campaign(t, c, "/leader/a")
	s := New(c, prefix, opts)
	var batch []poolWrite
	for i := range 3 * MaxTxnOps {
		sp := pool(t, fmt.Sprintf("p%03d", i), 2)
		sp.Config.ResourceKind = limiter.ResourceActive
		sp.Resources = []limiter.Resource{{ID: "r1"}}
		w, err := s.poolWrite(sp)
		if err != nil {
			t.Fatal(err)
		}
		if len(w.ops) != 2 {
			t.Fatalf("a new active pool's write is %d operations, want 2", len(w.ops))
		}
		batch = append(batch, w)
	}
	if errs := s.commit(batch); errs != nil {
		t.Fatalf("committing %d pools: %v", len(batch), errs)
	}
	got, _, err := New(c, prefix, opts).load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(batch) || len(got[0].Resources) != 1 {
		t.Fatalf("%d pools loaded, want %d", len(got), len(batch))
	}

	if _, err := c.Delete(context.Background(), "/leader/a"); err != nil {
		t.Fatal(err)
	}
	errs := s.commit(batch[:3])
	if len(errs) != 3 {
		t.Fatalf("a deposed term's batch: %v", errs)
	}
	for _, err := range errs {
		if !isNotLeader(err) {
			t.Fatalf("a deposed term's write: %v, want NOT_LEADER", err)
		}
	}
}

// A write sent to etcd that gets no answer may have been committed: it
// fails OUTCOME_UNKNOWN, never NOT_LEADER or a storage failure that says
// nothing changed, and the store tells its term (Unsure).
func TestWriteWithoutAnswerIsOutcomeUnknown(t *testing.T) {
	etcd := etcdtest.Start(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	opts := campaign(t, c, prefix+"election/a")
	opts.Timeout = 300 * time.Millisecond
	unsure := 0
	opts.Unsure = func() { unsure++ }
	st := New(c, prefix, opts)
	etcd.Stop()
	err = st.SavePool(pool(t, "a", 1))
	if unsure != 1 {
		t.Fatalf("Unsure called %d times after a write without an answer; want once (the term must not go on from its memory)", unsure)
	}
	var le *apierr.Error
	if !errors.As(err, &le) || le.Reason != apierr.ReasonOutcomeUnknown || le.Code != apierr.CodeUnavailable {
		t.Fatalf("a write etcd did not answer: %v; want UNAVAILABLE (OUTCOME_UNKNOWN)", err)
	}
}

// In a cluster of several shards, a term's store seeds and loads the
// pools of its shard only (their instances and live sets too), and keeps
// its own seeding mark and token floor.
func TestShardsSeedAndLoadTheirOwnPools(t *testing.T) {
	c := client(t)
	const shards = 4
	var seed []limiter.SavedPool
	for i := range 20 {
		seed = append(seed, pool(t, fmt.Sprintf("p%d", i), int64(i+1)))
	}
	stores := make([]*Store, shards)
	all := map[string]int64{}
	for i := range shards {
		opts := campaign(t, c, fmt.Sprintf("%sshards/%d/a", prefix, i))
		opts.Shard, opts.Shards = i, shards
		stores[i] = New(c, prefix, opts)
		got, seeded, err := stores[i].LoadOrSeed(seed)
		if err != nil || !seeded {
			t.Fatalf("shard %d: seeded %v, %v", i, seeded, err)
		}
		for _, sp := range got {
			if s := shard.Of(sp.Config.Name, shards); s != i {
				t.Fatalf("shard %d seeded pool %q of shard %d", i, sp.Config.Name, s)
			}
			all[sp.Config.Name] = sp.Config.ConcurrencyLimit
		}
		if resp, err := c.Get(context.Background(), fmt.Sprintf("%smeta/initialized@%d", prefix, i)); err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("shard %d's seeding mark: %v, %v", i, resp, err)
		}
	}
	if len(all) != len(seed) {
		t.Fatalf("the shards seeded %d pools of %d", len(all), len(seed))
	}
	if resp, err := c.Get(context.Background(), prefix+"meta/initialized"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the one-shard seeding mark was written: %v, %v", resp, err)
	}

	// A live set and instances of a pool of shard k are loaded by k only.
	sp := seed[0]
	k := shard.Of(sp.Config.Name, shards)
	sp.LiveChunks = []limiter.LiveChunk{{Index: 0, Bits: limiter.LiveBits{1}}}
	if err := stores[k].SavePool(sp); err != nil {
		t.Fatal(err)
	}
	gone := ""
	for _, p := range seed[1:] {
		if shard.Of(p.Config.Name, shards) == k {
			gone = p.Config.Name
			break
		}
	}
	if err := stores[k].DeletePool(gone, 99); err != nil {
		t.Fatal(err)
	}
	for i := range shards {
		got, seeded, err := stores[i].LoadOrSeed(seed)
		if err != nil || seeded {
			t.Fatalf("shard %d loaded again: seeded %v, %v", i, seeded, err)
		}
		for _, p := range got {
			if shard.Of(p.Config.Name, shards) != i {
				t.Fatalf("shard %d loaded pool %q of another shard", i, p.Config.Name)
			}
			if p.Config.Name == gone {
				t.Fatalf("shard %d loaded the deleted pool %q", i, gone)
			}
			if p.Config.Name == sp.Config.Name && len(p.LiveChunks) != 1 {
				t.Fatalf("shard %d loaded %q without its live set", i, p.Config.Name)
			}
		}
		floor, err := stores[i].TokenFloor()
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]uint64{true: 99, false: 0}[i == k]; floor != want {
			t.Fatalf("shard %d's token floor is %d; want %d (the delete was in shard %d)", i, floor, want, k)
		}
	}
}
