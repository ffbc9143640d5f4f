package envoyrls_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate/tollgate/internal/envoyrls"
	"github.com/tollgate/tollgate/limiter"
)

// BenchmarkShouldRateLimit: one descriptor per call, without gRPC, against
// a per-value rule (1,000 addresses in turn) and a fixed-value rule (the
// pool's own bucket).
func BenchmarkShouldRateLimit(b *testing.B) {
	eng := limiter.New(limiter.Options{})
	defer eng.Close()
	for _, c := range []limiter.PoolConfig{
		{Name: "per-ip", Rate: 1e6, Burst: 1e6, Envoy: limiter.EnvoyRule{Domain: "edge", Descriptors: []limiter.EnvoyDescriptorKey{{Key: "remote_address"}}}},
		{Name: "login", Rate: 1e6, Burst: 1e6, Envoy: limiter.EnvoyRule{Domain: "edge", Descriptors: []limiter.EnvoyDescriptorKey{{Key: "path", Value: "/login"}}}},
	} {
		if _, err := eng.CreatePool(c); err != nil {
			b.Fatal(err)
		}
	}
	svc := envoyrls.New(eng, envoyrls.Options{})
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
// less the live heap before, over the number of buckets.
func BenchmarkBucketMemory(b *testing.B) {
	const n = 50_000
	ctx := context.Background()
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255))}}
	}
	var perBucket float64
	for b.Loop() {
		eng := limiter.New(limiter.Options{})
		if _, err := eng.CreatePool(limiter.PoolConfig{Name: "per-ip", Rate: 1, Burst: 10,
			Envoy: limiter.EnvoyRule{Domain: "edge", Descriptors: []limiter.EnvoyDescriptorKey{{Key: "remote_address"}}, MaxBuckets: n}}); err != nil {
			b.Fatal(err)
		}
		svc := envoyrls.New(eng, envoyrls.Options{})
		if _, err := svc.ShouldRateLimit(ctx, reqs[0]); err != nil {
			b.Fatal(err)
		}
		before := liveHeap()
		for _, r := range reqs[1:] {
			if _, err := svc.ShouldRateLimit(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
		perBucket = float64(liveHeap()-before) / (n - 1)
		runtime.KeepAlive(svc)
		eng.Close()
	}
	b.ReportMetric(perBucket, "B/bucket")
}

// liveHeap returns the bytes of live heap objects after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
