package limiter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// ListWaiters lists a pool's queue from its head, in grant order: higher
// priority first, then arrival.
func TestListWaiters(t *testing.T) {
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
		testwait.For(t, "every acquire to join the queue", func() bool { _, n, _ := te.ListWaiters("db", 1); return n == queued })
	}
	queue("a", 0)
	te.clk.Advance(time.Second)
	queue("b", 0)
	queue("c", 5)
	queue("d", 0)

	got, n, err := te.ListWaiters("db", 3)
	if err != nil || n != 4 || len(got) != 3 {
		t.Fatalf("ListWaiters = %+v of %d, %v; want 3 of 4", got, n, err)
	}
	for i, want := range []string{"c", "a", "b"} {
		if got[i].ClientID != want || got[i].Position != int64(i+1) {
			t.Fatalf("waiter %d = %+v; want %s at position %d", i, got[i], want, i+1)
		}
	}
	if got[1].Waited != time.Second || got[2].Waited != 0 || got[0].Priority != 5 {
		t.Fatalf("waits and priority = %+v", got)
	}
	for _, limit := range []int{0, MaxListWaiters + 1} {
		if _, _, err := te.ListWaiters("db", limit); !errors.Is(err, apierr.ErrInvalidArgument) {
			t.Fatalf("limit %d: %v", limit, err)
		}
	}
	if _, _, err := te.ListWaiters("nope", 1); !errors.Is(err, apierr.ErrPoolNotFound) {
		t.Fatalf("unknown pool: %v", err)
	}
}
