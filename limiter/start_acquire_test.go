package limiter

import (
	"context"
	"errors"
	"testing"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// TestStartAcquire: a grant that needs no wait comes back at once with no
// wait to await; one that must wait is queued in order, keeps its place,
// and is granted through Await; a wait given up frees its place.
func TestStartAcquire(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	first, w, err := te.StartAcquire(AcquireRequest{Pool: "db", Weight: 1})
	if err != nil || w != nil {
		t.Fatalf("first StartAcquire: wait %v, err %v; want a grant", w, err)
	}
	_, queued, err := te.StartAcquire(AcquireRequest{Pool: "db", Weight: 1, Description: "queued"})
	if err != nil || queued == nil {
		t.Fatalf("second StartAcquire: wait %v, err %v; want a wait", queued, err)
	}
	_, dropped, err := te.StartAcquire(AcquireRequest{Pool: "db", Weight: 1, Description: "dropped"})
	if err != nil || dropped == nil {
		t.Fatalf("third StartAcquire: wait %v, err %v; want a wait", dropped, err)
	}
	if s := te.status(t, "db"); s.Waiting != 2 || s.Held != 1 {
		t.Fatalf("status %+v; want 1 held, 2 waiting", s)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := dropped.Await(cancelled); !errors.Is(err, apierr.ErrCanceled) {
		t.Fatalf("Await with a done context: %v; want apierr.ErrCanceled", err)
	}
	if _, err := te.Release("db", first.FencingToken); err != nil {
		t.Fatal(err)
	}
	l, err := queued.Await(context.Background())
	if err != nil || l.Description != "queued" {
		t.Fatalf("Await: %+v, %v; want the queued grant", l, err)
	}
	if s := te.status(t, "db"); s.Waiting != 0 || s.Held != 1 {
		t.Fatalf("status %+v; want 1 held, none waiting", s)
	}
	if _, _, err := te.StartAcquire(AcquireRequest{Pool: "nope", Weight: 1}); !errors.Is(err, apierr.ErrPoolNotFound) {
		t.Fatalf("StartAcquire of a missing pool: %v", err)
	}
}

// A notified wait needs no goroutine: its callback gets the grant, or the
// error when it is cancelled; Notify on a wait that has ended calls back
// at once; a cancelled wait frees its place for the next.
func TestAcquireWaitNotify(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	holder := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	type outcome struct {
		l   Lease
		err error
	}
	start := func(desc string) (*Wait[Lease], chan outcome) {
		_, w, err := te.StartAcquire(AcquireRequest{Pool: "db", Weight: 1, Description: desc})
		if err != nil || w == nil {
			t.Fatalf("StartAcquire(%s): %v, %v; want a wait", desc, w, err)
		}
		ch := make(chan outcome, 1)
		w.Notify(func(l Lease, err error) { ch <- outcome{l, err} })
		return w, ch
	}
	cancelled, cancelledCh := start("cancelled")
	_, grantedCh := start("granted")
	cancelled.Cancel(context.Canceled)
	if o := <-cancelledCh; !errors.Is(o.err, apierr.ErrCanceled) {
		t.Fatalf("cancelled wait: %+v; want apierr.ErrCanceled", o)
	}
	cancelled.Cancel(context.Canceled) // ended already: nothing happens
	if _, err := te.Release("db", holder.FencingToken); err != nil {
		t.Fatal(err)
	}
	o := <-grantedCh
	if o.err != nil || o.l.Description != "granted" {
		t.Fatalf("granted wait: %+v", o)
	}
	if s := te.status(t, "db"); s.Held != 1 || s.Waiting != 0 || s.Canceled != 1 {
		t.Fatalf("status %+v; want 1 held, none waiting, 1 cancelled", s)
	}
	_, ended, err := te.StartAcquire(AcquireRequest{Pool: "db", Weight: 1})
	if err != nil || ended == nil {
		t.Fatalf("StartAcquire: %v, %v; want a wait", ended, err)
	}
	ended.Cancel(context.Canceled)
	late := make(chan outcome, 1)
	ended.Notify(func(l Lease, err error) { late <- outcome{l, err} })
	if o := <-late; !errors.Is(o.err, apierr.ErrCanceled) {
		t.Fatalf("Notify after the end: %+v", o)
	}
}
