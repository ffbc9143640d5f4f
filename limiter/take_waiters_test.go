package limiter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Takes waiting for tokens count toward the pool's max_waiters, with the
// acquires waiting there, and stop counting once they have their tokens.
func TestTakeWaitersCountTowardMaxWaiters(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 1, Burst: 1, MaxWaiters: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := te.Take(ctx, "api", 1, 0); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 3)
	// wait waits until n takes wait for their tokens. (Not the clock's
	// pending timers: a refused acquire arms the pool's rate timer too.)
	wait := func(n int64) {
		t.Helper()
		p, err := te.lookup("api")
		if err != nil {
			t.Fatal(err)
		}
		waiting := func() int64 {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.queue.takes
		}
		deadline := time.Now().Add(10 * time.Second)
		for waiting() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d takes waiting, want %d", waiting(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for range 2 {
		go func() {
			_, err := te.Take(ctx, "api", 1, time.Hour)
			results <- err
		}()
	}
	wait(2)
	short, stop := context.WithTimeout(ctx, 5*time.Second) // without the bound it would wait
	defer stop()
	if _, err := te.Take(short, "api", 1, time.Hour); !errors.Is(err, apierr.ErrQueueFull) {
		t.Fatalf("third waiting take: %v, want QUEUE_FULL", err)
	}
	if _, err := te.Acquire(short, AcquireRequest{Pool: "api", ClientID: "c", Weight: 1, TTL: time.Minute}); !errors.Is(err, apierr.ErrQueueFull) {
		t.Fatalf("acquire behind two waiting takes: %v, want QUEUE_FULL", err)
	}
	te.clk.Advance(2 * time.Second)
	for range 2 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		_, err := te.Take(ctx, "api", 1, time.Hour)
		results <- err
	}()
	wait(1)
	cancel()
	if err := <-results; !errors.Is(err, apierr.ErrCanceled) {
		t.Fatalf("cancelled take: %v", err)
	}
}
