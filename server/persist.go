package server

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server/store"
)

// persistence is the server's data directory: nil store for a Server made
// by New (in memory), the open store for one made by Open. It is embedded
// in Server.
type persistence struct {
	store     durableStore
	storeOnce sync.Once
}

// durableStore is where a server keeps its pools: the data directory's
// store.Store, or etcd for a cluster's leader (etcdstore.Store).
type durableStore interface {
	limiter.Persister
	// LoadOrSeed returns every stored pool, writing seed first on the
	// first start only (then seeded is true).
	LoadOrSeed(seed []limiter.SavedPool) (pools []limiter.SavedPool, seeded bool, err error)
	// TokenFloor is the highest fencing token of any deleted pool.
	TokenFloor() (uint64, error)
	// LeaseIDKey is the key lease ids are signed with, kept across restarts.
	LeaseIDKey() ([]byte, error)
	// Path names the store in logs.
	Path() string
	Close() error
}

// Open returns a Server like New whose pools are durable in the data
// directory dir, which is created if it does not exist:
//   - CreatePool, UpdatePool and DeletePool are written (and fsync'ed)
//     before they are applied and answered; a failed write is answered
//     with UNAVAILABLE (STORAGE_FAILED) and changes nothing;
//   - every pool of the store is restored, continuing its fencing tokens
//     above any issued before, and in its recovery window while a lease
//     granted before the restart may still be live (see
//     limiter.Engine.RestorePool and docs/recovery.md);
//   - seed (the pools file) is written to the store only on its first
//     start; on later starts the store wins, and a seed that differs from
//     it is logged as a warning.
//
// Only one process may use dir at a time. The store is closed when the
// Server is (Close, or the end of Serve).
func Open(cfg Config, dir string, seed []limiter.PoolConfig) (*Server, error) {
	st, err := store.Open(dir)
	if err != nil {
		return nil, err
	}
	key, err := st.LeaseIDKey()
	if err != nil {
		st.Close()
		return nil, err
	}
	cfg.persister, cfg.leaseIDKey = st, key // ids stay valid across restarts
	s := New(cfg)
	s.store = st
	if err := s.restore(s.Engine(), st, seed, "dir", dir); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// maxRecoveringLogged is how many recovering pools restore logs one by
// one; the rest are counted.
const maxRecoveringLogged = 10

// restore loads eng (new, writing to st) with the pools of st, seeding it
// with seed on its first start: every pool in its recovery window while
// a lease from before may be live, its fencing tokens continuing above
// every earlier token. where names st in the logs (a key and value).
func (s *Server) restore(eng *limiter.Engine, st durableStore, seed []limiter.PoolConfig, where ...any) error {
	now := eng.Clock().Now()
	seedSaved := make([]limiter.SavedPool, 0, len(seed))
	for _, c := range seed {
		sp, err := limiter.NewSavedPool(c, now)
		if err != nil {
			return fmt.Errorf("pools file: pool %q: %w", c.Name, err)
		}
		seedSaved = append(seedSaved, sp)
	}
	pools, seeded, err := st.LoadOrSeed(seedSaved)
	if err != nil {
		return err
	}
	floor, err := st.TokenFloor()
	if err != nil {
		return err
	}
	eng.RaiseTokenFloor(floor) // pools created from now on start above every deleted pool's tokens
	sort.Slice(pools, func(i, j int) bool { return pools[i].Config.Name < pools[j].Config.Name })
	recovering := 0
	for _, sp := range pools {
		info, err := eng.RestorePool(sp)
		if err != nil {
			return fmt.Errorf("%s: restoring pool %q: %w", st.Path(), sp.Config.Name, err)
		}
		if until := info.Status.RecoveringUntil; !until.IsZero() {
			recovering++
			if recovering > maxRecoveringLogged {
				continue // counted in "loaded pools" below
			}
			s.log.Info("pool recovering from a restart: renewed leases from before it are re-adopted; new grants come at once from the capacity no old lease can hold, the rest wait until the window ends", "pool", sp.Config.Name, "until", until)
		}
	}
	switch {
	case seeded && len(seed) > 0:
		s.log.Info("first start: declared the pools of the pools file in the store", append([]any{"count", len(seed)}, where...)...)
	case !seeded && len(seed) > 0:
		if diff := seedDiff(seed, pools); diff != "" {
			s.log.Warn("the pools file differs from the store; the store wins (it holds every change acknowledged since the first start), so the file is ignored; change pools with tollgate pool create/update/delete", append(where, "differences", diff)...)
		}
	}
	s.log.Info("loaded pools", "count", len(pools), "recovering", recovering, "store", st.Path())
	return nil
}

// closeStore closes the data directory, once, after the engine is closed.
func (s *Server) closeStore() {
	s.storeOnce.Do(func() {
		if s.store == nil {
			return
		}
		if err := s.store.Close(); err != nil {
			s.log.Error("closing the store", "store", s.store.Path(), "err", err)
		}
	})
}

// seedDiff describes how the pools file differs from the stored pools, or
// returns "" if it does not.
func seedDiff(seed []limiter.PoolConfig, stored []limiter.SavedPool) string {
	have := make(map[string]limiter.PoolConfig, len(stored))
	for _, sp := range stored {
		have[sp.Config.Name] = sp.Config
	}
	var notStored, changed []string
	inFile := make(map[string]bool, len(seed))
	for _, c := range seed {
		inFile[c.Name] = true
		got, ok := have[c.Name]
		switch {
		case !ok:
			notStored = append(notStored, c.Name)
		case !got.Equal(c.WithDefaults()):
			changed = append(changed, c.Name)
		}
	}
	var notInFile []string
	for name := range have {
		if !inFile[name] {
			notInFile = append(notInFile, name)
		}
	}
	sort.Strings(notInFile)
	var parts []string
	if len(changed) > 0 {
		parts = append(parts, "declared differently in the store: "+strings.Join(changed, ", "))
	}
	if len(notStored) > 0 {
		parts = append(parts, "in the file but not in the store (deleted since, or added to the file later): "+strings.Join(notStored, ", "))
	}
	if len(notInFile) > 0 {
		parts = append(parts, "in the store but not in the file: "+strings.Join(notInFile, ", "))
	}
	return strings.Join(parts, "; ")
}

// closeEngine closes the engine, records which pools stopped holding
// nothing (they need no recovery window at the next start), and then
// closes the store.
func (s *Server) closeEngine() {
	if s.campaign != nil {
		s.campaign.Stop() // ends the term (handing off) and the campaign
		return
	}
	s.Engine().Close()
	s.Engine().RecordCleanStop()
	s.closeStore()
}
