package store

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server/store/internal/groupcommit"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)

func saved(name string, limit int64) limiter.SavedPool {
	sp, err := limiter.NewSavedPool(limiter.PoolConfig{Name: name, ConcurrencyLimit: limit, Rate: 2.5, Description: "d " + name}, t0)
	if err != nil {
		panic(err)
	}
	return sp
}

func mustOpen(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func load(t *testing.T, s *Store) map[string]limiter.SavedPool {
	t.Helper()
	pools, seeded, err := s.LoadOrSeed(nil)
	if err != nil {
		t.Fatal(err)
	}
	if seeded {
		t.Fatal("seeded on a later start")
	}
	m := make(map[string]limiter.SavedPool, len(pools))
	for _, sp := range pools {
		m[sp.Config.Name] = sp
	}
	return m
}

// TestRoundTrip: what is saved comes back after a reopen, every field of
// it; deletions stick.
func TestRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "data")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.LoadOrSeed(nil); err != nil {
		t.Fatal(err)
	}
	a, b := saved("a", 3), saved("b", 4)
	a.State = limiter.DurableState{TokenCeiling: 4096, LeaseHorizon: t0.Add(time.Minute), TTLBound: 90 * time.Second, LiveMark: 70,
		Unsure: []limiter.TokenRange{{First: 20, Last: 30}}}
	live, gone := limiter.LiveChunk{Index: 0}, limiter.LiveChunk{Index: 2, Resized: []limiter.ResizedLease{{Token: 2*limiter.LiveChunkTokens + 1, Weight: 3}}}
	live.Bits[1] = 1 << 7 // token 71
	gone.Bits[0] = 2
	a.LiveChunks = []limiter.LiveChunk{live, gone}
	a.UpdateTime = t0.Add(time.Second)
	a.Config.OverloadMark, a.Config.NearFullMark, a.Config.LowUtilisationMark, a.Config.LowUtilisationPeriod = 7, limiter.MarkOff, 0.25, time.Hour
	for _, sp := range []limiter.SavedPool{a, b} {
		if err := s.SavePool(sp); err != nil {
			t.Fatal(err)
		}
	}
	a.LiveChunks = []limiter.LiveChunk{{Index: 2, Delete: true}} // only what changed
	if err := s.SavePool(a); err != nil {
		t.Fatal(err)
	}
	a.LiveChunks = []limiter.LiveChunk{live}
	if err := s.DeletePool("b", 70); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePool("never-there", 12); err != nil { // a lower floor does not lower it
		t.Fatalf("deleting a missing pool: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, FileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("store file: %v, %v", fi, err)
	}

	reopened := mustOpen(t, dir)
	if floor, err := reopened.TokenFloor(); err != nil || floor != 70 {
		t.Fatalf("token floor after reopen = %d, %v; want 70", floor, err)
	}
	got := load(t, reopened)
	if len(got) != 1 {
		t.Fatalf("pools after reopen: %+v", got)
	}
	if !reflect.DeepEqual(got["a"], a) {
		t.Fatalf("pool a came back as\n%+v\nwant\n%+v", got["a"], a)
	}
}

