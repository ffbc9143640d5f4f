package server

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// gatedPersister is a Persister that keeps nothing and, once closed, holds
// every write until it is opened again.
type gatedPersister struct {
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	blocked chan string   // the pool of each write held
}

func (g *gatedPersister) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate, g.blocked = make(chan struct{}), make(chan string, 1024)
}

func (g *gatedPersister) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

func (g *gatedPersister) SavePool(sp limiter.SavedPool) error {
	g.mu.Lock()
	gate, blocked := g.gate, g.blocked
	g.mu.Unlock()
	if gate != nil {
		blocked <- sp.Config.Name
		<-gate
	}
	return nil
}

func (g *gatedPersister) DeletePool(string, uint64) error { return nil }

// TestSessionReadsWhileAGrantWrites: an acquire whose grant must first
// write its pool's reservations (the pool's first grant) does not hold up
// its stream: the requests behind it are read and answered while the
// write is in progress, and it is answered once the write is done.
func TestSessionReadsWhileAGrantWrites(t *testing.T) {
	g := &gatedPersister{}
	fc := fakeclock.New(testStart)
	e := startEnv(t, New(Config{Clock: fc, ShutdownTimeout: 2 * time.Second, persister: g}), fc)
	for _, p := range []string{"cold", "warm"} {
		e.createPool(&tollgatev1.Pool{Name: p, ConcurrencyLimit: 100})
	}
	l := e.acquire(&tollgatev1.AcquireRequest{Pool: "warm"}) // writes warm's reservations
	if _, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "warm", LeaseId: l.GetId()}); err != nil {
		t.Fatal(err)
	}
	if e.srv.Engine().GrantWrites("warm", 1, 0) || !e.srv.Engine().GrantWrites("cold", 1, 0) {
		t.Fatal("warm's next grant writes, or cold's first does not")
	}
	g.close()
	t.Cleanup(g.open)
	s := e.session()
	s.send(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "cold"}))
	select {
	case p := <-g.blocked:
		if p != "cold" {
			t.Fatalf("a write of pool %q was held, want cold's", p)
		}
	case <-time.After(waitLimit):
		t.Fatal("cold's grant did not write")
	}
	s.send(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "warm"}))
	if r := s.next(); r.GetRequestId() != 2 || r.GetAcquire().GetLease() == nil {
		t.Fatalf("while cold's grant writes, got %v; want warm's grant (request 2)", r)
	}
	g.open()
	if r := s.next(); r.GetRequestId() != 1 || r.GetAcquire().GetLease() == nil {
		t.Fatalf("after cold's write, got %v; want its grant (request 1)", r)
	}
}

// TestSessionCancelsAnAcquireMadeApart: a CancelRequest for an acquire
// being made apart from the reader (its grant would write) gives up the
// wait that acquire turns into, whenever the cancel comes.
func TestSessionCancelsAnAcquireMadeApart(t *testing.T) {
	fc := fakeclock.New(testStart)
	e := startEnv(t, New(Config{Clock: fc, ShutdownTimeout: 2 * time.Second, persister: &gatedPersister{}}), fc)
	e.createPool(&tollgatev1.Pool{Name: "full", ConcurrencyLimit: 1})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "full", Ttl: dur(10 * time.Second)})
	if !e.srv.Engine().GrantWrites("full", 1, time.Minute) {
		t.Fatal("a grant with a longer TTL than any written does not write")
	}
	s := e.session()
	for id := uint64(1); id <= 20; id++ {
		s.send(acquireReq(id, &tollgatev1.AcquireRequest{Pool: "full", Ttl: dur(time.Minute)}))
		s.send(cancelReq(100+id, id))
		wantSessionError(t, s.next(), codes.Canceled, apierr.ReasonCanceled)
	}
}
