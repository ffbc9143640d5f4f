package limiter

import (
	"context"
	"errors"
	"testing"
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
	if _, err := dropped.Await(cancelled); !errors.Is(err, ErrCanceled) {
		t.Fatalf("Await with a done context: %v; want ErrCanceled", err)
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
	if _, _, err := te.StartAcquire(AcquireRequest{Pool: "nope", Weight: 1}); !errors.Is(err, ErrPoolNotFound) {
		t.Fatalf("StartAcquire of a missing pool: %v", err)
	}
}
