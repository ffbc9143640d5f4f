package store

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
)

// BenchmarkAcquireReleasePersisted measures one Acquire plus one Release on
// an engine whose pool is durable in a real store (bbolt, fsync): the cost
// of the fencing token and lease horizon reservations, amortized over the
// grants they cover, with the next reservation written by the grant that
// needs it (sync) or ahead in the background (prereserve). Beside the mean
// it reports the slowest pair (max-ns) and the 99.9th percentile
// (p999-ns): a grant that waits for the disk shows there. Compare with
// limiter's BenchmarkAcquireRelease (pools=1/outstanding=0/serial), which
// has no Persister.
func BenchmarkAcquireReleasePersisted(b *testing.B) {
	for _, pace := range []time.Duration{0, 20 * time.Microsecond} {
		for _, pre := range []bool{false, true} {
			name := "sync"
			if pre {
				name = "prereserve"
			}
			if pace > 0 {
				name += "/paced-50k-per-s"
			}
			b.Run(name, func(b *testing.B) { benchPersisted(b, pre, pace) })
		}
	}
}

// benchPersisted runs the pairs back to back, or with pace, starting one
// every pace (a busy pool rather than a saturated one); slow-pairs counts
// the pairs that took over 200µs, that is, that waited for a disk write.
func benchPersisted(b *testing.B, preReserve bool, pace time.Duration) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := limiter.New(limiter.Options{Persister: s, PreReserve: preReserve})
	defer e.Close()
	if _, err := e.CreatePool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: limiter.MaxConcurrency, MaxLeaseTTL: time.Hour, DefaultLeaseTTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	lats := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	next := time.Now()
	slow := 0
	for i := 0; i < b.N; i++ {
		for pace > 0 && time.Now().Before(next) {
		}
		next = next.Add(pace)
		start := time.Now()
		l, err := e.Acquire(ctx, limiter.AcquireRequest{Pool: "db", Weight: 1, ClientID: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Release("db", l.FencingToken); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		if d > 200*time.Microsecond {
			slow++
		}
		lats = append(lats, d)
	}
	b.StopTimer()
	b.ReportMetric(float64(slow), "slow-pairs")
	slices.Sort(lats)
	b.ReportMetric(float64(lats[len(lats)-1]), "max-ns")
	b.ReportMetric(float64(lats[len(lats)*999/1000]), "p999-ns")
}

// BenchmarkSavePool measures one durable write (a bbolt commit with
// fsync): what a pool change, or a reservation, costs when it happens.
func BenchmarkSavePool(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sp, err := limiter.NewSavedPool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 10}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		sp.State.TokenCeiling++
		if err := s.SavePool(sp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeLiveChunk encodes a chunk of a pool's live set with a
// few live leases, as churn around long-lived leases leaves it: the CPU of
// each chunk a background write carries.
func BenchmarkEncodeLiveChunk(b *testing.B) {
	c := limiter.LiveChunk{Index: 7}
	c.Bits[3], c.Bits[40] = 1<<9, 1<<33
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeLiveChunk(c); err != nil {
			b.Fatal(err)
		}
	}
}

// churnPersister counts what an engine's writes would store: the record
// and the chunks of the live set, encoded as a store encodes them.
type churnPersister struct {
	mu            sync.Mutex
	writes, bytes int
}

func (c *churnPersister) SavePool(sp limiter.SavedPool) error {
	v, err := encode(sp)
	if err != nil {
		return err
	}
	n := len(v)
	for _, ch := range sp.LiveChunks {
		if ch.Delete {
			n += 8 // the key
			continue
		}
		cv, err := EncodeLiveChunk(ch)
		if err != nil {
			return err
		}
		n += 8 + len(cv)
	}
	c.mu.Lock()
	c.writes++
	c.bytes += n
	c.mu.Unlock()
	return nil
}

func (c *churnPersister) DeletePool(string, uint64) error { return nil }

// BenchmarkChurnWrites measures the background writes of a pool under
// churn: 1,000 acquire/release pairs a second (one per millisecond of the
// engine's fake clock, with 60 s leases) beside 50 long-lived leases. It
// reports the writes per 1,000 pairs and the bytes a write carries
// (record and live set).
func BenchmarkChurnWrites(b *testing.B) {
	clk := fakeclock.New(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC))
	cp := &churnPersister{}
	e := limiter.New(limiter.Options{Clock: clk, Persister: cp})
	defer e.Close()
	if _, err := e.CreatePool(limiter.PoolConfig{Name: "busy", ConcurrencyLimit: 1000, MaxLeaseTTL: time.Minute}); err != nil {
		b.Fatal(err)
	}
	acquire := func() limiter.Lease {
		l, err := e.Acquire(context.Background(), limiter.AcquireRequest{Pool: "busy", Weight: 1, TTL: time.Minute, NoWait: true})
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	for i := range 50 * 400 { // 50 long-lived leases among the first 20,000 tokens
		l := acquire()
		if i%400 != 0 {
			_, _ = e.Release("busy", l.FencingToken)
		}
		clk.Advance(time.Millisecond)
	}
	cp.mu.Lock()
	cp.writes, cp.bytes = 0, 0
	cp.mu.Unlock()
	b.ResetTimer()
	for range b.N {
		l := acquire()
		if _, err := e.Release("busy", l.FencingToken); err != nil {
			b.Fatal(err)
		}
		clk.Advance(time.Millisecond)
	}
	b.StopTimer()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	b.ReportMetric(float64(cp.writes)*1000/float64(b.N), "writes/1k-pairs")
	if cp.writes > 0 {
		b.ReportMetric(float64(cp.bytes)/float64(cp.writes), "bytes/write")
	}
}
