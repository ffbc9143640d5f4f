package server

import (
	"context"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// TestFloodMeasure measures a well-behaved client's acquire+release
// latency while another client on the same host floods the server in each
// of the ways the server bounds, with the default limits and the real
// clock. It prints the table of docs/operations.md. It runs only with
// TOLLGATE_FLOODS=1 (it takes a few seconds per flood):
//
//	TOLLGATE_FLOODS=1 go test -run TestFloodMeasure -v ./server/
func TestFloodMeasure(t *testing.T) {
	if os.Getenv("TOLLGATE_FLOODS") == "" {
		t.Skip("set TOLLGATE_FLOODS=1 to measure")
	}
	srv := New(Config{Logger: discardLogger()})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _ = srv.Serve(ctx, lis) }() // until stop
	addr := lis.Addr().String()
	honest := tollgatev1.NewLimiterServiceClient(dial(t, addr))
	adm := tollgatev1.NewAdminServiceClient(dial(t, addr))
	for _, p := range []*tollgatev1.Pool{{Name: "honest", ConcurrencyLimit: 100}, {Name: "slow", Rate: 10, Burst: 1}, {Name: "held", ConcurrencyLimit: 1}} {
		if _, err := adm.CreatePool(context.Background(), &tollgatev1.CreatePoolRequest{Pool: p}); err != nil {
			t.Fatal(err)
		}
	}
	measure := func() (p50, p99 time.Duration, failed int) {
		var lat []time.Duration
		end := time.Now().Add(time.Second)
		for time.Now().Before(end) {
			start := time.Now()
			c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := honest.Acquire(c, &tollgatev1.AcquireRequest{Pool: "honest"})
			if err == nil {
				_, err = honest.Release(c, &tollgatev1.ReleaseRequest{Pool: "honest", LeaseId: r.GetLease().GetId()})
			}
			cancel()
			if err != nil {
				failed++
				continue
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		if len(lat) == 0 {
			return 0, 0, failed
		}
		return lat[len(lat)/2], lat[len(lat)*99/100], failed
	}
	firstErr := func(errs <-chan error) string {
		for {
			select {
			case err := <-errs:
				if err != nil {
					st, _ := status.FromError(err)
					return st.Code().String() + " " + strings.SplitN(st.Message(), ";", 2)[0]
				}
			default:
				return "nothing refused"
			}
		}
	}
	p50, p99, _ := measure()
	t.Logf("| none | | %v | %v |", p50.Round(time.Microsecond), p99.Round(time.Microsecond))

	type flood struct {
		name string
		run  func(ctx context.Context, errs chan<- error)
	}
	floods := []flood{
		{"3,000 takes with max_wait 24h (pool: 10/s), one connection", func(ctx context.Context, errs chan<- error) {
			lim := tollgatev1.NewLimiterServiceClient(dial(t, addr))
			for range 3_000 {
				go func() {
					_, err := lim.Take(ctx, &tollgatev1.TakeRequest{Pool: "slow", MaxWait: dur(24 * time.Hour)})
					if ctx.Err() == nil {
						errs <- err
					}
				}()
			}
		}},
		{"300 Session streams, one connection", func(ctx context.Context, errs chan<- error) {
			lim := tollgatev1.NewLimiterServiceClient(dial(t, addr))
			for range 300 {
				go func() {
					s, err := lim.Session(ctx)
					if err == nil {
						_, err = s.Recv()
					}
					if ctx.Err() == nil {
						errs <- err
					}
				}()
			}
		}},
		{"Session sending 20,000 requests, reading none", func(ctx context.Context, errs chan<- error) {
			lim := tollgatev1.NewLimiterServiceClient(dial(t, addr, grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16)))
			s, err := lim.Session(ctx)
			if err != nil {
				errs <- err
				return
			}
			for i := range uint64(20_000) {
				if s.Send(releaseReq(i+1, "held", "x")) != nil {
					break
				}
			}
			for {
				if _, err := s.Recv(); err != nil {
					errs <- err
					return
				}
			}
		}},
		{"200 acquires with 1 MB of metadata each", func(ctx context.Context, errs chan<- error) {
			lim := tollgatev1.NewLimiterServiceClient(dial(t, addr))
			big := metadata.AppendToOutgoingContext(ctx, "x-junk", strings.Repeat("a", 1<<20))
			for range 200 {
				go func() {
					_, err := lim.Acquire(big, &tollgatev1.AcquireRequest{Pool: "held"})
					errs <- err
				}()
			}
		}},
		{"1,100 idle TCP connections", func(ctx context.Context, errs chan<- error) {
			var mu sync.Mutex
			var conns []net.Conn
			refused := 0
			for range 1100 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
			for _, c := range conns {
				_ = c.SetReadDeadline(time.Now().Add(time.Millisecond)) // a failed set shows as a failed read below
				if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
					refused++
				}
			}
			errs <- status.Errorf(codes.Unavailable, "%d connections closed at accept (--max-conns-per-ip)", refused)
			go func() {
				<-ctx.Done()
				for _, c := range conns {
					c.Close()
				}
			}()
		}},
	}
	for _, f := range floods {
		fctx, cancel := context.WithCancel(context.Background())
		errs := make(chan error, 100_000)
		go f.run(fctx, errs)
		time.Sleep(500 * time.Millisecond) // let the flood build up before measuring
		p50, p99, failed := measure()
		cancel()
		refused := firstErr(errs)
		t.Logf("| %s | %s | %v | %v | (%d honest calls failed)", f.name, refused, p50.Round(time.Microsecond), p99.Round(time.Microsecond), failed)
		time.Sleep(200 * time.Millisecond)
	}
}
