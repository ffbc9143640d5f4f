package limiter

import (
	"sync"
	"testing"
	"time"
)

// In a busy pool, leases that end while the live set is being written go
// in the next write, endedFlushDelay after it: one write per delay, not
// writes back to back.
func TestEndedWritesAreSpaced(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10})
	first := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute})
	second := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute})
	var mu sync.Mutex
	var written []int // the number of live leases in each write's chunks
	var once sync.Once
	m.setFail(func(_, sp SavedPool, _ bool) error {
		mu.Lock()
		n := 0
		for _, c := range sp.LiveChunks {
			n += c.Bits.count()
		}
		written = append(written, n)
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
		t.Fatalf("writes %v; want one, with only the second lease live", got)
	}
	te.clk.Advance(endedFlushDelay - time.Millisecond)
	if got := writes(); len(got) != 1 {
		t.Fatalf("writes %v before endedFlushDelay passed; want still one", got)
	}
	te.clk.Advance(time.Millisecond)
	if got := writes(); len(got) != 2 || got[1] != 0 {
		t.Fatalf("writes %v after endedFlushDelay; want a second, with no lease live", got)
	}
}
