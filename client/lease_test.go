package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestAcquireRelease(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 3})
	c := ts.dialWith(client.Dialer{ClientID: "test-client"})

	before := time.Now()
	l, err := c.Acquire(ctx(t), "db", client.WithWeight(2), client.WithTTL(time.Minute), client.WithDescription("migration"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Pool() != "db" || l.Weight() != 2 || l.ID() == "" || l.FencingToken() == 0 || l.TTL() != time.Minute {
		t.Fatalf("lease pool=%q weight=%d id=%q token=%d ttl=%v", l.Pool(), l.Weight(), l.ID(), l.FencingToken(), l.TTL())
	}
	if exp := l.Expiry(); exp.Before(before.Add(time.Minute)) || exp.After(time.Now().Add(time.Minute)) {
		t.Fatalf("Expiry %v is not acquire time + TTL", exp)
	}
	if isDone(l) || l.Err() != nil {
		t.Fatalf("fresh lease is done: %v", l.Err())
	}
	if st := ts.status("db"); st.Held != 2 || st.Leases != 1 {
		t.Fatalf("server holds %d in %d leases, want 2 in 1", st.Held, st.Leases)
	}

	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !isDone(l) || l.Err() != client.ErrReleased {
		t.Fatalf("after Release: done=%v Err=%v", isDone(l), l.Err())
	}
	if st := ts.status("db"); st.Held != 0 || st.Released != 1 {
		t.Fatalf("after Release the server holds %d (released %d)", st.Held, st.Released)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("second Release: %v", err)
	}
}

func TestAcquireErrors(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2})
	c := ts.dial()

	_, err := c.Acquire(ctx(t), "nope")
	mustIs(t, err, apierr.ErrPoolNotFound)
	var e *client.Error
	if !errors.As(err, &e) || e.Code.String() != "NotFound" || !strings.Contains(e.Error(), "(NOT_FOUND POOL_NOT_FOUND)") {
		t.Fatalf("error %v: want *Error NOT_FOUND POOL_NOT_FOUND", err)
	}
	_, err = c.Acquire(ctx(t), "db", client.WithWeight(3))
	mustIs(t, err, apierr.ErrInvalidArgument)
	_, err = c.Acquire(ctx(t), "db", client.WithWeight(0))
	mustIs(t, err, apierr.ErrInvalidArgument)
	_, err = c.Acquire(ctx(t), "db", client.WithTTL(time.Millisecond))
	mustIs(t, err, apierr.ErrInvalidArgument)
}

func TestTryAcquire(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	l, err := c.TryAcquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx(t), "db", client.WithWaitTimeout(time.Hour))
	mustIs(t, err, apierr.ErrNoCapacity)
	if st := ts.status("db"); st.Waiting != 0 || st.Held != 1 {
		t.Fatalf("try-acquire left waiting=%d held=%d", st.Waiting, st.Held)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	l2, err := c.TryAcquire(ctx(t), "db")
	if err != nil {
		t.Fatalf("TryAcquire after release: %v", err)
	}
	if l2.FencingToken() <= l.FencingToken() {
		t.Fatalf("fencing token %d after %d", l2.FencingToken(), l.FencingToken())
	}
}

func TestLeasesShareOneStream(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 100, Rate: 1000})
	c := ts.dial()

	var wg sync.WaitGroup
	leases := make([]*client.Lease, 20)
	errs := make([]error, 20)
	for i := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leases[i], errs[i] = c.Acquire(ctx(t), "db", client.WithTTL(3*time.Second))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Take(ctx(t), "db", 5); err != nil {
		t.Fatal(err)
	}
	// Renewals run every TTL/3: wait for one on every lease. The TTL leaves
	// each renewal seconds to be answered on a loaded machine before the
	// client would give its lease up.
	granted := make([]time.Time, len(leases))
	for i, l := range leases {
		granted[i] = l.Expiry()
	}
	waitFor(t, "renewals", func() bool {
		for i, l := range leases {
			if !l.Expiry().After(granted[i]) {
				return false
			}
		}
		return true
	})
	for _, l := range leases {
		if err := l.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := ts.sessions.Load(); n != 1 {
		t.Fatalf("%d Session streams were opened; want 1", n)
	}
	if st := ts.status("db"); st.Held != 0 {
		t.Fatalf("held %d after releasing all", st.Held)
	}
}

