package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
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
