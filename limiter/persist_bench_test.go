package limiter

import (
	"context"
	"testing"
	"time"
)

// BenchmarkAcquireReleasePersist measures one Acquire plus one Release in
// a pool with a concurrency limit whose engine has a Persister that writes
// ahead (Options.PreReserve), as a server with a data directory runs it:
// the reservation check on every grant, the background writes ahead, the
// live set's writes of the releases, and the held-weight bound.
func BenchmarkAcquireReleasePersist(b *testing.B) {
	e := New(Options{Persister: newMemPersister(), PreReserve: true})
	defer e.Close()
	if _, err := e.CreatePool(PoolConfig{Name: "p", ConcurrencyLimit: 64, MaxLeaseTTL: time.Hour, DefaultLeaseTTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := e.Acquire(ctx, AcquireRequest{Pool: "p", Weight: 1, ClientID: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Release("p", l.FencingToken); err != nil {
			b.Fatal(err)
		}
	}
}
