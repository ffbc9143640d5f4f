package limiter

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAcquireRelease measures one Acquire plus one Release on the
// engine with the system clock: serially and in parallel (GOMAXPROCS
// goroutines), over 1, 100 and 10,000 pools, with and without 100,000
// other leases outstanding across those pools.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, pools := range []int{1, 100, 10_000} {
		for _, outstanding := range []int{0, 100_000} {
			for _, parallel := range []bool{false, true} {
				mode := "serial"
				if parallel {
					mode = "parallel"
				}
				name := fmt.Sprintf("pools=%d/outstanding=%d/%s", pools, outstanding, mode)
				b.Run(name, func(b *testing.B) { benchAcquireRelease(b, pools, outstanding, parallel) })
			}
		}
	}
}

func benchAcquireRelease(b *testing.B, pools, outstanding int, parallel bool) {
	e := New(Options{})
	defer e.Close()
	names := make([]string, pools)
	for i := range names {
		names[i] = fmt.Sprintf("pool-%05d", i)
		if _, err := e.CreatePool(PoolConfig{Name: names[i], ConcurrencyLimit: MaxConcurrency, MaxLeaseTTL: time.Hour, DefaultLeaseTTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	for i := 0; i < outstanding; i++ {
		if _, err := e.Acquire(ctx, AcquireRequest{Pool: names[i%pools], Weight: 1}); err != nil {
			b.Fatal(err)
		}
	}
	pair := func(pool string) {
		l, err := e.Acquire(ctx, AcquireRequest{Pool: pool, Weight: 1, ClientID: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Release(pool, l.FencingToken); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if !parallel {
		for i := 0; i < b.N; i++ {
			pair(names[i%pools])
		}
		return
	}
	var next atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919)) // spread goroutines over different pools
		for pb.Next() {
			pair(names[i%pools])
			i++
		}
	})
}

// BenchmarkAcquireWaitHandoff measures a lease handed from a releasing
// holder to a queued waiter in a pool of one permit: the slow path.
func BenchmarkAcquireWaitHandoff(b *testing.B) {
	e := New(Options{})
	defer e.Close()
	if _, err := e.CreatePool(PoolConfig{Name: "one", ConcurrencyLimit: 1}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := e.Acquire(ctx, AcquireRequest{Pool: "one", Weight: 1})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := e.Release("one", l.FencingToken); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTake measures an exact token take that is granted at once.
func BenchmarkTake(b *testing.B) {
	e := New(Options{})
	defer e.Close()
	if _, err := e.CreatePool(PoolConfig{Name: "api", Rate: MaxRate, Burst: MaxConcurrency}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := e.Take(ctx, "api", 1, 0); err != nil {
			b.Fatal(err)
		}
	}
}
