package limiter

import (
	"sync"
	"testing"
	"time"
)

// In a busy pool, leases that end while the ended leases are being written
// go in the next write, endedFlushDelay after it: one write per delay, not
// writes back to back.
func TestEndedWritesAreSpaced(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10})
	first := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute})
	second := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute})
	var mu sync.Mutex
	var written []int // the number of ended leases in each write
	var once sync.Once
	m.setFail(func(_, sp SavedPool, _ bool) error {
		mu.Lock()
		written = append(written, len(sp.State.Ended))
		mu.Unlock()
		// The second lease ends while the first one's write runs.
		once.Do(func() {
			if _, err := te.Release("db", second.FencingToken); err != nil {
				t.Error(err)
			}
		})
		return nil
	})
	writes := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), written...)
	}
	if _, err := te.Release("db", first.FencingToken); err != nil {
		t.Fatal(err)
	}
	te.clk.Advance(0)
	if got := writes(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("writes %v; want one, of the first ended lease", got)
	}
	te.clk.Advance(endedFlushDelay - time.Millisecond)
	if got := writes(); len(got) != 1 {
		t.Fatalf("writes %v before endedFlushDelay passed; want still one", got)
	}
	te.clk.Advance(time.Millisecond)
	if got := writes(); len(got) != 2 || got[1] != 2 {
		t.Fatalf("writes %v after endedFlushDelay; want a second, of both ended leases", got)
	}
}
