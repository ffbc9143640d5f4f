package limiter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestSuspendResume(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 2})
	a := te.mustAcquire(t, AcquireRequest{Pool: "db"})

	info, err := te.SuspendPool("db", false)
	if err != nil || !info.Status.Suspended || info.Status.Held != 1 {
		t.Fatalf("SuspendPool = %+v, %v", info.Status, err)
	}
	_, err = te.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrNoCapacity)
	if !strings.Contains(err.Error(), "suspended") {
		t.Fatalf("no-wait message %q does not say suspended", err)
	}
	w := te.startAcquire(t, AcquireRequest{Pool: "db"})
	// Held leases continue: renew and release work.
	if _, err := te.Renew("db", a.FencingToken, 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := te.Release("db", a.FencingToken); err != nil {
		t.Fatal(err)
	}
	if w.finished() {
		t.Fatal("a suspended pool granted a waiter")
	}
	info, err = te.ResumePool("db")
	if err != nil || info.Status.Suspended {
		t.Fatalf("ResumePool = %+v, %v", info.Status, err)
	}
	if _, err := w.result(t); err != nil {
		t.Fatalf("waiter after resume: %v", err)
	}
	// Idempotent both ways.
	if _, err := te.ResumePool("db"); err != nil {
		t.Fatal(err)
	}
	_, err = te.SuspendPool("nope", false)
	wantReason(t, err, apierr.ErrPoolNotFound)
	_, err = te.ResumePool("nope")
	wantReason(t, err, apierr.ErrPoolNotFound)
}

func TestSuspendRevokeHeld(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 3})
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2})
	b := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	info, err := te.SuspendPool("db", true)
	if err != nil || info.Status.Held != 0 || info.Status.Revoked != 2 || !info.Status.Suspended {
		t.Fatalf("SuspendPool(revoke) = %+v, %v", info.Status, err)
	}
	ended := te.endedLeases()
	if len(ended) != 2 || ended[0].Lease.FencingToken != a.FencingToken || ended[1].Lease.FencingToken != b.FencingToken ||
		ended[0].Reason != EndRevoked || !strings.Contains(ended[0].Message, "suspended") {
		t.Fatalf("ended = %+v", ended)
	}
	wantReason(t, errOf(te.Release("db", a.FencingToken)), apierr.ErrLeaseRevoked)
}

func TestDrainPool(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 3})
	// Nothing held: at once.
	if info, err := te.DrainPool(context.Background(), "db"); err != nil || info.Status.Held != 0 {
		t.Fatalf("empty drain = %+v, %v", info.Status, err)
	}
	a := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	b := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Second})
	if _, err := te.SuspendPool("db", false); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := te.DrainPool(context.Background(), "db"); done <- err }()
	_, _ = te.Release("db", a.FencingToken)
	select {
	case err := <-done:
		t.Fatalf("drain returned with a lease held: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	te.clk.Advance(time.Second) // b expires
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("drain did not return once nothing was held")
	}
	_ = b

	// A deadline: DEADLINE_EXCEEDED naming what is held.
	if _, err := te.ResumePool("db"); err != nil {
		t.Fatal(err)
	}
	te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := te.DrainPool(ctx, "db")
	wantReason(t, err, apierr.ErrWaitTimeout)
	if !strings.Contains(err.Error(), "holds 2 permits in 1 leases") || !strings.Contains(err.Error(), "not suspended") {
		t.Fatalf("message %q", err)
	}
	// Deleted while draining.
	p, _ := te.lookup("db")
	p.mu.Lock()
	p.susp.drained = nil // left by the timed-out drain above, which no one waits on now
	p.mu.Unlock()
	go func() { _, err := te.DrainPool(context.Background(), "db"); done <- err }()
	testwait.For(t, "the drain to wait for held to reach 0", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.susp.drained != nil
	})
	if err := te.DeletePool("db", true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, apierr.ErrPoolDeleted) {
			t.Fatalf("drain of a deleted pool: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("drain did not return when the pool was deleted")
	}
	_, err = te.DrainPool(context.Background(), "db")
	wantReason(t, err, apierr.ErrPoolNotFound)
}

// A suspension survives a restart, and so does a resume.
func TestSuspendSurvivesRestart(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 2})
	te.mustCreate(t, PoolConfig{Name: "other", ConcurrencyLimit: 2})
	if _, err := te.SuspendPool("db", false); err != nil {
		t.Fatal(err)
	}
	te2 := te.restart(t, m, time.Hour)
	if s := te2.status(t, "db"); !s.Suspended {
		t.Fatalf("after restart: %+v", s)
	}
	if s := te2.status(t, "other"); s.Suspended {
		t.Fatalf("other after restart: %+v", s)
	}
	// A storage failure changes nothing.
	m.setFail(func(_, _ SavedPool, _ bool) error { return errDiskFull })
	_, err := te2.ResumePool("db")
	wantReason(t, err, apierr.ErrStorageFailed)
	if s := te2.status(t, "db"); !s.Suspended {
		t.Fatal("a failed resume resumed")
	}
	m.setFail(nil)
	if _, err := te2.ResumePool("db"); err != nil {
		t.Fatal(err)
	}
	te3 := te2.restart(t, m, time.Hour)
	if s := te3.status(t, "db"); s.Suspended {
		t.Fatalf("resumed pool suspended after restart: %+v", s)
	}
	te3.mustAcquire(t, AcquireRequest{Pool: "db"})
}
