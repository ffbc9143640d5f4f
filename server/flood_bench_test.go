package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// BenchmarkFlood measures, with the default limits and the real clock, a
// well-behaved client's acquire + release round trip (on its own
// connection, opened once the flood is in place, to its own pool) while
// another client of the same host floods one surface, and reports its
// p50 and p99 (honest-p50-ms, honest-p99-ms), its failed calls, and the
// server's goroutines and heap once the flood is in place. The figures of
// docs/operations.md's flood table come from
//
//	go test -run '^$' -bench BenchmarkFlood -benchtime 2000x ./server/
//
// Server, flood and honest client share one process and its CPUs.
func BenchmarkFlood(b *testing.B) {
	floods := []struct {
		name string
		run  func(b *testing.B, f *floodEnv, ctx context.Context)
	}{
		{"none", func(*testing.B, *floodEnv, context.Context) {}},
		{"http-keepalive-5000", func(b *testing.B, f *floodEnv, ctx context.Context) {
			for range 5_000 {
				c, err := net.Dial("tcp", f.httpAddr)
				if err != nil {
					return
				}
				f.closeLater(c)
				if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
					continue
				}
			}
		}},
		{"health-watch-10000-on-2-conns", func(b *testing.B, f *floodEnv, ctx context.Context) {
			var wg sync.WaitGroup
			for range 2 {
				hc := healthpb.NewHealthClient(f.dial(b))
				for range 5_000 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{}); err == nil {
							_, _ = w.Recv()
						}
					}()
				}
			}
			wg.Wait() // answered or refused
		}},
		{"host-1024-conns-watching-or-raw", func(b *testing.B, f *floodEnv, ctx context.Context) {
			for i := range 1_024 {
				if i%2 == 0 {
					c, err := net.Dial("tcp", f.grpcAddr)
					if err == nil {
						f.closeLater(c)
					}
					continue
				}
				if w, err := healthpb.NewHealthClient(f.dial(b)).Watch(ctx, &healthpb.HealthCheckRequest{}); err == nil {
					_, _ = w.Recv()
				}
			}
		}},
		{"leases-page-of-1-among-200000", func(b *testing.B, f *floodEnv, ctx context.Context) {
			e := f.srv.Engine()
			if _, err := e.CreatePool(limiter.PoolConfig{Name: "big", ConcurrencyLimit: 200_000, MaxLeaseTTL: time.Hour, DefaultLeaseTTL: time.Hour}); err != nil {
				b.Fatal(err)
			}
			for range 200_000 {
				if _, err := e.Acquire(ctx, limiter.AcquireRequest{Pool: "big", Weight: 1, NoWait: true, TTL: time.Hour}); err != nil {
					b.Fatal(err)
				}
			}
			for range 4 {
				go func() {
					for ctx.Err() == nil {
						start := time.Now()
						resp, err := http.Get("http://" + f.httpAddr + "/api/pools/big/leases?limit=1")
						if err != nil {
							continue
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						f.record(time.Since(start))
					}
				}()
			}
		}},
		{"queue-position-of-9000-waiters", func(b *testing.B, f *floodEnv, ctx context.Context) {
			e := f.srv.Engine()
			if _, err := e.CreatePool(limiter.PoolConfig{Name: "q", ConcurrencyLimit: 1, MaxWaiters: 10_000}); err != nil {
				b.Fatal(err)
			}
			if _, err := e.Acquire(ctx, limiter.AcquireRequest{Pool: "q", Weight: 1, NoWait: true}); err != nil {
				b.Fatal(err)
			}
			for range 9_000 {
				_, w, err := e.StartAcquire(limiter.AcquireRequest{Pool: "q", Weight: 1, ClientID: "flood"})
				if err != nil || w == nil {
					b.Fatal(err)
				}
				w.Notify(func(limiter.Lease, error) {})
				defer w.Cancel(context.Canceled)
			}
			lim := tollgatev1.NewLimiterServiceClient(f.dial(b))
			for range 4 {
				go func() {
					for ctx.Err() == nil {
						start := time.Now()
						if _, err := lim.GetQueuePosition(ctx, &tollgatev1.GetQueuePositionRequest{Pool: "q", ClientId: "flood"}); err == nil {
							f.record(time.Since(start))
						}
					}
				}()
			}
		}},
	}
	for _, fl := range floods {
		b.Run(fl.name, func(b *testing.B) {
			f := startFloodEnv(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			fl.run(b, f, ctx)
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			goroutines, heap := runtime.NumGoroutine(), float64(ms.HeapInuse)/(1<<20)

			honest := tollgatev1.NewLimiterServiceClient(f.dial(b))
			lat := make([]time.Duration, 0, b.N)
			failed := 0
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				c, cancelCall := context.WithTimeout(ctx, 5*time.Second)
				r, err := honest.Acquire(c, &tollgatev1.AcquireRequest{Pool: "honest"})
				if err == nil {
					_, err = honest.Release(c, &tollgatev1.ReleaseRequest{Pool: "honest", LeaseId: r.GetLease().GetId()})
				}
				cancelCall()
				if err != nil {
					failed++
					continue
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(float64(goroutines), "goroutines")
			b.ReportMetric(heap, "heap-MB")
			reportQuantiles(b, "honest", lat)
			b.ReportMetric(float64(failed), "honest-failed")
			if flood := f.recorded(); len(flood) > 0 {
				reportQuantiles(b, "flood-call", flood)
			}
		})
	}
}

func reportQuantiles(b *testing.B, name string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, name+"-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, name+"-p99-ms")
}

// floodEnv is a server with both listeners on loopback, default limits.
type floodEnv struct {
	srv                *Server
	grpcAddr, httpAddr string

	mu    sync.Mutex
	conns []io.Closer
	lat   []time.Duration
}

func startFloodEnv(b *testing.B) *floodEnv {
	srv := New(Config{Logger: discardLogger()})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	f := &floodEnv{srv: srv, grpcAddr: lis.Addr().String(), httpAddr: hlis.Addr().String()}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	hs := &http.Server{Handler: srv.HTTPHandler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = hs.Serve(srv.LimitHTTP(hs, hlis)) }()
	b.Cleanup(func() {
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		hs.Close()
		stop()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	if _, err := srv.Engine().CreatePool(limiter.PoolConfig{Name: "honest", ConcurrencyLimit: 100}); err != nil {
		b.Fatal(err)
	}
	return f
}

func (f *floodEnv) closeLater(c io.Closer) {
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.mu.Unlock()
}

// dial opens a new gRPC connection to the server, closed at the end.
func (f *floodEnv) dial(b *testing.B) *grpc.ClientConn {
	conn, err := grpc.NewClient(f.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	f.closeLater(conn)
	return conn
}

func (f *floodEnv) record(d time.Duration) {
	f.mu.Lock()
	f.lat = append(f.lat, d)
	f.mu.Unlock()
}

func (f *floodEnv) recorded() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.lat)
}
