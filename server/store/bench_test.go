package store

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// BenchmarkAcquireReleasePersisted measures one Acquire plus one Release on
// an engine whose pool is durable in a real store (bbolt, fsync): the cost
// of the fencing token and lease horizon reservations, amortized over the
// grants they cover. Compare with limiter's BenchmarkAcquireRelease
// (pools=1/outstanding=0/serial), which has no Persister.
func BenchmarkAcquireReleasePersisted(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := limiter.New(limiter.Options{Persister: s})
	defer e.Close()
	if _, err := e.CreatePool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: limiter.MaxConcurrency, MaxLeaseTTL: time.Hour, DefaultLeaseTTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := e.Acquire(ctx, limiter.AcquireRequest{Pool: "db", Weight: 1, ClientID: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Release("db", l.FencingToken); err != nil {
			b.Fatal(err)
		}
	}
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
