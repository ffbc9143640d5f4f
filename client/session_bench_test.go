package client_test

import (
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// BenchmarkStreamPairs measures Acquire + ReleaseAsync of one permit on the
// Client's Session stream, where the server decides every permit, with 1
// and 16 callers (client and server in this process, over loopback);
// tollgate bench compares the same against a Redis semaphore with the
// server in a process of its own.
func BenchmarkStreamPairs(b *testing.B) {
	for _, callers := range []int{1, 16} {
		b.Run(map[int]string{1: "1", 16: "16"}[callers], func(b *testing.B) {
			ts := newBenchServer(b)
			ts.pool(limiter.PoolConfig{Name: "p", ConcurrencyLimit: limiter.MaxConcurrency})
			c := ts.dial()
			ctx := b.Context()
			b.ReportAllocs()
			b.SetParallelism((callers + 1) / 2) // × GOMAXPROCS goroutines (2 here)
			if callers == 1 {
				b.SetParallelism(1)
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l, err := c.Acquire(ctx, "p")
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.ReleaseAsync(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
		})
	}
}
