package server

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// benchConcurrency is the number of concurrent callers of the *16
// sub-benchmarks.
const benchConcurrency = 16

// noopTestService answers EmptyCall: the baseline of a unary call.
type noopTestService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (noopTestService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

// BenchmarkGRPC compares, over one loopback connection to one grpc.Server
// (real clock), a no-op unary call with an Acquire+Release pair done as two
// unary calls and as two requests on a Session stream. ns/op is per call
// for NoopUnary and per acquire+release pair otherwise; the *16 variants
// run 16 callers at once, so their ns/op is the inverse of throughput.
func BenchmarkGRPC(b *testing.B) {
	// One client at full speed: no per-client rate limit (BenchmarkClientRates
	// measures its cost).
	srv := New(Config{Limits: limits.Limits{ClientRate: -1}})
	gs := srv.GRPCServer()
	testgrpc.RegisterTestServiceServer(gs, noopTestService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeGRPC(ctx, gs, lis) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	if _, err := srv.Engine().CreatePool(limiter.PoolConfig{Name: "bench", ConcurrencyLimit: limiter.MaxConcurrency}); err != nil {
		b.Fatal(err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	noop := testgrpc.NewTestServiceClient(conn)
	lim := tollgatev1.NewLimiterServiceClient(conn)
	bg := context.Background()

	unaryPair := func(b *testing.B) {
		resp, err := lim.Acquire(bg, &tollgatev1.AcquireRequest{Pool: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := lim.Release(bg, &tollgatev1.ReleaseRequest{Pool: "bench", LeaseId: resp.GetLease().GetId()}); err != nil {
			b.Fatal(err)
		}
	}

	b.Run("NoopUnary", func(b *testing.B) {
		for b.Loop() {
			if _, err := noop.EmptyCall(bg, &testgrpc.Empty{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("UnaryAcquireRelease", func(b *testing.B) {
		for b.Loop() {
			unaryPair(b)
		}
	})
	b.Run("NoopUnary16", func(b *testing.B) {
		parallel(b, func() {
			if _, err := noop.EmptyCall(bg, &testgrpc.Empty{}); err != nil {
				b.Error(err)
			}
		})
	})
	b.Run("UnaryAcquireRelease16", func(b *testing.B) {
		parallel(b, func() { unaryPair(b) })
	})
	b.Run("SessionAcquireRelease16", func(b *testing.B) {
		mc, err := newMuxClient(lim)
		if err != nil {
			b.Fatal(err)
		}
		defer mc.close()
		parallel(b, func() {
			r := mc.call(func(id uint64) *tollgatev1.SessionRequest {
				return acquireReq(id, &tollgatev1.AcquireRequest{Pool: "bench"})
			})
			l := r.GetAcquire().GetLease()
			if l == nil {
				b.Errorf("acquire: %v", r)
				return
			}
			r = mc.call(func(id uint64) *tollgatev1.SessionRequest { return releaseReq(id, "bench", l.GetId()) })
			if r.GetRelease() == nil {
				b.Errorf("release: %v", r)
			}
		})
	})
	if st, err := srv.Engine().GetPool("bench"); err != nil || st.Status.Held != 0 {
		b.Fatalf("pool after the benchmarks: %+v, %v", st.Status, err)
	}
}

// parallel runs f b.N times in total across benchConcurrency goroutines.
func parallel(b *testing.B, f func()) {
	var next atomic.Int64
	n := int64(b.N)
	var wg sync.WaitGroup
	b.ResetTimer()
	for range benchConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= n {
				f()
			}
		}()
	}
	wg.Wait()
}

// muxClient shares one Session stream among concurrent callers, matching
// answers to requests by request_id, as a client library would.
type muxClient struct {
	stream tollgatev1.LimiterService_SessionClient
	cancel context.CancelFunc
	sendMu sync.Mutex
	nextID atomic.Uint64
	mu     sync.Mutex
	wait   map[uint64]chan *tollgatev1.SessionResponse
	done   chan struct{}
}

func newMuxClient(lim tollgatev1.LimiterServiceClient) (*muxClient, error) {
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := lim.Session(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	m := &muxClient{stream: stream, cancel: cancel, wait: make(map[uint64]chan *tollgatev1.SessionResponse), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			m.mu.Lock()
			ch := m.wait[r.GetRequestId()]
			delete(m.wait, r.GetRequestId())
			m.mu.Unlock()
			if ch != nil {
				ch <- r
			}
		}
	}()
	return m, nil
}

var muxChans = sync.Pool{New: func() any { return make(chan *tollgatev1.SessionResponse, 1) }}

// call sends the request made for a fresh id and waits for its answer.
func (m *muxClient) call(mk func(id uint64) *tollgatev1.SessionRequest) *tollgatev1.SessionResponse {
	id, ch := m.start(mk)
	return m.await(id, ch)
}

// start sends the request made for a fresh id; await waits for its answer.
func (m *muxClient) start(mk func(id uint64) *tollgatev1.SessionRequest) (uint64, chan *tollgatev1.SessionResponse) {
	id := m.nextID.Add(1)
	ch := muxChans.Get().(chan *tollgatev1.SessionResponse)
	m.mu.Lock()
	m.wait[id] = ch
	m.mu.Unlock()
	m.sendRaw(mk(id))
	return id, ch
}

// sendRaw sends a request that is not answered (a cancel), or whose
// answer start waits for.
func (m *muxClient) sendRaw(r *tollgatev1.SessionRequest) {
	m.sendMu.Lock()
	_ = m.stream.Send(r) // a failed send shows as the stream's end in await
	m.sendMu.Unlock()
}

func (m *muxClient) await(id uint64, ch chan *tollgatev1.SessionResponse) *tollgatev1.SessionResponse {
	select {
	case r := <-ch:
		muxChans.Put(ch)
		return r
	case <-m.done:
		m.mu.Lock()
		delete(m.wait, id)
		m.mu.Unlock()
		return &tollgatev1.SessionResponse{}
	}
}

func (m *muxClient) close() {
	m.cancel()
	<-m.done
}
