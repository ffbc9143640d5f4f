package client_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
	"github.com/tollgate/tollgate/server"
)

// shareOf returns the engine's view of lease token of pool: its weight
// and its share's target (0 for a plain lease, or when it is not live).
func (ts *testServer) shareOf(pool string, token uint64) (weight, target int64) {
	ts.t.Helper()
	l, err := ts.srv.Engine().ResizeLease(limiter.LeaseResize{Pool: pool, Token: token})
	if err != nil {
		return 0, 0
	}
	if l.Share == nil {
		return l.Weight, 0
	}
	return l.Weight, l.Share.Target
}

// holdN takes n permits of sem, one at a time, and keeps them.
func holdN(t *testing.T, sem *client.Semaphore, n int) {
	t.Helper()
	for range n {
		if err := sem.Acquire(ctx(t), 1); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSemaphoreHandsOutPermitsLocally(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "p", ConcurrencyLimit: 10})
	c := ts.dial()
	sem := newSemaphore(t, c, "p", client.WithLocalShare(3))
	defer sem.Close()
	holdN(t, sem, 3)
	if sem.TryAcquire(1) {
		t.Fatal("TryAcquire beyond WithLocalShare(3) succeeded")
	}
	if s := ts.status("p"); s.Held != 3 || s.Leases != 1 {
		t.Fatalf("the server holds %d in %d leases, want one share lease of 3", s.Held, s.Leases)
	}
	if l := sem.Lease(); l == nil || l.FencingToken() == 0 || l.Weight() != 3 {
		t.Fatalf("share lease: %+v", l)
	}
	sem.Release(1)
	if !sem.TryAcquire(1) {
		t.Fatal("TryAcquire after a Release failed")
	}
	if err := sem.Acquire(ctx(t), 4); !errors.Is(err, apierr.ErrInvalidArgument) {
		t.Fatalf("Acquire(4) of WithLocalShare(3): %v, want ErrInvalidArgument", err)
	}
	sem.Release(3)
}

// TestSemaphoreGivesBackForAWaiterAtOnce: a holder using its whole share
// is asked to give back when an acquire of another client waits, and gives
// back as soon as a local task ends: the waiter is granted while the
// server's clock has not moved (no expiry, no renew interval involved).
func TestSemaphoreGivesBackForAWaiterAtOnce(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "p", ConcurrencyLimit: 4})
	a := newSemaphore(t, ts.dial(), "p", client.WithLocalShare(4))
	defer a.Close()
	holdN(t, a, 4)
	start := ts.clock.Now()
	got := make(chan error, 1)
	go func() {
		l, err := ts.dial().Acquire(ctx(t), "p")
		if err == nil {
			err = l.Release(ctx(t))
		}
		got <- err
	}()
	tok := a.Lease().FencingToken()
	waitFor(t, "the holder asked to give one back", func() bool { _, target := ts.shareOf("p", tok); return target == 3 })
	a.Release(1) // a local task ends
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("the waiter was not served after the holder's task ended")
	}
	if !ts.clock.Now().Equal(start) {
		t.Fatal("the server's clock moved")
	}
	a.Release(3)
}

// TestSemaphoreFairShares: two holders whose tasks keep the whole pool
// busy get half each; when one wants little, the other gets the rest.
func TestSemaphoreFairShares(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "p", ConcurrencyLimit: 10})
	// The TTL leaves each renewal seconds to be answered on a loaded machine
	// before the share lease would be given up.
	opts := []client.SemaphoreOption{client.WithLocalShare(10), client.WithShareLeaseOptions(client.WithTTL(3 * time.Second))}
	a := newSemaphore(t, ts.dial(), "p", opts...)
	b := newSemaphore(t, ts.dial(), "p", opts...)
	defer a.Close()
	defer b.Close()

	var wg sync.WaitGroup
	stop, bFew := make(chan struct{}), make(chan struct{})
	// A worker runs short tasks until quit is closed.
	work := func(sem *client.Semaphore, quit chan struct{}) {
		defer wg.Done()
		for {
			select {
			case <-quit:
				return
			default:
			}
			if err := sem.Acquire(ctx(t), 1); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
			sem.Release(1)
		}
	}
	for i := range 10 {
		wg.Add(2)
		go work(a, stop)
		quit := stop
		if i >= 2 {
			quit = bFew
		}
		go work(b, quit)
	}
	weights := func() (int64, int64) {
		la, lb := a.Lease(), b.Lease()
		if la == nil || lb == nil {
			return 0, 0
		}
		wa, _ := ts.shareOf("p", la.FencingToken())
		wb, _ := ts.shareOf("p", lb.FencingToken())
		return wa, wb
	}
	waitFor(t, "half each", func() bool { wa, wb := weights(); return wa == 5 && wb == 5 })
	close(bFew) // b now wants 2: a gets the rest after b's next report (a renew interval)
	waitFor(t, "b keeps 2, a gets 8", func() bool { wa, wb := weights(); return wa == 8 && wb == 2 })
	close(stop)
	wg.Wait()
}

