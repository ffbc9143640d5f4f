package limiter

import (
	"context"
	"errors"
	"testing"
	"time"
)

// QueuePositions tells a client where its waiting acquires stand: higher
// priority first, then arrival order, and how many wait in all.
func TestQueuePositions(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := te.Acquire(ctx, AcquireRequest{Pool: "db", ClientID: "holder", Weight: 1}); err != nil {
		t.Fatal(err)
	}
	queued := int64(0)
	queue := func(client string, priority int32) {
		t.Helper()
		go func() {
			_, _ = te.Acquire(ctx, AcquireRequest{Pool: "db", ClientID: client, Weight: 1, Priority: priority})
		}()
		queued++
		waitUntil(t, func() bool { _, n, _ := te.QueuePositions("db", client); return n == queued })
	}
	queue("a", 0)
	te.clk.Advance(time.Second)
	queue("b", 0)
	queue("c", 5) // jumps ahead of both
	queue("a", 0)

	got, waiting, err := te.QueuePositions("db", "a")
	if err != nil || waiting != 4 || len(got) != 2 || got[0].Position != 2 || got[1].Position != 4 {
		t.Fatalf("a's positions = %+v of %d, %v; want 2 and 4 of 4", got, waiting, err)
	}
	if got[0].Waited != time.Second || got[1].Waited != 0 {
		t.Fatalf("a's waits = %v, %v; want 1s and 0", got[0].Waited, got[1].Waited)
	}
	if c := queuedOf(te, "c"); len(c) != 1 || c[0].Position != 1 || c[0].Priority != 5 {
		t.Fatalf("c = %+v; want position 1 at priority 5", c)
	}
	if none := queuedOf(te, "holder"); len(none) != 0 {
		t.Fatalf("the holder is not waiting, yet got %+v", none)
	}
	if _, _, err := te.QueuePositions("db", ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty client id: %v", err)
	}
	if _, _, err := te.QueuePositions("nope", "a"); !errors.Is(err, ErrPoolNotFound) {
		t.Fatalf("unknown pool: %v", err)
	}
}

func queuedOf(te *testEngine, client string) []QueuedAcquire {
	q, _, _ := te.QueuePositions("db", client)
	return q
}

// waitUntil polls cond, for conditions another goroutine makes true.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
