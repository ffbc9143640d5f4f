package client_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// sessionSpy sees the Session messages the server reads and sends; with
// old set it plays a server from before batches: its Welcome does not say
// it reads them.
type sessionSpy struct {
	old         bool
	batchesRead atomic.Int64 // request batches read
	batchesSent atomic.Int64 // answer batches sent
}

func (sp *sessionSpy) wrap(ss grpc.ServerStream) grpc.ServerStream {
	return &spiedStream{ServerStream: ss, sp: sp}
}

type spiedStream struct {
	grpc.ServerStream
	sp *sessionSpy
}

func (s *spiedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if r, ok := m.(*tollgatev1.SessionRequest); ok && err == nil && r.GetBatch() != nil {
		s.sp.batchesRead.Add(1)
	}
	return err
}

func (s *spiedStream) SendMsg(m any) error {
	r, ok := m.(*tollgatev1.SessionResponse)
	if ok && r.GetBatch() != nil {
		s.sp.batchesSent.Add(1)
	}
	if ok && s.sp.old && r.GetWelcome() != nil {
		r = proto.Clone(r).(*tollgatev1.SessionResponse)
		r.GetWelcome().BatchRequests = false
		m = r
	}
	return s.ServerStream.SendMsg(m)
}

// pairs runs callers goroutines doing Acquire + ReleaseAsync of one permit
// of pool "p", n times each, and waits for every permit to be back.
func pairs(t *testing.T, ts *testServer, callers, n int) {
	t.Helper()
	c := ts.dial()
	ctx := t.Context()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range n {
				l, err := c.Acquire(ctx, "p")
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.ReleaseAsync(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "every permit back", func() bool { return ts.status("p").Held == 0 })
}

// Many callers on one Client: their requests are coalesced into batches,
// and the server batches its answers, since the Client says it reads them.
func TestStreamCoalescesRequests(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "p", ConcurrencyLimit: 1000})
	sp := &sessionSpy{}
	ts.stop()
	ts.wrap = sp.wrap
	ts.start()
	pairs(t, ts, 16, 200)
	if sp.batchesRead.Load() == 0 || sp.batchesSent.Load() == 0 {
		t.Fatalf("16 callers making 3,200 pairs: %d request batches and %d answer batches; want some of each", sp.batchesRead.Load(), sp.batchesSent.Load())
	}
}

// A server whose Welcome does not say it reads batches is sent none.
func TestStreamSendsNoBatchToOldServer(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "p", ConcurrencyLimit: 1000})
	sp := &sessionSpy{old: true}
	ts.stop()
	ts.wrap = sp.wrap
	ts.start()
	pairs(t, ts, 16, 200)
	if n := sp.batchesRead.Load(); n != 0 {
		t.Fatalf("%d batches sent to a server that does not read them", n)
	}
}