func TestSemaphoreLocalQueueHonoursPriorityAndWaitTimeout(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "p", ConcurrencyLimit: 1})
	sem := newSemaphore(t, ts.dial(), "p", client.WithLocalShare(1))
	defer sem.Close()
	holdN(t, sem, 1)
	if err := sem.Acquire(ctx(t), 1, client.WithWaitTimeout(20*time.Millisecond)); !errors.Is(err, apierr.ErrWaitTimeout) {
		t.Fatalf("Acquire with a wait timeout: %v, want ErrWaitTimeout", err)
	}
	order := make(chan string, 2)
	var wg sync.WaitGroup
	for _, w := range []struct {
		name string
		prio int32
	}{{"low", 0}, {"high", 5}} {
		queued := client.SemaphoreWaiters(sem) + 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sem.Acquire(ctx(t), 1, client.WithPriority(w.prio)); err != nil {
				t.Error(err)
				return
			}
			order <- w.name
			sem.Release(1)
		}()
		waitFor(t, w.name+" waits", func() bool { return client.SemaphoreWaiters(sem) == queued }) // "low" queues first
	}
	sem.Release(1)
	wg.Wait()
	if first := <-order; first != "high" {
		t.Fatalf("%s was served first, want high", first)
	}
}

// TestSemaphoreLostLeaseCancelsLocalHolders: when the share's lease is
// revoked, tasks running under it see their context end with
// ErrLeaseLost, and the semaphore takes a new lease for new tasks.
func TestSemaphoreLostLeaseCancelsLocalHolders(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "p", ConcurrencyLimit: 2})
	sem := newSemaphore(t, ts.dial(), "p", client.WithLocalShare(2))
	defer sem.Close()
	running := make(chan uint64)
	done := make(chan error)
	go func() {
		done <- sem.Do(ctx(t), func(ctx context.Context) error {
			running <- client.LeaseFromContext(ctx).FencingToken()
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	tok := <-running
	if err := ts.srv.Engine().RevokeLease("p", tok, "test"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("Do under a revoked share: %v, want ErrLeaseLost", err)
	}
	err := sem.Do(ctx(t), func(ctx context.Context) error {
		if l := client.LeaseFromContext(ctx); l.FencingToken() <= tok {
			t.Errorf("new lease token %d, not above the lost %d", l.FencingToken(), tok)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestGroupWithSemaphore(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "p", ConcurrencyLimit: 3})
	c := ts.dial()
	sem := newSemaphore(t, c, "p", client.WithLocalShare(3))
	defer sem.Close()
	var now, most atomic.Int64
	out, err := client.Map(ctx(t), c, "p", make([]int, 50), func(ctx context.Context, _ int) (int, error) {
		n := now.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(time.Millisecond)
		now.Add(-1)
		return 1, nil
	}, client.WithSemaphore(sem))
	if err != nil || len(out) != 50 {
		t.Fatal(err)
	}
	if m := most.Load(); m > 3 {
		t.Fatalf("%d ran at once under a pool limit of 3", m)
	}
	if s := ts.status("p"); s.Granted != 1 {
		t.Fatalf("%d leases granted for 50 tasks, want the one share lease", s.Granted)
	}
}

// TestSemaphoreShareReattachesAfterServerRestart: a share's lease held
// across a restart of its server is re-adopted like any lease, and the
// semaphore makes it a share again on the new server.
func TestSemaphoreShareReattachesAfterServerRestart(t *testing.T) {
	dir := t.TempDir()
	first := startDurable(t, dir, "127.0.0.1:0")
	c := dialTarget(t, first.addr)
	sem := newSemaphore(t, c, "db", client.WithLocalShare(1))
	defer sem.Close()
	holdN(t, sem, 1)
	l := sem.Lease()
	isShare := func(srv *server.Server) func() bool {
		return func() bool {
			got, err := srv.Engine().ResizeLease(limiter.LeaseResize{Pool: "db", Token: l.FencingToken()})
			return err == nil && got.Share != nil && got.Weight == 1
		}
	}
	waitFor(t, "the lease is a share", isShare(first.srv))
	first.stop()
	second := startDurable(t, dir, first.addr)
	waitFor(t, "the share is a share again on the restarted server", isShare(second.srv))
	if isDone(l) || sem.Lease() != l {
		t.Fatalf("the share's lease was lost across the restart: %v", l.Err())
	}
	sem.Release(1)
	if !sem.TryAcquire(1) {
		t.Fatal("TryAcquire after the restart failed")
	}
	sem.Release(1)
}

// TestSemaphoreStopsWaitingForALeaseNobodyWants: when the last local
// waiter gives up while the share's first lease waits in the pool's
// queue, that acquire is cancelled on the server.
func TestSemaphoreStopsWaitingForALeaseNobodyWants(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "p", ConcurrencyLimit: 1})
	other, err := ts.dial().Acquire(ctx(t), "p")
	if err != nil {
		t.Fatal(err)
	}
	sem := newSemaphore(t, ts.dial(), "p")
	defer sem.Close()
	if err := sem.Acquire(ctx(t), 1, client.WithWaitTimeout(50*time.Millisecond)); !errors.Is(err, apierr.ErrWaitTimeout) {
		t.Fatalf("Acquire: %v, want ErrWaitTimeout", err)
	}
	waitFor(t, "the share's acquire left the pool's queue", func() bool { return ts.status("p").Waiting == 0 })
	if err := other.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := sem.Acquire(ctx(t), 1); err != nil { // opens a lease again
		t.Fatal(err)
	}
	sem.Release(1)
}

// TestSemaphoreDoTellsTheObserver: how work under Semaphore.Do ended goes
// to the Client's Observer (and to Report), as for Do.
func TestSemaphoreDoTellsTheObserver(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "p", ConcurrencyLimit: 2})
	obs := &observer{}
	sem := newSemaphore(t, ts.dialWith(client.Dialer{Observer: obs}), "p")
	defer sem.Close()
	boom := errors.New("boom")
	if err := sem.Do(ctx(t), func(context.Context) error { return boom }); err != boom {
		t.Fatalf("Do: %v", err)
	}
	w := obs.works()
	if len(w) != 1 || w[0].Pool != "p" || w[0].Outcome != client.OutcomeError || w[0].Err != boom || w[0].LeaseLost {
		t.Fatalf("work events: %+v", w)
	}
}