// TestSeedOnlyOnFirstStart: the seed is written on the first start only,
// and not again even once every pool was deleted.
func TestSeedOnlyOnFirstStart(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	seed := []limiter.SavedPool{saved("a", 1), saved("b", 2)}
	pools, seeded, err := s.LoadOrSeed(seed)
	if err != nil || !seeded || len(pools) != 2 {
		t.Fatalf("first start: %v, %v, %v", pools, seeded, err)
	}
	for _, name := range []string{"a", "b"} {
		if err := s.DeletePool(name, 0); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	s = mustOpen(t, dir)
	pools, seeded, err = s.LoadOrSeed(seed)
	if err != nil || seeded || len(pools) != 0 {
		t.Fatalf("second start: %v, %v, %v; want the empty store, not the seed", pools, seeded, err)
	}
}

// TestOpenErrors: a data directory in use, a file of another format, a
// damaged record, no directory, and writes after Close.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "in use by another tollgate server") {
		t.Fatalf("second Open of a directory in use: %v", err)
	}
	if err := s.SavePool(saved("a", 1)); err != nil {
		t.Fatal(err)
	}
	// Damage the record and the format by hand.
	err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(poolsBucket).Put([]byte("a"), []byte("{not json"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.LoadOrSeed(nil); err != nil {
		t.Fatal(err) // first start: seeds (nothing), does not read
	}
	if _, _, err := s.LoadOrSeed(nil); err == nil || !strings.Contains(err.Error(), `pool "a" is damaged`) {
		t.Fatalf("loading a damaged record: %v", err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(metaBucket).Put(formatKey, []byte("99")) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.SavePool(saved("b", 1)); err == nil {
		t.Fatal("SavePool after Close succeeded")
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), `format "99"`) {
		t.Fatalf("opening a file of another format: %v", err)
	}
	if _, err := Open(""); err == nil {
		t.Fatal("Open with no directory succeeded")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(file); err == nil || !strings.Contains(err.Error(), "data directory") {
		t.Fatalf("Open of a file as a directory: %v", err)
	}
}

// TestPoolsShareATransaction: a background write waits for a write a
// caller waits for, and both go in one transaction (one fsync); both are
// there after a reopen.
func TestPoolsShareATransaction(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	if _, _, err := s.LoadOrSeed(nil); err != nil {
		t.Fatal(err)
	}
	s.writes = groupcommit.New(s.commit, MaxBatch, time.Hour) // the background write waits for the other
	done := make(chan error)
	go func() { done <- s.SavePoolLater(saved("a", 1)) }()
	testwait.For(t, "the background write to queue", func() bool { return s.writes.Queued() > 0 })
	if err := s.SavePool(saved("b", 2)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := s.writes.Batches(); n != 1 {
		t.Fatalf("%d transactions for two pools' writes, want 1", n)
	}
	s.Close()
	got := load(t, mustOpen(t, dir))
	if len(got) != 2 || got["a"].Config.ConcurrencyLimit != 1 || got["b"].Config.ConcurrencyLimit != 2 {
		t.Fatalf("after a reopen: %+v", got)
	}
}

// TestFailedTransactionFailsEachWrite: when the shared transaction fails,
// every write in it fails and none is on disk.
func TestFailedTransactionFailsEachWrite(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	s.Close()
	for _, err := range []error{s.SavePool(saved("a", 1)), s.SavePoolLater(saved("b", 1))} {
		if err == nil || !strings.Contains(err.Error(), "writing pool") {
			t.Fatalf("a write to a closed store: %v", err)
		}
	}
}

// Two writes of one pool in one transaction: the later's record wins, and
// the live set takes the chunks of both (each write carries only the
// chunks that changed since the one before it).
func TestOneTransactionKeepsEveryWritesLiveChunks(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	if _, _, err := s.LoadOrSeed(nil); err != nil {
		t.Fatal(err)
	}
	first, second := saved("a", 1), saved("a", 2)
	first.LiveChunks = []limiter.LiveChunk{{Index: 1, Bits: limiter.LiveBits{1}}}
	second.LiveChunks = []limiter.LiveChunk{{Index: 2, Bits: limiter.LiveBits{1}}}
	w1, err := newPoolWrite(first)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := newPoolWrite(second)
	if err != nil {
		t.Fatal(err)
	}
	if errs := s.commit([]poolWrite{w1, w2}); errs != nil {
		t.Fatal(errs)
	}
	s.Close()
	got := load(t, mustOpen(t, dir))["a"]
	if got.Config.ConcurrencyLimit != 2 || len(got.LiveChunks) != 2 {
		t.Fatalf("after a reopen: limit %d, chunks %+v; want the later record and both chunks", got.Config.ConcurrencyLimit, got.LiveChunks)
	}
}
