package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
)

// Groups (with progress, fail-fast and cancellation), Map, Wrap, the
// unreachable-server watch and the local fallback leave no goroutine
// behind once the Client is closed.
func TestHelpersLeaveNoGoroutines(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 20})
	c, err := client.Dialer{Unavailable: client.LocalLimitOnly(2)}.Dial(ts.addr)
	if err != nil {
		t.Fatal(err)
	}

	g := newGroup(t, c, ctx(t), "db", client.WithMaxInFlight(4), client.WithProgress(func(client.Progress) {}))
	for i := range 20 {
		g.Go(func(ctx context.Context) error {
			if i == 0 {
				return errors.New("stop")
			}
			<-ctx.Done()
			return ctx.Err()
		})
	}
	if err := g.Wait(); err == nil {
		t.Fatal("Wait returned nil")
	}
	if _, err := client.Map(ctx(t), c, "db", []int{1, 2, 3}, func(_ context.Context, n int) (int, error) { return n, nil }); err != nil {
		t.Fatal(err)
	}
	if err := client.Wrap(c, "db", func(context.Context) error { return nil })(ctx(t)); err != nil {
		t.Fatal(err)
	}
	ts.stop()
	if err := c.Do(ctx(t), "db", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("local-only run: %v", err)
	}
	if _, err := c.Acquire(ctx(t), "db"); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Acquire: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "no client goroutines", func() bool { return len(clientGoroutines()) == 0 })
	if g := clientGoroutines(); len(g) > 0 {
		t.Fatalf("goroutines left:\n%s", strings.Join(g, "\n\n"))
	}
}