func TestDoneOnServerExpiry(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	l, err := c.Acquire(ctx(t), "db", client.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := l.Context(context.Background())
	defer cancel()
	ts.clock.Advance(61 * time.Second) // the server expires it and tells the stream
	err = waitDone(t, l)
	mustIs(t, err, client.ErrLeaseLost)
	mustIs(t, err, apierr.ErrLeaseExpired)
	<-lctx.Done()
	mustIs(t, context.Cause(lctx), apierr.ErrLeaseExpired)

	// Release of a lost lease returns the loss at once.
	mustIs(t, l.Release(ctx(t)), client.ErrLeaseLost)
}

func TestDoneOnRevoke(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	l, err := c.Acquire(ctx(t), "db", client.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.srv.Engine().DeletePool("db", true); err != nil {
		t.Fatal(err)
	}
	err = waitDone(t, l)
	mustIs(t, err, client.ErrLeaseLost)
	mustIs(t, err, apierr.ErrLeaseRevoked)
}

func TestDoneByLocalDeadlineWhenServerUnreachable(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	l, err := c.Acquire(ctx(t), "db", client.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ts.stop() // the server (whose clock stands still) never expires it
	err = waitDone(t, l)
	mustIs(t, err, client.ErrLeaseLost)
	if errors.Is(err, apierr.ErrLeaseExpired) || !strings.Contains(err.Error(), "local deadline") {
		t.Fatalf("loss %v: want the local deadline", err)
	}
	if d := l.Expiry(); time.Now().Before(d.Add(-300 * time.Millisecond / 2)) {
		t.Fatalf("lost at %v, before Expiry %v minus the safety margin", time.Now(), d)
	}
}

func TestReconnectKeepsRenewing(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	const ttl = 30 * time.Second
	l, err := c.Acquire(ctx(t), "db", client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	restartAndWaitForRenew(t, ts, l, ttl)
	if n := ts.sessions.Load(); n != 2 {
		t.Fatalf("%d Session streams opened; want 2", n)
	}
	// Events now come on the new stream.
	ts.clock.Advance(ttl + time.Second)
	mustIs(t, waitDone(t, l), apierr.ErrLeaseExpired)
}

// TestReconnectRenewsBeforeTheFirstRenew: a lease whose first renew is not
// yet due (TTL/3 = 40s, longer than waitFor waits) is renewed at once on
// a new stream all the same, although its keep-alive has not started.
func TestReconnectRenewsBeforeTheFirstRenew(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	const ttl = 2 * time.Minute
	l, err := c.Acquire(ctx(t), "db", client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	restartAndWaitForRenew(t, ts, l, ttl)
}

// restartAndWaitForRenew restarts ts and waits for lease l (of TTL ttl) to
// be renewed on the new stream: a renew sent after the restart moves its
// expiry estimate past restarted+ttl.
func restartAndWaitForRenew(t *testing.T, ts *testServer, l *client.Lease, ttl time.Duration) {
	t.Helper()
	ts.stop()
	restarted := time.Now()
	ts.start()
	waitFor(t, "a renew on the new stream", func() bool {
		if isDone(l) {
			t.Fatalf("lease lost across a restart: %v", l.Err())
		}
		return l.Expiry().After(restarted.Add(ttl))
	})
}

// TestReleasesRunOneAtATime: a Release waits for one already running on
// the same lease for as long as its context allows, and a ReleaseAsync
// waits for it to end and then finds the lease released.
func TestReleasesRunOneAtATime(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()
	l, err := c.Acquire(ctx(t), "db", client.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ts.stop() // the first Release waits for the server
	first := make(chan error, 1)
	go func() { first <- l.Release(ctx(t)) }()
	waitFor(t, "the first release to run", func() bool { running, _ := client.ReleaseRunning(l); return running })

	short, cancel := context.WithCancel(ctx(t))
	second := make(chan error, 1)
	go func() { second <- l.Release(short) }()
	waitFor(t, "the second release to wait", func() bool { _, waited := client.ReleaseRunning(l); return waited })
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("the second release, its context cancelled while it waited: %v; want context.Canceled", err)
	}

	async := make(chan error, 1)
	go func() { async <- l.ReleaseAsync() }()
	waitFor(t, "ReleaseAsync to wait", func() bool { _, waited := client.ReleaseRunning(l); return waited })
	select {
	case err := <-first:
		t.Fatalf("the first release returned (%v) with the server down", err)
	default:
	}
	ts.start()
	if err := <-first; err != nil {
		t.Fatalf("the first release: %v", err)
	}
	select {
	case err := <-async:
		if err != nil {
			t.Fatalf("ReleaseAsync after the release: %v; want nil", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("ReleaseAsync still waits after the release it waited for ended")
	}
	if st := ts.status("db"); st.Held != 0 {
		t.Fatalf("held %d after the releases", st.Held)
	}
}

func TestReconnectShortTTL(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	const ttl = 2 * time.Second
	l, err := c.Acquire(ctx(t), "db", client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		restartAndWaitForRenew(t, ts, l, ttl)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireWaitsAndIsGranted(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	first, err := c.Acquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *client.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx(t), "db", client.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, "a waiter", func() bool { return ts.status("db").Waiting == 1 })
	if err := first.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil {
		return
	}
	if second.FencingToken() <= first.FencingToken() {
		t.Fatalf("token %d after %d", second.FencingToken(), first.FencingToken())
	}
	if err := second.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireCancelLeavesNoWaiter(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	held, err := c.Acquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(actx, "db")
		errc <- err
	}()
	waitFor(t, "a waiter", func() bool { return ts.status("db").Waiting == 1 })
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("cancelled Acquire returned %v", err)
	}
	waitFor(t, "the waiter to leave", func() bool {
		st := ts.status("db")
		return st.Waiting == 0 && st.Canceled == 1
	})
	if err := held.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if st := ts.status("db"); st.Held != 0 || st.Granted != 1 {
		t.Fatalf("held=%d granted=%d: the cancelled waiter got a permit", st.Held, st.Granted)
	}
}

func TestAcquireWaitTimeout(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	if _, err := c.Acquire(ctx(t), "db"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx(t), "db", client.WithWaitTimeout(time.Second))
		errc <- err
	}()
	waitFor(t, "a waiter", func() bool { return ts.status("db").Waiting == 1 })
	ts.clock.Advance(time.Second)
	mustIs(t, <-errc, apierr.ErrWaitTimeout)
}

func TestAcquireWaitsForServer(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	ts.stop()
	c := ts.dial()

	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx(t), "db")
		if err == nil {
			err = l.Release(ctx(t))
		}
		got <- err
	}()
	ts.start()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func TestFailover(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	// Nothing listens on port 1; the client moves on to the next address.
	c := dialTarget(t, "127.0.0.1:1, "+ts.addr)
	l, err := c.Acquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestCloseEndsLeases(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2})
	c, err := client.Dial(ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx(t), "db", client.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx(t), "db", client.WithWeight(2))
		waiting <- err
	}()
	waitFor(t, "a waiter", func() bool { return ts.status("db").Waiting == 1 })

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	mustIs(t, <-waiting, client.ErrClosed)
	err = waitDone(t, l)
	mustIs(t, err, client.ErrLeaseLost)
	mustIs(t, err, client.ErrClosed)
	mustIs(t, l.Release(ctx(t)), client.ErrClosed)
	_, err = c.Acquire(ctx(t), "db")
	mustIs(t, err, client.ErrClosed)
	mustIs(t, c.Take(ctx(t), "db", 1), client.ErrClosed)
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Close does not release: the server still holds the lease.
	if st := ts.status("db"); st.Held != 1 {
		t.Fatalf("held %d after Close; want 1 (leases are not released)", st.Held)
	}
}

func TestDialErrors(t *testing.T) {
	if _, err := client.Dial(""); err == nil {
		t.Fatal("Dial of an empty target succeeded")
	}
	if _, err := client.Dial(" , "); err == nil {
		t.Fatal("Dial of an empty list succeeded")
	}
	if _, err := client.Dial("a:1,dns:///b:2"); err == nil {
		t.Fatal("Dial of a list with a URL succeeded")
	}
	if _, err := (client.Dialer{SafetyMargin: -time.Second}).Dial("a:1"); err == nil {
		t.Fatal("Dial with a negative margin succeeded")
	}
	if _, err := (client.Dialer{ClientID: strings.Repeat("x", 257)}).Dial("a:1"); err == nil {
		t.Fatal("Dial with a long client id succeeded")
	}
	c, err := client.Dial("a:1")
	if err != nil {
		t.Fatal(err)
	}
	if c.ClientID() == "" {
		t.Fatal("no default client id")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestWaitingAcquireSurvivesReconnect(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	held, err := ts.srv.Engine().Acquire(ctx(t), limiter.AcquireRequest{Pool: "db", Weight: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := ts.dial()
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx(t), "db")
		if err == nil {
			err = l.Release(ctx(t))
		}
		got <- err
	}()
	waitFor(t, "a waiter", func() bool { return ts.status("db").Waiting == 1 })
	ts.stop()
	// The server cancels the waits of a broken stream ...
	waitFor(t, "the server to drop the waiter", func() bool { return ts.status("db").Waiting == 0 })
	ts.start()
	// ... and the client sends the acquire again on the new one.
	waitFor(t, "the acquire to wait again", func() bool { return ts.status("db").Waiting == 1 })
	if _, err := ts.srv.Engine().Release("db", held.FencingToken); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if st := ts.status("db"); st.Held != 0 || st.Granted != 2 {
		t.Fatalf("held=%d granted=%d; want 0 and 2 (no duplicate grant)", st.Held, st.Granted)
	}
}

func TestDoneWhenRenewRefused(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	l, err := c.Acquire(ctx(t), "db", client.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// Someone else releases it behind the holder's back; the next renew
	// (within TTL/3) is refused.
	if _, err := ts.srv.Engine().Release("db", l.FencingToken()); err != nil {
		t.Fatal(err)
	}
	err = waitDone(t, l)
	mustIs(t, err, client.ErrLeaseLost)
	mustIs(t, err, apierr.ErrLeaseNotFound)
	mustIs(t, l.Release(ctx(t)), apierr.ErrLeaseNotFound)
}

func TestLeaseContext(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2})
	c := ts.dial()

	l, err := c.Acquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	parent, cancelParent := context.WithCancel(context.Background())
	lctx, cancel := l.Context(parent)
	defer cancel()
	cancelParent()
	<-lctx.Done()
	if isDone(l) {
		t.Fatal("cancelling the context ended the lease")
	}
	lctx2, cancel2 := l.Context(context.Background())
	defer cancel2()
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	<-lctx2.Done()
	if context.Cause(lctx2) != client.ErrReleased {
		t.Fatalf("cause %v; want ErrReleased", context.Cause(lctx2))
	}
	// A context of an ended lease is done at once.
	lctx3, cancel3 := l.Context(context.Background())
	defer cancel3()
	if lctx3.Err() == nil {
		t.Fatal("context of a released lease is not done")
	}
}

// TestReleaseRetriedAfterNoAnswer walks the unconfirmed state: a Release
// that gets no answer ends the lease (Done, ErrReleased) but returns its
// error; a second Release, once the server is back, frees the permits and
// returns nil; a third is a no-op.
func TestReleaseRetriedAfterNoAnswer(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()
	l, err := c.Acquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	ts.stop()
	short, cancel := context.WithTimeout(ctx(t), 100*time.Millisecond)
	defer cancel()
	mustIs(t, l.Release(short), context.DeadlineExceeded)
	if !isDone(l) || l.Err() != client.ErrReleased {
		t.Fatalf("after an unanswered Release: done %v, Err %v; want done, ErrReleased", isDone(l), l.Err())
	}
	if held := ts.status("db").Leases; held != 1 {
		t.Fatalf("live leases %d before the retry; want 1", held)
	}
	ts.start()
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("retried Release: %v", err)
	}
	if held := ts.status("db").Leases; held != 0 {
		t.Fatalf("live leases %d after the retry; want 0", held)
	}
	if err := l.Release(ctx(t)); err != nil || l.Err() != client.ErrReleased {
		t.Fatalf("Release of a released lease: %v, Err %v; want nil, ErrReleased", err, l.Err())
	}
}
