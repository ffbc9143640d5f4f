package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// fakeStore is a durableStore in memory, whose reads fail on demand.
type fakeStore struct {
	mu                sync.Mutex
	pools             map[string]limiter.SavedPool
	started           bool // LoadOrSeed ran before: the seed is not written again
	floor             uint64
	loadErr, fenceErr error
}

func newFakeStore() *fakeStore { return &fakeStore{pools: map[string]limiter.SavedPool{}} }

func (s *fakeStore) SavePool(sp limiter.SavedPool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pools[sp.Config.Name] = sp
	return nil
}

func (s *fakeStore) DeletePool(name string, floor uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pools, name)
	s.floor = max(s.floor, floor)
	return nil
}

func (s *fakeStore) LoadOrSeed(seed []limiter.SavedPool) ([]limiter.SavedPool, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loadErr != nil {
		return nil, false, s.loadErr
	}
	seeded := !s.started
	if seeded {
		for _, sp := range seed {
			s.pools[sp.Config.Name] = sp
		}
		s.started = true
	}
	out := make([]limiter.SavedPool, 0, len(s.pools))
	for _, sp := range s.pools {
		out = append(out, sp)
	}
	return out, seeded, nil
}

func (s *fakeStore) TokenFloor() (uint64, error) { return s.floor, s.fenceErr }
func (s *fakeStore) LeaseIDKey() ([]byte, error) { return []byte("key"), nil }
func (s *fakeStore) Path() string                { return "fake:store" }
func (s *fakeStore) Close() error                { return nil }

// restoreInto restores a new engine on a fake clock from st, and returns
// it and the server's log.
func restoreInto(t *testing.T, st *fakeStore, seed ...limiter.PoolConfig) (*limiter.Engine, string, error) {
	t.Helper()
	var log bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&log, nil))}
	eng := limiter.New(limiter.Options{Clock: fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), Persister: st})
	t.Cleanup(eng.Close)
	err := s.restore(eng, st, seed, "data_dir", "/fake")
	return eng, log.String(), err
}

func TestRestoreSeedsTheFirstStartOnly(t *testing.T) {
	st := newFakeStore()
	eng, log, err := restoreInto(t, st, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.GetPool("db"); err != nil || st.pools["db"].Config.Name != "db" || !strings.Contains(log, "first start") {
		t.Fatalf("first start: pool %v, stored %v, log %q", err, st.pools, log)
	}

	// A later start with another pools file: the store wins, and says so.
	eng, log, err = restoreInto(t, st, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 5}, limiter.PoolConfig{Name: "new", ConcurrencyLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	info, err := eng.GetPool("db")
	if err != nil || info.Config.ConcurrencyLimit != 2 {
		t.Fatalf("restored db %+v, %v; want the stored limit 2", info.Config, err)
	}
	if _, err := eng.GetPool("new"); !errors.Is(err, apierr.ErrPoolNotFound) {
		t.Fatalf("a pool only in the pools file was created on a later start: %v", err)
	}
	if !strings.Contains(log, "the pools file differs from the store") || !strings.Contains(log, "new") {
		t.Fatalf("no warning naming the differences: %q", log)
	}
}

func TestRestoreRaisesTheTokenFloor(t *testing.T) {
	st := newFakeStore()
	st.started, st.floor = true, 1000
	eng, _, err := restoreInto(t, st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreatePool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1}); err != nil {
		t.Fatal(err)
	}
	l, err := eng.Acquire(context.Background(), limiter.AcquireRequest{Pool: "db", Weight: 1})
	if err != nil || l.FencingToken <= 1000 {
		t.Fatalf("first lease after the restart: token %d, %v; want above the deleted pools' floor 1000", l.FencingToken, err)
	}
}

func TestRestoreFailsWithTheStore(t *testing.T) {
	boom := errors.New("disk on fire")
	for name, st := range map[string]*fakeStore{
		"load":  {pools: map[string]limiter.SavedPool{}, loadErr: boom},
		"floor": {pools: map[string]limiter.SavedPool{}, fenceErr: boom},
	} {
		if _, _, err := restoreInto(t, st); !errors.Is(err, boom) {
			t.Errorf("%s failing: restore returned %v", name, err)
		}
	}
	st := newFakeStore()
	st.started = true
	st.pools["bad"] = limiter.SavedPool{Config: limiter.PoolConfig{Name: "bad name"}}
	if _, _, err := restoreInto(t, st); err == nil || !strings.Contains(err.Error(), "fake:store") || !strings.Contains(err.Error(), `"bad name"`) {
		t.Fatalf("restoring an invalid stored pool: %v; want an error naming the store and the pool", err)
	}
	if _, _, err := restoreInto(t, newFakeStore(), limiter.PoolConfig{Name: "db", ConcurrencyLimit: -1}); err == nil || !strings.Contains(err.Error(), "pools file") {
		t.Fatalf("an invalid pools file: %v", err)
	}
}
