package etcdstore

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/limiter"
)

// BenchmarkAcquireReleaseEtcd is server/store's
// BenchmarkAcquireReleasePersisted with the pool durable in etcd (an
// embedded member, on this machine's disk) through fenced transactions:
// the cost of a cluster's leader on the grant path, with the reservations
// written by the grant that needs them (sync) or ahead in the background
// (prereserve). max-ns is the slowest pair.
func BenchmarkAcquireReleaseEtcd(b *testing.B) {
	for _, pre := range []bool{false, true} {
		name := "sync"
		if pre {
			name = "prereserve"
		}
		b.Run(name, func(b *testing.B) { benchEtcd(b, pre) })
	}
}

func benchEtcd(b *testing.B, preReserve bool) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdtest.Start(b).Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Put(context.Background(), prefix+"election/bench", "x")
	if err != nil {
		b.Fatal(err)
	}
	s := New(c, prefix, Options{LeaderKey: prefix + "election/bench", LeaderRev: resp.Header.Revision})
	e := limiter.New(limiter.Options{Persister: s, PreReserve: preReserve})
	defer e.Close()
	if _, err := e.CreatePool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: limiter.MaxConcurrency, MaxLeaseTTL: time.Hour, DefaultLeaseTTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var slowest time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		l, err := e.Acquire(ctx, limiter.AcquireRequest{Pool: "db", Weight: 1})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Release("db", l.FencingToken); err != nil {
			b.Fatal(err)
		}
		slowest = max(slowest, time.Since(start))
	}
	b.ReportMetric(float64(slowest.Nanoseconds()), "max-ns")
}
