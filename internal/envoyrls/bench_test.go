package envoyrls_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"

	commonv3 "github.com/tollgate/tollgate/proto/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/tollgate/tollgate/proto/envoy/service/ratelimit/v3"

	"github.com/tollgate/tollgate/internal/envoyrls"
	"github.com/tollgate/tollgate/limiter"
)

// BenchmarkShouldRateLimit: one descriptor per call, without gRPC, against
// a per-value rule (1,000 addresses in turn), a per-value rule with a new
// value each call (past max_buckets), and a fixed-value rule (the pool's
// own bucket).
func BenchmarkShouldRateLimit(b *testing.B) {
	eng := limiter.New(limiter.Options{})
	defer eng.Close()
	for _, c := range []limiter.PoolConfig{
		{Name: "per-ip", Rate: 1e6, Burst: 1e6, Envoy: limiter.EnvoyRule{Domain: "edge", Descriptors: []limiter.EnvoyDescriptorKey{{Key: "remote_address"}}}},
		{Name: "login", Rate: 1e6, Burst: 1e6, Envoy: limiter.EnvoyRule{Domain: "edge", Descriptors: []limiter.EnvoyDescriptorKey{{Key: "path", Value: "/login"}}}},
		{Name: "flood", Rate: 1, Burst: 10, Envoy: limiter.EnvoyRule{Domain: "flood", Descriptors: []limiter.EnvoyDescriptorKey{{Key: "remote_address"}}, MaxBuckets: 10_000}},
	} {
		if _, err := eng.CreatePool(c); err != nil {
			b.Fatal(err)
		}
	}
	svc := envoyrls.New(envoyrls.One(eng), envoyrls.Options{})
	ips := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range ips {
		ips[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", fmt.Sprintf("10.0.%d.%d", i/256, i%256))}}
	}
	login := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("path", "/login")}}
	ctx := context.Background()
	b.Run("per-value", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := svc.ShouldRateLimit(ctx, ips[i%len(ips)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A new value each call, past max_buckets: the flood of issue 21.
	b.Run("new-values", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			req := &rlsv3.RateLimitRequest{Domain: "flood", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", strconv.Itoa(i))}}
			if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pool-bucket", func(b *testing.B) {
		for b.Loop() {
			if _, err := svc.ShouldRateLimit(ctx, login); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBucketMemory reports the heap one per-value bucket costs: the
// live heap after filling a pool's max_buckets with distinct addresses,
// less the live heap before, over the number of buckets (B/bucket); and
// the memory the runtime got from the OS meanwhile (B/bucket-sys), which
// includes the collector's headroom.
func BenchmarkBucketMemory(b *testing.B) {
	const n = 200_000
	ctx := context.Background()
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255))}}
	}
	var perBucket, perBucketSys float64
	for b.Loop() {
		eng := limiter.New(limiter.Options{})
		if _, err := eng.CreatePool(limiter.PoolConfig{Name: "per-ip", Rate: 1, Burst: 10,
			Envoy: limiter.EnvoyRule{Domain: "edge", Descriptors: []limiter.EnvoyDescriptorKey{{Key: "remote_address"}}, MaxBuckets: n}}); err != nil {
			b.Fatal(err)
		}
		svc := envoyrls.New(envoyrls.One(eng), envoyrls.Options{})
		if _, err := svc.ShouldRateLimit(ctx, reqs[0]); err != nil {
			b.Fatal(err)
		}
		before, beforeSys := liveHeap()
		for _, r := range reqs[1:] {
			if _, err := svc.ShouldRateLimit(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
		after, afterSys := liveHeap()
		perBucket, perBucketSys = float64(after-before)/(n-1), float64(afterSys-beforeSys)/(n-1)
		runtime.KeepAlive(svc)
		eng.Close()
	}
	b.ReportMetric(perBucket, "B/bucket")
	b.ReportMetric(perBucketSys, "B/bucket-sys")
}

// liveHeap returns the bytes of live heap objects after a collection, and
// the bytes the runtime holds from the OS.
func liveHeap() (live, sys int64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc), int64(m.Sys - m.HeapReleased)
}