// TestSemaphoreGrownShareReattachesWithItsWeight: a share that grew is
// re-adopted with the weight it grew to: the client sends the receipt of
// the resize (which signs that weight), not the grant's.
func TestSemaphoreGrownShareReattachesWithItsWeight(t *testing.T) {
	dir := t.TempDir()
	first := startDurable(t, dir, "127.0.0.1:0")
	if _, err := first.srv.Engine().CreatePool(limiter.PoolConfig{Name: "big", ConcurrencyLimit: 5, DefaultLeaseTTL: 3 * time.Second, MaxLeaseTTL: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	c := dialTarget(t, first.addr)
	sem := newSemaphore(t, c, "big", client.WithLocalShare(3))
	defer sem.Close()
	holdN(t, sem, 3)
	l := sem.Lease()
	hasWeight := func(srv *server.Server) func() bool {
		return func() bool {
			got, err := srv.Engine().ResizeLease(limiter.LeaseResize{Pool: "big", Token: l.FencingToken()})
			return err == nil && got.Weight == 3
		}
	}
	waitFor(t, "the share grew to 3", hasWeight(first.srv))
	first.stop()
	second := startDurable(t, dir, first.addr)
	waitFor(t, "the share is back with weight 3 on the restarted server", hasWeight(second.srv))
	if isDone(l) || sem.Lease() != l {
		t.Fatalf("the share's lease was lost across the restart: %v", l.Err())
	}
}
