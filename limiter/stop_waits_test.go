package limiter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// StopWaits ends waiting acquires and takes at once with apierr.ErrShuttingDown,
// refuses new waits the same way, and lets grants that need no wait go on.
func TestStopWaits(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 2})
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 1, Burst: 1})
	ctx := context.Background()
	if _, err := te.Acquire(ctx, AcquireRequest{Pool: "db", Weight: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := te.Take(ctx, "api", 1, 0); err != nil {
		t.Fatal(err)
	}
	acquired, took := make(chan error, 1), make(chan error, 1)
	go func() { _, err := te.Acquire(ctx, AcquireRequest{Pool: "db", Weight: 1}); acquired <- err }()
	go func() { _, err := te.Take(ctx, "api", 1, time.Hour); took <- err }()
	testwait.For(t, "the acquire and the take to wait", func() bool {
		info, _ := te.GetPool("db")
		p, _ := te.lookup("api")
		p.mu.Lock()
		defer p.mu.Unlock()
		return info.Status.Waiting == 1 && p.queue.takes == 1
	})

	te.StopWaits()
	for name, ch := range map[string]chan error{"acquire": acquired, "take": took} {
		if err := <-ch; !errors.Is(err, apierr.ErrShuttingDown) {
			t.Fatalf("waiting %s after StopWaits: %v, want apierr.ErrShuttingDown", name, err)
		}
	}
	if _, err := te.Acquire(ctx, AcquireRequest{Pool: "db", Weight: 1}); !errors.Is(err, apierr.ErrShuttingDown) {
		t.Fatalf("an acquire that would wait: %v, want apierr.ErrShuttingDown", err)
	}
	if _, err := te.Take(ctx, "api", 1, time.Hour); !errors.Is(err, apierr.ErrShuttingDown) {
		t.Fatalf("a take that would wait: %v, want apierr.ErrShuttingDown", err)
	}
	te.mustCreate(t, PoolConfig{Name: "free", ConcurrencyLimit: 1})
	if _, err := te.Acquire(ctx, AcquireRequest{Pool: "free", Weight: 1}); err != nil {
		t.Fatalf("a grant that needs no wait: %v", err)
	}
}
