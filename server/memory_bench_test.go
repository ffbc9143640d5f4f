package server

import (
	"context"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// Sizes of BenchmarkSessionMemory.
const (
	memLeases  = 100_000
	memWaiters = 10_000
)

// BenchmarkSessionMemory measures what the server keeps for each lease
// held and each acquire waiting, acquired over Session streams on
// loopback: memLeases leases, then memWaiters waiters (on streams of 1,000
// each, within MaxSessionPending). It reports the growth of the live heap
// plus goroutine stacks, after a GC, per lease (B/lease) and per waiter
// (B/waiter), and the growth of the process's RSS likewise. The client
// reads and drops the answers, so what grows is the server's. Run it once:
// -benchtime 1x.
func BenchmarkSessionMemory(b *testing.B) {
	srv := New(Config{Limits: limits.Limits{ClientRate: -1, MaxClientLeases: -1, MaxWaiters: -1, MaxClientSessions: -1}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeGRPC(ctx, srv.GRPCServer(), lis) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	for _, p := range []limiter.PoolConfig{{Name: "held", ConcurrencyLimit: memLeases}, {Name: "full", ConcurrencyLimit: 1, MaxWaiters: 2 * memWaiters}} {
		if _, err := srv.Engine().CreatePool(p); err != nil {
			b.Fatal(err)
		}
	}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	lim := tollgatev1.NewLimiterServiceClient(conn)
	for b.Loop() {
		heap0, rss0 := memNow()
		acquireMany(b, lim, "held", memLeases, 1, 512)
		heap1, rss1 := memNow()
		acquireMany(b, lim, "full", 1, 1, 1)
		acquireMany(b, lim, "full", memWaiters, memWaiters/1000, 0)
		testwait.For(b, "every waiter to join the queue", func() bool { st, _ := srv.Engine().GetPool("full"); return st.Status.Waiting == memWaiters })
		heap2, rss2 := memNow()
		per := func(from, to uint64, n int) float64 { return (float64(to) - float64(from)) / float64(n) }
		b.ReportMetric(per(heap0, heap1, memLeases), "B/lease")
		b.ReportMetric(per(heap1, heap2, memWaiters), "B/waiter")
		b.ReportMetric(per(rss0, rss1, memLeases), "RSS-B/lease")
		b.ReportMetric(per(rss1, rss2, memWaiters), "RSS-B/waiter")
	}
}

// acquireMany sends n acquires on pool over streams Session streams, with
// at most window unanswered per stream (0: no limit, and do not wait for
// the answers). The streams stay open until the benchmark ends.
func acquireMany(b *testing.B, lim tollgatev1.LimiterServiceClient, pool string, n, streams, window int) {
	b.Helper()
	for s := range streams {
		stream, err := lim.Session(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		var answered atomic.Int64
		go func() {
			for {
				r, err := stream.Recv()
				if err != nil {
					return
				}
				if r.GetAcquire() == nil {
					b.Errorf("acquire answered %v", r)
				}
				answered.Add(1)
			}
		}()
		per := n / streams
		for i := range per {
			for window > 0 && int64(i)-answered.Load() >= int64(window) {
				runtime.Gosched()
			}
			id := uint64(s*per + i + 1)
			if err := stream.Send(acquireReq(id, &tollgatev1.AcquireRequest{Pool: pool, Ttl: dur(5 * time.Minute)})); err != nil {
				b.Fatal(err)
			}
		}
		if window > 0 {
			testwait.For(b, "every acquire of the round to be answered", func() bool { return answered.Load() == int64(per) })
		}
	}
}

// memNow returns, after a GC, the live heap plus goroutine stacks, and the
// process's resident set size (0 where /proc is missing).
func memNow() (heap, rss uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				rss = kb << 10
			}
		}
	}
	return ms.HeapAlloc + ms.StackInuse, rss
}

// memPools is the number of pools of BenchmarkPoolMemory.
const memPools = 10_000

// BenchmarkPoolMemory measures what the server keeps for each pool: the
// growth of the live heap plus goroutine stacks (after a GC) per pool
// created (B/idle-pool), and per pool again once each has served one
// Acquire and Release over unary calls on loopback (B/used-pool). Run it
// once: -benchtime 1x.
func BenchmarkPoolMemory(b *testing.B) {
	srv := New(Config{Limits: limits.Limits{ClientRate: -1, MaxClientLeases: -1, MaxPools: -1}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeGRPC(ctx, srv.GRPCServer(), lis) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	lim := tollgatev1.NewLimiterServiceClient(conn)
	for b.Loop() {
		heap0, _ := memNow()
		for i := range memPools {
			if _, err := srv.Engine().CreatePool(limiter.PoolConfig{Name: "p" + strconv.Itoa(i), ConcurrencyLimit: 100}); err != nil {
				b.Fatal(err)
			}
		}
		heap1, _ := memNow()
		for i := range memPools {
			pool := "p" + strconv.Itoa(i)
			resp, err := lim.Acquire(b.Context(), &tollgatev1.AcquireRequest{Pool: pool})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := lim.Release(b.Context(), &tollgatev1.ReleaseRequest{Pool: pool, LeaseId: resp.GetLease().GetId()}); err != nil {
				b.Fatal(err)
			}
		}
		heap2, _ := memNow()
		b.ReportMetric((float64(heap1)-float64(heap0))/memPools, "B/idle-pool")
		b.ReportMetric((float64(heap2)-float64(heap0))/memPools, "B/used-pool")
		for i := range memPools {
			if err := srv.Engine().DeletePool("p"+strconv.Itoa(i), true); err != nil {
				b.Fatal(err)
			}
		}
	}
}
